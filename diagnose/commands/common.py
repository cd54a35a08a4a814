"""Helpers shared by the subcommands: reading inputs into a Run, output formats.

Contract: `read_run(paths)` handles `-` (stdin) and raises `InputError` for
unreadable input (`read_inputs` also returns the stdin bytes); `quoted_lines`
reads a report's decisive lines back from the capture; `add_input_args(parser)`
declares the positional inputs.
"""
from __future__ import annotations

import argparse
import sys

from diagnose.models import Run


def add_input_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("inputs", nargs="+", metavar="PATH",
                        help="log capture(s), logging.jsonl, args.json, an output dir, or - for stdin")


def read_run(paths: list[str]) -> Run:
    return read_inputs(paths)[0]


def read_inputs(paths: list[str]) -> tuple[Run, bytes | None]:
    """The run, and the bytes read from stdin (kept so a report can quote its lines)."""
    from diagnose.parse import parse_run

    stdin = sys.stdin.buffer.read() if "-" in paths else None
    return parse_run(paths, stdin=stdin), stdin


def quoted_lines(run: Run, diag, stdin: bytes | None, limit: int = 14) -> dict[int, str]:
    """The decisive log lines of the verdict and the top findings, read back from the capture, for a report."""
    from diagnose.parse.sources import read_lines

    nums: list[int] = []
    for f in diag.findings[:3]:
        for n in f.lines:
            if n not in nums:
                nums.append(n)
    nums = sorted(nums[:limit])
    if not nums or not run.line_file:
        return {}
    src = stdin if run.line_file == "<stdin>" else run.line_file
    return read_lines(src, set(nums)) if src is not None else {}
