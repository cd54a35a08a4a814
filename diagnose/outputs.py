"""The JSON contracts, as pydantic models: every `--format json` document is one of these, dumped.

Contract: `RunOut` (`swiftdoc parse`), `AnalyzeOut` (`swiftdoc analyze`), `LintOut`
(`swiftdoc lint`), `PatchOut` (`swiftdoc patch`) and `AttachOut` (each line of
`swiftdoc attach --format json`) validate what the renderers build (unknown keys are refused:
`extra="forbid"`) and dump it; `SCHEMAS` maps a document name to its model, and
`tools/gen_docs.py` writes each one's JSON Schema to `docs/schemas/<name>.schema.json`
(it adds `swiftdoc verify`'s `VerifyReport`, already a model, the same way; this
module stays below verify in the layers and does not import it).
Every document carries `schema_version`; numbers that were nan/inf in the log are the
strings "nan", "inf", "-inf" (JSON has no such numbers).
"""
from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from diagnose.diagnosis import Dropped, Primary
from diagnose.engine import ResolvedRemedy, Skipped
from diagnose.models import DatasetStats

Num = Union[int, float, str]  # str: "nan" / "inf" / "-inf"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LaunchOut(_Strict):
    command: Optional[str] = None
    launcher: Optional[str] = None
    nproc_per_node: Optional[int] = None
    nnodes: Optional[int] = None
    argv: Optional[list[str]] = None


class EventOut(_Strict):
    kind: str
    line: int
    text: str
    file: Optional[str] = None
    detail: dict[str, Any] = Field(default_factory=dict)


class RunOut(_Strict):
    schema_version: Literal[2] = 2
    swift_version: Optional[str] = None
    version_clue: Optional[str] = None
    trainer: str
    recognized: bool
    capture: Literal["whole", "ended", "excerpt"]
    steps: int
    max_steps: Optional[int] = None
    world_size: Optional[int] = None
    first_step: Optional[dict[str, Num]] = None
    last_step: Optional[dict[str, Num]] = None
    dataset: Optional[DatasetStats] = None
    val_dataset: Optional[DatasetStats] = None
    model: Optional[dict[str, Any]] = None
    launch: LaunchOut
    output_dir: Optional[str] = None
    events: list[EventOut] = Field(default_factory=list)
    evals: int = 0
    summary: Optional[dict[str, Any]] = None
    checkpoints: list[dict[str, Any]] = Field(default_factory=list)
    environment: dict[str, str] = Field(default_factory=dict)
    snapshot: Optional[dict[str, Any]] = None
    notes: list[str] = Field(default_factory=list)
    sources: list[str] = Field(default_factory=list)
    line_file: Optional[str] = None
    total_lines: int = 0


class FindingOut(_Strict):
    rule: str
    slug: str
    category: str
    severity: Literal["info", "warning", "error"]
    confidence: Literal["certain", "probable", "weak"]
    missing: Optional[str] = None
    summary: str
    evidence: str
    values: dict[str, Any] = Field(default_factory=dict)
    lines: list[int] = Field(default_factory=list)
    file: Optional[str] = None  # the file `lines` point into
    refs: list[dict[str, Any]] = Field(default_factory=list)  # every (file, line) of the evidence, all captures
    remedies: list[ResolvedRemedy] = Field(default_factory=list)
    references: list[str] = Field(default_factory=list)


class CulpritOut(_Strict):
    rank: Optional[int] = None
    node: Optional[int] = None
    host: Optional[str] = None
    kind: str
    category: str
    file: Optional[str] = None
    line: Optional[int] = None
    time: Optional[str] = None
    confidence: Literal["certain", "probable", "weak"] = "certain"
    summary: str


class ConsequenceOut(_Strict):
    rank: Optional[int] = None
    node: Optional[int] = None
    kind: str
    file: Optional[str] = None
    line: Optional[int] = None


