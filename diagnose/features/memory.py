"""Memory features: ms-swift's memory(GiB) against the card's capacity.

memory(GiB) is max *reserved* memory on rank 0 (reference 1.4): a value near the
capacity is normal allocator caching, not proof of pressure.  Capacity comes
from NVML samples, else a CUDA OOM message's "total capacity", else --gpu.
"""
from __future__ import annotations

import numpy as np

from diagnose.features.gpu import GPUS
from diagnose.features.registry import Ctx, feature

FAMILY = "memory"


@feature("memory_peak_gib", "GiB", "Largest memory(GiB) logged (max reserved on rank 0), or the run summary's memory.", FAMILY)
def _peak(ctx: Ctx):
    t = ctx.run.steps
    if len(t) and t.has("memory_gib"):
        m = t["memory_gib"]
        i = int(np.nanargmax(m))
        return float(m[i]), [int(t["line"][i])]
    s = ctx.samples.get("mem_used_max_gib") if ctx.samples else None
    return s


@feature("memory_capacity_gib", "GiB", "Memory of one GPU: NVML total, an OOM message's total capacity, or the --gpu table.", FAMILY)
def _cap(ctx: Ctx):
    if ctx.samples and ctx.samples.get("mem_total_gib"):
        return float(ctx.samples["mem_total_gib"])
    if ctx.get("oom_capacity_gib"):
        return ctx.get("oom_capacity_gib")
    k = ctx.get("gpu_name")
    return GPUS[k][0] if k else None


@feature("memory_frac", "fraction", "memory_peak_gib ÷ memory_capacity_gib (per device; in device_map mode on 3.8–4.4.2 ms-swift sums devices).", FAMILY)
def _frac(ctx: Ctx):
    p, c = ctx.get("memory_peak_gib"), ctx.get("memory_capacity_gib")
    if p is None or not c:
        return None
    if ctx.get("device_map_parallel") and ctx.get("visible_gpus"):
        c = c * ctx.get("visible_gpus")
    return p / c


@feature("memory_headroom_gib", "GiB", "Capacity minus the peak reserved memory.", FAMILY)
def _head(ctx: Ctx):
    p, c = ctx.get("memory_peak_gib"), ctx.get("memory_capacity_gib")
    if p is None or not c:
        return None
    return c - p


@feature("memory_growth_frac", "fraction", "Relative growth of memory(GiB) from the first to the last logged step (leaks, long-sample spikes).", FAMILY)
def _growth(ctx: Ctx):
    t = ctx.run.steps
    if not len(t) or not t.has("memory_gib"):
        return None
    m = t["memory_gib"][~np.isnan(t["memory_gib"])]
    if len(m) < 3 or m[0] <= 0:
        return None
    return float((m[-1] - m[0]) / m[0])
