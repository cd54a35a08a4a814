"""lint on the scripts users really write: variables, several commands, arrays, unknown argv; ruff-like conventions.

Each test here failed on the code before issue #7's lint work (review 2026-11-23): a fix replaced `$TYPE` with
one literal, a second training command went unlinted, flags in a bash array were not read, `"$@"` gave
"no problems found", and there were no codes, columns, --select/--ignore, github/SARIF output or --exit-zero.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from diagnose.patch.edit import edits_for
from diagnose.patch.launch import read_launch
from diagnose.patch.source import plan_for_launch

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "fixtures" / "scripts"


def lint(*args: str, stdin: bytes | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = dict(os.environ, SWIFTDOC_SWIFT_PYTHON="/nonexistent")
    return subprocess.run([sys.executable, "-m", "diagnose", "lint", "--swift-version", "4.6.0", "--no-swift-check", *args],
                          capture_output=True, cwd=cwd, timeout=120, env=env, input=stdin)


def _fixed(text: str) -> str:
    launch = read_launch(text)
    plan = plan_for_launch(launch, None, "4.6.0", fix="warning", fix_effects=("safe",))
    return edits_for(launch, plan)[0].new


EXPRS = ["$TYPE", '"$TYPE"', '"${TUNER}"', "${TUNER:-lora}", '"$(cat tuner.txt)"', "`cat t`", "'lora'", "lora"]


@settings(max_examples=60, deadline=None)
@given(expr=st.sampled_from(EXPRS), before=st.sampled_from(["", "TYPE=lora\n", "if [ -n \"$F\" ]; then\n  TYPE=full\nelse\n  TYPE=lora\nfi\n"]),
       eq=st.booleans(), indent=st.sampled_from([" ", " \\\n    "]))
def test_a_rename_keeps_the_value_expression_byte_for_byte(expr, before, eq, indent):
    flag = f"--train_type={expr}" if eq else f"--train_type {expr}"
    text = f"{before}swift sft --model m{indent}{flag}{indent}--dataset d.jsonl\n"
    new = _fixed(text)
    want = text.replace("--train_type", "--tuner_type", 1)
    assert new == want


def test_a_value_change_on_an_expression_is_refused_not_guessed(tmp_path):
    s = tmp_path / "t.sh"
    s.write_text("FA=true\nswift sft --model m --use_flash_attn $FA --dataset d.jsonl\n")
    p = lint(str(s), "--fix")
    assert s.read_text() == "FA=true\nswift sft --model m --use_flash_attn $FA --dataset d.jsonl\n"
    assert p.returncode == 2 and b"an expression" in p.stderr


def test_every_training_command_is_linted_with_its_own_lines(tmp_path):
    out = json.loads(lint(str(SCRIPTS / "sft_then_rlhf.sh"), "--format", "json").stdout)
    f = out["files"][0]
    assert [c["line"] for c in f["commands"]] == [1, 2]
    assert {(p["line"], p["flag"]) for p in f["problems"]} == {(1, "--train_type"), (2, "--use_flash_attn")}
    s = tmp_path / "two.sh"
    s.write_bytes((SCRIPTS / "sft_then_rlhf.sh").read_bytes())
    p = lint(str(s), "--fix")
    assert p.returncode == 0, p.stdout
    text = s.read_text()
    assert "--tuner_type lora" in text and "--attn_impl flash_attn" in text and "--train_type" not in text
    assert (tmp_path / "two.sh.bak").read_bytes() == (SCRIPTS / "sft_then_rlhf.sh").read_bytes()


def test_flags_in_a_bash_array_are_read_and_fixed_in_place(tmp_path):
    out = json.loads(lint(str(SCRIPTS / "array_args.sh"), "--format", "json").stdout)
    probs = out["files"][0]["problems"]
    assert {(p["line"], p["flag"], p["code"]) for p in probs} == {(3, "--train_type", "SW002"), (4, "--use_flash_attn", "SW002")}
    s = tmp_path / "a.sh"
    s.write_bytes((SCRIPTS / "array_args.sh").read_bytes())
    assert lint(str(s), "--fix").returncode == 0
    assert s.read_text() == (SCRIPTS / "array_args.sh").read_text().replace(
        "--train_type lora", "--tuner_type lora").replace("--use_flash_attn true", "--attn_impl flash_attn")


def test_an_argv_not_known_statically_is_said_so():
    p = lint(str(SCRIPTS / "passthrough_args.sh"))
    assert b"no problems found" not in p.stdout
    assert b"SH005" in p.stdout and b'"$@"' in p.stdout


def test_ruff_like_location_code_and_formats():
    p = lint(str(SCRIPTS / "branch_variable.sh"))
    assert b"branch_variable.sh:9:5: SW002 error: --train_type" in p.stdout and p.returncode == 1
    g = lint(str(SCRIPTS / "branch_variable.sh"), "--output-format", "github").stdout.decode()
    assert g.startswith("::error file=") and "line=9,col=5,title=SW002 renamed-flag::" in g
    sarif = json.loads(lint(str(SCRIPTS / "branch_variable.sh"), "--output-format", "sarif").stdout)
    res = sarif["runs"][0]["results"]
    assert sarif["version"] == "2.1.0" and res[0]["ruleId"] == "SW002"
    assert res[0]["locations"][0]["physicalLocation"]["region"] == {"startLine": 9, "startColumn": 5}


def test_select_ignore_exit_zero_dirs_and_stdin(tmp_path):
    d = tmp_path / "scripts"
    d.mkdir()
    for n in ("branch_variable.sh", "passthrough_args.sh"):
        (d / n).write_bytes((SCRIPTS / n).read_bytes())
    out = json.loads(lint(str(d), "--format", "json").stdout)
    assert out["summary"]["files"] == 2 and out["summary"]["errors"] == 2
    assert lint(str(d), "--ignore", "renamed-flag").returncode == 0
    assert lint(str(d), "--select", "SH").returncode == 0
    only = json.loads(lint(str(d), "--select", "script", "--format", "json").stdout)
    assert {p["code"] for f in only["files"] for p in f["problems"]} == {"SH005"}
    assert lint(str(d), "--exit-zero").returncode == 0
    p = lint("-", stdin=(SCRIPTS / "branch_variable.sh").read_bytes())
    assert p.returncode == 1 and b"<stdin>:9:5: SW002" in p.stdout
    bad = lint(str(d), "--select", "XX9")
    assert bad.returncode == 2 and bad.stderr.startswith(b"error: unknown code") and b"hint:" in bad.stderr
    assert lint("-", "--fix", stdin=b"swift sft --model m\n").returncode == 2


def test_fix_respects_select(tmp_path):
    s = tmp_path / "t.sh"
    s.write_text("swift sft --model m --train_type lora --use_liger true --dataset d.jsonl\n")
    lint(str(s), "--fix", "--select", "SW002")
    text = s.read_text()
    assert "--tuner_type lora" in text and "--use_liger true" in text  # the prefix-only flag (SW004) is left alone
