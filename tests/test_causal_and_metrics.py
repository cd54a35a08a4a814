"""Which came first, and nan in any metric (issue #17): the diagnosis reads the order of what the text shows and
every metric a trainer prints, not only loss and grad_norm."""
from __future__ import annotations

from diagnose.parse.run import parse_text
from diagnose.pipeline import analyze_run

WATCHDOG = ("[rank1]:[E1012 09:21:03.364585470 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for "
            "1800087 milliseconds before timing out.")


def test_preprocessing_still_running_when_the_collective_timed_out_is_data_loading():
    text = "\n".join([
        "Running tokenizer on dataset (num_proc=8):  45%|████▌     | 54000/120000 [28:10<34:25, 31.95 examples/s]",
        WATCHDOG,
    ])
    diag = analyze_run(parse_text(text + "\n"))
    assert diag.primary.category == "data_loading" and diag.primary.rule == "DL021"
    assert any(f.rule == "NC001" for f in diag.findings)  # the timeout is still reported, as the consequence


def test_a_timeout_after_training_started_is_not_blamed_on_preprocessing():
    text = "\n".join([
        "Map (num_proc=8):  45%|████▌     | 54000/120000 [28:10<34:25, 31.95 examples/s]",
        "Map (num_proc=8): 100%|██████████| 120000/120000 [58:10<00:00, 31.95 examples/s]",
        "{'loss': 1.2, 'grad_norm': 0.5, 'learning_rate': 1e-05, 'epoch': 0.1, 'global_step/max_steps': '5/100'}",
        WATCHDOG,
    ])
    diag = analyze_run(parse_text(text + "\n"))
    assert diag.primary.category == "nccl"
    assert not any(f.rule == "DL021" for f in diag.findings)


def test_nan_in_a_reward_or_kl_is_nan():
    rows = [f"{{'loss': 0.1, 'grad_norm': 0.5, 'learning_rate': 1e-06, 'reward': {r}, 'kl': {k}, "
            f"'rewards/accuracy/std': nan, 'epoch': 0.{i}}}" for i, (r, k) in enumerate([(0.5, 0.01), (0.4, "nan"),
                                                                                            ("nan", "nan")], 1)]
    diag = analyze_run(parse_text("\n".join(rows) + "\n"))
    assert diag.primary.category == "nan" and diag.primary.rule == "NAN009"
    f = next(f for f in diag.findings if f.rule == "NAN009")
    assert "kl" in f.evidence and "reward" in f.evidence and "std" not in f.evidence


def test_a_spread_that_is_nan_alone_is_not_a_problem():
    rows = [f"{{'loss': 0.1, 'grad_norm': 0.5, 'learning_rate': 1e-06, 'reward': 0.5, 'reward_std': nan, "
            f"'epoch': 0.{i}}}" for i in range(1, 4)]
    diag = analyze_run(parse_text("\n".join(rows) + "\n"))
    assert diag.primary.category != "nan"


def test_nan_in_an_eval_metric_is_nan():
    text = "\n".join([
        "{'loss': 0.9, 'grad_norm': 0.5, 'learning_rate': 1e-05, 'epoch': 0.5, 'global_step/max_steps': '50/100'}",
        "{'eval_loss': 1.1, 'eval_token_acc': nan, 'eval_runtime': 3.1, 'epoch': 0.5}",
    ])
    diag = analyze_run(parse_text(text + "\n"))
    assert diag.primary.category == "nan"


def test_a_snapshot_of_busy_full_gpus_alone_is_normal_caching():
    smi = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|=========================================+========================+======================|
