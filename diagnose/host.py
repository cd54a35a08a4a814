"""Host-side checks for a job on this machine: shared memory, CPU cores vs workers, RAM headroom.

Contract:
- `host_features(pid=None, interval_s=None) -> dict` with the keys in
  `HOST_KEYS`; a value is `None` when it cannot be read here (never 0 for
  "unknown").  Without a pid only machine-level numbers are filled.  With a pid,
  CPU use of the job's processes is measured over `interval_s` (default 0.5 s,
  one short sleep).
- `HostMonitor(pid)`: the same, measured between successive `features()` calls
  (no sleeping; `attach` calls it once per refresh).
Numbers, and how to check them by hand:
  shm_*            /dev/shm filesystem (`df -h /dev/shm`); torch DataLoader
                   workers pass batches through it: too small -> "Bus error"
  cpu_cores        cores the job may run on (`taskset -cp PID`), else this process's
  host_mem_*       MemAvailable (`free -g`), capped by the job's cgroup v2
                   memory.max when one is set (containers)
  dataloader_workers_running  job descendants named pt_data_worker (torch >= 2.2
                   names its workers so), else forked children of a rank process
  worker_cpu_pct   CPU used by those workers, % of one core, summed (`top -p`)
  rank_cpu_pct     the same for the training processes themselves
  job_rss_gib      resident memory of the job's processes, summed (shared pages
                   count once per process, so an upper bound)
psutil and /proc only; nothing here signals or slows the job.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

GIB = 1024**3

HOST_KEYS: tuple[str, ...] = (
    "cpu_cores", "cpu_cores_total", "load_avg_1m",
    "host_mem_total_gib", "host_mem_available_gib", "host_mem_available_frac", "cgroup_mem_limit_gib",
    "shm_total_gib", "shm_used_gib", "shm_free_gib", "shm_used_frac",
    "job_pids", "rank_processes", "dataloader_workers_running",
    "worker_cpu_pct", "worker_cpu_pct_max", "rank_cpu_pct", "job_rss_gib",
)


def _r(v: float | None, nd: int = 3) -> float | None:
    return None if v is None else round(v, nd)


def shm_features(path: str = "/dev/shm") -> dict[str, Any]:
    out: dict[str, Any] = {"shm_total_gib": None, "shm_used_gib": None, "shm_free_gib": None, "shm_used_frac": None}
    try:
        st = os.statvfs(path)
    except OSError:
        return out
    total = st.f_blocks * st.f_frsize
    free = st.f_bavail * st.f_frsize
    if total <= 0:
        return out
    used = total - st.f_bfree * st.f_frsize
    out.update(shm_total_gib=_r(total / GIB), shm_used_gib=_r(used / GIB), shm_free_gib=_r(free / GIB),
               shm_used_frac=_r(used / total, 4))
    return out


def _meminfo() -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                k, _, rest = line.partition(":")
                parts = rest.split()
                if parts:
                    out[k] = int(parts[0]) * 1024
    except OSError:
        pass
    return out


def _cgroup_limit(pid: int | None) -> tuple[int | None, int | None]:
    """(memory.max, memory.current) of the process's cgroup v2, when limited."""
    try:
        text = Path(f"/proc/{pid or 'self'}/cgroup").read_text()
    except OSError:
        return None, None
    rel = None
    for line in text.splitlines():
        if line.startswith("0::"):
            rel = line[3:].strip()
    if rel is None:
        return None, None
    d = Path("/sys/fs/cgroup") / rel.lstrip("/")
    try:
        raw = (d / "memory.max").read_text().strip()
    except OSError:
        return None, None
    if raw == "max":
        return None, None
    try:
        cur = int((d / "memory.current").read_text().strip())
    except (OSError, ValueError):
        cur = None
    return int(raw), cur


