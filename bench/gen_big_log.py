"""Generate a large, realistic ms-swift 3.x stdout log for benchmarks.

Contract: `python bench/gen_big_log.py OUT --steps N [--version 3x|4x]` writes a
log shaped like a 3.8-3.12.4 (or 4.x, transformers-5 quoted numbers) capture:
a header of [INFO:swift] lines, one training dict per step with the version's
exact key order, and the final summary.  Deterministic for a given N.
"""
from __future__ import annotations

import argparse
import math
import random
import sys


def _fmt_time(sec: float) -> str:
    sec = int(sec)
    d, sec = divmod(sec, 86400)
    h, sec = divmod(sec, 3600)
    m, s = divmod(sec, 60)
    parts = [f"{d}d" if d else "", f"{h}h" if h or d else "", f"{m}m" if m or h or d else "", f"{s}s"]
    return " ".join(p for p in parts if p)


HEADER = """run sh: `/usr/bin/python /usr/lib/python3/site-packages/swift/cli/sft.py --model Qwen/Qwen2.5-7B-Instruct --dataset data.jsonl --train_type lora --max_steps {n}`
[INFO:swift] Successfully registered `data.jsonl`
[INFO:swift] rank: -1, local_rank: -1, world_size: 1, local_world_size: 1
[INFO:swift] swift.__version__: {ver}
[INFO:swift] Dataset Token Length: 512.250000±120.500000, min=64.000000, max=2011.000000, size={n}
[INFO:swift] model_parameter_info: PeftModelForCausalLM: 7635.8016M Params (20.1851M Trainable [0.2643%]), 0.0000M Buffers.
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--version", choices=["3x", "4x"], default="3x")
    a = ap.parse_args(argv)
    n = a.steps
    rnd = random.Random(0)
    elapsed = 0.0
    ver = "3.10.3" if a.version == "3x" else "4.6.0"
    with open(a.out, "w", encoding="utf-8", buffering=1 << 20) as f:
        f.write(HEADER.format(n=n, ver=ver))
        buf = []
        for step in range(1, n + 1):
            elapsed += 0.45 + rnd.random() * 0.1
            loss = 2.0 * math.exp(-step / (n / 3)) + 0.5 + rnd.random() * 0.05
            gn = 1.0 + rnd.random()
            lr = 1e-4 * (1 - step / n) + 1e-7
            acc = 0.5 + 0.4 * step / n
            epoch = round(step / n * 3, 2)
            pct = 100.0 * step / n
            rem = elapsed / step * (n - step)
            if a.version == "3x":
                buf.append(
                    f"{{'loss': {loss:.8f}, 'grad_norm': {gn:.8f}, 'learning_rate': {lr:.8g}, "
                    f"'token_acc': {acc:.8f}, 'epoch': {epoch}, 'global_step/max_steps': '{step}/{n}', "
                    f"'percentage': '{pct:.2f}%', 'elapsed_time': '{_fmt_time(elapsed)}', "
                    f"'remaining_time': '{_fmt_time(rem)}', 'memory(GiB)': 21.37, "
                    f"'train_speed(iter/s)': {step / elapsed:.6f}}}\n")
            else:
                buf.append(
                    f"{{'loss': '{loss:.4g}', 'grad_norm': '{gn:.4g}', 'learning_rate': '{lr:.4g}', "
                    f"'token_acc': '{acc:.4g}', 'epoch': '{epoch:.4g}', 'global_step/max_steps': '{step}/{n}', "
                    f"'elapsed_time': '{_fmt_time(elapsed)}', 'remaining_time': '{_fmt_time(rem)}', "
                    f"'memory(GiB)': '21.37', 'train_speed(s/it)': '{elapsed / step:.4g}'}}\n")
            if len(buf) >= 10000:
                f.write("".join(buf))
                buf.clear()
        f.write("".join(buf))
        f.write(f"{{'train_runtime': {elapsed:.4f}, 'train_samples_per_second': 2.2, 'train_steps_per_second': 2.2, "
                f"'train_loss': 0.61, 'epoch': 3.0, 'global_step/max_steps': '{n}/{n}', 'percentage': '100.00%', "
                f"'elapsed_time': '{_fmt_time(elapsed)}', 'remaining_time': '0s', 'memory(GiB)': 21.37, "
                f"'train_speed(iter/s)': {n / elapsed:.6f}}}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
