"""Step rows of every trainer, read from the format strings they print: the dialect table, and a generic fallback.

Contract:
- `DIALECTS`: the entries of `dialects.yaml` (one per trainer's per-step line: torchvision's MetricLogger,
  mmengine, detectron2, Megatron-LM, DeepSpeed, nanoGPT, torchtitan, verl, Lightning, tqdm bars ...), each with
  its needles (all must be in the line: a cheap prefilter), a pattern with named groups, the canonical field
  each group fills and its unit, the source that prints it and its own line cases.
- `match_dialect(line) -> DialectRow | None`: the first entry whose needles and pattern match; values are converted
  to canonical units (seconds, GiB, percent; "1:02:10" durations; "5,123" counts).
- `GenericRows`: the fallback for dialects the table does not know: lines that hold three or more `key: number`
  (or `key=number`) pairs are collected by their key set; a key set that repeats on at least 3 lines with numbers
  that change is a step row of an unknown dialect (one or two lines are enough when they name both the step and the
  loss), its keys mapped to canonical fields by synonyms (`SYNONYMS`:
  `lr` -> lr, `iter_time`/`batch_time` -> step_time_s, `data_time` -> data_time_s, `max mem` -> mem_peak_gib ...).
Canonical fields: step, total, epoch, loss, grad_norm, lr, step_time_s, data_time_s, mem_peak_gib, mem_current_gib,
samples_per_s, tokens_per_s, tflops, mfu_pct, elapsed_s, remaining_s, skipped_iters, nan_iters, loss_scale,
reward, kl.  Stdlib + yaml; the table is loaded once.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

CANONICAL = ("step", "total", "epoch", "loss", "grad_norm", "lr", "step_time_s", "data_time_s", "mem_peak_gib",
             "mem_current_gib", "samples_per_s", "tokens_per_s", "tflops", "mfu_pct", "elapsed_s", "remaining_s",
             "skipped_iters", "nan_iters", "loss_scale", "reward", "kl", "step_time_avg_s", "data_time_avg_s")
_GIB = 2.0 ** 30
_TAB = r"(?:\t| {2,})"


@dataclass
class Dialect:
    name: str
    trainer: str
    kind: str  # train | eval | preprocess | timers | summary
    needles: tuple[str, ...]
    pattern: re.Pattern[str]
    fields: dict[str, tuple[str, str | None]]  # canonical -> (group, unit)
    source: str = ""


@dataclass
class DialectRow:
    dialect: str
    trainer: str
    kind: str
    values: dict[str, float] = field(default_factory=dict)
    label: str | None = None  # the row's own name where the dialect prints one (a timer: 'batch-generator')


def _hms(text: str) -> float | None:
    t = text.strip()
    days = 0.0
    m = re.match(r"(\d+)\s+days?,\s*(.*)$", t)
    if m:
        days, t = float(m.group(1)), m.group(2)
    parts = t.split(":")
    try:
        nums = [float(p) for p in parts]
    except ValueError:
        return None
    secs = 0.0
    for n in nums:
        secs = secs * 60 + n
    return days * 86400 + secs


def convert(text: str, unit: str | None) -> float | None:
    """A printed value in `unit` -> the canonical unit (s, GiB, percent, plain number)."""
    if text is None:
        return None
    s = text.strip().rstrip(",;*").lstrip("*")  # (a paste's Markdown bold can cling to a value: 'nan**')
    if unit == "hms":
        return _hms(s)
    if unit == "count":
        s = s.replace(",", "").replace("_", "")
    low = s.lower()
    if low in ("nan", "-nan", "+nan"):
        v = math.nan
    elif low in ("inf", "+inf", "infinity"):
        v = math.inf
    elif low in ("-inf", "-infinity"):
        v = -math.inf
    else:
        try:
            v = float(s)
        except ValueError:
            return None
    if unit == "per_s":  # a rate printed as N it/s -> the seconds of one (0 and nan stay unknown)
        return 1.0 / v if v > 0 and math.isfinite(v) else None
    if unit in (None, "", "s", "count", "pct", "plain"):
        return v
    factor = {"ms": 1e-3, "min": 60.0, "MiB": 2.0 ** 20 / _GIB, "MB": 1e6 / _GIB, "GiB": 1.0, "GB": 1e9 / _GIB,
              "B": 1.0 / _GIB, "KiB": 1024.0 / _GIB, "KB": 1e3 / _GIB}.get(unit)
    return v * factor if factor is not None else v


def load_dialects(path: Path | None = None) -> list[Dialect]:
    import yaml

    p = path or Path(__file__).with_name("dialects.yaml")
    if not p.is_file():
        return []
    out = []
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    for e in yaml.load(p.read_text(encoding="utf-8"), Loader=loader) or []:
        fields = {}
        for canon, spec in (e.get("fields") or {}).items():
            if canon not in CANONICAL:
                raise ValueError(f"dialects.yaml {e.get('name')}: unknown canonical field {canon!r}")
            spec = spec if isinstance(spec, dict) else {"group": spec}
            fields[canon] = (spec["group"], spec.get("unit"))
        # a tab the trainer prints (mmcv's TextLoggerHook) is often spaces once pasted: either is taken
        pattern = _loose_tabs(e["pattern"])
        needles = tuple(n.replace("\t", "").strip() or n for n in (e.get("needles") or ()))
        out.append(Dialect(name=e["name"], trainer=e.get("trainer", e["name"]), kind=e.get("kind", "train"),
                           needles=tuple(sorted((n for n in needles if n), key=len)), pattern=re.compile(pattern),
                           fields=fields,
                           source=str(e.get("source", ""))))
    return out


def _loose_tabs(pattern: str) -> str:
    """A tab outside a character class (`\\t` or a real tab) also matches two or more spaces."""
    out, i, in_class = [], 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            if pattern[i + 1] == "t" and not in_class:
                out.append(_TAB)
            else:
                out.append(pattern[i:i + 2])
            i += 2
            continue
        if c == "[" and not in_class:
            in_class = True
        elif c == "]" and in_class:
            in_class = False
        out.append(_TAB if c == "\t" and not in_class else c)
        i += 1
    return "".join(out)


_TABLE: list[Dialect] | None = None


def dialects() -> list[Dialect]:
    global _TABLE
    if _TABLE is None:
        _TABLE = load_dialects()
    return _TABLE


def match_dialect(line: str) -> DialectRow | None:
    for d in dialects():
        if d.needles and (d.needles[-1] not in line or not all(n in line for n in d.needles)):
            continue  # (the needles are sorted shortest first: the longest, most telling one is tried first)
        m = d.pattern.search(line)
        if not m:
            continue
        vals = row_values(d, m)
        if vals:
            return DialectRow(d.name, d.trainer, d.kind, vals, m.groupdict().get("name"))
    return None


def row_values(d: Dialect, m: re.Match[str]) -> dict[str, float]:
    """The canonical values a match of `d`'s pattern gives, converted to canonical units."""
    vals: dict[str, float] = {}
    gd = m.groupdict()
    for canon, (group, unit) in d.fields.items():
        if "+" in group:  # a sum of printed parts ('Time {data} RUN {run}': the step is both)
            parts = [convert(gd[g], unit) if gd.get(g) is not None else None for g in group.split("+")]
            v = sum(parts) if all(x is not None for x in parts) else None  # type: ignore[arg-type]
        else:
            raw = gd.get(group)
            v = convert(raw, unit) if raw is not None else None
        if v is not None:
            vals[canon] = v
    return vals


