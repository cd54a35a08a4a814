"""The CLI as a user meets it: real subprocesses, exit codes, one-line errors, the JSON contracts."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BAD = ROOT / "tests" / "data" / "bad_input"
FIXTURES = ROOT / "fixtures"
sys.path.insert(0, str(BAD))


def swiftdoc(*args: str, stdin: bytes | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "diagnose", *args], input=stdin, capture_output=True, cwd=cwd, timeout=120)


def _one_line_error(p: subprocess.CompletedProcess) -> None:
    err = p.stderr.decode()
    assert "Traceback" not in err
    assert err.startswith("error: ")
    assert len([ln for ln in err.splitlines() if ln.startswith("error: ")]) == 1


@pytest.mark.parametrize("name", ["empty.log", "binary.bin", "empty_dir", "does_not_exist.log"])
def test_unreadable_input_exits_2_with_one_line(name):
    for cmd in ("parse", "analyze"):
        p = swiftdoc(cmd, str(BAD / name))
        assert p.returncode == 2, p.stderr
        _one_line_error(p)


def test_plain_text_is_readable_but_not_ms_swift():
    p = swiftdoc("parse", str(BAD / "plain_text.txt"), "--format", "json")
    assert p.returncode == 0
    out = json.loads(p.stdout)
    assert out["recognized"] is False and out["steps"] == 0
    a = swiftdoc("analyze", str(BAD / "plain_text.txt"), "--format", "json")
    assert a.returncode == 0 and json.loads(a.stdout)["primary"]["category"] == "unknown"
    t = swiftdoc("parse", str(BAD / "plain_text.txt"))
    assert b"trainer: not recognised" in t.stdout and b"no ms-swift signature" in t.stdout


@pytest.mark.parametrize("name,rows", [("hf_trainer.log", 25), ("llamafactory.log", 20)])
def test_other_trainers_are_read_partially_and_said_so(name, rows):
    out = json.loads(swiftdoc("parse", str(BAD / name), "--format", "json").stdout)
    assert out["recognized"] is False and out["trainer"] == "hf-trainer"
    assert out["steps"] == rows
    assert any("HF Trainer" in n for n in out["notes"])


@pytest.mark.parametrize("name,steps,version", [
    ("gbk.log", 12, "3.10.3"), ("latin1.log", 12, "3.10.3"), ("crlf.log", 20, "4.6.0"),
    ("tail_only.log", 11, "3.8-3.12.4"), ("truncated_last_line.log", 20, "4.6.0"),
])
def test_messy_but_readable_logs_parse(name, steps, version):
    out = json.loads(swiftdoc("parse", str(BAD / name), "--format", "json").stdout)
    assert out["steps"] == steps and out["swift_version"] == version
    if name in ("gbk.log", "latin1.log"):
        assert out["dataset"]["size"] == 800
    if name == "crlf.log":
        assert isinstance(out["last_step"]["loss"], float)


def test_traceback_only_is_diagnosed():
    out = json.loads(swiftdoc("analyze", str(BAD / "traceback_only.log"), "--format", "json").stdout)
    assert out["primary"]["category"] == "oom"
    assert out["run"]["steps"] == 0
    assert [e["line"] for e in out["run"]["events"] if e["kind"] == "cuda_oom"] == [28]


def test_huge_single_line_is_bounded(tmp_path):
    from make_bad_inputs import write_huge_line

    f = tmp_path / "huge.log"
    write_huge_line(f)
    assert f.stat().st_size >= 5 * 1024 * 1024
    p = swiftdoc("parse", str(f), "--format", "json")
    assert p.returncode == 0
    assert json.loads(p.stdout)["recognized"] is False


def test_stdin_dash():
    data = (ROOT / "fixtures" / "synthetic_3x_early_oom" / "train.log").read_bytes()
    out = json.loads(swiftdoc("analyze", "-", "--format", "json", stdin=data).stdout)
    assert out["primary"]["rule"] == "OOM001"


def test_process_substitution_pipe_is_read_whole():
    # `swiftdoc analyze <(ssh host cat train.log)`: a pipe, not a regular file (its size reads 0)
    log = ROOT / "fixtures" / "synthetic_3x_early_oom" / "train.log"
    p = subprocess.run(["bash", "-c", f'"{sys.executable}" -m diagnose analyze <(cat "{log}") --format json'],
                       capture_output=True, cwd=ROOT, timeout=120)
    out = json.loads(p.stdout)
    assert out["primary"]["rule"] == "OOM001" and out["run"]["steps"] > 0, p.stderr.decode()[-500:]
    empty = subprocess.run(["bash", "-c", f'"{sys.executable}" -m diagnose analyze <(true)'], capture_output=True, cwd=ROOT)
    assert empty.returncode == 2
    _one_line_error(empty)


def test_analyze_json_contract():
    out = json.loads(swiftdoc("analyze", str(ROOT / "fixtures" / "synthetic_3x_early_oom"), "--format", "json").stdout)
    assert out["schema_version"] == 2
    assert set(out["primary"]) == {"category", "rule", "severity", "summary", "confidence", "missing"}
    assert out["primary"]["confidence"] == "certain"  # the OOM message itself is in the log
    f = out["findings"][0]
    for k in ("rule", "category", "severity", "confidence", "summary", "evidence", "lines", "remedies"):
        assert k in f
    assert f["lines"] and all(isinstance(x, int) for x in f["lines"])
    assert {"title", "effect", "ops"} <= set(f["remedies"][0])
    assert isinstance(out["skipped"], list)
    assert out["run"]["swift_version"] == "3.0-3.7"


def test_fail_on_and_usage_errors():
    fx = str(ROOT / "fixtures" / "synthetic_3x_early_oom")
    assert swiftdoc("analyze", fx, "--fail-on", "error").returncode == 1
    assert swiftdoc("analyze", str(ROOT / "fixtures" / "synthetic_2x_healthy"), "--fail-on", "warning").returncode == 0
    p = swiftdoc("analyze", fx, "--gpu", "GTX-9999")
    assert p.returncode == 2 and b"A100-80GB" in p.stderr
    p = swiftdoc("nonsense")
    assert p.returncode == 2


def test_markdown_and_plot(tmp_path):
    fx = str(ROOT / "fixtures" / "synthetic_3x_early_oom")
    md = swiftdoc("analyze", fx, "--format", "markdown").stdout.decode()
    assert md.startswith("## swiftdoc: oom (OOM001)") and "```diff" in md
    png = tmp_path / "t.png"
    p = swiftdoc("analyze", fx, "--plot", str(png))
    assert p.returncode == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_analyze_never_imports_heavy_modules():
    code = (
        "import sys; from diagnose.cli import main; "
        f"main(['analyze', r'{ROOT / 'fixtures' / 'synthetic_4x_gpu_healthy'}', '--format', 'json']); "
        "bad=[m for m in ('torch','swift','pynvml') if m in sys.modules]; print('HEAVY', bad)"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, cwd=ROOT, timeout=60)
    assert p.stdout.decode().strip().endswith("HEAVY []"), p.stdout[-300:]
    p = subprocess.run([sys.executable, "-c", "import sys, diagnose.cli; print([m for m in ('torch','swift','pynvml') if m in sys.modules])"],
                       capture_output=True, timeout=60)
    assert p.stdout.strip() == b"[]"


def test_rules_and_explain_commands():
    p = swiftdoc("rules")
    assert p.returncode == 0 and b"DL001" in p.stdout and b"oom.cuda" in p.stdout
    p = swiftdoc("explain", "OOM001")
    assert p.returncode == 0 and b"halve" in p.stdout.lower()
    assert swiftdoc("explain", "nccl.rtx40_p2p_ib").returncode == 0
    p = swiftdoc("explain", "XX999")
    assert p.returncode == 2
    _one_line_error(p)


@pytest.mark.parametrize("args,needle", [
    (["analyze", "fixtures/nan_4x", "--param", "DL001.max_util=abc"], b"takes a number"),
    (["analyze", "fixtures/nan_4x", "--gpu", "V100X"], b"unknown --gpu"),
    (["analyze", "fixtures/nan_4x", "--gpu", "A100-FOO"], b"unknown --gpu"),
    (["rules", "--category", "foo"], b"unknown --category"),
])
def test_mistyped_values_are_errors_with_a_hint(args, needle):
    p = swiftdoc(*args)
    assert p.returncode == 2, p.stdout[-300:]
    _one_line_error(p)
    assert needle in p.stderr and b"hint: " in p.stderr


def test_product_names_and_new_cards_are_known_gpus():
    from diagnose.features.gpu import gpu_from_flag

    assert gpu_from_flag("NVIDIA A100-SXM4-80GB") == "A100-80GB"
    assert gpu_from_flag("NVIDIA GeForce RTX 4090") == "RTX4090"
    assert gpu_from_flag("L4") == "L4" and gpu_from_flag("h100 pcie") == "H100-PCIE"


def test_lint_refuses_a_deepspeed_config(tmp_path):
    ds = tmp_path / "ds_z3.json"
    ds.write_text('{"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 3}}')
    p = swiftdoc("lint", str(ds), "--no-swift-check")
    assert p.returncode == 2
    _one_line_error(p)
    assert b"DeepSpeed config" in p.stderr


def test_newer_minor_in_a_log_uses_the_nearest_table(tmp_path):
    log = tmp_path / "train.log"
    log.write_bytes((ROOT / "fixtures" / "nan_4x" / "train.log").read_bytes().replace(b"__version__: 4.6.0", b"__version__: 4.7.0"))
    p = swiftdoc("patch", "--log", str(log))
    assert p.returncode == 0, p.stderr
    assert b"4.7.0 has no flag table, using the nearest known 4.6" in p.stdout


def test_args_json_alone_is_not_an_interruption():
    out = json.loads(swiftdoc("analyze", str(ROOT / "fixtures" / "nan_4x" / "args.json"), "--format", "json").stdout)
    assert out["primary"]["category"] != "interrupted"
    assert not any(f["rule"].startswith("INT") for f in out["findings"])


def test_analyze_select_and_ignore_by_id_slug_and_category():
    fx = str(ROOT / "fixtures" / "nan_4x")

    def rules(*a):
        return [f["rule"] for f in json.loads(swiftdoc("analyze", fx, "--format", "json", *a).stdout)["findings"]]

    every = rules()
    assert {"NAN001", "NAN004", "NAN006"} <= set(every)
    assert rules("--select", "NAN001") == ["NAN001"]
    assert set(rules("--select", "nan", "--ignore", "nan.loss_masked,NAN004")) == {"NAN001"}
    assert "NAN006" not in rules("--ignore", "nan.loss_masked")
    p = swiftdoc("analyze", fx, "--select", "FOO")
    assert p.returncode == 2 and b"names no rule" in p.stderr and b"hint:" in p.stderr


def test_markdown_carries_what_the_bug_template_asks_for():
    md = swiftdoc("analyze", str(ROOT / "fixtures" / "crash_bad_dataset_4x"), "--format", "markdown").stdout.decode()
    assert "**Environment:** ms-swift 4.6.0" in md and "Python 3.11" in md
    assert "**Launch command**" in md and "```bash\nswift sft " in md
    assert "<details><summary>Decisive log lines" in md and "JSON parse error" in md.split("<details>")[1]
    chain = md.split("**The crash, link by link**")[1].split("\n\n")[1]
    assert chain.index("ValueError: Trailing data") < chain.index("JSON parse error") < chain.index("DatasetGenerationError")
    fixed = swiftdoc("analyze", str(ROOT / "fixtures" / "synthetic_pasted_issue"), "--format", "markdown").stdout.decode()
    assert "```diff" in fixed and "÷2" not in fixed.split("```diff")[1].split("```")[0]  # only real diff lines


def test_plot_places_findings_where_they_happened():
    from diagnose.parse import parse_run
    from diagnose.pipeline import analyze_run
    from diagnose.render.plot import where_it_happened

    run = parse_run([str(ROOT / "fixtures" / "synthetic_pasted_issue")])
    oom = next(f for f in analyze_run(run).findings if f.rule == "OOM001")
    assert where_it_happened(run, oom) == 60.0  # the OOM follows step 60; its first evidence line is the dataset line
    run = parse_run([str(ROOT / "fixtures" / "nan_4x")])
    by = {f.rule: f for f in analyze_run(run).findings}
    assert where_it_happened(run, by["NAN001"]) == 4.0 and where_it_happened(run, by["CFG005"]) is None


def test_help_and_verbose_conventions():
    bare = swiftdoc()
    assert bare.returncode == 2 and not bare.stdout and b"commands:" in bare.stderr
    h = swiftdoc("help", "analyze")
    assert h.returncode == 0 and h.stdout.startswith(b"usage: swiftdoc analyze")
    from diagnose import cli

    seen = {}

    class Probe:
        HELP = "probe"

        @staticmethod
        def add_arguments(p):
            p.add_argument("rest", nargs="*")

        @staticmethod
        def run(args):
            seen["verbose"], seen["rest"] = args.verbose, args.rest
            return 0

    import sys as _sys

    cli.COMMANDS["fakecmd"] = ("fakecmd", "probe")  # not `probe`: that is a real command
    _sys.modules["diagnose.commands.fakecmd"] = Probe  # type: ignore[assignment]
    try:
        assert cli.main(["fakecmd", "-v", "--", "a", "-v"]) == 0
    finally:
        del cli.COMMANDS["fakecmd"]
        del _sys.modules["diagnose.commands.fakecmd"]
    assert seen == {"verbose": True, "rest": ["a", "-v"]}  # a -v after `--` is an argument, not swiftdoc's


# ------------------------------------------------------------------ unrelated runs given together

def test_unrelated_captures_are_said_unrelated_and_analysed_apart():
    nan, healthy = FIXTURES / "nan_4x" / "train.log", FIXTURES / "healthy_3x" / "train.log"
    p = swiftdoc("analyze", str(nan), str(healthy), "--format", "json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    runs = doc["unrelated"]
    assert [r["inputs"] for r in runs] == [[str(nan)], [str(healthy)]]
    assert runs[0]["apart_because"] is None and runs[1]["apart_because"] == "different launch commands"
    # each is the analysis of that capture alone, not a merge
    for r, path in zip(runs, (nan, healthy)):
        alone = json.loads(swiftdoc("analyze", str(path), "--format", "json").stdout)
        assert r["analysis"]["primary"] == alone["primary"]
        assert r["analysis"]["run"]["steps"] == alone["run"]["steps"] and r["analysis"]["run"]["sources"] == [str(path)]
    text = swiftdoc("analyze", str(nan), str(healthy))
    assert "2 unrelated runs (different launch commands): each is analysed apart" in " ".join(text.stderr.decode().split())
    assert b"run 1 of 2" in text.stdout and b"run 2 of 2" in text.stdout
    md = swiftdoc("analyze", str(nan), str(healthy), "--format", "markdown").stdout.decode()
    assert md.count("# Run ") == 2


def test_the_same_command_started_twice_is_two_runs(tmp_path):
    # the node-0 capture of a real job, and the same text as if launched again later (another run folder)
    src = (FIXTURES / "multinode_kill_4x" / "node0.log").read_text()
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text(src)
    b.write_text(src.replace("v0-20261123-202032", "v1-20261124-081500"))
    doc = json.loads(swiftdoc("analyze", str(a), str(b), "--format", "json").stdout)
    assert doc["unrelated"][1]["apart_because"].startswith("different run folders (start times): v0-20261123-202032 vs v1-")


def test_the_nodes_of_one_job_are_one_run_and_save_refuses_unrelated_runs(tmp_path):
    d = FIXTURES / "multinode_kill_4x"
    one = json.loads(swiftdoc("analyze", str(d / "node0.log"), str(d / "node1.log"), "--format", "json").stdout)
    assert "unrelated" not in one and one["culprit"]["rank"] == 1
    p = swiftdoc("analyze", str(FIXTURES / "nan_4x" / "train.log"), str(FIXTURES / "healthy_3x" / "train.log"),
                 "--save", str(tmp_path / "r.json"))
    _one_line_error(p)
    assert p.returncode == 2 and "unrelated runs" in p.stderr.decode()
    assert not (tmp_path / "r.json").exists()


def test_an_empty_rank_capture_among_several_is_read_as_nothing_not_an_error(tmp_path):
    (tmp_path / "node1.log").write_bytes(b"")
    node0 = FIXTURES / "multinode_kill_4x" / "node0.log"
    p = swiftdoc("analyze", str(node0), str(tmp_path / "node1.log"), "--format", "json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["run"]["steps"] == 13 and any("node1.log: empty" in n for n in doc["notes"])
    both_empty = swiftdoc("analyze", str(tmp_path / "node1.log"), str(tmp_path / "node1.log"))
    _one_line_error(both_empty)
    assert both_empty.returncode == 2 and b"every input is empty" in both_empty.stderr
