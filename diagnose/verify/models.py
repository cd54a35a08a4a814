"""The verify data model: changes, trials, arms and the report.

Contract:
- `Change`: one edit of the job: a flag (`kind="flag"`, named by its ms-swift
  field, e.g. `gradient_checkpointing`) or an environment variable
  (`kind="env"`); `remove=True` drops it.  `effect` is `safe` (speed only: the
  math is unchanged), `changes-training`, or `unknown`; `source` says where the
  change came from (`--set`, a plan file, a diagnosis rule).
- `TrialResult`: everything measured in one trial subprocess; `status` is
  `ok | crashed | oom | nan | timeout | interrupted`.  Per-step data
  (`steps`, `step_times_s`, `losses`) is kept so a report can be re-analysed.
- `ArmSummary`: the trials of one arm reduced to means.
- `VerifyReport`: the JSON contract of `swiftdoc verify --format json`
  (schema_version 1): verdict, metric, gain, ci [lo, hi], baseline, patched,
  trials, plus changes, loss_parity, ablation, failure, settings, notes.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

SCHEMA_VERSION = 1

Verdict = Literal["confirmed", "not_confirmed", "worse", "failed"]
TrialStatus = Literal["ok", "crashed", "oom", "nan", "timeout", "interrupted"]


class Change(BaseModel):
    kind: Literal["flag", "env"] = "flag"
    name: str
    value: str | None = None  # one token; list values are joined by spaces in `tokens`
    tokens: list[str] | None = None  # explicit argv tokens after the flag (list-valued flags)
    remove: bool = False
    effect: Literal["safe", "changes-training", "unknown"] = "unknown"
    source: str = "--set"

    def label(self) -> str:
        if self.remove:
            return f"unset {self.name}" if self.kind == "env" else f"--{self.name} (removed)"
        v = " ".join(self.tokens) if self.tokens is not None else (self.value or "")
        return f"{self.name}={v}" if self.kind == "env" else f"--{self.name} {v}".rstrip()

    def argv_tokens(self) -> list[str]:
        if self.tokens is not None:
            return list(self.tokens)
        return [] if self.value is None else [self.value]


class Failure(BaseModel):
    arm: str
    trial: int
    status: TrialStatus
    returncode: int | None = None
    error_line: str | None = None  # the last exception / error line of the trial log
    category: str | None = None  # swiftdoc's diagnosis of the trial log
    rule: str | None = None
    summary: str | None = None
    evidence: list[str] = Field(default_factory=list)
    log_tail: list[str] = Field(default_factory=list)
    prevalidation: list[str] = Field(default_factory=list)  # flag-table messages for the change


class TrialResult(BaseModel):
    index: int  # order in which trials ran, from 1
    arm: str  # "baseline", "patched", or an ablation arm label
    repeat: int  # 1-based repeat within the arm
    status: TrialStatus = "ok"
    returncode: int | None = None
    wall_s: float | None = None  # spawn to exit
    startup_s: float | None = None  # spawn to the first logged step (excluded from throughput)
    train_s: float | None = None  # first to last logged step
    steps_done: int = 0
    max_steps: int | None = None
    warmup_steps: int = 0
    measured_steps: int = 0
    global_batch: int | None = None
    step_time_s: float | None = None  # median interval after warm-up
    step_time_iqr_s: float | None = None
    samples_per_s: float | None = None
    tokens_per_s: float | None = None
    peak_memory_gib: float | None = None  # ms-swift memory(GiB): max reserved on rank 0
    gpu_util_mean_pct: float | None = None  # NVML, training window
    gpu_mem_used_max_gib: float | None = None  # NVML
    cpu_s_per_step: float | None = None  # median CPU-seconds of the trial's processes per measured step
    external_cpu_cores: float | None = None  # mean CPU cores used by other processes while training
    cpu_wait_frac: float | None = None  # mean run-queue delay of the trial's threads per second of training
    contended_steps: int = 0  # measured steps set aside: the machine was saturated by other processes
    disturbed: bool = False  # too few clean steps: the trial measured the neighbours, not the job
    replaced: bool = False  # disturbed and re-run; not used for the verdict
    steps: list[int] = Field(default_factory=list)
    step_times_s: list[float | None] = Field(default_factory=list)
    losses: list[float | None] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    failure: Failure | None = None
    # with --probe: mean seconds per step of data wait, compute and the rest (verify.probe_split, docs/probe.md)
    time_split: dict[str, float | None] | None = None
    slot: str = "all"  # the device set it ran on: "gpu:0,1", "cpu:1"; "all" without --slots
    wave: int | None = None  # the trials that ran at the same time share a wave (a block of the comparison)
    executor: str = "local"  # "local" (a subprocess here) or "ray" (a Ray task)
    start_s: float | None = None  # seconds since verify started
    end_s: float | None = None


class ArmSummary(BaseModel):
    label: str
    changes: list[str] = Field(default_factory=list)
    trials: int = 0
    ok_trials: int = 0
    global_batch: int | None = None
    samples_per_s: float | None = None  # mean over ok trials
    samples_per_s_sd: float | None = None
    samples_per_s_cv: float | None = None
    tokens_per_s: float | None = None
    step_time_s: float | None = None  # mean of per-trial medians
    cpu_s_per_step: float | None = None
    startup_s: float | None = None  # mean start-up overhead
    peak_memory_gib: float | None = None
    gpu_util_mean_pct: float | None = None
    time_split: dict[str, float | None] | None = None  # with --probe: mean of its ok trials' (verify.probe_split)
    argv: list[str] = Field(default_factory=list)
    env: dict[str, str | None] = Field(default_factory=dict)  # changed env only (None = unset)


class LossParity(BaseModel):
    checked: bool
    ok: bool | None = None
    steps_compared: int = 0
    max_abs_diff: float | None = None
    max_rel_diff: float | None = None
    worst_step: int | None = None
    rel_tol: float = 2e-2
    abs_tol: float = 5e-3
    reason: str = ""


class AblationRow(BaseModel):
    label: str
    changes: list[str]
    verdict: Verdict
    gain: float | None = None
    ci: list[float] | None = None
    samples_per_s: float | None = None
    reason: str = ""


class CandidateRow(BaseModel):
    """One candidate of a sweep (--try / --candidate) against the baseline, best first."""
    label: str
    changes: list[str]
    verdict: Verdict
    gain: float | None = None
    ci: list[float] | None = None
    samples_per_s: float | None = None
    trials: int = 0
    stopped_early: bool = False  # clearly worse or failed: no further rounds
    reason: str = ""


class SlotRow(BaseModel):
    """One device set of --slots: its trials and how fast it runs relative to the others (1.0 = average)."""
    slot: str
    trials: int
    samples_per_s: float | None = None  # mean over its ok trials (every arm)
    relative: float | None = None  # its speed factor, the arms' mix taken out
    slow: bool = False


class VerifyReport(BaseModel):
    schema_version: int = SCHEMA_VERSION
    verdict: Verdict
    reason: str = ""
    metric: str = "samples_per_s"
    gain: float | None = None
    ci: list[float] | None = None
    confidence: float = 0.95
    min_effect: float = 0.03
    df: float | None = None
    baseline: ArmSummary
    patched: ArmSummary
    trials: list[TrialResult] = Field(default_factory=list)
    changes: list[Change] = Field(default_factory=list)
    loss_parity: LossParity | None = None
    ablation: list[AblationRow] = Field(default_factory=list)
    candidates: list[CandidateRow] = Field(default_factory=list)  # a sweep's candidates, best first
    slots: list[SlotRow] = Field(default_factory=list)  # with --slots: per-slot throughput
    # a sweep whose best candidate is confirmed: the patch to apply (label, the command that writes it, its diff)
    best_patch: dict[str, Any] | None = None
    failure: Failure | None = None
    job: dict[str, Any] = Field(default_factory=dict)
    settings: dict[str, Any] = Field(default_factory=dict)
    sampler: str | None = None  # how GPU metrics were sampled, or why not
    notes: list[str] = Field(default_factory=list)
    elapsed_s: float | None = None
    stopped_because: str | None = None  # why the experiment ran no more rounds (decided, the round limit, a failure)
