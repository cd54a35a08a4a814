"""The statistics of a verify experiment: per-trial throughput, gain with its CI, verdict, loss parity.

Contract (pure functions, numpy + stdlib only):
- `trial_throughput(steps, intervals, global_batch, warmup)` -> `Throughput`:
  the median interval seconds per optimizer step over the steps after
  `warmup`, and samples/s = global batch / that median.  Intervals come from
  consecutive log rows (ms-swift's train_speed is cumulative), so the start-up
  time of a trial (imports, model load, preprocessing, the first step) is
  excluded by construction.  Intervals marked in `exclude` (the machine was
  saturated by other processes, see `diagnose.verify.contention`) are set
  aside.
- `compare(baseline, patched, confidence, min_effect)` -> `Comparison`: gain =
  mean(patched) / mean(baseline) - 1 over per-trial samples/s; its CI is a
  Welch t interval on the log of the ratio of means (delta method: the
  variance of log mean(x) is cv(x)^2 / n), mapped back, so it is asymmetric and
  never below -100%.  Verdict: `confirmed` when lo > 0 and gain >= min_effect,
  `worse` when hi < 0, else `not_confirmed`.  Fewer than two trials in an arm
  gives no CI (and `not_confirmed`).
- `straddles(cmp, min_effect)`: more trials could change the verdict (the CI
  contains 0 or the minimum effect); the adaptive schedule adds a pair then.
- `loss_parity(base_losses, patched_losses, rel_tol, abs_tol)` -> `Parity`:
  losses at equal global steps (same seed, same data, same global batch).
- `t_ppf(p, df)`: Student-t quantile for real df (Welch df is not an integer),
  from the regularized incomplete beta function; no scipy.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# --------------------------------------------------------------------------- Student t


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction for the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        de = d * c
        h *= de
        if abs(de - 1.0) < 1e-14:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lbt) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbt) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    x = df / (df + t * t)
    tail = 0.5 * _betainc(df / 2.0, 0.5, x)
    return 1.0 - tail if t > 0 else tail


def t_ppf(p: float, df: float) -> float:
    """Quantile of Student's t with `df` (> 0, real) degrees of freedom."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError("t_ppf needs 0 < p < 1 and df > 0")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_ppf(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
        if hi > 1e12:
            return math.inf
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


# --------------------------------------------------------------------------- per trial


@dataclass
class Throughput:
    step_time_s: float | None  # median interval s/step after warm-up
    samples_per_s: float | None
    measured_steps: int  # intervals that entered the median
    step_time_iqr_s: float | None = None
    note: str | None = None


def default_warmup(max_steps: int) -> int:
    """Steps dropped at the start of every trial: 10% of the trial, at least 3 (first step = start-up)."""
    return max(3, math.ceil(0.1 * max_steps))


def trial_throughput(steps: Sequence[float], intervals: Sequence[float], global_batch: float | None,
                     warmup: int, exclude: Sequence[bool] | None = None) -> Throughput:
    """`exclude` marks intervals to set aside (contended by other processes); see module docstring."""
    s = np.asarray(steps, dtype=float)
    iv = np.asarray(intervals, dtype=float)
    keep = (s > warmup) & np.isfinite(iv) & (iv > 0)
    if exclude is not None:
        keep &= ~np.asarray(exclude, dtype=bool)
    n = int(keep.sum())
    if n == 0:
        return Throughput(None, None, 0, note=f"no logged step after the {warmup} warm-up steps")
    x = iv[keep]
    med = float(np.median(x))
    q1, q3 = (float(v) for v in np.percentile(x, [25, 75]))
    sps = float(global_batch) / med if global_batch else None
    note = None if global_batch else "global batch size unknown: samples/s not computed"
    return Throughput(med, sps, n, q3 - q1, note)


# --------------------------------------------------------------------------- arms


@dataclass
class Comparison:
    gain: float | None  # mean(patched) / mean(baseline) - 1
    ci: tuple[float, float] | None
    verdict: str  # confirmed | not_confirmed | worse
    df: float | None = None
    n_baseline: int = 0
    n_patched: int = 0
    reason: str = ""
    notes: list[str] = field(default_factory=list)
    more: bool = False  # decisive-looking but on too few degrees of freedom: another round decides


def _mean_cv(x: Sequence[float]) -> tuple[float, float]:
    a = np.asarray(x, dtype=float)
    m = float(a.mean())
    sd = float(a.std(ddof=1)) if len(a) > 1 else 0.0
    return m, (sd / m if m > 0 else math.inf)


