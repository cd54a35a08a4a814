"""Text for people: the flag diff, the unified diff of the script, lint problems.

Contract: pure functions from a `PatchPlan` (and file edits) to strings; no
colour, fixed layout (golden files compare them byte for byte).
- `flag_diff(plan) -> str`: one `-`/`+` line per changed token group
  (`- --dataloader_num_workers 0` / `+ --dataloader_num_workers 4`,
  `+ export NCCL_P2P_DISABLE=1`), each followed by `  [label] RULE: title` and
  the note saying what changes in training.
- `unified(old, new, label) -> str`: a unified diff (CRLF kept, `\\ No newline
  at end of file` where due).
- `problems_text(plan, name) -> str`: `name:LINE: severity: message (fix: ...)`.
"""
from __future__ import annotations

import difflib

from diagnose.patch.models import PatchPlan


def flag_diff(plan: PatchPlan) -> str:
    out: list[str] = []
    for c in plan.changes:
        m, p = c.minus(), c.plus()
        if m is not None:
            out.append(f"- {m}")
        if p is not None:
            out.append(f"+ {p}")
        rules = ", ".join(c.rules or [c.rule])
        where = f" (line {c.line}{' of ' + c.file if c.file else ''})" if c.line else ""
        out.append(f"    [{c.effect}] {rules}: {c.title}{where}")
        if c.note:
            out.append(f"    {c.note}")
    return "\n".join(out) + ("\n" if out else "")


def unified(old: str, new: str, label: str) -> str:
    a = old.splitlines(keepends=True)
    b = new.splitlines(keepends=True)
    lines = []
    for ln in difflib.unified_diff(a, b, fromfile=f"a/{label}", tofile=f"b/{label}"):
        if ln.endswith("\n"):
            lines.append(ln)
        else:
            lines.append(ln + "\n\\ No newline at end of file\n")
    return "".join(lines)


def problems_text(plan: PatchPlan, name: str, only_unfixed: bool = False) -> str:
    out = []
    for p in plan.problems:
        if only_unfixed and p.fixed:
            continue
        loc = f"{p.file or name}:{p.line}" if p.line else (p.file or name)
        tail = ""
        if p.fix:
            label = " (changes training)" if p.fix_effect == "changes-training" else ""
            tail = f" [fixed{label}: {p.fix}]" if p.fixed else f" [fix{label}: {p.fix}]"
        out.append(f"{loc}: {p.severity}: {p.message}{tail}")
    return "\n".join(out) + ("\n" if out else "")


def other_sections(plan: PatchPlan) -> str:
    out: list[str] = []
    if plan.dropped:
        out.append("Dropped (conflicting remedies; the higher-ranked finding wins):")
        for d in plan.dropped:
            op = d.op
            from diagnose.patch.plan import fmt_value

            what = f"{op.env}={fmt_value(op.value)}" if op.op == "set_env" else (
                "halve the batch" if op.op == "halve_batch_keep_global" else
                f"{op.op.replace('_', ' ')} --{op.flag}" + ("" if op.value is None else f" {fmt_value(op.value)}"))
            out.append(f"  {d.rule}: {what} ({d.reason})")
    if plan.advice:
        out.append("Advice (not applied):")
        for a in plan.advice:
            out.append(f"  {a.rule}: {a.title}" + (f" - {a.note}" if a.note else ""))
    if plan.unchanged:
        out.append("Already in place:")
        out.extend(f"  {u}" for u in plan.unchanged)
    if plan.assumptions:
        out.append("Assumptions:")
        out.extend(f"  {a}" for a in plan.assumptions)
    return "\n".join(out) + ("\n" if out else "")
