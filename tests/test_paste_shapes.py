"""What users paste, shape by shape (tests/data/paste_shapes.yaml), through the real parser."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from diagnose.parse import parse_text
from diagnose.pipeline import analyze_run

CASES = yaml.safe_load((Path(__file__).parent / "data" / "paste_shapes.yaml").read_text(encoding="utf-8"))


def _eq(got, want) -> bool:
    if isinstance(want, float) and math.isinf(want):
        return got == want
    if isinstance(want, float) and math.isnan(want):
        return isinstance(got, float) and math.isnan(got)
    if isinstance(want, float):
        return got is not None and abs(got - want) <= 1e-9 * max(1.0, abs(want))
    return got == want


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_paste_shape(case):
    run = parse_text(case["text"])
    exp = case["expect"]
    t = run.steps
    kinds = {e.kind for e in run.events}
    if "steps" in exp:
        assert len(t) == exp["steps"]
    if "steps_with_number" in exp:
        assert int((~np.isnan(t["step"])).sum()) == exp["steps_with_number"]
    last = t.last() or {}
    for key, col in (("last_step", "step"), ("last_loss", "loss"), ("last_grad_norm", "grad_norm")):
        if key in exp:
            assert _eq(last.get(col), exp[key]), (key, last)
    if "max_steps" in exp:
        assert run.max_steps == exp["max_steps"]
    if "trainer" in exp:
        assert run.trainer == exp["trainer"]
    for k in exp.get("kinds", []):
        assert k in kinds, kinds
    for k in exp.get("no_kinds", []):
        assert k not in kinds, kinds
    if "excerpt" in exp:
        feats = analyze_run(run).features
        assert feats["excerpt"] is exp["excerpt"]
    if "progress_step" in exp:
        assert (run.progress or {}).get("step") == exp["progress_step"]
    if "s_per_it" in exp:
        assert _eq(run.progress["s_per_it"], exp["s_per_it"])
    if "preprocess" in exp:
        assert run.preprocess and run.preprocess[-1]["what"] == exp["preprocess"]
    if "evals" in exp:
        assert len(run.evals) == exp["evals"]
    if "timers" in exp:
        assert len(run.timers) == exp["timers"]
    if "iter_times" in exp:
        assert len(run.iter_times) == exp["iter_times"]
    snap = run.snapshot or {}
    if "snapshot_gpus" in exp:
        assert len(snap.get("gpus") or []) == exp["snapshot_gpus"]
    if "snapshot_total_gib" in exp:
        assert _eq(snap["gpus"][0]["mem_total_gib"], exp["snapshot_total_gib"])
    if "shm_gib" in exp:
        assert _eq(snap["shm"]["size_gib"], exp["shm_gib"])
    if "host_total_gib" in exp:
        assert _eq(snap["host_mem"]["total_gib"], exp["host_total_gib"])


def test_utf16_capture_reads_like_utf8(tmp_path: Path):
    """PowerShell's `>` writes UTF-16 with a BOM: the same log must parse the same."""
    text = "[INFO:swift] swift.__version__: 4.6.0\r\n{'loss': '5.794', 'grad_norm': '1.482', 'learning_rate': '9.938e-05', " \
           "'token_acc': '0', 'epoch': '0.02', 'global_step/max_steps': '1/20', 'elapsed_time': '0s', " \
           "'remaining_time': '1s', 'train_speed(s/it)': '0.04997'}\r\n"
    from diagnose.parse import parse_run

    p = tmp_path / "ps.log"
    p.write_bytes(text.encode("utf-16"))
    run = parse_run([str(p)])
    assert run.swift_version == "4.6.0" and len(run.steps) == 1 and run.steps.last()["loss"] == pytest.approx(5.794)


def test_resumed_excerpt_speed_comes_from_printed_elapsed_time():
    """4.x s/it counts from the resume step; an excerpt carries no --resume_from_checkpoint, elapsed_time tells it."""
    rows = []
    for k, (step, el, spi) in enumerate([(2170, "1h 36m 33s", 15.655882), (2175, "1h 37m 45s", 15.641157),
                                         (2180, "1h 38m 56s", 15.621268), (2185, "1h 40m 7s", 15.601609)]):
        rows.append('{"loss": 0.3, "grad_norm": 0.3, "learning_rate": 1e-05, "epoch": 1.3, '
                    f'"global_step/max_steps": "{step}/3228", "elapsed_time": "{el}", "train_speed(s/it)": {spi}}}')
    run = parse_text("\n".join(rows) + "\n")
    iv = run.steps["interval_s"][1:]
    assert np.all((iv > 13) & (iv < 16)), iv  # ~14.3 s/step; ignoring the resume gives ~7 s/step