class RankOut(_Strict):
    rank: int
    node: Optional[int] = None
    file: Optional[str] = None
    last_step: Optional[int] = None
    last_time: Optional[str] = None
    first_error: Optional[str] = None
    line: Optional[int] = None


class StragglerOut(_Strict):
    gpu: Optional[int] = None
    rank: Optional[int] = None
    node: Optional[int] = None
    slowdown: float
    evidence: str


class ProbeRankOut(_Strict):
    rank: int
    node: Optional[str] = None
    steps: int
    steps_used: int = 0  # after warm-up, save and evaluation steps are dropped
    last_step: Optional[int] = None
    recent_step_time_s: Optional[float] = None  # median of its last 10 used steps (attach shows it live)
    recent_data_wait_share: Optional[float] = None
    data_wait_frac: Optional[float] = None  # median over its steps of data wait / step time
    data_wait_share: Optional[float] = None  # sum of data wait / sum of step time
    step_time_s_median: Optional[float] = None
    step_time_s_p90: Optional[float] = None
    compute_s_median: Optional[float] = None  # host + forward + backward + optimizer, collective waits included
    tokens_per_s: Optional[float] = None
    samples_per_s: Optional[float] = None
    mem_peak_gib: Optional[float] = None
    mem_kind: Optional[Literal["cuda", "host"]] = None  # CUDA allocator peak, else the host RSS peak
    ended: bool = False  # the rank wrote its end line (a killed rank has none)
    file: Optional[str] = None


class ProbeStragglerOut(_Strict):
    rank: int
    node: Optional[str] = None
    slowdown: float
    cause: Literal["data_wait", "compute", "collective"]
    evidence: str
    lockstep: bool = True


class ProbeStallsOut(_Strict):
    pattern: Literal["bursty", "steady", "slowing", "none"]
    rank: int
    steps: int = 0
    share: Optional[float] = None
    every: Optional[int] = None
    cause: Optional[str] = None
    evidence: Optional[str] = None


class ProbeOut(_Strict):
    """What swiftdoc's in-trainer probe recorded (`swiftdoc probe`; features.probe_stats)."""

    folder: str
    format: Optional[int] = None
    world_size: Optional[int] = None
    ranks_read: int = 0
    warmup_steps: int = 0
    steps_used: int = 0
    data_wait_frac: Optional[float] = None  # median over steps and ranks, warm-up dropped
    data_wait_share: Optional[float] = None
    step_time_s: dict[str, float] = Field(default_factory=dict)  # rank -> median step time
    ranks: list[ProbeRankOut] = Field(default_factory=list)
    straggler: Optional[ProbeStragglerOut] = None
    stalls: Optional[ProbeStallsOut] = None
    notes: list[str] = Field(default_factory=list)


class AnalyzeOut(_Strict):
    schema_version: Literal[2] = 2
    primary: Primary
    culprit: Optional[CulpritOut] = None  # the rank that failed first, when the text shows several ranks failing
    consequences: list[ConsequenceOut] = Field(default_factory=list)
    ranks: list[RankOut] = Field(default_factory=list)  # one row per rank the text names (two or more)
    stragglers: list[StragglerOut] = Field(default_factory=list)  # GPUs slower than the others (NVML samples)
    findings: list[FindingOut] = Field(default_factory=list)
    skipped: list[Skipped] = Field(default_factory=list)
    dropped: list[Dropped] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    run: RunOut
    features: Optional[dict[str, Any]] = None
    probe: Optional[ProbeOut] = None  # the run's swiftdoc probe files, when it has them


class LintProblemOut(BaseModel):
    model_config = ConfigDict(extra="allow")  # the problem's own fields (flag, fix, fix_effect ...) ride along
    line: Optional[int] = None
    col: int = 1
    code: str
    name: str
    group: str
    severity: Literal["error", "warning", "info"]
    message: str
    fixed: bool = False


