"""Recognisers for the informative non-step lines ms-swift prints (all versions).

Contract: `normalize(raw)` strips what wraps a line (ANSI colours, `> ` quotes
from pasted issues, `[rank3]:` prefixes, leading timestamps) and keeps the last
`\\r` fragment that carries text.  `InfoScanner.feed(lineno, text)` updates a
`Run` in place: version line, `run sh:` argv, args dump (2.x single-line repr and
3.x/4.x multi-line sorted form, Megatron repr), rank/world_size lines (both
forms), `Dataset Token Length`, `model_parameter_info`, `model_info`,
`output_dir`, `Setting args.X: Y`, multimodal env lines, run start/end markers,
checkpoint saves, tqdm `Map (num_proc=N)` rates and the training progress bar,
eval and summary dicts, Megatron 3.x pipe-separated iteration lines; and what
users paste beside a log: training rows in any shape (JSON lines, HF Trainer
dicts, pretty-printed trainer_state objects, several dicts glued on one line:
`step_dicts`), tqdm bars told apart (training, preprocessing, eval, loading),
DeepSpeed wall-clock timers, `data_time` iteration lines, transformers' notebook table copied from
Jupyter/Colab (`Step | Training Loss | ...`), headerless numeric CSV tables (a column that ends nan is nan), and
host/GPU snapshots (`parse.snapshots`).  `finish()` closes what the end of input cut.
"""
from __future__ import annotations

import re
from typing import Any

from diagnose.models import DatasetStats, ModelInfo, Run
from diagnose.parse.args import parse_args_body, parse_run_sh
from diagnose.parse.dicts import is_train_row, iter_dicts
from diagnose.parse.needles import any_of
from diagnose.parse.prefix import strip_paste
from diagnose.parse.snapshots import Snapshots
from diagnose.parse.values import to_number

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

DATASET = re.compile(
    # the ± may arrive mangled from GBK / latin-1 captures: accept any 1-3 non-digit characters
    r"Dataset Token Length: ([\d.]+)[^\d\s,]{1,3}([\d.]+), min=([\d.]+), max=([\d.]+), size=(\d+)"
)
PARAMS = re.compile(
    r"(?:model_parameter_info: )?(\w+): ([\d.]+)M Params \(([\d.]+)M Trainable \[([\d.]+)%\]\), ([\d.]+)M Buffers"
)
RANK_LINE = re.compile(r"rank: (-?\d+), local_rank: (-?\d+), world_size: (\d+), local_world_size: (\d+)")
VERSION = re.compile(r"swift\.__version__: (\d+\.\d+\.\d+(?:\.?(?:post|dev|rc)\d+)?)")
SETTING = re.compile(r"Setting args\.(\w+): (.+?)(?: because .*)?$")
ENV_SET_1 = re.compile(r"Setting (\w+): ([^.\s]+(?:\.\d+)?)\. You can adjust this hyperparameter through the environment variable: `(\w+)`")
ENV_SET_2 = re.compile(r"Using environment variable `(\w+)`, Setting (\w+): (\S+?)\.?$")
_METRICS_ROW = re.compile(r"^\s*(train_loss|train_runtime|train_samples_per_second|train_steps_per_second)\s+=\s+(\S+)\s*$")
MEGATRON = re.compile(r"iteration\s+(\d+)/\s*(\d+)\s*\|")


def normalize(raw: str) -> str:
    s = raw
    if "\x1b" in s:
        s = _ANSI.sub("", s)
    if "\r" in s:
        frags = [f for f in s.split("\r") if f.strip()]
        s = frags[-1] if frags else ""
    return strip_paste(s)[0].rstrip("\n")


# tqdm: '{desc}: {pct}%|{bar}| {n}/{total} [{elapsed}<{remaining}, {rate}{unit}]' (rate '?' while unknown)
BAR = re.compile(
    r"(?P<desc>[A-Za-z][^|\r%]*?)?:?\s*(?P<pct>\d+)%\|[^|]*\|\s*(?P<done>\d+)/(?P<total>\d+)\s*"
    r"\[(?P<elapsed>[\d:]+)<(?P<remaining>[\d:?]+),\s*(?P<rate>[\d.]+|\?)\s*(?:(?P<unit>s/it|it/s|[A-Za-z]+/s)|$)"
)
# the data-preparation bars: datasets' Map/Filter/'Generating train split'/'Creating json from Arrow format', trainers'
# own 'Creating dataset split', 'Building index', 'Processing'/'Reading' data ('Loading checkpoint shards' is the model)
_PREPROCESS_BAR = re.compile(r"^(?:Map|Filter|Running tokenizer|Tokeniz|Generating|Converting|Packing|Grouping|Preprocess|Encod"
                             r"|Creating (?:dataset|data|json|parquet|csv|\w+ split)|Building (?:dataset|data|index|prompt)"
                             r"|Processing (?:dataset|data|samples?|examples?)|Reading (?:dataset|data|samples?|examples?)"
                             r"|Loading (?:dataset|data(?! ?loader))|Shuffling|Sorting (?:dataset|data|by length))", re.I)
_LR_ANNOUNCE = re.compile(r"(?:Adjusting learning rate of group \d+ to|Updating learning rate to|[Ll]earning rate "
                          r"(?:set|decayed) to)\s*([0-9]+(?:\.[0-9]*)?(?:[eE][-+]?\d+)?)")
_NUM_PROC = re.compile(r"\s*\(num_proc=\d+\)")  # datasets' '(num_proc=N)' in a pass's name
# a bar cut right after its percentage: '{desc}: {pct}%|' and the bar's blocks, nothing after
_PCT_ONLY_BAR = re.compile(r"^(?P<desc>[A-Za-z][^|\r%]{0,120}?):?\s*(?P<pct>\d{1,3})%\|[^|]{0,200}$")
# DeepSpeed ('Attempted loss scale: 8.0, reducing to 4.0', fused_optimizer 'Reducing dynamic loss scale from 8.0 to
# 4.0'), apex ('Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 16384.0')
# fairseq trainer.py: logger.info("NOTE: overflow detected, " + str(e)) with DynamicLossScaler's OverflowError("setting
# loss scale to: " + str(self.loss_scale)) ('| WARNING: overflow detected, ...' before fairseq 0.10)
_FAIRSEQ_SCALE = re.compile(r"overflow detected, setting loss scale to: ([\d.]+(?:e[+-]?\d+)?)")
_LOSS_SCALE = re.compile(r"(?:loss scale: [\d.e+]+, reducing to|Reducing dynamic loss scale from [\d.e+]+ to|"
                         r"reducing loss scale to)\s*([\d.]+(?:e[+-]?\d+)?)")
