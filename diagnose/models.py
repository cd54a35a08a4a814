"""The canonical data model shared by every stage.

Contract:
- `Run` is what the parser produces from any mix of ms-swift outputs: the steps
  table, eval rows, the summary dict, the launch configuration, dataset and model
  statistics, the detected version with the clue that decided it, and events.
- `StepsTable` holds one row per logged *training* step in numpy columns (no
  pandas at parse time: start-up speed matters).  Missing values are NaN and a
  per-column `present` mask tells "absent" from a real NaN/inf that ms-swift
  printed.  `interval_s` is seconds per optimizer step over the interval ending at
  that row, derived from consecutive rows (ms-swift's train_speed is cumulative).
- Line numbers are 1-based and refer to `line_file` (the stdout capture when one
  was given, else logging.jsonl).
"""
from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

STEP_COLUMNS: tuple[str, ...] = (
    "step",  # global step (optimizer steps)
    "max_steps",
    "loss",
    "grad_norm",
    "learning_rate",
    "token_acc",
    "memory_gib",  # ms-swift memory(GiB): max reserved, see reference 1.4
    "epoch",
    "elapsed_s",  # seconds since train begin, derived from train_speed
    "train_speed_s_per_it",  # ms-swift's cumulative speed, converted to s/it
    "interval_s",  # seconds per optimizer step over the interval ending here
    "line",
)
# columns only some trainers print (other dialects' step rows: parse.dialects): created when first read, so an
# ms-swift log of a million steps does not pay for them
EXTRA_COLUMNS: tuple[str, ...] = ("data_time_s", "samples_per_s", "tokens_per_s", "mfu_pct", "loss_scale")


