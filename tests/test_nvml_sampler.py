"""The NVML sampler over the fake backend: N/A is never 0, old drivers, MIG, XID, drift-free timing.

Real-GPU checks live at the end and skip with the reason when there is no NVML.
"""
from __future__ import annotations

import threading
from pathlib import Path

import pytest

from diagnose.nvml import backend as B
from diagnose.nvml.fake import FakeNVML
from diagnose.nvml.sampler import GPU_KEYS, Sampler, run_sampler, throttle_names

ROOT = Path(__file__).resolve().parent.parent
TR = ROOT / "fixtures" / "nvml"


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _open(name: str, **kw):
    clock = Clock()
    nv = FakeNVML.from_trace(TR / f"{name}.json", clock=clock)
    s = Sampler(nv, wall=lambda: 1_000_000.0 + clock.t, **kw)
    header = s.open()
    return s, nv, clock, header


def test_healthy_h100_sample_has_every_metric():
    s, nv, clock, header = _open("h100x8_training")
    rec = s.sample()
    assert rec["kind"] == "sample" and len(rec["gpus"]) == 8
    g = rec["gpus"][0]
    assert set(g) == set(GPU_KEYS)
    assert all(g[k] is not None for k in GPU_KEYS)
    assert 0 <= g["util_gpu_pct"] <= 100
    assert g["mem_total_mib"] == 81559.0 and g["power_limit_w"] == 700.0
    assert g["procs"][0]["pid"] == 24242
    assert header["driver_version"] == "550.54.15" and header["gpus"][0]["unsupported"] == []


def test_mig_metrics_are_na_not_zero():
    s, *_ = _open("a100_mig")
    g = s.sample()["gpus"][0]
    # GIVEN a MIG-enabled GPU WHEN sampled THEN utilisation and processes are N/A (None), never 0
    assert g["util_gpu_pct"] is None and g["util_mem_pct"] is None and g["procs"] is None
    assert g["mem_used_mib"] is not None and g["power_w"] is not None
    assert s.header["gpus"][0]["mig"] is True
    assert {"util", "procs"} <= set(s.header["gpus"][0]["unsupported"])


def test_old_driver_uses_the_older_calls():
    s, *_ = _open("t4_old_driver")
    g = s.sample()["gpus"][0]
    assert g["throttle"] is not None  # fell back to nvmlDeviceGetCurrentClocksThrottleReasons
    assert g["procs"] and g["procs"][0]["pid"] == 5150  # fell back to the v2 process list
    assert g["pcie_tx_mbps"] is None and g["pcie_rx_mbps"] is None
    assert s.header["driver_version"].startswith("470")


def test_consumer_board_na_fields():
    s, *_ = _open("rtx4090_throttle_xid")
    g = s.sample()["gpus"][0]
    assert g["ecc_uncorrected"] is None  # NotSupported on GeForce
    assert g["procs"] == [{"pid": 7777, "mem_mib": None}]  # usedGpuMemory not available -> None
    assert s.header["gpus"][0]["mig"] is None


def test_unsupported_metric_is_not_asked_again():
    s, nv, clock, _ = _open("a100_mig")
    s.sample()
    before = nv.calls
    s.sample()
    per_tick = nv.calls - before
    s2, nv2, _, _ = _open("h100x8_training", indices=[0])
    s2.sample()
    b2 = nv2.calls
    s2.sample()
    assert per_tick < nv2.calls - b2  # MIG skips the calls found NotSupported


def test_transient_error_is_na_for_that_tick_only():
    tr = {"format": "swiftdoc-nvml-trace/1", "system": {}, "devices": [{"nvmlDeviceGetName": "X"}],
          "frames": [{"t": 0.0, "devices": [{"nvmlDeviceGetPowerUsage": {"error": B.ERR_GPU_IS_LOST}}]},
                     {"t": 1.0, "devices": [{"nvmlDeviceGetPowerUsage": 123000}]}]}
    clock = Clock()
    s = Sampler(FakeNVML.from_trace(tr, clock=clock, loop=False), wall=clock)
    s.open()
    assert s.sample()["gpus"][0]["power_w"] is None
    clock.t = 1.5
    assert s.sample()["gpus"][0]["power_w"] == 123.0


def test_xid_event_is_reported_with_gpu_and_code():
    s, nv, clock, header = _open("rtx4090_throttle_xid")
    assert header["gpus"][0]["xid_readable"] is True
    clock.t = 1.0
    assert "xid" not in s.sample()
    clock.t = 5.0
    rec = s.sample()
    assert rec["xid"] == [{"t": 1_000_005.0, "index": 0, "xid": 79}]
    assert "xid" not in s.sample()  # each event once


