"""Markdown report for `swiftdoc analyze --format markdown`: paste-ready for a GitHub issue.

Contract: `diagnosis_markdown(diag, run, quoted=None, gpu=None) -> str`.  It
carries what ms-swift's bug template asks for: the verdict with its confidence,
the versions and environment the text shows (ms-swift, trainer, python, NCCL,
CUDA, GPU, world size), the launch command (from `run sh:`), every finding with
its evidence, the decisive log lines quoted in a `<details>` block (`quoted`:
line -> text, read back from the capture by the command), the chain of a crash's
causes, suggested flag changes as a real `diff` of the command line (only changes to
this run: what is already in place and what depends on a value the text does not show
are listed apart), and advice.  Every user string (paths, `<stdin>`, log text,
exceptions) goes through `diagnose.render.md`: escaped in text and tables, fenced in
code, control sequences removed.
"""
from __future__ import annotations

import shlex
from pathlib import Path

from diagnose.diagnosis import Diagnosis
from diagnose.models import Run
from diagnose.parse.prefix import strip_ansi
from diagnose.render.analysis_console import refs_by_file
from diagnose.render.md import html_text, md_code, md_fence, md_text
from diagnose.render.ops_text import op_lines, remedy_heading
from diagnose.render.run_text import TRAINER_NAMES


def _environment(run: Run, gpu: str | None) -> list[str]:
    env = run.environment
    rows = []
    if run.recognized:
        from diagnose.parse.versions import version_words

        rows.append(md_text(version_words(run.swift_version, run.version_clue)))
    rows.append(f"trainer: {TRAINER_NAMES.get(run.trainer, run.trainer)}")
    for key, label in (("python", "Python"), ("torch", "torch"), ("transformers", "transformers"), ("nccl", "NCCL"),
                       ("cuda", "CUDA"), ("driver", "NVIDIA driver")):
        if env.get(key):
            rows.append(f"{label} {md_text(env[key])}")
    gpus = (run.snapshot or {}).get("gpus") or []
    if gpus:
        rows.append(f"GPU: {len(gpus)}× {md_text(gpus[0]['name'])} ({gpus[0]['mem_total_gib']:.0f} GiB)")
    elif gpu:
        rows.append(f"GPU: {md_text(gpu)} (given with --gpu)")
    if run.world_size:
        rows.append(f"world size {run.world_size}")
    if run.launch.launcher == "torchrun":
        rows.append(f"torchrun, {run.launch.nproc_per_node or '?'} process(es) per node × {run.launch.nnodes or 1} node(s)")
    return rows


def _command(run: Run) -> str | None:
    argv = run.launch.argv
    if not argv:
        return None
    head = "megatron" if (run.launch.command or "").startswith("megatron") else "swift"
    sub = (run.launch.command or "sft").replace("megatron ", "")
    return f"{head} {sub} " + " ".join(shlex.quote(a) for a in argv)


def diagnosis_markdown(diag: Diagnosis, run: Run, quoted: dict[int, str] | None = None, gpu: str | None = None) -> str:
    p = diag.primary
    out = [f"## swiftdoc: {p.category}" + (f" ({p.rule})" if p.rule else "") + f" · {p.confidence}", "",
           md_text(p.summary), ""]
    if p.missing:
        out += [f"_Not in the text: {md_text(p.missing)}._", ""]
    t = run.steps
    facts = _environment(run, gpu)
    if len(t):
        last = t.last() or {}
        facts.append(f"{len(t)} logged steps, last step {last.get('step', '?')}" + (f" of {run.max_steps}" if run.max_steps else ""))
    if run.header_line is None and not run.ended:
        facts.append("an excerpt (neither the start nor the end of the run)")
    out += ["**Environment:** " + " · ".join(facts), ""]
    if diag.culprit:
        cu = diag.culprit
        out += [f"**Culprit:** {md_text(cu['summary'])}"
                + (f" ({md_text(cu['file'])}:{cu['line']})" if cu.get("file") and cu.get("line") else ""), ""]
        if diag.consequences:
            out += [f"Then: {len(diag.consequences)} consequence(s): " + "; ".join(
                (f"rank {x['rank']}: " if x.get("rank") is not None else "") + md_text(x["kind"])
                for x in diag.consequences[:6]), ""]
    if diag.ranks:
        out += ["| rank | node | last step | failed at | first error | where |", "|---|---|---|---|---|---|"]
        for r in diag.ranks[:32]:
            err = md_text((r.get("first_error") or "")[:100])
            where = md_text(f"{Path(r['file']).name}:{r['line']}") if r.get("file") and r.get("line") else ""
            out.append(f"| {r['rank']} | {'' if r.get('node') is None else r['node']} | "
                       f"{'' if r.get('last_step') is None else r['last_step']} | {md_text(r.get('last_time') or '')} | "
                       f"{err} | {where} |")
        out.append("")
    for st in diag.stragglers:
        who = f"GPU {st['gpu']}" if st.get("gpu") is not None else f"rank {st['rank']}"
        out += [f"**Straggler:** {who} runs {st['slowdown']:.2f}× slower: {md_text(st['evidence'])}", ""]
    from diagnose.features.probe_stats import summary_of

    if (probe := summary_of(run)) is not None:  # swiftdoc probe files, or a saved record's (render.probe_text)
        from diagnose.render.probe_text import probe_markdown

        out += probe_markdown(probe)
    cmd = _command(run)
    if cmd:
        out += ["**Launch command** (from the `run sh:` line):", "", *md_fence([cmd], "bash"), ""]
    if diag.findings:
        out += ["| severity | rule | confidence | finding | evidence | lines |", "|---|---|---|---|---|---|"]
        for f in diag.findings:
            where = "; ".join(f"{md_text(Path(src).name)}: {', '.join(map(str, nums[:6]))}"
                              for src, nums in refs_by_file(f, run))
            out.append(f"| {f.severity} | `{f.rule}` {md_text(f.slug)} | {f.confidence} | {md_text(f.summary)} | "
                       f"{md_text(f.evidence)} | {where} |")
        out.append("")
    causes = _causes(run)
    if causes:
        out += ["**The crash, link by link** (root cause first):", ""]
        out += [f"{i}. line {c['line']}: {md_code(c['text'])}" for i, c in enumerate(causes, 1)] + [""]
    if quoted:
        src = run.line_file or "the log"
        body: list[str] = []
        prev = None
        for n in sorted(quoted):
            if prev is not None and n > prev + 1:
                body.append("...")
            body.append(f"{n:>6}: {strip_ansi(quoted[n])}")
            prev = n
        out += ["<details><summary>Decisive log lines (" + html_text(src) + ")</summary>", "", *md_fence(body, "text"),
                "", "</details>", ""]
    _remedies(diag, out)
    out.append(f"<sub>swiftdoc analyze · {html_text(run.line_file or ', '.join(run.sources))}</sub>")
    return "\n".join(out) + "\n"