def compare(baseline: Sequence[float], patched: Sequence[float], confidence: float = 0.95,
            min_effect: float = 0.03) -> Comparison:
    b = [float(v) for v in baseline if v is not None and math.isfinite(v) and v > 0]
    p = [float(v) for v in patched if v is not None and math.isfinite(v) and v > 0]
    nb, np_ = len(b), len(p)
    if not nb or not np_:
        return Comparison(None, None, "not_confirmed", n_baseline=nb, n_patched=np_,
                          reason="no usable trial in an arm")
    mb, cvb = _mean_cv(b)
    mp, cvp = _mean_cv(p)
    ratio = mp / mb
    gain = ratio - 1.0
    if nb < 2 or np_ < 2:
        return Comparison(gain, None, "not_confirmed", n_baseline=nb, n_patched=np_,
                          reason="fewer than two trials in an arm: no confidence interval")
    vb, vp = cvb * cvb / nb, cvp * cvp / np_
    se2 = vb + vp
    if se2 <= 0:  # identical trials in both arms: no measured noise at all
        df = float(nb + np_ - 2)
        lo = hi = gain
    else:
        den = (vb * vb / (nb - 1) if vb else 0.0) + (vp * vp / (np_ - 1) if vp else 0.0)
        df = se2 * se2 / den if den > 0 else float(nb + np_ - 2)
        t = t_ppf(0.5 + confidence / 2.0, df)
        se = math.sqrt(se2)
        lo, hi = ratio * math.exp(-t * se) - 1.0, ratio * math.exp(t * se) - 1.0
    if lo > 0 and gain >= min_effect:
        verdict, why = "confirmed", f"CI lower bound {lo:+.1%} > 0 and gain {gain:+.1%} >= {min_effect:.0%}"
    elif hi < 0:
        verdict, why = "worse", f"CI upper bound {hi:+.1%} < 0"
    elif lo > 0:
        verdict, why = "not_confirmed", f"faster, but the gain {gain:+.1%} is below the minimum effect {min_effect:.0%}"
    else:
        verdict, why = "not_confirmed", f"the CI [{lo:+.1%}, {hi:+.1%}] contains 0: no gain above the noise"
    return Comparison(gain, (lo, hi), verdict, df, nb, np_, why)


def _verdict(gain: float, lo: float, hi: float, min_effect: float) -> tuple[str, str]:
    if lo > 0 and gain >= min_effect:
        return "confirmed", f"CI lower bound {lo:+.1%} > 0 and gain {gain:+.1%} >= {min_effect:.0%}"
    if hi < 0:
        return "worse", f"CI upper bound {hi:+.1%} < 0"
    if lo > 0:
        return "not_confirmed", f"faster, but the gain {gain:+.1%} is below the minimum effect {min_effect:.0%}"
    return "not_confirmed", f"the CI [{lo:+.1%}, {hi:+.1%}] contains 0: no gain above the noise"


_MIN_BLOCKED_DF = 3  # a decisive verdict over slots needs at least this many residual degrees of freedom


