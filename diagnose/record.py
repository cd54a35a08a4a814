"""A run's analysis saved as one versioned file, and loaded back without the log.

Contract: `save_record(diag, run, path)` writes (atomically) a JSON document
{schema_version, kind: "swiftdoc.record", analyze: <the analyze document with its
features>, steps: {column: [values]}, present: {column: [bools]}, run: {header_line,
ended, flags}}; `load_record(path) -> (Run, Diagnosis)` rebuilds what the renderers
read (verdict, findings, the steps table for the plot, versions, events, launch),
so `swiftdoc analyze --load record.json` prints, plots or converts a saved analysis
with no log at hand.  A record of another schema version, or a file that is not a
record, raises `InputError`.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from diagnose.diagnosis import Diagnosis
from diagnose.errors import InputError
from diagnose.models import STEP_COLUMNS, DatasetStats, Event, LaunchConfig, Run, StepsTable

SCHEMA_VERSION = 1
KIND = "swiftdoc.record"


def _num(v: float) -> Any:
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def save_record(diag: Diagnosis, run: Run, path: str | Path) -> Path:
    from diagnose.render.analysis_json import diagnosis_json

    t = run.steps
    doc = {
        "schema_version": SCHEMA_VERSION, "kind": KIND,
        "analyze": diagnosis_json(diag, run, features=True),
        "steps": {c: [_num(float(x)) for x in t[c]] for c in STEP_COLUMNS},
        "present": {c: [bool(x) for x in t.present(c)] for c in STEP_COLUMNS},
        "run": {"header_line": run.header_line, "ended": run.ended, "flags": run.launch.flags,
                "failures": run.failures, "nodes": run.nodes},
    }
    out = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=out.name + ".", dir=str(out.parent if str(out.parent) else "."))
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, default=str)
    os.chmod(tmp, 0o644)  # a report to share, not a secret (mkstemp makes it 0600)
    os.replace(tmp, out)
    return out


def _float(v: Any) -> float:
    if isinstance(v, str):
        return {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}.get(v, math.nan)
    return float(v)


def load_record(path: str | Path) -> tuple[Run, Diagnosis]:
    from diagnose.diagnosis import Primary
    from diagnose.engine import Finding

    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: not a readable record ({e})") from None
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        raise InputError(f"{path}: not a swiftdoc record", hint="write one with: swiftdoc analyze LOG --save FILE")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise InputError(f"{path}: record schema {doc.get('schema_version')} (this swiftdoc reads {SCHEMA_VERSION})")
    a, r = doc["analyze"], doc["analyze"]["run"]
    cols = {c: [_float(x) for x in doc["steps"].get(c, [])] for c in STEP_COLUMNS}
    steps = StepsTable(cols, {c: v for c, v in doc.get("present", {}).items()})
    launch = LaunchConfig(argv=r["launch"].get("argv"), command=r["launch"].get("command"),
                          launcher=r["launch"].get("launcher"), nproc_per_node=r["launch"].get("nproc_per_node"),
                          nnodes=r["launch"].get("nnodes"), flags=doc["run"].get("flags") or {})
    run = Run(sources=r.get("sources") or [], line_file=r.get("line_file"), recognized=r["recognized"],
              trainer=r["trainer"], swift_version=r.get("swift_version"), version_clue=r.get("version_clue"),
              steps=steps, summary=r.get("summary"), launch=launch, world_size=r.get("world_size"),
              dataset=DatasetStats(**r["dataset"]) if r.get("dataset") else None, output_dir=r.get("output_dir"),
              events=[Event(**e) for e in r.get("events") or []], notes=r.get("notes") or [],
              checkpoints=r.get("checkpoints") or [], total_lines=r.get("total_lines") or 0,
              header_line=doc["run"].get("header_line"), ended=bool(doc["run"].get("ended")),
              environment=r.get("environment") or {}, snapshot=r.get("snapshot"),
              failures=doc["run"].get("failures") or [], nodes=doc["run"].get("nodes") or {})
    findings = []
    for f in a["findings"]:
        keep = {k: v for k, v in f.items() if k in Finding.model_fields}
        findings.append(Finding(**keep))
    diag = Diagnosis(primary=Primary(**a["primary"]), culprit=a.get("culprit"), consequences=a.get("consequences") or [],
                     ranks=a.get("ranks") or [],
                     stragglers=a.get("stragglers") or [],
                     findings=findings, skipped=a.get("skipped") or [], dropped=a.get("dropped") or [],
                     features=a.get("features") or {}, notes=a.get("notes") or [])
    return run, diag


__all__ = ["save_record", "load_record", "SCHEMA_VERSION"]
