"""Cold analysis of pasted excerpts: wall time of `swiftdoc analyze CASE` as a fresh process (no assertions).

Usage: python bench/bench_excerpt.py [--repeat 5] [--format text|json]

Runs the real CLI on every case of the real-world corpus (fixtures/realworld)
in a fresh process each time (imports counted: that is what a user waits for),
and prints the median, p90 and worst wall time per case and over all, with the
interpreter's own start-up beside it for reference.  Target (issue 8): <= 0.4 s.
The package is byte-compiled first, as pip does for an installed wheel (a machine with
PYTHONDONTWRITEBYTECODE=1 would otherwise compile every module on every run).
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _wall(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--format", default="text", choices=["text", "json"])
    ap.add_argument("--cases", type=int, default=0, help="only the first N cases (0: all)")
    a = ap.parse_args(argv)
    cases = sorted((ROOT / "fixtures" / "realworld" / "cases").iterdir())
    if a.cases:
        cases = cases[: a.cases]
    import compileall

    compileall.compile_dir(str(ROOT / "diagnose"), quiet=1)  # what `pip install` does for a wheel
    base = [_wall([sys.executable, "-c", "pass"]) for _ in range(5)]
    times: list[float] = []
    worst = (0.0, "")
    for c in cases:
        ts = [_wall([sys.executable, "-m", "diagnose", "analyze", str(c), "--format", a.format]) for _ in range(a.repeat)]
        m = statistics.median(ts)
        times += ts
        if m > worst[0]:
            worst = (m, c.name)
    times.sort()
    print(f"python start-up (reference)          {statistics.median(base):.3f} s")
    print(f"swiftdoc analyze, {len(cases)} excerpts x {a.repeat} (--format {a.format})")
    print(f"  median {statistics.median(times):.3f} s   p90 {times[int(0.9 * (len(times) - 1))]:.3f} s   "
          f"slowest case {worst[1]} {worst[0]:.3f} s   (target <= 0.4 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