def compare_blocked(baseline: Sequence[tuple], patched: Sequence[tuple],
                    confidence: float = 0.95, min_effect: float = 0.03) -> Comparison:
    """Trials that ran in several slots (device sets), the slot as a block: log samples/s = arm + slot + noise,
    fitted by least squares; the gain is exp(arm effect) - 1, its CI a t interval with the residual degrees of
    freedom (n - rank of the design).  A slot that is consistently slower costs one degree of freedom instead of
    widening (or, adjusted naively, narrowing) the interval.  Items are (slot, samples/s) or (slot, samples/s,
    wave): with waves (the trials that ran at the same time, one per slot), the wave is a block too (log samples/s
    = arm + slot + wave): whatever the machine did during a wave (another user's job, a busy disk) hits every
    trial of that wave and drops out of the comparison, at one degree of freedom per wave.  Falls back to
    `compare` when the slots cannot be told from the arms (a slot that ran only one arm).  A confirmed or worse
    verdict needs at least 3 residual degrees of freedom: below that it is `not_confirmed`, with its interval, and
    `more` says the experiment should run another round."""
    def norm(items: Sequence[tuple], arm: float) -> list[tuple[float, str, Any, float]]:
        out = []
        for it in items:
            slot, v = it[0], it[1]
            wave = it[2] if len(it) > 2 else None
            if v is not None and math.isfinite(v) and v > 0:
                out.append((arm, slot, wave, math.log(v)))
        return out

    rows = norm(baseline, 0.0) + norm(patched, 1.0)
    nb, np_ = sum(1 for r in rows if r[0] == 0.0), sum(1 for r in rows if r[0] == 1.0)
    slots = sorted({r[1] for r in rows})
    plain = compare([it[1] for it in baseline], [it[1] for it in patched], confidence, min_effect)
    if len(slots) < 2 or not nb or not np_:
        return plain
    # waves that hold both arms are blocks; a wave with one arm only (a failed neighbour) carries no contrast
    both = {w for w in {r[2] for r in rows if r[2] is not None}
            if {r[0] for r in rows if r[2] == w} == {0.0, 1.0}}
    waves = sorted(both, key=str)
    rows_w = [r for r in rows if r[2] in both] if len(waves) >= 2 else rows
    use_waves = len(waves) >= 2
    def design(rs):
        return np.array([[1.0, a] + [1.0 if s == sl else 0.0 for sl in slots[1:]]
                         + ([1.0 if w == wv else 0.0 for wv in waves[1:]] if use_waves else [])
                         for a, s, w, _y in rs])
    x = design(rows_w)
    y = np.array([r[3] for r in rows_w])
    beta, _res, rank, _sv = np.linalg.lstsq(x, y, rcond=None)
    df = len(y) - int(rank)
    if np.linalg.matrix_rank(x[:, :2 + len(slots) - 1]) < 2 + len(slots) - 1:
        return plain
    d = float(beta[1])
    gain = math.exp(d) - 1.0
    what = f"slot{' and wave' if use_waves else ''} as blocks"
    if df < 1:
        return Comparison(gain, None, "not_confirmed", None, nb, np_,
                          reason=f"{len(y)} trials in {len(slots)} slots leave no degree of freedom for the noise: "
                                 "no confidence interval yet", more=True)
    resid = y - x @ beta
    s2 = float(resid @ resid) / df
    cov = np.linalg.pinv(x.T @ x)
    se = math.sqrt(max(s2 * float(cov[1, 1]), 0.0))
    t = t_ppf(0.5 + confidence / 2.0, df)
    lo, hi = math.exp(d - t * se) - 1.0, math.exp(d + t * se) - 1.0
    verdict, why = _verdict(gain, lo, hi, min_effect)
    more = False
    if df < _MIN_BLOCKED_DF:
        more = True
        if verdict in ("confirmed", "worse"):
            # a few within-wave differences: a machine that drifts during one round can make them agree by chance.
            # A decisive verdict waits until the noise has the degrees of freedom to be estimated.
            verdict = "not_confirmed"
            why = f"{why}, but on {df} degree(s) of freedom only: another round decides"
    return Comparison(gain, (lo, hi), verdict, float(df), nb, np_, why + f" ({what}, df {df})", more=more)


def straddles(cmp: Comparison, min_effect: float) -> bool:
    """True when another pair of trials could still change the verdict."""
    if cmp.verdict in ("confirmed", "worse"):
        return False
    if cmp.more or cmp.ci is None:
        return True
    lo, hi = cmp.ci
    return (lo < 0.0 < hi) or (lo < min_effect < hi)


# --------------------------------------------------------------------------- loss parity


@dataclass
class Parity:
    ok: bool | None  # None: not comparable
    steps_compared: int = 0
    max_abs_diff: float | None = None
    max_rel_diff: float | None = None
    worst_step: int | None = None
    rel_tol: float = 2e-2
    abs_tol: float = 5e-3
    reason: str = ""


def loss_parity(base: dict[int, float], patched: dict[int, float], rel_tol: float = 2e-2,
                abs_tol: float = 5e-3) -> Parity:
    """Compare {step: loss} maps at equal steps: each step within abs_tol or rel_tol."""
    common = sorted(k for k in base.keys() & patched.keys()
                    if math.isfinite(base[k]) and math.isfinite(patched[k]))
    if not common:
        return Parity(None, rel_tol=rel_tol, abs_tol=abs_tol, reason="no common logged step with a finite loss")
    a = np.array([base[k] for k in common])
    b = np.array([patched[k] for k in common])
    d = np.abs(b - a)
    rel = d / np.maximum(np.abs(a), 1e-12)
    bad = (d > abs_tol) & (rel > rel_tol)
    i = int(np.argmax(rel))
    ok = not bool(bad.any())
    why = (f"loss within {rel_tol:g} relative or {abs_tol:g} absolute at all {len(common)} steps" if ok else
           f"{int(bad.sum())} of {len(common)} steps differ beyond tolerance (worst: step {common[i]}, "
           f"{a[i]:.5g} vs {b[i]:.5g})")
    return Parity(ok, len(common), float(d.max()), float(rel.max()), common[i], rel_tol, abs_tol, why)
