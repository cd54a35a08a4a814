"""The fake NVML backend against the real nvidia-ml-py module: same calls, same shapes, same constants.

No GPU needed: only pynvml's Python side is inspected (it imports without a driver).
"""
from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

from diagnose.nvml import backend as B
from diagnose.nvml.fake import CONSTANTS, FakeNVML, NVMLError
from diagnose.nvml.record import RecordingNVML
from diagnose.nvml.sampler import Sampler

ROOT = Path(__file__).resolve().parent.parent
TRACES = sorted((ROOT / "fixtures" / "nvml").glob("*.json"))
pynvml = pytest.importorskip("pynvml")


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _public_nvml(obj) -> set[str]:
    return {n for n in dir(obj) if n.startswith("nvml") and callable(getattr(obj, n)) and not n.startswith("nvmlEventType")}


def test_fake_implements_exactly_the_calls_swiftdoc_uses():
    # GIVEN the declared call list WHEN compared with the fake THEN they are the same set
    assert _public_nvml(FakeNVML) == set(B.USED_CALLS)


@pytest.mark.parametrize("name", B.USED_CALLS)
def test_every_used_call_exists_in_pynvml_with_compatible_arguments(name):
    real = getattr(pynvml, name)
    fake = getattr(FakeNVML, name)
    rp = [p for p in inspect.signature(inspect.unwrap(real)).parameters.values()]
    fp = [p for p in inspect.signature(fake).parameters.values()][1:]  # drop self
    required_real = [p for p in rp if p.default is inspect.Parameter.empty and p.kind is p.POSITIONAL_OR_KEYWORD]
    required_fake = [p for p in fp if p.default is inspect.Parameter.empty and p.kind is p.POSITIONAL_OR_KEYWORD]
    assert len(required_fake) == len(required_real), (name, rp, fp)


@pytest.mark.parametrize("name", B.USED_CONSTANTS)
def test_constants_match_pynvml(name):
    assert CONSTANTS[name] == getattr(pynvml, name)


def test_error_codes_match_pynvml():
    for attr, code in [("ERR_NOT_SUPPORTED", "NVML_ERROR_NOT_SUPPORTED"), ("ERR_NO_PERMISSION", "NVML_ERROR_NO_PERMISSION"),
                       ("ERR_FUNCTION_NOT_FOUND", "NVML_ERROR_FUNCTION_NOT_FOUND"), ("ERR_TIMEOUT", "NVML_ERROR_TIMEOUT"),
                       ("ERR_LIBRARY_NOT_FOUND", "NVML_ERROR_LIBRARY_NOT_FOUND"),
                       ("ERR_DRIVER_NOT_LOADED", "NVML_ERROR_DRIVER_NOT_LOADED"), ("ERR_GPU_IS_LOST", "NVML_ERROR_GPU_IS_LOST"),
                       ("ERR_ARGUMENT_VERSION_MISMATCH", "NVML_ERROR_ARGUMENT_VERSION_MISMATCH")]:
        assert getattr(B, attr) == getattr(pynvml, code)


def test_return_shapes_are_pynvml_shapes():
    nv = FakeNVML.from_trace(ROOT / "fixtures/nvml/h100x8_training.json", clock=Clock())
    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(0)
    u = nv.nvmlDeviceGetUtilizationRates(h)
    assert isinstance(u.gpu, int) and isinstance(u.memory, int)
    m = nv.nvmlDeviceGetMemoryInfo(h)
    assert m.total == m.free + m.used and m.total > 79 * 1024**3  # bytes, like c_nvmlMemory_t
    assert isinstance(nv.nvmlDeviceGetName(h), str)  # nvidia-ml-py >= 11.5 decodes to str
    assert nv.nvmlDeviceGetPowerUsage(h) > 1000  # milliwatts
    p = nv.nvmlDeviceGetComputeRunningProcesses(h)[0]
    assert {"pid", "usedGpuMemory", "gpuInstanceId", "computeInstanceId"} <= set(vars(p))
    with pytest.raises(NVMLError) as e:
        nv.nvmlDeviceGetHandleByIndex(99)
    assert e.value.value == 2


def test_uninitialised_calls_fail_like_nvml():
    nv = FakeNVML.from_trace(ROOT / "fixtures/nvml/h100x8_training.json")
    with pytest.raises(NVMLError) as e:
        nv.nvmlDeviceGetCount()
    assert e.value.value == 1  # NVML_ERROR_UNINITIALIZED


@pytest.mark.parametrize("trace", [t for t in TRACES if t.stem != "no_driver"], ids=lambda p: p.stem)
def test_every_fixture_trace_is_well_formed_and_synthetic_traces_say_so(trace):
    tr = json.loads(trace.read_text())
    assert tr["format"] == "swiftdoc-nvml-trace/1"
    assert tr["source"] in ("synthetic", "recorded")
    assert tr["devices"] and tr["frames"]
    assert all(len(f["devices"]) == len(tr["devices"]) for f in tr["frames"])
    source_md = (ROOT / "fixtures/nvml/SOURCE.md").read_text()
    assert trace.name in source_md


def test_recorder_round_trip_reproduces_the_samples():
    # GIVEN a backend (the fake stands in for a GPU) recorded through RecordingNVML
    clock = Clock()
    src = FakeNVML.from_trace(ROOT / "fixtures/nvml/t4_old_driver.json", clock=clock)
    rec = RecordingNVML(src, clock=clock)
    s = Sampler(rec, wall=clock)
    s.open()
    got = []
    for k in range(6):
        clock.t = k * 0.5
        rec.new_frame()
        got.append(s.sample())
    s.close()
    trace = rec.trace("round trip")
    # WHEN the trace is replayed by the fake at the same times
    clock2 = Clock()
    replay = FakeNVML.from_trace(json.loads(json.dumps(trace)), clock=clock2, loop=False)
    s2 = Sampler(replay, wall=clock2)
    s2.open()
    again = []
    for k in range(6):
        clock2.t = k * 0.5
        again.append(s2.sample())
    # THEN the sampler sees the same numbers, N/A included, and the missing calls are recorded
    assert [r["gpus"] for r in again] == [r["gpus"] for r in got]
    assert "nvmlDeviceGetCurrentClocksEventReasons" in trace["missing"]
