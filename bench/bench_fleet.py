"""`swiftdoc fleet` over many run folders against `swiftdoc analyze` once per folder (no assertions).

Usage: python bench/bench_fleet.py [--runs 1000] [--steps 1000] [--sample 40]

Writes RUNS run folders under bench/out/fleet_RUNS (each a ms-swift 4.x capture of STEPS steps,
bench/gen_big_log.py, every tenth one cut mid-line like a job still writing), then measures in one
benchmark run, each as fresh processes:
- `swiftdoc fleet ROOT --format json` over all of them (wall, peak RSS of the fleet process and its workers);
- `swiftdoc analyze FOLDER --format json` once per folder, timed on SAMPLE folders and scaled to RUNS;
- the same fleet over a tenth of the runs, to show memory stays flat in the number of runs.
Target (issue #9): fleet at least 10x faster than analyze per folder; memory flat.
"""
from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _make(root: Path, runs: int, steps: int) -> None:
    if (root / "done").exists():
        return
    root.mkdir(parents=True, exist_ok=True)
    tmpl = root / "template.log"
    subprocess.run([sys.executable, str(HERE / "gen_big_log.py"), str(tmpl), "--steps", str(steps), "--version", "4x"],
                   check=True)
    data = tmpl.read_bytes()
    tmpl.unlink()
    for i in range(runs):
        d = root / f"lr{i:04d}"
        d.mkdir(exist_ok=True)
        body = data if i % 10 else data[: len(data) * 2 // 3]  # every tenth: a job still writing, cut mid-line
        (d / "train.log").write_bytes(body)
    (root / "done").write_text("ok")


def _run(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS MB of the command and its children) for one fresh run of cmd."""
    code = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
            "subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
            "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)")
    out = subprocess.run([sys.executable, "-c", code, *cmd], capture_output=True, text=True).stdout.split()
    return float(out[0]), float(out[1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--sample", type=int, default=40)
    a = ap.parse_args(argv)
    root = HERE / "out" / f"fleet_{a.runs}x{a.steps}"
    _make(root, a.runs, a.steps)
    sd = [sys.executable, "-m", "diagnose"]
    wall, rss = _run(sd + ["fleet", str(root), "--format", "json", "--no-progress"])
    folders = sorted(p for p in root.iterdir() if p.is_dir())
    small_root = [str(p) for p in folders[: max(2, a.runs // 10)]]
    wall10, rss10 = _run(sd + ["fleet", *small_root, "--format", "json", "--no-progress"])
    per = [_run(sd + ["analyze", str(p), "--format", "json"])[0] for p in folders[: a.sample]]
    each = statistics.median(per) * a.runs
    print(f"{a.runs} run folders of {a.steps} steps (every tenth cut mid-line), {resource.getrlimit(resource.RLIMIT_NOFILE)[0]} fds")
    print(f"swiftdoc fleet ROOT (all {a.runs})           {wall:8.2f} s   peak RSS {rss:6.0f} MB (largest process)")
    print(f"swiftdoc fleet over {len(small_root):<4} runs              {wall10:8.2f} s   peak RSS {rss10:6.0f} MB")
    print(f"swiftdoc analyze per folder (median of {a.sample}) x {a.runs}  {each:8.2f} s   "
          f"({statistics.median(per):.3f} s each)")
    print(f"  -> fleet is {each / wall:5.1f}x faster (target >= 10x); memory {rss / rss10:4.2f}x for 10x the runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
