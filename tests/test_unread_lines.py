"""What a paste says when no trainer's row or traceback carries it: errors a logger printed, a metric printed nan, one
row of an unknown trainer, and an exception no entry of the table explains (its class and frames lean weakly)."""
from __future__ import annotations

import pytest

from diagnose.parse import parse_text
from diagnose.pipeline import analyze_run


def _primary(text: str):
    return analyze_run(parse_text(text)).primary


@pytest.mark.parametrize("text,want", [
    ("2024-05-01 10:00:00 - train - ERROR - model_type qwen9 is not supported, please check --model_type\n", "config"),
    ("ERROR:root:the tokenizer must have a pad token: please set --pad_token\n", "config"),
    ("[ERROR] could not reserve 2048 blocks for the KV cache: not enough memory\n", "oom"),
    ("Error: Input contains NaN.\n", "nan"),
])
def test_a_logged_error_is_read_by_the_meaning_of_its_message(text, want):
    p = _primary(text)
    assert p.category == want and p.confidence in ("probable", "weak"), p


def test_a_logged_error_nothing_explains_is_named_not_called_healthy():
    text = ("Sanity Checking: 0it [00:00, ?it/s]\n"
            "2024-05-01 10:00:00,123 - trainer - ERROR - Failed to upload the checkpoint to the bucket zzz-42\n")
    p = _primary(text)
    assert p.category == "unknown" and "zzz-42" in p.summary and "line 2" in p.summary


def test_a_logged_error_never_outranks_the_traceback_beside_it():
    text = """ERROR:root:model_type qwen9 is not supported
Traceback (most recent call last):
  File "/opt/proj/train.py", line 10, in main
    loader = build()
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.00 GiB is free.
"""
    assert _primary(text).category == "oom"


def test_a_loss_printed_nan_outside_rows_is_nan_and_rows_decide_when_there_are_some():
    assert _primary("Epoch 3 | train loss: nan | val loss: nan\nsaving\n").category == "nan"
    # two mmcv rows: the first interval's grad_norm nan is the fp16 scaler skipping a step, the loss goes on falling
    rows = ("Epoch [1][100/62598]\tlr: 1.000e-03, eta: 6 days, time: 0.539, data_time: 0.051, memory: 7239, "
            "loss: 1.9091, grad_norm: nan\n"
            "Epoch [1][200/62598]\tlr: 1.000e-03, eta: 7 days, time: 0.705, data_time: 0.002, memory: 7239, "
            "loss: 0.9186, grad_norm: 3.9772\n")
    assert all(f.rule != "NAN014" for f in analyze_run(parse_text(rows)).findings)


def test_one_row_is_healthy_only_weakly():
    p = _primary("epoch: 0, step: 5834/5835, loss: 0.1221, lr: 4.52e-05\n")
    assert (p.category, p.confidence) == ("healthy", "weak")


@pytest.mark.parametrize("last,module,want", [
    ("KeyError: 'answer'", "/opt/proj/my_dataset.py", "data_loading"),
    ("KeyError: 'layers'", "/opt/proj/model.py", "config"),
    ("AttributeError: 'Trainer' object has no attribute 'processing_class'", "/opt/proj/train.py", "config"),
])
def test_an_exception_no_entry_explains_leans_by_its_class_and_frames(last, module, want):
    tb = f"""Traceback (most recent call last):
  File "/opt/proj/train.py", line 5, in <module>
    main()
  File "{module}", line 31, in run
    x = f()
{last}
"""
    p = _primary(tb)
    assert (p.category, p.confidence) == (want, "weak"), p


def test_a_runtime_error_no_entry_explains_stays_unknown():
    tb = """Traceback (most recent call last):
  File "/opt/proj/train.py", line 5, in <module>
    main()
RuntimeError: Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int
"""
    assert _primary(tb).category == "unknown"


def test_a_text_of_warnings_alone_is_healthy_weakly_unless_a_warning_speaks_of_trouble():
    warn = ("/opt/env/lib/python3.10/site-packages/torch/utils/checkpoint.py:87: UserWarning: None of the inputs have "
            "requires_grad=True. Gradients will be None\n")
    p = _primary(warn)
    assert (p.category, p.confidence) == ("healthy", "weak") and "UserWarning" in p.summary
    trouble = "/opt/proj/train.py:40: RuntimeWarning: overflow encountered in exp\n"
    assert _primary(trouble).category != "healthy"


def test_libstdcxx_terminate_is_a_native_crash_but_not_the_host_allocator_or_the_watchdog():
    run = parse_text("terminate called after throwing an instance of 'c10::CUDAError'\n"
                     "  what():  CUDA error: an illegal memory access was encountered\n")
    assert any(e.kind == "native_crash" for e in run.events)
    oom = parse_text("terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc\n")
    assert not any(e.kind == "native_crash" for e in oom.events) and analyze_run(oom).primary.category == "oom"


