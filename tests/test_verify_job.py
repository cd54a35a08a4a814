"""verify: reading the job, planning the arms, and the argv of one trial (pure; no ms-swift needed)."""
from __future__ import annotations

import json

import pytest

from diagnose.errors import UsageError
from diagnose.patch.plan import parse_assignments
from diagnose.verify import job as J

SCRIPT = """#!/bin/bash
export CUDA_VISIBLE_DEVICES=0,1
export NCCL_DEBUG=WARN
NPROC_PER_NODE=2 swift sft \\
    --model Qwen/Qwen2.5-7B-Instruct \\
    --dataset data/train.jsonl other/set#500 \\
    --tuner_type lora \\
    --per_device_train_batch_size 4 --gradient_accumulation_steps 2 \\
    --gradient_checkpointing true \\
    --eval_steps 100 --save_steps 100 --load_best_model_at_end true \\
    --resume_from_checkpoint output/v3/checkpoint-200 \\
    --output_dir output/qwen
"""


@pytest.fixture()
def job(tmp_path):
    p = tmp_path / "train.sh"
    p.write_text(SCRIPT)
    return J.job_from_script(str(p), swift="swift", version="4.6.0", cwd=str(tmp_path))


def test_script_is_read_with_its_environment(job):
    assert job.command == "sft"
    assert job.env == {"CUDA_VISIBLE_DEVICES": "0,1", "NCCL_DEBUG": "WARN", "NPROC_PER_NODE": "2"}
    assert job.argv[:2] == ["--model", "Qwen/Qwen2.5-7B-Instruct"]
    assert job.source.endswith("train.sh line 4")
    assert J.global_batch_of(job.argv, job.env, job) == 16  # 4 x 2 x 2 processes


def test_trial_argv_is_the_job_plus_trial_flags(job):
    v = J.build_variants(job, J.units_from_requests(job, parse_assignments(["gradient_checkpointing=false"], "set"),
                                                    True))[0]
    argv, env = J.trial_argv(v, job, J.TrialSettings(max_steps=30, warmup=3, subset=700), "/tmp/t1/out")
    s = " ".join(argv)
    assert argv[:2] == ["swift", "sft"]
    for flags in ("--max_steps 30", "--logging_steps 1", "--save_strategy no", "--eval_strategy no",
                  "--report_to none", "--output_dir /tmp/t1/out", "--check_model false"):
        assert flags in s
    # the user's output dir, resume, best-model and cadence flags never reach a trial
    for gone in ("output/qwen", "resume_from_checkpoint", "load_best_model_at_end", "--save_steps", "--eval_steps"):
        assert gone not in s
    # the same subset of every dataset (an explicit #N is kept)
    assert "--dataset data/train.jsonl#700 other/set#500" in s
    assert env["NPROC_PER_NODE"] == "2" and env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert "--gradient_checkpointing true" in s  # the baseline is never modified


def test_variants_differ_only_by_the_change(job):
    units = J.units_from_requests(job, parse_assignments(["gradient_checkpointing=false"], "set")
                                  + parse_assignments(["NCCL_P2P_DISABLE=1"], "env"), True)
    base, patched = J.build_variants(job, units)
    st = J.TrialSettings(max_steps=20, warmup=3, subset=None)
    a, ea = J.trial_argv(base, job, st, "/o")
    b, eb = J.trial_argv(patched, job, st, "/o")
    assert len(a) == len(b)
    assert [(x, y) for x, y in zip(a, b) if x != y] == [("true", "false")]  # edited in place, nothing else
    assert eb == {**ea, "NCCL_P2P_DISABLE": "1"}
    assert [c.label() for c in patched.changes] == ["--gradient_checkpointing false", "NCCL_P2P_DISABLE=1"]
    assert patched.safe


def test_ablation_plans_each_change_alone(job):
    units = J.units_from_requests(job, parse_assignments(["gradient_checkpointing=false", "dataloader_num_workers=4"],
                                                         "set"), True)
    vs = J.build_variants(job, units, ablate=True)
    assert [v.label for v in vs] == ["baseline", "only --gradient_checkpointing false",
                                     "only --dataloader_num_workers 4", "patched"]
    assert [len(v.changes) for v in vs] == [0, 1, 1, 2]


def test_a_value_the_flag_table_rejects_is_still_tried(job):
    units = J.units_from_requests(job, parse_assignments(["gradient_checkpointing=maybe"], "set"), True)
    assert units[0].raw is not None and "invalid bool" in units[0].message
    _, patched = J.build_variants(job, units)
    assert patched.prevalidation and "--gradient_checkpointing maybe" in " ".join(patched.argv)
    assert patched.changes[0].effect == "unknown"


def test_batch_change_is_planned_with_its_accumulation(job):
    units = J.units_from_requests(job, parse_assignments(["per_device_train_batch_size=2"], "set"), True)
    _, patched = J.build_variants(job, units)
    assert J.global_batch_of(patched.argv, patched.env, job) == 16  # accumulation raised to keep the global batch
    assert all(c.effect == "changes-training" for c in patched.changes)


def test_command_after_double_dash_and_megatron_refused(tmp_path):
    j = J.job_from_argv(["USE_HF=1", "swift", "sft", "--model", "m", "--dataset", "d.jsonl"], swift="swift",
                        version="4.6.0", cwd=str(tmp_path))
    assert j.env == {"USE_HF": "1"} and j.argv == ["--model", "m", "--dataset", "d.jsonl"]
    with pytest.raises(UsageError, match="Megatron"):
        J.job_from_argv(["megatron", "sft", "--model", "m"], swift="swift", version="4.6.0")


def test_torchrun_launch_runs_through_the_swift_cli(tmp_path):
    p = tmp_path / "t.sh"
    p.write_text("torchrun --nproc_per_node 4 /x/site-packages/swift/cli/sft.py --model m --dataset d\n")
    j = J.job_from_script(str(p), swift="swift", version="4.6.0")
    assert j.env["NPROC_PER_NODE"] == "4" and j.launcher == "torchrun"
    assert any("swift CLI" in n for n in j.notes)


def test_plan_file_requests(tmp_path, job):
    from diagnose.commands.verify import _plan_requests

    plan = {"changes": [
        {"flag": "gradient_checkpointing", "old": "true", "new": "false", "effect": "safe", "rule": "CFG009",
         "tokens": ["--gradient_checkpointing", "false"]},
        {"env": "PYTORCH_CUDA_ALLOC_CONF", "old": None, "new": "expandable_segments:True", "effect": "safe",
         "rule": "OOM002"},
        {"flag": "resume_from_checkpoint", "old": "x", "new": None, "effect": "changes-training", "rule": "lint"}]}
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(plan))
    reqs = _plan_requests(str(f))
    assert [(r.op.op, r.rule) for r in reqs] == [("set", "CFG009"), ("set_env", "OOM002"), ("remove", "lint")]
    _, patched = J.build_variants(job, J.units_from_requests(job, reqs, explicit=False))
    labels = [c.label() for c in patched.changes]
    assert "--gradient_checkpointing false" in labels and "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in labels