|   0  NVIDIA A100-SXM4-80GB          On  |   00000000:07:00.0 Off |                    0 |
| N/A   62C    P0            380W /  400W |   79123MiB /  81920MiB |     98%      Default |
+-----------------------------------------+------------------------+----------------------+
|   1  NVIDIA A100-SXM4-80GB          On  |   00000000:0B:00.0 Off |                    0 |
| N/A   60C    P0            372W /  400W |   78870MiB /  81920MiB |     97%      Default |
+-----------------------------------------+------------------------+----------------------+
"""
    diag = analyze_run(parse_text(smi))
    assert diag.primary.category == "healthy" and diag.primary.confidence == "probable"
    assert "caching" in diag.primary.summary


def test_text_without_steps_that_shows_the_job_at_work_is_healthy_weak():
    # Megatron prints its index-map build times at start-up ('elasped' is its own spelling for doc-idx)
    fast = "\n".join([
        " > WARNING: could not find index map files, building the indices on rank 0 ...",
        " > elasped time to build and save doc-idx mapping (seconds): 0.008020",
        " > elapsed time to build and save sample-idx mapping (seconds): 1.838097",
        " > elapsed time to build and save shuffle-idx mapping (seconds): 4.836150",
    ])
    d = analyze_run(parse_text(fast + "\n"))
    assert (d.primary.category, d.primary.confidence) == ("healthy", "weak") and "4.84 s" in d.primary.summary
    slow = fast.replace("4.836150", "270.6")  # minutes of every GPU waiting: DL008
    assert analyze_run(parse_text(slow + "\n")).primary.rule == "DL008"
    done = "Map (num_proc=4): 100%|██████████| 5000/5000 [00:03<00:00, 1500.00 examples/s]"
    d = analyze_run(parse_text(done + "\n"))
    assert d.primary.category == "healthy" and "preprocessing pass(es) finished" in d.primary.summary
    assert analyze_run(parse_text("hello\nworld\n")).primary.category == "unknown"


def _swift_rows(n: int, **metrics) -> str:
    rows = []
    for i in range(1, n + 1):
        d = {**metrics, "learning_rate": 1e-05, "epoch": round(i / 100, 2), "global_step/max_steps": f"{i * 5}/500",
             "memory(GiB)": 30.1, "train_speed(iter/s)": 0.5}
        rows.append(repr(d))
    return "\n".join(rows) + "\n"


def test_a_loss_no_token_mean_can_reach_is_named():
    d = analyze_run(parse_text(_swift_rows(4, loss=812.5, grad_norm=8102.3)))
    assert d.primary.rule == "GEN006" and "812.5" in next(f.evidence for f in d.findings if f.rule == "GEN006")
    assert analyze_run(parse_text(_swift_rows(4, loss=1.85, grad_norm=0.9))).primary.category == "healthy"


def test_a_loss_of_exactly_zero_on_every_step_is_named_except_in_rl():
    d = analyze_run(parse_text(_swift_rows(3, loss=0.0, grad_norm=1.7320508075688772)))
    assert d.primary.rule == "GEN007" and d.primary.category == "config"
    # GRPO: the loss sits at 0 while the policy learns (rewards vary within the groups)
    rl = analyze_run(parse_text(_swift_rows(3, loss=0.0, grad_norm=0.31, reward=0.4, reward_std=0.2,
                                            frac_reward_zero_std=0.25)))
    assert rl.primary.category == "healthy" and not any(f.rule in ("GEN007", "CFG019") for f in rl.findings)


def test_grpo_groups_that_never_differ_in_reward_are_config():
    d = analyze_run(parse_text(_swift_rows(3, loss=0.0, grad_norm=0.0, reward=-3.0, reward_std=0.0,
                                           frac_reward_zero_std=1.0, kl=0.0)))
    assert d.primary.rule == "CFG019" and d.primary.category == "config"
    # the metric is read under a logger's prefix too (train/..., as verl and wandb-style dumps print it)
    d = analyze_run(parse_text(_swift_rows(3, loss=0.0, **{"train/frac_reward_zero_std": 1.0, "train/reward": 1.0})))
    assert d.primary.rule == "CFG019"


def test_lightning_profiler_report_measures_the_data_wait():
    report = "\n".join([
        "FIT Profiler Report",
        "-" * 60,
        "|  Action                                     \t|  Mean duration (s)\t|  Num calls      \t|  Total time (s) "
        "\t|  Percentage %   \t|",
        "|  Total                                      \t|  -              \t|  1397           \t|  99.734         "
        "\t|  100 %          \t|",
        "|  run_training_epoch                         \t|  91.657         \t|  1              \t|  91.657         "
        "\t|  91.901         \t|",
        "|  [_TrainingEpochLoop].train_dataloader_next \t|  4.0            \t|  16             \t|  64.0           "
        "\t|  64.17          \t|",
    ])
    d = analyze_run(parse_text(report + "\n"))
    assert d.primary.rule == "DL025" and d.primary.confidence == "certain"
    assert abs(d.features["profiler_data_wait_frac"] - 64.0 / 91.657) < 1e-6
    quick = report.replace("64.0           ", "3.0            ")
    assert analyze_run(parse_text(quick + "\n")).primary.rule != "DL025"


def _interrupted_in(frames: list[str]) -> str:
    return "\n".join(["{'loss': 1.2, 'grad_norm': 0.5, 'learning_rate': 1e-05, 'epoch': 0.1, "
                      "'global_step/max_steps': '5/100'}", "^CTraceback (most recent call last):", *frames,
                      "KeyboardInterrupt"]) + "\n"


def test_ctrl_c_while_waiting_for_batches_is_a_data_stall_and_elsewhere_an_interruption():
    waiting = _interrupted_in([
        '  File "/py/site-packages/torch/utils/data/dataloader.py", line 1295, in _get_data',
        "    success, data = self._try_get_data()",
        '  File "/py/site-packages/torch/utils/data/dataloader.py", line 1133, in _try_get_data',
        "    data = self._data_queue.get(timeout=timeout)",
        '  File "/usr/lib/python3.10/multiprocessing/queues.py", line 113, in get',
        "    if not self._poll(timeout):",
        '  File "/usr/lib/python3.10/multiprocessing/connection.py", line 424, in _poll',
        "    r = wait([self], timeout)"])
    d = analyze_run(parse_text(waiting))
    assert d.primary.rule == "DL026" and d.features["signal_where"] == "dataloader"
    assert any(f.rule == "INT001" for f in d.findings)  # the interruption is still said, as what followed
    computing = _interrupted_in([
        '  File "/py/site-packages/torch/nn/modules/module.py", line 1553, in _call_impl',
        "    return forward_call(*args, **kwargs)"])
    d = analyze_run(parse_text(computing))
    assert d.primary.rule == "INT001" and d.primary.category == "interrupted"


def _closing(sig: str) -> str:
    return "\n".join(
        [f"WARNING:torch.distributed.elastic.multiprocessing.api:Sending process {4100 + i} closing signal {sig}"
         for i in range(3)] + [
            "Traceback (most recent call last):",
            '  File "/opt/conda/bin/torchrun", line 8, in <module>',
            "    sys.exit(main())",
            '  File "/opt/conda/lib/python3.10/site-packages/torch/distributed/run.py", line 762, in main',
            "    run(args)",
            '  File "/opt/conda/lib/python3.10/site-packages/torch/distributed/launcher/api.py", line 237, in launch_agent',
            "    result = agent.run()",
        ]) + "\n"


def test_a_signal_torchrun_forwarded_to_its_workers_is_an_interruption():
    # the agent sends a worker anything but SIGTERM only when it received that signal itself
    diag = analyze_run(parse_text(_closing("SIGHUP")))
    assert diag.primary.category == "interrupted" and diag.primary.rule == "INT001"
    assert "SIGHUP" in diag.features["stop_signal"]
    # SIGTERM is its default after a worker failed: no signal is claimed from it
    assert analyze_run(parse_text(_closing("SIGTERM"))).features.get("stop_signal") is None


def _bars(rates: list[float]) -> str:
    out, el = [], 0.0
    for i, r in enumerate(rates, 1):
        el += 100 * r
        out.append(f"steps:  {i}%|█         | {i * 100}/10000 [{int(el // 3600)}:{int(el % 3600 // 60):02d}:"
                   f"{int(el % 60):02d}<10:00:00, {r:.2f}s/it, avr_loss=0.0056]")
    return "\n".join(out) + "\n"


def test_a_run_that_keeps_slowing_down_leans_memory():
    diag = analyze_run(parse_text(_bars([2.1, 2.9, 3.8, 4.6, 5.9, 7.2])))
    assert diag.features["step_time_growth_x"] >= 1.5
    assert (diag.primary.category, diag.primary.rule, diag.primary.confidence) == ("memory_bandwidth", "MB007", "weak")
    # a steady run, and one whose speed only swings, are not slowing down
    assert analyze_run(parse_text(_bars([2.1, 2.0, 2.2, 2.1, 2.0, 2.1]))).features.get("step_time_growth_x", 0) < 1.5
    assert analyze_run(parse_text(_bars([2.1, 6.0, 2.0, 2.2, 6.1, 2.1]))).features.get("step_time_growth_x") is None


def _megatron_block(it: int, fb: float, bg: float) -> list[str]:
    return [f" iteration {it:8d}/    1000 | consumed samples: {it * 512:12d} | elapsed time per iteration (ms): "
            f"{fb + 300:.1f} | learning rate: 1.0E-05 | global batch size:   512 | lm loss: 5.0E+00 | loss scale: 1.0 |"
            " grad norm: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |",
            "(min, max) time across ranks (ms):",
            f"    forward-backward ...............................: ({fb - 100:.2f}, {fb:.2f})",
            f"    batch-generator ................................: ({bg * 0.9:.2f}, {bg:.2f})",
            "    optimizer ......................................: (290.00, 300.00)"]


def test_megatron_timer_blocks_give_the_data_wait():
    # batch-generator runs inside forward-backward (pretrain_gpt.py forward_step -> get_batch)
    slow = "\n".join(_megatron_block(10, 8600, 6500) + _megatron_block(20, 8700, 6600)) + "\n"
    run = parse_text(slow)
    assert len(run.iter_times) == 2
    diag = analyze_run(run)
    assert diag.primary.category == "data_loading" and 0.7 < diag.features["data_time_frac"] < 0.8
    fast = "\n".join(_megatron_block(10, 2400, 3.5) + _megatron_block(20, 2400, 3.4)) + "\n"
    assert analyze_run(parse_text(fast)).features["data_time_frac"] < 0.01


def test_any_programs_argparse_error_is_a_rejected_flag():
    for line, want in [("run_clm.py: error: argument --model_name_or_path: expected one argument", ["--model_name_or_path"]),
                       ("train.py: error: the following arguments are required: --data_path, --output_dir",
                        ["--data_path", "--output_dir"])]:
        diag = analyze_run(parse_text(line + "\n"))
        assert (diag.primary.category, diag.primary.rule) == ("config", "CFG006")
        assert diag.features["rejected_flags"] == want


def test_ctrl_c_after_the_run_ended_is_not_an_interruption():
    rows = "\n".join(f"{{'loss': {2.0 - i / 10:.2f}, 'grad_norm': 0.4, 'learning_rate': 0.0003, 'epoch': {i / 4:.2f}}}"
                     for i in range(1, 6))
    summary = ("{'train_runtime': 177.98, 'train_samples_per_second': 13.2, 'train_steps_per_second': 0.1, "
               "'train_loss': 2.05, 'epoch': 1.25}")
    after = analyze_run(parse_text(f"{rows}\n{summary}\nTraining complete!\n^C\n"))
    assert after.features.get("stop_signal") is None and after.primary.category == "healthy"
    before = analyze_run(parse_text(f"{rows}\n^C\nTraceback (most recent call last):\nKeyboardInterrupt\n"))
    assert before.primary.category == "interrupted"


def test_the_trainers_final_summary_alone_is_a_finished_run():
    summary = ("{'train_runtime': 4744.9, 'train_samples_per_second': 32.9, 'train_steps_per_second': 0.26, "
               "'train_loss': LOSS, 'epoch': 3.0}\n")
    done = analyze_run(parse_text(summary.replace("LOSS", "0.7364")))
    assert (done.primary.category, done.primary.confidence) == ("healthy", "weak")
    assert "final summary" in done.primary.summary
    bad = analyze_run(parse_text(summary.replace("LOSS", "nan")))
    assert bad.primary.category == "nan"


def test_fp16_overflows_to_the_floor_explain_a_cut_traceback_after_them():
    scales = [0.25 / 2 ** i for i in range(10)]
    text = "\n".join(f"| WARNING: overflow detected, setting loss scale to: {s}" for s in scales)
    text += '\nTraceback (most recent call last):\n  File "train.py", line 315, in <module>\n    main(args)\n'
    diag = analyze_run(parse_text(text))
    assert diag.primary.category == "nan" and diag.primary.rule == "NAN010"
    assert any(f.rule == "GEN004" for f in diag.findings)  # the cut traceback is still reported
    # fairseq's scale moving about 128 is its normal dynamic scaling: nothing recorded
    calm = "\n".join(f"2020-03-23 11:41:18 | INFO | fairseq.trainer | NOTE: overflow detected, setting loss scale to: {s}"
                     for s in (64.0, 32.0, 64.0)) + "\n"
    assert parse_text(calm).loss_scales == []


def test_a_trainers_own_dataset_bar_before_the_timeout_is_data_loading():
    text = ("Creating dataset split:  96%|█████████▋| 1927287/2000000 [29:56<01:08, 1060.83it/s]" + WATCHDOG + "\n")
    diag = analyze_run(parse_text(text))
    assert diag.primary.category == "data_loading" and diag.primary.rule == "DL021"
    # the model's shards loading is not data preparation
    shards = "Loading checkpoint shards:  50%|█████     | 2/4 [00:10<00:10,  5.00s/it]\n" + WATCHDOG + "\n"
    assert analyze_run(parse_text(shards)).primary.category == "nccl"


def test_a_loss_of_exactly_zero_in_another_trainers_rows_is_named():
    # mmseg's rows (a segmentation head with num_classes=1): the rows carry no reinforcement-learning metric
    rows = "".join(f"2023-06-05 21:0{i}:45,361 - mmseg - INFO - Iter [{i * 50}/80000]\tlr: 9.995e-05, eta: 11:50:40, "
                   f"time: 0.533, data_time: 0.011, memory: 15966, decode.loss_ce: 0.0000, decode.acc_seg: 100.0000, "
                   f"loss: 0.0000\n" for i in range(1, 4))
    d = analyze_run(parse_text(rows))
    assert (d.primary.rule, d.primary.category) == ("GEN007", "config")
    assert analyze_run(parse_text(rows.replace("loss: 0.0000", "loss: 0.4512"))).primary.category == "healthy"


def test_the_launchers_report_of_a_failed_worker_defers_to_the_workers_exception():
    worker = """Traceback (most recent call last):
  File "main.py", line 251, in main
    model = create_model(args.model)
  File "/env/lib/python3.7/site-packages/timm/models/factory.py", line 59, in create_model
    raise RuntimeError('Unknown model (%s)' % model_name)
