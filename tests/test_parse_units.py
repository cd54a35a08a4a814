"""Parser units on small hand-built inputs: every version's dict shape, speed units, intervals, quirks."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diagnose.parse import parse_text
from diagnose.parse.dicts import parse_dict
from diagnose.parse.fastdict import scan_block
from diagnose.parse.values import parse_duration, to_number

V2 = "{{'loss': {l}, 'acc': 0.62, 'grad_norm': 2.75, 'learning_rate': 2e-05, 'memory(GiB)': 16.79, 'train_speed(iter/s)': {s}, 'epoch': 0.01, 'global_step/max_steps': '{i}/50', 'percentage': '2.00%', 'elapsed_time': '2s', 'remaining_time': '1m 40s'}}"
V30 = "{{'loss': {l}, 'token_acc': 0.65, 'grad_norm': 10.56, 'learning_rate': 2e-06, 'memory(GiB)': 4.87, 'train_speed(iter/s)': {s}, 'epoch': 0.01, 'global_step/max_steps': '{i}/50', 'percentage': '1.06%', 'elapsed_time': '2s', 'remaining_time': '4m 28s'}}"
V38 = "{{'loss': {l}, 'grad_norm': 10.56, 'learning_rate': 2e-06, 'token_acc': 0.65, 'epoch': 0.01, 'global_step/max_steps': '{i}/50', 'percentage': '1.06%', 'elapsed_time': '2s', 'remaining_time': '4m 28s', 'memory(GiB)': 4.87, 'train_speed(iter/s)': {s}}}"
V3125 = "{{'loss': {l}, 'grad_norm': 10.56, 'learning_rate': 2e-06, 'token_acc': 0.65, 'epoch': 0.01, 'global_step/max_steps': '{i}/50', 'percentage': '1.06%', 'elapsed_time': '2s', 'remaining_time': '4m 28s', 'memory(GiB)': 4.87, 'train_speed(s/it)': {s}}}"
V4 = "{{'loss': '{l}', 'grad_norm': '1.482', 'learning_rate': '9.938e-05', 'token_acc': '0', 'epoch': '0.02', 'global_step/max_steps': '{i}/50', 'elapsed_time': '0s', 'remaining_time': '1s', 'train_speed(s/it)': '{s}'}}"


def _log(tmpl: str, n: int, spi: float, per_s: bool) -> str:
    lines = []
    for i in range(1, n + 1):
        s = (i / (spi * i)) if per_s else spi  # constant speed
        lines.append(tmpl.format(l=round(2.0 - i * 0.01, 4), s=round(s, 6), i=i))
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("tmpl,per_s,version", [
    (V2, True, "2.x"), (V30, True, "3.0-3.7"), (V38, True, "3.8-3.12.4"), (V3125, False, "3.12.5-3.12.6"), (V4, False, "4.x"),
])
def test_each_version_shape_gives_version_and_interval(tmpl, per_s, version):
    run = parse_text(_log(tmpl, 30, 0.5, per_s))
    assert run.swift_version == version
    assert len(run.steps) == 30
    iv = run.steps["interval_s"]
    assert np.allclose(iv[1:], 0.5, rtol=1e-3)
    assert run.steps.last()["step"] == 30 and run.max_steps == 50


def test_interval_is_derived_not_cumulative():
    # GIVEN a 4.x log whose cumulative s/it hides a slow stretch (steps 11-20 take 2 s each)
    elapsed, rows = 0.0, []
    for i in range(1, 31):
        elapsed += 2.0 if 11 <= i <= 20 else 0.5
        rows.append(V4.format(l=1.0, s=f"{elapsed / i:.8f}", i=i))
    run = parse_text("\n".join(rows))
    iv = run.steps["interval_s"]
    # THEN the interval column shows the slow stretch exactly, the cumulative one does not
    assert np.allclose(iv[10:20], 2.0, rtol=1e-4) and np.allclose(iv[21:], 0.5, rtol=1e-4)
    assert run.steps["train_speed_s_per_it"][-1] == pytest.approx(elapsed / 30, rel=1e-6)


def test_nan_inf_in_stdout_and_jsonl_forms():
    text = "\n".join([
        "{'loss': nan, 'grad_norm': inf, 'learning_rate': 1e-4, 'global_step/max_steps': '1/3', 'train_speed(s/it)': 0.1}",
        "{'loss': '1.0', 'grad_norm': 'nan', 'learning_rate': '1e-4', 'global_step/max_steps': '2/3', 'train_speed(s/it)': '0.1'}",
        "{'loss': 1.0, 'learning_rate': 1e-4, 'global_step/max_steps': '3/3', 'train_speed(s/it)': 0.1}",
    ])
    run = parse_text(text)
    t = run.steps
    assert math.isnan(t["loss"][0]) and math.isinf(t["grad_norm"][0]) and math.isnan(t["grad_norm"][1])
    assert t.present("grad_norm").tolist() == [True, True, False]  # absent is not nan
    ev = [e for e in run.events if e.kind == "nan"]
    assert ev and ev[0].line == 1 and ev[0].detail["count"] == 2


def test_tqdm_fragments_rank_prefix_timestamps_and_pasted_quotes():
    line = V38.format(l=1.5, s=0.4, i=7)
    text = "\n".join([
        "Train:  14%|█▍        | 7/50 [00:02<00:11,  3.62it/s]\r" + line,
        "[rank0]: " + V38.format(l=1.4, s=0.4, i=8),
        "> " + V38.format(l=1.3, s=0.4, i=9),
        "> " + V38.format(l=1.2, s=0.4, i=10)[:120],
        "> " + V38.format(l=1.2, s=0.4, i=10)[120:],
    ])
    run = parse_text(text)
    assert run.steps["step"].tolist() == [7, 8, 9, 10]
    assert run.steps["loss"][-1] == pytest.approx(1.2)


def test_megatron_pipe_line():
    line = (" [2026-01-05 10:11:12] iteration        5/     100 | consumed samples:           80 | elapsed time per iteration (ms): 1234.5 |"
            " memory(GiB): 20.5 | elapsed time: 1m 2s | remaining time: 20m 3s | learning rate: 1.000000E-05 | global batch size:    16 |"
            " loss: 1.234567E+00 | loss scale: 1.0 | grad norm: 2.345 | number of skipped iterations:   0 | number of nan iterations:   0 |")
    run = parse_text(line)
    r = run.steps.last()
    assert (r["step"], r["max_steps"]) == (5, 100)
    assert r["loss"] == pytest.approx(1.234567) and r["interval_s"] == pytest.approx(1.2345) and r["memory_gib"] == 20.5
    assert run.swift_version == "3.8-3.12" and run.trainer == "ms-swift-megatron"


def test_args_dumps_and_run_sh():
    text = "\n".join([
        "run sh: `/usr/bin/python -m torch.distributed.run --nproc_per_node 4 --master_port 29500 /x/swift/cli/sft.py --model Qwen/Qwen2.5-7B --dataset a.jsonl b.jsonl --tuner_type lora --dataloader_num_workers 0`",
        "[INFO:swift] args: SftArguments(",
        "acc_strategy=token,",
        "dataloader_num_workers=0,",
        "gradient_accumulation_steps=8,",
        "tuner_type=lora,",
        "target_modules=['all-linear'],",
        ")",
        "[INFO:swift] rank: 0, local_rank: 0, world_size: 4, local_world_size: 4",
        "[INFO:swift] Dataset Token Length: 103.450000±15.567514, min=80.000000, max=126.000000, size=200",
    ])
    run = parse_text(text)
    la = run.launch
    assert la.launcher == "torchrun" and la.nproc_per_node == 4 and la.command == "sft"
    assert la.flags["dataset"] == ["a.jsonl", "b.jsonl"] and la.flags["dataloader_num_workers"] == 0
    assert la.flags["gradient_accumulation_steps"] == 8 and la.flags["target_modules"] == ["all-linear"]
    assert run.world_size == 4 and run.dataset.size == 200
    assert run.swift_version == "4.x" and "tuner_type" in run.version_clue


def test_2x_single_line_args_repr():
    run = parse_text("[INFO:swift] args: SftArguments(model_type='qwen-7b-chat', sft_type='lora', batch_size=2, lora_target_modules=['ALL'], dtype='bf16')\n")
    f = run.launch.flags
    assert f["sft_type"] == "lora" and f["batch_size"] == 2 and f["lora_target_modules"] == ["ALL"]
    assert run.swift_version == "2.x"


def test_values_helpers():
    assert to_number("'5.794'") == 5.794 and math.isnan(to_number("NaN")) and to_number("Infinity") == math.inf
    assert to_number("abc") is None and to_number("12") == 12
    assert parse_duration("1d 2h 3m 4s") == 86400 + 7200 + 180 + 4 and parse_duration("0s") == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.01, 100), st.floats(1e-8, 1.0), st.booleans()), min_size=1, max_size=25))
def test_fast_path_equals_slow_path(rows):
    # the vectorised reader and the general dict reader agree on every generated line
    text = "\n".join(
        (V4 if quoted else V38).format(l=round(loss, 6), s=round(spd, 8), i=i + 1)
        for i, (loss, spd, quoted) in enumerate(rows)
    ) + "\n"
    scan = scan_block(text.encode())
    fast = {}
    for keys, cols, lines in scan.groups:
        for j, ln in enumerate(lines):
            fast[int(ln)] = cols["loss"][j]
    for i, raw in enumerate(text.splitlines()):
        if i in fast:
            assert fast[i] == pytest.approx(parse_dict(raw)["loss"])
    assert len(fast) + len(scan.odd_lines) == len(rows)


def test_argparse_error_is_bad_args():
    run = parse_text("usage: sft.py [-h]\nsft.py: error: argument --gradient_checkpointing: Truthy value expected: got maybe\n")
    assert [(e.kind, e.line) for e in run.events] == [("bad_args", 2)]


def test_resumed_run_counts_s_per_it_from_the_checkpoint_step():
    # GIVEN a 4.x run resumed from checkpoint-100, 0.5 s per step since the restart
    rows = [V4.format(l=1.0, s="0.5", i=i).replace(f"'{i}/50'", f"'{i}/200'") for i in range(101, 111)]
    text = "run sh: `/usr/bin/python /x/swift/cli/sft.py --resume_from_checkpoint out/v0-1/checkpoint-100`\n" + "\n".join(rows)
    run = parse_text(text)
    # THEN elapsed counts from step 100 and every interval is 0.5 s (not 0.5 * 101 for the first row)
    assert run.steps["elapsed_s"][0] == pytest.approx(0.5)
    assert np.allclose(run.steps["interval_s"], 0.5)


def test_logging_jsonl_alone_gives_every_eval_and_skips_the_nested_summary(tmp_path):
    rows = [json.dumps({"loss": 1.0 - i * 0.1, "grad_norm": 1.0, "learning_rate": 1e-4, "global_step/max_steps": f"{i}/4",
                        "elapsed_time": "1s", "remaining_time": "1s", "train_speed(s/it)": 0.5}) for i in range(1, 5)]
    evals = [json.dumps({"eval_loss": 0.9 - i * 0.1, "eval_runtime": 1.0, "global_step/max_steps": f"{2 * i}/4"}) for i in (1, 2)]
    summary = json.dumps({"model_parameter_info": "PeftModelForCausalLM: 1.0000M Params (0.1000M Trainable [10.0000%]), 0.0000M Buffers.",
                          "last_model_checkpoint": "None", "log_history": [{"loss": 9.0, "global_step/max_steps": "9/9"}]})
    (tmp_path / "logging.jsonl").write_text("\n".join([rows[0], rows[1], evals[0], rows[2], rows[3], evals[1], summary]) + "\n")
    from diagnose.parse import parse_run

    run = parse_run([str(tmp_path / "logging.jsonl")])
    assert run.steps["step"].tolist() == [1, 2, 3, 4]
    assert [e["eval_loss"] for e in run.evals] == pytest.approx([0.8, 0.7])
    assert run.model.params_m == 1.0 and run.checkpoints == []
