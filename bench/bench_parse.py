"""Parser and analyze benchmarks: print wall time and peak RSS (no assertions).

Contract: `python bench/bench_parse.py [--steps-big 1000000] [--repeat 3]` generates
the logs under bench/out/ once (bench/gen_big_log.py), then measures, each in a
fresh subprocess (so imports and peak RSS are counted honestly):
- parse_run() of the big 3.x log into the steps table (in-process timing of the parse only),
  on two cores (the default: a forked helper scans half the blocks) and on one
  (SWIFTDOC_JOBS=1); peak RSS of this process and, separately, of the helper;
- `swiftdoc parse LOG --format json` and `swiftdoc analyze LOG --format json` end to end,
  on a 10,000-step log and on the big log;
- `grep -c train_speed` on the big log as the machine's reference point.
Targets (issue 2/3): big-log parse ≤ 1.5 s and ≤ 300 MB; parse 10k ≤ 0.5 s; analyze 10k ≤ 0.6 s; analyze 1M ≤ 3 s.
Target (issues 8, 17): `swiftdoc parse` of the big log, whole CLI, within 12x of `grep -c train_speed` (best of
--repeat runs for both, each writing its output to a file, the log in page cache), at most 300 MB.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"

_INPROC = """
import resource, sys, time
t0 = time.perf_counter()
from diagnose.parse import parse_run
t1 = time.perf_counter()
run = parse_run([sys.argv[1]])
t2 = time.perf_counter()
print(f"{t2 - t1:.4f} {t1 - t0:.4f} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f} {len(run.steps)} "
      f"{resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024:.1f}")
"""


def _ensure(path: Path, steps: int, version: str = "3x") -> Path:
    if not path.exists():
        OUT.mkdir(exist_ok=True)
        subprocess.run([sys.executable, str(HERE / "gen_big_log.py"), str(path), "--steps", str(steps), "--version", version], check=True)
    return path


def _wall(cmd: list[str], repeat: int) -> tuple[float, float]:
    """Median and best wall time of `repeat` runs, stdout written to a file (GNU grep stops at the first match when
    its output is /dev/null, so it must write its count somewhere real)."""
    import tempfile

    times = []
    with tempfile.TemporaryFile() as sink:
        for _ in range(repeat):
            sink.seek(0)
            t = time.perf_counter()
            subprocess.run(cmd, stdout=sink, stderr=subprocess.DEVNULL, check=False)
            times.append(time.perf_counter() - t)
    return statistics.median(times), min(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps-big", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args(argv)
    big = _ensure(OUT / f"big3x_{a.steps_big}.log", a.steps_big)
    small = _ensure(OUT / "small3x_10000.log", 10_000)
    small4 = _ensure(OUT / "small4x_10000.log", 10_000, "4x")
    print(f"big log: {big.stat().st_size / 1e6:.0f} MB, {a.steps_big} steps")
    g, g_best = _wall(["grep", "-c", "train_speed", str(big)], a.repeat)
    print(f"reference  grep -c train_speed (big)            {g:7.3f} s  (best {g_best:.3f})")
    for label, env in (("2 cores", {}), ("1 core ", {"SWIFTDOC_JOBS": "1"})):
        runs = [subprocess.run([sys.executable, "-c", _INPROC, str(big)], capture_output=True, text=True,
                               env={**os.environ, **env}).stdout.split() for _ in range(a.repeat)]
        parse_s = statistics.median(float(r[0]) for r in runs)
        rss = max(float(r[2]) for r in runs)
        helper = max(float(r[4]) for r in runs)
        print(f"parse_run  big log -> steps table ({label})      {parse_s:7.3f} s  (best {min(float(r[0]) for r in runs):.3f})"
              f"  peak RSS {rss:.0f} MB" + (f" + helper {helper:.0f} MB" if helper else "")
              + f"  ({runs[0][3]} rows; import {float(runs[0][1]):.3f} s)")
    sd = [sys.executable, "-m", "diagnose"]
    for label, log in (("10k 3.x", small), ("10k 4.x", small4), ("big", big)):
        for cmd in ("parse", "analyze"):
            big_parse = cmd == "parse" and label == "big"
            med, best = _wall(sd + [cmd, str(log), "--format", "json"],
                              a.repeat if label != "big" or big_parse else max(1, a.repeat - 1))
            print(f"swiftdoc {cmd:<8} {label:<8} (wall, median)        {med:7.3f} s  (best {best:.3f})")
            if big_parse:  # issue 17's measure: best of the runs for both, grep writing its count to a file
                print(f"  -> swiftdoc parse big / grep -c: {best / g_best:5.1f}x best of {a.repeat} (target <= 12x; "
                      f"medians {med / g:.1f}x); peak RSS {_peak_rss(sd + [cmd, str(log), '--format', 'json']):.0f} MB "
                      f"(target <= 300)")
    return 0


def _peak_rss(cmd: list[str]) -> float:
    """Peak RSS (MB) of one run of cmd, its own process (a forked scan helper is counted by its own peak)."""

    code = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)")
    out = subprocess.run([sys.executable, "-c", code, *cmd], capture_output=True, text=True).stdout.strip()
    return float(out or "nan")


if __name__ == "__main__":
    sys.exit(main())
