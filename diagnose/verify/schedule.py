"""The schedule of a verify experiment, as pure functions: which arm runs in which slot, in which wave.

Contract:
- `round_waves(arms, n_slots, rnd) -> list[list[(slot, arm)]]`: one round is `len(arms)` waves; in wave w
  slot s runs `arms[(s + w + rnd - 1) % len(arms)]`, so that in every round every slot runs every arm
  exactly once (a Latin square), and the arms swap slots from wave to wave: a slow device set cannot
  favour one arm.  The trials of one wave run at the same time, one per slot; with one slot a round is
  the old order A B (C ...).  A wave never holds more trials than slots.
- `slot_factors(trials) -> {slot: factor}`: how fast each slot runs relative to the others, the arms'
  mix taken out: per arm, each slot's mean throughput over the arm's mean across slots; a slot's factor
  is the geometric mean of these ratios over the arms it ran (1.0 = average).  Only ok, unreplaced
  trials count; with one slot every factor is 1.
- The comparison itself treats the slot as a block (`stats.compare_blocked`: log samples/s = arm + slot).
- `slot_rows(trials, slow_below=0.9)`: per slot its trial count, mean samples/s and factor; a slot whose
  factor is below `slow_below` is named slow.
- `clearly_worse(cmp)` / `open_arms(comparisons, min_effect)`: the stop rules (a candidate whose whole
  interval lies below zero is dropped from the next rounds; arms whose interval still straddles zero or
  the minimum effect want another round).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def round_waves(arms: Sequence[str], n_slots: int, rnd: int = 1) -> list[list[tuple[int, str]]]:
    k = len(arms)
    if k == 0 or n_slots < 1:
        return []
    return [[(s, arms[(s + w + rnd - 1) % k]) for s in range(n_slots)] for w in range(k)]


def _ok(trials: Sequence[Any]) -> list[Any]:
    return [t for t in trials if t.status == "ok" and not t.replaced and t.samples_per_s]


def slot_factors(trials: Sequence[Any]) -> dict[str, float]:
    ok = _ok(trials)
    slots = sorted({t.slot for t in ok})
    if len(slots) < 2:
        return {s: 1.0 for s in slots}
    logs: dict[str, list[float]] = {s: [] for s in slots}
    for arm in sorted({t.arm for t in ok}):
        per = {s: [t.samples_per_s for t in ok if t.arm == arm and t.slot == s] for s in slots}
        means = {s: sum(v) / len(v) for s, v in per.items() if v}
        if len(means) < 2:
            continue
        overall = math.exp(sum(math.log(m) for m in means.values()) / len(means))
        for s, m in means.items():
            logs[s].append(math.log(m / overall))
    return {s: math.exp(sum(v) / len(v)) if v else 1.0 for s, v in logs.items()}


def slot_rows(trials: Sequence[Any], slow_below: float = 0.9) -> list[dict[str, Any]]:
    f = slot_factors(trials)
    rows = []
    for s in sorted({t.slot for t in trials}):
        mine = [t for t in _ok(trials) if t.slot == s]
        fac = f.get(s)
        rows.append({"slot": s, "trials": len([t for t in trials if t.slot == s]),
                     "samples_per_s": sum(t.samples_per_s for t in mine) / len(mine) if mine else None,
                     "relative": round(fac, 3) if fac is not None else None,
                     "slow": bool(fac is not None and len(f) > 1 and fac < slow_below)})
    return rows


def clearly_worse(cmp: Any) -> bool:
    return bool(cmp is not None and cmp.ci and cmp.ci[1] < 0)


def open_arms(comparisons: dict[str, Any], min_effect: float) -> list[str]:
    from diagnose.verify.stats import straddles

    return [k for k, c in comparisons.items() if straddles(c, min_effect)]


__all__ = ["round_waves", "slot_factors", "slot_rows", "clearly_worse", "open_arms"]