RuntimeError: Unknown model (1)
"""
    launcher = """Traceback (most recent call last):
  File "/env/lib/python3.7/site-packages/torch/distributed/launch.py", line 256, in main
    cmd=cmd)
subprocess.CalledProcessError: Command '['/env/bin/python', '-u', 'main.py', '--model', '1']' returned non-zero exit status 1.
"""
    d = analyze_run(parse_text(worker + launcher))
    assert d.primary.category == "config" and "Unknown model" in d.features["crash_exception"]
    # the launcher's report alone still says a worker failed
    alone = analyze_run(parse_text(launcher))
    assert "CalledProcessError" in alone.features["crash_exception"]
    # accelerate launch's simple_launcher reports the same way (read from the table's reports_worker entries)
    accel = """Traceback (most recent call last):
  File "/env/lib/python3.10/site-packages/accelerate/commands/launch.py", line 999, in simple_launcher
    raise subprocess.CalledProcessError(returncode=process.returncode, cmd=cmd)
subprocess.CalledProcessError: Command '['/env/bin/python', 'main.py']' returned non-zero exit status 1.
"""
    d = analyze_run(parse_text(worker + accel))
    assert d.primary.category == "config" and "Unknown model" in d.features["crash_exception"]
    # a CalledProcessError of the user's own subprocess call is not a launcher's report: it stays the crash
    own = accel.replace("accelerate/commands/launch.py", "mypkg/tools.py")
    assert "CalledProcessError" in analyze_run(parse_text(worker + own)).features["crash_exception"]


def test_a_frame_line_the_terminal_wrapped_is_read_whole():
    # an 88-column terminal cut 'File "...", line 153, in convert_sharegpt' after 'line 15'; ranks prefix each line
    text = """[rank0]:   File "/home/u/LLaMA-Factory/src/llamafactory/data/aligner.py", line 15
