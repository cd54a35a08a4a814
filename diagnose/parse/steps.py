"""Assemble the steps table from vectorised groups, slow-path dicts and Megatron rows.

Contract: `StepRows.add_group(keys, cols, lines)` (numpy columns from fastdict),
`add_dict(d, line)` (one parsed dict), `add_megatron(row)`; `build(start_step)`
returns a `StepsTable` sorted by source line with `elapsed_s` and `interval_s`
derived (reference 1.5):
- `train_speed(s/it)` (3.12.5+/4.x): elapsed = s_per_it * (step - start_step);
- `train_speed(iter/s)` (2.x-3.12.4): elapsed = step / iter_per_s;
- Megatron 3.x `elapsed time per iteration (ms)`: the interval itself.
interval_s = d(elapsed) / d(step) between consecutive rows; the first row's
interval covers training start (warm-up included).  Non-positive -> NaN.
"""
from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from diagnose.models import STEP_COLUMNS, StepsTable
from diagnose.parse.values import SPEED_KEYS, STEP_KEYS, parse_duration, split_pair, to_number

_KIND_SPI, _KIND_IPS, _KIND_INTERVAL = 1, 2, 3  # int8 codes in the `_kind` column (0: none)
_PRESENCE_COLS = ("loss", "grad_norm", "learning_rate", "token_acc", "memory_gib", "epoch")


_ALL_COLS = tuple(STEP_COLUMNS) + ("_kind",)