# ------------------------------------------------------------------------------ the generic fallback
# key (lower-case, spaces and separators normalised) -> (canonical, unit when the key implies one)
SYNONYMS: dict[str, tuple[str, str | None]] = {
    "loss": ("loss", None), "train_loss": ("loss", None), "lm_loss": ("loss", None), "total_loss": ("loss", None),
    "train/loss": ("loss", None), "training_loss": ("loss", None), "loss_avg": ("loss", None),
    "avg. loss": ("loss", None), "avg loss": ("loss", None), "average loss": ("loss", None), "mean loss": ("loss", None),
    "average_loss": ("loss", None), "avg_loss": ("loss", None), "step_loss": ("loss", None),
    "avr_loss": ("loss", None),  # kohya-ss sd-scripts' bar postfix: progress_bar.set_postfix(avr_loss=...)
    "lr": ("lr", None), "current_lr": ("lr", None), "learning_rate": ("lr", None), "learningrate": ("lr", None), "train/lr": ("lr", None),
    "grad_norm": ("grad_norm", None), "gnorm": ("grad_norm", None), "grad norm": ("grad_norm", None),
    "train/grad_norm": ("grad_norm", None),
    "time": ("step_time_s", "s"), "iter_time": ("step_time_s", "s"), "batch_time": ("step_time_s", "s"),
    "step_time": ("step_time_s", "s"), "time_per_step": ("step_time_s", "s"), "iteration_time": ("step_time_s", "s"),
    "elapsed time per iteration (ms)": ("step_time_s", "ms"), "time_ms": ("step_time_s", "ms"),
    "step_time_ms": ("step_time_s", "ms"), "dt": ("step_time_s", "s"),
    "data_time": ("data_time_s", "s"), "data": ("data_time_s", "s"), "data_wait": ("data_time_s", "s"),
    "dataloader_time": ("data_time_s", "s"), "loader_time": ("data_time_s", "s"), "data_load_time": ("data_time_s", "s"), "data_ms": ("data_time_s", "ms"),
    "mem": ("mem_peak_gib", "MiB"), "memory": ("mem_peak_gib", "MiB"), "max_mem": ("mem_peak_gib", "MiB"),
    "max mem": ("mem_peak_gib", "MiB"), "max_memory": ("mem_peak_gib", "MiB"), "memory(gib)": ("mem_peak_gib", "GiB"),
    "mem_gib": ("mem_peak_gib", "GiB"), "memory_gb": ("mem_peak_gib", "GB"),
    "it": ("step", None), "iter": ("step", None), "step": ("step", None), "iteration": ("step", None),
    "global_step": ("step", None), "epoch": ("epoch", None), "num_updates": ("step", None),
    "total_timesteps": ("step", None),  # stable-baselines3's 'time/total_timesteps' (env steps so far)
    "tps": ("tokens_per_s", "count"), "tokens/s": ("tokens_per_s", "count"), "tok/s": ("tokens_per_s", "count"),
    "tokens_per_sec": ("tokens_per_s", "count"), "tokens_per_second": ("tokens_per_s", "count"),
    "samples/s": ("samples_per_s", None), "samples/sec": ("samples_per_s", None),
    "samples_per_sec": ("samples_per_s", None), "samples_per_second": ("samples_per_s", None),
    "train_samples_per_second": ("samples_per_s", None), "mfu": ("mfu_pct", "pct"), "tflops": ("tflops", None),
    "kl": ("kl", None), "reward": ("reward", None), "rewards": ("reward", None), "loss_scale": ("loss_scale", None),
}
# 'step: 5834/5835' is step 5834 (the total after '/' is dropped)
# the running average printed after a value, MetricLogger style ('Time: 1.162s (1.383s)', 'loss: nan (nan)'), is skipped;
# a key holds parentheses only in pairs ('memory(gib)'), so '(Epoch 20) TRAIN LOSS:0.19' is the key 'TRAIN LOSS'
_KV = re.compile(r"([A-Za-z_](?:[\w/ .-]|\([\w/ .-]{0,12}\)){0,40}?)\s*[:=]\s*(-?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|-?inf)"
                 r"(?:/\d+(?=[\s,|;)\]}]|$))?\s*(ms|s|MB|Mb|MiB|GB|GiB|M|G|%)?"
                 r"(?:\s?\((?:-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|-?inf)(?:ms|s|%)?\))?(?=[\s,|;)\]}]|$)")
