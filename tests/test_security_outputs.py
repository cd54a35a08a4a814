"""Issue #20, what swiftdoc writes: no secrets in shareable output (3), records that carry their lines and open nothing
else (2), malformed records are one-line errors (12), no terminal control sequences replayed, no live spreadsheet
formulas, no input overwritten by --save, paths that look like markup (13)."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from diagnose.redact import REDACTED, is_secret_name, redact, redact_argv, redact_text
from tests.conftest import FIXTURES
from tests.secutil import HF, OOM_LINE, SECRETS, SK, sd, sd_child, secret_log


def _clean(text: str) -> None:
    for s in SECRETS:
        assert s not in text, s


# ---- item 3: secrets ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, secret", [
    ("hub_token", True), ("HF_TOKEN", True), ("--wandb_api_key", True), ("OPENAI_API_KEY", True), ("token", True),
    ("AWS_SECRET_ACCESS_KEY", True), ("DB_PASSWORD", True), ("swanlab_token", True), ("args.hub_token", True),
    ("max_new_tokens", False), ("pad_token", False), ("eos_token", False), ("token_acc", False), ("tokenizer", False),
    ("hub_model_id", False), ("learning_rate", False), ("key", False), ("PWD", False),
])
def test_secret_names(name, secret):
    assert is_secret_name(name) is secret


def test_redact_text_forms():
    cases = {
        f"--hub_token {HF} --lr 1": f"--hub_token {REDACTED} --lr 1",
        "--wandb_api_key=abc123 x": f"--wandb_api_key={REDACTED} x",
        f"HF_TOKEN={HF} OPENAI_API_KEY='{SK}' swift": f"HF_TOKEN={REDACTED} OPENAI_API_KEY='{REDACTED}' swift",
        "TrainArguments(hub_token='abc', pad_token='<pad>', hub_token=None)":
            f"TrainArguments(hub_token='{REDACTED}', pad_token='<pad>', hub_token=None)",
        "{'hub_token': 'abc', 'token_acc': 0.5}": f"{{'hub_token': '{REDACTED}', 'token_acc': 0.5}}",
        "Setting args.hub_token: abc": f"Setting args.hub_token: {REDACTED}",
        "https://me:pw@host/x": f"https://me:{REDACTED}@host/x",
        f"loaded {SK} from env": f"loaded {REDACTED} from env",
        "hf_model_id='Qwen/Qwen2-7B' max_new_tokens: 64": "hf_model_id='Qwen/Qwen2-7B' max_new_tokens: 64",
    }
    for raw, want in cases.items():
        assert redact_text(raw) == want, raw
        assert redact_text(want) == want  # idempotent
    assert redact_argv(["--hub_token", "abc", "--lr", "1", "--api_key", "--x"]) == [
        "--hub_token", REDACTED, "--lr", "1", "--api_key", "--x"]
    doc = redact({"flags": {"hub_token": "abc", "password": 1234, "lr": 1e-4}, "argv": ["--hub_token", "abc"]})
    assert doc == {"flags": {"hub_token": REDACTED, "password": REDACTED, "lr": 1e-4}, "argv": ["--hub_token", REDACTED]}


def test_no_secret_in_any_analyze_or_parse_output(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(secret_log())
    rec = tmp_path / "rec.json"
    outs = []
    for fmt in ("text", "json", "markdown"):
        p = sd("analyze", str(log), "--format", fmt, "--save", str(rec), "-v")
        assert p.returncode == 0, p.stderr
        outs.append(p.stdout)
        _clean(rec.read_text())
    for fmt in ("text", "json"):
        outs.append(sd("parse", str(log), "--format", fmt).stdout)
    for out in outs:
        _clean(out)
    assert REDACTED in outs[1] and REDACTED in outs[2]  # the values were there, and are gone
    md = outs[2]
    assert "--hub_token" in md or "hub_token" in outs[1]  # the flag's name stays: only its value goes
    doc = json.loads(outs[1])
    assert "--model" in doc["run"]["launch"]["argv"]  # the rest of the launch line is untouched
    loaded = sd("analyze", "--load", str(rec), "--format", "markdown")
    assert loaded.returncode == 0
    _clean(loaded.stdout)


def test_redaction_leaves_the_parsed_run_intact(tmp_path):
    """patch and verify work from the parsed values: redaction copies what it writes, never mutates the run."""
    from diagnose.parse import parse_run

    log = tmp_path / "train.log"
    log.write_text(secret_log())
    run = parse_run([str(log)])
    out = redact(run)
    assert HF in run.launch.argv and HF not in out.launch.argv
    assert run.launch.flags.get("hub_token") == HF and out.launch.flags.get("hub_token") == REDACTED


def test_fleet_outputs_are_redacted_and_csv_cells_are_not_formulas(tmp_path):
    d = tmp_path / "sweep" / "run=HYPERLINK(1)"
    d.mkdir(parents=True)
    (d / "train.log").write_text(secret_log().replace("--model Qwen/Qwen2.5-7B", "--model =HYPERLINK(\"http://x\")"))
    outs = {fmt: sd("fleet", str(tmp_path / "sweep"), "--format", fmt, "--jobs", "1", "--no-progress")
            for fmt in ("csv", "json", "markdown", "table")}
    for p in outs.values():
        assert p.returncode == 0, p.stderr
        _clean(p.stdout)
    rows = outs["csv"].stdout.splitlines()[1:]
    assert rows and all(not cell.startswith(("=", "+", "-", "@")) for r in rows for cell in r.split(","))
    assert "'=HYPERLINK" in outs["csv"].stdout


def test_attach_outputs_are_redacted(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(secret_log())
    for fmt in ("json", "text"):
        p = sd("attach", str(log), "--once", "--no-gpu", "--format", fmt)
        assert p.returncode == 0, p.stderr
        _clean(p.stdout)


def test_verify_report_is_redacted(tmp_path):
    """The job's command (and its env) is in every verify report: json, text and --report markdown."""
    swift = tmp_path / "bin" / "swift"
    swift.parent.mkdir()
    swift.write_text("#!/bin/sh\nexit 99\n")  # trials fail at once: no training here, the report is still written
    swift.chmod(0o755)
    script = tmp_path / "train.sh"
    script.write_text(f"export HF_TOKEN={HF}\nswift sft --model m --dataset d.jsonl --hub_token {HF} "
                      "--report_to wandb --wandb_api_key wandb-plain-4f1d2c\n")
    report = tmp_path / "report.md"
    for fmt in ("json", "text"):
        p = sd("verify", str(script), "--set", "gradient_checkpointing=false", "--swift", str(swift),
               "--swift-version", "4.6.0", "--no-progress", "--format", fmt, "--report", str(report))
        assert p.returncode == 4, p.stderr
        assert "hub_token" in p.stdout or fmt == "text"
        _clean(p.stdout)
        _clean(report.read_text())
    assert HF in script.read_text()  # the user's script is the user's: untouched


