"""The remedy engine (diagnose.remedies): every remedy is checked against the run before it is shown, and analyze
and patch tell one story.  Cases from issue #18: a timeout 'raised' below what the run has, a default shown as a
change, a micro-batch cut that needs the script's own flags, ZeRO advice for a script that already uses it."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from diagnose.effective import EffectiveConfig, Known
from diagnose.engine import RemedyOp
from diagnose.parse import parse_run
from diagnose.parse.run import parse_text
from diagnose.pipeline import analyze_run
from diagnose.remedies import resolve_op, satisfies
from diagnose.render.ops_text import op_lines
from tests.conftest import FIXTURES, ROOT

CLI = [sys.executable, "-m", "diagnose"]

# a 4.x excerpt: one step row at 500/1000, then an OOM on rank 3 (no run sh line, no args dump)
OOM_EXCERPT = """\
{'loss': '0.8123', 'grad_norm': '0.4411', 'learning_rate': '8.2e-05', 'token_acc': '0.7712', 'epoch': '0.5', 'global_step/max_steps': '500/1000', 'elapsed_time': '2h 3m 10s', 'remaining_time': '2h 3m 10s', 'memory(GiB)': '77.02', 'train_speed(s/it)': '14.78'}
Train:  50%|█████     | 500/1000 [2:03:10<2:03:10, 14.78s/it]
[rank3]: Traceback (most recent call last):
[rank3]:   File "/usr/local/lib/python3.10/site-packages/swift/cli/sft.py", line 10, in <module>
[rank3]:     sft_main()
[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.32 GiB. GPU 3 has a total capacity of 79.15 GiB of which 1.05 GiB is free. Including non-PyTorch memory, this process has 78.09 GiB memory in use.
"""

SCRIPT = """\
#!/bin/bash
NPROC_PER_NODE=8 \\
swift sft \\
    --model Qwen/Qwen2.5-7B-Instruct \\
    --tuner_type lora \\
    --dataset my_data.jsonl \\
    --per_device_train_batch_size 4 \\
    --gradient_accumulation_steps 4 \\
    --deepspeed zero2 \\
    --output_dir output
"""


def _remedy(diag, rule: str, title_part: str):
    f = next(f for f in diag.findings if f.rule == rule)
    return next(r for r in f.remedies if title_part in r.title)


def test_timeout_remedy_never_lowers_the_run_s_timeout():
    run = parse_run([str(FIXTURES / "synthetic_3125_nccl_timeout")])
    diag = analyze_run(run)
    rem = _remedy(diag, "NC001", "wait longer")
    op = rem.ops[0]
    assert op.flag == "ddp_timeout" and op.status == "already" and op.current == 18000000
    assert rem.status == "already"
    text = "\n".join(op_lines(op))
    assert "+ --ddp_timeout" not in text and "18000000 already" in text
    assert "1800 s" in (op.detail or "")  # the watchdog's own timeout, which ddp_timeout did not govern
    assert not any(d.op.flag == "ddp_timeout" for d in diag.dropped)


def test_timeout_remedy_applies_when_the_watchdog_shows_a_shorter_wait():
    line = ("[rank1]:[E1012 09:21:03.364585470 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600087 "
            "milliseconds before timing out.\n")
    diag = analyze_run(parse_text(line))
    op = _remedy(diag, "NC001", "wait longer").ops[0]
    assert op.status == "change" and op.current == 600 and "watchdog" in op.source
    f = next(f for f in diag.findings if f.rule == "NC001")
    assert "ALLREDUCE" in f.evidence and "rank 1" in f.evidence and "600 s" in f.evidence  # op/rank/timeout


def test_default_is_never_shown_as_a_change_on_an_excerpt():
    diag = analyze_run(parse_text(OOM_EXCERPT))
    gc = _remedy(diag, "OOM001", "Recompute").ops[0]
    assert gc.status == "unknown" and gc.assumed and gc.current is True  # 4.x default, the excerpt shows no args
    assert op_lines(gc)[0].startswith("? ") and "only if you changed it" in op_lines(gc)[0]
    halve = _remedy(diag, "OOM001", "Halve")
    assert halve.status == "conditional" and "per_device_train_batch_size" in (halve.condition or "")


def test_oom_phase_reads_the_step_counter_and_evidence_has_no_gaps():
    diag = analyze_run(parse_text(OOM_EXCERPT))
    f = next(f for f in diag.findings if f.rule == "OOM001")
    assert f.values["oom_phase"] == "mid_run"
    assert "after step 500 of 1000" in f.evidence and "peak logged memory 77.02" in f.evidence
    assert "n/a" not in f.evidence and "longest sample" not in f.evidence  # unknown parts are left out


def test_evidence_never_says_n_a_on_any_fixture_or_real_case():
    paths = [d for d in sorted(FIXTURES.glob("*/expected.yaml"))] + sorted((FIXTURES / "realworld" / "cases").glob("*"))
    bad = []
    for p in paths:
        target = p.parent if p.name == "expected.yaml" else p
        try:
            diag = analyze_run(parse_run([str(target)]))
        except Exception:  # noqa: BLE001 - unreadable inputs are tested elsewhere
            continue
        bad += [(target.name, f.rule, f.evidence) for f in diag.findings if "n/a" in f.evidence]
    assert not bad, bad[:5]


@pytest.fixture()
def oom_job(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "train.sh").write_text(SCRIPT)
    (tmp_path / "oom.log").write_text(OOM_EXCERPT)
    return tmp_path / "train.sh", tmp_path / "oom.log"


def test_patch_cuts_the_micro_batch_from_the_script_s_own_flags(oom_job):
    script, log = oom_job
    p = subprocess.run(CLI + ["patch", str(script), "--log", str(log), "--no-swift-check", "--format", "json"],
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    ch = {c.get("flag"): c for c in d["changes"] if c.get("flag")}
    assert ch["per_device_train_batch_size"]["old"] == "4" and ch["per_device_train_batch_size"]["new"] == "2"
    assert ch["gradient_accumulation_steps"]["old"] == "4" and ch["gradient_accumulation_steps"]["new"] == "8"
    advice = json.dumps(d["advice"])
    assert "zero2" not in advice.replace("ZeRO-2 shards", "")  # the script already runs ZeRO-2: never advised
    assert "--deepspeed zero3" in advice
    assert any("gradient_checkpointing is already true" in u for u in d["unchanged"])


def test_analyze_and_patch_agree_on_what_is_in_place(oom_job):
    """The same log: analyze (no script) says the default holds unless changed; patch with a script that does not
    set it says it is in place. Neither proposes it as a change."""
    script, log = oom_job
    a = subprocess.run(CLI + ["analyze", str(log), "--format", "json"], capture_output=True, text=True, cwd=ROOT)
    ops = [op for f in json.loads(a.stdout)["findings"] for r in f["remedies"] for op in r["ops"]
           if op.get("flag") == "gradient_checkpointing"]
    assert ops and all(op["status"] != "change" for op in ops)
    p = subprocess.run(CLI + ["patch", str(script), "--log", str(log), "--no-swift-check", "--format", "json"],
                       capture_output=True, text=True, cwd=ROOT)
    d = json.loads(p.stdout)
    assert not any(c.get("flag") == "gradient_checkpointing" for c in d["changes"])


# ---------------------------------------------------------------------------- properties over the flag tables
def _static_flag_ops():
    from diagnose.rules import load_rules

    for rule in load_rules():
        for rem in rule.remedies:
            for op in rem.ops:
                if op.flag and op.op in ("set", "at_least", "at_most") and op.value is not None and not op.value_from:
                    yield rule.id, op


def test_no_remedy_op_shows_a_version_default_as_a_change():
    """For every rule's op and every flag table: resolved against a run whose flags are shown and leave the flag at
    the version's default, an op equal to the default (or an at_least below it, an at_most above it) is never a
    change."""
    from diagnose.flags import available_versions, table_for

    checked = 0
    for version in available_versions():
        specs = table_for(version).specs("sft")
        for rid, op in _static_flag_ops():
            s = specs.get(op.flag)
            if s is None or s.default is None or s.default_expr is not None:
                continue
            cfg = EffectiveConfig(trainer="ms-swift", version=version, versions=[version],
                                  values={"model": Known("m", "args", "the args dump")})
            r = resolve_op(RemedyOp(op=op.op, flag=op.flag, value=op.value), cfg, {})
            if satisfies(op.op, op.value, s.default, op.flag):
                assert r.status == "already", (version, rid, op, s.default)
                assert not any(ln.startswith("+") for ln in op_lines(r)), (version, rid)
            checked += 1
    assert checked > 50


@given(op=st.sampled_from(["at_least", "at_most"]), target=st.integers(1, 10**8), current=st.integers(0, 10**8),
       source=st.sampled_from(["args", "argv", "script", "setting", "default"]))
def test_a_bound_never_moves_the_value_the_wrong_way(op, target, current, source):
    cfg = EffectiveConfig(trainer="ms-swift", version="4.6.0", versions=["4.6.0"],
                          values={} if source == "default" else {"ddp_timeout": Known(current, source, source)})
    if source == "default":
        cfg.values = {"model": Known("m", "args", "the args dump")}
    r = resolve_op(RemedyOp(op=op, flag="ddp_timeout", value=target), cfg, {})
    cur = r.current
    if r.status == "change":  # a change always moves toward the bound
        assert (target > cur) if op == "at_least" else (target < cur)
    else:
        assert r.status == "already"
