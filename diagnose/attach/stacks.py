"""Where a hung job's ranks wait: every local rank's Python stack (py-spy), grouped, and the odd one out.

Contract:
- `dump_stacks(pids, timeout=15, still_ours=None) -> {pid: {"frames": [...], "error": str | None}}` runs
  `py-spy dump --pid P --json` once per process for which `still_ours(pid)` holds right before its dump
  (the target's start-time check: a PID reused by another process is never dumped) (read-only: py-spy reads the process's memory;
  `--nonblocking` is not used, so the pause is one dump's, milliseconds).  `frames` is the main
  thread's stack, innermost first, as {name, file, line}.  Without py-spy every entry carries the
  install hint as its error.
- `where(frames) -> str`: where a rank waits: its innermost frame in code that is not the standard
  library's (`function (file:line)`), e.g. `all_reduce (distributed_c10d.py:2806)`.
- `localise(dumps, ranks=None) -> dict`: {"groups": [{"where", "pids", "ranks"}], biggest first,
  "odd": {"pid", "rank", "where", "stack"} | None}.  The odd one out is the single rank whose place
  differs from the place all the others share (the rank that is not in the collective the others
  wait in); with two places and one rank in each (a two-rank job), the one outside a collective
  (no collective frame: distributed_c10d.py, deepspeed.comm, DDP's buffer broadcast) while the other is in one.  Otherwise there is none.
- `stragglers_from_stacks(rounds, ranks=None, min_rounds=6) -> list[dict]`: the straggler of a job that
  still moves, from several rounds of dumps taken while it trains.  In data-parallel training the fast ranks
  wait in a collective for the slow one: a rank found outside any collective in most rounds while the
  others are inside one in most rounds holds the job back.  Entry: {rank, node, gpu, slowdown, evidence,
  where, rounds}; `slowdown` = the share of time it works ÷ the share the others work (the others'
  busy share is taken as at least one sample's, 1/rounds, so a handful of rounds never gives infinity: then
  the evidence says the figure is a lower bound).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from typing import Any

_STDLIB = (os.path.dirname(os.__file__), "<frozen", "threading.py", "selectors.py", "queue.py")


def _py_spy() -> str | None:
    exe = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return exe if os.path.exists(exe) else shutil.which("py-spy")


def dump_stacks(pids: list[int], timeout: float = 15.0,
                still_ours: Callable[[int], bool] | None = None) -> dict[int, dict[str, Any]]:
    exe = _py_spy()
    out: dict[int, dict[str, Any]] = {}
    for pid in pids:
        if exe is None:
            out[pid] = {"frames": [], "error": "py-spy is not installed (pip install py-spy)"}
            continue
        if still_ours is not None and not still_ours(pid):  # checked right before each dump: a recycled PID
            out[pid] = {"frames": [], "error": f"PID {pid} is no longer the job's process (ended, or its PID reused): "
                                               "not dumped"}
            continue
        try:
            p = subprocess.run([exe, "dump", "--pid", str(pid), "--json"], capture_output=True, text=True,
                               timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as e:
            out[pid] = {"frames": [], "error": f"py-spy failed: {e}"}
            continue
        if p.returncode != 0:
            out[pid] = {"frames": [], "error": (p.stderr.strip().splitlines() or ["py-spy failed"])[-1]}
            continue
        try:
            threads = json.loads(p.stdout)
        except ValueError:
            out[pid] = {"frames": [], "error": "py-spy printed no JSON"}
            continue
        main = next((t for t in threads if t.get("thread_name") == "MainThread"), threads[0] if threads else {})
        frames = [{"name": f.get("name"), "file": f.get("filename"), "line": f.get("line")}
                  for f in main.get("frames") or []]
        out[pid] = {"frames": frames, "error": None}
    return out


def where(frames: list[dict[str, Any]]) -> str:
    for f in frames:
        file = f.get("file") or ""
        if not any(s and s in file for s in _STDLIB):
            return f"{f.get('name')} ({os.path.basename(file)}:{f.get('line')})"
    if frames:
        f = frames[0]
        return f"{f.get('name')} ({os.path.basename(f.get('file') or '')}:{f.get('line')})"
    return "unknown"


def localise(dumps: dict[int, dict[str, Any]], ranks: dict[int, int] | None = None) -> dict[str, Any]:
    ranks = ranks or {}
    groups: dict[str, list[int]] = {}
    for pid, d in dumps.items():
        if d.get("error"):
            continue
        groups.setdefault(where(d["frames"]), []).append(pid)
    ordered = sorted(groups.items(), key=lambda kv: -len(kv[1]))
    out: dict[str, Any] = {"groups": [{"where": w, "pids": sorted(p), "ranks": sorted(ranks[x] for x in p if x in ranks)}
                                      for w, p in ordered], "odd": None}
    total = sum(len(p) for p in groups.values())
    odd = None
    if total >= 3 and len(ordered) == 2 and len(ordered[1][1]) == 1:
        odd, others = ordered[1], ordered[0]
    elif total == 2 and len(ordered) == 2:
        inside = [_in_collective(dumps[p[0]]["frames"]) for _w, p in ordered]
        if inside == [True, False]:
            odd, others = ordered[1], ordered[0]
        elif inside == [False, True]:
            odd, others = ordered[0], ordered[1]
    if odd is not None:
        pid = odd[1][0]
        out["odd"] = {"pid": pid, "rank": ranks.get(pid), "where": odd[0],
                      "others_wait_in": others[0], "stack": dumps[pid]["frames"]}
    return out


# DDP's own collectives in its forward (buffer broadcast); the gradient all-reduce runs in C++ under backward
_DDP_SYNC = {"_distributed_broadcast_coalesced", "_default_broadcast_coalesced", "_sync_module_buffers", "_sync_buffers",
             "_sync_params_and_buffers"}


def _collective_frame(f: dict[str, Any]) -> bool:
    file = (f.get("file") or "").replace("\\", "/")
    return (file.endswith("distributed_c10d.py") or "/deepspeed/comm/" in file
            or (file.endswith("nn/parallel/distributed.py") and (f.get("name") or "").rsplit(".", 1)[-1] in _DDP_SYNC))


def _in_collective(frames: list[dict[str, Any]]) -> bool:
    return any(_collective_frame(f) for f in frames)


def _collective_of(frames: list[dict[str, Any]]) -> str | None:
    """The collective a stack waits in: its outermost collective frame (all_gather_object, _sync_buffers, …)."""
    hits = [f for f in frames if _collective_frame(f)]
    return f"{hits[-1].get('name')} ({os.path.basename(hits[-1].get('file') or '')})" if hits else None


def stragglers_from_stacks(rounds: list[dict[int, dict[str, Any]]], ranks: dict[int, int] | None = None,
                           min_rounds: int = 6, gap: float = 0.4) -> list[dict[str, Any]]:
    ranks = ranks or {}
    seen: dict[int, list[list[dict[str, Any]]]] = {}
    for r in rounds:
        for pid, d in r.items():
            if not d.get("error") and d.get("frames"):
                seen.setdefault(pid, []).append(d["frames"])
    seen = {pid: fr for pid, fr in seen.items() if len(fr) >= min_rounds}
    if len(seen) < 2:
        return []
    inside = {pid: sum(_in_collective(f) for f in fr) / len(fr) for pid, fr in seen.items()}
    slow = min(inside, key=lambda p: inside[p])
    others = sorted(v for p, v in inside.items() if p != slow)
    w_o = others[len(others) // 2]
    w_s = inside[slow]
    if w_o < 0.5 or w_o - w_s < gap:
        return []
    n = len(seen[slow])
    busy_o = max(1.0 - w_o, 1.0 / n)
    places: dict[str, int] = {}
    for f in seen[slow]:
        if not _in_collective(f):
            places[where(f)] = places.get(where(f), 0) + 1
    top = max(places, key=lambda k: places[k]) if places else "unknown"
    colls: dict[str, int] = {}
    for p, fr in seen.items():
        if p != slow:
            for f in fr:
                if (c := _collective_of(f)):
                    colls[c] = colls.get(c, 0) + 1
    coll = max(colls, key=lambda k: colls[k]) if colls else "a collective"
    who = f"rank {ranks[slow]}" if slow in ranks else f"pid {slow}"
    rest = "the other ranks" if len(seen) > 2 else "the other rank"
    bound = busy_o > 1.0 - w_o  # the others were (almost) never caught working: the ratio is a lower bound
    evidence = (f"{rest} waited in a collective (mostly {coll}) in {w_o:.0%} of {n} stack samples; {who} was outside "
                f"any collective in {1 - w_s:.0%}, mostly in {top} ({places.get(top, 0)} of {n})"
                + "; the slowdown is a lower bound (waits inside backward's gradient all-reduce do not show in Python "
                "stacks" + ("; nor in so few samples" if bound else "") + ")")
    return [{"rank": ranks.get(slow), "pid": slow, "node": None, "gpu": None,
             "slowdown": round((1.0 - w_s) / busy_o, 2), "evidence": evidence, "where": top, "rounds": n}]


__all__ = ["dump_stacks", "where", "localise", "stragglers_from_stacks"]
