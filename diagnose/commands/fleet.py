"""`swiftdoc fleet ROOT...`: the state of a whole sweep, one row per run.

Finds every run under the roots (ms-swift run folders with `logging.jsonl` or
`args.json`, and capture files), analyses them in parallel over the machine's
cores with a progress bar on stderr, and prints one row per run: path, ms-swift
version, model, world size, steps done / max, verdict and its confidence,
samples/s, tokens/s, MFU, peak memory, the culprit rank of a failed multi-rank
run.  `--sort COLUMN` (`--desc`, or `--sort=-COLUMN`, for descending), `--where category=oom`
(repeatable; `!=` too), `--format table|csv|json|markdown`; `--fail-on` makes CI
fail when a run's verdict reaches that severity.  A run that cannot be read yet
(half-written) is a row, never an error.

Exit codes: 0 ran; 1 a run reached --fail-on; 2 bad usage (no runs found, an
unknown column).
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from typing import Any

HELP = "analyse every run under some folders: one row per run"
SCHEMA_VERSION = 1
_BAD = {"error": {"oom", "nan", "bus_error", "nccl", "interrupted", "unknown", "unreadable"},
        "warning": {"oom", "nan", "bus_error", "nccl", "interrupted", "unknown", "unreadable", "config", "data_loading",
                    "memory_bandwidth"}}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("roots", nargs="+", metavar="ROOT", help="folders to search (or run folders / capture files)")
    parser.add_argument("--format", choices=["table", "csv", "json", "markdown"], default="table")
    parser.add_argument("--sort", metavar="COLUMN", help="sort by a column, e.g. samples_per_s (--sort=-COLUMN or --desc: "
                                                         "descending)")
    parser.add_argument("--desc", action="store_true", help="sort descending")
    parser.add_argument("--where", action="append", default=[], metavar="COL=VALUE",
                        help="keep the rows where a column equals (or with != differs from) a value; repeatable")
    parser.add_argument("--jobs", type=int, default=0, help="worker processes (default: the machine's cores)")
    parser.add_argument("--fail-on", choices=["warning", "error"],
                        help="exit 1 when a run's verdict is a failure (error) or any problem (warning)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def _filters(specs: list[str]) -> list[tuple[str, bool, str]]:
    from diagnose.errors import UsageError
    from diagnose.fleet import ROW_KEYS

    out = []
    for s in specs:
        neg = "!=" in s
        key, _, val = s.partition("!=" if neg else "=")
        if not _ or key not in ROW_KEYS:
            raise UsageError(f"--where {s!r}: expected COLUMN=VALUE with a known column",
                             hint="columns: " + ", ".join(ROW_KEYS))
        out.append((key, neg, val))
    return out


def _keep(row: dict[str, Any], filters: list[tuple[str, bool, str]]) -> bool:
    for key, neg, val in filters:
        if (str(row.get(key)) == val) == neg:
            return False
    return True


def run(args: argparse.Namespace) -> int:
    from diagnose.errors import InputError, UsageError
    from diagnose.fleet import ROW_KEYS, analyse_runs, find_runs, group_jobs

    sort_key = (args.sort or "").lstrip("-")
    if sort_key and sort_key not in ROW_KEYS:
        raise UsageError(f"unknown --sort column {sort_key!r}", hint="columns: " + ", ".join(ROW_KEYS))
    filters = _filters(args.where)
    paths = group_jobs(find_runs(args.roots))
    if not paths:
        raise InputError("no runs found under " + ", ".join(args.roots),
                         hint="a run is a folder with logging.jsonl or args.json, or a *.log capture")
    jobs = args.jobs or os.cpu_count() or 1
    bar = None if args.no_progress or not sys.stderr.isatty() else _bar(len(paths))
    rows = []
    try:
        for row in analyse_runs(paths, jobs=jobs, progress=(bar.advance if bar else None)):
            if _keep(row, filters):
                rows.append(row)
    finally:
        if bar:
            bar.stop()
    if sort_key:
        desc = args.sort.startswith("-") or args.desc
        rows.sort(key=lambda r: (r.get(sort_key) is None, 0 if r.get(sort_key) is None
                                 else _neg(r.get(sort_key)) if desc else r.get(sort_key)))
    _print(rows, args.format)
    if args.fail_on and any(r["category"] in _BAD[args.fail_on] for r in rows):
        return 1
    return 0


def _neg(v: Any) -> Any:
    return -v if isinstance(v, (int, float)) else "".join(chr(0x10FFFF - ord(c)) for c in str(v))


class _Bar:
    def __init__(self, total: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.p = Progress(TextColumn("analysing runs"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                          transient=True, console=__import__("rich.console").console.Console(stderr=True))
        self.task = self.p.add_task("runs", total=total)
        self.p.start()

    def advance(self, done: int) -> None:
        self.p.update(self.task, completed=done)

    def stop(self) -> None:
        self.p.stop()


def _bar(total: int) -> _Bar:
    return _Bar(total)


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


_COLS = [("path", "run"), ("swift_version", "ms-swift"), ("world_size", "ranks"), ("steps", "steps"),
         ("category", "verdict"), ("confidence", "conf."), ("samples_per_s", "samples/s"), ("tokens_per_s", "tokens/s"),
         ("mfu_pct", "MFU %"), ("memory_peak_gib", "mem GiB"), ("culprit_rank", "culprit")]


def _print(rows: list[dict[str, Any]], fmt: str) -> None:
    from diagnose.fleet import ROW_KEYS

    if fmt == "json":
        json.dump({"schema_version": SCHEMA_VERSION, "runs": rows}, sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")
        return
    if fmt == "csv":
        w = csv.DictWriter(sys.stdout, fieldnames=list(ROW_KEYS))
        w.writeheader()
        w.writerows(rows)
        return
    cells = [[_steps(r) if k == "steps" else _fmt(r.get(k)) for k, _ in _COLS] for r in rows]
    if fmt == "markdown":
        print("| " + " | ".join(h for _, h in _COLS) + " |")
        print("|" + "---|" * len(_COLS))
        for c in cells:
            print("| " + " | ".join(x.replace("|", "\\|") for x in c) + " |")
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(show_edge=False)
    for k, h in _COLS:
        t.add_column(h, overflow="fold" if k == "path" else "ellipsis", no_wrap=k != "path")
    for c in cells:
        t.add_row(*c)
    out = Console(highlight=False)
    if not out.is_terminal:  # piped: do not squeeze the table into 80 columns
        out = Console(highlight=False, width=max(out.width, 200))
    out.print(t)
    bad = sum(1 for r in rows if r["category"] not in ("healthy",))
    print(f"{len(rows)} run(s); {bad} with a problem or unreadable")


def _steps(r: dict[str, Any]) -> str:
    if r.get("steps") is None:
        return "-"
    return f"{r['steps']}/{r['max_steps']}" if r.get("max_steps") else str(r["steps"])
