"""`swiftdoc parse PATH... [--format text|json]`: what swiftdoc read from the logs.

Exit codes: 0 parsed (also for readable text that is not an ms-swift log, which
is said plainly), 2 unreadable input.
"""
from __future__ import annotations

import argparse
import json
import sys

from diagnose.commands.common import add_input_args, read_run

HELP = "show what swiftdoc read from a log"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_input_args(parser)
    parser.add_argument("--format", choices=["text", "json"], default="text")
    parser.add_argument("--rows", type=int, default=10, help="steps table rows to show (text format)")


def run(args: argparse.Namespace) -> int:
    from diagnose.parse.bounded import set_max_input
    from diagnose.redact import redact
    from diagnose.render.run_json import run_summary

    set_max_input(args.max_input)

    r = redact(read_run(args.inputs))  # a report to share: no tokens, keys or passwords
    if args.format == "json":
        json.dump(run_summary(r), sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")
        return 0
    from diagnose.render.run_text import print_run

    print_run(r, rows=args.rows)
    return 0