# a dynamic loss scale printed as a value: below 1 it has underflowed (Megatron's bf16 prints 'loss scale: 1.0')
_LOSS_SCALE_PRINTED = re.compile(r"\bloss_scale\s?:\s*([\d.]+(?:e[+-]?\d+)?)")
_SHARD = re.compile(r"#(\d+)\s*:?\s*$")  # the per-process tag before a bar's percentage
# a tqdm bar without a total (an iterable dataset, Lightning's 'Epoch 2: : 17671it [1:05:34,  4.49it/s, loss=2.15]')
OPEN_BAR = re.compile(r"(?P<desc>[A-Za-z][^|\r%\[]*?)?[:\s]*(?P<done>\d+)it \[(?P<elapsed>[\d:]+)(?:<\?)?,\s*"
                      r"(?P<rate>[\d.]+)(?P<unit>s/it|it/s)")
_EVAL_BAR = re.compile(r"^(?:Val|Eval|eval|Evaluat|Predict|Test|Class\s+Images\s)")  # ultralytics' val bar: 'Class Images ...'
_OTHER_BAR = re.compile(r"^(?:Loading|Downloading|Fetching|Saving|Uploading|Merging)", re.I)
_JSON_KV = re.compile(r'^\s*"([^"]{1,80})":\s*(-?[\d.]+(?:[eE][-+]?\d+)?|NaN|-?Infinity|null|true|false|"[^"]*")\s*,?\s*$')
# the same, pretty-printed by Python (pprint / print of a dict over several lines): 'key': value, nan, None
_PY_KV = re.compile(r"^\s*'([^']{1,80})':\s*(-?[\d.]+(?:[eE][-+]?\d+)?|nan|-?inf|None|True|False|'[^']*')\s*,?\s*$")
_TRAINER_HINTS = (
    ("ms-swift", ("[INFO:swift]", "[WARNING:swift]", "/swift/", "swift.__version__", "swift sft", "swift rlhf", "swift pt ")),
    ("megatron", ("megatron/", "megatron sft", "megatron rlhf", "| consumed samples:", "Megatron")),  # Megatron training_log: ' iteration N/M | consumed samples:'
    ("llama-factory", ("llamafactory", "LLaMA-Factory", "llamafactory-cli", '"current_steps"')),
    ("deepspeed", ("[stage3.py", "deepspeed/", "DeepSpeed")),
    ("trl", ("/trl/", "GRPOTrainer", "DPOTrainer")),
    ("hf-trainer", ("transformers/trainer.py", "train metrics *****", "Running training *****")),
)


_TIMER = re.compile(r"(\w+): ([\d.]+)")
_ENV_FACTS = (
    ("python", re.compile(r"/python(3\.\d+)/(?:site|dist)-packages/")),
    ("nccl", re.compile(r"NCCL version (\d+\.\d+\.\d+)")),
    ("cuda", re.compile(r"CUDA Version: (\d+\.\d+)")),
    ("driver", re.compile(r"Driver Version: (\d+\.\d+(?:\.\d+)?)")),
    ("torch", re.compile(r"torch\.__version__[:=\s]+'?(\d+\.\d+\.\d+\S*?)'?(?:\s|$|,)")),
    ("transformers", re.compile(r"transformers\.__version__[:=\s]+'?(\d+\.\d+\.\d+\S*?)'?(?:\s|$|,)")),
)
_DATA_TIME = re.compile(r"(?<![\w])(?:iter_time|time):\s*([\d.]+)s?\b.*?\bdata_time:\s*([\d.]+)")


def _clock_s(text: str) -> float | None:
    """tqdm's '1:22:56' / '47:23' / '227:39:40' (and transformers' runtime '3:32:59.59') as seconds; None for '?'."""
    if not text or "?" in text:
        return None
    total = 0.0
    parts = text.split(":")
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if not (part.isdigit() or last and part.replace(".", "", 1).isdigit()):
            return None
        total = total * 60 + (float(part) if last else int(part))
    return total


# a header of column names with at least one loss ('      Epoch    GPU_mem   box_loss   cls_loss   dfl_loss  Instances
# Size': ultralytics engine/trainer.py progress_string, "%11s" * (4 + len(loss_names)); YOLOv5 train.py the same)
_TABLE_HEADER = re.compile(r"^\s*(?=[^\n]*\b\w*loss\b)(?:[A-Za-z][\w()./-]*\s+){3,}[A-Za-z][\w()./-]*\s*$", re.I)


def _table_row(header: list[str], text: str) -> dict[str, Any]:
    """The bar's description read under the header above it ('2/1000  17.2G  nan  nan  nan  65  640'): the sum of
    the loss columns (nan when any is nan) and the epoch; {} when the columns do not line up."""
    cells = text.strip().rstrip(":").split()
    if len(cells) != len(header):
        return {}
    out: dict[str, Any] = {}
    losses = [to_number(c) for h, c in zip(header, cells) if "loss" in h.lower()]
    if losses and all(isinstance(v, (int, float)) for v in losses):
        out["loss"] = float(sum(losses))
    for h, c in zip(header, cells):
        if h.lower() == "epoch" and re.match(r"^\d+(?:/\d+)?$", c):
            out["epoch"] = float(c.split("/")[0])
    return out


_POSTFIX = re.compile(r",\s*([A-Za-z][\w/.-]{0,40})=([^\s,\]]+)")


def _bar_matches(raw: str, bar: re.Pattern[str]):
    """The '\r' fragments of a raw line, last first (tqdm redraws a bar in place), paste prefixes stripped, that the
    bar pattern matches: (body, match)."""
    for frag in reversed([f for f in _ANSI.sub("", raw).split("\r") if f.strip()]):
        body = strip_paste(frag)[0]
        m = bar.search(body)
        if m:
            yield body, m


def _per_s(rate: float | None, unit: str | None) -> float | None:
    """A bar's rate as items per second (tqdm prints 's/it' below one a second); None when the paste cut the unit."""
    if unit is None or rate is None:
        return None
    return (1 / rate if rate else None) if unit == "s/it" else rate


def _bar_postfix(tail: str) -> dict[str, float]:
    """The numbers of a tqdm bar's postfix (', loss=2.15, v_num=3hqp]'), under their canonical names (loss...)."""
    from diagnose.parse.dialects import SYNONYMS, convert

    out: dict[str, float] = {}
    for k, v in _POSTFIX.findall(tail.split("]", 1)[0]):
        canon = SYNONYMS.get(k.lower())
        if canon and canon[0] in ("loss", "grad_norm", "lr") and canon[0] not in out:
            num = convert(v, canon[1])
            if num is not None:
                out[canon[0]] = num
    return out


_WRAPPED_SEG = re.compile(r"^\s*([A-Za-z][A-Za-z _()/.-]{0,60}?)\s*:\s*(-?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
                          r"(?:\s*(?:ms|s|MB|MiB|GB|GiB|%))?|nan|NaN|-?inf)\s*$")