def test_lint_ci_outputs_are_redacted(tmp_path):
    """json, github annotations and SARIF end up in CI logs and code-scanning pages."""
    script = tmp_path / "train.sh"
    script.write_text(f"swift sft --model m --dataset d.jsonl --hub_token {HF} --train_type lora\n")
    for fmt in ("json", "github", "sarif"):
        p = sd("lint", str(script), "--swift-version", "4.6.0", "--no-swift-check", "--output-format", fmt)
        assert p.returncode == 1 and "SW002" in p.stdout, p.stderr
        _clean(p.stdout)


# ---- item 2: records -----------------------------------------------------------------------------------------------

def _record(tmp_path):
    src = tmp_path / "run"
    shutil.copytree(FIXTURES / "nan_4x", src)
    rec = tmp_path / "rec.json"
    assert sd("analyze", str(src), "--save", str(rec)).returncode == 0
    return json.loads(rec.read_text()), rec


def test_a_record_never_opens_the_files_it_names(tmp_path):
    doc, rec = _record(tmp_path)
    assert doc["quoted"]  # the lines a report quotes travel in the record
    secret = tmp_path / "tokens.env"
    secret.write_text("\n".join(f"LEAKED_LINE_{i} private" for i in range(1, 2000)) + "\n")
    doc["analyze"]["run"]["line_file"] = str(secret)
    doc["analyze"]["run"]["sources"] = [str(secret)]
    for f in doc["analyze"]["findings"]:
        f["file"] = str(secret)
    rec.write_text(json.dumps(doc))
    p = sd("analyze", "--load", str(rec), "--format", "markdown")
    assert p.returncode == 0, p.stderr
    assert "LEAKED_LINE" not in p.stdout
    assert "grad_norm" in p.stdout  # the quoted lines came from the record itself


