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
    from diagnose.commands.common import add_max_input_arg

    add_max_input_arg(parser)


def column_key(name: str) -> str | None:
    """A column as the user names it: a JSON key (samples_per_s) or the table's header (samples/s, verdict, conf.)."""
    from diagnose.fleet import ROW_KEYS

    n = name.strip()
    if n in ROW_KEYS:
        return n
    low = n.lower()
    for key, head in _COLS:
        if low == head.lower() or low == head.lower().rstrip(".") or low == head.lower().replace(" ", "_"):
            return key
    return _ALIASES.get(low)


def _known_columns() -> str:
    from diagnose.fleet import ROW_KEYS

    heads = [h for _, h in _COLS if h not in ROW_KEYS]
    return ", ".join(ROW_KEYS) + " (or the table's headers: " + ", ".join(heads) + ")"


def _filters(specs: list[str]) -> list[tuple[str, bool, str]]:
    from diagnose.errors import UsageError

    out = []
    for s in specs:
        neg = "!=" in s
        name, _, val = s.partition("!=" if neg else "=")
        key = column_key(name) if _ else None
        if key is None:
            raise UsageError(f"--where {s!r}: expected COLUMN=VALUE with a known column", hint="columns: " + _known_columns())
        out.append((key, neg, val))
    return out


def _keep(row: dict[str, Any], filters: list[tuple[str, bool, str]]) -> bool:
    for key, neg, val in filters:
        if (str(row.get(key)) == val) == neg:
            return False
    return True


def run(args: argparse.Namespace) -> int:
    from diagnose.errors import InputError, UsageError
    from diagnose.fleet import analyse_runs, find_runs, group_jobs
    from diagnose.parse.bounded import set_max_input

    set_max_input(args.max_input)  # the workers inherit it

    sort_name = (args.sort or "").lstrip("-")
    sort_key = column_key(sort_name) if sort_name else ""
    if sort_name and sort_key is None:
        raise UsageError(f"unknown --sort column {sort_name!r}", hint="columns: " + _known_columns())
    filters = _filters(args.where)
    skipped: list = []
    unreadable: list = []
    paths = group_jobs(find_runs(args.roots, skipped, unreadable))
    for path, why in unreadable[:20]:
        sys.stderr.write(f"note: {_printable(str(path))}: {why}; not read\n")
    if len(unreadable) > 20:
        sys.stderr.write(f"note: {len(unreadable) - 20} more entries not read\n")
    if skipped:
        names = ", ".join(str(p) for p in skipped[:5]) + (f" and {len(skipped) - 5} more" if len(skipped) > 5 else "")
        sys.stderr.write(f"note: {len(skipped)} file(s) hold no training output and are not runs: {names}\n")
    if not paths:
        raise InputError("no runs found under " + ", ".join(args.roots),
                         hint="a run is a folder with logging.jsonl or args.json, a saved record, or a capture "
                              "(*.log, *.out, *.txt) with training output")
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
    _print(rows, args.format, skipped)
    if args.fail_on and any(r["category"] in _BAD[args.fail_on] for r in rows):
        return 1
    return 0


def _printable(s: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in s)


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


_COLS = [("path", "run"), ("swift_version", "ms-swift"), ("model", "model"), ("world_size", "ranks"), ("steps", "steps"),
         ("category", "verdict"), ("confidence", "conf."), ("samples_per_s", "samples/s"), ("tokens_per_s", "tokens/s"),
         ("mfu_pct", "MFU %"), ("memory_peak_gib", "mem GiB"), ("culprit_rank", "culprit"),
         ("data_wait_share", "data wait"), ("straggler_rank", "straggler")]
_PROBE_KEYS = ("data_wait_share", "straggler_rank")
_ALIASES = {"mfu": "mfu_pct", "mem": "memory_peak_gib", "memory": "memory_peak_gib", "version": "swift_version",
            "conf": "confidence", "culprit": "culprit_rank", "run": "path"}


def _csv_cell(v: Any) -> Any:
    """A cell a spreadsheet shows as text: one starting with = + - @ (or a tab/CR) would be a live formula."""
    if isinstance(v, str) and v[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + v
    return v


def _print(rows: list[dict[str, Any]], fmt: str, skipped: list | None = None) -> None:
    from diagnose.fleet import ROW_KEYS
    from diagnose.redact import redact

    rows = [redact(r) for r in rows]  # a table to share: no tokens, keys or passwords
    if fmt == "json":
        json.dump({"schema_version": SCHEMA_VERSION, "runs": rows, "skipped": [redact(str(p)) for p in skipped or []]},
                  sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")
        return
    if fmt == "csv":
        w = csv.DictWriter(sys.stdout, fieldnames=list(ROW_KEYS))
        w.writeheader()
        w.writerows({k: _csv_cell(v) for k, v in r.items()} for r in rows)
        return
    # the probe's columns only when some run has the probe's files: a table without them keeps its width
    cols = [(k, h) for k, h in _COLS if k not in _PROBE_KEYS or any(r.get(k) is not None for r in rows)]
    cells = [[_steps(r) if k == "steps" else _fmt(r.get(k)) for k, _ in cols] for r in rows]
    if fmt == "markdown":
        print("| " + " | ".join(h for _, h in cols) + " |")
        print("|" + "---|" * len(cols))
        from diagnose.render.md import md_text

        for c in cells:
            print("| " + " | ".join(md_text(x) for x in c) + " |")
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    t = Table(show_edge=False)
    for k, h in cols:
        t.add_column(h, overflow="fold" if k == "path" else "ellipsis", no_wrap=k != "path")
    for c in cells:
        t.add_row(*(Text(x) for x in c))  # a path such as run[/b] or sweep[lr=1e-4] is text, not markup
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
