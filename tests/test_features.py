"""Feature units: derived numbers with hand-checked values; missing input is None, never 0."""
from __future__ import annotations

import pytest

from diagnose.features import compute_features
from diagnose.features.config import suggested_workers
from diagnose.features.dataset import expected_max_z
from diagnose.features.gpu import GPUS, normalize_gpu
from diagnose.features.registry import Options
from diagnose.parse import parse_text

HEAD = "\n".join([
    "run sh: `/usr/bin/python /x/swift/cli/sft.py --model m --per_device_train_batch_size 4 --gradient_accumulation_steps 2 --tuner_type lora`",
    "[INFO:swift] rank: -1, local_rank: -1, world_size: 1, local_world_size: 1",
    "[INFO:swift] Dataset Token Length: 100.000000±20.000000, min=50.000000, max=300.000000, size=1000",
    "[INFO:swift] model_parameter_info: PeftModelForCausalLM: 1000.0000M Params (10.0000M Trainable [1.0000%]), 0.0000M Buffers.",
])


def _run(n=20, spi=0.5, mem=None):
    rows = []
    for i in range(1, n + 1):
        m = f", 'memory(GiB)': '{mem}'" if mem else ""
        rows.append(f"{{'loss': '1.0', 'grad_norm': '1.0', 'learning_rate': '1e-4', 'global_step/max_steps': '{i}/{n}'{m}, 'train_speed(s/it)': '{spi}'}}")
    return parse_text(HEAD + "\n" + "\n".join(rows) + "\n")


def test_throughput_is_samples_not_iterations():
    f = compute_features(_run()).values
    assert f["global_batch_size"] == 8  # 4 x 2 x 1
    assert f["step_time_median_s"] == pytest.approx(0.5, rel=1e-3)
    assert f["samples_per_s"] == pytest.approx(16.0, rel=1e-3)
    assert f["tokens_per_s"] == pytest.approx(1600.0, rel=1e-3)


def test_mfu_lora_aware_and_none_without_gpu():
    f = compute_features(_run()).values
    assert f["mfu_pct"] is None and f["gpu_peak_tflops"] is None  # no GPU known: None, not 0
    g = compute_features(_run(), options=Options(gpu="A100-80GB")).values
    p, tf = 1e9, 0.01
    # the run sh line shows the flags and no --gradient_checkpointing: ms-swift 4.x's default (on) holds, so the
    # recomputed forward is counted (2·P more per token)
    fpt = 6 * p * tf + 4 * p * (1 - tf) + 2 * p
    assert g["flops_per_token"] == pytest.approx(fpt)
    assert g["mfu_pct"] == pytest.approx(100 * fpt * 1600 / 312e12, rel=1e-3)


def test_memory_fraction_needs_capacity():
    f = compute_features(_run(mem=76.0)).values
    assert f["memory_peak_gib"] == 76.0 and f["memory_frac"] is None
    g = compute_features(_run(mem=76.0), options=Options(gpu="A100-80GB")).values
    assert g["memory_frac"] == pytest.approx(0.95)


def test_padding_waste_model():
    f = compute_features(_run()).values
    emax = 100 + 20 * expected_max_z(4)
    assert f["padding_waste_frac"] == pytest.approx(1 - 100 / emax, rel=1e-6)
    assert f["token_len_p99_est"] == pytest.approx(146.6)


@pytest.mark.parametrize("cores,procs,want", [(None, 1, 4), (2, 1, 2), (16, 1, 8), (64, 8, 4), (8, 8, 1), (32, 2, 8)])
def test_suggested_workers(cores, procs, want):
    assert suggested_workers(cores, procs) == want


@pytest.mark.parametrize("name,key", [("NVIDIA A100-SXM4-80GB", "A100-80GB"), ("a100-40gb", "A100-40GB"), ("NVIDIA GeForce RTX 4090", "RTX4090"),
                                      ("H100", "H100-SXM"), ("NVIDIA H100 PCIe", "H100-PCIE"), ("NVIDIA H200", "H200"), ("GTX 9999", None)])
def test_gpu_names(name, key):
    assert normalize_gpu(name) == key
    if key:
        assert key in GPUS


def test_missing_inputs_are_none():
    f = compute_features(parse_text("hello world\n")).values
    for k in ("samples_per_s", "memory_peak_gib", "step_time_median_s", "token_len_mean", "gpu_util_mean_pct", "mfu_pct"):
        assert f[k] is None, k


@pytest.mark.parametrize("frames,where", [
    # ms-swift's pipeline constructor parses the arguments first (3.x swift/llm/base.py, 4.x swift/pipelines/base.py)
    (['  File "/py/site-packages/swift/llm/train/sft.py", line 28, in __init__', "    super().__init__(args)",
      '  File "/py/site-packages/swift/llm/base.py", line 18, in __init_'], "swift_args"),
    (['  File "/py/site-packages/swift/pipelines/base.py", line 19, in __init__', "    self.args = self._parse_args(args)"],
     "swift_args"),
    (['  File "/py/site-packages/torch/utils/data/dataloader.py", line 630, in __next__', "    data = self._next_data()"],
     "dataloader"),
    # a process waiting on its DataLoader's workers is deepest in multiprocessing's queue and pipe frames
    (['  File "/py/site-packages/torch/utils/data/dataloader.py", line 480, in _try_get_batch',
      "    data = self.data_queue.get(timeout=timeout)",
      '  File "/py/lib/python3.6/multiprocessing/queues.py", line 104, in get', "    if not self._poll(timeout):",
      '  File "/py/lib/python3.6/multiprocessing/connection.py", line 257, in poll', "    return self._poll(timeout)",
      '  File "/py/lib/python3.6/multiprocessing/connection.py", line 414, in _poll'], "dataloader"),
    (['  File "/py/site-packages/swift/pipelines/train/sft.py", line 135, in _prepare_dataset',
      "    self._show_dataset(*datasets)"], "other"),
])
def test_a_cut_traceback_says_where_it_stopped(frames, where):
    text = "\n".join(["Traceback (most recent call last):", *frames]) + "\n"
    assert compute_features(parse_text(text)).values["traceback_cut_where"] == where