class StepRows:
    """Rows in arrival order, stored straight into growable column buffers.

    `reserve(n)` sizes the buffers once (the parser estimates the row count from the
    file size); untouched capacity is never paged in, and building the table is a
    slice, not a concatenation of per-block pieces.
    """

    def __init__(self) -> None:
        self._cols: dict[str, np.ndarray] = {}
        self._pres: dict[str, np.ndarray] = {}
        self._n = 0
        self._cap = 0
        self._dicts: list[dict[str, float]] = []
        self._printed_elapsed: list[tuple[float, float]] = []  # (line, elapsed_time seconds as printed)
        self.layouts: list[list[str]] = []
        self.nonfinite: dict[str, list[int]] = {}  # metric key -> [rows printed nan/inf, first line]
        self.ranges: dict[str, list[float]] = {}  # metric key -> [min, max, finite rows], every key a row printed

    def _note_nonfinite(self, key: str, count: int, first_line: int) -> None:
        if count <= 0 or key.endswith(("#0", "#1")):
            return
        cur = self.nonfinite.get(key)
        if cur is None:
            self.nonfinite[key] = [int(count), int(first_line)]
        else:
            cur[0] += int(count)
            cur[1] = min(cur[1], int(first_line))

    def _note_range(self, key: str, lo: float, hi: float, count: int) -> None:
        cur = self.ranges.get(key)
        if cur is None:
            self.ranges[key] = [lo, hi, count]
        else:
            cur[0], cur[1], cur[2] = min(cur[0], lo), max(cur[1], hi), cur[2] + count

    def __len__(self) -> int:
        return self._n + len(self._dicts)

    def reserve(self, rows: int) -> None:
        """Make room for `rows` rows in all (without touching the memory)."""
        if rows <= self._cap:
            return
        for c in _ALL_COLS:
            new = np.empty(rows, np.int8 if c == "_kind" else np.float64)
            if c in self._cols:
                new[: self._n] = self._cols[c][: self._n]
            self._cols[c] = new
        for c in _PRESENCE_COLS:
            new = np.empty(rows, bool)
            if c in self._pres:
                new[: self._n] = self._pres[c][: self._n]
            self._pres[c] = new
        self._cap = rows

    def _append(self, out: dict[str, np.ndarray], n: int) -> None:
        if self._n + n > self._cap:
            self.reserve(max(2 * self._cap, self._n + n, 1024))
        a, b = self._n, self._n + n
        for c in _ALL_COLS:
            v = out.get(c)
            if v is None:
                self._cols[c][a:b] = 0 if c == "_kind" else np.nan
            else:
                self._cols[c][a:b] = v
        for c in _PRESENCE_COLS:
            self._pres[c][a:b] = c in out
        self._n = b

    def add_group(self, keys: list[str], cols: dict[str, np.ndarray], lines: np.ndarray) -> None:
        n = len(lines)
        out: dict[str, np.ndarray] = {"line": lines}
        for k, v in cols.items():
            bad = ~np.isfinite(v)
            if bad.any():  # nan in any metric (rewards, kl, logps...), not only loss and grad_norm
                self._note_nonfinite(k, int(bad.sum()), int(lines[np.argmax(bad)]))
                good = v[~bad]
                if len(good):
                    self._note_range(k, float(good.min()), float(good.max()), len(good))
            elif n:
                self._note_range(k, float(v.min()), float(v.max()), n)
            if k in STEP_KEYS:
                out[STEP_KEYS[k]] = v
            elif k.endswith("#0"):
                out["step"] = v
            elif k.endswith("#1"):
                out["max_steps"] = v
            elif k in SPEED_KEYS:
                if SPEED_KEYS[k] == "s/it":
                    out["train_speed_s_per_it"] = v
                    out["_kind"] = _KIND_SPI
                else:
                    with np.errstate(divide="ignore", invalid="ignore"):
                        out["train_speed_s_per_it"] = np.where(v > 0, 1.0 / v, np.nan)
                    out["_kind"] = _KIND_IPS
        self._append(out, n)
        if keys not in self.layouts:
            self.layouts.append(keys)

    def add_dict(self, d: dict[str, Any], line: int) -> None:
        row: dict[str, float] = {"line": float(line)}
        for k, v in d.items():
            if not k.startswith("_") and isinstance(v, (int, float, str)) and not isinstance(v, bool):
                n_ = to_number(v)
                if isinstance(n_, float) and not math.isfinite(n_):
                    self._note_nonfinite(k, 1, line)
                elif isinstance(n_, (int, float)):
                    self._note_range(k, float(n_), float(n_), 1)
            if k in STEP_KEYS:
                n = to_number(v)
                if n is not None:
                    row[STEP_KEYS[k]] = float(n)
            elif k in ("global_step/max_steps", "iteration"):
                a, b = split_pair(v)
                if a is not None:
                    row["step"] = float(a)
                if b is not None:
                    row["max_steps"] = float(b)
            elif k in SPEED_KEYS:
                n = to_number(v)
                if isinstance(n, (int, float)) and not math.isnan(n):
                    if SPEED_KEYS[k] == "s/it":
                        row["train_speed_s_per_it"], row["_kind"] = float(n), _KIND_SPI
                    elif n > 0:
                        row["train_speed_s_per_it"], row["_kind"] = 1.0 / n, _KIND_IPS
            elif k == "elapsed_time":
                el = parse_duration(v)
                if el is not None:
                    self._printed_elapsed.append((float(line), el))
        self._dicts.append(row)
        keys = [k for k in d if not k.startswith("_")]
        if keys not in self.layouts and len(self.layouts) < 16:
            self.layouts.append(keys)

    def add_megatron(self, r: dict[str, Any]) -> None:
        row: dict[str, float] = {"line": float(r["_line"]), "step": float(r["step"]), "max_steps": float(r["max_steps"])}
        names = {
            "loss": ("loss", "lm loss"),
            "grad_norm": ("grad norm",),
            "learning_rate": ("learning rate",),
            "memory_gib": ("memory(GiB)",),
        }
        for col, keys in names.items():
            for k in keys:
                if k in r:
                    n = to_number(r[k])
                    if n is not None:
                        row[col] = float(n)
                    break
        ms = to_number(r.get("elapsed time per iteration (ms)"))
        if ms is None and isinstance(r.get("elapsed time per iteration"), str):  # Megatron-Bridge: '21392.5 ms'
            m = re.match(r"\s*(\d+(?:\.\d+)?)\s*ms\b", r["elapsed time per iteration"])
            ms = float(m.group(1)) if m else None
        if ms is not None:
            row["interval_s"] = float(ms) / 1000.0
            row["_kind"] = _KIND_INTERVAL
        el = parse_duration(r.get("elapsed time"))
        if el is not None:
            row["elapsed_s"] = el
        nan_it = to_number(r.get("number of nan iterations"))
        if isinstance(nan_it, (int, float)) and nan_it > 0 and "loss" not in row:
            row["loss"] = math.nan
        self._dicts.append(row)

    def build(self, start_step: float = 0.0) -> StepsTable:
        if not self._n and not self._dicts:
            return StepsTable()
        if self._dicts:
            nd = len(self._dicts)
            self._append({c: np.array([d.get(c, 0 if c == "_kind" else np.nan) for d in self._dicts],
                                      np.int8 if c == "_kind" else np.float64) for c in _ALL_COLS}, nd)
            for c in _PRESENCE_COLS:
                self._pres[c][self._n - nd : self._n] = [c in d for d in self._dicts]
            self._dicts = []
        n = self._n
        cols = {c: v[:n] for c, v in self._cols.items()}
        pres = {c: v[:n] for c, v in self._pres.items()}
        self._cols, self._pres, self._n, self._cap = {}, {}, 0, 0
        line = cols["line"]
        if n > 1 and not (line[1:] >= line[:-1]).all():
            order = np.argsort(line, kind="stable")
            cols = {c: v[order] for c, v in cols.items()}
            pres = {c: v[order] for c, v in pres.items()}
        start_step = self._resumed_start(cols, start_step)
        _derive_times(cols, start_step)
        del cols["_kind"]
        return StepsTable(cols, pres)

    def _resumed_start(self, cols: dict[str, np.ndarray], start_step: float) -> float:
        """The step a resumed 3.12.5+/4.x run restarted its clock at, from the printed elapsed_time.

        train_speed(s/it) there is elapsed / (step - start_step); a pasted excerpt of a resumed run
        carries no --resume_from_checkpoint, but step - elapsed_time / s_per_it gives start_step back
        (to the second elapsed_time is rounded to).  Kept only when it is clearly past start_step.
        """
        if not self._printed_elapsed or start_step:
            return start_step
        at = {ln: el for ln, el in self._printed_elapsed}
        est = []
        for i in np.flatnonzero(cols["_kind"] == _KIND_SPI):
            el, spi, st = at.get(float(cols["line"][i])), cols["train_speed_s_per_it"][i], cols["step"][i]
            if el is not None and spi > 0 and el > 0 and not np.isnan(st):
                est.append(st - el / spi)
        if len(est) < 2:
            return start_step
        s0 = float(np.median(est))
        first = float(np.nanmin(cols["step"]))
        return round(s0) if 1 <= s0 < first and (first - s0) > 0 else start_step


