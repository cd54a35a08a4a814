"""The launch-script corpus (fixtures/scripts): golden lint/patch output, re-reading, idempotence.

GIVEN a script from the corpus and the case in fixtures/scripts/cases.yaml
WHEN it is linted or patched for that case's ms-swift version
THEN the problems, flag diff and unified diff equal golden/<case>.txt byte for byte,
     the edited script reads back to exactly the planned argv and env,
     and planning again on the edited files finds nothing left to change.
Regenerate after an intended change: SWIFTDOC_REGEN_GOLDEN=1 pytest tests/test_patch_corpus.py
"""
from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

import pytest
import yaml

from diagnose.engine import RemedyOp
from diagnose.patch.edit import edits_for
from diagnose.patch.launch import read_launch
from diagnose.patch.models import Request
from diagnose.patch.plan import parse_assignments
from diagnose.patch.render import flag_diff, other_sections, problems_text, unified
from diagnose.patch.source import effective_from_argv, plan_for_launch, read_script

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "fixtures" / "scripts"
GOLDEN = SCRIPTS / "golden"
CASES = yaml.safe_load((SCRIPTS / "cases.yaml").read_text(encoding="utf-8"))["cases"]
REGEN = os.environ.get("SWIFTDOC_REGEN_GOLDEN") == "1"


def requests(case: dict) -> list[Request]:
    out = []
    for r in case.get("remedies") or []:
        op = RemedyOp(op=r["op"], flag=r.get("flag"), env=r.get("env"), value=r.get("value"))
        out.append(Request(op=op, effect=r["effect"], rule=r["rule"], title=r.get("title", "")))
    return out


def run_case(case: dict, base: Path = SCRIPTS):
    path = base / case["script"]
    sf = read_script(path)
    launch = read_launch(sf.text, base_dir=path.parent, select_line=case.get("line"))
    if case.get("mode") == "lint":
        effects = ("safe", "changes-training") if case.get("unsafe_fixes") else ("safe",)
        plan = plan_for_launch(launch, None, case["version"], fix="warning", fix_effects=effects)
    else:
        # the diagnosed run is the corpus script as checked in (what its log would show)
        orig = read_launch(read_script(SCRIPTS / case["script"]).text, base_dir=SCRIPTS, select_line=case.get("line"))
        effective = effective_from_argv(orig.argv, case["version"], orig.subcommand)
        explicit = parse_assignments(case.get("set", []), "set") + parse_assignments(case.get("env", []), "env") + \
            parse_assignments(case.get("remove", []), "remove")
        plan = plan_for_launch(launch, requests(case), case["version"], explicit=explicit,
                               only_safe=bool(case.get("only_safe")), cpu_cores=case.get("cpu_cores"),
                               effective=effective)
    edits = [] if launch.unsafe else [e for e in edits_for(launch, plan, path) if e.new != e.old]
    return sf, launch, plan, edits


def render_case(case: dict) -> str:
    sf, launch, plan, edits = run_case(case)
    out = [f"# case {case['name']}: {case['script']}, ms-swift {plan.version}, {case.get('mode', 'patch')}",
           f"# command: {plan.command.replace('_', ' ')} via {launch.kind}"]
    out.append("## problems")
    out.append(problems_text(plan, case["script"]).rstrip("\n"))
    out.append("## flag diff")
    out.append(flag_diff(plan).rstrip("\n"))
    rest = other_sections(plan).rstrip("\n")
    if rest:
        out.append("## notes")
        out.append(rest)
    out.append("## new argv")
    out.append(" ".join(shlex.quote(t) for t in plan.argv))
    if plan.env:
        out.append("## env")
        out.append(" ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(plan.env.items())))
    out.append("## diff")
    if launch.unsafe:
        out.append("(not edited: " + "; ".join(f"line {ln}: {why}" for ln, why in launch.unsafe) + ")")
    for e in edits:
        out.append(unified(e.old, e.new, Path(e.label).name).rstrip("\n"))
    return "\n".join(out) + "\n"


def test_corpus_is_big_enough():
    scripts = sorted(SCRIPTS.glob("*.sh"))
    assert len(scripts) >= 15
    assert {c["script"] for c in CASES} == {p.name for p in scripts}  # every script has a case
    assert any(b"\r\n" in p.read_bytes() for p in scripts)  # Windows line endings are in the corpus


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_golden(case):
    got = render_case(case)
    gold = GOLDEN / f"{case['name']}.txt"
    if REGEN or not gold.exists():
        GOLDEN.mkdir(exist_ok=True)
        gold.write_bytes(got.encode("utf-8"))
        if not REGEN:
            pytest.fail(f"golden file {gold.name} was missing and has been written; check it in")
    assert got == gold.read_bytes().decode("utf-8")


def _copy_corpus(tmp_path: Path) -> Path:
    dst = tmp_path / "scripts"
    shutil.copytree(SCRIPTS, dst, ignore=shutil.ignore_patterns("golden"))
    return dst


EDITABLE = [c for c in CASES if c["name"] not in ("heredoc_remote", "lr_sweep_loop", "two_stages")]


@pytest.mark.parametrize("case", EDITABLE, ids=[c["name"] for c in EDITABLE])
def test_edits_read_back_and_are_idempotent(case, tmp_path):
    base = _copy_corpus(tmp_path)
    sf, launch, plan, edits = run_case(case, base)
    for e in edits:
        Path(e.label).write_bytes(e.new.encode(sf.encoding if e.path == sf.path else "utf-8"))
    # THEN the edited script is what the plan says (new flags may sit before a commented last line)
    sf2, launch2, plan2, edits2 = run_case(case, base)
    assert effective_from_argv(launch2.argv, plan.version, plan.command) == \
        effective_from_argv(plan.argv, plan.version, plan.command)
    assert sorted(launch2.argv) == sorted(plan.argv)
    for c in plan.changes:
        if c.env:
            assert launch2.env[c.env].value == c.new
    # AND a second run changes nothing
    assert plan2.changes == [] or all(c.new == c.old for c in plan2.changes), [c.model_dump() for c in plan2.changes]
    assert edits2 == []
    # AND CRLF files stay CRLF
    if b"\r\n" in (SCRIPTS / case["script"]).read_bytes():
        data = (base / case["script"]).read_bytes()
        assert data.count(b"\n") == data.count(b"\r\n")


@pytest.mark.parametrize("case", [c for c in CASES if c["name"] in ("heredoc_remote", "lr_sweep_loop", "two_stages")],
                         ids=lambda c: c["name"])
def test_unsafe_scripts_give_the_flag_diff_only(case):
    sf, launch, plan, edits = run_case(case)
    assert launch.unsafe and edits == []
    assert plan.changes  # the flag diff is still there
    assert any(p.code == "unsafe" for p in plan.problems)