def test_throttle_names():
    assert throttle_names(None) is None
    assert throttle_names(0) == []
    assert throttle_names(0x4 | 0x20) == ["sw_power_cap", "sw_thermal"]


def test_gpu_subset():
    s, *_ = _open("h100x8_training", indices=[2, 5])
    assert [g["index"] for g in s.sample()["gpus"]] == [2, 5]


def test_no_driver_is_an_environment_error():
    with pytest.raises(B.NvmlUnavailable) as e:
        B.open_backend(TR / "no_driver.json")
    assert e.value.exit_code == 3 and "driver" in e.value.message


def test_fake_backend_from_environment(monkeypatch):
    monkeypatch.setenv(B.FAKE_ENV, str(TR / "a100x2_starved.json"))
    nv = B.open_backend()
    assert nv.SOURCE == "fake:a100x2_starved" and nv.nvmlDeviceGetCount() == 2


# ---------------------------------------------------------------------------- timing
class FakeTime:
    """monotonic() + wait(): waiting advances the clock; each sample costs `cost(k)` seconds."""

    def __init__(self, cost):
        self.t = 100.0
        self.cost = cost
        self.k = 0
        self.stamps: list[float] = []

    def monotonic(self) -> float:
        return self.t

    def wait(self, dt: float) -> None:
        assert dt > 0
        self.t += dt


class _S:
    def __init__(self, ft: FakeTime):
        self.ft = ft

    def sample(self):
        self.ft.stamps.append(self.ft.t)
        self.ft.t += self.ft.cost(self.ft.k)
        self.ft.k += 1
        return {"kind": "sample"}


def test_schedule_does_not_drift():
    # GIVEN samples that cost 3-37 ms each WHEN sampling at 10 Hz for 1000 ticks
    ft = FakeTime(lambda k: 0.003 + (k % 7) * 0.005)
    n = run_sampler(_S(ft), lambda r: None, 0.1, threading.Event(), count=1000, monotonic=ft.monotonic, wait=ft.wait)
    # THEN tick k starts at start + k * interval exactly: the error does not accumulate
    assert n == 1000
    errs = [abs(s - (100.0 + k * 0.1)) for k, s in enumerate(ft.stamps)]
    assert max(errs) < 1e-6


def test_stalled_tick_is_skipped_not_bunched():
    # a driver call stalls for 0.35 s at tick 3: ticks 4-6 are skipped, the phase is kept
    ft = FakeTime(lambda k: 0.35 if k == 3 else 0.001)
    run_sampler(_S(ft), lambda r: None, 0.1, threading.Event(), count=8, monotonic=ft.monotonic, wait=ft.wait)
    starts = [round(s - 100.0, 6) for s in ft.stamps]
    assert starts[:4] == [0.0, 0.1, 0.2, 0.3]
    assert starts[4] == 0.7  # next deadline on the original grid
    assert all(abs((s * 10) - round(s * 10)) < 1e-6 for s in starts)


def test_duration_limit():
    ft = FakeTime(lambda k: 0.001)
    n = run_sampler(_S(ft), lambda r: None, 0.5, threading.Event(), duration_s=2.0, monotonic=ft.monotonic,
                    wait=ft.wait)
    assert n == 5  # t = 0, 0.5, 1.0, 1.5, 2.0


# ---------------------------------------------------------------------------- real GPU
def _real_nvml():
    try:
        nv = B.open_backend()
    except B.NvmlUnavailable as e:
        pytest.skip(f"needs an NVIDIA GPU with NVML: {e.message}")
    return nv


@pytest.mark.gpu
def test_real_gpu_sampling():
    nv = _real_nvml()
    nv.nvmlShutdown()
    s = Sampler(nv)
    header = s.open()
    recs = [s.sample() for _ in range(3)]
    s.close()
    assert header["gpus"] and header["driver_version"]
    for g in recs[-1]["gpus"]:
        assert set(g) == set(GPU_KEYS)
        assert g["mem_total_mib"] and g["mem_total_mib"] > 1000
        # anything the driver cannot answer is listed as unsupported and comes back None
        for key in header["gpus"][0]["unsupported"]:
            assert key != "mem"


@pytest.mark.gpu
def test_real_gpu_sampler_cost_is_small():
    import time

    nv = _real_nvml()
    nv.nvmlShutdown()
    s = Sampler(nv)
    s.open()
    t0 = time.process_time()
    for _ in range(50):
        s.sample()
    per_tick = (time.process_time() - t0) / 50
    s.close()
    assert per_tick < 0.01 * max(1, len(s.gpus))  # far below 10 ms per GPU per tick