def _wrapped_pairs(s: str) -> dict[str, str]:
    """`loss scale: 1.0 | grad norm: nan |`: a line made only of `key: number` segments (split by '|' or ', '),
    else {}."""
    segs = [g for g in re.split(r"\||,\s+", s) if g.strip()]
    out: dict[str, str] = {}
    for g in segs:
        m = _WRAPPED_SEG.match(g)
        if not m:
            return {}
        out.setdefault(m.group(1).strip(), m.group(2))
    return out


# The line recognisers, tried in this order on each non-step line: (name, needles - a cheap prefilter,
# the line must hold one of them -, handler method).  A handler returns True when the line was its kind.
# Each has its line cases in tests/data/line_cases.yaml.
# transformers utils/notebook.py NotebookProgressCallback.on_train_begin: column_names = [first_column] + ["Training
# Loss"] (+ "Validation Loss"), first_column 'Step' or 'Epoch'; copied from a notebook the cells are set apart by
# tabs, by ' | ' (a Markdown conversion) or by runs of spaces
# nnU-Net v2's epoch header: 'Current learning rate: 0.01' alone on its line (after its timestamp)
_LR_LINE = re.compile(r"(?:^|: )Current learning rate: [\d.eE+-]+\s*$")
_NB_HEADER = re.compile(r"^\s*(?:\|\s*)?(?:Step|Epoch)(?:\t|\s*\|\s*|\s{2,})Training Loss\b")
_NB_SPLIT = re.compile(r"\s*\|\s*|\t+|\s{2,}")
# a row of a numeric CSV table: an integer, then three or more numbers or nan/inf ('209,nan,4.16,7.72,24.01': timm's
# summary.csv, epoch,train_loss,eval_loss,eval_top1,eval_top5, pasted without its header)
_CSV_ROW = re.compile(r"^\s*\d{1,9}(?:,\s?(?:-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|-?inf)){3,40}\s*$")
_BARE_PAIR = re.compile(r"^\s*(\d{1,12})\s+(-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|-?inf)\s*$")


def _nan_columns(s: str) -> bool:
    """A row of bare numbers (a timestamp first allowed) with three or more 'nan' columns and no word in it."""
    toks = s.split()
    nans = sum(1 for t in toks if t == "nan")
    if nans < 3:
        return False
    nums = sum(1 for t in toks if _NUM_TOKEN.match(t))
    return nums >= 3 and nans + nums + sum(1 for t in toks if set(t) <= set("-|,")) == len(toks)


_NUM_TOKEN = re.compile(r"^[-+]?(?:\d[\d,:]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?%?$")


# 'key: nan' / 'key=inf' anywhere in a row (a metric no dialect field takes)
_NONFINITE_PAIR = re.compile(r"([A-Za-z_][\w./-]{0,60})\s*[:=]\s*(nan|-?inf)\b")
# a running average printed nan/inf beside a finite current value (torchvision-style MetricLogger / SmoothedValue
# '{median:.4f} ({global_avg:.4f})', AverageMeter '{val} ({avg})': 'total_loss: 6.7223 (inf)'): a step before was
_NONFINITE_AVG = re.compile(r"([A-Za-z_][\w./-]{0,60})\s*[:=]?\s+-?[\d.]+(?:e[-+]?\d+)?\s+\((nan|-?inf)\)")


def _dialect_needles() -> tuple[str, ...]:
    """The longest needle of every dialect (parse/dialects.yaml; a dialect needs all of its needles): a line holding
    none of them is no dialect's row."""
    from diagnose.parse.dialects import dialects

    return tuple(dict.fromkeys(max(d.needles, key=len) for d in dialects() if d.needles)) or ("\x00",)


RECOGNISERS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("environment", ("site-packages/", "NCCL version", "CUDA Version", "Driver Version", "__version__"), "_environment"),
    ("run_sh", ("run sh: `",), "_run_sh"),
    ("log_dict", ("{'", '{"'), "_dict_line"),
    ("version", ("swift.__version__",), "_version"),
    ("args_dump", ("Arguments(",), "_args_dump"),
    ("dataset_stats", ("Token Length",), "_dataset"),
    ("model_params", ("M Params (",), "_params"),
    ("model_info", ("model_info: ModelInfo(",), "_model_info"),
    ("rank_line", ("world_size",), "_rank_line"),
    ("device_count", ("device_count: ",), "_device_count"),
    ("setting", ("Setting args.",), "_setting"),
    ("streaming_workers", ("Using IterableDataset, setting args.dataloader_num_workers to 1",
                           "Using streaming dataset, setting args.dataloader_num_workers to 1"), "_streaming_workers"),
    ("env_setting", ("environment variable",), "_env_setting"),
    # transformers trainer_pt_utils.log_metrics: '***** train metrics *****' then '  train_loss = 1.234' rows
    ("metrics_table", ("train_loss ", "train_runtime ", "train_samples_per_second "), "_metrics_table"),
    ("output_dir", ("output_dir: ", "logging_path: "), "_output_dir"),
    # ms-swift's end marker; transformers Trainer.train 'Training completed. Do not forget to share your model on
    # huggingface.co/models =)'; Lightning fit_loop.py '`Trainer.fit` stopped: `max_steps=N` reached.' (max_epochs too)
    ("run_end", ("End time of running main", "Training completed. Do not forget to share your model",
                 "`Trainer.fit` stopped: `max_"), "_end"),
    ("run_start", ("Start time of running main",), "_start"),
    # the trainers' own lines that open the training loop (not the run): transformers Trainer._inner_training_loop
    # '***** Running training *****'; detectron2 engine/train_loop.py 'Starting training from iteration {}';
    # ultralytics engine/trainer.py 'Starting training for {epochs} epochs...' ('... hours...' with time=);
    # nnU-Net v2 nnUNetTrainer.on_train_epoch_start 'Current learning rate: {lr}' after 'Epoch {n}'; lerobot
    # scripts/train.py 'Start offline training on a fixed dataset'
    ("loop_start", ("Running training *****", "Starting training from iteration ", "Starting training for ",
                    "Current learning rate: ", "Start offline training on a fixed dataset"), "_loop_start"),
    # a schedule announcing the learning rate it set: torch/optim/lr_scheduler.py print_lr with verbose=True
    # ('Adjusting learning rate of group 0 to 1.0000e-03.'), training scripts' adjust_learning_rate ('Updating
    # learning rate to 1.68e-24', Time-Series-Library utils/tools.py); read, never claimed (the line goes on)
    ("lr_announce", ("Adjusting learning rate of group", "Updating learning rate to", "earning rate set to",
                     "earning rate decayed to"), "_lr_announce"),
    ("checkpoint", ("Saving model checkpoint to ", "last_model_checkpoint: "), "_checkpoint"),
    ("deepspeed_config", ("Using deepspeed: ",), "_deepspeed"),
    ("megatron_row", ("iteration",), "_megatron_line"),
    ("ds_timers", ("time (ms) |",), "_timers"),
    ("loss_scale", ("reducing to", "Reducing dynamic loss scale", "reducing loss scale to", "loss_scale :",
                    "loss_scale:", "overflow detected, setting loss scale to"), "_loss_scale"),
    ("profiler_row", ("train_dataloader_next", "run_training_epoch", "get_train_batch"), "_profiler_row"),
    ("dialect_row", _dialect_needles(), "_dialect"),
    ("data_time", ("data_time",), "_data_time"),
    ("tqdm_bar", ("%|",), "_bars"),
    ("tqdm_open_bar", ("it [",), "_open_bar"),
)


