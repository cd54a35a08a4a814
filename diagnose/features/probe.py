"""Probe features: what swiftdoc's in-trainer probe measured (`run.probe`, read by `diagnose.parse.probe`).

Every value is None when the run has no probe files.  The numbers come from `features.probe_stats.summary`
(the one home of the computations); these features expose them to the rules (DL017, DL018, NC011 and the
`probe_max_wait` guard of the heuristic data-loading rules).
"""
from __future__ import annotations

from typing import Any

from diagnose.features.probe_stats import summary
from diagnose.features.registry import Ctx, feature

FAMILY = "probe"


def _s(ctx: Ctx) -> dict[str, Any] | None:
    p = getattr(ctx.run, "probe", None)
    if p is None or not p.ranks:
        return None
    return summary(p)


def _get(ctx: Ctx, *path: str) -> Any:
    s = _s(ctx)
    for k in path:
        if not isinstance(s, dict):
            return None
        s = s.get(k)
    return s


@feature("probe_ranks", "count", "Ranks whose probe file was read (swiftdoc probe).", FAMILY)
def _ranks(ctx: Ctx):
    s = _s(ctx)
    return s["ranks_read"] if s else None


@feature("probe_steps", "count", "Step records the probe statistics use, all ranks together (warm-up, save and "
         "evaluation steps dropped).", FAMILY)
def _steps(ctx: Ctx):
    return _get(ctx, "steps_used")


@feature("probe_warmup_steps", "count", "Warm-up steps dropped from each rank's probe records.", FAMILY)
def _warm(ctx: Ctx):
    return _get(ctx, "warmup_steps")


@feature("probe_data_wait_frac", "fraction", "Measured share of a step spent waiting for the next batch: median "
         "over steps and ranks of the probe's data wait ÷ step time.", FAMILY)
def _dwf(ctx: Ctx):
    return _get(ctx, "data_wait_frac")


@feature("probe_data_wait_share", "fraction", "Measured share of training time spent waiting for batches: median "
         "over ranks of Σ data wait ÷ Σ step time (long waits on a few steps count in full).", FAMILY)
def _dws(ctx: Ctx):
    return _get(ctx, "data_wait_share")


@feature("probe_data_wait_ranks", "text", "Each rank's measured data-wait share of its step time.", FAMILY)
def _dwr(ctx: Ctx):
    s = _s(ctx)
    if not s:
        return None
    parts = [f"rank {r['rank']} {r['data_wait_share']:.0%}" for r in s["ranks"] if r["data_wait_share"] is not None]
    return ", ".join(parts[:8]) + (f" (+{len(parts) - 8} ranks)" if len(parts) > 8 else "") if parts else None


@feature("probe_step_time_s", "s", "Median measured step time over the ranks' medians (probe).", FAMILY)
def _st(ctx: Ctx):
    s = _s(ctx)
    vals = sorted(v for v in (s or {}).get("step_time_s", {}).values() if v is not None)
    return vals[len(vals) // 2] if vals else None


@feature("probe_straggler_rank", "rank", "The rank the others wait for, from the probe's per-rank step records.",
         FAMILY)
def _sr(ctx: Ctx):
    return _get(ctx, "straggler", "rank")


@feature("probe_straggler_slowdown", "ratio", "How much longer the straggler rank is busy per step than the other "
         "ranks (probe).", FAMILY)
def _ss(ctx: Ctx):
    return _get(ctx, "straggler", "slowdown")


@feature("probe_straggler_cause", "text", "Where the straggler rank's extra time goes: data_wait, compute or "
         "collective (probe).", FAMILY)
def _sc(ctx: Ctx):
    return _get(ctx, "straggler", "cause")


@feature("probe_straggler_evidence", "text", "The straggler rank's step-time split against the other ranks'.",
         FAMILY)
def _se(ctx: Ctx):
    return _get(ctx, "straggler", "evidence")


@feature("probe_stall_pattern", "text", "Shape of the measured step times: bursty (a few steps much longer), "
         "steady (every step waits for data), slowing, or none.", FAMILY)
def _sp(ctx: Ctx):
    return _get(ctx, "stalls", "pattern")


@feature("probe_stall_share", "fraction", "Share of training time the bursty stall steps add over the median step.",
         FAMILY)
def _ssh(ctx: Ctx):
    return _get(ctx, "stalls", "share") if _get(ctx, "stalls", "pattern") == "bursty" else None


@feature("probe_stall_cause", "text", "What the stall steps' extra time is: data_wait or compute.", FAMILY)
def _scause(ctx: Ctx):
    return _get(ctx, "stalls", "cause")


@feature("probe_stall_evidence", "text", "The stall steps: how many, how long, how often, and what grew.", FAMILY)
def _sev(ctx: Ctx):
    return _get(ctx, "stalls", "evidence")
