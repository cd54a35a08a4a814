"""GPU sampling during a trial, through the NVML sampler of `diagnose.nvml` when it can run here.

Contract:
- `probe_nvml() -> (ok, note)`: whether NVML can be used (the `diagnose.nvml`
  package is present, nvidia-ml-py is installed, a driver and a GPU answer, or
  `SWIFTDOC_FAKE_NVML` names a trace); the note says which GPUs, or why not.
  Never raises.
- `TrialSampler(indices, interval_s)`: `start()` opens NVML and samples in a
  daemon thread; `stop(t0, t1) -> dict | None` ends it and returns the
  `SampleSet.summary()` over the training window t0..t1 (unix seconds; the
  start-up is excluded), or None when nothing was sampled.  Errors in the
  sampler never fail a trial: they end up in `error`.
- `visible_indices(env) -> list[int] | None`: NVML indices from
  CUDA_VISIBLE_DEVICES when it lists plain integers (None: every GPU).
pynvml is imported only inside these functions (via diagnose.nvml.backend).
"""
from __future__ import annotations

import os
from typing import Any


def probe_nvml() -> tuple[bool, str]:
    try:
        from diagnose.nvml.backend import open_backend
    except ImportError:
        return False, "GPU metrics not sampled: the NVML sampler (diagnose.nvml) is not installed"
    try:
        nv = open_backend()
    except Exception as e:  # NvmlUnavailable and anything an odd driver throws
        msg = getattr(e, "message", None) or str(e)
        return False, f"GPU metrics not sampled: {msg}"
    try:
        n = nv.nvmlDeviceGetCount()
        src = getattr(nv, "SOURCE", "nvml")
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:
            pass
    return True, f"GPU metrics sampled with NVML ({n} GPU(s), source {src}) during each trial's training window"


def visible_indices(env: dict[str, str | None]) -> list[int] | None:
    v = env.get("CUDA_VISIBLE_DEVICES")
    if v is None:
        v = os.environ.get("CUDA_VISIBLE_DEVICES")
    if not v:
        return None
    try:
        return [int(x) for x in v.split(",") if x.strip()]
    except ValueError:
        return None  # UUIDs / MIG names: sample every GPU


class TrialSampler:
    def __init__(self, indices: list[int] | None = None, interval_s: float = 0.5):
        self.indices = indices
        self.interval_s = interval_s
        self.error: str | None = None
        self._thread: Any = None
        self._set: Any = None
        self._sampler: Any = None

    def start(self) -> None:
        try:
            from diagnose.nvml.backend import load_backend
            from diagnose.nvml.sampler import Sampler, SamplerThread
            from diagnose.nvml.samples import SampleSet

            self._sampler = Sampler(load_backend(), self.indices, procs=False, xid=False)
            header = self._sampler.open()
            self._set = SampleSet(header)
            self._thread = SamplerThread(self._sampler, self.interval_s, [self._set.add])
            self._thread.start()
        except Exception as e:
            self.error = f"NVML sampler failed to start: {e}"
            self._close()

    def _close(self) -> None:
        if self._sampler is not None:
            try:
                self._sampler.close()
            except Exception:
                pass
            self._sampler = None

    def stop(self, t0: float | None, t1: float | None) -> dict[str, Any] | None:
        if self._thread is not None:
            self._thread.stop()
            if self._thread.error is not None:
                self.error = f"NVML sampler stopped: {self._thread.error}"
        self._close()
        if self._set is None or not len(self._set):
            return None
        try:
            return self._set.summary(t0=t0, t1=t1)
        except Exception as e:
            self.error = f"NVML summary failed: {e}"
            return None
