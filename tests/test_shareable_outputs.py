"""Outputs a user can share and trust (issue #18, 'shareable outputs'): Markdown that GitHub renders as written,
one-line usage errors, a plot checked before the analysis, rules and explain that name what ships, one version
wording."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from diagnose.render.md import md_code, md_fence, md_text
from tests.conftest import FIXTURES, ROOT

CLI = [sys.executable, "-m", "diagnose"]
OOM_LINE = ("[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
            "capacity of 79.15 GiB of which 1.05 GiB is free.\n")


def _cli(*args: str, stdin: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + list(args), capture_output=True, text=True, cwd=ROOT, input=stdin,
                          env={**os.environ, **(env or {})})


def _outside_code(md: str) -> str:
    """The Markdown text outside fenced blocks and inline code spans."""
    md = re.sub(r"(?ms)^(`{3,}).*?^\1\s*$", "", md)
    return re.sub(r"(`+).+?\1", "", md)


def test_markdown_from_stdin_has_no_raw_tags():
    p = _cli("analyze", "--format", "markdown", "-", stdin=OOM_LINE)
    assert p.returncode == 0, p.stderr
    text = _outside_code(p.stdout)
    assert "<stdin>" not in text and "&lt;stdin&gt;" in text
    assert re.search(r"<(?!/?(details|summary|sub)\b)[A-Za-z]", text) is None  # no tag GitHub would drop


def test_markdown_escapes_log_text_and_fences_code():
    evil = "| *bold* <script>x</script> [link](http://x) `tick` ```fence``` \x1b]52;c;aGk=\x07 \x1b[31mred\x1b[0m"
    cell = md_text(evil)
    assert "<script>" not in cell and "&lt;script&gt;" in cell
    assert "\x1b" not in cell and "\\|" in cell and "\\*bold\\*" in cell and "\\[link\\]" in cell
    span = md_code("a ``` b ` c")
    assert span.startswith("````") and span.endswith("````")
    block = md_fence(["x", "```", "y"], "text")
    assert block[0].startswith("````") and block[-1] == block[0][:len(block[-1])]


def test_markdown_paths_with_markup_are_escaped(tmp_path):
    d = tmp_path / "run_<b>_*x*"
    d.mkdir()
    log = d / "train.log"
    log.write_text(OOM_LINE)
    p = _cli("analyze", "--format", "markdown", str(log))
    assert p.returncode == 0, p.stderr
    assert "<b>" not in _outside_code(p.stdout) and "&lt;b&gt;" in p.stdout


@pytest.mark.parametrize("args", [
    ["analyze", "--format", "xml", "x.log"],
    ["fleet", "--jobs", "many", "."],
    ["patch", "--cpu-cores", "abc", "--log", "x"],
    ["rules", "--format", "yaml"],
    ["attach", "--interval", "fast", "1"],
    ["lint", "--output-format", "nope", "x.sh"],
    ["verify", "--slots", "two", "x.sh"],
])
def test_usage_errors_are_one_line_and_a_hint(args):
    p = _cli(*args)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: ") and lines[1].startswith("hint: "), p.stderr
    assert "usage:" not in p.stderr


def test_help_still_shows_usage():
    p = _cli("analyze", "-h")
    assert p.returncode == 0 and "usage:" in p.stdout


def test_plot_path_is_checked_before_the_analysis(tmp_path):
    p = _cli("analyze", str(FIXTURES / "nan_4x"), "--plot", str(tmp_path / "no" / "such" / "x.png"))
    assert p.returncode == 2 and p.stdout == "" and "does not exist" in p.stderr
    p = _cli("analyze", str(FIXTURES / "nan_4x"), "--plot", str(tmp_path))
    assert p.returncode == 2 and p.stdout == ""


def test_missing_matplotlib_is_exit_3_with_an_install_hint(monkeypatch, tmp_path):
    import importlib.util

    from diagnose.errors import EnvironmentMissing
    from diagnose.render import plot

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    with pytest.raises(EnvironmentMissing) as e:
        plot.check_plot_target(str(tmp_path / "t.png"))
    assert e.value.exit_code == 3 and "matplotlib" in (e.value.hint or "")
    assert "-e '." not in (e.value.hint or "")  # never a relative editable path that only works in a checkout


def test_rules_never_cut_a_slug():
    from diagnose.rules import load_rules

    for cols in ("60", "80", "120"):
        p = _cli("rules", env={"COLUMNS": cols})
        assert p.returncode == 0
        for r in load_rules():
            assert r.slug in p.stdout, (cols, r.slug)


def test_explain_points_at_shipped_files():
    from diagnose.rules import load_rules

    for r in load_rules():
        assert not any("shared/" in x or "seeds" in x for x in r.references), r.id
    p = _cli("explain", "OOM001")
    m = re.search(r"\(rule file: (.+)\)", p.stdout)
    assert m and os.path.isfile(m.group(1))


def test_sh001_names_the_real_break():
    from diagnose.patch.launch import read_launch

    script = "swift sft \\\n  --model m \\ \n  --dataset d\n"
    launch = read_launch(script)
    msgs = " ".join(m for _, _, m, _ in launch.problems)
    assert "comment" not in msgs and "blank" in msgs


def test_one_version_wording_in_analyze_and_patch(tmp_path):
    from diagnose.parse.versions import version_words

    assert version_words("4.6.0", "log line `swift.__version__: 4.6.0`") == "ms-swift 4.6.0"
    hedged = version_words("3.8-3.12.4", "memory(GiB) at the end of the dict, train_speed(iter/s)")
    assert hedged.startswith("ms-swift 3.8-3.12.4 (by the log's format")
    log = FIXTURES / "synthetic_pasted_issue" / "train.log"
    a = _cli("analyze", str(log))
    (tmp_path / "t.sh").write_text("swift sft --model m --dataset d --per_device_train_batch_size 2\n")
    b = _cli("patch", str(tmp_path / "t.sh"), "--log", str(log), "--no-swift-check")
    assert "ms-swift 3.8-3.12.4 (by the log's format" in a.stdout
    assert "ms-swift 3.8-3.12.4 (by the log's format" in b.stdout and "flags of 3.12.4" in b.stdout


def test_a_long_line_of_carriage_return_records_is_read_whole(tmp_path):
    from diagnose.parse import parse_run

    rows = ["{'loss': 1.0, 'grad_norm': 0.5, 'learning_rate': 1e-4, 'token_acc': 0.8, 'epoch': 0.1, "
            f"'global_step/max_steps': '{i}/3000', 'percentage': '1%', 'elapsed_time': '1s', 'remaining_time': '1s', "
            "'memory(GiB)': 20.0, 'train_speed(iter/s)': 0.5}" for i in range(1, 3001)]
    (tmp_path / "cr.log").write_text("\r".join(rows) + "\n")
    run = parse_run([str(tmp_path / "cr.log")])
    assert len(run.steps) == 3000 and not run.notes


def test_a_long_line_read_in_part_says_so(tmp_path):
    (tmp_path / "big.log").write_text("x" * 900_000 + " tail\n" + OOM_LINE)
    p = _cli("analyze", str(tmp_path / "big.log"))
    assert p.returncode == 0 and "only its first and last" in p.stdout.replace("\n", " ")
