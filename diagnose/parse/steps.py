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
from typing import Any

import numpy as np

from diagnose.models import STEP_COLUMNS, StepsTable
from diagnose.parse.values import SPEED_KEYS, STEP_KEYS, parse_duration, split_pair, to_number

_KIND_SPI, _KIND_IPS, _KIND_INTERVAL = 1.0, 2.0, 3.0
_PRESENCE_COLS = ("loss", "grad_norm", "learning_rate", "token_acc", "memory_gib", "epoch")


class StepRows:
    def __init__(self) -> None:
        self._parts: list[dict[str, np.ndarray]] = []
        self._part_keys: list[tuple[int, set[str]]] = []  # (rows, columns present) per group
        self._dicts: list[dict[str, float]] = []
        self.layouts: list[list[str]] = []

    def __len__(self) -> int:
        return sum(len(p["line"]) for p in self._parts) + len(self._dicts)

    def add_group(self, keys: list[str], cols: dict[str, np.ndarray], lines: np.ndarray) -> None:
        n = len(lines)
        out: dict[str, np.ndarray] = {"line": lines.astype(np.float64)}
        for k, v in cols.items():
            if k in STEP_KEYS:
                out[STEP_KEYS[k]] = v
            elif k.endswith("#0"):
                out["step"] = v
            elif k.endswith("#1"):
                out["max_steps"] = v
            elif k in SPEED_KEYS:
                if SPEED_KEYS[k] == "s/it":
                    out["train_speed_s_per_it"] = v
                    out["_kind"] = np.full(n, _KIND_SPI)
                else:
                    with np.errstate(divide="ignore", invalid="ignore"):
                        out["train_speed_s_per_it"] = np.where(v > 0, 1.0 / v, np.nan)
                    out["_kind"] = np.full(n, _KIND_IPS)
        self._parts.append(out)
        self._part_keys.append((n, set(out)))
        if keys not in self.layouts:
            self.layouts.append(keys)

    def add_dict(self, d: dict[str, Any], line: int) -> None:
        row: dict[str, float] = {"line": float(line)}
        for k, v in d.items():
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
        cols_all = list(STEP_COLUMNS) + ["_kind"]
        if not self._parts and not self._dicts:
            return StepsTable()
        nd = len(self._dicts)
        cols: dict[str, np.ndarray] = {}
        for c in cols_all:  # column by column, releasing the pieces: peak memory ≈ table + one column
            pieces = [part.pop(c) if c in part else np.full(n, np.nan)
                      for part, (n, _keys) in zip(self._parts, self._part_keys)]
            if nd:
                pieces.append(np.array([d.get(c, np.nan) for d in self._dicts], dtype=np.float64))
            cols[c] = np.concatenate(pieces) if len(pieces) > 1 else pieces[0]
            del pieces
        pres: dict[str, np.ndarray] = {}
        for c in _PRESENCE_COLS:
            bits = [np.full(n, c in keys) for n, keys in self._part_keys]
            if nd:
                bits.append(np.array([c in d for d in self._dicts], dtype=bool))
            pres[c] = np.concatenate(bits)
        self._parts, self._part_keys = [], []
        order = np.argsort(cols["line"], kind="stable")
        if not (order == np.arange(len(order))).all():
            cols = {c: v[order] for c, v in cols.items()}
            pres = {c: v[order] for c, v in pres.items()}
        _derive_times(cols, start_step)
        kind = cols.pop("_kind")
        del kind
        return StepsTable(cols, pres)


def _derive_times(cols: dict[str, np.ndarray], start_step: float) -> None:
    step, spd, kind = cols["step"], cols["train_speed_s_per_it"], cols["_kind"]
    elapsed = cols["elapsed_s"].copy()
    spi = kind == _KIND_SPI
    elapsed[spi] = spd[spi] * (step[spi] - start_step)
    ips = kind == _KIND_IPS
    elapsed[ips] = spd[ips] * step[ips]
    interval = cols["interval_s"].copy()
    direct = kind == _KIND_INTERVAL
    derived = ~direct & ~np.isnan(elapsed)
    if derived.any():
        idx = np.flatnonzero(derived)
        e, s = elapsed[idx], step[idx]
        with np.errstate(divide="ignore", invalid="ignore"):
            de = np.diff(e)
            ds = np.diff(s)
            iv = np.where((ds > 0) & (de > 0), de / ds, np.nan)
            first = e[0] / (s[0] - start_step) if s[0] - start_step > 0 and e[0] > 0 else np.nan
        interval[idx] = np.concatenate(([first], iv))
        # a restart (step going backwards) starts a new clock: take that row's own average
        back = np.flatnonzero(ds <= 0) + 1
        if len(back):
            with np.errstate(divide="ignore", invalid="ignore"):
                interval[idx[back]] = np.where(s[back] > 0, e[back] / s[back], np.nan)
    if direct.any() and np.isnan(elapsed[direct]).all():
        idx = np.flatnonzero(direct)
        ds = np.diff(np.concatenate(([start_step], step[idx])))
        ds[ds <= 0] = 1
        elapsed[idx] = np.cumsum(interval[idx] * ds)
    cols["elapsed_s"] = elapsed
    cols["interval_s"] = interval