_MIN_PAIRS = 3
_MIN_ROWS = 3


_PIPE_SEG = re.compile(r"^\s*([A-Za-z][A-Za-z _()/.-]{0,40}?)\s+(-?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|-?inf)"
                       r"(?:/(\d+))?\s*(ms|s|MB|MiB|GB|GiB|%)?\s*$", re.IGNORECASE)


# a line of a step block: a marker ('| >', '>', '-', '*'), one `key: number`, perhaps the running average in
# parentheses ('     | > loss_0: 16.55468  (15.96176)', '| > avg_loader_time: 0.00034 (-0.00003)')
_VLINE = re.compile(r"^(\s*[|>*-][|>*\s-]{0,6}?)\s*([A-Za-z_][\w./-]{0,40}):\s*(-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|-?inf)"
                    r"\s*(?:\([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?\)|\([-+]?(?:nan|inf)\))?\s*$")
_INDEXED = re.compile(r"_\d$")
_EVALISH = re.compile(r"(?i)\b(?:valid|validation|eval|evaluation|test|testing|val)\b")
_PIPE_SPLIT = re.compile(r"\|")
_COLUMNS = re.compile(r"\s{3,}")
_LIST_SPLIT = re.compile(r",\s+|;\s*")  # ', ' and ';' - never the ',' inside '1,234'
_NO_SPLIT = re.compile(r"(?!)")  # the whole line is one segment of one-word pairs
# stable-baselines3's logger dump: a rule of dashes, '| key | value |' lines (a section '| train/ |' has no value)
_TABLE_RULE = re.compile(r"^-{20,200}\s*$")
_TABLE_CELLS = re.compile(r"^\|\s{0,8}([A-Za-z][\w ./-]{0,60}?)\s*\|\s*(-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|-?inf)?\s*\|\s*$")
# one-word `name value` pairs inside a list segment ('epoch 1 iter 300: loss nan'), groups as _PIPE_SEG's
_WORD_PAIR = re.compile(r"(?<![\w.])([A-Za-z][A-Za-z_]{1,30}):?\s+(-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|-?inf)"
                        r"(?:/(\d+))?\s*(ms|s|MB|MiB|GB|GiB|%)?(?=[\s:\]),;|]|$)", re.IGNORECASE)


