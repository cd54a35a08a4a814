"""Other processes competing for the CPUs during a trial: measured, so that their steps can be set aside.

A shared machine (CI runners, a workstation, several jobs on one node) slows
some steps of a trial for reasons that have nothing to do with the patch.  The
median resists a few such steps but not a burst that covers most of a trial.
This module measures, for every step interval, how long the trial's threads
were ready to run but waited for a CPU (the run-queue delay the kernel keeps
in /proc/<pid>/task/<tid>/schedstat), and how much CPU went to processes
*outside* the trial's process tree.  Either alone is not contention: another
job on idle cores does not slow the trial, and a trial with more threads than
cores waits on itself on any machine.

Contract (Linux; elsewhere `available` is False and nothing is excluded):
- `CpuMonitor(ncpu=None, cpus=None)`: with `cpus` (a trial pinned to a verify slot's cores) the busy
  time is read from those cores' lines of /proc/stat only, so a trial in another slot is not "other
  processes".  `watch(pid)` adds a process of the trial (the tree
  is refreshed by the runner with `watch_tree(root)`); `sample()` records
  (monotonic time, CPU-seconds busy on the whole machine from /proc/stat,
  CPU-seconds used by the trial tree so far, seconds its threads waited in
  the run queue so far; a process that exits keeps its last reading).
  Cheap: well under a millisecond per sample for a few processes.
- `own_cpu(t0, t1) -> float | None`: CPU-seconds of the trial tree over [t0, t1]
  (reported per step as `cpu_s_per_step`: for a CPU-bound trial it is the step
  time the job would have with the machine to itself).
- `interval_load(t0, t1) -> (external_cores, delay_frac) | None`: average CPU
  cores used by other processes over [t0, t1], and the trial's run-queue delay
  as a fraction of the interval, from the samples around it (linear
  interpolation of the cumulative series).
- `contended(external_cores, delay_frac, ncpu)`: an interval is contended when
  the trial's threads waited for a CPU for at least 10% of it while at least a
  quarter of a core -- or 10% of the machine, whichever is more -- went to
  other processes.
  GPU-side contention (other processes on the same GPU) is visible in the NVML
  samples (`procs`), not here.
"""
from __future__ import annotations

import bisect
import os
import threading
import time
from typing import Any

MIN_DELAY_FRAC = 0.10
MIN_EXT_CORES = 0.25
MIN_EXT_FRAC = 0.10


def contended(external_cores: float, delay_frac: float, ncpu: int) -> bool:
    return delay_frac >= MIN_DELAY_FRAC and external_cores >= max(MIN_EXT_CORES, MIN_EXT_FRAC * ncpu)


def _schedstat(pid: int) -> tuple[float, float] | None:
    """(on-CPU seconds, run-queue wait seconds) summed over the threads of `pid`."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    run = wait = 0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as fh:
                f = fh.read().split()
            run += int(f[0])
            wait += int(f[1])
        except (OSError, IndexError, ValueError):
            continue
    return run / 1e9, wait / 1e9


def _busy(parts: list[bytes]) -> int:
    v = [int(x) for x in parts[1:]]
    # user nice system idle iowait irq softirq steal (guest is already inside user)
    return v[0] + v[1] + v[2] + (v[5] if len(v) > 5 else 0) + (v[6] if len(v) > 6 else 0) + (v[7] if len(v) > 7 else 0)


def _busy_seconds(cpus: frozenset[int] | None = None) -> float | None:
    """CPU-seconds busy on the whole machine, or on the cores `cpus` only (a verify slot's cores)."""
    try:
        with open("/proc/stat", "rb") as fh:
            if cpus is None:
                parts = fh.readline().split()
                if not parts or parts[0] != b"cpu":
                    return None
                return _busy(parts) / os.sysconf("SC_CLK_TCK")
            total, seen = 0, 0
            for line in fh:
                if not line.startswith(b"cpu"):
                    break
                parts = line.split()
                name = parts[0][3:]
                if name.isdigit() and int(name) in cpus:
                    total += _busy(parts)
                    seen += 1
            return total / os.sysconf("SC_CLK_TCK") if seen else None
    except (OSError, ValueError, IndexError):
        return None


class CpuMonitor:
    def __init__(self, ncpu: int | None = None, cpus: list[int] | None = None):
        # `cpus`: the trial is pinned to these cores (a verify slot): only load on them can disturb it
        self.cpus = frozenset(cpus) if cpus else None
        self.ncpu = len(self.cpus) if self.cpus else (ncpu or os.cpu_count() or 1)
        try:
            import psutil  # noqa: F401

            self.available = _busy_seconds(self.cpus) is not None
        except ImportError:
            self.available = False
        self._procs: dict[int, Any] = {}
        self._last: dict[int, float] = {}
        self._last_wait: dict[int, float] = {}
        self._lock = threading.Lock()
        self.t: list[float] = []
        self.busy: list[float] = []
        self.own: list[float] = []
        self.wait: list[float] = []

    def watch(self, pid: int) -> None:
        if not self.available or pid in self._procs:
            return
        try:
            import psutil

            self._procs[pid] = psutil.Process(pid)
        except Exception:
            pass

    def watch_tree(self, root: int) -> None:
        if not self.available:
            return
        self.watch(root)
        try:
            import psutil

            for p in psutil.Process(root).children(recursive=True):
                self.watch(p.pid)
        except Exception:
            pass

    def sample(self) -> None:
        if not self.available:
            return
        with self._lock:
            now = time.monotonic()
            busy = _busy_seconds(self.cpus)
            if busy is None:
                return
            for pid, p in list(self._procs.items()):
                st = _schedstat(pid)
                if st is not None:
                    self._last[pid], self._last_wait[pid] = st
                    continue
                try:
                    ct = p.cpu_times()
                    self._last[pid] = ct.user + ct.system
                except Exception:
                    self._procs.pop(pid, None)  # gone: its last reading stays in _last
            own = sum(self._last.values())
            if self.t and now <= self.t[-1]:
                return
            self.t.append(now)
            self.busy.append(busy)
            self.own.append(own)
            self.wait.append(sum(self._last_wait.values()))

    def _at(self, series: list[float], t: float) -> float | None:
        ts = self.t
        if not ts or t < ts[0] or t > ts[-1]:
            return None
        i = bisect.bisect_left(ts, t)
        if ts[i] == t or i == 0:
            return series[i]
        t0, t1 = ts[i - 1], ts[i]
        w = (t - t0) / (t1 - t0)
        return series[i - 1] + w * (series[i] - series[i - 1])

    def own_cpu(self, t0: float, t1: float) -> float | None:
        """CPU-seconds the trial tree used over [t0, t1] (None outside the samples)."""
        if not self.available or t1 <= t0:
            return None
        with self._lock:
            o0, o1 = self._at(self.own, t0), self._at(self.own, t1)
        return None if o0 is None or o1 is None else max(0.0, o1 - o0)

    def interval_load(self, t0: float, t1: float) -> tuple[float, float] | None:
        if not self.available or t1 <= t0:
            return None
        with self._lock:
            b0, b1 = self._at(self.busy, t0), self._at(self.busy, t1)
            o0, o1 = self._at(self.own, t0), self._at(self.own, t1)
            w0, w1 = self._at(self.wait, t0), self._at(self.wait, t1)
        if None in (b0, b1, o0, o1, w0, w1):
            return None
        dt = t1 - t0
        busy = (b1 - b0) / dt  # type: ignore[operator]
        ext = max(0.0, busy - (o1 - o0) / dt)  # type: ignore[operator]
        return ext, max(0.0, (w1 - w0) / dt)  # type: ignore[operator]
