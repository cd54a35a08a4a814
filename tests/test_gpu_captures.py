"""What the real H200 captures (fixtures/gpu_h200_*, fixtures/nvml/h200_swift_full_recorded.json) teach.

Each test reads a real GPU run's own bytes: torch's OOM message naming another process, a samples file whose job
held the GPU ~50 s before its first kernel, the probe's CUDA fields, a recorded NVML trace.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from diagnose.nvml.fake import FakeNVML
from diagnose.nvml.sampler import Sampler
from diagnose.nvml.samples import load_samples
from diagnose.parse import parse_run
from diagnose.parse.events import _oom_detail
from diagnose.pipeline import analyze_run

ROOT = Path(__file__).resolve().parent.parent
FX = ROOT / "fixtures"


def _oom_line(d: Path) -> str:
    return next(ln for ln in (d / "train.log").read_text().splitlines() if "OutOfMemoryError: CUDA out of memory" in ln)


def test_oom_message_gives_the_other_processes_and_this_ones_memory():
    d = _oom_detail(None, _oom_line(FX / "gpu_h200_oom_other_process_4x"))  # type: ignore[arg-type]
    assert d["others_gib"] == 136.79 and d["other_pids"] == [853]
    assert d["self_gib"] == 2.94 and d["capacity_gib"] == 139.8
    # a message without the process list (older torch) gives neither
    old = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 96.00 MiB (GPU 1; 31.75 GiB total "
           "capacity; 30.97 GiB already allocated; 61.50 MiB free; 30.99 GiB reserved in total by PyTorch)")
    assert "others_gib" not in _oom_detail(None, old)  # type: ignore[arg-type]
    # only this process listed: no others
    own = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 674.00 MiB. GPU 1 has a total capacity of "
           "79.14 GiB of which 100.75 MiB is free. Including non-PyTorch memory, this process has 79.03 GiB memory in use.")
    d2 = _oom_detail(None, own)  # type: ignore[arg-type]
    assert "others_gib" not in d2 and d2["self_gib"] == 79.03


def test_oom_with_the_card_held_by_another_process_is_not_told_to_shrink_its_batch():
    diag = analyze_run(parse_run([str(FX / "gpu_h200_oom_other_process_4x")]))
    top = diag.findings[0]
    assert top.rule == "OOM013" and top.category == "oom"
    assert "OOM001" not in {f.rule for f in diag.findings}
    flags = {op.flag for f in diag.findings for r in f.remedies for op in r.ops}
    assert not flags & {"per_device_train_batch_size", "max_length"}
    assert "136.8 GiB" in top.evidence and "98%" in top.evidence


def test_samples_window_starts_at_the_first_kernel_not_at_the_model_load():
    ss = load_samples(FX / "gpu_h200_full_4x" / "swiftdoc-samples.jsonl")
    recs = [r for r in ss.records]
    util = [r["gpus"][0]["util_gpu_pct"] for r in recs]
    procs = [bool(r["gpus"][0]["procs"]) for r in recs]
    first_proc, first_busy = procs.index(True), next(i for i, u in enumerate(util) if u)
    assert first_busy - first_proc >= 10  # the job held the GPU for seconds before its first kernel
    s = ss.summary()
    assert s["window"]["basis"] == "active"
    assert s["window"]["t0"] == recs[first_busy]["t"]
    busy_part = util[first_busy:]
    assert s["gpu_util_mean_pct"] == round(sum(busy_part) / len(busy_part), 1)


def test_idle_gpu_from_nvml_alone_is_a_probable_data_wait_that_names_the_probe():
    out = subprocess.run([sys.executable, "-m", "diagnose", "analyze", str(FX / "gpu_h200_full_4x"), "--format",
                          "json"], capture_output=True, text=True, cwd=ROOT)
    rep = json.loads(out.stdout)
    dl = next(f for f in rep["findings"] if f["rule"] == "DL001")
    assert dl["confidence"] == "probable"
    assert any("probe" in (r.get("note") or "") + r["title"] for r in dl["remedies"])


def test_probe_records_from_a_real_gpu_carry_the_cuda_fields():
    rows = [json.loads(x) for x in (FX / "gpu_h200_probe_4x/swiftdoc-probe/rank0.jsonl").read_text().splitlines()]
    assert rows[0]["kind"] == "header" and rows[0]["device"] == "cuda:0"
    steps = [r for r in rows if r.get("kind") == "step"]
    assert len(steps) == 40
    for r in steps[2:]:
        assert r["alloc_gib"] > 0 and r["reserved_gib"] >= r["alloc_gib"]
        assert r["gpu_fb_s"] is not None and 0 < r["gpu_fb_s"] <= r["wall_s"] * 1.05
    diag = analyze_run(parse_run([str(FX / "gpu_h200_probe_4x")]))
    assert diag.primary.category == "healthy"


def test_recorded_h200_trace_replays_through_the_sampler():
    tr = json.loads((FX / "nvml" / "h200_swift_full_recorded.json").read_text())
    assert tr["source"] == "recorded"
    nv = FakeNVML.from_trace(tr)
    s = Sampler(nv)
    header = s.open()
    g = header["gpus"][0]
    assert g["name"] == "NVIDIA H200" and g["mem_total_mib"] == 143771 and g["unsupported"] == []
    rec = s.sample()
    assert set(rec["gpus"][0]) >= {"util_gpu_pct", "mem_used_mib", "power_w", "sm_clock_mhz"}
    s.close()
