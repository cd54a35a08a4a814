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

    rows = sorted(rules, key=lambda r: (r.category, r.id))
    con = Console(highlight=False)
    widths = [max([len(h)] + [len(getattr(r, k)) for r in rows]) for k, h in
              (("id", "id"), ("slug", "slug"), ("category", "category"), ("severity", "severity"))]
    if con.width - (sum(widths) + 4 * 3) < 24:  # too narrow for a summary column: ids and slugs are never cut
        for r in rows:
            con.print(f"{r.id:<{widths[0]}}  {r.slug}  ({r.category}, {r.severity})", soft_wrap=True)
            con.print(f"    {r.summary}", soft_wrap=False)
        return 0
    t = Table(show_edge=False)
    for col, w in zip(("id", "slug", "category", "severity"), widths):
        t.add_column(col, no_wrap=True, min_width=w)  # the names --select takes are never cut
    t.add_column("summary", overflow="fold")
    for r in rows:
        t.add_row(r.id, r.slug, r.category, r.severity, r.summary)
    con.print(t)
    return 0
