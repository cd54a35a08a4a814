"""Sampler cost: CPU used by NVML sampling at 10 Hz for 8 GPUs (fake backend), and schedule accuracy.

    python bench/bench_sampler.py [--seconds 20] [--interval 0.1] [--trace fixtures/nvml/h100x8_training.json]

Runs the real `Sampler` + `run_sampler` loop, writing every record to a samples
file and keeping it in memory like `attach` does, and prints: CPU time as % of one
core (target <= 1 %), cost per tick, NVML calls per tick, and how far tick starts
strayed from the k*interval grid (drift).  With a GPU, `--real` measures the
real driver instead of the fake.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from diagnose.nvml.backend import open_backend  # noqa: E402
from diagnose.nvml.sampler import Sampler, run_sampler  # noqa: E402
from diagnose.nvml.samples import SampleSet, SampleWriter  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--interval", type=float, default=0.1)
    ap.add_argument("--trace", default=str(ROOT / "fixtures/nvml/h100x8_training.json"))
    ap.add_argument("--real", action="store_true", help="use the real NVML (needs a GPU)")
    a = ap.parse_args()

    nv = open_backend(None if a.real else a.trace)
    nv.nvmlShutdown()
    s = Sampler(nv)
    header = s.open()
    n_gpus = len(s.gpus)
    calls0 = getattr(nv, "calls", None)
    out = Path(tempfile.mkdtemp()) / "samples.jsonl"
    w = SampleWriter(out)
    w.write(header)
    kept = SampleSet(header)
    starts: list[float] = []
    t_start = [0.0]

    def emit(rec: dict) -> None:
        w.write(rec)
        kept.add(rec)

    orig = s.sample

    def timed_sample() -> dict:
        starts.append(time.monotonic())
        return orig()

    s.sample = timed_sample  # type: ignore[method-assign]
    stop = threading.Event()
    c0 = time.process_time()
    w0 = time.monotonic()
    t_start[0] = w0
    n = run_sampler(s, emit, a.interval, stop, duration_s=a.seconds)
    wall = time.monotonic() - w0
    cpu = time.process_time() - c0
    s.close()
    w.close()

    grid = [abs(t - (starts[0] + k * a.interval)) for k, t in enumerate(starts)]
    late = [t - (starts[0] + k * a.interval) for k, t in enumerate(starts)]
    per_tick_ms = 1000 * cpu / max(n, 1)
    print(f"backend            {'real NVML' if a.real else 'fake: ' + Path(a.trace).name}")
    print(f"GPUs               {n_gpus}")
    print(f"interval           {a.interval:g} s ({1 / a.interval:g} Hz) for {wall:.1f} s: {n} samples")
    print(f"CPU                {cpu:.3f} s = {100 * cpu / wall:.2f} % of one core (target <= 1 %)")
    print(f"cost per tick      {per_tick_ms:.3f} ms ({per_tick_ms / max(n_gpus, 1):.3f} ms per GPU), "
          f"JSON line {out.stat().st_size / max(n + 1, 1):.0f} bytes")
    if calls0 is not None:
        print(f"NVML calls / tick  {(nv.calls - calls0) / max(n, 1):.1f}")
    print(f"tick start vs grid median {1000 * statistics.median(grid):.3f} ms, max {1000 * max(grid):.3f} ms, "
          f"last tick {1000 * late[-1]:+.3f} ms (no accumulated drift)")
    return 0 if 100 * cpu / wall <= 1.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
