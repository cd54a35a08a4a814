"""Markdown report for `swiftdoc analyze --format markdown`: paste-ready for a GitHub issue.

Contract: `diagnosis_markdown(diag, run, quoted=None, gpu=None) -> str`.  It
carries what ms-swift's bug template asks for: the verdict with its confidence,
the versions and environment the text shows (ms-swift, trainer, python, NCCL,
CUDA, GPU, world size), the launch command (from `run sh:`), every finding with
its evidence, the decisive log lines quoted in a `<details>` block (`quoted`:
line -> text, read back from the capture by the command), the chain of a crash's
causes, suggested flag changes as a real `diff` of the command line, and advice.
"""
from __future__ import annotations

import shlex
from pathlib import Path

from diagnose.diagnosis import Diagnosis
from diagnose.models import Run
from diagnose.parse.prefix import strip_ansi
from diagnose.render.analysis_console import refs_by_file
from diagnose.render.ops_text import op_lines
from diagnose.render.run_text import TRAINER_NAMES


def _environment(run: Run, gpu: str | None) -> list[str]:
    env = run.environment
    rows = []
    if run.recognized:
        rows.append(f"ms-swift {run.swift_version or 'unknown'}" + (f" ({run.version_clue})" if run.version_clue else ""))
    rows.append(f"trainer: {TRAINER_NAMES.get(run.trainer, run.trainer)}")
    for key, label in (("python", "Python"), ("torch", "torch"), ("transformers", "transformers"), ("nccl", "NCCL"),
                       ("cuda", "CUDA"), ("driver", "NVIDIA driver")):
        if env.get(key):
            rows.append(f"{label} {env[key]}")
    gpus = (run.snapshot or {}).get("gpus") or []
    if gpus:
        rows.append(f"GPU: {len(gpus)}× {gpus[0]['name']} ({gpus[0]['mem_total_gib']:.0f} GiB)")
    elif gpu:
        rows.append(f"GPU: {gpu} (given with --gpu)")
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
    out = [f"## swiftdoc: {p.category}" + (f" ({p.rule})" if p.rule else "") + f" · {p.confidence}", "", p.summary, ""]
    if p.missing:
        out += [f"_Not in the text: {p.missing}._", ""]
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
        out += [f"**Culprit:** {cu['summary']}" + (f" ({cu['file']}:{cu['line']})" if cu.get("file") and cu.get("line") else ""),
                ""]
        if diag.consequences:
            out += [f"Then: {len(diag.consequences)} consequence(s): " + "; ".join(
                (f"rank {x['rank']}: " if x.get("rank") is not None else "") + x["kind"] for x in diag.consequences[:6]), ""]
    if diag.ranks:
        out += ["| rank | node | last step | failed at | first error | where |", "|---|---|---|---|---|---|"]
        for r in diag.ranks[:32]:
            err = (r.get("first_error") or "").replace("|", "\\|")[:100]
            where = f"{Path(r['file']).name}:{r['line']}" if r.get("file") and r.get("line") else ""
            out.append(f"| {r['rank']} | {'' if r.get('node') is None else r['node']} | "
                       f"{'' if r.get('last_step') is None else r['last_step']} | {r.get('last_time') or ''} | {err} | {where} |")
        out.append("")
    for st in diag.stragglers:
        who = f"GPU {st['gpu']}" if st.get("gpu") is not None else f"rank {st['rank']}"
        out += [f"**Straggler:** {who} runs {st['slowdown']:.2f}× slower: {st['evidence']}", ""]
    cmd = _command(run)
    if cmd:
        out += ["**Launch command** (from the `run sh:` line):", "", "```bash", cmd, "```", ""]
    if diag.findings:
        out += ["| severity | rule | confidence | finding | evidence | lines |", "|---|---|---|---|---|---|"]
        for f in diag.findings:
            ev = f.evidence.replace("|", "\\|").replace("\n", " ")
            where = "; ".join(f"{Path(src).name}: {', '.join(map(str, nums[:6]))}" for src, nums in refs_by_file(f, run))
            out.append(f"| {f.severity} | `{f.rule}` {f.slug} | {f.confidence} | {f.summary} | {ev} | {where} |")
        out.append("")
    causes = _causes(run)
    if causes:
        out += ["**The crash, link by link** (root cause first):", ""]
        out += [f"{i}. line {c['line']}: `{c['text']}`" for i, c in enumerate(causes, 1)] + [""]
    if quoted:
        src = run.line_file or "the log"
        out += ["<details><summary>Decisive log lines (" + src + ")</summary>", "", "```text"]
        prev = None
        for n in sorted(quoted):
            if prev is not None and n > prev + 1:
                out.append("...")
            out.append(f"{n:>6}: {strip_ansi(quoted[n])}")
            prev = n
        out += ["```", "", "</details>", ""]
    _remedies(diag, out)
    out.append(f"<sub>swiftdoc analyze · {run.line_file or ', '.join(run.sources)}</sub>")
    return "\n".join(out) + "\n"


def _causes(run: Run) -> list[dict]:
    tbs = [e for e in run.events if e.kind == "traceback"]
    if not tbs or not tbs[-1].detail.get("causes"):
        return []
    last = tbs[-1]
    return list(last.detail["causes"]) + [{"line": last.line, "text": last.text}]


def _remedies(diag: Diagnosis, out: list[str]) -> None:
    minus: list[str] = []
    plus: list[str] = []
    notes: list[str] = []
    seen: set[str] = set()
    for f in diag.findings:
        for r in f.remedies:
            lines = [ln for op in r.ops for ln in op_lines(op)]
            if r.effect == "advice" or not lines or all(ln in seen for ln in lines):
                continue  # advice is listed below; an op already suggested is not repeated
            seen.update(lines)
            for ln in lines:
                if ln.startswith("-"):
                    minus.append(ln)
                elif ln.startswith("+"):
                    plus.append(ln)
                else:  # a relative change (÷2, at least ...): said in words, not as a diff line
                    notes.append(f"- `{f.rule}` {r.title}: {ln.strip()}")
            notes.append(f"- `{f.rule}` [{r.effect}] {r.title}" + (f": {r.note}" if r.note else ""))
    if minus or plus:
        out += ["### Suggested changes", "", "```diff", *minus, *plus, "```", ""]
    if notes:
        out += ([] if (minus or plus) else ["### Suggested changes", ""]) + notes + [""]
    adv = [(f.rule, r) for f in diag.findings for r in f.remedies if r.effect == "advice"]
    if adv:
        out += ["### Advice", ""] + [f"- `{rid}` {r.title}" + (f": {r.note}" if r.note else "") for rid, r in adv] + [""]
