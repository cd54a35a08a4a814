"""The samples file: written by `swiftdoc sample` / `attach`, read by `analyze` and `attach`.

Contract:
- Format (JSON lines, documented in docs/attach.md): a `header` line, then
  `sample` lines `{"kind": "sample", "t": unix_s, "gpus": [...]}`, optional
  `mark` lines written by attach (`{"kind": "mark", "t", "event": "step", "step"}`,
  `{"kind": "mark", "t", "event": "gpus", "gpus": [indices]}`)
  and `end`.  N/A metrics are `null`.  A file may hold several sessions (a new
  header starts one); a truncated last line (file still being written) is skipped.
- `SampleWriter(path)` appends records, one flushed line each.
- `load_samples(path) -> SampleSet`; raises `InputError` for a missing file, one
  that is not a samples file, a malformed one (records of the wrong shape or types),
  one that is not a regular file or one longer than `--max-input`.
- `SampleSet.summary(gpus=None, t0=None, t1=None) -> dict`: GPU-level numbers
  (`SUMMARY_KEYS`); each is `None` when no sample carried it (never 0 for N/A).
  GPUs: `gpus`, else the job's GPUs recorded by attach (`gpus` mark), else all.
  The window is t0..t1 when given, else from the first `step` mark (training
  began) to the end, else the span from the first non-zero utilisation (else
  the first compute process) to the last sample with either, else every sample.
- `find_samples_near(log_path, output_dir=None) -> Path | None`: auto-discovery
  of `swiftdoc-samples.jsonl` next to the log, in the output dir or its newest
  `v<N>-<date>/` run folder.
No pynvml here.
"""
from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from diagnose.errors import InputError

SAMPLES_FILENAME = "swiftdoc-samples.jsonl"
GIB_PER_MIB = 1 / 1024

SUMMARY_KEYS: tuple[str, ...] = (
    "gpu_count", "gpu_name", "n_samples", "duration_s", "interval_s",
    "gpu_util_mean_pct", "gpu_util_p10_pct", "gpu_util_min_gpu_mean_pct", "mem_util_mean_pct",
    "mem_used_max_gib", "mem_total_gib", "mem_headroom_frac",
    "pcie_rx_mean_mbps", "pcie_tx_mean_mbps", "power_mean_w", "power_limit_w", "power_frac_mean",
    "throttle_reasons", "throttle_power_frac", "throttle_thermal_frac",
    "sm_clock_mean_mhz", "mem_clock_mean_mhz", "temperature_max_c", "xid_errors", "xid_codes", "ecc_errors",
    "mig",
)

_NUMERIC = ("util_gpu_pct", "util_mem_pct", "mem_used_mib", "mem_total_mib", "pcie_tx_mbps", "pcie_rx_mbps",
            "power_w", "power_limit_w", "sm_clock_mhz", "mem_clock_mhz", "temp_c", "ecc_uncorrected",
            "throttle_mask")
_POWER_BITS = 0x4 | 0x80  # sw_power_cap, hw_power_brake
_THERMAL_BITS = 0x8 | 0x20 | 0x40  # hw_slowdown, sw_thermal, hw_thermal
_VDIR = re.compile(r"^v(\d+)-\d{8}-\d{6}$")


class SampleWriter:
    """Append-only JSON lines; each record is one flushed line (readers see whole lines)."""

    def __init__(self, path: str | os.PathLike[str] | IO[str]):
        if hasattr(path, "write"):
            self._f: IO[str] = path  # type: ignore[assignment]
            self._own = False
            self.path = None
        else:
            self.path = Path(path)  # type: ignore[arg-type]
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._f = self.path.open("a", encoding="utf-8")
            self._own = True

    def write(self, rec: dict[str, Any]) -> None:
        self._f.write(json.dumps(rec, separators=(",", ":"), allow_nan=False) + "\n")
        self._f.flush()

    __call__ = write

    def close(self) -> None:
        if self._own:
            self._f.close()