def _derive_times(cols: dict[str, np.ndarray], start_step: float) -> None:
    """Fill `elapsed_s` and `interval_s` in place, with few temporaries (1M rows: ~8 MB each)."""
    step, spd, kind = cols["step"], cols["train_speed_s_per_it"], cols["_kind"]
    elapsed, interval = cols["elapsed_s"], cols["interval_s"]
    spi = kind == _KIND_SPI
    if spi.all():
        np.multiply(spd, step - start_step, out=elapsed)
    elif spi.any():
        elapsed[spi] = spd[spi] * (step[spi] - start_step)
    ips = kind == _KIND_IPS
    if ips.all():
        np.multiply(spd, step, out=elapsed)
    elif ips.any():
        elapsed[ips] = spd[ips] * step[ips]
    del spi, ips
    direct = kind == _KIND_INTERVAL
    derived = ~direct & ~np.isnan(elapsed)
    if derived.any():
        every = bool(derived.all())
        idx = None if every else np.flatnonzero(derived)
        e, s = (elapsed, step) if every else (elapsed[idx], step[idx])
        with np.errstate(divide="ignore", invalid="ignore"):
            ds = np.diff(s)
            iv = np.diff(e)
            ok = (ds > 0) & (iv > 0)
            np.divide(iv, ds, out=iv)
            iv[~ok] = np.nan
            del ok
            first = e[0] / (s[0] - start_step) if s[0] - start_step > 0 and e[0] > 0 else np.nan
        # a restart (step going backwards) starts a new clock: take that row's own average
        back = np.flatnonzero(ds <= 0)
        del ds
        if len(back):
            with np.errstate(divide="ignore", invalid="ignore"):
                iv[back] = np.where(s[back + 1] > 0, e[back + 1] / s[back + 1], np.nan)
        if every:
            interval[0] = first
            interval[1:] = iv
        else:
            interval[idx] = np.concatenate(([first], iv))
        del iv
    if direct.any() and np.isnan(elapsed[direct]).all():
        idx = np.flatnonzero(direct)
        ds = np.diff(np.concatenate(([start_step], step[idx])))
        ds[ds <= 0] = 1
        elapsed[idx] = np.cumsum(interval[idx] * ds)


