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


_NUM = st.one_of(
    st.floats(-1e6, 1e6, allow_nan=False).map(lambda v: repr(round(v, 8))),
    st.floats(1e-12, 1e-3).map(lambda v: f"{v:.4e}"),
    st.integers(-5, 10**7).map(str),
    st.sampled_from(["nan", "inf", "-inf", "NaN", "0.0", "1e-05", "-0.5"]),
)
_PREFIX_ST = st.sampled_from(["", "", "", "[rank0]: ", " 10%|#  | 1/10 [00:01<00:09]\r", "2024-05-01 10:00:00 "])


@st.composite
def _dict_line(draw, i: int):
    vals = draw(st.lists(_NUM, min_size=6, max_size=6))
    q = draw(st.sampled_from(["", "", "'"]))  # transformers 5 quotes every value
    body = (f"{{'loss': {q}{vals[0]}{q}, 'grad_norm': {q}{vals[1]}{q}, 'learning_rate': {q}{vals[2]}{q}, "
            f"'token_acc': {q}{vals[3]}{q}, 'epoch': {q}{vals[4]}{q}, 'global_step/max_steps': '{i}/{draw(st.integers(i, 10**6))}', "
            f"'percentage': '1.00%', 'elapsed_time': '1m 2s', 'remaining_time': '3h 4m 5s', "
            f"'memory(GiB)': {q}{abs(float(vals[5])) if vals[5] not in ('nan', 'NaN') else vals[5]}{q}, 'train_speed(iter/s)': {q}0.5{q}}}")
    return draw(_PREFIX_ST) + body + draw(st.sampled_from(["", "", "\r"])), q


@st.composite
def _log_lines(draw):
    n = draw(st.integers(1, 40))
    out, quoting = [], set()
    for i in range(1, n + 1):
        line, q = draw(_dict_line(i))
        out.append(line)
        quoting.add(q)
        extra = draw(st.sampled_from([None, None, None, "[INFO:swift] a {'dict': 1} inside", "Train:  50%|#####     | 5/10", "{'loss': 1.0, 'grad_norm'"]))
        if extra:
            out.append(extra)
    return out, len(quoting) == 1


def _fast_rows(text: bytes):
    scan = scan_block(text)
    fast = {}
    for keys, cols, lines in scan.groups:
        for j, ln in enumerate(lines.tolist()):
            fast[ln] = {k: float(v[j]) for k, v in cols.items()}
    return scan, fast


def _same(x: float, y) -> bool:
    return (math.isnan(x) and math.isnan(float(y))) or x == float(y)


@pytest.mark.parametrize("pandas_path", [False, True])
@settings(max_examples=80, deadline=None)
@given(log=_log_lines())
def test_fast_path_equals_slow_path(log, pandas_path):
    # differential: every value the vectorised reader returns equals the general dict reader's,
    # bit for bit (nan included), on prefixed, quoted, \r-ended and interleaved lines; every dict
    # line is read by one of the two readers; with pandas_path the block goes through read_csv
    import diagnose.parse.fastdict as fd

    lines, uniform = log
    old = fd._PANDAS_MIN_VALUES
    fd._PANDAS_MIN_VALUES = 1 if pandas_path else 10**12
    try:
        scan, fast = _fast_rows(("\n".join(lines) + "\n").encode())
    finally:
        fd._PANDAS_MIN_VALUES = old
    odd = set(scan.odd_lines.tolist())
    for i, raw in enumerate(lines):
        slow = parse_dict(raw) if "{'loss': " in raw else None
        if slow is None or "global_step/max_steps" not in slow:
            assert i not in fast
            continue
        assert i in fast or (i in odd and not uniform), raw  # one quoting style: all read fast
        if i in fast:
            row = fast[i]
            step, max_steps = slow["global_step/max_steps"].split("/")
            assert row["global_step/max_steps#0"] == float(step) and row["global_step/max_steps#1"] == float(max_steps)
            for k in ("loss", "grad_norm", "learning_rate", "token_acc", "epoch", "memory(GiB)", "train_speed(iter/s)"):
                assert _same(row[k], to_number(slow[k])), (k, raw)
    assert not (set(fast) & odd)


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


def test_step_rows_grow_past_a_wrong_estimate_and_keep_presence():
    from diagnose.parse.steps import StepRows

    rows = StepRows()
    rows.reserve(10)  # far too small: the buffers must grow and keep what they hold
    keys = ["loss", "global_step/max_steps", "train_speed(iter/s)"]
    for g in range(3):
        n = 2000
        steps = np.arange(g * n + 1, (g + 1) * n + 1, dtype=float)
        cols = {"global_step/max_steps#0": steps, "global_step/max_steps#1": np.full(n, 9000.0),
                "train_speed(iter/s)": np.full(n, 2.0)}
        if g != 1:
            cols["loss"] = steps / 1000
        rows.add_group(keys, cols, (steps * 2).astype(np.int64))
    rows.add_dict({"loss": "nan", "global_step/max_steps": "6001/9000", "train_speed(iter/s)": 2.0}, 1)  # earliest line
    assert len(rows) == 6001
    t = rows.build()
    assert len(t) == 6001
    assert t["line"][0] == 1 and t["step"][0] == 6001  # sorted by source line
    assert (np.diff(t["line"]) > 0).all()
    loss_present = t.present("loss")
    assert loss_present[0] and math.isnan(t["loss"][0])  # printed nan: present
    assert not loss_present[2001:4001].any() and np.isnan(t["loss"][2001:4001]).all()  # group without loss
    assert loss_present[1:2001].all() and t["loss"][1] == 0.001
    assert (t["max_steps"][1:] == 9000).all()
    np.testing.assert_allclose(t["interval_s"][2:2001], 0.5)  # 2 iter/s, cumulative -> 0.5 s per step