def _pipe_pairs(line: str, split: re.Pattern[str] = _PIPE_SPLIT) -> dict[str, tuple[str, str | None]]:
    """`Epoch 0/1 | Batch 100/15582 | Train Loss 2.31 | Learning Rate 2e-08` (or `Epoch 1, Step 100, Loss 2.345`
    with `split=_LIST_SPLIT`, `epoch 3 step 100 loss 2.31` with `split=_NO_SPLIT`): the `name value` segments of a
    line split by '|' (or ', ' / ';', or not split), custom trainers' prints; a counter `a/b` named
    batch/step/iter is the step."""
    kv: dict[str, tuple[str, str | None]] = {}
    for seg in split.split(line):
        m = _PIPE_SEG.match(seg)
        found = [m] if m else list(_WORD_PAIR.finditer(seg)) if split is _LIST_SPLIT or split is _NO_SPLIT else []
        for m in found:  # 'epoch 1 iter 300: loss nan' holds several one-word pairs
            k = _norm_key(m.group(1))
            if k not in SYNONYMS and k.replace(" ", "_") in SYNONYMS:
                k = k.replace(" ", "_")
            if m.group(3) and k in ("batch", "step", "iter", "iteration", "it"):
                k = "step"
            kv.setdefault(k, (m.group(2), m.group(4)))
    return kv


