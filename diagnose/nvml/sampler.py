"""Read GPU metrics through NVML, one record per tick, on a schedule that does not drift.

Contract:
- `Sampler(nvml, indices=None)`: `open() -> header dict` (initialises NVML,
  reads static device info, probes which metrics this driver/GPU supports,
  registers for XID events); `sample() -> record dict`; `close()`.
  Record: `{"kind": "sample", "t": unix_s, "gpus": [per-GPU dict]}` with the
  keys in `GPU_KEYS`; a metric NVML cannot report (NotSupported, NoPermission,
  MIG, an old driver without the function) is `None`, never 0.  A metric found
  unsupported once is not asked again (it costs a driver call per tick).
  XID critical errors seen since the last tick come in `record["xid"]`.
  ECC counters and the process list change slowly and cost more (the process
  list is two driver calls): they are read at most once per `slow_s` (1 s) and
  repeated in the ticks between.
- `run_sampler(sampler, emit, interval_s, stop, ...)`: calls `emit(record)` every
  `interval_s`; deadlines are `start + k * interval_s`, so timing does not
  accumulate error; ticks that cannot be met (a stalled driver call) are
  skipped, not bunched.
- `SamplerThread`: the same in a daemon thread, for `attach`.
Every number can be reproduced with nvidia-smi; the equivalent query is noted next
to each metric.
"""
from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any

from diagnose.nvml import backend as B

SCHEMA = "swiftdoc-samples/1"
MIB = 1024 * 1024

# per-GPU record keys (units in the names); see docs/attach.md
GPU_KEYS: tuple[str, ...] = (
    "index",
    "util_gpu_pct",  # nvidia-smi --query-gpu=utilization.gpu
    "util_mem_pct",  # utilization.memory (memory controller busy)
    "mem_used_mib",  # memory.used
    "mem_total_mib",  # memory.total
    "pcie_tx_mbps",  # nvidia-smi dmon -s t (MB/s = NVML KB/s / 1024)
    "pcie_rx_mbps",
    "power_w",  # power.draw
    "power_limit_w",  # enforced.power.limit
    "sm_clock_mhz",  # clocks.sm
    "mem_clock_mhz",  # clocks.mem
    "throttle_mask",  # clocks_event_reasons.active (hex bitmask)
    "throttle",  # names of the active reasons
    "temp_c",  # temperature.gpu
    "ecc_uncorrected",  # ecc.errors.uncorrected.volatile.total
    "procs",  # nvidia-smi --query-compute-apps=pid,used_memory: [{pid, mem_mib}]
)

# clocks event (throttle) reason bits, nvml.h nvmlClocksEventReason*
THROTTLE_BITS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal"),
    (0x40, "hw_thermal"),
    (0x80, "hw_power_brake"),
    (0x100, "display_clocks"),
    (0x200, "board_limit"),
    (0x400, "reliability"),
)

# errors that mean "this metric is not available here", remembered per device
_UNSUPPORTED = {B.ERR_NOT_SUPPORTED, B.ERR_NO_PERMISSION, B.ERR_FUNCTION_NOT_FOUND,
                B.ERR_ARGUMENT_VERSION_MISMATCH}


def throttle_names(mask: int | None) -> list[str] | None:
    if mask is None:
        return None
    return [name for bit, name in THROTTLE_BITS if mask & bit]


