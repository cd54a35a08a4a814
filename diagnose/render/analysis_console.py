"""Rich terminal report for `swiftdoc analyze`: verdict first, evidence, remedies as a flag-diff preview.

Contract: `print_diagnosis(diag, run, console, verbose=False)`; no colour when the
console is not a terminal (golden tests render at a fixed width without colour).
"""
from __future__ import annotations

from rich.console import Console
from rich.panel import Panel
from rich.text import Text

from diagnose.diagnosis import Diagnosis
from diagnose.models import Run
from diagnose.render.ops_text import op_lines, remedy_heading
from diagnose.render.run_text import TRAINER_NAMES

_STYLE = {"error": "bold red", "warning": "bold yellow", "info": "cyan"}
_EFFECT = {"safe": "green", "changes-training": "yellow", "advice": "dim"}


def _run_line(run: Run) -> str:
    if run.recognized and run.trainer in ("ms-swift", "ms-swift-megatron"):
        from diagnose.parse.versions import version_words

        parts = [version_words(run.swift_version, run.version_clue, short=True).replace("ms-swift", TRAINER_NAMES.get(run.trainer, run.trainer), 1)]
    elif run.recognized:
        parts = [f"{TRAINER_NAMES.get(run.trainer, run.trainer)} {run.swift_version or '?'}"]
    elif run.trainer == "unknown" and run.step_dialect:
        parts = [f"steps read from {run.step_dialect}"]
    else:
        parts = [TRAINER_NAMES.get(run.trainer, run.trainer) if run.trainer != "unknown" else "trainer not recognised"]
    if run.header_line is None and not run.ended:
        parts.append("excerpt")
    t = run.steps
    if len(t):
        last = t.last() or {}
        parts.append(f"{len(t)} steps logged (last step {last.get('step', '?')}" + (f"/{run.max_steps})" if run.max_steps else ")"))
    if run.world_size:
        parts.append(f"world_size {run.world_size}")
    if run.line_file:
        parts.append(run.line_file)
    return " · ".join(parts)


def refs_by_file(f, run: Run) -> list[tuple[str, list[int]]]:
    """A finding's evidence lines grouped by the capture they are in (the main capture first)."""
    by: dict[str, list[int]] = {}
    for r in f.refs or [{"file": run.line_file, "line": ln} for ln in f.lines]:
        by.setdefault(r["file"] or run.line_file or "log", []).append(r["line"])
    return sorted(by.items(), key=lambda kv: kv[0] != run.line_file)


def print_diagnosis(diag: Diagnosis, run: Run, console: Console | None = None, verbose: bool = False) -> None:
    c = console or Console(highlight=False)
    p = diag.primary
    style = "bold green" if p.category == "healthy" else _STYLE.get(p.severity, "bold")
    head = Text()
    head.append(f"{p.category.upper()}", style=style)
    head.append(f"  {p.confidence}", style="bold" if p.confidence == "certain" else "italic")
    if p.rule:
        head.append(f"  [{p.rule}]", style="dim")
    head.append(f"\n{p.summary}")
    if p.missing:
        head.append(f"\nnot in the text: {p.missing}", style="dim")
    c.print(Panel(head, title="swiftdoc", subtitle=Text(_run_line(run)), expand=True))  # a path is text, not markup
    if diag.culprit:
        cu = diag.culprit
        where = f"  ({cu['file']}:{cu['line']})" if cu.get("file") and cu.get("line") else ""
        c.print(Text.assemble(("culprit ", "bold"), (cu["summary"], ""), (where, "dim")))
        if diag.consequences:
            ranks = sorted({x["rank"] for x in diag.consequences if x.get("rank") is not None})
            what = "; ".join(dict.fromkeys(x["kind"].split(":")[0] for x in diag.consequences))
            c.print(Text(f"  then: {len(diag.consequences)} consequence(s)"
                         + (f" on rank(s) {', '.join(map(str, ranks[:12]))}" if ranks else "") + f" ({what})", style="dim"))
        for r in diag.ranks[:8] if verbose else []:
            c.print(Text(f"  rank {r['rank']}" + (f" node {r['node']}" if r.get("node") is not None else "")
                         + (f", last step {r['last_step']}" if r.get("last_step") is not None else "")
                         + f": {(r.get('first_error') or 'no error')[:90]}", style="dim"))
        c.print()
    for st in diag.stragglers:
        who = f"GPU {st['gpu']}" if st.get("gpu") is not None else f"rank {st['rank']}"
        c.print(Text.assemble(("straggler ", "bold"), (f"{who} runs {st['slowdown']:.2f}× slower: {st['evidence']}", "")))
    from diagnose.features.probe_stats import summary_of

    if (probe := summary_of(run)) is not None:  # swiftdoc probe files, or a saved record's (render.probe_text)
        from diagnose.render.probe_text import probe_lines

        for i, ln in enumerate(probe_lines(probe, verbose)):
            c.print(Text(ln, style="" if i == 0 else "dim"))
        c.print()
    shown = [f for f in diag.findings if verbose or f.severity != "info" or p.category == "healthy"]
    for f in shown:
        c.print(Text.assemble((f"{f.severity:<7} ", _STYLE.get(f.severity, "")), (f"{f.rule} ", "bold"),
                              (f"{f.slug}", "dim"), ("" if f.confidence == "certain" else f"  ({f.confidence})", "italic")))
        c.print(f"  {f.summary}")
        c.print(Text("  evidence: ", style="dim") + Text(f.evidence))
        for src, nums in refs_by_file(f, run):
            c.print(Text(f"  lines: {', '.join(str(x) for x in nums[:8])}" + (" …" if len(nums) > 8 else "")
                         + f"  ({src})", style="dim"))
        for r in f.remedies:
            head = remedy_heading(r)
            done = r.status == "already"
            c.print(Text.assemble(("  → ", ""), (f"[{r.effect}] ", "dim" if done else _EFFECT.get(r.effect, "")),
                                  (r.title, "dim" if done else ""), (f"  ({head})" if head else "", "italic")))
            for op in r.ops:
                for ln in op_lines(op):
                    c.print(Text(f"      {ln}", style="green" if ln.startswith("+") else "red" if ln.startswith("-")
                                 else "dim" if ln.startswith(("=", "?")) else ""))
            if r.note and not done:
                c.print(Text(f"      {r.note}", style="dim"))
        c.print()
    hidden = len(diag.findings) - len(shown)
    if hidden:
        c.print(Text(f"{hidden} informational finding(s) hidden; -v shows them.", style="dim"))
    if diag.dropped:
        for d in diag.dropped:
            c.print(Text(f"dropped from {d.rule}: {' '.join(op_lines(d.op))} ({d.reason})", style="dim"))
    if diag.skipped and verbose:
        c.print(Text("skipped (missing input): " + "; ".join(f"{s.rule} needs {', '.join(s.missing)}" for s in diag.skipped), style="dim"))
    elif diag.skipped:
        c.print(Text(f"{len(diag.skipped)} rule(s) skipped for missing input (GPU samples, host facts...); -v lists them.", style="dim"))
    for n in diag.notes[:5]:
        c.print(Text(f"note: {n}", style="dim"))
