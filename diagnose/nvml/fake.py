"""A fake `pynvml`, driven by a recorded trace, implementing exactly the calls in `backend.USED_CALLS`.

Contract: `FakeNVML.from_trace(path_or_dict, clock=time.monotonic, loop=True)`
returns an object usable wherever the sampler takes the `pynvml` module: same
function names and arguments, same return shapes (objects with `.gpu/.memory`,
`.total/.free/.used` in bytes, process objects with `.pid/.usedGpuMemory`
(None when NVML cannot tell), ints in NVML units (mW, KB/s, MHz, C), str names),
and `NVMLError(code)` with `.value` for errors.

Trace format (`swiftdoc-nvml-trace/1`, JSON; see fixtures/nvml/SOURCE.md):
  devices[i]   static answers, `{"<call>[:args]": value | {"error": code}}`
  frames[k]    `{"t": seconds since nvmlInit, "devices": [{call: value}]}`; the
               frame in force is the last one with t <= elapsed (cycling when
               `loop`); a frame entry overrides the static one
  events       XID events `{"t", "device", "eventType", "eventData"}`
  missing      calls this driver does not have (raise FunctionNotFound)
  init_error   an NVML error code nvmlInit raises (no driver, no GPU ...)
A call with no answer anywhere raises NotSupported, as NVML does for metrics a
GPU cannot report.  `record.py` writes traces in this format from a real GPU.
"""
from __future__ import annotations

import bisect
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from diagnose.nvml import backend as B

TRACE_FORMAT = "swiftdoc-nvml-trace/1"

# the pynvml constants the sampler reads (same values as nvidia-ml-py)
CONSTANTS: dict[str, int] = {
    "NVML_PCIE_UTIL_TX_BYTES": 0,
    "NVML_PCIE_UTIL_RX_BYTES": 1,
    "NVML_CLOCK_SM": 1,
    "NVML_CLOCK_MEM": 2,
    "NVML_TEMPERATURE_GPU": 0,
    "NVML_MEMORY_ERROR_TYPE_UNCORRECTED": 1,
    "NVML_VOLATILE_ECC": 0,
    "nvmlEventTypeXidCriticalError": 0x8,
    "NVML_ERROR_NOT_SUPPORTED": B.ERR_NOT_SUPPORTED,
    "NVML_ERROR_NO_PERMISSION": B.ERR_NO_PERMISSION,
    "NVML_ERROR_FUNCTION_NOT_FOUND": B.ERR_FUNCTION_NOT_FOUND,
    "NVML_ERROR_TIMEOUT": B.ERR_TIMEOUT,
    "NVML_ERROR_NOT_FOUND": B.ERR_NOT_FOUND,
    "NVML_ERROR_ARGUMENT_VERSION_MISMATCH": B.ERR_ARGUMENT_VERSION_MISMATCH,
    "NVML_ERROR_GPU_IS_LOST": B.ERR_GPU_IS_LOST,
}

_ERR_TEXT = {1: "Uninitialized", 2: "Invalid Argument", 3: "Not Supported", 4: "Insufficient Permissions",
             6: "Not Found", 9: "Driver Not Loaded", 10: "Timeout", 12: "NVML Shared Library Not Found",
             13: "Function Not Found", 15: "GPU is lost", 25: "Argument version mismatch", 28: "GPU not found"}


class NVMLError(Exception):
    """Like pynvml.NVMLError: carries the NVML return code in `.value`."""

    def __init__(self, value: int):
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _ERR_TEXT.get(self.value, f"NVML error {self.value}")


class _Obj:
    """Attribute bag shaped like pynvml's ctypes structs / nvmlFriendlyObject."""

    def __init__(self, d: dict[str, Any]):
        self.__dict__.update(d)

    def __repr__(self) -> str:
        return f"_Obj({self.__dict__})"


class _Handle:
    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index

    def __repr__(self) -> str:
        return f"<fake nvmlDevice {self.index}>"


class _EventSet:
    def __init__(self) -> None:
        self.devices: set[int] = set()
        self.next = 0