def test_nan_in_a_metric_no_canonical_field_takes_is_nan():
    rows = "".join(f"Epoch: [40][{i}00/1603]  Time: 1.{i}s (1.3s)   Data: 0.0s (0.1s)   Stage0-heatmaps: nan (nan)\n"
                   for i in range(1, 5))
    diag = analyze_run(parse_text(rows))
    assert diag.primary.category == "nan" and "stage0-heatmaps" in str(diag.findings[0].evidence).lower()


def test_a_traceback_a_logger_printed_under_a_warning_that_something_optional_is_off_is_not_a_crash():
    text = """WARNING  A matching Triton is not available, some optimizations will not be enabled   __init__.py:61
Traceback (most recent call last):
  File "/venv/Lib/site-packages/xformers/__init__.py", line 57, in _is_triton_available
    import triton  # noqa
ModuleNotFoundError: No module named 'triton'
"""
    run = parse_text(text)
    assert not [e for e in run.events if e.kind == "traceback"]
    # the same traceback after an ordinary line is the crash
    crash = parse_text(text.replace("WARNING  A matching Triton is not available, some optimizations will not be "
                                    "enabled", "loading the model"))
    assert [e for e in crash.events if e.kind == "traceback"]


def test_a_ray_task_error_is_read_as_the_class_of_its_cause():
    tb = """Traceback (most recent call last):
  File "/root/slime/train.py", line 88, in train
    ray.get(actor_model.async_train(rollout_id, rollout_data_ref))
  File "/usr/local/lib/python3.12/dist-packages/ray/_private/worker.py", line 1012, in get_objects
    raise value.as_instanceof_cause()
ray.exceptions.RayTaskError(OutOfMemoryError): ray::MegatronTrainRayActor.train() (pid=2025282, ip=10.0.0.1)
"""
    assert _primary(tb).category == "oom"


def test_a_step_row_whose_fp16_loss_scale_is_zero_is_the_scale_collapsed_but_bf16s_constant_one_is_not():
    row = ("| epoch 028 | loss 3.976 | nll_loss 2.204 | ppl 4.61 | num_updates {u} | lr 0.00033 | gnorm 0.635 | "
           "loss_scale {s} | wall 4043\n")
    collapsed = analyze_run(parse_text(row.format(u=9165, s="0.000")))
    assert collapsed.primary.category == "nan" and collapsed.findings[0].rule == "NAN010"
    bf16 = analyze_run(parse_text("".join(row.format(u=u, s="1.0") for u in (10, 20, 30))))
    assert all(f.rule != "NAN010" for f in bf16.findings)


def test_nan_in_a_dialect_row_metric_the_dialect_does_not_map_is_nan():
    rows = "".join(f"2022-05-07 17:0{i}:57,696 - mmseg - INFO - Iter [{i}0/40000]\tlr: 1.958e-06, eta: 1 day, "
                   f"0:29:42, time: 2.207, data_time: 0.029, memory: 9801, decode.loss_seg: nan, decode.acc_seg: 3{i}.26\n"
                   for i in range(1, 5))
    diag = analyze_run(parse_text(rows))
    assert diag.primary.category == "nan" and "decode.loss_seg" in str(diag.findings[0].evidence)


def test_memory_that_rises_at_every_logged_row_leans_oom_and_a_settled_peak_does_not():
    row = ("2022-08-20 09:33:05,035 - mmdet - INFO - Epoch [1][{i}/3712]\tlr: 1.000e-03, eta: 1 day, 16:26:28, "
           "time: 0.416, data_time: 0.004, memory: {m}, loss: 2.9043\n")
    creeping = "".join(row.format(i=i, m=5295 + 108 * k) for k, i in enumerate(range(240, 400, 30)))
    p = _primary(creeping)
    assert (p.category, p.confidence) == ("oom", "weak")
    settled = "".join(row.format(i=i, m=5295 if k < 2 else 5600) for k, i in enumerate(range(240, 400, 30)))
    assert _primary(settled).category == "healthy"


def test_a_numeric_table_with_nan_columns_is_nan():
    text = "".join(f"2022-05-08 16:27:0{i},927 1794{i} 0.00 nan 0.00 nan 0.00 nan 0.00 0.00 nan ---- ----\n"
                   for i in range(3))
    assert _primary(text).category == "nan"
    assert _primary("17940 0.00 12.5 0.00 3.1 0.00 4.2\n17941 0.00 12.4 0.00 3.0 0.00 4.1\n").category != "nan"


