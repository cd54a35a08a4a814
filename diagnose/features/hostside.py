"""Host-side features, present only when swiftdoc runs on the job's machine (attach).

Values come from `diagnose.host.host_features(pid)`; analyze of a log alone leaves
them None.
"""
from __future__ import annotations

from diagnose.features.registry import Ctx, feature

FAMILY = "host"

for _f, _u, _d in [
    ("shm_total_gib", "GiB", "Size of /dev/shm (Docker's default is 64 MiB)."),
    ("shm_used_frac", "fraction", "Share of /dev/shm in use."),
    ("host_mem_available_gib", "GiB", "Host RAM available."),
    ("host_mem_total_gib", "GiB", "Host RAM total."),
    ("worker_cpu_pct", "%", "CPU use of the job's data-loader worker processes (100 = one core)."),
    ("rank_cpu_pct", "%", "CPU use of the training rank processes (100 = one core)."),
    ("dataloader_workers_running", "count", "Data-loader worker processes seen running."),
]:
    def _mk(key=_f):
        return lambda ctx: (ctx.host or {}).get(key)

    feature(_f, _u, _d, FAMILY)(_mk())
