"""What the probe's per-rank step records say: data wait, step times, the straggler rank, stalls.

Contract: `summary(probe) -> dict` (cached on `probe.cache`; floats kept to 4 significant digits) and
`time_split(probe)` (mean seconds per step of data wait, compute and the rest): the one home of every number
derived from probe files.  The summary is shaped as analyze's JSON `probe` section (`diagnose.outputs.ProbeOut`):
- warm-up: the first WARMUP steps of each rank (1 when it has fewer than 6) and the steps in whose interval a
  save or an evaluation ran are dropped from every statistic;
- a step's data wait: `data_s`, plus, with ms-swift's streaming dispatcher, `dispatch_s` on ranks other than 0
  (they wait for rank 0's batches); on rank 0 `dispatch_s` is a wait for the peers (a collective);
- job-level `data_wait_frac`: the median over steps and ranks of (data wait ÷ step time); `data_wait_share`: the
  median over ranks of Σ data wait ÷ Σ step time (bursts of waiting count at their full weight);
- straggler (two ranks or more, three common steps or more): ranks are matched by step number.  In synchronous
  data-parallel training every rank's step takes the same wall time, so a rank's *busy* time is its step time
  minus what it waited for the others: DDP's buffer sync before its forward, the part of its backward beyond
  the fastest rank's (DDP's all-reduce waits there) and, on rank 0 of the dispatcher, its scatter time.  The rank busiest by SLOWDOWN or more is
  the straggler; its extra time is split into data wait and compute.  When the ranks' step times differ (no
  lock-step), step times are compared and the extra is split into data wait, compute and collective time;
- stalls: steps at least STALL_X × the median step (and 50 ms longer) are stalls; a minority of them holding
  STALL_SHARE of the time or more is `bursty` (with a period when they recur every k steps), else a median data
  wait of STEADY_FRAC or more is `steady`, else step times rising by SLOWING_X from the first third to the last
  is `slowing`, else `none`.
"""
from __future__ import annotations

from typing import Any

import numpy as np

WARMUP = 2
RECENT = 10  # steps of the "recent" numbers attach shows live
SLOWDOWN = 1.15
STALL_X = 3.0
STALL_SHARE = 0.10
STALL_MAX_FRAC = 0.4
STEADY_FRAC = 0.3
SLOWING_X = 1.3


def _z(a: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(a), a, 0.0)


def _med(a: np.ndarray) -> float | None:
    a = a[np.isfinite(a)]
    return float(np.median(a)) if len(a) else None


def warmup_of(n: int) -> int:
    return WARMUP if n >= 6 else (1 if n >= 2 else 0)


def waits(r: Any) -> tuple[np.ndarray, np.ndarray]:
    """(data wait, collective wait outside backward: DDP's buffer sync before the forward, rank 0's dispatcher
    scatter) per step of one rank."""
    c = r.cols
    disp = _z(c["dispatch_s"])
    data = _z(c["data_s"])
    sync = _z(c["sync_s"])
    if r.loader == "dispatcher" and r.rank != 0:
        return data + disp, sync
    return data, sync + (disp if r.loader == "dispatcher" else 0.0)


def kept(r: Any) -> np.ndarray:
    n = r.steps
    wall = r.cols["wall_s"]
    keep = (np.arange(n) >= warmup_of(n)) & ~r.marked & np.isfinite(wall) & (wall > 0)
    return keep


