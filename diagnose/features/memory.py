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


@feature("memory_capacity_gib", "GiB", "Memory of one GPU: NVML total, an OOM message's total capacity, a pasted nvidia-smi/gpustat snapshot, or the --gpu table.", FAMILY)
def _cap(ctx: Ctx):
    if ctx.samples and ctx.samples.get("mem_total_gib"):
        return float(ctx.samples["mem_total_gib"])
    if ctx.get("oom_capacity_gib"):
        return ctx.get("oom_capacity_gib")
    gpus = (ctx.run.snapshot or {}).get("gpus")
    if gpus:
        g = max(gpus, key=lambda g: g["mem_total_gib"])
        return g["mem_total_gib"], [g["line"]]
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


@feature("memory_rising_rows", "rows",
         "Logged rows at the end of the log whose memory is higher than the row before, each one (a new peak at every "
         "logging interval: what a leak prints), counted when there are 5 or more rows with memory.", FAMILY)
def _rising(ctx: Ctx):
    t = ctx.run.steps
    if not len(t) or not t.has("memory_gib"):
        return None
    m = t["memory_gib"][~np.isnan(t["memory_gib"])]
    if len(m) < 5:
        return None
    n = 0
    for i in range(len(m) - 1, 0, -1):
        if m[i] > m[i - 1]:
            n += 1
        else:
            break
    return n


@feature("snapshot_gpu_mem_frac", "fraction", "Fullest GPU's memory in a pasted nvidia-smi/gpustat snapshot (used ÷ total).", FAMILY)
def _snap_mem(ctx: Ctx):
    gpus = (ctx.run.snapshot or {}).get("gpus")
    if not gpus:
        return None
    g = max(gpus, key=lambda g: g["mem_used_gib"] / g["mem_total_gib"] if g["mem_total_gib"] else 0)
    return (g["mem_used_gib"] / g["mem_total_gib"] if g["mem_total_gib"] else None), [g["line"]]


@feature("snapshot_gpu_util_pct", "%", "Mean GPU utilisation in a pasted nvidia-smi/gpustat snapshot (one moment, not an average over time).", FAMILY)
def _snap_util(ctx: Ctx):
    gpus = [g for g in (ctx.run.snapshot or {}).get("gpus") or [] if g.get("util_pct") is not None]
    if not gpus:
        return None
    return sum(g["util_pct"] for g in gpus) / len(gpus), [g["line"] for g in gpus[:4]]