def _f(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _opt(v: Any, nd: int = 2) -> float | None:
    if v is None:
        return None
    v = float(v)
    return round(v, nd) if math.isfinite(v) else None


class SampleSet:
    """Samples of one or more GPUs over time (see module docstring)."""

    def __init__(self, header: dict[str, Any] | None = None, records: Iterable[dict[str, Any]] = (),
                 path: str | None = None):
        self.header: dict[str, Any] = dict(header or {})
        self.path = path
        self.records: list[dict[str, Any]] = []
        self.xid: list[dict[str, Any]] = []
        self.marks: list[dict[str, Any]] = []
        self.ended = False
        self.job_gpus: list[int] | None = None  # the followed job's GPUs (attach's `gpus` mark)
        self._cols: dict[str, list[list[float]]] = {k: [] for k in _NUMERIC + ("_procs",)}
        self._order: list[int] = []  # GPU index of each cached column
        self._pos: dict[int, int] = {}
        self._t: list[float] = []
        self._gpu_info: dict[int, dict[str, Any]] = {g["index"]: g for g in self.header.get("gpus", [])
                                                     if isinstance(g, dict) and "index" in g}
        for r in records:
            self.add(r)

    def add(self, rec: dict[str, Any]) -> None:
        kind = rec.get("kind", "sample")
        if kind == "sample":
            if not isinstance(rec.get("gpus"), list) or _f(rec.get("t")) is None:
                return
            self.records.append(rec)
            for x in rec.get("xid") or ():
                self.xid.append(x)
        elif kind == "mark":
            self.marks.append(rec)
            if rec.get("event") == "gpus" and isinstance(rec.get("gpus"), list):
                self.job_gpus = [int(i) for i in rec["gpus"] if isinstance(i, int)]
        elif kind == "header":
            self.header = {**self.header, **rec}
            for g in rec.get("gpus") or ():
                if isinstance(g, dict) and "index" in g:
                    self._gpu_info[g["index"]] = {**self._gpu_info.get(g["index"], {}), **g}
            self.header["gpus"] = [self._gpu_info[i] for i in sorted(self._gpu_info)]
        elif kind == "end":
            self.ended = True

    def __len__(self) -> int:
        return len(self.records)

    # ------------------------------------------------------------------ columns (built incrementally)
    def _build(self) -> None:
        """Extend the cached per-key columns with records added since the last call."""
        n0 = len(self._t)
        nan = math.nan
        for r in self.records[n0:]:
            gs = r["gpus"]
            for g in gs:
                i = g.get("index")
                if isinstance(i, int) and i not in self._pos:
                    self._pos[i] = len(self._order)
                    self._order.append(i)
            width = len(self._order)
            rows = {k: [nan] * width for k in self._cols}
            for g in gs:
                j = self._pos.get(g.get("index"))  # type: ignore[arg-type]
                if j is None:
                    continue
                for k in _NUMERIC:
                    v = g.get(k)
                    if v is not None and not isinstance(v, bool):
                        try:
                            rows[k][j] = float(v)
                        except (TypeError, ValueError):
                            pass
                p = g.get("procs")
                rows["_procs"][j] = float(len(p)) if isinstance(p, list) else nan
            for k, v in rows.items():
                self._cols[k].append(v)
            self._t.append(float(r["t"]))

    def gpu_indices(self) -> list[int]:
        self._build()
        return sorted(set(self._gpu_info) | set(self._order))

    def gpu_info(self, index: int) -> dict[str, Any]:
        return self._gpu_info.get(index, {})

    def times(self) -> np.ndarray:
        self._build()
        return np.array(self._t, dtype=np.float64)

    def matrix(self, key: str, gpus: Sequence[int], lo: int = 0, hi: int | None = None) -> np.ndarray:
        """(n_samples, n_gpus) float array of `key` for records[lo:hi]; NaN where N/A or absent."""
        self._build()
        rows = self._cols[key][lo:hi]
        width = len(self._order)
        try:
            full = np.array(rows, dtype=np.float64).reshape(len(rows), width)
        except ValueError:  # the GPU set grew along the way: pad the early rows
            full = np.full((len(rows), width), np.nan)
            for i, r in enumerate(rows):
                full[i, : len(r)] = r
        out = np.full((len(rows), len(gpus)), np.nan)
        for j, g in enumerate(gpus):
            c = self._pos.get(g)
            if c is not None:
                out[:, j] = full[:, c]
        return out

    def series(self, key: str, gpu: int, last: int | None = None) -> list[float | None]:
        n = len(self.records)
        lo = max(0, n - last) if last else 0
        m = self.matrix(key, [gpu], lo)[:, 0]
        return [None if math.isnan(v) else float(v) for v in m]

    def latest(self) -> dict[int, dict[str, Any]]:
        if not self.records:
            return {}
        return {g["index"]: g for g in self.records[-1]["gpus"] if "index" in g}

    def _window(self, gpus: Sequence[int], t0: float | None, t1: float | None) -> tuple[int, int, str]:
        """records[lo:hi] to summarise, and why (see module docstring)."""
        t = self.times()
        n = len(t)
        if t0 is not None or t1 is not None:
            lo = int(np.searchsorted(t, -math.inf if t0 is None else t0, "left"))
            hi = int(np.searchsorted(t, math.inf if t1 is None else t1, "right"))
            return lo, hi, "explicit"
        steps = [float(m["t"]) for m in self.marks if m.get("event") == "step" and _f(m.get("t")) is not None]
        if steps:
            lo = int(np.searchsorted(t, min(steps), "left"))
            if lo < n:
                return lo, n, "steps"
        if n and gpus:
            util = self.matrix("util_gpu_pct", gpus)
            procs = self.matrix("_procs", gpus)
            busy = (np.nan_to_num(util) > 0).any(axis=1)
            act = busy | (np.nan_to_num(procs) > 0).any(axis=1)
            hit = np.flatnonzero(act)
            if hit.size:
                # a job holds the GPU from its model load on, long before its first kernel of training (data
                # preprocessing in between): the window starts at the first busy sample when there is one
                first = np.flatnonzero(busy)
                lo = int(first[0]) if first.size else int(hit[0])
                return lo, int(hit[-1]) + 1, "active"
        return 0, n, "all"

    # ------------------------------------------------------------------ summary
    def summary(self, gpus: Sequence[int] | None = None, t0: float | None = None,
                t1: float | None = None) -> dict[str, Any]:
        if gpus is None:
            gpus = self.job_gpus if self.job_gpus else self.gpu_indices()
        idx = list(gpus)
        out: dict[str, Any] = {k: None for k in SUMMARY_KEYS}
        lo, hi, basis = self._window(idx, t0, t1)
        t = self.times()[lo:hi]
        out["gpu_count"] = len(idx) if idx else None
        names = [self.gpu_info(i).get("name") for i in idx]
        names = [n for n in dict.fromkeys(names) if n]
        out["gpu_name"] = ", ".join(names) if names else None
        migs = [self.gpu_info(i).get("mig") for i in idx]
        out["mig"] = any(bool(m) for m in migs) if any(m is not None for m in migs) else None
        out["n_samples"] = int(len(t))
        out["window"] = {"basis": basis, "t0": float(t[0]) if len(t) else None, "t1": float(t[-1]) if len(t) else None}
        out["xid_errors"], out["xid_codes"] = self._xid_summary(idx)
        out["per_gpu"] = []
        if not len(t) or not idx:
            return out
        out["duration_s"] = _opt(t[-1] - t[0], 3)
        if len(t) > 1:
            out["interval_s"] = _opt(np.median(np.diff(t)), 3)
        m = {k: self.matrix(k, idx, lo, hi) for k in _NUMERIC}

        def agg(fn: Any, a: np.ndarray, nd: int = 2) -> float | None:
            a = a[~np.isnan(a)]
            return _opt(fn(a), nd) if a.size else None

        util = m["util_gpu_pct"]
        out["gpu_util_mean_pct"] = agg(np.mean, util, 1)
        out["gpu_util_p10_pct"] = agg(lambda a: np.percentile(a, 10), util, 1)
        out["mem_util_mean_pct"] = agg(np.mean, m["util_mem_pct"], 1)
        out["pcie_rx_mean_mbps"] = agg(np.mean, m["pcie_rx_mbps"], 1)
        out["pcie_tx_mean_mbps"] = agg(np.mean, m["pcie_tx_mbps"], 1)
        out["power_mean_w"] = agg(np.mean, m["power_w"], 1)
        out["power_limit_w"] = agg(np.median, m["power_limit_w"], 1)
        if out["power_mean_w"] is not None and out["power_limit_w"]:
            out["power_frac_mean"] = _opt(out["power_mean_w"] / out["power_limit_w"], 3)
        out["sm_clock_mean_mhz"] = agg(np.mean, m["sm_clock_mhz"], 0)
        out["mem_clock_mean_mhz"] = agg(np.mean, m["mem_clock_mhz"], 0)
        out["temperature_max_c"] = agg(np.max, m["temp_c"], 0)

        # memory: the GPU closest to full decides the headroom
        used_max = _colmax(m["mem_used_mib"])
        total = _colmax(m["mem_total_mib"])
        for j, i in enumerate(idx):
            if math.isnan(total[j]):
                total[j] = _f(self.gpu_info(i).get("mem_total_mib")) or np.nan
        frac = used_max / total
        if not np.isnan(frac).all():
            k = int(np.nanargmax(frac))
            out["mem_used_max_gib"] = _opt(np.nanmax(used_max) * GIB_PER_MIB, 3)
            out["mem_total_gib"] = _opt(total[k] * GIB_PER_MIB, 3)
            out["mem_headroom_frac"] = _opt(1.0 - frac[k], 4)
        elif not np.isnan(used_max).all():
            out["mem_used_max_gib"] = _opt(np.nanmax(used_max) * GIB_PER_MIB, 3)

        mask = m["throttle_mask"]
        have = ~np.isnan(mask)
        if have.any():
            bits = mask[have].astype(np.int64)
            from diagnose.nvml.sampler import THROTTLE_BITS

            seen = int(np.bitwise_or.reduce(bits)) if bits.size else 0
            out["throttle_reasons"] = [name for bit, name in THROTTLE_BITS if seen & bit]
            out["throttle_power_frac"] = _opt(float(np.mean((bits & _POWER_BITS) != 0)), 3)
            out["throttle_thermal_frac"] = _opt(float(np.mean((bits & _THERMAL_BITS) != 0)), 3)

        ecc = m["ecc_uncorrected"]
        deltas = [float(np.nanmax(c) - c[~np.isnan(c)][0]) for c in ecc.T if (~np.isnan(c)).any()]
        out["ecc_errors"] = int(max(deltas)) if deltas else None

        umeans = [agg(np.mean, util[:, j], 1) for j in range(len(idx))]
        if any(u is not None for u in umeans):
            out["gpu_util_min_gpu_mean_pct"] = min(u for u in umeans if u is not None)
        procs_n = self.matrix("_procs", list(idx))
        for j, i in enumerate(idx):
            info = self.gpu_info(i)
            pj = procs_n[:, j]
            out["per_gpu"].append({
                "pcie_width": info.get("pcie_width"), "pcie_max_width": info.get("pcie_max_width"),
                "xid_codes": sorted({int(x["xid"]) for x in self.xid if x.get("index") == i and _f(x.get("xid")) is not None}),
                "procs_max": int(np.nanmax(pj)) if (~np.isnan(pj)).any() else None,
                "index": i,
                "name": self.gpu_info(i).get("name"),
                "util_mean_pct": umeans[j],
                "mem_used_max_gib": _opt(used_max[j] * GIB_PER_MIB, 3) if not math.isnan(used_max[j]) else None,
                "mem_total_gib": _opt(total[j] * GIB_PER_MIB, 3) if not math.isnan(total[j]) else None,
                "power_mean_w": agg(np.mean, m["power_w"][:, j], 1),
                "temperature_max_c": agg(np.max, m["temp_c"][:, j], 0),
                "sm_clock_mean_mhz": agg(np.mean, m["sm_clock_mhz"][:, j], 0),
                "throttle_reasons": _reasons(m["throttle_mask"][:, j]),
            })
        return out

    def _xid_summary(self, idx: Sequence[int]) -> tuple[int | None, list[int] | None]:
        readable = [self.gpu_info(i).get("xid_readable") for i in idx]
        want = set(idx)
        ev = [x for x in self.xid if x.get("index") in want or x.get("index") is None]
        if ev:
            return len(ev), sorted({int(x["xid"]) for x in ev if _f(x.get("xid")) is not None})
        if any(readable):
            return 0, []
        return None, None


def _colmax(a: np.ndarray) -> np.ndarray:
    out = np.full(a.shape[1], np.nan)
    for j in range(a.shape[1]):
        c = a[:, j]
        c = c[~np.isnan(c)]
        if c.size:
            out[j] = c.max()
    return out


def _malformed(rec: dict[str, Any]) -> str | None:
    """What is wrong with one record's shape (a crafted or damaged file), or None: every GPU entry a mapping with
    an int index, every metric a number or null, every list a list."""
    kind = rec.get("kind", "sample")
    if not isinstance(kind, str):
        return "kind is not a string"
    gpus = rec.get("gpus")
    if gpus is not None and not isinstance(gpus, list):
        return "gpus is not a list"
    for g in gpus or ():
        if kind == "mark":
            if type(g) is not int:
                return "a gpus mark holds a non-index"
            continue
        if not isinstance(g, dict) or ("index" in g and type(g["index"]) is not int):
            return "a GPU entry is not a mapping with an int index"
        for k in _NUMERIC:
            v = g.get(k)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or abs(v) > 1e18):
                return f"{k} is not a number"
        if g.get("procs") is not None and not isinstance(g.get("procs"), list):
            return "procs is not a list"
    xid = rec.get("xid")
    if xid is not None and (not isinstance(xid, list) or not all(isinstance(x, dict) for x in xid)):
        return "xid is not a list of mappings"
    for k in ("t", "step"):
        v = rec.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or abs(v) > 1e18):
            return f"{k} is not a number"
    return None


