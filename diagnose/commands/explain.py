"""`swiftdoc explain ID|SLUG`: what a rule checks, why, its thresholds and remedies."""
from __future__ import annotations

import argparse

from diagnose.errors import UsageError

HELP = "explain one rule"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("rule", help="rule id (OOM001) or slug (oom.cuda)")


def render_rule(r) -> str:
    from diagnose.engine import RemedyOp
    from diagnose.render.ops_text import op_lines

    out = [f"{r.id}  {r.slug}", f"category: {r.category}   severity: {r.severity}", "", r.summary, ""]
    if r.description:
        out += [r.description.strip(), ""]
    out.append("fires when: " + describe(r.when))
    if r.requires:
        out.append("needs: " + ", ".join(r.requires) + " (skipped when missing)")
    if r.params:
        out.append("parameters (override with --param " + r.id + ".NAME=VALUE): "
                   + ", ".join(f"{k}={v}" for k, v in r.params.items()))
    out.append("evidence: " + r.evidence)
    if r.remedies:
        out += ["", "remedies:"]
        for rem in r.remedies:
            out.append(f"  [{rem.effect}] {rem.title}")
            for op in rem.ops:
                val = op.value if op.value_from is None else f"<{op.value_from}>"
                for ln in op_lines(RemedyOp(op=op.op, flag=op.flag, env=op.env, value=val)):
                    out.append(f"      {ln}")
            if rem.note:
                out.append(f"      {rem.note}")
    if r.references:
        out += ["", "references:"] + [f"  - {x}" for x in r.references]
    from diagnose.rules import default_rules_dir

    out.append(f"\n(rule file: {default_rules_dir() / r.source})")
    return "\n".join(out)


def describe(g) -> str:
    from diagnose.rules import Cond

    if isinstance(g, Cond):
        if g.op in ("true", "false", "present", "absent"):
            return f"{g.feature} is {g.op}"
        sym = {"lt": "<", "le": "≤", "gt": ">", "ge": "≥", "eq": "=", "ne": "≠", "in": "in", "not_in": "not in"}[g.op]
        return f"{g.feature} {sym} {g.value}"
    parts = []
    if g.all:
        parts.append(" and ".join(_wrap(describe(x)) for x in g.all))
    if g.any:
        parts.append("(" + " or ".join(_wrap(describe(x)) for x in g.any) + ")")
    if g.not_ is not None:
        parts.append("not " + _wrap(describe(g.not_)))
    return " and ".join(p for p in parts if p) or "always"


def _wrap(s: str) -> str:
    return f"({s})" if " and " in s and not s.startswith("(") else s


def run(args: argparse.Namespace) -> int:
    from diagnose.rules import load_rules

    rules = load_rules()
    hit = [r for r in rules if args.rule in (r.id, r.slug) or args.rule.upper() == r.id]
    if not hit:
        raise UsageError(f"no rule '{args.rule}'", hint="see `swiftdoc rules`")
    print(render_rule(hit[0]))
    return 0
