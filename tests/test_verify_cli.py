"""`swiftdoc verify` command line: usage errors, missing ms-swift, import hygiene (no real trials here)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from diagnose.cli import main

SCRIPT = "export USE_HF=1\nswift sft --model m --dataset d.jsonl --per_device_train_batch_size 2\n"


@pytest.fixture()
def script(tmp_path):
    p = tmp_path / "train.sh"
    p.write_text(SCRIPT)
    return p


@pytest.fixture()
def fake_swift(tmp_path):
    """An executable named swift that only prints a line and exits 99 (no training here)."""
    p = tmp_path / "bin" / "swift"
    p.parent.mkdir()
    p.write_text("#!/bin/sh\necho 'fake swift must not run' >&2\nexit 99\n")
    p.chmod(0o755)
    return str(p)


def test_no_patch_is_a_usage_error(script, fake_swift, capsys):
    assert main(["verify", str(script), "--swift", fake_swift]) == 2
    assert "no patch to verify" in capsys.readouterr().err


def test_missing_swift_cli_is_exit_3(script, tmp_path, capsys):
    assert main(["verify", str(script), "--set", "gradient_checkpointing=false", "--swift",
                 str(tmp_path / "nope")]) == 3
    assert "--swift" in capsys.readouterr().err


@pytest.mark.parametrize("args,msg", [
    (["--repeats", "1"], "--repeats"),
    (["--max-steps", "3"], "--max-steps"),
    (["--subset", "lots"], "--subset"),
    (["--max-steps", "10", "--warmup", "9"], "--warmup"),
    (["--set", "gradient_checkpointing"], "NAME=VALUE"),
])
def test_bad_options(script, fake_swift, capsys, args, msg):
    rc = main(["verify", str(script), "--swift", fake_swift, "--swift-version", "4.6.0",
               "--set", "gradient_checkpointing=false", *args])
    assert rc == 2 and msg in capsys.readouterr().err


def test_megatron_job_is_refused(tmp_path, fake_swift, capsys):
    p = tmp_path / "m.sh"
    p.write_text("megatron sft --model m --dataset d\n")
    assert main(["verify", str(p), "--set", "recompute_granularity=none", "--swift", fake_swift,
                 "--swift-version", "4.6.0"]) == 2
    assert "Megatron" in capsys.readouterr().err


def test_change_already_in_place_is_a_usage_error(script, fake_swift, capsys):
    assert main(["verify", str(script), "--set", "per_device_train_batch_size=2", "--swift", fake_swift,
                 "--swift-version", "4.6.0"]) == 2
    assert "changes nothing" in capsys.readouterr().err


def test_plan_and_log_together_refused(script, fake_swift, tmp_path, capsys):
    assert main(["verify", str(script), "--plan", str(tmp_path / "p.json"), "--log", str(tmp_path / "x.log"),
                 "--swift", fake_swift]) == 2


def test_log_gives_the_job_and_the_patch(fake_swift, capsys):
    # GIVEN a log whose diagnosis proposes max_length <= 256, and a `swift` that exits 99 at once
    log = Path(__file__).resolve().parent.parent / "fixtures" / "healthy_4x" / "train.log"
    rc = main(["verify", "--log", str(log), "--swift", fake_swift, "--swift-version", "4.6.0", "--format", "json",
               "--no-progress", "--max-steps", "10"])
    doc = json.loads(capsys.readouterr().out)
    # THEN the job is the logged `run sh:` command, the change comes from the rule, and a job that
    # cannot even start unpatched is `failed` on the baseline, which is never modified
    assert rc == 4 and doc["verdict"] == "failed" and doc["failure"]["arm"] == "baseline"
    assert doc["failure"]["returncode"] == 99 and "must not run" in doc["failure"]["log_tail"][-1]
    assert "run sh" in doc["job"]["source"]
    assert [(c["name"], c["value"], c["source"]) for c in doc["changes"]] == [("max_length", "256", "CFG005")]
    assert doc["changes"][0]["effect"] == "changes-training"


def test_importing_verify_pulls_no_heavy_modules():
    code = ("import sys, diagnose.commands.verify, diagnose.verify.experiment, diagnose.verify.render; "
            "print(sorted(m for m in ('torch', 'swift', 'pynvml', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr
