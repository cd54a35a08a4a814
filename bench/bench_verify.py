"""Benchmarks for `swiftdoc verify`: the verdict rule's error rates, and (with --real) a real verify on the tiny job.

    python bench/bench_verify.py                 # simulation: power and false-gain rate of the verdict rule
    python bench/bench_verify.py --real          # + one real `swiftdoc verify` (gradient checkpointing on -> off)
                                                 #   on the tiny local model (needs ms-swift; ~2-6 min on 2 cores)
    python bench/bench_verify.py --slots         # + the same job verified with 1 slot and with 2 slots at equal
                                                 #   trials per arm, side by side: wall time to a verdict (~5 min)

Slots simulation: the whole `run_verify` (Latin-square waves over 2 slots, the slot as a block) over replayed
trials whose samples/s carry the trial-to-trial noise `cv` and a per-experiment slot speed difference of up to
±20%: the false-gain rate (a no-op confirmed) and the power.

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


def simulate_slots(gain: float, cv: float, n_exp: int, rng: random.Random, n_slots: int = 2,
                   spread: float = 0.2) -> tuple[dict[str, int], float]:
    """`run_verify` itself over replayed trials: each trial's step time carries log-normal noise, each slot a speed
    factor drawn per experiment in [1 - spread, 1 + spread]."""
    import tempfile as tf

    from diagnose.verify import job as J
    from diagnose.verify.executor import Slot
    from diagnose.verify.experiment import VerifyOptions, run_verify
    from diagnose.verify.trial import RecordedTrialRunner

    out = {"confirmed": 0, "not_confirmed": 0, "worse": 0, "failed": 0}
    trials = 0
    sigma = math.sqrt(math.log(1 + cv * cv))
    work = Path(tf.mkdtemp(prefix="bench-slots-"))
    job = J.Job(source="bench", command="sft", argv=["--model", "m", "--dataset", "d.jsonl",
                                                      "--per_device_train_batch_size", "4"], env={}, swift="swift",
                version="4.6.0", version_source="bench", cwd=str(work))
    base = J.Variant("baseline", list(job.argv), {})
    patched = J.Variant("patched", list(job.argv) + ["--gradient_checkpointing", "false"], {})
    slots = [Slot(f"cpu:{i}", cpus=[i]) for i in range(n_slots)]
    for _ in range(n_exp):
        def arm(t: float) -> list[list[float]]:
            return [[20.0] + [t * math.exp(rng.gauss(0, sigma))] * 11 for _ in range(8)]

        runner = RecordedTrialRunner({"baseline": arm(0.3), "patched": arm(0.3 / (1 + gain))},
                                     slot_speed={s.name: rng.uniform(1 - spread, 1 + spread) for s in slots})
        rep = run_verify(job, [base, patched], VerifyOptions(max_steps=12, warmup=1, repeats=1, max_repeats=2,
                                                             workdir=str(work / "w")), runner, slots=slots)
        out[rep.verdict] += 1
        trials += len(rep.trials) / 2
    shutil.rmtree(work, ignore_errors=True)
    return out, trials / n_exp


def bench_slots_simulation(n_exp: int) -> None:
    rng = random.Random(99)
    print(f"\nslots: run_verify over 2 slots (slot speeds differ by up to ±20% per experiment; repeats 1, max 2: "
          f"one round is never decisive, so 4 trials per arm), {n_exp} experiments per row")
    print(f"{'true gain':>9} {'cv':>5} {'confirmed':>10} {'not_conf':>9} {'worse':>6} {'trials/arm':>10}")
    for gain in (0.0, 0.1, 0.2, 0.5):
        for cv in (0.05, 0.1):
            res, t = simulate_slots(gain, cv, n_exp, rng)
            print(f"{gain:>9.0%} {cv:>5.0%} {res['confirmed'] / n_exp:>10.1%} {res['not_confirmed'] / n_exp:>9.1%} "
                  f"{res['worse'] / n_exp:>6.1%} {t:>10.2f}")


def _swift() -> str | None:
    return shutil.which("swift", path=str(Path(sys.executable).parent)) or shutil.which("swift")


def _tiny_job(d: Path) -> None:
    """The tiny local Qwen2 job of fixtures/tinyjob.py as d/train.sh (batch 8, CPU, offline)."""
    import tinyjob

    model = tinyjob.build_tiny_model(d / "model")
    data = tinyjob.build_dataset(d / "data.jsonl", n=200)
    (d / "train.sh").write_text(
        "export HF_HUB_OFFLINE=1 MODELSCOPE_OFFLINE=1 USE_HF=1\nexport OMP_NUM_THREADS=1\n"
        f"swift sft --model {model} --model_type qwen2 --template qwen --dataset {data} --tuner_type lora "
        "--torch_dtype float32 --per_device_train_batch_size 8 --gradient_accumulation_steps 1 "
        "--dataloader_num_workers 0 --output_dir out\n")


def bench_slots_real(keep: bool) -> None:
    """The same real job, one slot vs two, equal trials per arm (4 each), in this one run."""
    swift = _swift()
    if swift is None:
        print("--slots: ms-swift CLI not installed; skipped")
        return
    d = Path(tempfile.mkdtemp(prefix="bench-slots-"))
    try:
        _tiny_job(d)
        print("\nreal verify, gradient checkpointing on -> off, 16 steps per trial, 4 trials per arm:")
        for label, extra in (("1 slot ", ["--repeats", "4", "--max-repeats", "4"]),
                             ("2 slots", ["--slots", "2", "--repeats", "2", "--max-repeats", "2"])):
            t0 = time.monotonic()
            p = subprocess.run([sys.executable, "-m", "diagnose", "verify", "train.sh", "--set",
                                "gradient_checkpointing=false", "--max-steps", "16", "--format", "json", "--no-progress",
                                "--swift", swift, *extra], cwd=d, capture_output=True, text=True)
            wall = time.monotonic() - t0
            doc = json.loads(p.stdout)
            ci = f"CI {doc['ci'][0]:+.1%} … {doc['ci'][1]:+.1%}" if doc.get("ci") else "no CI"
            print(f"  {label}: {wall:6.1f} s to '{doc['verdict']}', gain {doc['gain']:+.1%}, {ci}; trials "
                  + ", ".join(f"{t['arm'][0]}@{t['slot']} {t['start_s']:.0f}-{t['end_s']:.0f}s" for t in doc["trials"]))
            if label.startswith("1"):
                one = wall
            else:
                print(f"  speed-up with 2 slots: {one / wall:.2f}x")
    finally:
        if not keep:
            shutil.rmtree(d, ignore_errors=True)


def bench_real(keep: bool) -> None:
    swift = _swift()
    if swift is None:
        print("--real: ms-swift CLI not installed; skipped")
        return
    d = Path(tempfile.mkdtemp(prefix="bench-verify-"))
    try:
        _tiny_job(d)
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
    ap.add_argument("--slots", action="store_true", help="also time 1 slot against 2 slots on the tiny model")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    bench_simulation(a.n)
    bench_slots_simulation(max(200, a.n // 4))
    if a.real:
        bench_real(a.keep)
    if a.slots:
        bench_slots_real(a.keep)


if __name__ == "__main__":
    main()
