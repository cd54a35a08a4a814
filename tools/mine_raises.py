#!/usr/bin/env python3
"""Mine a package's `raise` statements and say what swiftdoc's exception table makes of each.

Contract
--------
`python tools/mine_raises.py DIR [DIR ...] [--unexplained] [--summary]` reads every `*.py` under each DIR with
`ast` (nothing is imported or run), finds each `raise Name("message")` / `raise Name(f"...")` /
`raise mod.Name("...")` whose first argument is a string literal or an f-string (the f-string's fields become
`X`), and classifies it with `diagnose.parse.exceptions.classify` as the exception a traceback would show: its
class, that message, the raising module (the file's path under DIR, put under a `site-packages/` prefix so the
table's module regexes see what a user's traceback shows) and the raising function.

One line per raise, sorted: `CATEGORY:CONFIDENCE:ENTRY | Class | path | message` (`NONE` when no entry, no module
fallback, no shape and no lean explains it). `--unexplained` prints only the NONE lines, `--summary` only the
counts per category and confidence. It is a maintainer's tool for growing `parse/exceptions.yaml` from a
framework's own sources (download a wheel with `pip download --no-deps PKG==X` and unzip it); an entry added from
its output still cites the raise it reads and carries its own cases.
Exit status: 0, or 2 when a DIR does not exist.
"""
from __future__ import annotations

import argparse
import ast
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from diagnose.parse.exceptions import TypedException, classify  # noqa: E402


def _message(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "X"
                       for v in node.values)
    return None


def raises(path: Path) -> list[tuple[str, str, str]]:
    """(class, message, raising function) for each raise with a literal message in one file."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (SyntaxError, ValueError):
        return []
    owner: dict[int, str] = {}
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for sub in ast.walk(fn):
                if isinstance(sub, ast.Raise):
                    owner[id(sub)] = fn.name  # the innermost function wins: ast.walk visits outer ones first
    out = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args):
            continue
        func = node.exc.func
        cls = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        msg = _message(node.exc.args[0])
        if cls and msg is not None:
            out.append((cls, msg, owner.get(id(node), "<module>")))
    return out


def mine(root: Path) -> list[tuple[str, str, str, str]]:
    rows = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root.parent).as_posix()
        for cls, msg, func in raises(p):
            exc = TypedException(cls, msg, f"/usr/lib/python3/site-packages/{rel}", func)
            got = classify(exc)
            tag = f"{got[0].category}:{got[0].confidence}:{got[0].id}" if got else "NONE"
            rows.append((tag, cls, rel, " ".join(msg.split())[:160]))
    return sorted(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", type=Path, help="package folders to read (e.g. an unzipped wheel's swift/)")
    ap.add_argument("--unexplained", action="store_true", help="only the raises no entry explains")
    ap.add_argument("--summary", action="store_true", help="only the counts per category and confidence")
    a = ap.parse_args(argv)
    rows = []
    for d in a.dirs:
        if not d.is_dir():
            print(f"mine_raises: {d}: not a folder", file=sys.stderr)
            return 2
        rows += mine(d)
    if a.summary:
        counts = Counter(":".join(r[0].split(":")[:2]) for r in rows)
        for k, n in counts.most_common():
            print(f"{n:6d}  {k}")
        return 0
    for r in rows:
        if not a.unexplained or r[0] == "NONE":
            print(" | ".join(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
