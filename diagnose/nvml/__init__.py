"""GPU-side measurements: an NVML sampler, its samples file, and a fake NVML.

Contract:
- `backend.load_backend()` returns the `pynvml` module (imported lazily, never at
  import time of this package) or a `FakeNVML` when `SWIFTDOC_FAKE_NVML` names a
  trace; `backend.NvmlUnavailable` says why NVML cannot be used.
- `sampler.Sampler` reads one record per tick for every selected GPU; metrics
  the driver cannot report are `None` (N/A), never 0.  `sampler.run_sampler`
  keeps a drift-free schedule.
- `samples.load_samples(path) -> SampleSet`, `SampleSet.summary() -> dict`,
  `samples.find_samples_near(log_path)`: the samples file (JSON lines, format in
  docs/attach.md) read back for `analyze` and `attach`.

Importing this package (or `samples`) never imports pynvml, torch or swift.
"""
from __future__ import annotations

from diagnose.nvml.samples import SAMPLES_FILENAME, SampleSet, find_samples_near, load_samples

__all__ = ["SAMPLES_FILENAME", "SampleSet", "find_samples_near", "load_samples"]