def test_a_loss_that_leaps_a_thousandfold_is_diverging_but_a_loss_that_starts_huge_and_falls_is_not():
    row = "Epoch [6][{i}/3681]\tlr: 0.02000, eta: 3:50:21, time: 0.555, data_time: 0.005, memory: 6147, loss: {l}\n"
    leap = "".join(row.format(i=i, l=v) for i, v in zip(range(3150, 3400, 50), (1.01, 0.98, 1.02, 2251.3, 1.7e10)))
    assert _primary(leap).category == "nan"
    falling = "".join(row.format(i=i, l=v) for i, v in zip(range(3150, 3400, 50), (243687.9, 141.7, 12.0, 5.1, 4.9)))
    assert all(f.rule != "NAN015" for f in analyze_run(parse_text(falling)).findings)
    # a negative log-likelihood that crosses zero is no thousandfold leap
    nll = "".join(row.format(i=i, l=v) for i, v in zip(range(3150, 3400, 50), (-2.1, -3.0, -2.8, 0.4, -3.1)))
    assert all(f.rule != "NAN015" for f in analyze_run(parse_text(nll)).findings)


def test_a_nan_printed_after_the_last_row_is_read_even_beside_rows():
    text = "iter 0: loss 4.8131, time 36410.71ms, mfu -100.00%\niter 1: loss nan, time 13\n"
    assert _primary(text).category == "nan"


def test_lightning_with_no_training_batches_is_an_empty_dataset():
    text = ("/venv/lib/python3.12/site-packages/lightning/pytorch/utilities/data.py:106: Total length of `DataLoader` "
            "across ranks is zero. Please make sure this was your intention.\n`Trainer.fit` stopped: No training batches.\n")
    assert _primary(text).category == "data_loading"


def test_the_final_metrics_table_is_the_summary_and_an_astronomical_mean_loss_is_nan():
    table = ("***** train metrics *****\n  epoch                    =             1.0\n"
             "  train_loss               = {loss}\n  train_runtime            =      3:32:59.59\n")
    run = parse_text(table.format(loss="4784435875.5407"))
    assert run.summary["train_loss"] > 4e9 and abs(run.summary["train_runtime"] - 12779.59) < 0.01
    assert analyze_run(run).primary.category == "nan"
    assert _primary(table.format(loss="1.2345")).category == "healthy"


def test_internvls_image_token_mismatch_warning_is_config():
    text = ("{'loss': 0.0, 'learning_rate': 3.3e-07, 'epoch': 0.01}\n"
            "warning: The size of tensor a (2017) must match the size of tensor b (3328) at non-singleton dimension 0, "
            "input_embeds[selected].shape=torch.Size([2017, 2048]), vit_embeds.shape=torch.Size([3328, 2048])\n")
    assert _primary(text).category == "config"


def test_bare_step_value_lines_are_rows_when_the_step_only_grows():
    rows = "".join(f"{s} {v}\n" for s, v in ((76950, 2.59), (76960, 2.73), (76970, 2.62), (76980, "nan"), (76990, "nan")))
    assert _primary(rows).category == "nan"
    # numbers that do not count up are a table of something else, not step rows
    table = "".join(f"{s} {v}\n" for s, v in ((3, 2.5), (1, 2.7), (2, 2.6), (5, 2.4), (4, 2.2)))
    assert len(parse_text(table).steps) == 0


def test_a_strict_load_state_dict_mismatch_printed_without_its_traceback_is_config():
    text = ("size mismatch for hm.0.weight: copying a param with shape torch.Size([64, 256, 3, 3]) from checkpoint, "
            "the shape in current model is torch.Size([64, 64, 3, 3]).\n")
    assert _primary(text).category == "config"
    assert _primary("2022-09-13 15:15:48,052 - mmcv - WARNING - The model and loaded state dict do not match exactly\n"
                    "unexpected key in source state_dict: conv1.bias\n").category == "healthy"


def test_numpy_unable_to_allocate_and_a_spawned_process_killed_by_sigkill_are_host_memory():
    tb = """Traceback (most recent call last):
  File "/venv/lib/site-packages/stable_baselines3/common/buffers.py", line 202, in __init__
    self.observations = np.zeros((self.buffer_size, self.n_envs, *self.obs_shape), dtype=observation_space.dtype)
numpy.core._exceptions._ArrayMemoryError: Unable to allocate 26.3 GiB for an array with shape (1000000, 1, 4, 84, 84) and data type uint8
"""
    assert _primary(tb).category == "oom"
    assert _primary("Exception: process 1 terminated with signal SIGKILL\n").category == "oom"


def test_a_metric_key_with_a_digit_is_not_a_host_prefix_and_a_loss_nan_on_every_line_is_nan():
    text = "".join(f"Iter: {i}00\nstage1_pafs_loss:     nan\nstage1_heatmaps_loss: nan\n" for i in range(1, 5))
    assert _primary(text).category == "nan"


def test_torch_built_without_the_gpus_architecture_is_config():
    text = ("/venv/lib/python3.8/site-packages/torch/cuda/__init__.py:143: UserWarning:\n"
            "NVIDIA GeForce RTX 3090 with CUDA capability sm_86 is not compatible with the current PyTorch installation.\n"
            "The current PyTorch install supports CUDA capabilities sm_37 sm_50 sm_60 sm_70.\n")
    assert _primary(text).category == "config"
