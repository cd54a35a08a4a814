"""Every `--format json` document validates against its published schema (docs/schemas/*.schema.json).

analyze and parse JSON of every fixture folder and of every real-world excerpt, lint JSON of the script corpus:
built the way the CLI builds them, checked with jsonschema against the files in docs/ (which
tools/gen_docs.py --check keeps equal to the models in diagnose/outputs.py).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from diagnose.parse import parse_run
from diagnose.pipeline import analyze_run
from diagnose.render.analysis_json import diagnosis_json
from diagnose.render.run_json import run_summary
from tests.conftest import FIXTURES, ROOT, fixture_dirs

SCHEMAS = ROOT / "docs" / "schemas"


def _validator(name: str) -> jsonschema.protocols.Validator:
    schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


ANALYZE, PARSE, LINT = _validator("analyze"), _validator("parse"), _validator("lint")
INPUTS = [str(d) for d in fixture_dirs()] + sorted(str(p) for p in (FIXTURES / "realworld" / "cases").iterdir())


@pytest.mark.parametrize("path", INPUTS, ids=[Path(p).name for p in INPUTS])
def test_analyze_and_parse_json_match_their_schemas(path):
    run = parse_run([path])
    diag = analyze_run(run)
    doc = json.loads(json.dumps(diagnosis_json(diag, run, features=True)))  # exactly what the CLI prints
    ANALYZE.validate(doc)
    PARSE.validate(json.loads(json.dumps(run_summary(run))))
    assert doc["schema_version"] == 2 and doc["primary"]["confidence"] in ("certain", "probable", "weak")
    for f in doc["findings"]:
        assert not f["lines"] or f["file"] == run.line_file


def test_lint_json_matches_its_schema():
    env = dict(os.environ, SWIFTDOC_SWIFT_PYTHON="/nonexistent")
    p = subprocess.run([sys.executable, "-m", "diagnose", "lint", str(FIXTURES / "scripts"), "--swift-version", "4.6.0",
                        "--no-swift-check", "--format", "json"], capture_output=True, cwd=ROOT, timeout=300, env=env)
    assert p.returncode in (0, 1), p.stderr
    doc = json.loads(p.stdout)
    LINT.validate(doc)
    assert doc["summary"]["files"] >= 30 and all(pr["code"][:2] in ("SW", "SH", "SD") for f in doc["files"]
                                                 for pr in f["problems"])


def test_a_broken_document_is_refused_by_the_schema():
    run = parse_run([str(FIXTURES / "nan_4x")])
    doc = json.loads(json.dumps(diagnosis_json(analyze_run(run), run)))
    doc["primary"]["confidence"] = "sure"
    with pytest.raises(jsonschema.ValidationError):
        ANALYZE.validate(doc)


PATCH = _validator("patch")


@pytest.mark.parametrize("fx", ["nan_4x", "starved_4x", "host_oom_4x", "synthetic_4x_rtx40", "healthy_3x"])
def test_patch_json_matches_its_schema(fx):
    p = subprocess.run([sys.executable, "-m", "diagnose", "patch", "--log", str(FIXTURES / fx), "--format", "json",
                        "--no-swift-check"], capture_output=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    PATCH.validate(doc)
    assert doc["schema_version"] == 2


def test_unrelated_runs_json_matches_its_schema():
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "diagnose", "analyze", str(FIXTURES / "nan_4x" / "train.log"),
                        str(FIXTURES / "multinode_raise_4x" / "node1.log"), "--format", "json"],
                       capture_output=True, text=True, timeout=120)
    doc = json.loads(p.stdout)
    _validator("analyze-apart").validate(doc)
    for r in doc["unrelated"]:
        ANALYZE.validate(r["analysis"])
