"""`swiftdoc patch`: planning semantics, the script reader, the editor and the command as a user meets it.

Small hand-built inputs for the semantics (version spellings, labels, conflicts, batch halving,
value checks), the real fixture folders end to end (every patch planned from every fixture's
log passes the flag table of that fixture's version), and the CLI in a subprocess
(exit codes, one-line errors, --write with a backup, nothing written on bad input).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import fixture_dirs, load_expected

from diagnose.diagnosis import Diagnosis, Primary
from diagnose.engine import Finding, RemedyOp, ResolvedRemedy
from diagnose.errors import InputError
from diagnose.flags import table_for
from diagnose.patch.argv import resolve_occurrences, split_argv
from diagnose.patch.checks import check_flags
from diagnose.patch.edit import UnsafeEdit, apply_to_script, edits_for
from diagnose.patch.launch import read_launch
from diagnose.patch.models import Request
from diagnose.patch.plan import parse_assignments, plan_patch
from diagnose.patch.source import launch_from_run, plan_for_launch

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "fixtures" / "scripts"


def req(op: str, flag: str | None = None, value=None, env: str | None = None, effect: str = "safe",
        rule: str = "R001") -> Request:
    return Request(op=RemedyOp(op=op, flag=flag, env=env, value=value), effect=effect, rule=rule, title=f"{op} {flag}")


def swiftdoc(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = dict(os.environ, SWIFTDOC_SWIFT_PYTHON="/nonexistent")  # the real-parser check has its own tests
    return subprocess.run([sys.executable, "-m", "diagnose", *args], capture_output=True, cwd=cwd, timeout=120, env=env)


# ----------------------------------------------------------------------------- version spelling
@pytest.mark.parametrize("version,flag,value", [
    ("4.6.0", "--tuner_type", "full"), ("3.12.6", "--train_type", "full"), ("2.6.1", "--sft_type", "full"),
])
def test_tuner_type_is_spelled_per_version(version, flag, value):
    plan = plan_patch([], {}, [req("set", "tuner_type", "full")], version)
    assert plan.argv == [flag, value]


@pytest.mark.parametrize("version,tokens", [
    ("4.6.0", ["--attn_impl", "flash_attn"]), ("3.8", ["--attn_impl", "flash_attn"]),
    ("2.6.1", ["--use_flash_attn", "true"]),
])
def test_flash_attention_is_spelled_per_version(version, tokens):
    assert plan_patch([], {}, [req("set", "attn_impl", "flash_attn")], version).argv == tokens


@pytest.mark.parametrize("version,tokens", [("4.6.0", ["--torch_dtype", "bfloat16"]), ("2.6.1", ["--dtype", "bf16"])])
def test_dtype_is_spelled_per_version(version, tokens):
    assert plan_patch([], {}, [req("set", "torch_dtype", "bfloat16", effect="changes-training")], version).argv == tokens


def test_megatron_names_per_version():
    p3 = plan_patch([], {}, [req("at_least", "dataloader_num_workers", 8)], "3.12.6", command="megatron sft")
    p4 = plan_patch([], {}, [req("at_least", "dataloader_num_workers", 8)], "4.6.0", command="megatron sft")
    assert p3.argv == ["--num_workers", "8"] and p4.argv == ["--dataloader_num_workers", "8"]
    lr = plan_patch(["--lr", "1e-4"], {}, [req("at_most", "learning_rate", 1e-5, effect="changes-training")], "4.6.0",
                    command="megatron_sft")
    assert lr.argv == ["--lr", "1e-5"]


def test_no_2x_only_flag_on_3x_or_4x():
    argv = ["--use_flash_attn", "true", "--check_dataset_strategy", "none", "--sft_type", "lora", "--dtype", "bf16"]
    for v in ("3.8", "3.12.6", "4.0.4", "4.6.0"):
        plan = plan_patch(argv, {}, None, v)
        t = table_for(v)
        _, occs = split_argv(plan.argv)
        resolve_occurrences(occs, t, "sft")
        assert all(o.status == "exact" for o in occs), (v, plan.argv)
        assert not [f for f in check_flags(occs, t, "sft") if f.severity == "error"]


# ----------------------------------------------------------------------------- semantics
def test_labels_are_honest():
    plan = plan_patch(["--dataloader_num_workers", "0"], {},
                      [req("at_least", "dataloader_num_workers", 4), req("set", "max_length", 1024),
                       req("set_env", env="NCCL_P2P_DISABLE", value=1), req("set_env", env="NPROC_PER_NODE", value=4)],
                      "4.6.0")
    eff = {(c.flag or c.env): c.effect for c in plan.changes}
    # a rule that calls max_length or NPROC_PER_NODE "safe" is overruled: they change what is trained
    assert eff == {"dataloader_num_workers": "safe", "max_length": "changes-training", "NCCL_P2P_DISABLE": "safe",
                   "NPROC_PER_NODE": "changes-training"}
    ml = next(c for c in plan.changes if c.flag == "max_length")
    assert "dropped" in ml.note  # says what changes


def test_only_safe_skips_training_changes():
    plan = plan_patch([], {}, [req("set", "max_length", 1024), req("at_least", "dataloader_num_workers", 4)], "4.6.0",
                      only_safe=True)
    assert [c.flag for c in plan.changes] == ["dataloader_num_workers"]
    assert any("only-safe" in u for u in plan.unchanged)


def test_halving_keeps_the_global_batch_and_states_the_default_assumption():
    plan = plan_patch(["--per_device_train_batch_size", "8"], {"NPROC_PER_NODE": "2"},
                      [req("halve_batch_keep_global", effect="changes-training")], "4.6.0")
    got = dict(zip(plan.argv[::2], plan.argv[1::2]))
    # ms-swift's default accumulation: ceil(16 / 8 / 2) = 1 -> 2 at batch 4
    assert got == {"--per_device_train_batch_size": "4", "--gradient_accumulation_steps": "2"}
    assert any("ceil(16" in a for a in plan.assumptions)
    assert all(c.effect == "changes-training" for c in plan.changes)


def test_halving_without_keep_global_and_on_megatron():
    p = plan_patch(["--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "2"], {},
                   [req("halve_batch_keep_global", effect="changes-training")], "4.6.0", keep_global=False)
    assert p.argv == ["--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "2"]
    assert "halves" in p.changes[0].note
    m = plan_patch(["--micro_batch_size", "4", "--global_batch_size", "64"], {},
                   [req("halve_batch_keep_global", effect="changes-training")], "4.6.0", command="megatron sft")
    assert m.argv == ["--micro_batch_size", "2", "--global_batch_size", "64"]


def test_halving_is_relative_to_the_logged_run_so_it_is_idempotent():
    logged = {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 2}
    once = plan_patch(["--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "2"], {},
                      [req("halve_batch_keep_global", effect="changes-training")], "4.6.0", effective=logged)
    twice = plan_patch(once.argv, {}, [req("halve_batch_keep_global", effect="changes-training")], "4.6.0",
                       effective=logged)
    assert twice.changes == [] and twice.argv == once.argv


def test_explicit_lower_batch_raises_accumulation():
    plan = plan_patch(["--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "4"], {}, None,
                      "4.6.0", explicit=parse_assignments(["per_device_train_batch_size=2"], "set"))
    assert plan.argv == ["--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "8"]


def _finding(rule: str, ops: list[RemedyOp], effect: str = "safe", severity: str = "warning") -> Finding:
    return Finding(rule=rule, slug=rule.lower(), category="config", severity=severity, summary=rule, evidence="",
                   remedies=[ResolvedRemedy(title=f"{rule} remedy", effect=effect, ops=ops)])


def test_conflicts_are_resolved_and_the_dropped_one_reported():
    f1 = _finding("OOM002", [RemedyOp(op="set", flag="streaming", value=True)], "changes-training", "error")
    f2 = _finding("DL003", [RemedyOp(op="set", flag="streaming", value=False)], "changes-training")
    f3 = _finding("BUS001", [RemedyOp(op="at_most", flag="dataloader_num_workers", value=1)])
    adv = Finding(rule="GEN001", slug="g", category="config", severity="info", summary="s", evidence="",
                  remedies=[ResolvedRemedy(title="read the docs", effect="advice")])
    diag = Diagnosis(primary=Primary(category="oom", rule="OOM002", severity="error", summary="s"),
                     findings=[f1, f2, f3, adv])
    from diagnose.diagnosis import merge_remedies

    diag.dropped = merge_remedies(diag.findings)
    plan = plan_patch(["--dataloader_num_workers", "4", "--max_steps", "100"], {}, diag, "4.6.0")
    assert ("streaming", "true") in {(c.flag, c.new) for c in plan.changes}
    assert [d.rule for d in plan.dropped] == ["DL003"]
    assert [a.rule for a in plan.advice] == ["GEN001"]  # advice is listed, never applied


def test_same_change_from_two_rules_is_one_change():
    f1 = _finding("OOM001", [RemedyOp(op="set_env", env="PYTORCH_CUDA_ALLOC_CONF", value="expandable_segments:True")])
    f2 = _finding("MB001", [RemedyOp(op="set_env", env="PYTORCH_CUDA_ALLOC_CONF", value="expandable_segments:True")])
    plan = plan_patch([], {}, [f1, f2], "4.6.0")
    assert len(plan.changes) == 1 and plan.changes[0].rules == ["OOM001", "MB001"] and plan.dropped == []


def test_alloc_conf_is_merged_not_overwritten():
    plan = plan_patch([], {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128"},
                      [req("set_env", env="PYTORCH_CUDA_ALLOC_CONF", value="expandable_segments:True")], "4.6.0")
    assert plan.env["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:128,expandable_segments:True"


def test_workers_above_the_core_count_are_refused_with_the_line(tmp_path):
    launch = read_launch((SCRIPTS / "seed001_ddp.sh").read_text())
    with pytest.raises(InputError) as ei:
        plan_for_launch(launch, None, "4.6.0", cpu_cores=8, explicit=parse_assignments(["dataloader_num_workers=64"],
                                                                                         "set"))
    assert "line 27" in ei.value.message and "8 CPU cores" in ei.value.message
    # from a rule the same value is a problem and the change is skipped, not an error
    plan = plan_for_launch(launch, [req("at_least", "dataloader_num_workers", 64)], "4.6.0", cpu_cores=8)
    assert not any(c.flag == "dataloader_num_workers" for c in plan.changes)
    assert any("8 CPU cores" in p.message for p in plan.problems)


def test_unknown_dtype_is_refused():
    with pytest.raises(InputError) as ei:
        plan_patch(["--torch_dtype", "bfloat16"], {}, None, "4.6.0",
                   explicit=parse_assignments(["torch_dtype=bf17"], "set"))
    assert "invalid choice" in ei.value.message


# ----------------------------------------------------------------------------- the script reader
def test_reader_handles_real_script_shapes():
    text = (SCRIPTS / "seed001_ddp.sh").read_text()
    L = read_launch(text)
    assert L.kind == "swift" and L.subcommand == "sft"
    assert L.env["NPROC_PER_NODE"].value == "2" and L.env["CUDA_VISIBLE_DEVICES"].kind == "inline"
    i = L.argv.index("--dataset")
    assert L.argv[i + 1:i + 3] == ["AI-ModelScope/alpaca-gpt4-data-zh#500", "AI-ModelScope/alpaca-gpt4-data-en#500"]
    assert "You are a helpful assistant." in L.argv
    mm = read_launch((SCRIPTS / "multimodal_inline_env.sh").read_text())
    assert '{"fps_max_frames": 12}' in mm.argv and mm.env["MAX_PIXELS"].value == "1003520"


@pytest.mark.parametrize("script,kind,cmd", [
    ("multinode_torchrun.sh", "torchrun", "sft"), ("python_m_nohup.sh", "python", "sft"),
    ("megatron_4x.sh", "megatron", "megatron_sft"), ("seed000_streaming_pt.sh", "swift", "pt"),
])
def test_reader_launchers(script, kind, cmd):
    L = read_launch((SCRIPTS / script).read_text(), base_dir=SCRIPTS)
    assert (L.kind, L.subcommand) == (kind, cmd)


def test_torchrun_options_are_the_environment():
    L = read_launch((SCRIPTS / "multinode_torchrun.sh").read_text())
    assert L.env["NPROC_PER_NODE"].value == "8" and L.env["NNODES"].value == "2"
    assert L.env["NPROC_PER_NODE"].kind == "torchrun"


def test_config_file_is_expanded_like_ms_swift():
    L = read_launch((SCRIPTS / "yaml_config.sh").read_text(), base_dir=SCRIPTS)
    assert L.argv[:2] == ["--model", "Qwen/Qwen2.5-7B-Instruct"]
    assert L.argv[L.argv.index("--use_flash_attn") + 1] == "True"  # str(True), as parse_yaml_args writes it
    assert L.argv[-2:] == ["--output_dir", "output/yaml_run"]
    assert L.env["PYTORCH_CUDA_ALLOC_CONF"].kind == "config"


def test_broken_continuations_are_named_by_line():
    L = read_launch((SCRIPTS / "seed001_fsdp.sh").read_text())
    msgs = [m for ln, sev, m, _code in L.problems if sev == "error"]
    assert any("ends on line 10" in m and "--fsdp" in m for m in msgs)
    assert "--fsdp" in L.argv  # joined back: what the author meant


@pytest.mark.parametrize("script,why", [
    ("heredoc_remote.sh", "heredoc"), ("lr_sweep_loop.sh", "loop"), ("two_stages.sh", "several swift training"),
])
def test_unsafe_places_are_named_and_not_edited(script, why):
    L = read_launch((SCRIPTS / script).read_text())
    assert L.unsafe and why in L.unsafe[0][1] and L.unsafe[0][0] > 0
    plan = plan_for_launch(L, [req("at_least", "dataloader_num_workers", 4)], "4.6.0")
    assert plan.changes  # the flag diff is still printed
    with pytest.raises(UnsafeEdit):
        edits_for(L, plan)


def test_no_swift_command_is_an_input_error():
    with pytest.raises(InputError) as ei:
        read_launch("#!/bin/bash\necho hello\npython train.py --lr 1\n")
    assert "no swift training command" in ei.value.message
    with pytest.raises(InputError) as ei:
        read_launch("swift infer --model x\n")
    assert "swift infer" in ei.value.message


def test_apply_to_script_api_preserves_other_bytes():
    text = "# keep   me\r\nexport A=1\r\nswift sft \\\r\n\t--model m  \\\r\n\t--max_length 4096\r\n# tail\r\n"
    plan = plan_patch(["--model", "m", "--max_length", "4096"], {}, [req("set", "max_length", 2048),
                                                                      req("set_env", env="NCCL_IB_DISABLE", value=1)],
                      "4.6.0")
    new = apply_to_script(text, plan)
    assert new == ("# keep   me\r\nexport A=1\r\nexport NCCL_IB_DISABLE=1\r\nswift sft \\\r\n\t--model m  \\\r\n"
                   "\t--max_length 2048\r\n# tail\r\n")


def test_removing_the_last_flag_takes_the_continuation_with_it():
    text = "swift sft \\\n  --model m \\\n  --device_map auto\necho ok\n"
    plan = plan_patch(["--model", "m", "--device_map", "auto"], {}, [req("remove", "device_map")], "4.6.0")
    assert apply_to_script(text, plan) == "swift sft \\\n  --model m\necho ok\n"


# ----------------------------------------------------------------------------- every fixture's log
DIRS = [d for d in fixture_dirs()]


@pytest.mark.parametrize("d", DIRS, ids=[d.name for d in DIRS])
def test_every_fixture_patch_passes_its_versions_flag_table(d):
    from diagnose.parse import parse_run
    from diagnose.patch.source import effective_from_run
    from diagnose.pipeline import analyze_run

    exp = load_expected(d)
    run = parse_run([str(d if exp.get("input", ".") == "." else d / exp["input"])])
    version = str(exp["parse"]["swift_version"])
    table = table_for(version)
    try:
        rc = launch_from_run(run, table)
    except InputError:
        pytest.skip("the log holds no command (no run sh line, args dump or args.json)")
    plan = plan_patch(rc.argv, rc.env, analyze_run(run), version, command=rc.command, launcher=rc.launcher,
                      effective=effective_from_run(run), world_size=run.world_size)
    _, occs = split_argv(plan.argv)
    resolve_occurrences(occs, table, plan.command)
    errors = [f.message for f in check_flags(occs, table, plan.command) if f.severity == "error"]
    assert errors == [], errors
    for c in plan.changes:  # nothing we add is rejected by the table
        if c.tokens:
            assert table.resolve(plan.command, c.tokens[0].split("=")[0]).status == "exact"
    if (d / "launch.sh").exists():  # and the checked-in launch script takes the same patch, idempotently
        text = (d / "launch.sh").read_text()
        L = read_launch(text)
        p2 = plan_for_launch(L, analyze_run(run), version, effective=effective_from_run(run),
                             world_size=run.world_size)
        new = apply_to_script(text, p2)
        p3 = plan_for_launch(read_launch(new), analyze_run(run), version, effective=effective_from_run(run),
                             world_size=run.world_size)
        assert p3.changes == []


# ----------------------------------------------------------------------------- the command
def _one_line_error(p: subprocess.CompletedProcess) -> str:
    err = p.stderr.decode()
    assert "Traceback" not in err and err.startswith("error: ")
    assert len([ln for ln in err.splitlines() if ln.startswith("error: ")]) == 1
    return err


def test_cli_write_applies_atomically_with_a_backup_and_twice_changes_nothing(tmp_path):
    d = ROOT / "fixtures" / "nan_4x"
    script = tmp_path / "train.sh"
    original = (d / "launch.sh").read_bytes()
    script.write_bytes(original)
    script.chmod(0o755)
    p = swiftdoc("patch", str(script), "--log", str(d), "--write")
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "train.sh.bak").read_bytes() == original
    assert script.read_bytes() != original and os.access(script, os.X_OK)
    after = script.read_bytes()
    p2 = swiftdoc("patch", str(script), "--log", str(d), "--write")
    assert p2.returncode == 0 and b"nothing to change" in p2.stdout
    assert script.read_bytes() == after and not (tmp_path / "train.sh.bak.1").exists()


def test_cli_json_shape(tmp_path):
    d = ROOT / "fixtures" / "synthetic_4x_remaining_argv"
    p = swiftdoc("patch", "--log", str(d), "--format", "json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert set(out) >= {"changes", "argv", "env", "problems"}
    for c in out["changes"]:
        assert ("flag" in c) != ("env" in c)
        assert {"old", "new", "effect", "rule"} <= set(c) and c["effect"] in ("safe", "changes-training")
    for pr in out["problems"]:
        assert {"message"} <= set(pr)
    assert "--use_flash_attn" not in out["argv"] and "--attn_impl" in out["argv"]


def test_cli_text_names_finding_and_label():
    p = swiftdoc("patch", "--log", str(ROOT / "fixtures" / "synthetic_4x_rtx40"))
    out = p.stdout.decode()
    assert p.returncode == 0
    assert "+ export NCCL_P2P_DISABLE=1" in out and "[safe] NC002" in out


@pytest.mark.parametrize("content,needle", [
    (b"\x00\x01\x02binary\x00" * 50, "binary"), (b"", "empty"), (b"#!/bin/bash\necho hi\n", "no swift training"),
])
def test_cli_bad_scripts_exit_2_and_write_nothing(tmp_path, content, needle):
    s = tmp_path / "train.sh"
    s.write_bytes(content)
    p = swiftdoc("patch", str(s), "--set", "dataloader_num_workers=4", "--write")
    assert p.returncode == 2
    assert needle in _one_line_error(p)
    assert s.read_bytes() == content and not (tmp_path / "train.sh.bak").exists()


def test_cli_invalid_value_names_the_line_and_writes_nothing(tmp_path):
    s = tmp_path / "train.sh"
    s.write_bytes((SCRIPTS / "seed001_ddp.sh").read_bytes())
    p = swiftdoc("patch", str(s), "--swift-version", "4.6.0", "--cpu-cores", "8", "--set", "dataloader_num_workers=32",
                 "--write")
    assert p.returncode == 2
    err = _one_line_error(p)
    assert "line 27" in err and "8 CPU cores" in err
    p = swiftdoc("patch", str(s), "--swift-version", "4.6.0", "--set", "torch_dtype=fp17", "--write")
    assert p.returncode == 2 and "line 10" in _one_line_error(p)
    assert s.read_bytes() == (SCRIPTS / "seed001_ddp.sh").read_bytes()


def test_cli_unsafe_script_prints_the_diff_and_refuses_to_write(tmp_path):
    s = tmp_path / "sweep.sh"
    s.write_bytes((SCRIPTS / "lr_sweep_loop.sh").read_bytes())
    p = swiftdoc("patch", str(s), "--set", "dataloader_num_workers=4")
    assert p.returncode == 0 and b"+ --dataloader_num_workers 4" in p.stdout and b"not edited" in p.stdout
    w = swiftdoc("patch", str(s), "--set", "dataloader_num_workers=4", "--write")
    assert w.returncode == 2 and "loop" in _one_line_error(w)
    assert s.read_bytes() == (SCRIPTS / "lr_sweep_loop.sh").read_bytes()


def test_cli_usage_errors():
    p = swiftdoc("patch")
    assert p.returncode == 2 and "nothing to patch" in _one_line_error(p)
    p = swiftdoc("patch", str(SCRIPTS / "seed001_ddp.sh"), "--swift-version", "9.9")
    assert p.returncode == 2 and "9.9" in _one_line_error(p)
    p = swiftdoc("patch", str(SCRIPTS / "seed001_ddp.sh"), "--set", "oops")
    assert p.returncode == 2 and "NAME=VALUE" in _one_line_error(p)


def test_patch_does_not_import_swift_or_torch():
    code = ("import sys, runpy; sys.argv=['swiftdoc','patch','--log',%r,'--no-swift-check','--format','json'];"
            "from diagnose.cli import main; import io, contextlib\n"
            "with contextlib.redirect_stdout(io.StringIO()): main(sys.argv[1:])\n"
            "assert not any(m in sys.modules for m in ('swift','torch','pynvml')), [m for m in sys.modules if m in "
            "('swift','torch','pynvml')]" % str(ROOT / "fixtures" / "synthetic_4x_rtx40"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
