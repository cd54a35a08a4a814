"""End to end with the real trainer: a tiny `swift sft` on CPU, then parse and analyze its output.

Skipped (with the reason) when ms-swift is not installed: `pip install -e '.[swift]'`.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "fixtures"))

SWIFT = shutil.which("swift", path=str(Path(sys.executable).parent)) or shutil.which("swift")
pytestmark = [pytest.mark.swift, pytest.mark.skipif(SWIFT is None, reason="ms-swift CLI not installed (pip install -e '.[swift]')")]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    import tinyjob

    d = tmp_path_factory.mktemp("tiny")
    model = tinyjob.build_tiny_model(d / "model")
    data = tinyjob.build_dataset(d / "data.jsonl", n=120)
    return tinyjob, d, model, data


def test_real_swift_sft_parses_and_analyzes(tiny):
    tinyjob, d, model, data = tiny
    out = d / "out"
    log = d / "train.log"
    argv = tinyjob.sft_argv(model, data, out, swift=SWIFT, max_steps=12)
    rc = tinyjob.run_swift(argv, log, timeout=900)
    assert rc == 0, log.read_text(errors="replace")[-3000:]
    run_dir = tinyjob.find_run_dir(out)
    assert run_dir is not None and (run_dir / "logging.jsonl").exists()

    p = subprocess.run([sys.executable, "-m", "diagnose", "parse", str(log), "--format", "json"], capture_output=True, timeout=120)
    got = json.loads(p.stdout)
    assert got["swift_version"] == "4.6.0"
    assert got["steps"] == 12 and got["max_steps"] == 12 and got["world_size"] == 1
    assert got["last_step"]["step"] == 12
    assert got["dataset"]["size"] > 0

    # the output dir alone (logging.jsonl + args.json) gives the same steps
    p2 = subprocess.run([sys.executable, "-m", "diagnose", "parse", str(run_dir), "--format", "json"], capture_output=True, timeout=120)
    got2 = json.loads(p2.stdout)
    assert got2["steps"] == 12 and got2["swift_version"] == "4.6.0"
    assert abs(got2["last_step"]["loss"] - got["last_step"]["loss"]) < 1e-3

    a = subprocess.run([sys.executable, "-m", "diagnose", "analyze", str(log), "--format", "json"], capture_output=True, timeout=120)
    diag = json.loads(a.stdout)
    assert diag["primary"]["category"] == "healthy", diag["findings"]
    # a healthy run prints warnings (ms-swift's trust_remote_code notice, torch's pin_memory UserWarning), nothing else
    assert {e["kind"] for e in diag["run"]["events"]} <= {"logged_warning", "py_warning"}, diag["run"]["events"]