# dialect field -> StepsTable column (parse.dialects rows: other trainers' step lines)
_DIALECT_COLS = {"step": "step", "total": "max_steps", "loss": "loss", "grad_norm": "grad_norm", "lr": "learning_rate",
                 "mem_peak_gib": "memory_gib", "epoch": "epoch", "step_time_s": "interval_s",
                 "data_time_s": "data_time_s", "samples_per_s": "samples_per_s", "tokens_per_s": "tokens_per_s",
                 "mfu_pct": "mfu_pct", "loss_scale": "loss_scale"}


def table_from_rows(rows: list[tuple[int, Any]]) -> StepsTable:
    """A steps table from other trainers' step rows ((line, DialectRow), in order): the trainer's own step time is
    the interval (it is per iteration already); a row without a step number counts on from the last one."""
    n = len(rows)
    cols: dict[str, np.ndarray] = {c: np.full(n, np.nan) for c in set(_DIALECT_COLS.values()) | {"line"}}
    last = 0.0
    for i, (line, r) in enumerate(rows):
        v = r.values
        for f, c in _DIALECT_COLS.items():
            if f in v:
                cols[c][i] = v[f]
        if "mem_peak_gib" not in v and "mem_current_gib" in v:
            cols["memory_gib"][i] = v["mem_current_gib"]
        if math.isnan(cols["step"][i]):
            cols["step"][i] = last + 1
        last = cols["step"][i]
        cols["line"][i] = line
    # a value the row printed is present, a printed nan included
    present = {c: np.array([f in r.values for _, r in rows], bool) for f, c in _DIALECT_COLS.items()
               if c in ("loss", "grad_norm", "learning_rate", "epoch")}
    present["memory_gib"] = np.array([("mem_peak_gib" in r.values or "mem_current_gib" in r.values) for _, r in rows], bool)
    return StepsTable(cols, present)


def table_from_bars(bars: list[dict[str, Any]]) -> StepsTable:
    """A steps table from tqdm training-bar updates (step, total, s/it, and the loss/lr/epoch a bar's postfix or
    columns carry): progress without a log dict."""
    n = len(bars)
    cols = {"step": np.array([b["step"] for b in bars], float),
            "max_steps": np.array([np.nan if b["total"] is None else b["total"] for b in bars], float),  # open bars
            "interval_s": np.array([b.get("s_per_it", np.nan) for b in bars], float),
            "line": np.array([b["line"] for b in bars], float)}
    present = {c: np.zeros(n, bool) for c in ("loss", "grad_norm", "learning_rate", "memory_gib", "epoch")}
    for col, key in (("loss", "loss"), ("grad_norm", "grad_norm"), ("learning_rate", "lr"), ("epoch", "epoch")):
        vals = [b.get(key) for b in bars]
        if any(v is not None for v in vals):  # the bar's postfix ('loss=2.15') or its columns under a header
            cols[col] = np.array([np.nan if v is None else v for v in vals], float)
            present[col] = np.array([v is not None for v in vals], bool)
    return StepsTable(cols, present)
