"""`swiftdoc rules [--format text|json]`: list the diagnosis rules."""
from __future__ import annotations

import argparse
import json
import sys

HELP = "list the rules"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=["text", "json"], default="text")
    parser.add_argument("--category", help="only this category (oom, nan, nccl, bus_error, data_loading, memory_bandwidth, "
                                           "config, interrupted, unknown)")


def run(args: argparse.Namespace) -> int:
    from diagnose.errors import UsageError
    from diagnose.rules import load_rules

    every = load_rules()
    cats = sorted({r.category for r in every})
    if args.category and args.category not in cats:
        raise UsageError(f"unknown --category {args.category!r}", hint="categories: " + ", ".join(cats))
    rules = [r for r in every if not args.category or r.category == args.category]
    if args.format == "json":
        json.dump([r.model_dump(mode="json", by_alias=True) for r in rules], sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")
        return 0
    from rich.console import Console
    from rich.table import Table

    t = Table(show_edge=False)
    for col in ("id", "slug", "category", "severity", "summary"):
        t.add_column(col)
    for r in sorted(rules, key=lambda r: (r.category, r.id)):
        t.add_row(r.id, r.slug, r.category, r.severity, r.summary)
    Console(highlight=False).print(t)
    return 0