3, in convert_sharegpt
[rank0]:     {"role": tag_mapping[message[dataset_attr.role_tag]], "content": message[da
taset_attr.content_tag]}
[rank0]: KeyError: 'user'
"""
    d = analyze_run(parse_text(text))
    assert "aligner.py, convert_sharegpt" in d.features["crash_exception"]
    # a KeyError in a package's data/ converters is a record the code does not expect, not an argument
    assert d.features["crash_category"] == "data_loading"


def test_the_trainers_banner_pasted_alone_is_not_a_stopped_run():
    banner = """[INFO|trainer.py:2405] 2025-03-06 12:04:09,913 >> ***** Running training *****
[INFO|trainer.py:2406] 2025-03-06 12:04:09,913 >>   Num examples = 5,498
[INFO|trainer.py:2407] 2025-03-06 12:04:09,914 >>   Num Epochs = 1
[INFO|trainer.py:2413] 2025-03-06 12:04:09,914 >>   Total optimization steps = 196
"""
    d = analyze_run(parse_text(banner))
    assert (d.primary.category, d.primary.confidence) == ("healthy", "weak") and "training loop began" in d.primary.summary
    # ms-swift's own start marker does make a capture: nothing after it is a run that stopped
    start = "[INFO:swift] Start time of running main: 2025-03-06 12:00:00.000000\n" + banner
    assert analyze_run(parse_text(start)).primary.category == "interrupted"


def test_a_traceback_printed_as_a_list_of_lines_is_read():
    # print(traceback.format_exception(...)): the list's items are the traceback's lines
    text = ("WARNING:megatron.core.utils:'NoneType' object is not an iterator\n"
            "['Traceback (most recent call last):\\n', '  File \"/w/swift/megatron/trainers/base.py\", line 1050, "
            "in get_batch\\n    return self._prepare_batch(next(data_iterator), vp_stage)\\n', "
            "\"TypeError: 'NoneType' object is not an iterator\\n\"]\n")
    d = analyze_run(parse_text(text))
    assert "TypeError: 'NoneType' object is not an iterator" in d.features["crash_exception"]
    assert "get_batch" in d.features["crash_exception"]
    # a list of other strings is not a traceback
    assert analyze_run(parse_text("['a', 'b', 'c']\n")).features.get("crash_exception") is None


def test_a_traceback_cut_while_importing_leans_config():
    text = """Traceback (most recent call last):
  File "/home/u/diffusers/examples/dreambooth/train_dreambooth.py", line 19, in <module>
    from torchvision import transforms
