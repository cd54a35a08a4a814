"""The JSON form of a Run, printed by `swiftdoc parse --format json` and nested in analyze's JSON.

Contract: `run_summary(run) -> dict` (JSON-safe: NaN/inf become the strings
"nan"/"inf"/"-inf").  Keys: swift_version, version_clue, trainer, recognized,
steps, max_steps, world_size, last_step, first_step, dataset, val_dataset,
model, launch {command, launcher, nproc_per_node, nnodes, argv}, output_dir,
events [{kind, line, text, file, detail}], evals, summary, notes, sources,
line_file, total_lines.
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
    t = run.steps
    return jsonable({
        "swift_version": run.swift_version,
        "version_clue": run.version_clue,
        "trainer": run.trainer,
        "recognized": run.recognized,
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
        "notes": run.notes,
        "sources": run.sources,
        "line_file": run.line_file,
        "total_lines": run.total_lines,
    })
