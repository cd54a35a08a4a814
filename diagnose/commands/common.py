"""Helpers shared by the subcommands: reading inputs into a Run, output formats.

Contract: `read_run(paths)` handles `-` (stdin) and raises `InputError` for
unreadable input; `add_input_args(parser)` declares the positional inputs.
"""
from __future__ import annotations

import argparse
import sys

from diagnose.models import Run


def add_input_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("inputs", nargs="+", metavar="PATH",
                        help="log capture(s), logging.jsonl, args.json, an output dir, or - for stdin")


def read_run(paths: list[str]) -> Run:
    from diagnose.parse import parse_run

    stdin = sys.stdin.buffer.read() if "-" in paths else None
    return parse_run(paths, stdin=stdin)