def load_samples(path: str | os.PathLike[str]) -> SampleSet:
    from diagnose.parse.bounded import read_file

    p = Path(path)
    if p.is_dir():
        found = find_samples_near(p)
        if found is None:
            raise InputError(f"{p}: no {SAMPLES_FILENAME} in this directory") from None
        return load_samples(found)
    if not p.exists():
        raise InputError(f"{p}: no such samples file", hint="record one with `swiftdoc sample --out FILE`") from None
    data = read_file(p, str(p))  # a regular file, bounded
    ss = SampleSet(path=str(p))
    header_seen = False
    for n, line in enumerate(data.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            if n == 1 or not header_seen:
                raise InputError(f"{p}: not a swiftdoc samples file (line {n} is not JSON)",
                                 hint="see docs/attach.md for the format") from None
            continue  # a line still being written
        if not isinstance(rec, dict):
            continue
        why = _malformed(rec)
        if why is not None:
            raise InputError(f"{p}: a malformed samples file (line {n}: {why})",
                             hint="see docs/attach.md for the format; move the file aside to analyze without it")
        if rec.get("kind") == "header":
            if not str(rec.get("schema", "")).startswith("swiftdoc-samples/"):
                raise InputError(f"{p}: unknown samples schema {rec.get('schema')!r}")
            header_seen = True
        elif not header_seen:
            raise InputError(f"{p}: not a swiftdoc samples file (no header line)",
                             hint="see docs/attach.md for the format")
        ss.add(rec)
    if not header_seen:
        raise InputError(f"{p}: empty samples file")
    return ss


def _newest_vdir(d: Path) -> Path | None:
    best = None
    try:
        for c in d.iterdir():
            m = _VDIR.match(c.name)
            if m and c.is_dir():
                key = (int(m.group(1)), c.name)
                if best is None or key > best[0]:
                    best = (key, c)
    except OSError:
        return None
    return best[1] if best else None


def samples_candidates(log_path: str | os.PathLike[str], output_dir: str | os.PathLike[str] | None = None) -> list[Path]:
    """Where a samples file for this log would be, most specific first."""
    p = Path(log_path)
    dirs: list[Path] = []
    out: list[Path] = []
    if p.is_dir():
        dirs.append(p)
        v = _newest_vdir(p)
        if v is not None:
            dirs.insert(0, v)
    else:
        out.append(p.with_name(p.name + ".samples.jsonl"))
        dirs.append(p.parent)
    if output_dir:
        od = Path(output_dir)
        dirs.append(od)
        v = _newest_vdir(od)
        if v is not None:
            dirs.append(v)
    out += [d / SAMPLES_FILENAME for d in dirs]
    return list(dict.fromkeys(out))


def _reasons(col: np.ndarray) -> list[str] | None:
    have = ~np.isnan(col)
    if not have.any():
        return None
    from diagnose.nvml.sampler import THROTTLE_BITS

    seen = int(np.bitwise_or.reduce(col[have].astype(np.int64)))
    return [name for bit, name in THROTTLE_BITS if seen & bit]


def find_samples_near(log_path: str | os.PathLike[str], output_dir: str | os.PathLike[str] | None = None) -> Path | None:
    for c in samples_candidates(log_path, output_dir):
        if c.is_file():
            return c
    return None
