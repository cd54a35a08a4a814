"""The samples file: write, read back, summarise (None for N/A, never 0), discover, feed analyze."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diagnose.errors import InputError
from diagnose.nvml.fake import FakeNVML
from diagnose.nvml.sampler import Sampler
from diagnose.nvml.samples import (
    SAMPLES_FILENAME,
    SUMMARY_KEYS,
    SampleSet,
    SampleWriter,
    find_samples_near,
    load_samples,
)

ROOT = Path(__file__).resolve().parent.parent
TR = ROOT / "fixtures" / "nvml"
REQUIRED = ("gpu_count", "gpu_util_mean_pct", "gpu_util_p10_pct", "mem_util_mean_pct", "mem_used_max_gib",
            "mem_total_gib", "mem_headroom_frac", "pcie_rx_mean_mbps", "pcie_tx_mean_mbps", "power_mean_w",
            "power_limit_w", "throttle_reasons", "sm_clock_mean_mhz", "temperature_max_c", "xid_errors",
            "duration_s", "n_samples", "gpu_name")


def record(trace: str, n: int = 20, dt: float = 0.25, path: Path | None = None, marks=()) -> SampleSet:
    t = [0.0]
    s = Sampler(FakeNVML.from_trace(TR / f"{trace}.json", clock=lambda: t[0]), wall=lambda: 1000.0 + t[0])
    header = s.open()
    ss = SampleSet(header)
    w = SampleWriter(path) if path else None
    if w:
        w.write(header)
    for k in range(n):
        t[0] = k * dt
        rec = s.sample()
        ss.add(rec)
        if w:
            w.write(rec)
        for m in marks:
            if m["t"] == 1000.0 + t[0]:
                ss.add(m)
                if w:
                    w.write(m)
    if w:
        w.close()
    return ss


def test_summary_has_the_contract_keys():
    s = record("h100x8_training").summary()
    assert set(REQUIRED) <= set(SUMMARY_KEYS) <= set(s)
    assert s["gpu_count"] == 8 and s["gpu_name"] == "NVIDIA H100 80GB HBM3"
    assert 90 < s["gpu_util_mean_pct"] <= 100 and s["gpu_util_p10_pct"] <= s["gpu_util_mean_pct"]
    assert s["mem_total_gib"] == pytest.approx(81559 / 1024, abs=1e-3)
    assert s["mem_headroom_frac"] == pytest.approx(1 - s["mem_used_max_gib"] / s["mem_total_gib"], abs=1e-3)
    assert s["power_limit_w"] == 700.0 and s["xid_errors"] == 0 and s["n_samples"] == 20
    assert s["duration_s"] == pytest.approx(4.75)
    assert len(s["per_gpu"]) == 8


def test_na_metrics_are_none_never_zero():
    mig = record("a100_mig").summary()
    assert mig["gpu_util_mean_pct"] is None and mig["gpu_util_p10_pct"] is None and mig["mem_util_mean_pct"] is None
    assert mig["mig"] is True and mig["mem_headroom_frac"] is not None
    t4 = record("t4_old_driver").summary()
    assert t4["pcie_rx_mean_mbps"] is None and t4["pcie_tx_mean_mbps"] is None
    rtx = record("rtx4090_throttle_xid").summary()
    assert rtx["ecc_errors"] is None
    assert set(rtx["throttle_reasons"]) == {"sw_power_cap", "sw_thermal"}
    assert 0.2 < rtx["throttle_thermal_frac"] < 1 and rtx["throttle_power_frac"] == 1.0 and rtx["mem_headroom_frac"] < 0.05


def test_xid_counted():
    s = record("rtx4090_throttle_xid", n=20, dt=0.5).summary()
    assert s["xid_errors"] == 1 and s["xid_codes"] == [79]


def test_empty_set_is_all_none():
    s = SampleSet({"kind": "header", "schema": "swiftdoc-samples/1", "gpus": []}).summary()
    for k in REQUIRED:
        if k == "n_samples":
            assert s[k] == 0
        else:
            assert s[k] is None, k


def test_file_round_trip_and_partial_last_line(tmp_path):
    p = tmp_path / SAMPLES_FILENAME
    mem = record("a100x2_starved", path=p).summary()
    with p.open("a") as f:
        f.write('{"kind": "sample", "t": 12')  # the writer is mid-line
    disk = load_samples(p).summary()
    assert disk == mem


def test_several_sessions_in_one_file(tmp_path):
    p = tmp_path / "s.jsonl"
    record("a100x2_starved", n=5, path=p)
    record("a100x2_starved", n=7, path=p)
    assert len(load_samples(p)) == 12


def test_not_a_samples_file(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text('{"loss": 1.0}\n')
    with pytest.raises(InputError, match="not a swiftdoc samples file"):
        load_samples(p)
    with pytest.raises(InputError, match="no such samples file"):
        load_samples(tmp_path / "missing.jsonl")
    (tmp_path / "t.txt").write_text("hello\n")
    with pytest.raises(InputError):
        load_samples(tmp_path / "t.txt")


def test_window_from_step_marks():
    marks = [{"kind": "mark", "t": 1002.0, "event": "step", "step": 1}]
    ss = record("a100x2_starved", n=20, marks=marks)
    s = ss.summary()
    assert s["window"]["basis"] == "steps" and s["window"]["t0"] == 1002.0 and s["n_samples"] == 12
    assert ss.summary(t0=1000.0, t1=1001.0)["n_samples"] == 5


def test_window_active_skips_idle_lead_in():
    ss = SampleSet({"kind": "header", "schema": "swiftdoc-samples/1", "gpus": [{"index": 0, "name": "G"}]})
    for k in range(10):
        busy = k >= 4
        ss.add({"kind": "sample", "t": float(k), "gpus": [{"index": 0, "util_gpu_pct": 90 if busy else 0,
                                                            "procs": [{"pid": 1}] if busy else []}]})
    s = ss.summary()
    assert s["window"]["basis"] == "active" and s["n_samples"] == 6 and s["gpu_util_mean_pct"] == 90.0


def test_job_gpus_mark_restricts_the_summary():
    ss = record("h100x8_training", n=4)
    ss.add({"kind": "mark", "t": 1000.0, "event": "gpus", "gpus": [1, 3]})
    s = ss.summary()
    assert s["gpu_count"] == 2 and [g["index"] for g in s["per_gpu"]] == [1, 3]


def test_find_samples_near(tmp_path):
    out = tmp_path / "out"
    run = out / "v0-20260101-000000"
    run.mkdir(parents=True)
    (run / "logging.jsonl").write_text("")
    log = tmp_path / "train.log"
    log.write_text("x\n")
    assert find_samples_near(log) is None
    (run / SAMPLES_FILENAME).write_text("")
    assert find_samples_near(out) == run / SAMPLES_FILENAME  # the output dir's newest run folder
    assert find_samples_near(run) == run / SAMPLES_FILENAME
    assert find_samples_near(log, output_dir=run) == run / SAMPLES_FILENAME
    (tmp_path / SAMPLES_FILENAME).write_text("")
    assert find_samples_near(log) == tmp_path / SAMPLES_FILENAME


_num = st.one_of(st.none(), st.floats(min_value=0, max_value=100, allow_nan=False))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(_num, _num, _num), min_size=2, max_size=2), min_size=1, max_size=30))
def test_summary_properties(rows):
    # GIVEN any mix of present and N/A values on two GPUs
    ss = SampleSet({"kind": "header", "schema": "swiftdoc-samples/1",
                    "gpus": [{"index": 0, "name": "G"}, {"index": 1, "name": "G"}]})
    for k, row in enumerate(rows):
        ss.add({"kind": "sample", "t": float(k), "gpus": [
            {"index": i, "util_gpu_pct": u, "power_w": p,
             "mem_used_mib": None if m is None else m * 10, "mem_total_mib": 1000.0}
            for i, (u, p, m) in enumerate(row)]})
    s = ss.summary(t0=-1, t1=1e9)
    utils = [u for row in rows for (u, _, _) in row if u is not None]
    # THEN a metric never seen is None (not 0), a seen one stays within its range
    if not utils:
        assert s["gpu_util_mean_pct"] is None and s["gpu_util_p10_pct"] is None
    else:
        assert min(utils) - 0.1 <= s["gpu_util_mean_pct"] <= max(utils) + 0.1
        assert s["gpu_util_p10_pct"] <= s["gpu_util_mean_pct"] + 0.1
    if all(p is None for row in rows for (_, p, _) in row):
        assert s["power_mean_w"] is None
    mems = [m for row in rows for (_, _, m) in row if m is not None]
    if mems:
        assert 0.0 <= s["mem_headroom_frac"] <= 1.0
        assert math.isclose(s["mem_used_max_gib"], max(mems) * 10 / 1024, abs_tol=1e-3)
    else:
        assert s["mem_used_max_gib"] is None and s["mem_headroom_frac"] is None
    json.dumps(s, allow_nan=False)  # JSON-safe


# ---------------------------------------------------------------------------- CLI: sample, then analyze
def _cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "diagnose", *args], capture_output=True, text=True, timeout=120, **kw)


def test_sample_command_writes_a_file_analyze_reads(tmp_path):
    out = tmp_path / "s.jsonl"
    p = _cli("sample", "--fake-nvml", str(TR / "a100x2_starved.json"), "--interval", "0.05", "--count", "8",
             "--out", str(out))
    assert p.returncode == 0, p.stderr
    assert "8 samples" in p.stderr
    ss = load_samples(out)
    assert len(ss) == 8 and ss.ended
    log = ROOT / "fixtures" / "healthy_4x" / "train.log"
    a = _cli("analyze", str(log), "--samples", str(out), "--format", "json", "--features")
    assert a.returncode == 0, a.stderr
    feats = json.loads(a.stdout)["features"]
    assert feats["gpu_util_mean_pct"] is not None and feats["gpu_name"] == "A100-40GB"


def test_analyze_discovers_samples_next_to_the_log(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    src = ROOT / "fixtures" / "healthy_4x"
    for n in ("train.log",):
        (d / n).write_bytes((src / n).read_bytes())
    p = _cli("sample", "--fake-nvml", str(TR / "h100x8_training.json"), "--interval", "0.05", "--count", "4",
             "--out", str(d / SAMPLES_FILENAME))
    assert p.returncode == 0, p.stderr
    a = _cli("analyze", str(d / "train.log"), "--format", "json", "--features")
    assert json.loads(a.stdout)["features"]["gpu_util_mean_pct"] is not None


def test_sample_without_nvml_exits_3(tmp_path):
    p = _cli("sample", "--fake-nvml", str(TR / "no_driver.json"), "--count", "1", "--out", str(tmp_path / "s"))
    assert p.returncode == 3 and "error:" in p.stderr and "hint:" in p.stderr


def test_sample_bad_gpu_index(tmp_path):
    p = _cli("sample", "--fake-nvml", str(TR / "a100x2_starved.json"), "--gpus", "7", "--count", "1",
             "--out", str(tmp_path / "s"))
    assert p.returncode == 2 and "no such GPU" in p.stderr


def test_analyze_with_samples_never_imports_pynvml(tmp_path):
    out = tmp_path / "s.jsonl"
    record("h100x8_training", n=3, path=out)
    code = ("import sys\nfrom diagnose.cli import main\n"
            f"rc = main(['analyze', {str(ROOT / 'fixtures/healthy_4x/train.log')!r}, '--samples', {str(out)!r}, "
            "'--format', 'json'])\n"
            "bad = [m for m in ('pynvml', 'torch', 'swift') if m in sys.modules]\n"
            "assert rc == 0 and not bad, bad\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr


def test_the_throttled_gpu_is_named_as_the_straggler(tmp_path):
    """fixtures/nvml/h100x4_straggler (synthetic, through the real sampler): GPU 2 thermally throttled."""
    from diagnose.features.gpu import stragglers_of
    from diagnose.parse import parse_run
    from diagnose.pipeline import analyze_run

    summ = record("h100x4_straggler", n=30).summary()
    s = stragglers_of(summ)
    assert [x["gpu"] for x in s] == [2] and 1.35 < s[0]["slowdown"] < 1.6
    assert "thermal" in s[0]["evidence"] and "°C" in s[0]["evidence"]
    assert stragglers_of(record("h100x8_training", n=30).summary()) == []  # an occasional power cap is no straggler
    d = analyze_run(parse_run([str(ROOT / "fixtures" / "healthy_4x")]), samples=summ)
    assert [x["gpu"] for x in d.stragglers] == [2]
    nc = next(f for f in d.findings if f.rule == "NC009")
    assert "GPU 2 runs 1." in nc.evidence and nc.confidence == "probable"


def test_a_gpu_at_full_clock_that_the_others_wait_for_is_named_with_its_narrow_link():
    """fixtures/nvml/h100x4_pcie_straggler (synthetic, through the real sampler): GPU 1's link at x4 of x16."""
    from diagnose.features.gpu import stragglers_of

    summ = record("h100x4_pcie_straggler", n=30).summary()
    per = {g["index"]: g for g in summ["per_gpu"]}
    assert (per[1]["pcie_width"], per[1]["pcie_max_width"], per[0]["pcie_width"]) == (4, 16, 16)
    (s,) = stragglers_of(summ)
    # same SM clock on every GPU: named by its utilisation against the others' (they idle waiting for it)
    assert s["gpu"] == 1 and 1.3 < s["slowdown"] < 1.45
    assert "busy 9" in s["evidence"] and "PCIe link x4 of x16 (the others x16)" in s["evidence"]
    # the throttled trace still names GPU 2 by clock, and a healthy 8-GPU job has no straggler
    assert [x["gpu"] for x in stragglers_of(record("h100x4_straggler", n=30).summary())] == [2]
