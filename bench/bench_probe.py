"""What swiftdoc's in-trainer probe costs: a real CPU `swift sft` with and without it, side by side, in one run.

    python bench/bench_probe.py                # ~6 min on 2 cores: one alternating run, 3 pairs, the hot path
    python bench/bench_probe.py --pairs 5 --steps 200 --alt-steps 600

Three measurements of the tiny local Qwen2 of fixtures/tinyjob.py (one rank, CPU, micro-batch 2 x accumulation 2:
four forward/backward passes per optimizer step), printed together:
1. One run, the probe switched off and on every `--block` steps (a bench-only timer callback, loaded before the
   probe, flips its switch at step begin and times every step): both arms share one process and the same minutes
   of the machine, so the load of other processes falls on both alike.  Off, the probe's hooks stay installed and
   return at once.  The overhead is the difference of the median (and mean) step times, warm-up dropped.
2. Pairs of separate runs, with and without the probe, the order alternating (ABBA).  Per run: the trainer's own
   `train_runtime` / steps, the median step interval after 10 steps (swiftdoc's parse of the run), the CPU time of
   the trainer process per step, and the loss curve (the same in every run: the probe changes no training).  On a
   shared machine their spread is the noise of that machine, often larger than the probe.
3. The hot path alone: the probe driven through the same hook order (data fetch, step begin, forward hooks x4,
   substep ends, optimizer, step end) over a no-op model, 20,000 steps: microseconds per step, and that as a share
   of the real runs' median step.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "fixtures"))

from diagnose.patch.probe_flags import PLUGIN, add_probe  # noqa: E402

# Loaded into BOTH arms (bench only): the training loop's wall and CPU time, from train begin to train end, for
# the whole trainer process (every thread, the probe's flush thread included).  CPU time does not grow when other
# processes take the cores, so it shows a cost that the wall time of a shared machine hides in its noise.
# With BENCH_TOGGLE=K it also switches the probe (the callback after it) off and on every K steps, at step begin,
# and records which steps ran with it: the two arms then share one process and the same minutes of the machine.
TIMER = '''
import json, os, time
from swift.callbacks import TrainerCallback, callbacks_map


class BenchTimer(TrainerCallback):
    def on_train_begin(self, args, state, control, **kw):
        self.t = (time.perf_counter(), time.process_time())
        self.last, self.rows, self.k = time.perf_counter(), [], int(os.environ.get("BENCH_TOGGLE") or 0)
        self.probe = next((c for c in self.trainer.callback_handler.callbacks
                           if type(c).__name__ == "SwiftdocProbe"), None)

    def on_step_begin(self, args, state, control, **kw):
        p = self.probe
        if self.k and p is not None and state.global_step % self.k == 0:
            if p.on:
                p.on = False
            elif p._file is not None:
                p._reset_step(time.perf_counter())
                p.on = True

    def on_step_end(self, args, state, control, **kw):
        now = time.perf_counter()
        self.rows.append([state.global_step, now - self.last, bool(self.probe is not None and self.probe.on)])
        self.last = now

    def on_train_end(self, args, state, control, **kw):
        wall, cpu = time.perf_counter() - self.t[0], time.process_time() - self.t[1]
        with open(os.path.join(args.output_dir, "bench_timer.json"), "w") as f:
            json.dump({"wall_s": wall, "cpu_s": cpu, "steps": state.global_step, "rows": self.rows}, f)


callbacks_map["bench_timer"] = BenchTimer
'''


def _run(work: Path, name: str, steps: int, probe: bool, swift: str, toggle: int = 0) -> dict:
    import tinyjob

    argv = tinyjob.sft_argv(work / "model", work / "data.jsonl", work / name, swift=swift, max_steps=steps,
                            per_device_train_batch_size=2, gradient_accumulation_steps=2, logging_steps=1,
                            external_plugins=str(work / "bench_timer.py"), callbacks="bench_timer")
    if probe:
        argv = add_probe(argv, "4.6.0")
    t0 = time.monotonic()
    rc = tinyjob.run_swift(argv, work / f"{name}.log", env={"OMP_NUM_THREADS": "1", "BENCH_TOGGLE": str(toggle)},
                           timeout=900)
    wall = time.monotonic() - t0
    rd = tinyjob.find_run_dir(work / name)
    if rc != 0 or rd is None:
        raise SystemExit(f"{name}: swift sft failed (rc {rc}); see {work / name}.log")
    rows = [json.loads(x) for x in (rd / "logging.jsonl").read_text().splitlines() if x.strip()]
    last = next(r for r in reversed(rows) if "train_runtime" in r)
    losses = [r["loss"] for r in rows if "loss" in r]
    from diagnose.parse import parse_run

    iv = parse_run([str(rd)]).steps["interval_s"][10:]  # steady state: the step intervals after 10 warm-up steps
    timer = json.loads((rd / "bench_timer.json").read_text())
    return {"name": name, "probe": probe, "train_runtime_s": float(last["train_runtime"]), "wall_s": wall,
            "s_per_step": float(last["train_runtime"]) / steps, "median_step_s": statistics.median(iv.tolist()),
            "cpu_per_step": timer["cpu_s"] / timer["steps"], "rows": timer["rows"], "losses": losses, "run_dir": rd}


def alternating(work: Path, steps: int, block: int, swift: str) -> dict:
    """One run, the probe off and on in turns of `block` steps: per-step wall time of each state (after warm-up)."""
    r = _run(work, "alternating", steps, True, swift, toggle=block)
    rows = [(s, w, st) for s, w, st in r["rows"] if s > 2 * block]
    on = [w for _, w, st in rows if st]
    off = [w for _, w, st in rows if not st]
    # each "on" turn against the "off" turn just before it: the median step of each, the relative difference
    turns: dict[int, list] = {}
    for s, w, st in rows:
        turns.setdefault((s - 1) // block, [st, []])[1].append(w)
    keys = sorted(turns)
    diffs = [statistics.median(turns[k][1]) / statistics.median(turns[j][1]) - 1
             for j, k in zip(keys, keys[1:]) if k == j + 1 and turns[k][0] and not turns[j][0]]
    return {"on": on, "off": off, "diffs": diffs, "losses": r["losses"], "run": r}


def real_runs(pairs: int, steps: int, alt_steps: int = 0, block: int = 5) -> tuple[list[dict], dict | None]:
    import shutil

    import tinyjob

    swift = shutil.which("swift", path=str(Path(sys.executable).parent)) or shutil.which("swift")
    if swift is None:
        print("ms-swift is not installed: real runs skipped (pip install -e '.[swift]')")
        return [], None
    work = Path(tempfile.mkdtemp(prefix="bench-probe-"))
    tinyjob.build_tiny_model(work / "model")
    tinyjob.build_dataset(work / "data.jsonl", n=400)
    (work / "bench_timer.py").write_text(TIMER)
    alt = alternating(work, alt_steps, block, swift) if alt_steps else None
    if alt:
        print(f"  one run, the probe on and off every {block} steps: {len(alt['on'])} steps with it, "
              f"{len(alt['off'])} without", flush=True)
    results = []
    for i in range(pairs):
        order = (False, True) if i % 2 == 0 else (True, False)  # ABBA
        for probe in order:
            r = _run(work, f"{'with' if probe else 'without'}{i}", steps, probe, swift)
            results.append(r)
            print(f"  pair {i + 1} {'with   ' if probe else 'without'} probe: {r['s_per_step'] * 1000:8.2f} ms/step "
                  f"(train_runtime {r['train_runtime_s']:.2f} s for {steps} steps), median step "
                  f"{r['median_step_s'] * 1000:.2f} ms, CPU {r['cpu_per_step'] * 1000:.2f} ms/step; "
                  f"run {r['wall_s']:.0f} s", flush=True)
    return results, alt


def hot_path(n: int = 20000) -> float:
    """Microseconds per optimizer step of the probe's own work (4 micro-batches, the real run's hook order)."""
    import torch

    os.environ["SWIFTDOC_PROBE_NO_REGISTER"] = "1"
    spec = importlib.util.spec_from_file_location("swiftdoc_probe_bench", PLUGIN)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)

    class Data(torch.utils.data.Dataset):
        def __len__(self):
            return 10 ** 9

        def __getitem__(self, i):
            return i

    batch = {"input_ids": torch.ones(2, 128, dtype=torch.long), "attention_mask": torch.ones(2, 128, dtype=torch.long)}
    dl = torch.utils.data.DataLoader(Data(), batch_size=None, collate_fn=lambda i: batch)
    model = torch.nn.Identity()
    x = torch.zeros(1)
    with tempfile.TemporaryDirectory() as d:
        out = {}
        for probe in (False, True):
            cb = mod._Probe()
            args = SimpleNamespace(output_dir=d, gradient_accumulation_steps=4, per_device_train_batch_size=2)
            state = SimpleNamespace(global_step=0)
            if probe:
                cb.on_train_begin(args, state, None, train_dataloader=dl, model=model)
            it = iter(dl)
            t0 = time.perf_counter()
            for _ in range(n):
                bs = [next(it) for _ in range(4)]
                cb.on_step_begin(args, state, None)
                for k in range(len(bs)):
                    model(x)
                    if k < 3:
                        cb.on_substep_end(args, state, None)
                cb.on_pre_optimizer_step(args, state, None)
                cb.on_optimizer_step(args, state, None)
                state.global_step += 1
                cb.on_step_end(args, state, None)
            out[probe] = (time.perf_counter() - t0) / n
            if probe:
                cb.on_train_end(args, state, None)
    return (out[True] - out[False]) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--alt-steps", type=int, default=800, help="steps of the run that turns the probe on and off")
    ap.add_argument("--block", type=int, default=5, help="steps per turn in that run")
    a = ap.parse_args()
    print(f"swiftdoc probe overhead: one run of {a.alt_steps} steps turning the probe on and off, {a.pairs} pairs of "
          f"runs ({a.steps} steps each), real `swift sft` on CPU, {os.cpu_count()} CPU cores")
    results, alt = real_runs(a.pairs, a.steps, a.alt_steps, a.block)
    per_step_us = hot_path()
    print()
    steps_s = [r["s_per_step"] for r in results] + (alt["on"] + alt["off"] if alt else [])
    if alt:
        on, off = statistics.median(alt["on"]), statistics.median(alt["off"])
        mon, moff = statistics.fmean(alt["on"]), statistics.fmean(alt["off"])
        d = alt["diffs"]
        ci = 1.96 * statistics.stdev(d) / len(d) ** 0.5 if len(d) > 1 else float("nan")
        print(f"one run, probe on/off every {a.block} steps ({len(alt['on'])} + {len(alt['off'])} steps): median "
              f"step {on * 1000:.2f} ms on, {off * 1000:.2f} ms off: {(on - off) / off:+.2%} "
              f"(means {mon * 1000:.2f} / {moff * 1000:.2f} ms: {(mon - moff) / moff:+.2%})")
        print(f"  each 'on' turn against the 'off' turn before it ({len(d)} pairs of turns): "
              f"{statistics.fmean(d):+.2%} +/- {ci:.2%} (95% interval of the mean)")
    if results:
        with_ = [r for r in results if r["probe"]]
        without = [r for r in results if not r["probe"]]
        ratios = [(w["s_per_step"] - wo["s_per_step"]) / wo["s_per_step"] for w, wo in zip(with_, without)]
        med_ratios = [(w["median_step_s"] - wo["median_step_s"]) / wo["median_step_s"] for w, wo in zip(with_, without)]
        cpu_ratios = [(w["cpu_per_step"] - wo["cpu_per_step"]) / wo["cpu_per_step"] for w, wo in zip(with_, without)]
        same = all(r["losses"] == results[0]["losses"] for r in results)
        print(f"separate runs: without probe {statistics.median(r['s_per_step'] for r in without) * 1000:.2f} ms/step, "
              f"with probe {statistics.median(r['s_per_step'] for r in with_) * 1000:.2f} ms/step (medians)")
        print(f"  overhead per pair (train_runtime): {', '.join(f'{x:+.2%}' for x in ratios)}; median "
              f"{statistics.median(ratios):+.2%}")
        print(f"  overhead per pair (median step): {', '.join(f'{x:+.2%}' for x in med_ratios)}; median "
              f"{statistics.median(med_ratios):+.2%}   (the pairs' spread is this shared machine's noise)")
        print(f"  overhead per pair (CPU time of the trainer process per step): "
              f"{', '.join(f'{x:+.2%}' for x in cpu_ratios)}; median {statistics.median(cpu_ratios):+.2%}")
        print(f"  loss curves identical in all {len(results)} runs: {same}")
        probe_files = sum(1 for r in with_ if (r["run_dir"] / "swiftdoc-probe" / "rank0.jsonl").exists())
        print(f"  probe records written: {probe_files} of {len(with_)} runs")
    if steps_s:
        med_step = statistics.median(steps_s)
        print(f"hot path: {per_step_us:.1f} us per optimizer step (4 micro-batches) = "
              f"{per_step_us / 1e6 / med_step:.3%} of the real median step ({med_step * 1000:.1f} ms)")
    else:
        print(f"hot path: {per_step_us:.1f} us per optimizer step (4 micro-batches)")


if __name__ == "__main__":
    main()
