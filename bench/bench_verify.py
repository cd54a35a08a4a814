"""Benchmarks for `swiftdoc verify`: the verdict rule's error rates, and (with --real) a real verify on the tiny job.

    python bench/bench_verify.py                 # simulation: power and false-gain rate of the verdict rule
    python bench/bench_verify.py --real          # + one real `swiftdoc verify` (gradient checkpointing on -> off)
                                                 #   on the tiny local model (needs ms-swift; ~2-6 min on 2 cores)

Simulation: per-trial samples/s are drawn log-normally around the arm's true
throughput with a trial-to-trial coefficient of variation `cv`; the schedule is
the one `run_verify` uses (2 rounds, a 3rd only while the CI straddles 0 or the
minimum effect), and the verdict is `stats.compare`.  It prints, per (true gain,
cv), how often the verdict is confirmed / not_confirmed / worse, and the mean
number of trials per arm.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "fixtures"))

from diagnose.verify.stats import compare, straddles  # noqa: E402


def simulate(gain: float, cv: float, n_exp: int, rng: random.Random, repeats: int = 2, max_repeats: int = 3,
             min_effect: float = 0.03) -> tuple[dict[str, int], float]:
    out = {"confirmed": 0, "not_confirmed": 0, "worse": 0}
    trials = 0
    sigma = math.sqrt(math.log(1 + cv * cv))
    for _ in range(n_exp):
        b: list[float] = []
        p: list[float] = []
        rnd = 0
        while True:
            rnd += 1
            b.append(100.0 * math.exp(rng.gauss(0, sigma)))
            p.append(100.0 * (1 + gain) * math.exp(rng.gauss(0, sigma)))
            if rnd < repeats:
                continue
            c = compare(b, p, 0.95, min_effect)
            if not straddles(c, min_effect) or rnd >= max_repeats:
                break
        out[c.verdict] += 1
        trials += rnd
    return out, trials / n_exp


def bench_simulation(n_exp: int) -> None:
    rng = random.Random(1234)
    print(f"verdict rule, {n_exp} simulated experiments per row (95% CI, min effect 3%, 2-3 trials per arm)")
    print(f"{'true gain':>9} {'cv':>5} {'confirmed':>10} {'not_conf':>9} {'worse':>6} {'trials/arm':>10}")
    for gain in (0.0, 0.05, 0.1, 0.2, 0.5):
        for cv in (0.02, 0.05, 0.1, 0.2):
            res, t = simulate(gain, cv, n_exp, rng)
            print(f"{gain:>9.0%} {cv:>5.0%} {res['confirmed'] / n_exp:>10.1%} {res['not_confirmed'] / n_exp:>9.1%} "
                  f"{res['worse'] / n_exp:>6.1%} {t:>10.2f}")
    t0 = time.perf_counter()
    for _ in range(10000):
        compare([10.0, 10.5, 10.2], [15.0, 14.7, 15.2])
    print(f"compare(): {(time.perf_counter() - t0) / 10000 * 1e6:.0f} µs per call")


def bench_real(keep: bool) -> None:
    import tinyjob

    swift = shutil.which("swift", path=str(Path(sys.executable).parent)) or shutil.which("swift")
    if swift is None:
        print("--real: ms-swift CLI not installed; skipped")
        return
    d = Path(tempfile.mkdtemp(prefix="bench-verify-"))
    try:
        model = tinyjob.build_tiny_model(d / "model")
        data = tinyjob.build_dataset(d / "data.jsonl", n=200)
        (d / "train.sh").write_text(
            "export HF_HUB_OFFLINE=1 MODELSCOPE_OFFLINE=1 USE_HF=1\nexport OMP_NUM_THREADS=1\n"
            f"swift sft --model {model} --model_type qwen2 --template qwen --dataset {data} --tuner_type lora "
            "--torch_dtype float32 --per_device_train_batch_size 8 --gradient_accumulation_steps 1 "
            "--dataloader_num_workers 0 --output_dir out\n")
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-m", "diagnose", "verify", "train.sh", "--set",
                            "gradient_checkpointing=false", "--max-steps", "12", "--format", "json", "--no-progress",
                            "--swift", swift], cwd=d, capture_output=True, text=True)
        wall = time.monotonic() - t0
        doc = json.loads(p.stdout)
        print(f"\nreal verify (tiny Qwen2, batch 8, CPU): {doc['verdict']}, gain {doc['gain']:+.1%}, "
              f"CI {doc['ci'][0]:+.1%} … {doc['ci'][1]:+.1%}" if doc.get("ci") else
              f"\nreal verify: {doc['verdict']} ({doc['reason']})")
        print(f"{'#':>2} {'arm':<9} {'status':<8} {'wall s':>7} {'start-up s':>10} {'s/step':>8} {'samples/s':>9} "
              f"{'CPU s/step':>10} {'other CPU':>9}")
        for t in doc["trials"]:
            st = t["status"] + ("*" if t["replaced"] else "~" if t["disturbed"] else "")
            print(f"{t['index']:>2} {t['arm']:<9} {st:<8} {t['wall_s'] or 0:>7.1f} {t['startup_s'] or 0:>10.1f} "
                  f"{t['step_time_s'] or 0:>8.4f} {t['samples_per_s'] or 0:>9.2f} {t['cpu_s_per_step'] or 0:>10.4f} "
                  f"{t['external_cpu_cores'] if t['external_cpu_cores'] is not None else float('nan'):>9.2f}")
        print(f"(* replaced, ~ disturbed by other processes)  total {wall:.0f} s; "
              f"start-up {doc['baseline']['startup_s']:.1f} s / {doc['patched']['startup_s']:.1f} s per trial, excluded")
    finally:
        if not keep:
            shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000, help="simulated experiments per row")
    ap.add_argument("--real", action="store_true", help="also run a real verify on the tiny model")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    bench_simulation(a.n)
    if a.real:
        bench_real(a.keep)


if __name__ == "__main__":
    main()
