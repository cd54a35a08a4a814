"""Record a real GPU's NVML answers into a trace the fake backend replays.

Usage (on a machine with a GPU):
    python -m diagnose.nvml.record --seconds 20 --interval 0.5 --out fixtures/nvml/h200_idle.json

Contract: `RecordingNVML(pynvml)` wraps the real module and stores every answer
the sampler gets, per device and per tick, in the `swiftdoc-nvml-trace/1` format
(`fake.py`); `record(seconds, interval)` runs the real `Sampler` through it, so a
trace covers exactly the calls swiftdoc makes, errors (NotSupported, ...)
included.  Nothing in swiftdoc imports this module at run time.
"""
from __future__ import annotations

import argparse
import json
import threading
import time
from typing import Any

from diagnose.nvml import backend as B
from diagnose.nvml.fake import TRACE_FORMAT
from diagnose.nvml.sampler import Sampler, run_sampler

_STATIC = {"nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetMigMode", "nvmlDeviceGetEnforcedPowerLimit",
           "nvmlDeviceRegisterEvents"}
_SYSTEM = {"nvmlSystemGetDriverVersion", "nvmlSystemGetNVMLVersion", "nvmlEventSetCreate"}


def _plain(v: Any) -> Any:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, (int, float, str)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    fields = getattr(v, "_fields_", None)
    if fields:
        return {f[0]: _plain(getattr(v, f[0])) for f in fields if f[0] != "version"}
    if hasattr(v, "__dict__"):
        return {k: _plain(x) for k, x in vars(v).items()}
    return repr(v)


class RecordingNVML:
    def __init__(self, nvml: Any, clock: Any = time.monotonic):
        self._nv = nvml
        self._clock = clock
        self.NVMLError = nvml.NVMLError
        for c in B.USED_CONSTANTS:
            setattr(self, c, getattr(nvml, c))
        self.t0 = clock()
        self.system: dict[str, Any] = {}
        self.devices: list[dict[str, Any]] = []
        self.frames: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.missing: set[str] = set()
        self._handles: dict[int, int] = {}  # id(handle) -> index
        self._uuid_index: dict[str, int] = {}

    def new_frame(self) -> None:
        self.frames.append({"t": round(self._clock() - self.t0, 3), "devices": [{} for _ in self.devices]})

    def __getattr__(self, name: str) -> Any:
        if name not in B.USED_CALLS:
            raise AttributeError(name)
        fn = getattr(self._nv, name, None)
        if fn is None:
            self.missing.add(name)
            raise AttributeError(name)

        def call(*args: Any) -> Any:
            return self._call(name, fn, args)

        return call

    def _call(self, name: str, fn: Any, args: tuple[Any, ...]) -> Any:
        try:
            res = fn(*args)
            ans: Any = None
        except self._nv.NVMLError as e:
            res, ans = e, {"error": B.error_code(e)}
            if B.error_code(e) == B.ERR_FUNCTION_NOT_FOUND:
                self.missing.add(name)
        if name == "nvmlDeviceGetHandleByIndex" and not isinstance(res, Exception):
            self._handles[id(res)] = int(args[0])
            while len(self.devices) <= int(args[0]):
                self.devices.append({})
            return res
        if name in ("nvmlInit", "nvmlShutdown", "nvmlDeviceGetCount", "nvmlEventSetFree"):
            if isinstance(res, Exception):
                raise res
            return res
        if name == "nvmlEventSetWait_v2":
            if isinstance(res, Exception):
                raise res
            uuid = _plain(self._nv.nvmlDeviceGetUUID(res.device))
            self.events.append({"t": round(self._clock() - self.t0, 3), "device": self._uuid_index.get(uuid),
                                "eventType": int(res.eventType), "eventData": int(res.eventData)})
            return res
        if ans is None:
            ans = _plain(res)
        handle_args = [a for a in args if id(a) in self._handles]
        rest = [a for a in args if id(a) not in self._handles and isinstance(a, int)]
        key = name + (":" + ",".join(str(a) for a in rest) if rest else "")
        if name in _SYSTEM:
            self.system[key] = ans
        elif not handle_args:  # e.g. the UUID of an event's device: not a per-device answer
            pass
        else:
            i = self._handles[id(handle_args[0])]
            if name == "nvmlDeviceGetUUID" and isinstance(ans, str):
                self._uuid_index[ans] = i
            if name in _STATIC or not self.frames:
                self.devices[i][key] = ans
            else:
                self.frames[-1]["devices"][i][key] = ans
        if isinstance(res, Exception):
            raise res
        return res

    def trace(self, note: str = "") -> dict[str, Any]:
        return {"format": TRACE_FORMAT, "source": "recorded", "note": note, "system": self.system,
                "devices": self.devices, "frames": self.frames, "events": self.events,
                "missing": sorted(self.missing)}


def record(seconds: float, interval: float, note: str = "") -> dict[str, Any]:
    nv = B.open_backend()
    nv.nvmlShutdown()
    rec = RecordingNVML(nv)
    s = Sampler(rec)
    s.open()
    stop = threading.Event()

    def emit(_: dict[str, Any]) -> None:
        pass

    orig = s.sample

    def sample() -> dict[str, Any]:
        rec.new_frame()
        return orig()

    s.sample = sample  # type: ignore[method-assign]
    run_sampler(s, emit, interval, stop, duration_s=seconds)
    s.close()
    return rec.trace(note)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="record NVML answers into a swiftdoc fake-NVML trace")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--note", default="")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    try:
        tr = record(a.seconds, a.interval, a.note)
    except B.NvmlUnavailable as e:
        print(f"error: {e.message}")
        return 2
    with open(a.out, "w") as f:
        json.dump(tr, f, indent=1)
    print(f"{a.out}: {len(tr['frames'])} frames, {len(tr['devices'])} GPUs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
