"""verify statistics: Student t quantiles, per-trial throughput, gain + CI + verdict, loss parity."""
from __future__ import annotations

import math

import pytest

from diagnose.verify.stats import compare, default_warmup, loss_parity, straddles, t_cdf, t_ppf, trial_throughput


@pytest.mark.parametrize("df,q", [(1, 12.7062), (2, 4.3027), (3, 3.1824), (4, 2.7764), (10, 2.2281), (30, 2.0423),
                                  (1000, 1.9623)])
def test_t_ppf_matches_tables(df, q):
    assert t_ppf(0.975, df) == pytest.approx(q, abs=2e-4)


def test_t_ppf_real_df_is_monotone_and_inverts_cdf():
    qs = [t_ppf(0.975, df) for df in (1.0, 1.3, 1.7, 2.0, 2.5)]
    assert qs == sorted(qs, reverse=True)
    for df in (1.3, 2.7, 7.5):
        assert t_cdf(t_ppf(0.9, df), df) == pytest.approx(0.9, abs=1e-9)
    assert t_ppf(0.025, 3) == pytest.approx(-t_ppf(0.975, 3))


def test_throughput_drops_warmup_and_uses_median_interval():
    # GIVEN 10 steps: the first is start-up (30 s), one stall at step 7
    steps = list(range(1, 11))
    iv = [30.0, 0.5, 0.5, 0.2, 0.2, 0.2, 5.0, 0.2, 0.2, 0.2]
    # WHEN measured with 3 warm-up steps and a global batch of 16
    tp = trial_throughput(steps, iv, 16, warmup=3)
    # THEN the median of steps 4..10 is used: 16 / 0.2 samples/s
    assert tp.measured_steps == 7
    assert tp.step_time_s == pytest.approx(0.2)
    assert tp.samples_per_s == pytest.approx(80.0)


def test_throughput_exclusion_and_unknown_batch():
    steps = [1, 2, 3, 4, 5, 6]
    iv = [9.0, 0.2, 0.2, 3.0, 3.0, 0.2]
    tp = trial_throughput(steps, iv, 4, warmup=1, exclude=[False, False, False, True, True, False])
    assert tp.measured_steps == 3 and tp.step_time_s == pytest.approx(0.2)
    tp2 = trial_throughput(steps, iv, None, warmup=1)
    assert tp2.samples_per_s is None and "global batch" in tp2.note
    tp3 = trial_throughput([1, 2], [1.0, 1.0], 8, warmup=3)
    assert tp3.samples_per_s is None and tp3.measured_steps == 0


def test_default_warmup():
    assert default_warmup(12) == 3 and default_warmup(50) == 5 and default_warmup(200) == 20


def test_compare_confirms_a_clear_gain():
    c = compare([10.0, 10.4], [15.1, 14.8])
    assert c.verdict == "confirmed"
    assert c.gain == pytest.approx(29.9 / 20.4 - 1)
    lo, hi = c.ci
    assert 0 < lo < c.gain < hi
    assert not straddles(c, 0.03)


def test_compare_no_false_gain_on_noise():
    c = compare([10.0, 10.5], [10.3, 10.1])
    assert c.verdict == "not_confirmed" and c.ci[0] < 0 < c.ci[1]
    assert straddles(c, 0.03)


def test_compare_worse_and_small_gain():
    assert compare([10.0, 10.1, 10.05], [8.0, 8.1, 8.05]).verdict == "worse"
    small = compare([10.0, 10.01, 10.02], [10.1, 10.11, 10.12], min_effect=0.03)
    assert small.ci[0] > 0 and small.verdict == "not_confirmed" and "minimum effect" in small.reason
    assert not straddles(small, 0.03)  # real but tiny: more trials cannot reach 3%


def test_compare_needs_two_trials_per_arm():
    c = compare([10.0], [20.0, 20.0])
    assert c.ci is None and c.verdict == "not_confirmed" and c.gain == pytest.approx(1.0)
    assert compare([], [1.0]).gain is None


def test_compare_identical_trials_have_a_zero_width_ci():
    c = compare([10.0, 10.0], [12.0, 12.0])
    assert c.ci == (pytest.approx(0.2), pytest.approx(0.2)) and c.verdict == "confirmed"


def test_ci_is_asymmetric_and_never_below_minus_100pct():
    c = compare([10.0, 30.0], [10.0, 11.0])
    assert c.ci[0] > -1.0
    assert c.ci[1] - c.gain > c.gain - c.ci[0]


def test_loss_parity():
    base = {1: 6.2300, 2: 6.2100, 3: 6.1800}
    same = {1: 6.2301, 2: 6.2102, 3: 6.1799}
    p = loss_parity(base, same)
    assert p.ok and p.steps_compared == 3 and p.max_abs_diff == pytest.approx(0.0002, abs=1e-9)
    off = loss_parity(base, {1: 6.23, 2: 6.0, 3: 6.18})
    assert off.ok is False and off.worst_step == 2
    assert loss_parity(base, {7: 1.0}).ok is None
    assert loss_parity({1: math.nan}, {1: 1.0}).ok is None


def test_the_slot_is_a_block_in_the_comparison():
    from diagnose.verify.stats import compare_blocked

    # slot B runs 20% slower for both arms; within each slot the patched arm is 1.5x, with a little noise
    base = [("A", 100.0), ("B", 80.0), ("A", 101.0), ("B", 79.0)]
    patched = [("A", 150.0), ("B", 121.0), ("A", 149.0), ("B", 119.5)]
    c = compare_blocked(base, patched)
    assert c.verdict == "confirmed" and c.df == 5.0 and abs(c.gain - 0.5) < 0.01
    assert c.ci[1] - c.ci[0] < 0.05  # the slot difference does not widen the interval
    # one round in two slots leaves one degree of freedom: a very wide, honest interval
    one = compare_blocked(base[:2], patched[:2])
    assert one.df == 1.0 and one.ci[1] - one.ci[0] > 0.1
    # a slot that ran only one arm cannot be told from the arm: the plain comparison
    assert compare_blocked([("A", 100.0), ("A", 101.0)], [("B", 150.0), ("B", 151.0)]).reason.startswith("CI")
    # a no-op with a slot effect is not a gain
    noop = compare_blocked(base, [("A", 100.5), ("B", 80.2), ("A", 100.0), ("B", 79.5)])
    assert noop.verdict == "not_confirmed"
