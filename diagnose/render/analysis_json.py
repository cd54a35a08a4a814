"""The analyze JSON contract (schema_version 2).

Contract: `analyze_document(diagnosis, run) -> AnalyzeOut` (typed) and
`diagnosis_json(diagnosis, run) -> dict` (its JSON form) with keys schema_version,
primary {category, rule, severity, summary, confidence, missing}, findings [{rule,
slug, category, severity, confidence, missing, summary, evidence, values, lines,
remedies [{title, effect, ops, note}]}],
skipped [{rule, slug, missing}], dropped, notes, run (= `swiftdoc parse --format json`);
validated by `diagnose.outputs.AnalyzeOut` (docs/schemas/analyze.schema.json).  Each
finding's `file` names the file its `lines` point into.
"""
from __future__ import annotations

from typing import Any

from diagnose.diagnosis import Diagnosis
from diagnose.models import Run
from diagnose.render.run_json import jsonable, run_summary

SCHEMA_VERSION = 2  # 2: confidence and missing on the verdict and every finding


def diagnosis_json(diag: Diagnosis, run: Run, features: bool = False) -> dict[str, Any]:
    return analyze_document(diag, run, features).model_dump(mode="json")


def analyze_document(diag: Diagnosis, run: Run, features: bool = False):
    """The typed analyze document (`diagnose.outputs.AnalyzeOut`): what --format json prints, and what attach keeps."""
    from diagnose.outputs import AnalyzeOut

    out: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "primary": diag.primary.model_dump(),
        "culprit": diag.culprit,
        "consequences": diag.consequences,
        "ranks": diag.ranks,
        "stragglers": diag.stragglers,
        "findings": [
            {
                "rule": f.rule, "slug": f.slug, "category": f.category, "severity": f.severity,
                "confidence": f.confidence, "missing": f.missing, "summary": f.summary,
                "evidence": f.evidence, "values": f.values, "lines": f.lines, "file": run.line_file if f.lines else None,
                "refs": f.refs,
                "remedies": [r.model_dump() for r in f.remedies], "references": f.references,
            }
            for f in diag.findings
        ],
        "skipped": [s.model_dump() for s in diag.skipped],
        "dropped": [d.model_dump() for d in diag.dropped],
        "notes": diag.notes,
        "run": run_summary(run),
    }
    if features:
        out["features"] = diag.features
    from diagnose.features.probe_stats import summary_of

    if (probe := summary_of(run)) is not None:  # swiftdoc probe files, or a saved record's (features.probe_stats)
        out["probe"] = probe
    return AnalyzeOut.model_validate(jsonable(out))
