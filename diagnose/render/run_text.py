"""Readable summary of a Run for `swiftdoc parse` (rich tables, no colour when piped).

Contract: `print_run(run, rows=10, console=None)`.
"""
from __future__ import annotations

import math

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from diagnose.models import Run

_COLS = [("step", "step", "{:.0f}"), ("loss", "loss", "{:.4g}"), ("grad_norm", "grad_norm", "{:.4g}"),
         ("learning_rate", "lr", "{:.3g}"), ("token_acc", "acc", "{:.3g}"), ("memory_gib", "mem GiB", "{:.2f}"),
         ("interval_s", "s/step", "{:.3f}"), ("line", "line", "{:.0f}")]


TRAINER_NAMES = {"ms-swift": "ms-swift", "ms-swift-megatron": "Megatron-SWIFT", "megatron-lm": "Megatron-LM",
                 "llama-factory": "LLaMA-Factory", "trl": "TRL", "hf-trainer": "HF Trainer", "deepspeed": "DeepSpeed",
                 "unknown": "not recognised"}


def _fmt(v: float, f: str, printed: bool = True) -> str:
    """'-' for a value that was never logged; nan/inf as printed (a logged nan is a finding, not a gap)."""
    if not printed or v is None:
        return "-"
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return f.format(v)


def print_run(run: Run, rows: int = 10, console: Console | None = None) -> None:
    c = console or Console(highlight=False)
    if run.recognized:
        c.print(f"[bold]{run.trainer}[/] {run.swift_version or 'unknown version'}"
                + (f"  [dim]({run.version_clue})[/]" if run.version_clue else ""))
    else:
        c.print(f"[bold]trainer:[/] {TRAINER_NAMES.get(run.trainer, run.trainer)} [dim](no ms-swift signature: version unknown)[/]")
    c.print("capture: " + ("whole run (its start is in the text)" if run.header_line is not None
                           else "ended run" if run.ended else "excerpt (neither the start nor the end of the run)"))
    t = run.steps
    ms = run.max_steps
    c.print(f"steps logged: {len(t)}" + (f" of max_steps {ms}" if ms else "") + f"   world_size: {run.world_size or '?'}"
            + (f"   launcher: {run.launch.launcher}" if run.launch.launcher else ""))
    if run.dataset:
        d = run.dataset
        c.print(f"dataset tokens: mean {d.mean:.1f} ± {d.std:.1f}, min {d.min:.0f}, max {d.max:.0f}, size {d.size}")
    if run.model and run.model.params_m:
        m = run.model
        c.print(f"model: {m.cls} {m.params_m:.1f}M params, {m.trainable_m:.3f}M trainable ({m.trainable_pct:.3f}%)")
    if run.events:
        c.print(f"events ({len(run.events)}):")
        for e in run.events[:20]:
            c.print(f"  line {e.line:>6}  [bold]{e.kind}[/]  {escape(e.text[:110])}")
    for n in run.notes[:5]:
        c.print(f"[dim]note: {escape(n)}[/]")
    if len(t):
        tab = Table(title=f"steps (first {min(rows, len(t))} and last)", show_edge=False)
        for _, head, _f in _COLS:
            tab.add_column(head, justify="right")
        idx = list(range(min(rows, len(t))))
        if len(t) > rows:
            idx += [len(t) - 1]
        for i in idx:
            tab.add_row(*[_fmt(float(t[col][i]), f, bool(t.present(col)[i])) for col, _, f in _COLS])
        c.print(tab)