"""
    d = analyze_run(parse_text(text))
    assert (d.features["crash_category"], d.primary.confidence) == ("config", "weak")
    # cut on an ordinary call, it does not
    other = text.replace("from torchvision import transforms", "main(args)")
    assert analyze_run(parse_text(other)).features.get("crash_category") != "config"


# rich 15's traceback box (rich.traceback.install(), which accelerate runs whenever rich is importable), as printed
# at COLUMNS=100 by a three-frame script
_RICH_TB = '╭─────────────────────────────── Traceback (most recent call last) ────────────────────────────────╮\n│ /opt/proj/train.py:7 in <module>                                                                     │\n│                                                                                                  │\n│   4 │   raise ValueError("DeepSpeed Zero-3 is not compatible with `low_cpu_mem_usage=True` o     │\n│   5 def main():                                                                                  │\n│   6 │   load_model("/models/some/very/long/path/that/goes/on/and/on/Qwen-7B-Chat")               │\n│ ❱ 7 main()                                                                                       │\n│   8                                                                                              │\n│                                                                                                  │\n│ /opt/proj/train.py:6 in main                                                                         │\n│                                                                                                  │\n│   3 def load_model(path):                                                                        │\n│   4 │   raise ValueError("DeepSpeed Zero-3 is not compatible with `low_cpu_mem_usage=True` o     │\n│   5 def main():                                                                                  │\n│ ❱ 6 │   load_model("/models/some/very/long/path/that/goes/on/and/on/Qwen-7B-Chat")               │\n│   7 main()                                                                                       │\n│   8                                                                                              │\n│                                                                                                  │\n│ /opt/proj/train.py:4 in load_model                                                                   │\n│                                                                                                  │\n│   1 from rich.traceback import install                                                           │\n│   2 install(show_locals=False)                                                                   │\n│   3 def load_model(path):                                                                        │\n│ ❱ 4 │   raise ValueError("DeepSpeed Zero-3 is not compatible with `low_cpu_mem_usage=True` o     │\n│   5 def main():                                                                                  │\n│   6 │   load_model("/models/some/very/long/path/that/goes/on/and/on/Qwen-7B-Chat")               │\n│   7 main()                                                                                       │\n╰──────────────────────────────────────────────────────────────────────────────────────────────────╯\nValueError: DeepSpeed Zero-3 is not compatible with `low_cpu_mem_usage=True` or with passing a \n`device_map`.\n'


def test_rich_traceback_boxes_are_read_as_frames():
    from diagnose.parse.run import parse_text as parse

    run = parse(_RICH_TB)
    assert not [e for e in run.events if e.kind == "traceback_cut"]
    tb = [e for e in run.events if e.kind == "traceback"][-1]
    assert [f["func"] for f in tb.detail["frames"]][-2:] == ["main", "load_model"]
    assert tb.detail["frames"][-1]["code"].startswith("raise ValueError(")
    d = analyze_run(run)
    assert "load_model" in d.features["crash_exception"] and d.features["crash_category"] == "config"


def test_new_rules_fire_from_the_text_they_read_and_not_beside_it():
    # NC021: UCX's segfault report with a backtrace inside NCCL; the same crash elsewhere stays GEN008
    seg = ("[host:28401:0:28401] Caught signal 11 (Segmentation fault: address not mapped to object at address (nil))\n"
           "==== backtrace (tid:  28401) ====\n 0 0x0000000000042520 __sigaction()  ???:0\n")
    d = analyze_run(parse_text(seg + " 5 0x0000000000042990 ncclAllReduce()  ???:0\n"))
    assert (d.primary.rule, d.primary.category) == ("NC021", "nccl")
    assert analyze_run(parse_text(seg + " 5 0x0000000000042990 my_kernel_launch()  ???:0\n")).primary.rule == "GEN008"
    # CFG032: an allocation no accelerator holds; an ordinary one stays OOM001
    oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {} GiB. GPU 0 has a total capacity of "
           "23.68 GiB of which 1.2 GiB is free.\n")
    assert analyze_run(parse_text(oom.format("67109892.01"))).primary.rule == "CFG032"
    assert analyze_run(parse_text(oom.format("2.50"))).primary.rule == "OOM001"
    # DL030: torch's oversubscribed-workers warning, nothing logged, then Ctrl-C (the numbers in the evidence)
    warn = ("/usr/lib/python3.7/site-packages/torch/utils/data/dataloader.py:481: UserWarning: This DataLoader will "
            "create 30 worker processes in total. Our suggested max number of worker in current system is 2, which is "
            "smaller than what this DataLoader is going to create.\n")
    d = analyze_run(parse_text(warn + "^C\n"))
    assert d.primary.rule == "DL030" and "30 workers" in next(f.evidence for f in d.findings if f.rule == "DL030")
    assert analyze_run(parse_text("^C\n")).primary.rule != "DL030"


def test_a_launchers_summary_entry_never_explains_a_logged_error():
    from diagnose.parse.exceptions import TypedException, classify

    # torchrun_child_failed_collective's message ('nccl|collective|...') only qualifies its class, ChildFailedError
    got = classify(TypedException("ERROR", "the collective on rank 3 reported an nccl problem", logged=True))
    assert got is None or not got[0].reports_worker


def _rules(text: str) -> set[str]:
    return {f.rule for f in analyze_run(parse_text(text)).findings}


def test_rules_of_session_12_fire_from_the_text_they_read_and_not_beside_it():
    # OOM013: torch names another process holding most of the card; a small neighbour leaves OOM001 to speak
    oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 52.00 MiB. GPU 0 has a total capacity of "
           "139.80 GiB of which 53.56 MiB is free. Process 853 has {} GiB memory in use. Including non-PyTorch memory, "
           "this process has 2.94 GiB memory in use.\n")
    assert analyze_run(parse_text(oom.format("136.79"))).primary.rule == "OOM013"
    assert analyze_run(parse_text(oom.format("4.00"))).primary.rule == "OOM001"
    # CFG033: Hydra's composition error; Hydra's hint line alone is not one
    hint = "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n"
    assert "CFG033" in _rules("In 'train': Could not find 'model/small'\n\n" + hint)
    assert "CFG033" not in _rules(hint)
    # CFG034: ranks' interleaved 'no NCCL' lines; the traceback's own exception line is CFG020's, not a second reading
    assert "CFG034" in _rules("raise RuntimeError(...)RuntimeError\nDistributed package doesn't have NCCL built in\n")
    tb = ("Traceback (most recent call last):\n  File \"/env/torch/distributed/distributed_c10d.py\", line 1013, in "
          "_new_process_group_helper\n    raise RuntimeError(\"Distributed package doesn't have NCCL built in\")\n"
          "RuntimeError: Distributed package doesn't have NCCL built in\n")
    assert "CFG034" not in _rules(tb) and "CFG020" in _rules(tb)
    # DL031: a segment gone (ENOENT); the descriptor limit (EMFILE) is not it
    shm = "RuntimeError: unable to open shared memory object </torch_310_36_102> in read-write mode: {}\n"
    assert "DL031" in _rules(shm.format("No such file or directory (2)"))
    assert "DL031" not in _rules(shm.format("Too many open files (24)"))
    # INT001 for a lost Ray node: its advice is the node, not nohup
    ray = ("WARNING worker.py:1462 -- The node with node id: 8f205b and ip: 10.128.0.103 has been marked dead because "
           "the detector has missed too many heartbeats from it.\n")
    f = next(f for f in analyze_run(parse_text(ray)).findings if f.rule == "INT001")
    assert [r.title for r in f.remedies if "node" in r.title] and not [r for r in f.remedies if "terminal" in r.title]
    # CFG022 for a build without this GPU's code, and NCCL's failure on an old driver steps back to it
    assert "CFG022" in _rules("RuntimeError: HIP error: invalid device function\n")
    nccl = ("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1269, internal error, NCCL version 2.14.3\n"
            "ncclInternalError: Internal check failed.\n")
    assert "NC003" in _rules(nccl)
    assert {"CFG022"} <= _rules(nccl + "Cuda failure 'API call is not supported in the installed CUDA driver'\n") \
        and "NC003" not in _rules(nccl + "Cuda failure 'API call is not supported in the installed CUDA driver'\n")
    # DL024 from printed zero counts, not while steps run
    assert "DL024" in _rules("  Num examples = 0\n")
    steps = "".join(f"{{'loss': 2.{i}, 'grad_norm': 1.0, 'learning_rate': 1e-05, 'epoch': 0.{i}}}\n" for i in range(1, 6))
    assert "DL024" not in _rules("  Num examples = 0\n" + steps)
    # CFG029 from a schedule's own announcement; an ordinary rate is not
    assert "CFG029" in _rules("Adjusting learning rate of group 0 to 1.0000e-24.\n")
    assert "CFG029" not in _rules("Adjusting learning rate of group 0 to 1.0000e-04.\n")
    # DL012 from AverageMeter's running averages where the printed instants hide the wait
    rows = "".join(f"Epoch: [1][{i * 128}/10010]\tTime 0.427 (2.5{i})\tData 0.000 (2.1{i})\tLoss 13.2 (13.5)\n"
                   for i in range(1, 9))
    assert "DL012" in _rules(rows)
    assert "DL012" not in _rules(rows.replace("Data 0.000 (2.1", "Data 0.000 (0.0"))
