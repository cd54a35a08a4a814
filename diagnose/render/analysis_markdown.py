"""Markdown report for `swiftdoc analyze --format markdown`: paste-ready for a GitHub issue.

Contract: `diagnosis_markdown(diag, run) -> str`.
"""
from __future__ import annotations

from diagnose.diagnosis import Diagnosis
from diagnose.models import Run
from diagnose.render.ops_text import op_lines
from diagnose.render.run_text import TRAINER_NAMES


def diagnosis_markdown(diag: Diagnosis, run: Run) -> str:
    p = diag.primary
    out = [f"## swiftdoc: {p.category}" + (f" ({p.rule})" if p.rule else "") + f" · {p.confidence}", "", p.summary, ""]
    if p.missing:
        out += [f"_Not in the text: {p.missing}._", ""]
    t = run.steps
    if run.recognized:
        facts = [f"{TRAINER_NAMES.get(run.trainer, run.trainer)} **{run.swift_version or 'unknown'}**"
                 + (f" ({run.version_clue})" if run.version_clue else "")]
    else:
        facts = [f"trainer: {TRAINER_NAMES.get(run.trainer, run.trainer)}"]
    if len(t):
        last = t.last() or {}
        facts.append(f"{len(t)} logged steps, last step {last.get('step', '?')}" + (f" of {run.max_steps}" if run.max_steps else ""))
    if run.world_size:
        facts.append(f"world size {run.world_size}")
    out += [" · ".join(facts), ""]
    if diag.findings:
        out += ["| severity | rule | confidence | finding | evidence | lines |", "|---|---|---|---|---|---|"]
        for f in diag.findings:
            ev = f.evidence.replace("|", "\\|")
            out.append(f"| {f.severity} | `{f.rule}` {f.slug} | {f.confidence} | {f.summary} | {ev} | "
                       f"{', '.join(map(str, f.lines[:6]))} |")
        out.append("")
        ops: list[str] = []
        seen: set[str] = set()
        for f in diag.findings:
            for r in f.remedies:
                lines = [ln for op in r.ops for ln in op_lines(op)]
                if r.effect == "advice" or not lines or all(ln in seen for ln in lines):
                    continue  # advice is listed below; an op already suggested is not repeated
                seen.update(lines)
                ops.append(f"# {f.rule} [{r.effect}] {r.title}")
                ops += lines
        if ops:
            out += ["### Suggested changes", "", "```diff", *ops, "```", ""]
        adv = [(f.rule, r) for f in diag.findings for r in f.remedies if r.effect == "advice"]
        if adv:
            out += ["### Advice", ""] + [f"- `{rid}` {r.title}" + (f": {r.note}" if r.note else "") for rid, r in adv] + [""]
    out.append(f"<sub>swiftdoc analyze · {run.line_file or ', '.join(run.sources)}</sub>")
    return "\n".join(out) + "\n"