def _rank_row(r: Any) -> dict[str, Any]:
    c = r.cols
    keep = kept(r)
    seen = keep & np.isfinite(c["data_s"])  # a step whose batches the probe did not see has no data wait
    wall = c["wall_s"][keep]
    dwall = c["wall_s"][seen]
    data = waits(r)[0][seen]
    total = float(dwall.sum()) if len(dwall) else 0.0
    tok, smp = c["tokens"][keep], c["samples"][keep]
    tk = np.isfinite(tok)
    sk = np.isfinite(smp)
    mem = c["peak_gib"] if r.cuda else c["rss_gib"]
    mem = mem[np.isfinite(mem)]
    compute = _z(c["host_s"]) + _z(c["sync_s"]) + _z(c["fwd_s"]) + _z(c["bwd_s"]) + _z(c["opt_s"])
    recent = np.flatnonzero(keep)[-RECENT:]
    rw = c["wall_s"][recent]
    steps = c["step"][np.isfinite(c["step"])]
    return {
        "rank": r.rank, "node": r.node, "steps": r.steps, "steps_used": int(keep.sum()),
        "last_step": int(steps[-1]) if len(steps) else None,
        "recent_step_time_s": _med(rw),
        "recent_data_wait_share": float(waits(r)[0][recent].sum() / rw.sum()) if len(rw) and rw.sum() > 0 else None,
        "data_wait_frac": _med(np.clip(data / dwall, 0, 1)) if total > 0 else None,
        "data_wait_share": float(data.sum() / total) if total > 0 else None,
        "step_time_s_median": _med(wall), "step_time_s_p90": float(np.percentile(wall, 90)) if len(wall) else None,
        "compute_s_median": _med(compute[keep]) if len(wall) else None,
        "tokens_per_s": float(tok[tk].sum() / wall[tk].sum()) if tk.any() and wall[tk].sum() > 0 else None,
        "samples_per_s": float(smp[sk].sum() / wall[sk].sum()) if sk.any() and wall[sk].sum() > 0 else None,
        "mem_peak_gib": float(mem.max()) if len(mem) else None, "mem_kind": "cuda" if r.cuda else "host",
        "ended": r.ended, "file": r.file,
    }


# ----------------------------------------------------------------------------- straggler


def _aligned(ranks: list[Any]) -> tuple[list[int], dict[str, np.ndarray]] | None:
    """Matrices [rank, step] over the kept steps every rank recorded (matched by step number)."""
    maps = []
    for r in ranks:
        keep = kept(r)
        steps = r.cols["step"]
        maps.append({int(s): i for i, s in enumerate(steps) if keep[i] and np.isfinite(s)})
    common = sorted(set.intersection(*(set(m) for m in maps))) if maps else []
    if len(common) < 3:
        return None
    out: dict[str, list[np.ndarray]] = {k: [] for k in ("wall", "data", "coll", "bwd", "other")}
    for r, m in zip(ranks, maps):
        idx = np.array([m[s] for s in common])
        c = r.cols
        data, coll = waits(r)
        out["wall"].append(c["wall_s"][idx])
        out["data"].append(data[idx])
        out["coll"].append(coll[idx])
        out["bwd"].append(_z(c["bwd_s"][idx]))
        out["other"].append(_z(c["host_s"][idx]) + _z(c["fwd_s"][idx]) + _z(c["opt_s"][idx]))
    return common, {k: np.vstack(v) for k, v in out.items()}


def _others(a: np.ndarray, i: int) -> np.ndarray:
    return np.median(np.delete(a, i, axis=0), axis=0)


