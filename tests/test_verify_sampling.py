"""verify's side measurements: the NVML sampler during a trial (fake NVML) and CPU contention by other processes."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from diagnose.verify.contention import CpuMonitor, contended
from diagnose.verify.sampling import TrialSampler, probe_nvml, visible_indices

FAKE = Path(__file__).resolve().parent.parent / "fixtures" / "nvml" / "h100x8_training.json"


def test_nvml_probe_and_training_window(monkeypatch):
    monkeypatch.setenv("SWIFTDOC_FAKE_NVML", str(FAKE))
    ok, note = probe_nvml()
    assert ok and "8 GPU" in note
    s = TrialSampler([0, 1], interval_s=0.05)
    s.start()
    time.sleep(0.4)
    t = time.time()
    summary = s.stop(t - 0.3, t)
    assert s.error is None and summary["gpu_count"] == 2 and summary["gpu_util_mean_pct"] is not None


def test_no_nvml_is_a_note_not_an_error(monkeypatch):
    monkeypatch.setenv("SWIFTDOC_FAKE_NVML", str(FAKE.parent / "no_driver.json"))
    ok, note = probe_nvml()
    assert not ok and note.startswith("GPU metrics not sampled")


def test_visible_indices():
    assert visible_indices({"CUDA_VISIBLE_DEVICES": "2,3"}) == [2, 3]
    assert visible_indices({"CUDA_VISIBLE_DEVICES": "GPU-1234"}) is None


def test_contended_rule():
    assert contended(1.0, 0.4, 2)  # waited 40% of the interval, another job held a core
    assert not contended(1.0, 0.01, 2)  # another job on an idle core does not slow the trial
    assert not contended(0.05, 0.6, 2)  # waiting on its own threads is the job's own behaviour
    assert not contended(1.0, 0.4, 64)  # one core of 64 is noise


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="needs Linux /proc")
def test_monitor_sees_other_processes_taking_the_cpus():
    # GIVEN a busy loop in this process and one CPU hog per core
    n = os.cpu_count() or 1
    m = CpuMonitor()
    m.watch(os.getpid())
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        time.sleep(0.3)
        m.sample()
        t0 = m.t[-1]
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            pass
        m.sample()
        ext, wait = m.interval_load(t0, m.t[-1])
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    # THEN the hogs show up as external load, and this process waited for a CPU
    assert ext >= 0.5 * n and wait > 0.1
    assert contended(ext, wait, m.ncpu)
    assert m.own_cpu(t0, m.t[-1]) > 0.1
