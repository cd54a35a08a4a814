"""One data-driven test over every fixture folder: parse and analyze match expected.yaml exactly."""
from __future__ import annotations

import math

import pytest
from conftest import fixture_dirs, load_expected

from diagnose.parse import parse_run
from diagnose.pipeline import analyze_run

DIRS = fixture_dirs()


def _input(d):
    exp = load_expected(d)
    inp = exp.get("input", ".")
    return str(d if inp == "." else d / inp), exp


def _close(a, b) -> bool:
    if isinstance(b, str):  # YAML 1.1 reads 1e-06 as a string
        try:
            b = float(b)
        except ValueError:
            pass
    if isinstance(b, float) and math.isnan(b):
        return isinstance(a, float) and math.isnan(a)
    if isinstance(b, (int, float)) and isinstance(a, (int, float)):
        return math.isclose(a, b, rel_tol=1e-3, abs_tol=1e-12)
    return a == b


@pytest.mark.parametrize("d", DIRS, ids=[d.name for d in DIRS])
def test_parse_matches_expected(d):
    path, exp = _input(d)
    p = exp["parse"]
    run = parse_run([path])
    assert run.swift_version == str(p["swift_version"]), run.version_clue
    assert len(run.steps) == p["steps"]
    assert run.max_steps == p.get("max_steps")
    assert run.world_size == p.get("world_size")
    if p.get("last_step"):
        last = run.steps.last()
        for k, v in p["last_step"].items():
            assert _close(last.get(k), v), (k, last.get(k), v)
    if p.get("dataset") is None:
        assert run.dataset is None
    else:
        for k, v in p["dataset"].items():
            assert _close(getattr(run.dataset, k), v), k
    got = {}
    for e in run.events:
        if e.file in (None, run.line_file) or path.endswith(str(e.file)):
            got.setdefault(e.kind, e.line)
    want = {e["kind"]: e["line"] for e in (p.get("events") or [])}
    assert got == want


@pytest.mark.parametrize("d", DIRS, ids=[d.name for d in DIRS])
def test_analyze_matches_expected(d):
    path, exp = _input(d)
    a = exp.get("analyze") or {}
    run = parse_run([path])
    diag = analyze_run(run)
    assert diag.primary.category == a["primary"], [f.rule for f in diag.findings]
    if "fired" in a:
        assert sorted(f.rule for f in diag.findings) == sorted(a["fired"])
