"""Findings -> a Diagnosis: the primary verdict, secondary findings, skipped rules.

Contract: `build_diagnosis(findings, skipped, features, run) -> Diagnosis`.
The primary finding is the most severe (error > warning > info), then the
highest rule priority; `info` findings never become the primary verdict.  With
no warning/error finding the verdict is `healthy` when training steps were
logged (with throughput and MFU when computable), else `unknown`.
Remedies of all findings are merged: the first finding to touch a flag or env
var wins and the later conflicting op is reported in `dropped`.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from diagnose.engine import Finding, RemedyOp, Skipped
from diagnose.features.registry import Features
from diagnose.models import Run

_SEV = {"error": 3, "warning": 2, "info": 1}


class Primary(BaseModel):
    category: str
    rule: str | None
    severity: str
    summary: str
    confidence: Literal["certain", "probable", "weak"] = "certain"
    missing: str | None = None  # what the text lacks for a surer verdict


class Dropped(BaseModel):
    rule: str
    op: RemedyOp
    reason: str


class Diagnosis(BaseModel):
    primary: Primary
    findings: list[Finding] = Field(default_factory=list)
    skipped: list[Skipped] = Field(default_factory=list)
    dropped: list[Dropped] = Field(default_factory=list)
    features: dict[str, Any] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)


def remedy_target(op: RemedyOp) -> str:
    """What an op changes ('flag:NAME' / 'env:NAME'): two ops on one target conflict."""
    if op.op == "set_env":
        return "env:" + (op.env or "")
    if op.op == "halve_batch_keep_global":
        return "flag:per_device_train_batch_size"
    return "flag:" + (op.flag or "")


def merge_remedies(findings: list[Finding]) -> list[Dropped]:
    """Keep the first op per target (findings are ranked); drop later conflicting ones."""
    taken: dict[str, tuple[str, RemedyOp]] = {}
    dropped: list[Dropped] = []
    for f in findings:
        for rem in f.remedies:
            if rem.effect == "advice":
                continue
            for op in rem.ops:
                key = remedy_target(op)
                if key in taken:
                    prev_rule, prev = taken[key]
                    if prev.op != op.op or prev.value != op.value:
                        dropped.append(Dropped(rule=f.rule, op=op, reason=f"conflicts with {prev_rule}"))
                else:
                    taken[key] = (f.rule, op)
    return dropped


def healthy_summary(feats: dict[str, Any]) -> str:
    parts = []
    if feats.get("samples_per_s") is not None:
        parts.append(f"{feats['samples_per_s']:.3g} samples/s")
    if feats.get("tokens_per_s") is not None:
        parts.append(f"{feats['tokens_per_s']:.4g} tokens/s")
    if feats.get("step_time_median_s") is not None:
        parts.append(f"{feats['step_time_median_s']:.3g} s/step (median)")
    if feats.get("mfu_pct") is not None:
        parts.append(f"MFU ≈ {feats['mfu_pct']:.1f}%")
    if feats.get("memory_frac") is not None:
        parts.append(f"memory {100 * feats['memory_frac']:.0f}% of capacity")
    tail = ": " + ", ".join(parts) if parts else ""
    return "No problem found; training runs steadily" + tail + "."


def build_diagnosis(findings: list[Finding], skipped: list[Skipped], features: Features, run: Run) -> Diagnosis:
    ranked = sorted(findings, key=lambda f: (-_SEV[f.severity], -f.priority, f.rule))
    serious = [f for f in ranked if f.severity in ("error", "warning")]
    feats = features.values
    if serious:
        p = serious[0]
        primary = Primary(category=p.category, rule=p.rule, severity=p.severity, summary=p.summary,
                          confidence=p.confidence, missing=p.missing)
    elif len(run.steps):
        primary = _healthy(run, feats)
    else:
        what = ("no training steps and no known error signature" if run.total_lines or run.sources
                else "nothing")
        primary = Primary(category="unknown", rule=None, severity="info", confidence="weak",
                          summary=f"Readable, but {what} was found in the input.",
                          missing="no training step rows and no error message in the text")
    return Diagnosis(primary=primary, findings=ranked, skipped=skipped, dropped=merge_remedies(ranked),
                     features=feats, notes=list(features.notes) + list(run.notes))


def _healthy(run: Run, feats: dict[str, Any]) -> Primary:
    """No problem found: certain for a whole run, probable for an excerpt (it only shows the part given)."""
    if not feats.get("excerpt"):
        return Primary(category="healthy", rule=None, severity="info", summary=healthy_summary(feats),
                       confidence="certain" if run.ended else "probable")
    t = run.steps
    steps = [int(s) for s in t["step"] if s == s]
    span = f"steps {steps[0]}-{steps[-1]}" if steps else f"{len(t)} logged rows"
    parts = [span]
    if feats.get("step_time_median_s") is not None:
        cv = feats.get("step_time_cv")
        steady = "steady speed" if cv is None or cv < 0.25 else "uneven speed"
        parts.append(f"{steady} ({feats['step_time_median_s']:.3g} s/step)")
    if feats.get("samples_per_s") is not None:
        parts.append(f"{feats['samples_per_s']:.3g} samples/s")
    mem = t["memory_gib"][t.present("memory_gib")] if t.has("memory_gib") else []
    if len(mem) >= 2:
        flat = max(mem) - min(mem) <= 0.05 * max(max(mem), 1e-9)
        parts.append(("memory flat at " if flat else "memory ") + f"{max(mem):.4g} GiB")
    return Primary(category="healthy", rule=None, severity="info", confidence="probable",
                   summary="Healthy as far as the excerpt goes: " + ", ".join(parts) + ".",
                   missing="the excerpt shows neither the start nor the end of the run")