class LintCommandOut(BaseModel):
    model_config = ConfigDict(extra="allow")  # the plan's fields (changes, argv, env, advice ...)
    line: Optional[int] = None
    version: str
    command: str
    problems: list[LintProblemOut] = Field(default_factory=list)
    diff: str = ""


class LintFileOut(_Strict):
    source: str
    version: str
    version_source: str
    commands: list[LintCommandOut] = Field(default_factory=list)
    problems: list[LintProblemOut] = Field(default_factory=list)
    backups: list[str] = Field(default_factory=list)


class LintSummary(_Strict):
    files: int
    commands: int
    errors: int
    warnings: int
    fixable: int
    unsafe_fixes: int


class LintOut(_Strict):
    schema_version: Literal[2] = 2
    files: list[LintFileOut]
    summary: LintSummary


class PatchOut(_Strict):
    """`swiftdoc patch --format json`: the plan (flag changes, problems, advice) and what it does to the script."""

    schema_version: Literal[2] = 2
    version: str
    version_source: str = ""
    command: str
    changes: list[dict[str, Any]] = Field(default_factory=list)
    argv: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    problems: list[dict[str, Any]] = Field(default_factory=list)
    dropped: list[dict[str, Any]] = Field(default_factory=list)
    advice: list[dict[str, Any]] = Field(default_factory=list)
    unchanged: list[Any] = Field(default_factory=list)
    assumptions: list[str] = Field(default_factory=list)
    source: str
    diff: str = ""
    edited: bool = False
    unsafe: list[dict[str, Any]] = Field(default_factory=list)
    swift_check: Optional[str] = None
    command_line: Optional[str] = None
    backups: list[str] = Field(default_factory=list)


class AttachState(_Strict):
    seq: int
    t: float
    ended: bool
    alive: bool
    alerts: list[dict[str, Any]] = Field(default_factory=list)
    progress: Optional[dict[str, Any]] = None
    notes: list[str] = Field(default_factory=list)
    hang: Optional[dict[str, Any]] = None  # the log silent while the ranks live: where each rank waits (attach.stacks)


class AttachOut(_Strict):
    """One `swiftdoc attach --format json` line: analyze's document (when there is a log) plus the live state."""

    schema_version: Literal[2] = 2
    primary: Optional[Primary] = None
    culprit: Optional[CulpritOut] = None
    consequences: list[ConsequenceOut] = Field(default_factory=list)
    ranks: list[RankOut] = Field(default_factory=list)
    stragglers: list[StragglerOut] = Field(default_factory=list)
    findings: list[FindingOut] = Field(default_factory=list)
    skipped: list[Skipped] = Field(default_factory=list)
    dropped: list[Dropped] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    run: Optional[RunOut] = None
    features: Optional[dict[str, Any]] = None
    probe: Optional[ProbeOut] = None
    target: dict[str, Any] = Field(default_factory=dict)
    gpus: dict[str, Any] = Field(default_factory=dict)
    host: Optional[dict[str, Any]] = None
    attach: AttachState


class UnrelatedRunOut(_Strict):
    inputs: list[str]
    apart_because: Optional[str] = None  # why this run is not the one before it (None for the first)
    analysis: AnalyzeOut


class AnalyzeApartOut(_Strict):
    """`swiftdoc analyze A B --format json` when the inputs are unrelated runs: one analysis per run, never merged."""
    schema_version: Literal[2] = 2
    unrelated: list[UnrelatedRunOut]


SCHEMAS: dict[str, type[BaseModel]] = {"parse": RunOut, "analyze": AnalyzeOut, "analyze-apart": AnalyzeApartOut, "lint": LintOut, "patch": PatchOut,
                                        "attach": AttachOut}


def schema_of(name: str, model: type[BaseModel] | None = None) -> dict[str, Any]:
    schema = (model or SCHEMAS[name]).model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"swiftdoc/{name}.schema.json"
    return schema


__all__ = ["RunOut", "AnalyzeOut", "LintOut", "SCHEMAS", "schema_of"]
