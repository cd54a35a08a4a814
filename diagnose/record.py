"""A run's analysis saved as one versioned file, and loaded back without the log.

Contract: `save_record(diag, run, path, quoted)` writes (atomically, redacted: `diagnose.redact`) a JSON
document {schema_version, kind: "swiftdoc.record", analyze: <the analyze document with its
features>, steps: {column: [values]}, present: {column: [bools]}, run: {header_line,
ended, flags}, quoted: {line: text}}; `read_record(path) -> (Run, Diagnosis, quoted)` (and
`load_record(path) -> (Run, Diagnosis)`) rebuilds what the renderers read (verdict, findings, the steps
table for the plot, versions, events, launch, the log lines a report quotes), so `swiftdoc analyze --load
record.json` prints, plots or converts a saved analysis with no log at hand.  A record carries the lines it
quotes: the paths in it (`line_file`, `sources`) are names to show, never files to open.  A record of
another schema version, a file that is not a record, or a malformed one (missing keys, wrong types, deep
nesting, columns of different lengths, more than `--max-input`, not a regular file) raises `InputError`.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field

from diagnose.diagnosis import Diagnosis
from diagnose.errors import InputError
from diagnose.models import STEP_COLUMNS, DatasetStats, Event, LaunchConfig, Run, StepsTable

SCHEMA_VERSION = 1
KIND = "swiftdoc.record"
_QUOTE_MAX = 4096  # a quoted line is cut there


def _num(v: float) -> Any:
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def save_record(diag: Diagnosis, run: Run, path: str | Path, quoted: dict[int, str] | None = None) -> Path:
    from diagnose.redact import redact, redact_text
    from diagnose.render.analysis_json import diagnosis_json

    diag, run = redact(diag), redact(run)  # a record is shared: no tokens, keys or passwords in it
    t = run.steps
    doc = {
        "schema_version": SCHEMA_VERSION, "kind": KIND,
        "analyze": diagnosis_json(diag, run, features=True),
        "steps": {c: [_num(float(x)) for x in t[c]] for c in STEP_COLUMNS},
        "present": {c: [bool(x) for x in t.present(c)] for c in STEP_COLUMNS},
        "run": {"header_line": run.header_line, "ended": run.ended, "flags": run.launch.flags,
                "failures": run.failures, "nodes": run.nodes},
        "quoted": {str(n): redact_text(text[:_QUOTE_MAX]) for n, text in (quoted or {}).items()},
    }
    out = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=out.name + ".", dir=str(out.parent if str(out.parent) else "."))
    except OSError as e:
        raise InputError(f"--save {path}: cannot write there ({e.strerror})") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False, default=str)
        os.chmod(tmp, 0o644)  # a report to share, not a secret (mkstemp makes it 0600)
        os.replace(tmp, out)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise InputError(f"--save {path}: cannot write there ({e.strerror})") from None
    return out


def _float(v: Any) -> float:
    if isinstance(v, str):
        return {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}.get(v, math.nan)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"a step value {str(v)[:40]!r} is not a number")
    return float(v)


class _RecordRun(BaseModel):
    model_config = ConfigDict(extra="ignore")
    header_line: Optional[int] = None
    ended: bool = False
    flags: dict[str, Any] = Field(default_factory=dict)
    failures: list[dict[str, Any]] = Field(default_factory=list)
    nodes: dict[str, int] = Field(default_factory=dict)


def _steps(doc: dict[str, Any]) -> StepsTable:
    """The steps table of a record: every column a list of numbers, every column and mask of one length."""
    raw, present = doc.get("steps") or {}, doc.get("present") or {}
    if not isinstance(raw, dict) or not isinstance(present, dict):
        raise TypeError("steps and present are not mappings")
    cols = {}
    for c in STEP_COLUMNS:
        v = raw.get(c, [])
        if not isinstance(v, list):
            raise TypeError(f"steps.{c} is not a list")
        cols[c] = [_float(x) for x in v]
    n = len(cols["step"])
    masks = {}
    for c, v in present.items():
        if c not in STEP_COLUMNS or not isinstance(v, list) or not all(isinstance(x, bool) for x in v):
            raise TypeError(f"present.{str(c)[:40]} is not a list of booleans of a known column")
        masks[c] = v
    if any(len(v) != n for v in [*cols.values(), *masks.values()]):
        raise ValueError("the step columns are not all of one length")
    return StepsTable(cols, masks)


def read_record(path: str | Path) -> tuple[Run, Diagnosis, dict[int, str]]:
    """A saved record: the run, the diagnosis, and the log lines it quotes (the record carries them: no file that
    the record names is ever opened).  Anything malformed is an `InputError` (exit 2)."""
    from pydantic import ValidationError

    from diagnose.parse.bounded import read_file

    data = read_file(path, str(path))
    try:
        doc = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as e:
        raise InputError(f"{path}: not a readable record ({str(e)[:120] or type(e).__name__})") from None
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        raise InputError(f"{path}: not a swiftdoc record", hint="write one with: swiftdoc analyze LOG --save FILE")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise InputError(f"{path}: record schema {str(doc.get('schema_version'))[:20]} (this swiftdoc reads {SCHEMA_VERSION})")
    try:
        return _rebuild(doc)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, RecursionError, ValidationError) as e:
        why = str(e).splitlines()[0][:160] if str(e) else type(e).__name__
        raise InputError(f"{path}: a malformed record ({why})",
                         hint="write it again with: swiftdoc analyze LOG --save FILE") from None


def load_record(path: str | Path) -> tuple[Run, Diagnosis]:
    run, diag, _ = read_record(path)
    return run, diag


def _rebuild(doc: dict[str, Any]) -> tuple[Run, Diagnosis, dict[int, str]]:
    from diagnose.diagnosis import Primary
    from diagnose.engine import Finding
    from diagnose.outputs import AnalyzeOut

    a = AnalyzeOut.model_validate(doc["analyze"]).model_dump(mode="json")  # every key and type of a live document
    r = a["run"]
    head = _RecordRun.model_validate(doc.get("run") or {})
    steps = _steps(doc)
    quoted_raw = doc.get("quoted") or {}
    if not isinstance(quoted_raw, dict):
        raise TypeError("quoted is not a mapping")
    quoted = {int(k): str(v)[:_QUOTE_MAX] for k, v in quoted_raw.items() if isinstance(v, str)}
    launch = LaunchConfig(argv=r["launch"].get("argv"), command=r["launch"].get("command"),
                          launcher=r["launch"].get("launcher"), nproc_per_node=r["launch"].get("nproc_per_node"),
                          nnodes=r["launch"].get("nnodes"), flags=head.flags)
    run = Run(sources=r.get("sources") or [], line_file=r.get("line_file"), recognized=r["recognized"],
              trainer=r["trainer"], swift_version=r.get("swift_version"), version_clue=r.get("version_clue"),
              steps=steps, summary=r.get("summary"), launch=launch, world_size=r.get("world_size"),
              dataset=DatasetStats(**r["dataset"]) if r.get("dataset") else None, output_dir=r.get("output_dir"),
              events=[Event(**e) for e in r.get("events") or []], notes=r.get("notes") or [],
              checkpoints=r.get("checkpoints") or [], total_lines=r.get("total_lines") or 0,
              header_line=head.header_line, ended=head.ended,
              environment=r.get("environment") or {}, snapshot=r.get("snapshot"),
              failures=head.failures, nodes=head.nodes, probe_summary=a.get("probe"))
    findings = []
    for f in a["findings"]:
        for ref in f.get("refs") or []:  # free-form in the schema, read by every renderer: {file, line}
            if not (isinstance(ref.get("line"), int) and "file" in ref and isinstance(ref["file"], (str, type(None)))):
                raise TypeError("a finding's refs entry is not {file, line}")
        keep = {k: v for k, v in f.items() if k in Finding.model_fields}
        findings.append(Finding(**keep))
    diag = Diagnosis(primary=Primary(**a["primary"]), culprit=a.get("culprit"), consequences=a.get("consequences") or [],
                     ranks=a.get("ranks") or [],
                     stragglers=a.get("stragglers") or [],
                     findings=findings, skipped=a.get("skipped") or [], dropped=a.get("dropped") or [],
                     features=a.get("features") or {}, notes=a.get("notes") or [])
    return run, diag, quoted


__all__ = ["save_record", "load_record", "read_record", "SCHEMA_VERSION"]