def _norm_key(k: str) -> str:
    return re.sub(r"\s+", " ", k.strip().lower())


def _unit_of(suffix: str | None, implied: str | None) -> str | None:
    if suffix in ("ms", "s"):
        return suffix
    if suffix in ("M", "MB", "MiB", "Mb"):
        return "MiB" if suffix != "MB" else "MB"
    if suffix in ("G", "GB", "GiB"):
        return "GiB" if suffix != "GB" else "GB"
    if suffix == "%":
        return "pct"
    return implied


_LOSS_WORD = re.compile(r"(?:^|[\s_./])loss(?:es)?(?:$|[\s_./])")


def _lossy(key: str) -> bool:
    """A key that names a loss ('loss', 'train_loss', 'loss_disc', 'box_loss', 'loss after forward pass', 'losses')."""
    return SYNONYMS.get(key, ("",))[0] == "loss" or bool(_LOSS_WORD.search(key))


class GenericRows:
    """Collects `key: number` lines by key set; `rows()` keeps the key sets that repeat with changing numbers."""

    def __init__(self) -> None:
        self._by_keys: dict[tuple[str, ...], list[tuple[int, dict[str, tuple[str, str | None]]]]] = {}
        # after rows(): (line, {key: raw}) for the row metrics no canonical field takes that are nan/inf
        # ('Stage0-heatmaps: nan'): nan in any metric is nan
        self.nonfinite: list[tuple[int, dict[str, str]]] = []
        self._evalish: set[int] = set()  # lines of the first rows of a key set that say valid/eval/test
        self._vhead: tuple[int, dict[str, tuple[str, str | None]]] | None = None  # a line naming a step, no row
        self._vblock: list | None = None  # [header line, last line, pairs, marker] of a step block being read
        self._tblock: list | None = None  # [first line, last line, pairs] of a key/value table being read (sb3)

    def feed(self, lineno: int, line: str) -> bool:
        if len(line) > 4000:
            return False
        if line[:1] in ("|", "-") and self._table_line(lineno, line):
            return True
        if self._tblock is not None:
            self._tblock = None  # a table left open by anything else is no dump
        if self._vblock is not None and lineno != self._vblock[1] + 1:
            self._flush_block()
        vm = _VLINE.match(line) if ":" in line else None
        if vm and self._block_line(lineno, vm):  # one `key: value` under a step header: a line of a step block
            return True
        if self._vblock is not None:
            self._flush_block()
        kv: dict[str, tuple[str, str | None]] = {}
        seps = line.count(":") + line.count("=")
        low = line.lower()
        if seps >= _MIN_PAIRS or (seps and ("loss" in low or "step" in low)):  # 'loss after forward pass = 1.48'
            # columns set apart by runs of spaces mix 'Epoch: 0' with 'Loss nan' (arcface_torch): read them one by one
            for seg in _COLUMNS.split(line) if "   " in line else (line,):
                m = _PIPE_SEG.match(seg) if ":" not in seg and "=" not in seg else None
                if m:
                    kv.setdefault(_norm_key(m.group(1)), (m.group(2), m.group(4)))
                    continue
                for k, v, suf in _KV.findall(seg):
                    k = _norm_key(k)
                    if k not in SYNONYMS and k.replace(" ", "_") in SYNONYMS:
                        k = k.replace(" ", "_")  # 'Global Step: 20'
                    kv.setdefault(k, (v, suf or None))
        if len(kv) < _MIN_PAIRS and line.count("|") >= _MIN_PAIRS - 1:
            piped = _pipe_pairs(line)
            kv = piped if len(piped) > len(kv) else kv
        if len(kv) < _MIN_PAIRS and ("," in line or ";" in line):
            listed = _pipe_pairs(line, _LIST_SPLIT)
            kv = listed if len(listed) > len(kv) else kv
        if len(kv) < _MIN_PAIRS and ("loss" in low or "step" in low or "epoch" in low or "iter" in low):
            # one-word `name value` pairs set apart by spaces or tabs alone ('Epoch: [0][200/2081]\tTime 0.933s
            # (1.003s)\tLoss 0.00129 (0.00550)', 'epoch 3 step 100 loss 2.31 lr 0.0001'); only on a line that names a
            # loss or a step, as such a row does (the word scan costs every ordinary line otherwise)
            spaced = _pipe_pairs(line, _NO_SPLIT)
            kv = spaced if len(spaced) > len(kv) else kv
        # two pairs are a row when one of them is a loss ('loss:2.979 lr:0.0002', 'Avg. Loss: 0.0139 time: 652.85'),
        # one when it is ('loss after forward pass = 1.44', printed each step): the rows must still repeat (rows())
        need = 1 if any(_lossy(k) for k in kv) else _MIN_PAIRS
        if len(kv) < need:
            if any(SYNONYMS.get(k, ("",))[0] == "step" for k in kv):
                self._vhead = (lineno, kv)  # perhaps the header of a step block ('--> STEP: 24/352 -- GLOBAL_STEP: 244300')
            return False
        if not any(k in SYNONYMS or _lossy(k) for k in kv):
            # named terms beside counters printed without a separator ('[Epoch 11/11] [Batch 3811/3880] [G - gan1:
            # 6.830, rec: 0.151] [D - real: 0.428]', a GAN's loss terms): the counters name the step
            counters = {k: v for k, v in _pipe_pairs(line, _NO_SPLIT).items() if k in SYNONYMS}
            if not counters:
                return False
            kv = {**counters, **kv}
        self._store(lineno, kv, bool(_EVALISH.search(line)))
        return True

    def _store(self, lineno: int, kv: dict[str, tuple[str, str | None]], evalish: bool) -> None:
        rows = self._by_keys.setdefault(tuple(sorted(kv)), [])
        if len(rows) < 200_000:
            rows.append((lineno, kv))
            if len(rows) < _MIN_ROWS and evalish:
                self._evalish.add(lineno)

    def _block_line(self, lineno: int, vm: re.Match[str]) -> bool:
        """A step printed as a block, its header naming the step and one `key: value` a line under it, each behind
        the same marker (Coqui TTS / coqui-ai Trainer ConsoleLogger.print_train_step: '   --> STEP: {}/{} --
        GLOBAL_STEP: {}' then '     | > {key}: {value:.5f}  ({avg:.5f})' per loss and '     | > {key}: {value}' per
        logged value).  Lines under no step header ('--> EVAL PERFORMANCE') are no row."""
        if self._vblock is None:
            head = self._vhead
            if head is None or head[0] != lineno - 1:
                return False
            self._vblock = [head[0], lineno, dict(head[1]), vm.group(1)]
        elif vm.group(1) != self._vblock[3]:  # another marker: another block
            self._flush_block()
            return False
        k = _norm_key(vm.group(2))
        base = _INDEXED.sub("", k)  # 'current_lr_0', 'grad_norm_0': the first optimizer's value
        k = base if k not in SYNONYMS and base in SYNONYMS else k
        self._vblock[2].setdefault(k, (vm.group(3), None))
        self._vblock[1] = lineno
        return True

    def _table_line(self, lineno: int, line: str) -> bool:
        """A dump of stable-baselines3's logger (common/logger.py HumanOutputFormat.write): a rule of dashes, then one
        '| key | value |' line per value under '| section/ |' lines, then a rule of dashes: the dump is one row
        (its keys without the section: 'actor_loss', 'learning_rate', 'total timesteps')."""
        if _TABLE_RULE.match(line):
            tb = self._tblock
            if tb is not None and tb[2] and lineno == tb[1] + 1:
                kv = tb[2]
                if len(kv) >= _MIN_PAIRS and any(k in SYNONYMS or _lossy(k) for k in kv):
                    self._store(tb[0], kv, False)
                self._tblock = None
                return True
            self._tblock = [lineno, lineno, {}]
            return True
        tb = self._tblock
        m = _TABLE_CELLS.match(line) if tb is not None and lineno == tb[1] + 1 else None
        if m is None:
            return False
        tb[1] = lineno
        key, value = _norm_key(m.group(1)), m.group(2)
        if value and not key.endswith("/"):
            key = key.replace(" ", "_") if key not in SYNONYMS and key.replace(" ", "_") in SYNONYMS else key
            tb[2].setdefault(key, (value, None))
        return True

    def _flush_block(self) -> None:
        head_line, _last, kv, _marker = self._vblock
        self._vblock = None
        if len(kv) >= _MIN_PAIRS and any(k in SYNONYMS and SYNONYMS[k][0] != "step" or _lossy(k) for k in kv):
            self._store(head_line, kv, False)

    def rows(self) -> list[tuple[int, DialectRow]]:
        if self._vblock is not None:
            self._flush_block()
        out: list[tuple[int, DialectRow]] = []
        self.nonfinite = []
        for keys, rows in self._by_keys.items():
            mapped = [k for k in keys if k in SYNONYMS]
            if not any(SYNONYMS[k][0] == "loss" for k in mapped):  # a loss named otherwise ('loss_disc', 'box_loss')
                mapped += [k for k in keys if k not in SYNONYMS and _lossy(k)][:1]
            changing = [k for k in mapped if len({r[1][k][0] for r in rows[:50]}) > 1]
            if len(rows) < _MIN_ROWS:
                # a line or two that name the step and the loss are rows however few ('epoch: 0, step: 5834/5835,
                # loss: 0.1221, lr: 4.52e-05'): an excerpt often keeps only the last one; so are two lines whose
                # loss changes ('(Epoch 20) TRAIN LOSS:0.1903 CER:6.53%', then epoch 21's)
                canon = {SYNONYMS.get(k, ("loss",))[0] for k in mapped}
                loss_moves = len(rows) == 2 and any(SYNONYMS.get(k, ("loss",))[0] == "loss" for k in changing)
                # so is a line of three or more named losses, a training step's loss terms ('loss_disc=3.598,
                # loss_gen=3.174, loss_fm=8.765,loss_mel=19.367, loss_kl=1.520', a VITS/GAN trainer's print)
                terms = sum(1 for k in keys if _lossy(k)) >= 3
                if not ({"step", "loss"} <= canon or loss_moves or terms) or any(ln in self._evalish for ln, _ in rows):
                    continue  # an evaluation line ('| valid on 'valid' subset | loss 9.329 |') is not a train row
            elif not changing:
                # a loss that never changes because it is nan on every line ('stage1_pafs_loss:     nan') is no row
                # to time, but nan all the same
                bad = {k: rows[0][1][k][0] for k in keys if rows[0][1][k][0].lstrip("-") in ("nan", "inf")}
                if bad:
                    self.nonfinite.append((rows[0][0], bad))
                continue
            for lineno, kv in rows:
                bad = {k: v[0] for k, v in kv.items() if k not in mapped and v[0].lstrip("-") in ("nan", "inf")}
                if bad:
                    self.nonfinite.append((lineno, bad))
                vals: dict[str, float] = {}
                for k in mapped:
                    canon, implied = SYNONYMS.get(k) or ("loss", None)
                    if canon in vals:
                        continue
                    raw, suf = kv[k]
                    v = convert(raw, _unit_of(suf, implied))
                    if v is not None:
                        vals[canon] = v
                out.append((lineno, DialectRow("generic", "unknown trainer", "train", vals)))
        out.sort(key=lambda x: x[0])
        return out


__all__ = ["CANONICAL", "Dialect", "DialectRow", "dialects", "load_dialects", "match_dialect", "row_values", "convert", "GenericRows",
           "SYNONYMS"]