class StepsTable:
    """Columnar table of training steps; see module docstring."""

    __slots__ = ("cols", "_present")

    def __init__(self, cols: dict[str, np.ndarray] | None = None, present: dict[str, np.ndarray] | None = None):
        n = 0
        if cols:
            n = len(next(iter(cols.values())))
        self.cols: dict[str, np.ndarray] = {}
        for name in STEP_COLUMNS:
            arr = (cols or {}).get(name)
            self.cols[name] = np.asarray(arr, dtype=np.float64) if arr is not None else np.full(n, np.nan)
        for name in EXTRA_COLUMNS:
            arr = (cols or {}).get(name)
            if arr is not None:
                self.cols[name] = np.asarray(arr, dtype=np.float64)
        self._present = {k: np.asarray(v, dtype=bool) for k, v in (present or {}).items()}

    def __len__(self) -> int:
        return len(self.cols["step"])

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self.cols and name in EXTRA_COLUMNS:
            self.cols[name] = np.full(len(self), np.nan)
        return self.cols[name]

    def present(self, name: str) -> np.ndarray:
        """Rows where the value was printed (NaN/inf printed by ms-swift count as present)."""
        if name in self._present:
            return self._present[name]
        return ~np.isnan(self[name])

    def has(self, name: str) -> bool:
        return bool(len(self)) and bool(self.present(name).any())

    def row(self, i: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in STEP_COLUMNS + tuple(c for c in EXTRA_COLUMNS if c in self.cols):
            if not self.present(name)[i]:
                continue
            v = float(self.cols[name][i])
            out[name] = int(v) if name in ("step", "max_steps", "line") and math.isfinite(v) else v
        return out

    def last(self) -> dict[str, Any] | None:
        return self.row(len(self) - 1) if len(self) else None

    def take(self, idx: np.ndarray) -> StepsTable:
        return StepsTable({k: v[idx] for k, v in self.cols.items()}, {k: v[idx] for k, v in self._present.items()})

    def to_pandas(self):  # pandas only when asked for
        import pandas as pd

        return pd.DataFrame({k: v for k, v in self.cols.items()})


class Event(BaseModel):
    kind: str
    line: int
    text: str
    file: str | None = None
    detail: dict[str, Any] = Field(default_factory=dict)


class DatasetStats(BaseModel):
    split: Literal["train", "val"] = "train"
    mean: float
    std: float
    min: float
    max: float
    size: int
    line: int | None = None


class ModelInfo(BaseModel):
    cls: str | None = None
    params_m: float | None = None
    trainable_m: float | None = None
    trainable_pct: float | None = None
    buffers_m: float | None = None
    line: int | None = None
    fields: dict[str, str] = Field(default_factory=dict)  # from model_info: ModelInfo(...)


class LaunchConfig(BaseModel):
    """How the job was started and with which effective flag values."""

    argv: list[str] | None = None  # the swift CLI argv after the script path (from `run sh:`)
    command: str | None = None  # sft | pt | rlhf | megatron sft | ...
    launcher: str | None = None  # plain | torchrun
    nproc_per_node: int | None = None
    nnodes: int | None = None
    flags: dict[str, Any] = Field(default_factory=dict)  # effective values (args dump/args.json, argv over it)
    flag_sources: dict[str, str] = Field(default_factory=dict)  # flag -> where the value came from
    args_class: str | None = None  # SftArguments / TrainArguments / MegatronTrainArguments ...
    line: int | None = None


class Run(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    sources: list[str] = Field(default_factory=list)
    line_file: str | None = None
    recognized: bool = False  # anything ms-swift-specific matched (decides the version and fix dialect, not whether to diagnose)
    trainer: Literal["ms-swift", "ms-swift-megatron", "megatron-lm", "llama-factory", "trl", "hf-trainer", "deepspeed",
                     "unknown"] = "unknown"
    swift_version: str | None = None
    version_clue: str | None = None
    steps: StepsTable = Field(default_factory=StepsTable, exclude=True)
    evals: list[dict[str, Any]] = Field(default_factory=list)
    summary: dict[str, Any] | None = None
    launch: LaunchConfig = Field(default_factory=LaunchConfig)
    dataset: DatasetStats | None = None
    val_dataset: DatasetStats | None = None
    model: ModelInfo | None = None
    world_size: int | None = None
    local_world_size: int | None = None
    device_count: int | None = None
    output_dir: str | None = None
    settings: dict[str, str] = Field(default_factory=dict)  # "Setting args.X: Y" lines
    env_settings: dict[str, str] = Field(default_factory=dict)  # MAX_PIXELS-style lines
    events: list[Event] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    preprocess: list[dict[str, Any]] = Field(default_factory=list)  # tqdm Map/Filter rates seen
    progress: dict[str, Any] | None = None  # last training progress bar (step/total)
    snapshot: dict[str, Any] | None = None  # nvidia-smi / gpustat / free / df pasted beside the log (parse.snapshots)
    environment: dict[str, str] = Field(default_factory=dict)  # python, NCCL, CUDA, driver versions the text shows
    failures: list[dict[str, Any]] = Field(default_factory=list)  # torchrun's failure table entries (parse.torchrun)
    # per rank: its flight recorder dump's last collectives (parse.flight_recorder.read_dump)
    flight_recorder: list[dict[str, Any]] = Field(default_factory=list, exclude=True)
    probe: Any = Field(default=None, exclude=True)  # swiftdoc probe files of the run (parse.probe.ProbeSet)
    probe_summary: dict[str, Any] | None = Field(default=None, exclude=True)  # a saved record's probe section
    nodes: dict[str, int] = Field(default_factory=dict)  # capture file -> its node rank (torchrun --node_rank in `run sh:`)
    timers: list[dict[str, Any]] = Field(default_factory=list)  # DeepSpeed wall_clock_breakdown rows: {line, name: ms}
    # Lightning profiler report rows: {line, action, mean_s, total_s, calls, pct} (parse.lines._profiler_row)
    profiler_actions: list[dict[str, Any]] = Field(default_factory=list)
    iter_times: list[dict[str, Any]] = Field(default_factory=list)  # per-iteration {line, time_s, data_time_s} (mmengine, YOLOX...)
    checkpoints: list[dict[str, Any]] = Field(default_factory=list)  # saves seen: {path, step, line}
    loss_scales: list[dict[str, Any]] = Field(default_factory=list)  # fp16 loss-scale drops seen: {line, scale}
    nonfinite: dict[str, list[int]] = Field(default_factory=dict)  # metric -> [rows printed nan/inf, first line]
    metric_ranges: dict[str, list[float]] = Field(default_factory=dict, exclude=True)  # step-row metric -> [min, max, n]
    step_dialect: str | None = None  # the steps came from another trainer's lines (parse.dialects), or a tqdm bar
    total_lines: int = 0
    header_line: int | None = None  # first line that shows the start of the run (launch echo, start marker, args dump)
    loop_start_line: int | None = None  # a trainer's own line that the training loop began ('***** Running training *****')
    lr_announced: list[dict[str, Any]] = Field(default_factory=list)  # 'Updating learning rate to X' / torch's 'Adjusting learning rate of group 0 to X.'
    data_time_avg: dict[str, Any] | None = None  # the last running averages of iteration and data time (AverageMeter rows)
    preprocess_cut: dict[str, Any] | None = None  # the last preprocessing bar the paste cut after its percentage
    model_loaded_line: int | None = None  # transformers' 'Loading checkpoint shards' bar at 100%: the model is in memory
    ended: bool = False  # "End time of running main" seen / summary present
    end_line: int | None = Field(default=None, exclude=True)  # where the end showed (line of the capture that had it)

    def unfinished_preprocess(self, before: int | None = None, started: bool = False) -> str:
        """The last preprocessing pass the text shows (before line `before`), when it had not finished: 'WHAT at
        done/total' from a bar with counts, 'WHAT at N%' from one cut after its percentage; '' otherwise.
        `started`: only a pass that had done something (one at 0 is a stall, DL011's)."""
        counted = [r for r in self.preprocess if before is None or (isinstance(r.get("line"), int) and r["line"] < before)]
        last = counted[-1] if counted else None
        cut = self.preprocess_cut
        if cut and (before is None or cut["line"] < before) and (last is None or cut["line"] > last.get("line", 0)):
            return f"{cut['what']} at {cut['pct']}%" if (0 if started else -1) < cut["pct"] < 100 else ""
        if last and last.get("total") and (0 if started else -1) < last["done"] < last["total"]:
            return f"{last.get('what') or 'a preprocessing pass'} at {last['done']}/{last['total']}"
        return ""

    @property
    def max_steps(self) -> int | None:
        ms = self.steps["max_steps"]
        if len(ms) and not np.isnan(ms[-1]):
            return int(ms[-1])
        v = self.launch.flags.get("max_steps")
        if isinstance(v, (int, float)) and v > 0:
            return int(v)
        return None
