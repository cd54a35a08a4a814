"""Event scan and many-small-files benchmarks (issue 20, performance): print numbers (no assertions).

Contract: `python bench/bench_events.py [--lines 2000000] [--files 20000] [--repeat 5]` measures
- the event scan (`EventScanner.feed`) per line on ordinary lines: every line of the committed captures
  (fixtures/*/train.log, the real excerpts of fixtures/realworld/cases) that is not a step row and carries no event,
  best of --repeat passes, in µs a line; the signature prefilter alone; and the scan over every line of those
  captures (events included);
- `swiftdoc parse` of a generated log of --lines ordinary lines (a fresh process: wall time, peak RSS);
- `swiftdoc analyze` of a folder of --files small captures (a fresh process: wall time, peak RSS): read one at a
  time, only each one's events and clues kept.
Targets (issue 20): ≤ 5 µs a line for the event scan on ordinary lines; the folder streamed (memory flat in the
number of files; it took 47 s and 1.6 GB for 20,000 files before).  Generated inputs go to bench/out/.
"""
from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "out"
sys.path.insert(0, str(ROOT))


def _capture_lines() -> list[str]:
    files = sorted(glob.glob(str(ROOT / "fixtures" / "*" / "train.log")))
    files += sorted(glob.glob(str(ROOT / "fixtures" / "realworld" / "cases" / "*.log")))
    out: list[str] = []
    for f in files:
        with open(f, encoding="utf-8", errors="replace") as fh:
            for raw in fh:
                line = raw.rstrip("\n").split("\r")[-1]
                if line.lstrip().startswith("{") and "loss" in line:
                    continue  # a step row: read by the vectorised dict scan, never by the event scan
                out.append(line)
    return out


def _per_line(lines: list[str], feed_factory, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        feed = feed_factory()
        t = time.perf_counter()
        for i, line in enumerate(lines, 1):
            feed(i, line)
        best = min(best, time.perf_counter() - t)
    return best / len(lines) * 1e6


def bench_scan(repeat: int) -> None:
    from diagnose.parse.events import _PREFILTER, EventScanner

    every = _capture_lines()
    ordinary = []
    for line in every:
        sc = EventScanner()
        sc.feed(1, line)
        if not sc.events:
            ordinary.append(line)
    print(f"ordinary lines: {len(ordinary)} (mean {sum(map(len, ordinary)) / len(ordinary):.0f} chars) "
          f"of {len(every)} non-step lines of {len(glob.glob(str(ROOT / 'fixtures' / '*' / 'train.log')))} captures "
          "and the real excerpts")
    us = _per_line(ordinary, lambda: EventScanner().feed, repeat)
    print(f"event scan, ordinary lines:   {us:6.2f} µs/line   (target ≤ 5)")
    pre = _per_line(ordinary, lambda: (lambda i, line: _PREFILTER.search(line.lower())), repeat)
    print(f"  of which the prefilter:     {pre:6.2f} µs/line")
    allus = _per_line(every, lambda: EventScanner().feed, repeat)
    print(f"event scan, every line:       {allus:6.2f} µs/line   (events included)")


_WRAP = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
         "rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode; "
         "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, rc)")


def _child(cmd: list[str]) -> tuple[float, float, int]:
    """Wall time and peak RSS of one command, measured by a fresh wrapper process (its only child)."""
    p = subprocess.run([sys.executable, "-c", _WRAP, *cmd], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall, rss, rc = p.stdout.split()
    return float(wall), float(rss), int(rc)


def _gen_lines(path: Path, n: int) -> None:
    ordinary = [ln for ln in _capture_lines() if "Traceback" not in ln][:5000]
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            f.write(ordinary[i % len(ordinary)] + "\n")


def _gen_folder(d: Path, n: int) -> None:
    d.mkdir(parents=True, exist_ok=True)
    have = len(list(d.glob("*.log")))
    row = ("{{'loss': {:.4f}, 'grad_norm': 0.5, 'learning_rate': 1e-4, 'epoch': 0.1, 'global_step/max_steps': "
           "'{}/100', 'elapsed_time': '1s', 'remaining_time': '1s', 'memory(GiB)': 20.0, 'train_speed(iter/s)': 0.5}}\n")
    for i in range(have, n):
        (d / f"run{i:06d}.log").write_text("[INFO:swift] Start time of running main\n"
                                           + "".join(row.format(1.0 / (j + 1), j + 1) for j in range(3))
                                           + "an ordinary line\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=2_000_000)
    ap.add_argument("--files", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    bench_scan(a.repeat)
    OUT.mkdir(exist_ok=True)
    log = OUT / f"ordinary_{a.lines}.log"
    if not log.exists():
        _gen_lines(log, a.lines)
    wall, rss, rc = _child([sys.executable, "-m", "diagnose", "parse", str(log), "--format", "json"])
    print(f"swiftdoc parse, {a.lines:,} ordinary lines ({log.stat().st_size / 1e6:.0f} MB): {wall:6.2f} s, "
          f"peak RSS {rss:.0f} MB (rc {rc}; {wall / a.lines * 1e6:.2f} µs/line end to end)")
    folder = OUT / f"many_{a.files}"
    _gen_folder(folder, a.files)
    wall, rss, rc = _child([sys.executable, "-m", "diagnose", "analyze", str(folder), "--format", "json"])
    print(f"swiftdoc analyze, a folder of {a.files:,} small captures: {wall:6.2f} s, peak RSS {rss:.0f} MB (rc {rc})")


if __name__ == "__main__":
    main()
