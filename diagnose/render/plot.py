"""`--plot FILE.png`: timeline of interval step time, memory, grad_norm and loss with findings marked.

Contract: `plot_timeline(run, diag, path)`; imports matplotlib (Agg) only here and
raises EnvironmentMissing with an install hint when it is absent.
"""
from __future__ import annotations

import numpy as np

from diagnose.diagnosis import Diagnosis
from diagnose.errors import EnvironmentMissing
from diagnose.models import Run


def _step_at_line(run: Run, line: int) -> float | None:
    t = run.steps
    if not len(t):
        return None
    i = int(np.searchsorted(t["line"], line, side="right")) - 1
    if i < 0:
        return float(t["step"][0])
    return float(t["step"][min(i, len(t) - 1)])


def plot_timeline(run: Run, diag: Diagnosis, path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise EnvironmentMissing("--plot needs matplotlib", hint="pip install matplotlib (or pip install -e '.[plot]')") from None
    t = run.steps
    panels = [("interval_s", "s / step (interval)"), ("memory_gib", "memory (GiB, reserved)"),
              ("grad_norm", "grad_norm"), ("loss", "loss")]
    panels = [(c, lab) for c, lab in panels if len(t) and t.has(c)]
    n = max(1, len(panels))
    fig, axes = plt.subplots(n, 1, figsize=(10, 2.2 * n + 0.8), sharex=True, squeeze=False)
    x = t["step"] if len(t) else np.zeros(0)
    for ax, (col, lab) in zip(axes[:, 0], panels):
        y = t[col].copy()
        bad = t.present(col) & ~np.isfinite(y)
        ax.plot(x, np.where(np.isfinite(y), y, np.nan), lw=1.2)
        if bad.any():
            top = np.nanmax(np.where(np.isfinite(y), y, np.nan)) if np.isfinite(y).any() else 1.0
            ax.scatter(x[bad], np.full(bad.sum(), top), marker="x", color="red", label="nan/inf", zorder=3)
            ax.legend(loc="upper right", fontsize=8)
        ax.set_ylabel(lab, fontsize=9)
        ax.grid(alpha=0.3)
    colors = {"error": "red", "warning": "orange", "info": "steelblue"}
    for f in diag.findings:
        steps = sorted({s for s in (_step_at_line(run, ln) for ln in f.lines[:3]) if s is not None})
        for s in steps[:1]:
            for ax in axes[:, 0]:
                ax.axvline(s, color=colors.get(f.severity, "gray"), ls="--", lw=1)
            axes[0, 0].annotate(f.rule, (s, 1.0), xycoords=("data", "axes fraction"), fontsize=8,
                                color=colors.get(f.severity, "gray"), rotation=90, va="top", ha="right")
    axes[-1, 0].set_xlabel("optimizer step")
    p = diag.primary
    fig.suptitle(f"swiftdoc: {p.category}" + (f" ({p.rule})" if p.rule else "") + f" - ms-swift {run.swift_version or '?'}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