def test_swap_in_use_is_read_from_free_top_and_a_printed_value():
    from diagnose.parse.snapshots import Snapshots

    def read(*lines: str):
        s = Snapshots()
        consumed = [s.feed(i + 1, ln) for i, ln in enumerate(lines)]
        return (s.result() or {}).get("swap"), consumed

    swap, used = read("               total        used        free      shared  buff/cache   available",
                      "Mem:           251Gi        34Gi       2.1Gi       1.0Gi       215Gi       214Gi",
                      "Swap:           31Gi        23Gi       8.0Gi")
    assert abs(swap["used_gib"] - 23) < 1e-9 and abs(swap["total_gib"] - 31) < 1e-9 and used[2] and swap["line"] == 3
    swap, used = read("MiB Swap:  32768.0 total,   8192.0 free,  24576.0 used.  10240.0 avail Mem")
    assert abs(swap["used_gib"] - 24) < 1e-9 and used == [True]
    # a progress line that carries it: recorded, and the line is left to the step readers
    swap, used = read("3/3  11.3G  1.362: 63% 40/63 16.1s/it  RAM= 16.3/17.2 GB (95.2%) | swap= 23.78 GB",
                      "3/3  11.3G  1.362: 65% 41/63 2.0it/s  RAM= 15.8/17.2 GB (91.9%) | swap= 22.10 GB")
    assert abs(swap["used_gib"] - 23.78) < 1e-9 and swap["line"] == 1 and used == [False, False]
    assert read("Swapping the two columns of the table")[0] is None


def test_host_ram_in_use_is_read_from_deepspeeds_see_memory_usage_and_free():
    from diagnose.parse.run import parse_text
    from diagnose.pipeline import analyze_run

    ds = ("[2023-04-20 19:03:19,581] [INFO] [utils.py:831:see_memory_usage] After creating fp32 partitions\n"
          "[2023-04-20 19:03:19,581] [INFO] [utils.py:840:see_memory_usage] CPU Virtual Memory:  used = 20.1 GB, percent = 64.0%\n"
          "[2023-04-20 19:03:21,581] [INFO] [utils.py:840:see_memory_usage] CPU Virtual Memory:  used = 29.71 GB, percent = 95.3%\n")
    run = parse_text(ds)
    assert run.snapshot["host_used"] == {"used_gib": 29.71, "used_pct": 95.3, "line": 3}
    d = analyze_run(run)
    assert (d.primary.category, d.primary.rule, d.primary.confidence) == ("oom", "OOM012", "weak")
    assert analyze_run(parse_text(ds.replace("95.3%", "71.0%"))).primary.category != "oom"
    # free's available against its total says the same
    free = ("               total        used        free      shared  buff/cache   available\n"
            "Mem:           251Gi       240Gi       2.1Gi       1.0Gi         9Gi       5.0Gi\n")
    assert analyze_run(parse_text(free)).primary.rule == "OOM012"


def test_a_finished_checkpoint_shards_bar_marks_the_model_loaded():
    from diagnose.pipeline import analyze_run

    done = "Loading checkpoint shards: 100%|██████████| 3/3 [00:01<00:00,  1.68it/s]\n"
    part = "Loading checkpoint shards:  67%|██████▋   | 2/3 [00:01<00:00,  1.68it/s]\n"
    head = "2025-06-22 11:25:46,469 - INFO - Loading model...\n"
    run = parse_text(head + part + done + "2025-06-22 11:25:56,759 - INFO - Loading datasets...\n")
    assert run.model_loaded_line == 3
    assert parse_text(head + part).model_loaded_line is None
    diag = analyze_run(run)
    assert diag.primary.category == "healthy" and diag.primary.confidence == "weak"
    assert "checkpoint shards loaded" in diag.primary.summary
    # a crash after the load is still a crash
    crashed = parse_text(head + done + "Traceback (most recent call last):\n  File \"t.py\", line 3, in <module>\n"
                         "    main()\nValueError: bad value\n")
    assert analyze_run(crashed).primary.category != "healthy"


def test_a_frame_path_with_spaces_is_read():
    # Windows installs under 'C:\Program Files\...': the path after 'File "' may hold spaces
    text = ('Traceback (most recent call last):\n'
            '  File ".\\main.py", line 143, in train\n'
            '    for i, (images, target) in enumerate(train_loader):\n'
            '  File "C:\\Program Files\\Anaconda3\\lib\\site-packages\\torch\\utils\\data\\dataloader.py", line 310, in __iter__\n'
            '    return DataLoaderIter(self)\n'
            "AttributeError: Can't pickle local object 'get_loader.<locals>.<lambda>'\n")
    tb = next(e for e in parse_text(text).events if e.kind == "traceback")
    files = [f["file"] for f in tb.detail["frames"]]
    assert files[-1].endswith("torch\\utils\\data\\dataloader.py") and files[-1].startswith("C:\\Program Files")
    assert tb.detail["frames"][-1]["func"] == "__iter__"


def test_a_loss_whose_running_average_is_inf_is_a_nonfinite_metric_a_grad_norm_is_not():
    row = ("I20250104 12:12:42 90 dinov2 helpers.py:102] Training  [ 1250/2500000]  eta: 40 days, 13:22:08  "
           "lr: 0.0006 (0.0003)  total_loss: 6.7223 (inf)  koleo_loss: 0.0315 (inf)\n")
    run = parse_text(row * 3)
    assert "total_loss (running average)" in run.nonfinite
    amp = "Epoch: [0]  [ 100/2000]  lr: 0.0001  loss: 2.1 (2.3)  grad_norm: 3.2 (inf)  time: 0.8\n"
    assert not any("grad_norm" in k for k in parse_text(amp * 3).nonfinite)