def straggler(ranks: list[Any]) -> dict[str, Any] | None:
    if len(ranks) < 2:
        return None
    al = _aligned(ranks)
    if al is None:
        return None
    _, m = al
    wall = m["wall"]
    spread = float(np.median((wall.max(axis=0) - wall.min(axis=0)) / np.maximum(np.median(wall, axis=0), 1e-9)))
    lockstep = spread < 0.1
    bwd_wait = m["bwd"] - m["bwd"].min(axis=0)
    wait = bwd_wait + m["coll"]
    busy = wall - wait if lockstep else wall
    per_rank = np.median(busy, axis=1)
    i = int(np.argmax(per_rank))
    others = float(np.median(np.delete(per_rank, i)))
    if others <= 0:
        return None
    slowdown = float(per_rank[i] / others)
    if slowdown < SLOWDOWN:
        return None
    r = ranks[i]
    extra_data = float(np.median(m["data"][i] - _others(m["data"], i)))
    own = m["other"] + m["bwd"] - bwd_wait  # compute: host, forward, optimizer, the backward without waiting
    extra_compute = float(np.median(own[i] - _others(own, i)))
    extra_coll = float(np.median(wait[i] - _others(wait, i))) if not lockstep else 0.0
    parts = {"data_wait": extra_data, "compute": extra_compute, "collective": extra_coll}
    cause = max(parts, key=lambda k: parts[k])
    words = {"data_wait": "waiting for its batches", "compute": "compute and host work (before, in and after the "
             "forward)", "collective": "waiting in collectives"}[cause]
    node = f" ({r.node})" if r.node else ""
    if lockstep:
        others_wait = float(np.median(np.delete(wait, i, axis=0)))
        ev = (f"rank {r.rank}{node} is busy {per_rank[i]:.3g} s per step against {others:.3g} s on the other ranks "
              f"({slowdown:.2f}x): its extra {per_rank[i] - others:.3g} s is {words} (data wait {extra_data:+.3g} s, "
              f"compute {extra_compute:+.3g} s against the others); the others wait {others_wait:.3g} s per step "
              "for it in collectives (DDP's buffer sync before the forward, the all-reduce at the end of backward)")
    else:
        ev = (f"rank {r.rank}{node}'s steps take {per_rank[i]:.3g} s (median) against {others:.3g} s on the other "
              f"ranks ({slowdown:.2f}x); the extra is {words} (data wait {extra_data:+.3g} s, compute "
              f"{extra_compute:+.3g} s, collectives {extra_coll:+.3g} s)")
    return {"rank": r.rank, "node": r.node, "slowdown": round(slowdown, 3), "cause": cause, "evidence": ev,
            "lockstep": lockstep}


# ----------------------------------------------------------------------------- stalls


