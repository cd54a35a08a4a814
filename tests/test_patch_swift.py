"""Every argv the patcher emits is accepted by the real ms-swift parser (parse only, no training).

Interpreters tried: $SWIFTDOC_SWIFT_PYTHON, the current one (CI installs ms-swift 4.6.0 with
`pip install -e '.[dev,swift]'`), /work/venvs/swift46 and /work/venvs/swift38 when present.
Each checks the plans whose flag table is its own minor line; plans for other versions are
checked against the flag tables only (tests/test_patch.py).  Skipped, with the reason, when no
interpreter can import ms-swift (e.g. under a plain dev venv).
Megatron argument classes are imported with stand-ins for megatron-core when it is missing.
"""
from __future__ import annotations

import os
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest
from conftest import fixture_dirs, load_expected

from diagnose.errors import InputError
from diagnose.flags import table_for
from diagnose.flags.versions import vkey
from diagnose.patch.launch import read_launch
from diagnose.patch.plan import plan_patch
from diagnose.patch.source import effective_from_run, launch_from_run, plan_for_launch
from diagnose.patch.swiftcheck import check_argvs

pytestmark = pytest.mark.swift
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_patch_corpus as corpus  # noqa: E402


def _candidates() -> list[str]:
    cands = [os.environ.get("SWIFTDOC_SWIFT_PYTHON"), sys.executable, "/work/venvs/swift46/bin/python",
             "/work/venvs/swift38/bin/python"]
    out, seen = [], set()
    for c in cands:
        if c and os.path.exists(c) and os.path.abspath(c) not in seen:
            seen.add(os.path.abspath(c))
            out.append(c)
    return out


@lru_cache(maxsize=None)
def _swift_version(py: str) -> str | None:
    r = subprocess.run([py, "-c", "import swift, transformers; print(swift.__version__)"], capture_output=True,
                       text=True, timeout=300)
    return r.stdout.strip().splitlines()[-1] if r.returncode == 0 and r.stdout.strip() else None


def _interpreters() -> list[tuple[str, str]]:
    out = []
    for py in _candidates():
        v = _swift_version(py)
        if v:
            out.append((py, v))
    return out


def _same_line(a: str, b: str) -> bool:
    return vkey(a)[:2] == vkey(b)[:2]


@pytest.fixture(scope="module")
def swift_pythons():
    found = _interpreters()
    if not found:
        pytest.skip("ms-swift is not importable (pip install -e '.[dev,swift]', or set SWIFTDOC_SWIFT_PYTHON)")
    return found


def _unfixed_flags(plan) -> set[str]:
    return {p.flag for p in plan.problems if p.severity == "error" and not p.fixed and p.flag}


def _check(py: str, version: str, items: list[tuple[str, str, list[str], set[str]]]) -> list[str]:
    """items: (name, command, argv, flags the plan itself reports as still rejected). Returns failures."""
    todo = [(n, c, a, bad) for n, c, a, bad in items if not any("$" in t for t in a)]
    res = check_argvs([(c, a) for _, c, a, _ in todo], version, python=py)
    assert res is not None
    fails = []
    for (name, cmd, argv, bad), r in zip(todo, res):
        assert r.skipped is None, r.skipped
        if r.ok:
            continue
        left = {t for t in r.rejected if t.startswith("-")}
        if bad and (left <= bad) and not r.error:
            continue  # exactly what the plan already names as not fixable
        fails.append(f"{name}: {r.message()} argv={argv}")
    return fails


def test_corpus_patches_parse(swift_pythons):
    checked = 0
    for py, sv in swift_pythons:
        items = []
        for case in corpus.CASES:
            if not _same_line(table_for(case["version"]).version, sv):
                continue
            _, launch, plan, _ = corpus.run_case(case)
            items.append((case["name"], plan.command, plan.argv, _unfixed_flags(plan)))
        if not items:
            continue
        checked += len(items)
        assert _check(py, sv, items) == []
    if not checked:
        pytest.skip("no corpus case uses the installed ms-swift's minor line")


def test_fixture_patches_parse(swift_pythons):
    from diagnose.parse import parse_run
    from diagnose.pipeline import analyze_run

    checked = 0
    for py, sv in swift_pythons:
        items = []
        for d in fixture_dirs():
            exp = load_expected(d)
            version = str(exp["parse"]["swift_version"])
            table = table_for(version)
            if not _same_line(table.version, sv):
                continue  # other versions: flag tables only (tests/test_patch.py)
            run = parse_run([str(d if exp.get("input", ".") == "." else d / exp["input"])])
            try:
                rc = launch_from_run(run, table)
            except InputError:
                continue
            plan = plan_patch(rc.argv, rc.env, analyze_run(run), version, command=rc.command, launcher=rc.launcher,
                              effective=effective_from_run(run), world_size=run.world_size)
            items.append((d.name, plan.command, plan.argv, _unfixed_flags(plan)))
            if (d / "launch.sh").exists():
                p2 = plan_for_launch(read_launch((d / "launch.sh").read_text()), analyze_run(run), version,
                                     effective=effective_from_run(run), world_size=run.world_size)
                items.append((d.name + "/launch.sh", p2.command, p2.argv, _unfixed_flags(p2)))
        if items:
            checked += len(items)
            assert _check(py, sv, items) == []
    if not checked:
        pytest.skip("no fixture uses the installed ms-swift's minor line")


def test_seed_commands_as_written_are_rejected_by_the_real_parser(swift_pythons):
    """The flags lint reports really stop ms-swift 4.6 (the table is not inventing errors)."""
    py = next((p for p, v in swift_pythons if _same_line(v, "4.6.0")), None)
    if py is None:
        pytest.skip("no ms-swift 4.6 interpreter")
    cases = [("seed000_golden.sh", "sft"), ("seed001_multinode.sh", "sft"), ("seed003_qlora.sh", "sft"),
             ("seed002_megatron_moe.sh", "megatron_sft")]
    launches = [read_launch((corpus.SCRIPTS / n).read_text(), base_dir=corpus.SCRIPTS) for n, _ in cases]
    res = check_argvs([(c, L.argv) for (_, c), L in zip(cases, launches)], "4.6.0", python=py)
    assert res is not None and all(not r.ok for r in res), [r.message() for r in res]