def _causes(run: Run) -> list[dict]:
    tbs = [e for e in run.events if e.kind == "traceback"]
    if not tbs or not tbs[-1].detail.get("causes"):
        return []
    last = tbs[-1]
    return list(last.detail["causes"]) + [{"line": last.line, "text": last.text}]


def _remedies(diag: Diagnosis, out: list[str]) -> None:
    """Changes to this run as a diff; what is already in place and what depends on an unseen value, apart."""
    minus: list[str] = []
    plus: list[str] = []
    notes: list[str] = []
    already: list[str] = []
    conditional: list[str] = []
    seen: set[str] = set()
    for f in diag.findings:
        for r in f.remedies:
            lines = [ln for op in r.ops for ln in op_lines(op)]
            if r.effect == "advice" or not lines or all(ln in seen for ln in lines):
                continue  # advice is listed below; an op already suggested is not repeated
            seen.update(lines)
            rid = md_code(f.rule)
            if r.status == "already":
                already.append(f"- {rid} {md_text(r.title)}: " + "; ".join(md_text(ln[1:].strip()) for ln in lines))
                continue
            if r.status == "conditional" or all(ln.startswith("?") for ln in lines):
                head = remedy_heading(r)
                conditional.append(f"- {rid} [{r.effect}] {md_text(r.title)}" + (f" ({md_text(head)})" if head else "")
                                   + ": " + "; ".join(md_text(ln.lstrip("?+~ ").strip()) for ln in lines))
                continue
            for ln in lines:
                if ln.startswith("- "):
                    minus.append(ln)
                elif ln.startswith("+ "):
                    plus.append(ln.split("  (", 1)[0])  # the diff line alone; why, in the note below
                elif ln.startswith("= "):
                    already.append(f"- {rid} {md_text(ln[2:])}")
                elif ln.startswith("? "):
                    conditional.append(f"- {rid} {md_text(ln[2:])}")
                else:  # a relative change (the batch arithmetic): said in words, not as a diff line
                    notes.append(f"- {rid} {md_text(r.title)}: {md_text(ln.lstrip('~ ').strip())}")
            why = "; ".join(ln.split("  (", 1)[1].rstrip(")") for ln in lines if ln.startswith("+ ") and "  (" in ln)
            notes.append(f"- {rid} [{r.effect}] {md_text(r.title)}" + (f" ({md_text(why)})" if why else "")
                         + (f": {md_text(r.note)}" if r.note else ""))
    if minus or plus:
        out += ["### Suggested changes", "", *md_fence([*minus, *plus], "diff"), ""]
    if notes:
        out += ([] if (minus or plus) else ["### Suggested changes", ""]) + notes + [""]
    if conditional:
        out += ["### Depends on values the text does not show", ""] + conditional + [""]
    if already:
        out += ["### Already in place", ""] + already + [""]
    adv = [(f.rule, r) for f in diag.findings for r in f.remedies if r.effect == "advice"]
    if adv:
        lines_out = []
        for rid, r in adv:
            head = remedy_heading(r)
            ops = "; ".join(md_text(ln.lstrip("+=?~ ")) for op in r.ops for ln in op_lines(op))
            lines_out.append(f"- {md_code(rid)} {md_text(r.title)}" + (f" ({md_text(head)})" if head else "")
                             + (f": {md_text(r.note)}" if r.note else "") + (f" ({ops})" if ops else ""))
        out += ["### Advice", ""] + lines_out + [""]
