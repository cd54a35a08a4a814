#!/usr/bin/python3
"""Deterministic generator for the bad-input corpus (see README.md in this folder).

Contract: `/usr/bin/python3 tests/data/bad_input/make_bad_inputs.py [OUTDIR]` writes
the small, committed files into OUTDIR (default: this folder).  Output depends
only on this file (fixed seeds).  `write_huge_line(path)` writes the 5 MiB
single-line file; it is NOT committed: tests call it into a tmp dir.
Stdlib only.
"""
from __future__ import annotations

import math
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
HUGE_SIZE = 5 * 1024 * 1024


def _fmt_time(sec: float) -> str:
    sec = round(sec)
    m, s = divmod(sec, 60)
    h, m = divmod(m, 60)
    if h:
        return f"{h}h {m}m {s}s"
    return f"{m}m {s}s" if m else f"{s}s"


def _rows_4x(n: int, seed: int, quoted: bool) -> list[str]:
    """4.x training dicts (key order of msswift-reference.md §1.2), raw or transformers-5 quoted."""
    r = random.Random(seed)
    out, el = [], 0.0
    for s in range(1, n + 1):
        el += 1.9 + r.random() * 0.2
        d = {"loss": round(1.4 * math.exp(-s / 12) + 0.7 + r.gauss(0, 0.02), 8),
             "grad_norm": round(0.8 + r.random() * 0.4, 8),
             "learning_rate": 1e-4 * 0.5 * (1 + math.cos(math.pi * s / n)),
             "token_acc": round(0.6 + 0.1 * s / n, 8), "epoch": round(s / n * 0.5, 2),
             "global_step/max_steps": f"{s}/{n}", "elapsed_time": _fmt_time(el),
             "remaining_time": _fmt_time(el / s * (n - s)), "memory(GiB)": round(18.4 + 0.01 * s, 2),
             "train_speed(s/it)": round(el / s, 6)}
        if quoted:
            d = {k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in d.items()}
        out.append(repr(d))
    return out


def _rows_3x(n: int, seed: int) -> list[str]:
    """3.8-3.12.4 training dicts (§1.2)."""
    r = random.Random(seed)
    out, el = [], 0.0
    for s in range(1, n + 1):
        el += 1.2 + r.random() * 0.1
        d = {"loss": round(1.6 * math.exp(-s / 10) + 0.9 + r.gauss(0, 0.02), 8),
             "grad_norm": round(1.0 + r.random(), 8), "learning_rate": 1e-4 * (1 - (s - 1) / n),
             "token_acc": round(0.55 + 0.1 * s / n, 8), "epoch": round(s / n, 2),
             "global_step/max_steps": f"{s}/{n}", "percentage": f"{s / n * 100:.2f}%",
             "elapsed_time": _fmt_time(int(el)), "remaining_time": _fmt_time(int(el / (s / n) - el)),
             "memory(GiB)": 14.62, "train_speed(iter/s)": round(s / el, 6)}
        out.append(repr(d))
    return out


def _header_4x(sp: str, out: str) -> list[str]:
    return [
        f"run sh: `/usr/bin/python3 {sp}/swift/cli/sft.py --model Qwen/Qwen2.5-0.5B-Instruct --tuner_type lora "
        "--dataset data.jsonl --max_steps 20 --logging_steps 1 --output_dir output`",
        "[INFO:swift] Start time of running main: 2026-03-20 09:00:01.000123",
        "[INFO:swift] swift.__version__: 4.6.0",
        "[INFO:swift] rank: -1, local_rank: -1, world_size: 1, local_world_size: 1",
        f"[INFO:swift] output_dir: {out}",
        "[INFO:swift] model_parameter_info: PeftModelForCausalLM: 494.0327M Params (4.3991M Trainable [0.8904%]), 0.0000M Buffers.",
        "[INFO:swift] Dataset Token Length: 212.400000\u00b181.210000, min=34.000000, max=610.000000, size=640",
        f"[INFO:swift] The logging file will be saved in: {out}/logging.jsonl",
    ]


def _log_3x_lines(out_dir: str, dataset: str, extra_info: list[str]) -> list[str]:
    lines = [
        f"run sh: `/usr/bin/python3 /opt/conda/lib/python3.10/site-packages/swift/cli/sft.py --model "
        f"Qwen/Qwen2.5-1.5B-Instruct --train_type lora --dataset {dataset} --max_steps 12 --logging_steps 1 "
        f"--output_dir {out_dir}`",
        "[INFO:swift] rank: -1, local_rank: -1, world_size: 1, local_world_size: 1",
        "[INFO:swift] swift.__version__: 3.10.3",
        f"[INFO:swift] output_dir: {out_dir}/v0-20250901-120000",
    ] + extra_info + [
        "[INFO:swift] model_parameter_info: PeftModelForCausalLM: 1552.7148M Params (9.2324M Trainable [0.5946%]), 0.0000M Buffers.",
        "[INFO:swift] Dataset Token Length: 356.125000\u00b1120.031250, min=61.000000, max=1022.000000, size=800",
    ]
    lines += _rows_3x(12, 31)
    lines += [
        "{'train_runtime': 15.02, 'train_samples_per_second': 12.783, 'train_steps_per_second': 0.799, "
        "'train_loss': 1.5021, 'epoch': 1.0, 'global_step/max_steps': '12/12', 'percentage': '100.00%', "
        "'elapsed_time': '15s', 'remaining_time': '0s', 'memory(GiB)': 14.62, 'train_speed(iter/s)': 0.798813}",
        f"[INFO:swift] last_model_checkpoint: {out_dir}/v0-20250901-120000/checkpoint-12",
        "[INFO:swift] End time of running main: 2025-09-01 12:00:31.551230",
    ]
    return lines


