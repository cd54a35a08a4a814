"""The JSON form of a Run, printed by `swiftdoc parse --format json` and nested in analyze's JSON.

Contract: `run_summary(run) -> dict`, validated by `diagnose.outputs.RunOut` (the
published schema, docs/schemas/parse.schema.json) and JSON-safe: NaN/inf become
the strings "nan"/"inf"/"-inf".
"""
from __future__ import annotations

import math
from typing import Any

from diagnose.models import Run


def jsonable(v: Any) -> Any:
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return v
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, set)):
        return [jsonable(x) for x in v]
    if hasattr(v, "item") and callable(v.item):  # numpy scalar
        return jsonable(v.item())
    return v


def run_summary(run: Run) -> dict[str, Any]:
    from diagnose.outputs import RunOut

    t = run.steps
    capture = "whole" if run.header_line is not None else "ended" if run.ended else "excerpt"
    doc = jsonable({
        "schema_version": 2,
        "swift_version": run.swift_version,
        "version_clue": run.version_clue,
        "trainer": run.trainer,
        "recognized": run.recognized,
        "capture": capture,
        "steps": len(t),
        "max_steps": run.max_steps,
        "world_size": run.world_size,
        "first_step": t.row(0) if len(t) else None,
        "last_step": t.last(),
        "dataset": run.dataset.model_dump() if run.dataset else None,
        "val_dataset": run.val_dataset.model_dump() if run.val_dataset else None,
        "model": run.model.model_dump(exclude={"fields"}) if run.model else None,
        "launch": {
            "command": run.launch.command,
            "launcher": run.launch.launcher,
            "nproc_per_node": run.launch.nproc_per_node,
            "nnodes": run.launch.nnodes,
            "argv": run.launch.argv,
        },
        "output_dir": run.output_dir,
        "events": [e.model_dump() for e in run.events],
        "evals": len(run.evals),
        "summary": run.summary,
        "checkpoints": run.checkpoints,
        "environment": run.environment,
        "snapshot": run.snapshot,
        "notes": run.notes,
        "sources": run.sources,
        "line_file": run.line_file,
        "total_lines": run.total_lines,
    })
    return RunOut.model_validate(doc).model_dump(mode="json")
