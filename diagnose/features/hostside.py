"""Host-side features: measured on the job's machine (attach), else read from a pasted snapshot.

Values come from `diagnose.host.host_features(pid)`; for analyze of a log, the
/dev/shm and RAM figures of a `df -h /dev/shm` / `free -h` pasted beside it
(`Run.snapshot`) stand in; the rest stays None.
"""
from __future__ import annotations

from diagnose.features.registry import Ctx, feature

FAMILY = "host"

def _pasted(ctx: Ctx, key: str):
    snap = ctx.run.snapshot or {}
    shm, mem = snap.get("shm"), snap.get("host_mem")
    if shm and key == "shm_total_gib":
        return shm["size_gib"], [shm["line"]]
    if shm and key == "shm_used_frac":
        return shm["use_pct"] / 100, [shm["line"]]
    if mem and key == "host_mem_total_gib":
        return mem["total_gib"], [mem["line"]]
    if mem and key == "host_mem_available_gib":
        return mem["available_gib"], [mem["line"]]
    if key == "host_mem_used_frac":
        used = snap.get("host_used")
        fracs = [(used["used_pct"] / 100, used["line"])] if used else []
        if mem and mem.get("total_gib"):
            fracs.append((1 - mem["available_gib"] / mem["total_gib"], mem["line"]))
        if fracs:
            frac, line = max(fracs)
            return frac, [line]
    swap = snap.get("swap")
    if swap and key == "host_swap_used_gib":
        return swap["used_gib"], [swap["line"]]
    if swap and key == "host_swap_used_frac" and swap.get("total_gib"):
        return swap["used_gib"] / swap["total_gib"], [swap["line"]]
    return None


for _f, _u, _d in [
    ("shm_total_gib", "GiB", "Size of /dev/shm (Docker's default is 64 MiB)."),
    ("shm_used_frac", "fraction", "Share of /dev/shm in use."),
    ("host_mem_available_gib", "GiB", "Host RAM available."),
    ("host_mem_total_gib", "GiB", "Host RAM total."),
    ("host_mem_used_frac", "fraction", "Share of host RAM in use, cache excluded (1 - available/total; DeepSpeed's "
                                       "see_memory_usage percent): the fullest the text shows."),
    ("host_swap_used_gib", "GiB", "Swap in use on the host (the largest the text shows: free, top, a swap= value)."),
    ("host_swap_used_frac", "fraction", "Share of the host's swap in use (free, top: where the total is shown)."),
    ("worker_cpu_pct", "%", "CPU use of the job's data-loader worker processes (100 = one core)."),
    ("rank_cpu_pct", "%", "CPU use of the training rank processes (100 = one core)."),
    ("dataloader_workers_running", "count", "Data-loader worker processes seen running."),
]:
    def _mk(key=_f):
        return lambda ctx: (ctx.host or {}).get(key) if (ctx.host or {}).get(key) is not None else _pasted(ctx, key)

    feature(_f, _u, _d, FAMILY)(_mk())
