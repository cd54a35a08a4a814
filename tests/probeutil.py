"""Synthetic swiftdoc probe files for the tests: the format of diagnose/probe_plugin/swiftdoc_probe.py.

`header(rank, world, **kw)` and `step(n, **fields)` build records; `write_rank(folder, rank, records)` writes one
`rank<N>.jsonl`; `lockstep(...)` builds the per-rank step records of a synchronous data-parallel job in which one
rank spends `extra_s` more per step in `where` (host or data) and the others wait for it in backward.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

T0 = 1_790_000_000.0


def header(rank: int, world: int, *, node: str = "node0", start: float = T0, port: str = "29500", fmt: int = 1,
           loader: str = "loader", device: str = "cpu", **kw: Any) -> dict[str, Any]:
    h = {"kind": "header", "swiftdoc_probe": "1.0", "format": fmt, "rank": rank, "local_rank": rank, "world_size": world,
         "node": node, "node_rank": "0", "pid": 1000 + rank, "start_time": start, "device": device, "loader": loader,
         "launch": {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "TORCHELASTIC_RUN_ID": "none",
                    "TORCHELASTIC_RESTART_COUNT": "0"},
         "output_dir": "/runs/out/v0-20261124-120000", "grad_accum": 1, "micro_batch": 2,
         "versions": {"python": "3.11.7", "torch": "2.13.0", "transformers": "5.19.0", "ms-swift": "4.6.0"}}
    h.update(kw)
    return h


def step(n: int, wall: float, *, data: float = 0.01, host: float = 0.005, sync: float = 0.0, fwd: float = 0.05,
         bwd: float | None = None, opt: float = 0.005, tokens: int = 512, samples: int = 2, **kw: Any) -> dict[str, Any]:
    if bwd is None:
        bwd = max(wall - data - host - sync - fwd - opt, 0.0)
    r = {"kind": "step", "step": n, "mono": round(n * wall, 6), "wall_s": wall, "data_s": data, "host_s": host,
         "sync_s": sync, "fwd_s": fwd, "bwd_s": bwd, "opt_s": opt, "micro": 1, "samples": samples, "tokens": tokens,
         "rss_gib": 1.5}
    r.update(kw)
    return r


def end() -> dict[str, Any]:
    return {"kind": "end", "reason": "train_end", "mono": 99.0, "enabled": True}


def write_rank(folder: Path, rank: int, records: list[dict[str, Any]], *, append: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / f"rank{rank}.jsonl"
    with p.open("a" if append else "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    return p


def lockstep(folder: Path, world: int = 2, steps: int = 20, *, base: float = 0.2, slow_rank: int | None = 1,
             extra_s: float = 0.3, where: str = "host") -> None:
    """A synchronous job: every rank's step takes base (+ extra_s when one rank is slow); the slow rank spends the
    extra in `where` (host, data or fwd), the others wait for it in backward (DDP's all-reduce)."""
    wall = base + (extra_s if slow_rank is not None else 0.0)
    for r in range(world):
        recs = [header(r, world)]
        for n in range(1, steps + 1):
            kw = dict(data=0.01, host=0.005, fwd=0.05, opt=0.005)
            if r == slow_rank:
                kw[where] = kw[where] + extra_s
            recs.append(step(n, wall, **kw))
        recs.append(end())
        write_rank(folder, r, recs)