def _stalls_of(r: Any) -> dict[str, Any] | None:
    keep = kept(r)
    wall = r.cols["wall_s"][keep]
    if len(wall) < 4:
        return None
    steps = r.cols["step"][keep]
    data = waits(r)[0][keep]
    med = float(np.median(wall))
    stall = wall >= max(STALL_X * med, med + 0.05)
    k, n = int(stall.sum()), len(wall)
    share = float((wall[stall] - med).sum() / wall.sum()) if k else 0.0
    frac = float(np.median(np.clip(data / wall, 0, 1)))
    out: dict[str, Any] = {"pattern": "none", "steps": k, "share": round(share, 4), "every": None, "cause": None,
                           "evidence": None, "rank": r.rank}
    if k and k <= STALL_MAX_FRAC * n and share >= STALL_SHARE:
        base = float(np.median(data[~stall])) if (~stall).any() else 0.0
        extra = wall[stall] - med
        from_data = float(np.median(np.clip((data[stall] - base) / np.maximum(extra, 1e-9), 0, 1)))
        gaps = np.diff(steps[stall])
        every = int(gaps[0]) if len(gaps) >= 2 and np.all(gaps == gaps[0]) and gaps[0] > 1 else None
        cause = "data_wait" if from_data >= 0.5 else "compute"
        what = "waiting for the next batch" if cause == "data_wait" else "outside the data wait (compute or host)"
        out.update(pattern="bursty", every=every, cause=cause, evidence=(
            f"{k} of {n} steps on rank {r.rank} take {STALL_X:g}x the median step or more ({float(np.median(wall[stall])):.3g} s "
            f"against {med:.3g} s){f', every {every} steps' if every else ''}, and hold {share:.0%} of the time; "
            f"{from_data:.0%} of their extra time is {what}"))
    elif frac >= STEADY_FRAC:
        out.update(pattern="steady", cause="data_wait", evidence=(
            f"every step on rank {r.rank} waits for data: {frac:.0%} of the median step ({med:.3g} s)"))
    else:
        third = max(n // 3, 1)
        first, last = float(np.median(wall[:third])), float(np.median(wall[-third:]))
        if n >= 9 and first > 0 and last / first >= SLOWING_X:
            out.update(pattern="slowing", cause=None, evidence=(
                f"steps on rank {r.rank} slow down from {first:.3g} s to {last:.3g} s (median of the first and last "
                "third)"))
    return out


def stalls(ranks: list[Any]) -> dict[str, Any] | None:
    rows = [s for s in (_stalls_of(r) for r in ranks) if s is not None]
    if not rows:
        return None
    order = {"bursty": 3, "steady": 2, "slowing": 1, "none": 0}
    return max(rows, key=lambda s: (order[s["pattern"]], s["share"], -s["rank"]))


# ----------------------------------------------------------------------------- where a step's time goes


def time_split(probe: Any) -> dict[str, float | None] | None:
    """Mean seconds per step (median over ranks of each rank's mean over its kept steps, so the parts add up and a
    few long waits count in full): `step_s`, `data_s` (data wait), `compute_s` (host, forward with DDP's buffer
    sync, backward with its all-reduce, optimizer), `other_s` (the rest: logging, the trainer's bookkeeping, waits outside backward), and
    `data_frac` = data_s / step_s."""
    per: dict[str, list[float]] = {"step_s": [], "data_s": [], "compute_s": [], "other_s": []}
    for r in probe.ranks:
        keep = kept(r)
        if not keep.any():
            continue
        c = r.cols
        wall = c["wall_s"][keep]
        data = waits(r)[0][keep]
        comp = (_z(c["host_s"]) + _z(c["sync_s"]) + _z(c["fwd_s"]) + _z(c["bwd_s"]) + _z(c["opt_s"]))[keep]
        per["step_s"].append(float(np.mean(wall)))
        per["data_s"].append(float(np.mean(data)))
        per["compute_s"].append(float(np.mean(comp)))
        per["other_s"].append(float(np.mean(np.maximum(wall - data - comp, 0.0))))
    if not per["step_s"]:
        return None
    out: dict[str, float | None] = {k: round(float(np.median(v)), 6) for k, v in per.items()}
    out["data_frac"] = round(out["data_s"] / out["step_s"], 4) if out["step_s"] else None
    return out


def _rounded(v: Any) -> Any:
    if isinstance(v, float):
        return float(f"{v:.4g}")
    if isinstance(v, dict):
        return {k: _rounded(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_rounded(x) for x in v]
    return v


# ----------------------------------------------------------------------------- the summary


def summary_of(run: Any) -> dict[str, Any] | None:
    """The probe section of a run: from its probe files, or the one a saved record carries (`--load`); None
    when the run has neither."""
    if getattr(run, "probe", None) is not None:
        return summary(run.probe)
    return getattr(run, "probe_summary", None)


def summary(probe: Any) -> dict[str, Any]:
    if "summary" in probe.cache:
        return probe.cache["summary"]
    ranks = probe.ranks
    rows = [_rank_row(r) for r in ranks]
    fracs = []
    for r in ranks:
        seen = kept(r) & np.isfinite(r.cols["data_s"])
        wall = r.cols["wall_s"][seen]
        if len(wall):
            fracs.append(np.clip(waits(r)[0][seen] / wall, 0, 1))
    allf = np.concatenate(fracs) if fracs else np.array([])
    shares = np.array([x["data_wait_share"] for x in rows if x["data_wait_share"] is not None])
    out = {
        "folder": probe.folder, "format": ranks[0].header.get("format") if ranks else None,
        "world_size": probe.world_size, "ranks_read": len(ranks),
        "warmup_steps": max((warmup_of(r.steps) for r in ranks), default=0),
        "steps_used": int(sum(x["steps_used"] for x in rows)),
        "data_wait_frac": float(np.median(allf)) if len(allf) else None,
        "data_wait_share": float(np.median(shares)) if len(shares) else None,
        "step_time_s": {str(x["rank"]): x["step_time_s_median"] for x in rows if x["step_time_s_median"] is not None},
        "ranks": rows, "straggler": straggler(ranks), "stalls": stalls(ranks), "notes": list(probe.notes),
    }
    out = _rounded(out)
    probe.cache["summary"] = out
    return out


__all__ = ["summary", "straggler", "stalls", "time_split", "kept", "waits", "warmup_of"]
