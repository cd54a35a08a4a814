"""Saved records: `analyze --save` then `analyze --load` renders the same analysis with no log at hand."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

from tests.conftest import FIXTURES, ROOT


def sd(*args: str, cwd=ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "diagnose", *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_a_saved_record_renders_without_the_log(tmp_path):
    for name in ("multinode_kill_4x", "nan_4x"):
        src = tmp_path / name
        shutil.copytree(FIXTURES / name, src)
        rec = tmp_path / f"{name}.json"
        live_text = sd("analyze", str(src), "--save", str(rec)).stdout
        live_json = json.loads(sd("analyze", str(src), "--format", "json").stdout)
        shutil.rmtree(src)  # the log is gone
        assert sd("analyze", "--load", str(rec)).stdout == live_text
        loaded = json.loads(sd("analyze", "--load", str(rec), "--format", "json").stdout)
        assert loaded["primary"] == live_json["primary"] and loaded["culprit"] == live_json["culprit"]
        assert [f["rule"] for f in loaded["findings"]] == [f["rule"] for f in live_json["findings"]]
        md = sd("analyze", "--load", str(rec), "--format", "markdown").stdout
        assert md.startswith("## swiftdoc: ")
        doc = json.loads(rec.read_text())
        assert doc["kind"] == "swiftdoc.record" and doc["schema_version"] == 1


def test_bad_records_and_usage_are_one_line_errors(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"hello": 1}')
    p = sd("analyze", "--load", str(bad))
    assert p.returncode == 2 and p.stderr.startswith("error: ") and "not a swiftdoc record" in p.stderr
    bad.write_text('{"kind": "swiftdoc.record", "schema_version": 99}')
    assert "record schema 99" in sd("analyze", "--load", str(bad)).stderr
    assert sd("analyze").returncode == 2
    assert sd("analyze", str(FIXTURES / "nan_4x"), "--load", str(bad)).returncode == 2