@pytest.mark.parametrize("target", ["/dev/zero", "fifo"])
def test_a_record_naming_a_device_or_fifo_neither_hangs_nor_grows(tmp_path, target):
    doc, rec = _record(tmp_path)
    if target == "fifo":
        target = str(tmp_path / "f.log")
        os.mkfifo(target)
    doc["analyze"]["run"]["line_file"] = target
    doc.pop("quoted")  # an older record without its lines: still nothing is opened
    rec.write_text(json.dumps(doc))
    p = sd_child("analyze", "--load", str(rec), "--format", "markdown", timeout=60, mem_mb=1500)
    assert p.returncode == 0, p.stderr


def _malformed(doc: dict, how: str) -> object:
    if how == "missing-analyze":
        doc.pop("analyze")
    elif how == "missing-primary":
        doc["analyze"].pop("primary")
    elif how == "wrong-type-findings":
        doc["analyze"]["findings"] = "many"
    elif how == "wrong-type-lines":
        doc["analyze"]["findings"][0]["lines"] = ["x"]
    elif how == "culprit-without-summary":
        doc["analyze"]["culprit"] = {"rank": 1}
    elif how == "steps-not-numbers":
        doc["steps"]["loss"] = [{"a": 1}] * len(doc["steps"]["loss"])
    elif how == "mismatched-lengths":
        doc["steps"]["loss"] = doc["steps"]["loss"][:3]
    elif how == "present-not-bools":
        doc["present"]["loss"] = [1] * len(doc["present"]["loss"])
    elif how == "run-wrong-types":
        doc["run"] = {"nodes": "x", "header_line": "top"}
    elif how == "quoted-wrong-type":
        doc["quoted"] = ["x"]
    elif how == "refs-without-file":  # found by the fuzz test: the console report read refs[i]["file"]
        doc["analyze"]["findings"][0]["refs"] = [{"line": 3}]
    elif how == "not-a-dict":
        return [1, 2, 3]
    elif how == "deep":
        return "[" * 100_000 + "]" * 100_000
    return doc


@pytest.mark.parametrize("how", ["missing-analyze", "missing-primary", "wrong-type-findings", "wrong-type-lines",
                                 "culprit-without-summary", "steps-not-numbers", "mismatched-lengths",
                                 "present-not-bools", "run-wrong-types", "quoted-wrong-type", "refs-without-file",
                                 "not-a-dict", "deep"])
def test_malformed_records_are_one_line_errors(tmp_path, how):
    doc, rec = _record(tmp_path)
    bad = _malformed(doc, how)
    rec.write_text(bad if isinstance(bad, str) else json.dumps(bad))
    for fmt in ("text", "markdown"):
        p = sd("analyze", "--load", str(rec), "--format", fmt)
        assert p.returncode == 2, (how, p.stderr)
        assert p.stderr.startswith("error: ") and "internal error" not in p.stderr and "Traceback" not in p.stderr
    if '"swiftdoc.record"' in rec.read_text()[:4096]:  # fleet takes it for a record: a row that says unreadable
        row = sd("fleet", str(rec), "--format", "json", "--jobs", "1", "--no-progress")
        assert row.returncode == 0 and json.loads(row.stdout)["runs"][0]["category"] == "unreadable"


