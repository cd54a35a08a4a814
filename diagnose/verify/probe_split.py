"""verify with `--probe`: where each trial's step time went, per arm, and where a gain came from.

Contract:
- `trial_split(output_dir) -> dict | None`: the probe records of one trial (its newest `v<N>-<date>` run folder's
  `swiftdoc-probe`), as `features.probe_stats.time_split` (mean seconds per step: step_s, data_s, compute_s,
  other_s, data_frac); None when the trial wrote none.
- `arm_split(trials) -> dict | None`: the mean of its ok trials' splits.
- `gain_source(baseline, patched) -> str | None`: one sentence: how much shorter (or longer) the patched arm's step
  is and which part changed most (data wait, compute or the rest).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

_KEYS = ("step_s", "data_s", "compute_s", "other_s")
_WORDS = {"data_s": "data wait", "compute_s": "compute", "other_s": "the rest (logging, bookkeeping, waits)"}


def trial_split(output_dir: str | None) -> dict[str, float | None] | None:
    from diagnose.features.probe_stats import time_split
    from diagnose.parse.probe import FOLDER, read_probe
    from diagnose.parse.sources import newest_version_dir

    if not output_dir:
        return None
    base = Path(output_dir)
    rd = newest_version_dir(base)
    for folder in ([rd / FOLDER] if rd is not None else []) + [base / FOLDER]:
        ps = read_probe(folder)
        if ps is not None and ps.ranks:
            return time_split(ps)
    return None


def arm_split(trials: list[Any]) -> dict[str, float | None] | None:
    splits = [t.time_split for t in trials if getattr(t, "time_split", None)]
    if not splits:
        return None
    out: dict[str, float | None] = {}
    for k in _KEYS:
        vals = [s[k] for s in splits if s.get(k) is not None]
        out[k] = round(sum(vals) / len(vals), 6) if vals else None
    out["data_frac"] = round(out["data_s"] / out["step_s"], 4) if out.get("step_s") and out.get("data_s") is not None \
        else None
    return out


def gain_source(baseline: dict[str, Any] | None, patched: dict[str, Any] | None) -> str | None:
    if not baseline or not patched or baseline.get("step_s") is None or patched.get("step_s") is None:
        return None
    deltas = {k: patched[k] - baseline[k] for k in _WORDS if patched.get(k) is not None and baseline.get(k) is not None}
    if not deltas:
        return None
    total = patched["step_s"] - baseline["step_s"]
    main = min(deltas, key=lambda k: deltas[k]) if total < 0 else max(deltas, key=lambda k: deltas[k])
    parts = ", ".join(f"{_WORDS[k].split(' (')[0]} {v:+.3g} s" for k, v in deltas.items())
    way = "shorter" if total < 0 else "longer"
    return (f"probe: the patched step is {abs(total):.3g} s {way} ({baseline['step_s']:.3g} -> {patched['step_s']:.3g} s "
            f"per step; {parts}): mostly {_WORDS[main]}")