def _s(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


class _Gpu:
    __slots__ = ("index", "handle", "uuid", "name", "mig", "mem_total_mib", "power_limit_w", "off", "xid", "ecc",
                 "procs", "pcie_width", "pcie_max_width")

    def __init__(self, index: int, handle: Any):
        self.index = index
        self.handle = handle
        self.uuid: str | None = None
        self.name: str | None = None
        self.mig: bool | None = None
        self.mem_total_mib: float | None = None
        self.power_limit_w: float | None = None
        self.off: set[str] = set()  # metrics found unsupported
        self.xid = False  # registered for XID events
        self.ecc: int | None = None  # last read (slow metric)
        self.procs: list[dict[str, Any]] | None = None  # last read (slow metric)
        self.pcie_width: int | None = None  # PCIe link width now, and the most the link can train to
        self.pcie_max_width: int | None = None


class Sampler:
    def __init__(self, nvml: Any, indices: Sequence[int] | None = None, *, wall: Callable[[], float] = time.time,
                 procs: bool = True, xid: bool = True, slow_s: float = 1.0):
        self.nvml = nvml
        self.indices = list(indices) if indices is not None else None
        self.wall = wall
        self.want_procs = procs
        self.want_xid = xid
        self.slow_s = slow_s
        self._slow_t = -float("inf")
        self.gpus: list[_Gpu] = []
        self.header: dict[str, Any] = {}
        self._events: Any = None
        self._by_uuid: dict[str, int] = {}
        self._reasons_fn: Callable[[Any], int] | None = None
        self._procs_fn: Callable[[Any], Any] | None = None
        self._opened = False

    # ------------------------------------------------------------------ lifecycle
    def open(self) -> dict[str, Any]:
        nv = self.nvml
        nv.nvmlInit()
        self._opened = True
        n = nv.nvmlDeviceGetCount()
        wanted = range(n) if self.indices is None else [i for i in self.indices if 0 <= i < n]
        for i in wanted:
            g = _Gpu(i, nv.nvmlDeviceGetHandleByIndex(i))
            g.name = self._q(g, "name", nv.nvmlDeviceGetName, g.handle, conv=_s)
            g.uuid = self._q(g, "uuid", nv.nvmlDeviceGetUUID, g.handle, conv=_s)
            g.pcie_width = self._q(g, "pcie_width", getattr(nv, "nvmlDeviceGetCurrPcieLinkWidth", None), g.handle)
            g.pcie_max_width = self._q(g, "pcie_max_width", getattr(nv, "nvmlDeviceGetMaxPcieLinkWidth", None), g.handle)
            mode = self._q(g, "mig", nv.nvmlDeviceGetMigMode, g.handle)
            g.mig = bool(mode[0]) if mode is not None else None
            self.gpus.append(g)
            if g.uuid:
                self._by_uuid[g.uuid] = i
        self._reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            getattr(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        self._procs_fn = getattr(nv, "nvmlDeviceGetComputeRunningProcesses", None)
        if self.want_xid:
            self._register_xid()
        self.sample()  # probe: learn what is unsupported before writing the header
        self.header = {
            "kind": "header",
            "schema": SCHEMA,
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "host": socket.gethostname(),
            "source": getattr(nv, "SOURCE", "nvml"),
            "driver_version": self._q(None, "driver", nv.nvmlSystemGetDriverVersion, conv=_s),
            "nvml_version": self._q(None, "nvml", nv.nvmlSystemGetNVMLVersion, conv=_s),
            "device_count": n,
            "gpus": [
                {
                    "index": g.index, "uuid": g.uuid, "name": g.name, "mig": g.mig,
                    "mem_total_mib": g.mem_total_mib, "power_limit_w": g.power_limit_w,
                    "xid_readable": g.xid, "unsupported": sorted(g.off),
                    "pcie_width": g.pcie_width, "pcie_max_width": g.pcie_max_width,
                }
                for g in self.gpus
            ],
        }
        return self.header

    def close(self) -> None:
        if not self._opened:
            return
        nv = self.nvml
        if self._events is not None:
            try:
                nv.nvmlEventSetFree(self._events)
            except nv.NVMLError:
                pass
            self._events = None
        try:
            nv.nvmlShutdown()
        except nv.NVMLError:
            pass
        self._opened = False

    def __enter__(self) -> Sampler:
        self.open()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ queries
    def _q(self, g: _Gpu | None, key: str, fn: Callable[..., Any] | None, *args: Any,
           conv: Callable[[Any], Any] | None = None) -> Any:
        """One NVML call; N/A (None) on error; unsupported metrics are remembered."""
        if fn is None or (g is not None and key in g.off):
            if g is not None:
                g.off.add(key)
            return None
        try:
            v = fn(*args)
        except self.nvml.NVMLError as e:
            if g is not None and B.error_code(e) in _UNSUPPORTED:
                g.off.add(key)
            return None
        return conv(v) if conv is not None else v

    def _register_xid(self) -> None:
        nv = self.nvml
        try:
            self._events = nv.nvmlEventSetCreate()
        except nv.NVMLError:
            self._events = None
            return
        for g in self.gpus:
            try:
                nv.nvmlDeviceRegisterEvents(g.handle, nv.nvmlEventTypeXidCriticalError, self._events)
                g.xid = True
            except nv.NVMLError:
                g.xid = False  # needs root on some drivers; XID then stays N/A

    def _poll_xid(self, t: float) -> list[dict[str, Any]]:
        nv = self.nvml
        out: list[dict[str, Any]] = []
        for _ in range(64):  # bounded: a storm of events must not stall the tick
            try:
                data = nv.nvmlEventSetWait_v2(self._events, 0)
            except nv.NVMLError:
                break  # NVML_ERROR_TIMEOUT: nothing pending
            idx = None
            try:
                idx = self._by_uuid.get(_s(nv.nvmlDeviceGetUUID(data.device)))
            except nv.NVMLError:
                pass
            out.append({"t": t, "index": idx, "xid": int(data.eventData)})
        return out

    def _throttle(self, g: _Gpu) -> int | None:
        nv = self.nvml
        if "throttle" in g.off or self._reasons_fn is None:
            return None
        try:
            return int(self._reasons_fn(g.handle))
        except nv.NVMLError as e:
            code = B.error_code(e)
            old = getattr(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
            if code == B.ERR_FUNCTION_NOT_FOUND and old is not None and self._reasons_fn is not old:
                self._reasons_fn = old  # driver < 535 only has the older name
                return self._throttle(g)
            if code in _UNSUPPORTED:
                g.off.add("throttle")
            return None

    def _procs(self, g: _Gpu) -> list[dict[str, Any]] | None:
        nv = self.nvml
        if "procs" in g.off or self._procs_fn is None:
            return None
        try:
            plist = self._procs_fn(g.handle)
        except nv.NVMLError as e:
            code = B.error_code(e)
            if code in (B.ERR_ARGUMENT_VERSION_MISMATCH, B.ERR_FUNCTION_NOT_FOUND) and \
                    self._procs_fn is not getattr(nv, "nvmlDeviceGetComputeRunningProcesses_v2", None):
                self._procs_fn = getattr(nv, "nvmlDeviceGetComputeRunningProcesses_v2", None)
                return self._procs(g)
            if code in _UNSUPPORTED:
                g.off.add("procs")
            return None
        out = []
        for p in plist:
            used = getattr(p, "usedGpuMemory", None)
            out.append({"pid": int(p.pid), "mem_mib": round(used / MIB, 1) if used is not None else None})
        return out

    def sample(self) -> dict[str, Any]:
        nv = self.nvml
        t = self.wall()
        q = self._q
        # slow-changing metrics (ECC counters, the process list: two driver calls) once per `slow_s`
        slow = t - self._slow_t >= self.slow_s or t < self._slow_t
        if slow:
            self._slow_t = t
        rows = []
        for g in self.gpus:
            h = g.handle
            util = q(g, "util", nv.nvmlDeviceGetUtilizationRates, h)
            mem = q(g, "mem", nv.nvmlDeviceGetMemoryInfo, h)
            tx = q(g, "pcie_tx", nv.nvmlDeviceGetPcieThroughput, h, nv.NVML_PCIE_UTIL_TX_BYTES)
            rx = q(g, "pcie_rx", nv.nvmlDeviceGetPcieThroughput, h, nv.NVML_PCIE_UTIL_RX_BYTES)
            pw = q(g, "power", nv.nvmlDeviceGetPowerUsage, h)
            if g.power_limit_w is None and "power_limit" not in g.off:
                lim = q(g, "power_limit", nv.nvmlDeviceGetEnforcedPowerLimit, h)
                g.power_limit_w = lim / 1000.0 if lim is not None else None
            sm = q(g, "sm_clock", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)
            mc = q(g, "mem_clock", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM)
            mask = self._throttle(g)
            temp = q(g, "temp", nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
            if slow:
                g.ecc = q(g, "ecc", nv.nvmlDeviceGetTotalEccErrors, h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                          nv.NVML_VOLATILE_ECC)
                g.procs = self._procs(g) if self.want_procs else None
            if mem is not None:
                used_mib = round(mem.used / MIB, 1)
                g.mem_total_mib = round(mem.total / MIB, 1)
            else:
                used_mib = None
            rows.append({
                "index": g.index,
                "util_gpu_pct": util.gpu if util is not None else None,
                "util_mem_pct": util.memory if util is not None else None,
                "mem_used_mib": used_mib,
                "mem_total_mib": g.mem_total_mib if mem is not None else None,
                "pcie_tx_mbps": round(tx / 1024.0, 2) if tx is not None else None,
                "pcie_rx_mbps": round(rx / 1024.0, 2) if rx is not None else None,
                "power_w": round(pw / 1000.0, 2) if pw is not None else None,
                "power_limit_w": g.power_limit_w,
                "sm_clock_mhz": sm,
                "mem_clock_mhz": mc,
                "throttle_mask": mask,
                "throttle": throttle_names(mask),
                "temp_c": temp,
                "ecc_uncorrected": g.ecc,
                "procs": g.procs,
            })
        rec: dict[str, Any] = {"kind": "sample", "t": round(t, 3), "gpus": rows}
        if self._events is not None:
            xid = self._poll_xid(t)
            if xid:
                rec["xid"] = xid
        return rec


def run_sampler(sampler: Sampler, emit: Callable[[dict[str, Any]], None], interval_s: float,
                stop: threading.Event, *, duration_s: float | None = None, count: int | None = None,
                monotonic: Callable[[], float] = time.monotonic,
                wait: Callable[[float], Any] | None = None) -> int:
    """Emit one record per tick until `stop` is set, `duration_s` passed or `count` reached."""
    if interval_s <= 0:
        raise ValueError("interval must be > 0")
    wait = wait or stop.wait
    start = monotonic()
    k = 0
    n = 0
    while not stop.is_set():
        emit(sampler.sample())
        n += 1
        if count is not None and n >= count:
            break
        k += 1
        now = monotonic()
        if duration_s is not None and now - start >= duration_s:
            break
        deadline = start + k * interval_s
        if deadline <= now:  # behind schedule: skip the ticks we missed, keep the phase
            k = int((now - start) / interval_s) + 1
            deadline = start + k * interval_s
        if duration_s is not None and deadline - start > duration_s + 1e-9:
            break
        wait(deadline - now)
    return n


class SamplerThread(threading.Thread):
    """Run a Sampler in the background; records go to every callback in `sinks`."""

    def __init__(self, sampler: Sampler, interval_s: float, sinks: Sequence[Callable[[dict[str, Any]], None]]):
        super().__init__(name="swiftdoc-sampler", daemon=True)
        self.sampler = sampler
        self.interval_s = interval_s
        self.sinks = list(sinks)
        self.stop_event = threading.Event()
        self.error: BaseException | None = None
        self.count = 0

    def _emit(self, rec: dict[str, Any]) -> None:
        for s in self.sinks:
            s(rec)

    def run(self) -> None:
        try:
            self.count = run_sampler(self.sampler, self._emit, self.interval_s, self.stop_event)
        except BaseException as e:  # reported by the owner; the sampler never takes attach down
            self.error = e

    def stop(self, timeout: float = 2.0) -> None:
        self.stop_event.set()
        self.join(timeout)
