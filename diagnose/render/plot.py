"""`--plot FILE.png`: timeline of interval step time, memory, grad_norm and loss with findings marked.

Contract: `plot_timeline(run, diag, path)`; imports matplotlib (Agg) only here and
raises EnvironmentMissing with an install hint when it is absent.  `check_plot_target(path)`
is called before any analysis: a folder that does not exist, a path that is a folder, an
unwritable folder or an image type matplotlib cannot write is a UsageError (exit 2), a
missing matplotlib EnvironmentMissing (exit 3) whose hint fits the way swiftdoc was
installed (`install_hint`).  A finding is
drawn at the step where it happened: its first event line (an OOM after step 60
is at step 60), else its first step row; configuration findings hold for the whole
run and are listed apart, not drawn at a step.  nan/inf steps are marked, and a
loss that transformers' nan filter printed as 0 beside a nan grad_norm (NAN006) is
shown as masked, not as a real 0.
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


def where_it_happened(run: Run, f) -> float | None:
    """The step a finding belongs at: its first event line's step, else its first step row's; None for the
    whole run (configuration findings, or nothing to place it by)."""
    if f.category == "config" or not f.lines or not len(run.steps):
        return None
    event_lines = {e.line for e in run.events}
    ev = [ln for ln in f.lines if ln in event_lines]
    return _step_at_line(run, min(ev) if ev else min(f.lines))


_FORMATS = {".png", ".svg", ".pdf", ".jpg", ".jpeg", ".eps", ".ps", ".tif", ".tiff", ".webp"}


def install_hint(extra: str, package: str) -> str:
    """How to add an extra to *this* swiftdoc install: an editable checkout, or a wheel / git install."""
    try:
        import json
        from importlib.metadata import PackageNotFoundError, distribution

        try:
            text = distribution("swiftdoc").read_text("direct_url.json") or ""
        except PackageNotFoundError:
            text = ""
        info = json.loads(text) if text else {}
        if info.get("dir_info", {}).get("editable") and str(info.get("url", "")).startswith("file://"):
            return f"pip install -e '{info['url'][7:]}[{extra}]' (or: pip install {package})"
    except (OSError, ValueError):
        pass
    return f"pip install {package}"


def check_plot_target(path: str) -> None:
    """Fail before the analysis, in one line, when the plot cannot be written."""
    import importlib.util
    import os
    from pathlib import Path

    from diagnose.errors import UsageError

    p = Path(path)
    if p.suffix.lower() not in _FORMATS:
        raise UsageError(f"--plot {path}: not an image file name", hint="e.g. --plot timeline.png (png, svg, pdf)")
    if p.is_dir():
        raise UsageError(f"--plot {path}: is a folder", hint="give a file name, e.g. --plot timeline.png")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"--plot {path}: the folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"--plot {path}: the folder {parent} is not writable")
    if importlib.util.find_spec("matplotlib") is None:
        raise EnvironmentMissing("--plot needs matplotlib, which is not installed",
                                 hint=install_hint("plot", "matplotlib"))


def plot_timeline(run: Run, diag: Diagnosis, path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise EnvironmentMissing("--plot needs matplotlib", hint=install_hint("plot", "matplotlib")) from None
    t = run.steps
    panels = [("interval_s", "s / step (interval)"), ("memory_gib", "memory (GiB, reserved)"),
              ("grad_norm", "grad_norm"), ("loss", "loss")]
    panels = [(c, lab) for c, lab in panels if len(t) and t.has(c)]
    n = max(1, len(panels))
    fig, axes = plt.subplots(n, 1, figsize=(10, 2.2 * n + 0.8), sharex=True, squeeze=False)
    x = t["step"] if len(t) else np.zeros(0)
    masked = np.zeros(len(t), bool)
    if len(t) and t.has("loss") and t.has("grad_norm"):
        masked = t.present("loss") & (t["loss"] == 0) & t.present("grad_norm") & ~np.isfinite(t["grad_norm"])
    for ax, (col, lab) in zip(axes[:, 0], panels):
        y = t[col].copy()
        bad = t.present(col) & ~np.isfinite(y)
        if col == "loss" and masked.any():
            y[masked] = np.nan  # not a real 0: the nan filter's stand-in
            ax.scatter(x[masked], np.zeros(masked.sum()), marker="o", facecolors="none", edgecolors="gray",
                       label="masked (nan, printed as 0)", zorder=3)
            ax.legend(loc="upper right", fontsize=8)
        ax.plot(x, np.where(np.isfinite(y), y, np.nan), lw=1.2)
        if bad.any():
            top = np.nanmax(np.where(np.isfinite(y), y, np.nan)) if np.isfinite(y).any() else 1.0
            ax.scatter(x[bad], np.full(bad.sum(), top), marker="x", color="red", label="nan/inf", zorder=3)
            ax.legend(loc="upper right", fontsize=8)
        ax.set_ylabel(lab, fontsize=9)
        ax.grid(alpha=0.3)
    colors = {"error": "red", "warning": "orange", "info": "steelblue"}
    whole_run = []
    for f in diag.findings:
        at = where_it_happened(run, f)
        if at is None:
            whole_run.append(f"{f.rule} {f.slug}")
            continue
        for ax in axes[:, 0]:
            ax.axvline(at, color=colors.get(f.severity, "gray"), ls="--", lw=1)
        axes[0, 0].annotate(f.rule, (at, 1.0), xycoords=("data", "axes fraction"), fontsize=8,
                            color=colors.get(f.severity, "gray"), rotation=90, va="top", ha="right")
    if whole_run:
        fig.text(0.01, 0.005, "whole run: " + ", ".join(whole_run), fontsize=7, color="dimgray", va="bottom")
    axes[-1, 0].set_xlabel("optimizer step")
    p = diag.primary
    fig.suptitle(f"swiftdoc: {p.category}" + (f" ({p.rule})" if p.rule else "") + f" - ms-swift {run.swift_version or '?'}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