class FakeNVML:
    NVMLError = NVMLError

    def __init__(self, trace: dict[str, Any], *, clock: Callable[[], float] = time.monotonic, loop: bool = True,
                 name: str = "trace"):
        if trace.get("format", TRACE_FORMAT) != TRACE_FORMAT:
            raise ValueError(f"unknown NVML trace format {trace.get('format')!r}")
        self.trace = trace
        self.clock = clock
        self.loop = loop
        self.SOURCE = f"fake:{name}"
        for k, v in CONSTANTS.items():
            setattr(self, k, v)
        self._static: list[dict[str, Any]] = trace.get("devices", [])
        self._frames: list[dict[str, Any]] = sorted(trace.get("frames", []), key=lambda f: f.get("t", 0.0))
        self._times = [float(f.get("t", 0.0)) for f in self._frames]
        self._period = float(trace.get("period_s") or (self._times[-1] + (self._times[-1] - self._times[-2])
                                                          if len(self._times) > 1 else 1.0))
        self._events = sorted(trace.get("events", []), key=lambda e: e.get("t", 0.0))
        self._missing = set(trace.get("missing", []))
        self._t0: float | None = None
        self._handles = [_Handle(i) for i in range(len(self._static))]
        self.calls = 0  # number of NVML calls made (bench / tests)
        self._keys: dict[tuple[str, tuple[Any, ...]], str] = {}

    @classmethod
    def from_trace(cls, src: str | os.PathLike[str] | dict[str, Any], **kw: Any) -> FakeNVML:
        if isinstance(src, dict):
            return cls(src, **kw)
        p = Path(src)
        return cls(json.loads(p.read_text()), name=p.stem, **kw)

    # ------------------------------------------------------------------ internals
    def _elapsed(self) -> float:
        if self._t0 is None:
            raise NVMLError(B.ERR_UNINITIALIZED)
        return self.clock() - self._t0

    def _frame(self, i: int) -> dict[str, Any]:
        if not self._frames:
            return {}
        e = self._elapsed()
        if self.loop and self._period > 0:
            e = e % self._period
        k = bisect.bisect_right(self._times, e) - 1  # last frame with t <= e
        devs = self._frames[max(k, 0)].get("devices", [])
        return devs[i] if i < len(devs) else {}

    def _answer(self, call: str, h: _Handle | None, *args: Any) -> Any:
        self.calls += 1
        if call in self._missing:
            raise NVMLError(B.ERR_FUNCTION_NOT_FOUND)
        if self._t0 is None:
            raise NVMLError(B.ERR_UNINITIALIZED)
        key = self._keys.get((call, args))
        if key is None:
            key = self._keys[(call, args)] = call + (":" + ",".join(str(int(a)) for a in args) if args else "")
        v: Any = None
        found = False
        if h is not None:
            fr = self._frame(h.index)
            if key in fr:
                v, found = fr[key], True
            elif key in self._static[h.index]:
                v, found = self._static[h.index][key], True
        elif key in self.trace.get("system", {}):
            v, found = self.trace["system"][key], True
        if not found:
            raise NVMLError(B.ERR_NOT_SUPPORTED)
        if isinstance(v, dict) and set(v) == {"error"}:
            raise NVMLError(int(v["error"]))
        return v

    def _h(self, handle: Any) -> _Handle:
        if not isinstance(handle, _Handle) or handle.index >= len(self._handles):
            raise NVMLError(2)
        return handle

    # ------------------------------------------------------------------ the pynvml API (USED_CALLS)
    def nvmlInit(self) -> None:
        if self.trace.get("init_error"):
            raise NVMLError(int(self.trace["init_error"]))
        if self._t0 is None:
            self._t0 = self.clock()

    def nvmlShutdown(self) -> None:
        self._t0 = None

    def nvmlSystemGetDriverVersion(self) -> str:
        return str(self._answer("nvmlSystemGetDriverVersion", None))

    def nvmlSystemGetNVMLVersion(self) -> str:
        return str(self._answer("nvmlSystemGetNVMLVersion", None))

    def nvmlDeviceGetCount(self) -> int:
        if self._t0 is None:
            raise NVMLError(B.ERR_UNINITIALIZED)
        self.calls += 1
        return len(self._static)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        if self._t0 is None:
            raise NVMLError(B.ERR_UNINITIALIZED)
        if not 0 <= index < len(self._handles):
            raise NVMLError(2)
        self.calls += 1
        return self._handles[index]

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return str(self._answer("nvmlDeviceGetName", self._h(handle)))

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        return str(self._answer("nvmlDeviceGetUUID", self._h(handle)))

    def nvmlDeviceGetMigMode(self, device: Any) -> list[int]:
        return list(self._answer("nvmlDeviceGetMigMode", self._h(device)))

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> _Obj:
        return _Obj(self._answer("nvmlDeviceGetUtilizationRates", self._h(handle)))

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: Any = None) -> _Obj:
        return _Obj(self._answer("nvmlDeviceGetMemoryInfo", self._h(handle)))

    def nvmlDeviceGetPcieThroughput(self, device: Any, counter: int) -> int:
        return int(self._answer("nvmlDeviceGetPcieThroughput", self._h(device), counter))

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        return int(self._answer("nvmlDeviceGetPowerUsage", self._h(handle)))

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int:
        return int(self._answer("nvmlDeviceGetCurrPcieLinkWidth", self._h(handle)))

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int:
        return int(self._answer("nvmlDeviceGetMaxPcieLinkWidth", self._h(handle)))

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        return int(self._answer("nvmlDeviceGetEnforcedPowerLimit", self._h(handle)))

    def nvmlDeviceGetClockInfo(self, handle: Any, type: int) -> int:  # noqa: A002 (pynvml's name)
        return int(self._answer("nvmlDeviceGetClockInfo", self._h(handle), type))

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        return int(self._answer("nvmlDeviceGetCurrentClocksEventReasons", self._h(handle)))

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int:
        return int(self._answer("nvmlDeviceGetCurrentClocksThrottleReasons", self._h(handle)))

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        return int(self._answer("nvmlDeviceGetTemperature", self._h(handle), sensor))

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, errorType: int, counterType: int) -> int:  # noqa: N803
        return int(self._answer("nvmlDeviceGetTotalEccErrors", self._h(handle), errorType, counterType))

    def _procs(self, call: str, handle: Any) -> list[_Obj]:
        out = []
        for p in self._answer(call, self._h(handle)):
            d = {"pid": 0, "usedGpuMemory": None, "gpuInstanceId": 0xFFFFFFFF, "computeInstanceId": 0xFFFFFFFF}
            d.update(p)
            out.append(_Obj(d))
        return out

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[_Obj]:
        return self._procs("nvmlDeviceGetComputeRunningProcesses", handle)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: Any) -> list[_Obj]:
        try:
            return self._procs("nvmlDeviceGetComputeRunningProcesses_v2", handle)
        except NVMLError as e:
            if e.value != B.ERR_NOT_SUPPORTED:
                raise
            return self._procs("nvmlDeviceGetComputeRunningProcesses", handle)

    def nvmlEventSetCreate(self) -> _EventSet:
        self._answer_system_error("nvmlEventSetCreate")
        return _EventSet()

    def nvmlDeviceRegisterEvents(self, handle: Any, eventTypes: int, eventSet: _EventSet) -> None:  # noqa: N803
        h = self._h(handle)
        self.calls += 1
        err = self._static[h.index].get("nvmlDeviceRegisterEvents")
        if isinstance(err, dict) and "error" in err:
            raise NVMLError(int(err["error"]))
        if eventTypes & CONSTANTS["nvmlEventTypeXidCriticalError"]:
            eventSet.devices.add(h.index)

    def nvmlEventSetWait_v2(self, eventSet: _EventSet, timeoutms: int) -> _Obj:
        self.calls += 1
        now = self._elapsed()
        while eventSet.next < len(self._events) and float(self._events[eventSet.next].get("t", 0)) <= now:
            ev = self._events[eventSet.next]
            eventSet.next += 1
            if ev.get("device") in eventSet.devices:
                return _Obj({"device": self._handles[ev["device"]], "eventType": int(ev.get("eventType", 8)),
                             "eventData": int(ev.get("eventData", 0)), "gpuInstanceId": 0xFFFFFFFF,
                             "computeInstanceId": 0xFFFFFFFF})
        raise NVMLError(B.ERR_TIMEOUT)

    def nvmlEventSetFree(self, eventSet: _EventSet) -> None:
        self.calls += 1

    def _answer_system_error(self, call: str) -> None:
        self.calls += 1
        if self._t0 is None:
            raise NVMLError(B.ERR_UNINITIALIZED)
        if call in self._missing:
            raise NVMLError(B.ERR_FUNCTION_NOT_FOUND)
        v = self.trace.get("system", {}).get(call)
        if isinstance(v, dict) and "error" in v:
            raise NVMLError(int(v["error"]))