def _w(path: str, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)


def write_huge_line(path: str) -> str:
    """Write the 5 MiB single-line file (no '\\n' at all): a tqdm bar that never
    ended, i.e. `\\r`-separated progress fragments from a run that printed no dicts."""
    r = random.Random(55)
    parts, size, n = [], 0, 0
    while size < HUGE_SIZE:
        n += 1
        frag = f"\rTrain:   {n % 100:2d}%|          | {n}/100000000 [00:{n % 60:02d}<?, {r.random() * 9 + 1:.2f}it/s]"
        parts.append(frag)
        size += len(frag)
    data = "".join(parts).encode("utf-8")[:HUGE_SIZE]
    _w(path, data)
    return path


def write_all(outdir: str = HERE) -> list[str]:
    os.makedirs(outdir, exist_ok=True)
    written = []

    def put(name: str, data: bytes) -> None:
        _w(os.path.join(outdir, name), data)
        written.append(name)

    put("empty.log", b"")
    rb = random.Random(20260101)
    put("binary.bin", bytes(rb.getrandbits(8) for _ in range(65536)))

    # a valid 4.6.0 log whose last dict line is cut mid-way, no trailing newline
    out = "/work/output/v0-20260320-090001"
    lines = _header_4x("/usr/local/lib/python3.11/site-packages", out) + _rows_4x(20, 7, quoted=True)
    text = "\n".join(lines)
    text = text[: text.rfind("{'loss'") + 97]
    put("truncated_last_line.log", text.encode("utf-8"))

    # 3.x log with Chinese text and paths, encoded in GBK
    zh = _log_3x_lines("/home/张伟/输出", "/data/训练数据/客服对话.jsonl",
                       ["[INFO:swift] default_system: 你是一个乐于助人的助手。",
                        "[INFO:swift] [INPUT] <|im_start|>user\n如何重置路由器密码？<|im_end|>\n<|im_start|>assistant\n"
                        "长按复位键十秒，然后使用标签上的默认账号登录。<|im_end|>",
                        "[WARNING:swift] 数据集中存在错误，相关数据将被删除"])
    put("gbk.log", ("\n".join(zh) + "\n").encode("gbk"))

    # latin-1 bytes in paths
    la = _log_3x_lines("/home/josé/données/sortie", "/home/josé/données/entraînement.jsonl",
                       ["[INFO:swift] default_system: Tu es un assistant très serviable."])
    put("latin1.log", ("\n".join(la) + "\n").encode("latin-1"))

    # plain HF Trainer log (no ms-swift lines)
    r = random.Random(3)
    hf = ["***** Running training *****", "  Num examples = 2,000", "  Num Epochs = 1",
          "  Instantaneous batch size per device = 8", "  Total train batch size (w. parallel, distributed & accumulation) = 8",
          "  Gradient Accumulation steps = 1", "  Total optimization steps = 250", "  Number of trainable parameters = 124,439,808"]
    for i in range(1, 26):
        step = i * 10
        hf.append(f"\r {step * 100 // 250:3d}%|{'█' * (step * 10 // 250):<10}| {step}/250 [00:{step // 10:02d}<00:{(250 - step) // 10:02d},  "
                  f"9.87it/s]{{'loss': {round(2.31 - 0.04 * i + r.gauss(0, 0.02), 4)}, 'grad_norm': "
                  f"{round(1.2 - 0.01 * i + r.random() * 0.1, 4)}, 'learning_rate': {5e-05 * (1 - step / 250)}, "
                  f"'epoch': {round(step / 250, 2)}}}")
    hf.append("\n\nTraining completed. Do not forget to share your model on huggingface.co/models =)\n\n")
    hf.append("{'train_runtime': 25.3, 'train_samples_per_second': 79.051, 'train_steps_per_second': 9.881, "
              "'train_loss': 1.8123, 'epoch': 1.0}")
    put("hf_trainer.log", ("\n".join(hf) + "\n").encode("utf-8"))

    # LLaMA-Factory log
    lf = ["[INFO|configuration_utils.py:731] >> loading configuration file /models/Qwen2.5-7B-Instruct/config.json",
          "[INFO|modeling_utils.py:3934] >> loading weights file /models/Qwen2.5-7B-Instruct/model.safetensors.index.json",
          "[INFO|trainer.py:2314] >> ***** Running training *****",
          "[INFO|trainer.py:2315] >>   Num examples = 4,800",
          "[INFO|trainer.py:2316] >>   Num Epochs = 3",
          "[INFO|trainer.py:2317] >>   Instantaneous batch size per device = 2",
          "[INFO|trainer.py:2320] >>   Total train batch size (w. parallel, distributed & accumulation) = 16",
          "[INFO|trainer.py:2321] >>   Gradient Accumulation steps = 8",
          "[INFO|trainer.py:2322] >>   Total optimization steps = 900",
          "[INFO|trainer.py:2323] >>   Number of trainable parameters = 20,185,088"]
    tok = 0
    for i in range(1, 21):
        tok += 81920 + r.randint(-4000, 4000)
        lf.append(f"{{'loss': {round(1.9 - 0.03 * i + r.gauss(0, 0.02), 4)}, 'grad_norm': {round(0.6 + r.random() * 0.3, 10)}, "
                  f"'learning_rate': {1e-4 * (1 - i / 180)}, 'epoch': {round(i * 5 * 16 / 4800, 2)}, "
                  f"'num_input_tokens_seen': {tok}}}")
    lf.append("[INFO|trainer.py:3801] >> Saving model checkpoint to saves/qwen2.5-7b/lora/sft/checkpoint-100")
    put("llamafactory.log", ("\n".join(lf) + "\n").encode("utf-8"))

    put("plain_text.txt", (
        "The committee met on Tuesday to review the quarterly budget. After a long discussion about travel costs,\n"
        "the members agreed to postpone the purchase of new equipment until the spring, when prices are expected\n"
        "to fall. The next meeting will take place in the small conference room on the second floor.\n").encode("utf-8"))

    sp = "/root/miniconda3/lib/python3.10/site-packages"
    tb = ["Traceback (most recent call last):",
          f'  File "{sp}/swift/cli/sft.py", line 7, in <module>', "    sft_main()",
          f'  File "{sp}/swift/llm/train/sft.py", line 281, in sft_main', "    return SwiftSft(args).main()",
          f'  File "{sp}/swift/llm/base.py", line 47, in main', "    result = self.run()",
          f'  File "{sp}/swift/llm/train/sft.py", line 147, in run', "    return self.train(trainer)",
          f'  File "{sp}/swift/llm/train/sft.py", line 207, in train', "    trainer.train(trainer.args.resume_from_checkpoint)",
          f'  File "{sp}/swift/trainers/mixin.py", line 361, in train', "    res = super().train(*args, **kwargs)",
          f'  File "{sp}/transformers/trainer.py", line 2245, in train', "    return inner_training_loop(",
          f'  File "{sp}/transformers/trainer.py", line 2560, in _inner_training_loop',
          "    tr_loss_step = self.training_step(model, inputs, num_items_in_batch)",
          f'  File "{sp}/transformers/trainer.py", line 3782, in training_step', "    self.accelerator.backward(loss, **kwargs)",
          f'  File "{sp}/accelerate/accelerator.py", line 2329, in backward', "    loss.backward(**kwargs)",
          f'  File "{sp}/torch/_tensor.py", line 581, in backward', "    torch.autograd.backward(",
          f'  File "{sp}/torch/autograd/__init__.py", line 347, in backward', "    _engine_run_backward(",
          f'  File "{sp}/torch/autograd/graph.py", line 825, in _engine_run_backward',
          "    return Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass",
          "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB. GPU 0 has a total capacity of "
          "23.65 GiB of which 412.06 MiB is free. Including non-PyTorch memory, this process has 23.23 GiB memory in "
          "use. Of the allocated memory 22.01 GiB is allocated by PyTorch, and 771.34 MiB is reserved by PyTorch but "
          "unallocated. If reserved but unallocated memory is large try setting "
          "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
          "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"]
    put("traceback_only.log", ("\n".join(tb) + "\n").encode("utf-8"))

    # only the last 15 lines of a 3.x log; the first line starts mid-dict
    full = _log_3x_lines("/root/output", "/root/data/train.jsonl", [])
    tail = full[-15:]
    tail[0] = tail[0][tail[0].index("_acc'") :]
    put("tail_only.log", ("\n".join(tail) + "\n").encode("utf-8"))

    os.makedirs(os.path.join(outdir, "empty_dir"), exist_ok=True)
    put(os.path.join("empty_dir", ".gitkeep"), b"")

    # 4.x log (transformers 4.x raw numbers) with Windows line endings
    out = "C:/Users/dev/output/v0-20260320-090001"
    cr = _header_4x("C:/Users/dev/miniconda3/Lib/site-packages", out) + _rows_4x(20, 9, quoted=False)
    cr += ["{'train_runtime': 41.2, 'train_samples_per_second': 3.883, 'train_steps_per_second': 0.485, "
           "'train_loss': 1.1021, 'epoch': 0.5, 'global_step/max_steps': '20/20', 'elapsed_time': '41s', "
           "'remaining_time': '0s', 'memory(GiB)': 18.6, 'train_speed(s/it)': 2.06}",
           "[INFO:swift] End time of running main: 2026-03-20 09:00:58.441020"]
    put("crlf.log", ("\r\n".join(cr) + "\r\n").encode("utf-8"))
    return written


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else HERE
    for name in write_all(target):
        print(name)