def memory_features(pid: int | None = None) -> dict[str, Any]:
    mi = _meminfo()
    total, avail = mi.get("MemTotal"), mi.get("MemAvailable")
    limit, cur = _cgroup_limit(pid)
    out: dict[str, Any] = {"host_mem_total_gib": None, "host_mem_available_gib": None,
                           "host_mem_available_frac": None, "cgroup_mem_limit_gib": _r(limit / GIB) if limit else None}
    if total is None or avail is None:
        return out
    if limit is not None and limit < total:
        total = limit
        if cur is not None:
            avail = min(avail, max(0, limit - cur))
    out.update(host_mem_total_gib=_r(total / GIB), host_mem_available_gib=_r(avail / GIB),
               host_mem_available_frac=_r(avail / total, 4))
    return out


def cpu_features(pid: int | None = None) -> dict[str, Any]:
    try:
        cores: int | None = len(os.sched_getaffinity(pid or 0))
    except (OSError, AttributeError):
        cores = os.cpu_count()
    try:
        load = _r(os.getloadavg()[0], 2)
    except OSError:
        load = None
    return {"cpu_cores": cores, "cpu_cores_total": os.cpu_count(), "load_avg_1m": load}


class HostMonitor:
    """Host features for one job, with CPU use measured between calls."""

    def __init__(self, pid: int | None = None):
        self.pid = pid
        self._procs: dict[int, Any] = {}
        self._primed = False

    def _job(self) -> tuple[list[Any], list[Any]]:
        """(rank processes, data-loader workers) among the job's process tree."""
        import psutil

        try:
            root = psutil.Process(self.pid)
            tree = [root] + root.children(recursive=True)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return [], []
        ranks, workers = [], []
        cmd: dict[int, tuple[str, ...]] = {}
        for p in tree:
            try:
                cmd[p.pid] = tuple(p.cmdline())
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                cmd[p.pid] = ()
        for p in tree:
            try:
                name = p.name()
                ppid = p.ppid()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            if name == "pt_data_worker" or (ppid in cmd and cmd[p.pid] and cmd[p.pid] == cmd[ppid]
                                            and ppid != self.pid and p.pid != self.pid and _is_rank(cmd[ppid])):
                workers.append(p)
            elif _is_rank(cmd[p.pid]):
                ranks.append(p)
        return ranks, workers

    def _cpu(self, plist: list[Any]) -> list[float]:
        import psutil

        out = []
        for p in plist:
            cached = self._procs.setdefault(p.pid, p)
            try:
                out.append(cached.cpu_percent(None))
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return out

    def features(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: None for k in HOST_KEYS}
        out.update(cpu_features(self.pid))
        out.update(memory_features(self.pid))
        out.update(shm_features())
        if self.pid is None:
            return out
        try:
            import psutil
        except ImportError:
            return out
        ranks, workers = self._job()
        if not ranks and not workers:
            return out
        out["job_pids"] = sorted(p.pid for p in ranks + workers)
        out["rank_processes"] = len(ranks)
        out["dataloader_workers_running"] = len(workers)
        wc, rc = self._cpu(workers), self._cpu(ranks)
        if self._primed:
            out["worker_cpu_pct"] = round(sum(wc), 1) if workers else None
            out["worker_cpu_pct_max"] = round(max(wc), 1) if wc else None
            out["rank_cpu_pct"] = round(sum(rc), 1) if rc else None
        self._primed = True
        rss = 0
        for p in ranks + workers:
            try:
                rss += p.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        out["job_rss_gib"] = _r(rss / GIB) if rss else None
        return out


def _is_rank(cmd: tuple[str, ...]) -> bool:
    """A process that trains: swift's cli entry (sft.py, pt.py, rlhf.py ...) or a megatron one."""
    return any(("/swift/cli/" in a and a.endswith(".py")) for a in cmd[:3])


def host_features(pid: int | None = None, interval_s: float | None = None) -> dict[str, Any]:
    mon = HostMonitor(pid)
    out = mon.features()
    if pid is not None and out.get("job_pids"):
        time.sleep(0.5 if interval_s is None else interval_s)
        out = mon.features()
    return out