# ---- item 13: control sequences, --save over an input, unreadable folders, markup in paths ----------------------

def test_terminal_control_sequences_never_reach_any_output(tmp_path):
    log = tmp_path / "esc.log"
    log.write_text("start\n\x1b]0;PWNED-TITLE\x07 title\n\x1b]52;c;ZWNobyBoYWNrZWQ=\x07 clipboard\n"
                   "\x1b[2J\x1b[H cleared \x9b31m\n" + OOM_LINE.rstrip("\n") + " \x1b]0;T2\x1b\\ tail\n")
    for args in (["parse"], ["parse", "--format", "json"], ["analyze"], ["analyze", "--format", "markdown"],
                 ["analyze", "--format", "json"]):
        out = sd(*args, str(log)).stdout
        for seq in ("\x1b", "\x07", "\x9b", "\\u001b", "\\u0007", "\\u009b", "]52;", "]0;"):
            assert seq not in out, (args, seq)
    err = sd("analyze", str(tmp_path / "\x1b]0;PWNED\x07.log")).stderr  # an error naming what the user gave
    assert err.startswith("error: ") and "\x1b" not in err and "\x07" not in err


def test_save_never_overwrites_an_input(tmp_path):
    log = tmp_path / "x.log"
    log.write_text(OOM_LINE)
    for target in (log, tmp_path / "link.log"):
        if target != log:
            target.symlink_to(log)
        p = sd("analyze", str(target), "--save", str(log))
        assert p.returncode == 2 and "input" in p.stderr
        assert log.read_text() == OOM_LINE
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "nan_4x", run)
    before = (run / "args.json").read_bytes()
    assert sd("analyze", str(run), "--save", str(run / "args.json")).returncode == 2
    assert (run / "args.json").read_bytes() == before


@pytest.mark.parametrize("folder", ["run[/b]", "sweep[lr=1e-4]", "x[bold red]y"])
def test_paths_that_look_like_markup_are_printed_as_they_are(tmp_path, folder):
    d = tmp_path / folder
    d.mkdir(parents=True)
    (d / "train.log").write_text(OOM_LINE)
    flat = lambda s: s.replace("\n", "").replace(" ", "").replace("│", "")  # noqa: E731
    for args in (["analyze", str(d / "train.log"), "-v"], ["fleet", str(tmp_path), "--no-progress", "--jobs", "1"]):
        p = sd(*args)
        assert p.returncode == 0, p.stderr
        assert folder.replace(" ", "") in flat(p.stdout), (args, p.stdout[-600:])


def test_fleet_says_which_folders_it_could_not_read(tmp_path, monkeypatch):
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "train.log").write_text(OOM_LINE)
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "train.log").write_text(OOM_LINE)
    real = os.scandir

    def scandir(path="."):  # as a user without the folder's read permission sees it (root reads every folder)
        if os.fspath(path) == str(locked):
            raise PermissionError(13, "Permission denied", str(locked))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    p = sd("fleet", str(tmp_path), "--no-progress", "--jobs", "1")
    assert p.returncode == 0
    assert str(locked) in p.stderr and "cannot" in p.stderr


def test_fleet_reads_only_regular_files(tmp_path):
    """A FIFO named *.log anywhere in the tree hung the whole run; a *.log link to /dev/zero ate a worker's memory."""
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "train.log").write_text(OOM_LINE)
    (tmp_path / "deep" / "er").mkdir(parents=True)
    os.mkfifo(tmp_path / "deep" / "er" / "pipe.log")
    (tmp_path / "zero.log").symlink_to("/dev/zero")
    p = sd_child("fleet", str(tmp_path), "--format", "json", "--no-progress", timeout=60, mem_mb=1500)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert [r["path"] for r in doc["runs"]] == [str(tmp_path / "ok" / "train.log")]
    assert "pipe.log" in p.stderr.decode() and "zero.log" in p.stderr.decode()