_ANY_NEEDLE = any_of(n for _name, needles, _h in RECOGNISERS for n in needles)
_ANY_HINT = any_of(n for _name, needles in _TRAINER_HINTS for n in needles)


class InfoScanner:
    def __init__(self, run: Run):
        self.run = run
        self._args_lines: list[str] | None = None
        self._args_line = 0
        self._args_class: str | None = None
        self.megatron_rows: list[dict[str, Any]] = []
        self.map_rates: list[dict[str, Any]] = []
        self.progress: dict[str, Any] | None = None
        self.checkpoints: list[dict[str, Any]] = []
        self.layout_keys: list[list[str]] = []
        self.clues: dict[str, Any] = {}
        self.step_dicts: list[tuple[int, dict[str, Any]]] = []  # training rows read from text lines (JSON, HF, pretty)
        self.trainer_hints: dict[str, int] = {}
        self.snapshots = Snapshots()
        self.node_rank: int | None = None  # from this capture's `run sh:` (torchrun --node_rank)
        self._pretty: dict[str, Any] | None = None  # a pretty-printed JSON object being read (trainer_state.json)
        self._pretty_line = 0
        from diagnose.parse.dialects import GenericRows

        self.dialect_rows: list[tuple[int, Any]] = []  # (line, DialectRow): other trainers' step rows (parse.dialects)
        self.generic = GenericRows()  # `key: number` lines of a dialect the table does not know
        self._bare_pairs: list[tuple[int, int, str]] = []  # (line, step, value) of 'N value' lines
        self._csv_rows: list[tuple[int, list[str]]] = []  # (line, fields) of numeric CSV rows
        self._nb_cols: list[str] | None = None  # the columns of transformers' notebook table being read
        self.bar_rows: list[dict[str, Any]] = []  # every training tqdm bar update: step, total, s/it
        # a step row the paste or the terminal wrapped: [last line, the Megatron row dict or the DialectRow, lines]
        self._row_cont: list[Any] | None = None
        self._timer_block: dict[str, Any] | None = None  # the Megatron timer rows being read (see _timer_row)
        self._table_header: list[str] | None = None  # column names a trainer printed above its bar rows (YOLO)

    # --- args dump (multi-line) -------------------------------------------------
    def _args_feed(self, lineno: int, s: str) -> bool:
        if self._args_lines is None:
            return False
        t = s.strip()
        if t == ")" or t.endswith(")") and "=" not in t:
            self._finish_args()
            return True
        if "[INFO:" in s or "[WARNING:" in s or len(self._args_lines) > 2000:
            self._finish_args()
            return False
        self._args_lines.append(t)
        return True

    def _finish_args(self) -> None:
        body = "\n".join(self._args_lines or [])
        self._apply_args(parse_args_body(body, multiline=True), self._args_class, self._args_line, "args dump (multi-line)")
        self._args_lines = None

    def _apply_args(self, values: dict[str, Any], cls: str | None, lineno: int, how: str) -> None:
        launch = self.run.launch
        launch.args_class = cls
        launch.line = launch.line or lineno
        for k, v in values.items():
            if launch.flag_sources.get(k) != "argv":
                launch.flags[k] = v
                launch.flag_sources[k] = "args"
        self.clues["args_shape"] = how
        self.clues["args_keys"] = set(values)
        self.clues["args_class"] = cls

    # --- main entry -------------------------------------------------------------
    def feed(self, lineno: int, raw: str) -> None:
        if self._args_feed(lineno, raw):
            return
        s = normalize(raw)
        if not s.strip():
            return
        if self._pretty_feed(lineno, s):
            return
        if self.snapshots.feed(lineno, s):
            return
        if _ANY_HINT.search(s):
            for name, needles in _TRAINER_HINTS:
                if any(n in s for n in needles):
                    self.trainer_hints[name] = self.trainer_hints.get(name, 0) + 1
        if "inf)" in s or "nan)" in s:  # '(inf)', '(-inf)', '(nan)': the regex below decides
            # a loss only: a grad norm's average goes inf under fp16 loss scaling (skipped steps), which is normal
            avg = {f"{k} (running average)": x for k, x in _NONFINITE_AVG.findall(s) if "loss" in k.lower()}
            if avg:
                self.note_nonfinite(lineno, avg)
        # one pass over every recogniser's needles (a trie, parse.needles) before asking each of them
        if _ANY_NEEDLE.search(s) or (raw is not s and _ANY_NEEDLE.search(raw)):
            for _name, needles, handler in RECOGNISERS:
                # a tqdm bar may sit in an earlier '\r' fragment than the one normalize() kept: look at the raw line
                hay = raw if handler == "_bars" else s
                if any(n in hay for n in needles) and getattr(self, handler)(lineno, s, raw):
                    return
        if self._row_cont is not None and self._continue_row(lineno, s):
            return
        if self._nb_cols is not None and self._notebook_row(lineno, s):
            return
        if "Training Loss" in s and _NB_HEADER.match(s):  # transformers' notebook table, copied from Jupyter/Colab
            self._nb_cols = [c.strip() for c in _NB_SPLIT.split(s.strip().strip("|").strip())]
            return
        if ("loss" in s or "Loss" in s) and _TABLE_HEADER.match(s):  # 'Epoch GPU_mem box_loss ... Size' (ultralytics)
            self._table_header = s.split()
            return
        if "," in s and _CSV_ROW.match(s):
            if len(self._csv_rows) < 100_000:
                self._csv_rows.append((lineno, [f.strip() for f in s.split(",")]))
            return
        bare = _BARE_PAIR.match(s)
        if bare:  # 'step value' and nothing else ('76980 2.6496577': print(step, loss) in a custom loop)
            self._bare_pairs.append((lineno, int(bare.group(1)), bare.group(2)))
            return
        if not self.generic.feed(lineno, s) and "nan" in s and _nan_columns(s):
            # nothing claimed it: perhaps a step row of a dialect the table does not know; a row of bare numbers
            # with nan columns ('17940 0.00 nan 0.00 nan ...', a custom table without names) is nan all the same
            self.note_nonfinite(lineno, {"an unnamed column of a numeric row": "nan"})

    def _continue_row(self, lineno: int, s: str) -> bool:
        """The next line of a step row wrapped over several lines ('iteration 5/50 | elapsed time per iteration: ...
        |' then 'loss scale: 1.0 | grad norm: nan |'): a line right after the row made only of `key: number`
        segments adds its fields to that row (at most 4 lines)."""
        last, row, n = self._row_cont
        self._row_cont = None
        if lineno != last + 1 or n >= 4:
            return False
        pairs = _wrapped_pairs(s)
        if not pairs:
            return False
        if isinstance(row, dict):  # a Megatron row: raw segments, read by StepRows.add_megatron
            for k, v in pairs.items():
                row.setdefault(k, v)
        else:  # another trainer's row: canonical fields
            from diagnose.parse.dialects import SYNONYMS, convert

            vals = {}
            for k, v in pairs.items():
                k = k.lower()
                canon = SYNONYMS.get(k) or SYNONYMS.get(k.replace(" ", "_"))
                if canon and canon[0] not in row.values:
                    num = convert(v.split()[0], canon[1])
                    if num is not None:
                        row.values[canon[0]] = vals[canon[0]] = num
            self.note_nonfinite(lineno, vals)
        self._row_cont = [lineno, row, n + 1]
        return True

    # --- the recognisers (see RECOGNISERS): (lineno, normalised line, raw line) -> consumed? -----
    def _environment(self, lineno: int, s: str, raw: str) -> bool:
        """Versions the text shows in passing (never consumes the line: other recognisers read it too)."""
        env = self.run.environment
        for key, rx in _ENV_FACTS:
            if key not in env:
                m = rx.search(s)
                if m:
                    env[key] = m.group(1)
        return False

    def _run_sh(self, lineno: int, s: str, raw: str) -> bool:
        run = self.run
        run.header_line = run.header_line or lineno
        parsed = parse_run_sh(s)
        if parsed:
            run.recognized = True
            launch = run.launch
            launch.argv = parsed["argv"]
            launch.command = parsed["command"]
            launch.launcher = parsed["launcher"]
            launch.nproc_per_node = parsed.get("nproc_per_node")
            launch.nnodes = parsed.get("nnodes")
            self.node_rank = parsed.get("node_rank")  # per capture: several files of one job are its nodes
            launch.line = lineno
            for k, v in parsed["flags"].items():
                launch.flags[k] = v
                launch.flag_sources[k] = "argv"
        return True

    def _version(self, lineno: int, s: str, raw: str) -> bool:
        m = VERSION.search(s)
        if not m:
            return False
        self.run.recognized = True
        self.run.header_line = self.run.header_line or lineno
        self.clues["version_line"] = m.group(1)
        return True

    def _args_dump(self, lineno: int, s: str, raw: str) -> bool:
        idx = s.find("args: ")
        if idx < 0 or "Arguments(" not in s[idx:]:
            return False
        self.run.recognized = True
        self.run.header_line = self.run.header_line or lineno
        rest = s[idx + 6 :].strip()
        cls = rest.split("(", 1)[0]
        if rest.endswith(")") and len(rest) > len(cls) + 2:  # single-line repr (2.x, Megatron)
            self._apply_args(parse_args_body(rest[len(cls) + 1 : -1], multiline=False), cls, lineno, "args repr (single-line)")
        else:
            self._args_lines = []
            self._args_line = lineno
            self._args_class = cls
        return True

    def _dataset(self, lineno: int, s: str, raw: str) -> bool:
        m = DATASET.search(s)
        if not m:
            return False
        run = self.run
        run.recognized = True
        stats = DatasetStats(mean=float(m.group(1)), std=float(m.group(2)), min=float(m.group(3)), max=float(m.group(4)),
                             size=int(m.group(5)), line=lineno)
        if run.dataset is None:
            run.dataset = stats
        elif run.val_dataset is None:
            run.val_dataset = stats.model_copy(update={"split": "val"})
        return True

    def _params(self, lineno: int, s: str, raw: str) -> bool:
        m = PARAMS.search(s)
        if not m:
            return False
        run = self.run
        run.recognized = run.recognized or "model_parameter_info" in s
        info = run.model or ModelInfo()
        info.cls, info.params_m, info.trainable_m = m.group(1), float(m.group(2)), float(m.group(3))
        info.trainable_pct, info.buffers_m, info.line = float(m.group(4)), float(m.group(5)), lineno
        run.model = info
        return True

    def _model_info(self, lineno: int, s: str, raw: str) -> bool:
        info = self.run.model or ModelInfo()
        body = s.split("ModelInfo(", 1)[1].rstrip(")")
        info.fields = {k: str(v) for k, v in parse_args_body(body, multiline=False).items()}
        self.run.model = info
        return True

    def _rank_line(self, lineno: int, s: str, raw: str) -> bool:
        m = RANK_LINE.search(s)
        if not m:
            return False
        run = self.run
        run.recognized = run.recognized or "[INFO:swift]" in s
        run.world_size = int(m.group(3))
        run.local_world_size = int(m.group(4))
        self.clues["rank_line_prefixed"] = "[INFO:swift]" in s
        return True

    def _device_count(self, lineno: int, s: str, raw: str) -> bool:
        if not s.startswith("device_count: "):
            return False
        n = to_number(s.split(":", 1)[1])
        if isinstance(n, int):
            self.run.device_count = n
            self.clues["device_count_line"] = True
        return True

    def _setting(self, lineno: int, s: str, raw: str) -> bool:
        m = SETTING.search(s)
        if not m:
            return False
        self.run.settings[m.group(1)] = m.group(2).strip()
        return True

    def _metrics_table(self, lineno: int, s: str, raw: str) -> bool:
        """A row of transformers' final metrics table (trainer_pt_utils.log_metrics prints f"  {key: <{k_width}} =
        {value:>{v_width}}" under '***** train metrics *****'; *_runtime as h:mm:ss.ss): the run's summary, as the
        summary dict gives it."""
        m = _METRICS_ROW.match(s)
        if not m:
            return False
        key, value = m.group(1), m.group(2)
        summary = dict(self.run.summary or {})
        summary[key] = _clock_s(value) if key == "train_runtime" and ":" in value else to_number(value)
        self._summary(lineno, summary)
        return True

    def _streaming_workers(self, lineno: int, s: str, raw: str) -> bool:
        self.run.settings["dataloader_num_workers"] = "1"
        self.run.settings["streaming_forced_workers"] = "1"
        return True

    def _env_setting(self, lineno: int, s: str, raw: str) -> bool:
        m = ENV_SET_1.search(s)
        if m:
            self.run.env_settings[m.group(3)] = m.group(2)
            return True
        m = ENV_SET_2.search(s)
        if m:
            self.run.env_settings[m.group(1)] = m.group(3)
            return True
        return False

    def _output_dir(self, lineno: int, s: str, raw: str) -> bool:
        run = self.run
        if "output_dir: " in s and "[INFO:swift]" in s:
            run.output_dir = s.split("output_dir: ", 1)[1].strip()
            return True
        if "logging_path: " in s:
            run.output_dir = run.output_dir or s.split("logging_path: ", 1)[1].strip().rsplit("/", 1)[0]
            return True
        return False

    def _end(self, lineno: int, s: str, raw: str) -> bool:
        self.run.ended = True
        self.run.end_line = self.run.end_line or lineno
        return True

    def _start(self, lineno: int, s: str, raw: str) -> bool:
        self.run.recognized = True
        self.run.header_line = self.run.header_line or lineno
        return True

    def _loop_start(self, lineno: int, s: str, raw: str) -> bool:
        """A trainer's line that opens the training loop: the job got that far.  It is not the start of the run
        (users paste the banner alone to ask about its numbers), so it does not make the text a capture whose
        missing end means a stop."""
        if "Current learning rate: " in s and not _LR_LINE.search(s):
            return False
        self.run.loop_start_line = self.run.loop_start_line or lineno
        return True

    def _checkpoint(self, lineno: int, s: str, raw: str) -> bool:
        path = re.split(r"Saving model checkpoint to |last_model_checkpoint: ", s)[-1].strip()
        if path in ("None", ""):
            return True
        m = re.search(r"checkpoint-(\d+)", path)
        self.checkpoints.append({"path": path, "step": int(m.group(1)) if m else None, "line": lineno})
        return True

    def _deepspeed(self, lineno: int, s: str, raw: str) -> bool:
        self.run.settings["deepspeed_config"] = s.split("Using deepspeed: ", 1)[1][:2000]
        return True

    def _megatron_line(self, lineno: int, s: str, raw: str) -> bool:
        m = MEGATRON.search(s) if "|" in s else None
        if not m:
            return False
        self._megatron(lineno, s, m)
        return True

    def _timers(self, lineno: int, s: str, raw: str) -> bool:  # DeepSpeed wall_clock_breakdown
        row: dict[str, Any] = {"line": lineno}
        for seg in s.split("|")[1:]:
            m = _TIMER.search(seg)
            if m:
                row[m.group(1)] = float(m.group(2))
        if len(row) > 1:
            self.run.timers.append(row)
        return True

    def _loss_scale(self, lineno: int, s: str, raw: str) -> bool:
        """fp16 dynamic loss scaling giving up a step: the scale it falls to (DeepSpeed, apex)."""
        m = _LOSS_SCALE.search(s)
        if m:
            v = to_number(m.group(1))
            if isinstance(v, (int, float)):
                self.run.loss_scales.append({"line": lineno, "scale": float(v)})
            return True
        f = _FAIRSEQ_SCALE.search(s)
        if f:  # fairseq starts at 128 (--fp16-init-scale) and moves up and down; below 1 the overflow persists
            v = to_number(f.group(1))
            if isinstance(v, (int, float)) and v < 1:
                self.run.loss_scales.append({"line": lineno, "scale": float(v)})
            return True
        p = _LOSS_SCALE_PRINTED.search(s)
        if p:  # a scale printed as a value (NVIDIA DLLogger 'PARAMETER loss_scale : X'): only an underflow is news
            v = to_number(p.group(1))
            if isinstance(v, float) and 0 < v < 1:
                self.run.loss_scales.append({"line": lineno, "scale": v})
        return False

    def _lr_announce(self, lineno: int, s: str, raw: str) -> bool:
        m = _LR_ANNOUNCE.search(s)
        if m:
            v = to_number(m.group(1))
            if isinstance(v, (int, float)):
                self.run.lr_announced.append({"line": lineno, "lr": float(v)})
        return False

    def _dialect(self, lineno: int, s: str, raw: str) -> bool:
        from diagnose.parse.dialects import match_dialect

        if "%|" in raw:  # tqdm bars are told apart (training, preprocessing, eval) by `_bars`
            return False
        row = match_dialect(s)
        if row is None:
            return False
        self.dialect_rows.append((lineno, row))
        if row.kind == "timers" and row.label:
            self._timer_row(lineno, row.label, row.values.get("step_time_s"))
        self._row_cont = [lineno, row, 0] if row.kind == "train" and s.rstrip().endswith(("|", ",")) else None
        v = row.values
        # an eval row's loss is not the training loss the step features read: its nan counts as an eval metric's
        self.note_nonfinite(lineno, {f"eval {k}": x for k, x in v.items()} if row.kind == "eval" else v)
        hint = "nan" in s or "inf" in s.replace("INFO", "")  # 'inf' is in every mmengine row's 'INFO'
        more = {k: x for k, x in _NONFINITE_PAIR.findall(s) if k.lower() not in v} if hint else {}
        if more:  # the row's other metrics, whatever the dialect maps ('decode.loss_seg: nan')
            self.note_nonfinite(lineno, {f"eval {k}": x for k, x in more.items()} if row.kind == "eval" else more)
        if row.kind == "train" and v.get("step_time_avg_s") and v.get("data_time_avg_s") is not None:
            # AverageMeter's running averages since the epoch began: the last row's cover every batch, printed or not
            self.run.data_time_avg = {"line": lineno, "time_s": v["step_time_avg_s"], "data_time_s": v["data_time_avg_s"]}
        if row.kind == "train" and v.get("step_time_s") and v.get("data_time_s") is not None:
            self.run.iter_times.append({"line": lineno, "time_s": v["step_time_s"], "data_time_s": v["data_time_s"]})
        return True

    def _timer_row(self, lineno: int, name: str, seconds: float | None) -> None:
        """Megatron's timer block (megatron/core/timers.py, one row a line, max across ranks): 'batch-generator' runs
        inside 'forward-backward' (pretrain_gpt.py forward_step -> get_batch), so a block that has both gives an
        iteration's time (forward-backward + optimizer) and its data wait, read like any trainer's data_time."""
        blk = self._timer_block
        if blk is None or lineno != blk["_last"] + 1:
            self._flush_timers()
            blk = self._timer_block = {"_first": lineno}
        blk["_last"] = lineno
        if seconds is not None:
            blk.setdefault(name, seconds)

    def _flush_timers(self) -> None:
        blk, self._timer_block = self._timer_block, None
        if blk and "forward-backward" in blk and "batch-generator" in blk:
            total = blk["forward-backward"] + blk.get("optimizer", 0.0)
            if total > 0:
                self.run.iter_times.append({"line": blk["_first"], "time_s": total,
                                            "data_time_s": min(blk["batch-generator"], total)})

    def _data_time(self, lineno: int, s: str, raw: str) -> bool:
        m = _DATA_TIME.search(s)
        if not m:
            return False
        self.run.iter_times.append({"line": lineno, "time_s": float(m.group(1)), "data_time_s": float(m.group(2))})
        return True

    def _profiler_row(self, lineno: int, s: str, raw: str) -> bool:
        """A row of Lightning's profiler report (pytorch_lightning/profilers/simple.py `summary`: '|  action\t|
        mean\t|  calls\t|  total\t|  percent\t|' with extended=True, '|  action\t|  mean\t|  total\t|' without);
        the actions are the loops' own (`[_TrainingEpochLoop].train_dataloader_next` in training_epoch_loop.py,
        `run_training_epoch` in fit_loop.py; `get_train_batch` before Lightning 1.6)."""
        cells = [c.strip() for c in s.replace("\t", "|").split("|")]
        cells = [c for c in cells if c]
        if len(cells) not in (3, 5):
            return False
        nums = [to_number(c) for c in cells[1:]]
        if any(not isinstance(n, (int, float)) for n in nums):
            return False
        row = {"line": lineno, "action": cells[0], "mean_s": float(nums[0])}
        if len(nums) == 4:
            row.update(calls=int(nums[1]), total_s=float(nums[2]), pct=float(nums[3]))
        else:
            row["total_s"] = float(nums[1])
        self.run.profiler_actions.append(row)
        return True

    def _dict_line(self, lineno: int, s: str, raw: str = "") -> bool:
        used = False
        for d in iter_dicts(s):
            if is_train_row(d):
                self.step_dicts.append((lineno, d))
                used = True
            else:
                used = self.other_dict(lineno, d) or used
        return used

    def other_dict(self, lineno: int, d: dict[str, Any]) -> bool:
        """A dict that is not a training row: the run summary or an eval row (anything else is data: False)."""
        run = self.run
        if "train_runtime" in d:
            self._summary(lineno, d)
            return True
        if any(k.startswith("eval_") for k in d):
            d["_line"] = lineno
            run.evals.append(d)
            self.note_nonfinite(lineno, d)
            return True
        return False

    def _summary(self, lineno: int, d: dict[str, Any]) -> None:
        """The trainer's final summary (its dict, or its metrics table read row by row): the run ended there."""
        run = self.run
        run.summary = d
        run.ended = True
        run.end_line = run.end_line or lineno
        if "train_loss" in d:
            self.note_nonfinite(lineno, {"final train_loss": d["train_loss"]})  # the mean of the run's losses

    def note_nonfinite(self, lineno: int, values: dict[str, Any]) -> None:
        """A metric printed as nan/inf, whatever its name (eval metrics, rewards, kl, other trainers' rows)."""
        import math

        for k, v in values.items():
            n = to_number(v) if isinstance(v, (int, float, str)) and not isinstance(v, bool) else None
            if isinstance(n, float) and not math.isfinite(n) and not k.startswith("_"):
                cur = self.run.nonfinite.setdefault(k, [0, lineno])
                cur[0] += 1

    # --- pretty-printed JSON objects (trainer_state.json log_history pasted) -----
    def _pretty_feed(self, lineno: int, s: str) -> bool:
        t = s.strip()
        if t in ("{", "[", "[{"):
            self._pretty_flush()
            self._pretty, self._pretty_line = {}, lineno
            return True
        if t in ("}", "},", "}]", "]", "},{", "}, {"):
            self._pretty_flush()
            if t in ("},{", "}, {"):
                self._pretty, self._pretty_line = {}, lineno
            return True
        if t[:1] not in ('"', "'"):
            return False
        m = _JSON_KV.match(t) if t[0] == '"' else _PY_KV.match(t)
        if not m:
            return False
        if self._pretty is None:  # the paste began inside an object
            self._pretty, self._pretty_line = {}, lineno
        if t[0] == '"':
            import json

            try:
                self._pretty[m.group(1)] = json.loads(m.group(2))
            except ValueError:
                return False
            return True
        raw = m.group(2)
        val: Any = {"None": None, "True": True, "False": False}.get(raw, raw)
        if isinstance(val, str):
            val = raw[1:-1] if raw[:1] == "'" else to_number(raw)
        self._pretty[m.group(1)] = val
        return True

    def _pretty_flush(self) -> None:
        d, self._pretty = self._pretty, None
        if d and is_train_row(d):
            self.step_dicts.append((self._pretty_line, d))
        elif d:
            self.other_dict(self._pretty_line, d)

    def _open_bar(self, lineno: int, s: str, raw: str) -> bool:
        """A training bar that knows no total: progress, rate and postfix (the step count is tqdm's own)."""
        for body, m in _bar_matches(raw, OPEN_BAR):
            desc = (m.group("desc") or "").strip(" :")
            if _PREPROCESS_BAR.match(desc) or _EVAL_BAR.match(desc) or _OTHER_BAR.match(desc):
                return True
            self._training_bar(lineno, int(m.group("done")), None, float(m.group("rate")), m.group("unit"), desc,
                               m.group("elapsed"), None, {}, body[m.end():])
            return True
        return False

    def _training_bar(self, lineno: int, done: int, total: int | None, rate: float | None, unit: str | None,
                      desc: str, elapsed: str, remaining: str | None, columns: dict[str, Any], tail: str) -> None:
        """One update of the training bar (with or without a total): the run's progress, and a step row when it shows
        a step done with a speed - or without one when its columns gave the loss (a bar the paste cut)."""
        self.progress = {"step": done, "total": total, "line": lineno, "desc": desc or None,
                         "elapsed_s": _clock_s(elapsed), "remaining_s": _clock_s(remaining) if remaining else None}
        if rate:
            self.progress["s_per_it"] = rate if unit == "s/it" else 1 / rate
        self.progress.update(columns)
        post = _bar_postfix(tail)
        if post:  # tqdm's set_postfix: 'loss=nan, v_num=0' (Lightning, accelerate scripts)
            self.progress.update(post)
            self.note_nonfinite(lineno, post)
        known = rate or "loss" in self.progress
        last = self.bar_rows[-1] if self.bar_rows else None
        if done >= 1 and known and (last is None or last["step"] != done or last.get("epoch") != self.progress.get("epoch")):
            self.bar_rows.append(dict(self.progress))  # a bar at 0 or without a rate shows no step done

    def finish(self) -> None:
        """End of input: an object still open is kept as far as it was read."""
        self._pretty_flush()
        self._flush_timers()
        self._bare_rows()
        self._csv_table()

    def _notebook_row(self, lineno: int, s: str) -> bool:
        """A row of transformers' NotebookProgressCallback table (utils/notebook.py: columns 'Step' or 'Epoch',
        'Training Loss', 'Validation Loss' and the metrics write_line adds; cells 'No log' until a value comes),
        pasted from Jupyter/Colab as tab-, pipe- or space-separated text; its '-- | --' rule line is skipped."""
        from diagnose.parse.dialects import SYNONYMS, DialectRow, convert

        cols = self._nb_cols or []
        cells = [c.strip() for c in _NB_SPLIT.split(s.strip().strip("|").strip())]
        if all(set(c) <= set("-: ") for c in cells):
            return True  # the Markdown rule under the header
        if len(cells) != len(cols) or not cells[0].isdigit():
            self._nb_cols = None
            return False
        vals: dict[str, float] = {("epoch" if cols[0] == "Epoch" else "step"): float(cells[0])}
        bad: dict[str, str] = {}
        for name, cell in zip(cols[1:], cells[1:]):
            v = convert(cell, None)
            if v is None:
                continue  # 'No log'
            key = "loss" if name == "Training Loss" else SYNONYMS.get(name.lower().replace(" ", "_"), ("",))[0]
            if key and key not in vals:
                vals[key] = v
            elif v != v or v in (float("inf"), float("-inf")):
                bad[name] = cell
        if "loss" not in vals:
            return True  # an evaluation's line: no training loss logged yet
        self.dialect_rows.append((lineno, DialectRow("hf_notebook_table", "transformers NotebookProgressCallback "
                                                     "(a Jupyter/Colab table)", "train", vals)))
        if bad:
            self.note_nonfinite(lineno, bad)
        return True

    def _csv_table(self) -> None:
        """Three or more numeric CSV rows of one width whose first column only grows (an epoch or step): a metrics
        table without its header.  A column that starts finite and ends nan/inf on the last rows went non-finite
        (missing values in a data file are scattered, not a column's tail)."""
        rows = self._csv_rows
        if len(rows) < 3 or len({len(f) for _, f in rows}) != 1:
            return
        firsts = [int(f[0]) for _, f in rows]
        if any(b <= a for a, b in zip(firsts, firsts[1:])):
            return
        bad = {"nan", "-nan", "inf", "-inf"}
        for col in range(1, len(rows[0][1])):
            vals = [f[col].lower() for _, f in rows]
            if vals[0] in bad or vals[-1] not in bad:
                continue
            first = next(i for i, v in enumerate(vals) if v in bad)
            if all(v in bad for v in vals[first:]):
                self.note_nonfinite(rows[first][0], {f"column {col + 1} of a numeric table": vals[first]})

    def _bare_rows(self) -> None:
        """Five or more 'N value' lines whose N only grows are a custom loop's print(step, loss): step rows (the value
        read as the loss, the one number such loops print)."""
        from diagnose.parse.dialects import DialectRow, convert

        pairs = self._bare_pairs
        if len(pairs) < 5 or any(b[1] <= a[1] for a, b in zip(pairs, pairs[1:])):
            return
        for lineno, step, value in pairs:
            v = convert(value, None)
            row = DialectRow("bare_step_value", "unknown trainer (step, value lines)", "train",
                             {"step": float(step), **({"loss": v} if v is not None else {})})
            self.dialect_rows.append((lineno, row))

    def _megatron(self, lineno: int, s: str, m: re.Match[str]) -> None:
        row: dict[str, Any] = {"_line": lineno, "step": int(m.group(1)), "max_steps": int(m.group(2))}
        for seg in s.split("|")[1:]:
            if ":" not in seg:
                continue
            k, _, v = seg.partition(":")
            row[k.strip()] = v.strip()
        self.megatron_rows.append(row)
        self._row_cont = [lineno, row, 0] if s.rstrip().endswith("|") else None
        self.run.recognized = True

    def _bars(self, lineno: int, s: str, raw: str) -> bool:
        for body, m in _bar_matches(raw, BAR):
            desc = (m.group("desc") or "").strip()
            done, total = int(m.group("done")), int(m.group("total"))
            rate = None if m.group("rate") == "?" else float(m.group("rate"))
            unit = m.group("unit")
            shard = _SHARD.search(body[: m.start("pct")])
            if shard and (not desc or _PREPROCESS_BAR.match(desc) or desc.startswith("#")):
                # one bar per preprocessing process (datasets' num_proc before it merged them): `#3: 40%|...`
                per_s = _per_s(rate, unit)
                what = re.sub(r"\s*#\d+\s*$", "", desc) if desc and not desc.startswith("#") else "Map"
                self.map_rates.append({"what": what or "Map", "num_proc": 1, "done": done, "total": total,
                                       "rate_per_s": per_s, "unit": unit, "line": lineno, "shard": int(shard.group(1)),
                                       "elapsed_s": _clock_s(m.group("elapsed")),
                                       "remaining_s": _clock_s(m.group("remaining"))})
                return True
            if _PREPROCESS_BAR.match(desc):
                np_ = re.search(r"num_proc=(\d+)", desc)
                per_s = _per_s(rate, unit)
                self.map_rates.append({
                    "what": _NUM_PROC.sub("", desc), "num_proc": int(np_.group(1)) if np_ else 1,
                    "done": done, "total": total, "rate_per_s": per_s, "unit": unit, "line": lineno,
                    "elapsed_s": _clock_s(m.group("elapsed")), "remaining_s": _clock_s(m.group("remaining")),
                })
                return True
            if _EVAL_BAR.match(desc) or _OTHER_BAR.match(desc):
                if desc.startswith("Loading checkpoint shards") and total and done >= total:
                    # transformers' modeling_utils bar over the safetensors shards, done: the model is loaded
                    self.run.model_loaded_line = self.run.model_loaded_line or lineno
                return True
            if unit is None:  # the paste cut the line inside the rate: progress without a speed
                rate = None
            elif unit not in ("s/it", "it/s"):
                return True
            columns = _table_row(self._table_header, body[: m.start("pct")]) if self._table_header else {}
            self._training_bar(lineno, done, total, rate, unit, desc, m.group("elapsed"), m.group("remaining"),
                               columns, body[m.end():])
            return True
        cut = _PCT_ONLY_BAR.match(s)
        if cut and _PREPROCESS_BAR.match(cut.group("desc")):
            # a preprocessing bar the paste cut after its percentage ('Running tokenizer on dataset (num_proc=64):
            # 73%|█████'): how far the pass got, no counts
            self.run.preprocess_cut = {"what": _NUM_PROC.sub("", cut.group("desc")),
                                       "pct": int(cut.group("pct")), "line": lineno}
            return True
        return False


__all__ = ["InfoScanner", "normalize"]
