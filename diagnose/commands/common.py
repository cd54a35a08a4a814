"""Helpers shared by the subcommands: reading inputs into a Run, output formats.

Contract: `read_run(paths)` handles `-` (stdin) and raises `InputError` for
unreadable input (`read_inputs` also returns the stdin bytes; `read_stdin()` reads
stdin bounded, refusing binary data at once); `quoted_lines` reads a report's
decisive lines back from the capture, redacted (`diagnose.redact`);
`add_input_args(parser)` declares the positional inputs and `--max-input`
(`add_max_input_arg`).
"""
from __future__ import annotations

import argparse
import sys

from diagnose.models import Run


def add_input_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("inputs", nargs="+", metavar="PATH",
                        help="log capture(s), logging.jsonl, args.json, an output dir, or - for stdin")
    add_max_input_arg(parser)


def read_run(paths: list[str]) -> Run:
    return read_inputs(paths)[0]


def read_inputs(paths: list[str]) -> tuple[Run, bytes | None]:
    """The run, and the bytes read from stdin (kept so a report can quote its lines)."""
    from diagnose.parse import parse_run

    stdin = read_stdin() if "-" in paths else None
    return parse_run(paths, stdin=stdin), stdin


def read_stdin() -> bytes:
    """Standard input as one capture: binary data (`< /dev/zero`) refused at once, the whole bounded (--max-input)."""
    from diagnose.parse.sources import read_text_stream

    return read_text_stream(sys.stdin.buffer, "<stdin>")


def add_max_input_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-input", metavar="SIZE",
                        help="the most one input may hold (default 2G; e.g. 8G): stdin, a pipe or a file longer is refused")


def quoted_lines(run: Run, diag, stdin: bytes | None, limit: int = 14) -> dict[int, str]:
    """The decisive log lines of the verdict and the top findings, read back from the capture, for a report."""
    from diagnose.parse.sources import read_lines
    from diagnose.redact import redact_text

    nums: list[int] = []
    for f in diag.findings[:3]:
        for n in f.lines:
            if n not in nums:
                nums.append(n)
    nums = sorted(nums[:limit])
    if not nums or not run.line_file:
        return {}
    src = stdin if run.line_file == "<stdin>" else run.line_file
    return {n: redact_text(t) for n, t in read_lines(src, set(nums)).items()} if src is not None else {}
