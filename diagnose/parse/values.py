"""Convert once: every value quirk of every ms-swift version, in one table-driven place.

Contract:
- `to_number(text)` turns `1.5`, `'5.794'`, `nan`, `'NaN'`, `inf`, `Infinity`,
  `-inf` into a float (or int when integral in form); returns None if not numeric.
- `parse_duration("1d 2h 3m 4s") -> 4.0 + ...` seconds (ms-swift `format_time`).
- `STEP_IN_LINE` is the one pattern that finds a training dict's step in a raw line.
- `STEP_KEYS` maps a log-dict key to a `StepsTable` column; `speed_to_s_per_it`
  converts `train_speed(iter/s)` / `train_speed(s/it)` to seconds per iteration.
"""
from __future__ import annotations

import math
import re

# log-dict key -> StepsTable column (numeric columns only)
STEP_KEYS: dict[str, str] = {
    "loss": "loss",
    "grad_norm": "grad_norm",
    "learning_rate": "learning_rate",
    "token_acc": "token_acc",
    "acc": "token_acc",  # 2.x name of the training token accuracy
    "memory(GiB)": "memory_gib",
    "epoch": "epoch",
    "global_step": "step",  # 2.x PrinterCallbackNew form (an int)
    "step": "step",  # trainer_state.json log_history rows
    "current_steps": "step",  # LLaMA-Factory trainer_log.jsonl (LogCallback)
    "total_steps": "max_steps",
    # facebookresearch/deit and mae main.py: one json.dumps(log_stats) line a epoch in log.txt, log_stats =
    # {**{f'train_{k}': v for k, v in train_stats.items()}, **{f'test_{k}': ...}, 'epoch': epoch, 'n_parameters': n}
    "train_loss": "loss",
    "train_lr": "learning_rate",
}
SPEED_KEYS = {"train_speed(iter/s)": "iter/s", "train_speed(s/it)": "s/it"}
PAIR_KEYS = ("global_step/max_steps", "iteration")  # "N/M" strings
# a training dict's step, found in a raw line without parsing it (verify's and attach's followers):
# group 1/2 = 'global_step/max_steps': 'N/M' (2.x tqdm path, 3.x, 4.x), group 3 = 'global_step': N (2.x printer path)
STEP_IN_LINE = r"""['"]global_step/max_steps['"]:\s*['"](\d+)/(\d+)['"]|['"]global_step['"]:\s*(\d+)[,}]"""

_SPECIAL = {
    "nan": math.nan,
    "-nan": math.nan,
    "inf": math.inf,
    "+inf": math.inf,
    "-inf": -math.inf,
    "infinity": math.inf,
    "-infinity": -math.inf,
}


def to_number(text: object) -> float | int | None:
    if isinstance(text, bool) or text is None:
        return None
    if isinstance(text, (int, float)):
        return text
    s = str(text).strip().strip("'\"").strip()
    if not s:
        return None
    try:
        if s.lstrip("+-").isdigit():
            return int(s)
        return float(s)
    except ValueError:
        pass
    return _SPECIAL.get(s.lower())


_DUR = re.compile(r"(\d+(?:\.\d+)?)\s*([dhms])")
_DUR_MULT = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}


def parse_duration(text: object) -> float | None:
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    if not isinstance(text, str):
        return None
    parts = _DUR.findall(text)
    if not parts:
        return None
    return sum(float(v) * _DUR_MULT[u] for v, u in parts)


def speed_to_s_per_it(value: float | None, unit: str) -> float | None:
    if value is None or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    if unit == "s/it":
        return float(value)
    return 1.0 / value if value > 0 else None


def split_pair(text: object) -> tuple[int | None, int | None]:
    """'12/500' -> (12, 500)."""
    if not isinstance(text, str) or "/" not in text:
        n = to_number(text)
        return (int(n) if isinstance(n, (int, float)) and math.isfinite(n) else None), None
    a, _, b = text.partition("/")
    x, y = to_number(a), to_number(b)
    return (int(x) if x is not None else None), (int(y) if y is not None else None)
