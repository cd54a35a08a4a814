"""Replay a captured ms-swift run as if it were running now (tests, benches, demos of attach).

    python <dir>/swift/cli/sft.py --replay train.log [--jsonl logging.jsonl] --output_dir OUT \
        [--pace 0.05] [--step-pace S] [--inject-file FILE] [--hold 0] [--loop [--loop-pace S]]

The launcher script must live under a `swift/cli/` folder so attach sees an
ms-swift rank (`write_launcher(dir)` creates one that calls `main`).  Lines of
the capture go to stdout (redirect it to a file) every `--pace` seconds; a new
`OUT/v0-<date>/` folder gets `args.json` and the `logging.jsonl` rows as their
steps are reached.  When `--inject-file` is given, a request written into it
(`{"text": "...", "jsonl": {...}}`, then the file is removed) is appended at once
and the time of the write is stored in `<inject-file>.done` (for the latency bench).
`--hold S` keeps the process alive S seconds after the end.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from datetime import datetime
from pathlib import Path

from diagnose.parse.values import STEP_IN_LINE

_STEP = re.compile(STEP_IN_LINE)


def write_launcher(root: str | os.PathLike[str]) -> Path:
    """Create `<root>/swift/cli/sft.py` that runs this replayer with the current interpreter's path."""
    d = Path(root) / "swift" / "cli"
    d.mkdir(parents=True, exist_ok=True)
    pkg = Path(__file__).resolve().parents[2]
    p = d / "sft.py"
    p.write_text(f"import sys\nsys.path.insert(0, {str(pkg)!r})\nfrom diagnose.attach.replay import main\n"
                 "raise SystemExit(main())\n")
    return p


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--replay", required=True)
    ap.add_argument("--jsonl")
    ap.add_argument("--args-json")
    ap.add_argument("--output_dir", required=True)
    ap.add_argument("--pace", type=float, default=0.05)
    ap.add_argument("--step-pace", type=float, help="seconds after each training-step line (default: --pace)")
    ap.add_argument("--inject-file")
    ap.add_argument("--hold", type=float, default=0.0)
    ap.add_argument("--loop", action="store_true", help="replay the step lines again and again until killed")
    ap.add_argument("--loop-pace", type=float, help="seconds between step lines while looping (default: --step-pace)")
    a, _ = ap.parse_known_args(argv)
    lines = Path(a.replay).read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
    rows = []
    if a.jsonl:
        rows = [ln for ln in Path(a.jsonl).read_text().splitlines() if ln.strip()]
    run = Path(a.output_dir) / f"v0-{datetime.now():%Y%m%d-%H%M%S}"
    run.mkdir(parents=True, exist_ok=True)
    if a.args_json:
        shutil.copy(a.args_json, run / "args.json")
    jl = (run / "logging.jsonl").open("a")
    out = sys.stdout
    ri = 0

    def inject() -> None:
        if not a.inject_file or not os.path.exists(a.inject_file):
            return
        try:
            req = json.loads(Path(a.inject_file).read_text())
        except (OSError, ValueError):
            return
        os.unlink(a.inject_file)
        if req.get("text"):
            out.write(req["text"].rstrip("\n") + "\n")
            out.flush()
        if req.get("jsonl"):
            jl.write(req["jsonl"].rstrip("\n") + "\n")
            jl.flush()
        Path(a.inject_file + ".done").write_text(repr(time.time()))

    def emit(ln: str) -> None:
        nonlocal ri
        out.write(ln)
        out.flush()
        m = _STEP.search(ln)
        if m and ri < len(rows):
            jl.write(rows[ri] + "\n")
            jl.flush()
            ri += 1

    step_pace = a.pace if a.step_pace is None else a.step_pace
    for ln in lines:
        emit(ln)
        inject()
        time.sleep(step_pace if _STEP.search(ln) else a.pace)
    if a.loop:
        steps = [ln for ln in lines if _STEP.search(ln) and "train_runtime" not in ln]
        while steps:
            for ln in steps:
                out.write(ln)
                out.flush()
                inject()
                time.sleep(step_pace if a.loop_pace is None else a.loop_pace)
    end = time.monotonic() + a.hold
    while time.monotonic() < end:
        inject()
        time.sleep(0.01)
    jl.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
