"""Step-table features: interval step time, throughput, loss and grad_norm behaviour.

Step times are the per-interval seconds per optimizer step derived by the parser
(never ms-swift's cumulative train_speed).  The first interval (warm-up,
dataloader fill) is dropped whenever more than two intervals exist.
Throughput is in samples/s and tokens/s, never iterations/s.
"""
from __future__ import annotations

import math

import numpy as np

from diagnose.features.registry import Ctx, feature

FAMILY = "steps"


def _intervals(ctx: Ctx) -> tuple[np.ndarray, np.ndarray]:
    t = ctx.run.steps
    if not len(t):
        return np.zeros(0), np.zeros(0)
    iv, ln = t["interval_s"], t["line"]
    ok = np.isfinite(iv) & (iv > 0)
    iv, ln = iv[ok], ln[ok]
    if len(iv) > 2:
        iv, ln = iv[1:], ln[1:]
    return iv, ln


@feature("steps_logged", "count", "Logged training steps (rows of the steps table).", FAMILY)
def _n(ctx: Ctx):
    return len(ctx.run.steps)


@feature("last_step", "step", "Global step of the last logged row.", FAMILY)
def _last(ctx: Ctx):
    t = ctx.run.steps
    if not len(t) or np.isnan(t["step"][-1]):
        return None
    return int(t["step"][-1]), [int(t["line"][-1])]


@feature("max_steps", "step", "Planned optimizer steps.", FAMILY)
def _ms(ctx: Ctx):
    return ctx.run.max_steps


@feature("step_time_median_s", "s", "Median interval seconds per optimizer step (warm-up dropped).", FAMILY)
def _med(ctx: Ctx):
    iv, ln = _intervals(ctx)
    return (float(np.median(iv)), [int(ln[0]), int(ln[-1])]) if len(iv) else None


@feature("step_time_p90_s", "s", "90th percentile of interval step time.", FAMILY)
def _p90(ctx: Ctx):
    iv, _ = _intervals(ctx)
    return float(np.percentile(iv, 90)) if len(iv) else None


@feature("step_time_cv", "ratio", "Coefficient of variation of interval step time (std ÷ mean; needs ≥ 5 intervals).", FAMILY)
def _cv(ctx: Ctx):
    iv, _ = _intervals(ctx)
    if len(iv) < 5:
        return None
    return float(np.std(iv) / np.mean(iv))


@feature("step_time_trend_frac", "fraction", "Relative change of median step time from the first to the second half (+ = slowing).", FAMILY)
def _trend(ctx: Ctx):
    iv, _ = _intervals(ctx)
    if len(iv) < 8:
        return None
    h = len(iv) // 2
    a, b = np.median(iv[:h]), np.median(iv[h:])
    return float((b - a) / a) if a > 0 else None


@feature("step_time_growth_x", "ratio",
         "How many times slower the last third of the intervals is than the first (medians), when the step time grows "
         "steadily (each third no faster than the one before; needs >= 3 intervals), else unknown.", FAMILY)
def _growth(ctx: Ctx):
    iv, ln = _intervals(ctx)
    if len(iv) < 3:
        return None
    k = max(1, len(iv) // 3)
    a, b = float(np.median(iv[:k])), float(np.median(iv[-k:]))
    mid = iv[k:len(iv) - k]
    m = float(np.median(mid)) if len(mid) else (a + b) / 2
    if not (0 < a <= m <= b):
        return None
    return b / a, [int(ln[0]), int(ln[-1])]


@feature("step_time_swing_frac", "fraction", "Share of intervals more than 30% away from the median (speed swinging).", FAMILY)
def _swing(ctx: Ctx):
    iv, ln = _intervals(ctx)
    if len(iv) < 5:
        return None
    med = np.median(iv)
    off = np.abs(iv - med) > 0.3 * med
    return float(off.mean()), [int(x) for x in ln[off][:5]]


@feature("samples_per_s", "samples/s", "Throughput: global batch ÷ median seconds per optimizer step.", FAMILY)
def _sps(ctx: Ctx):
    gbs, st = ctx.get("global_batch_size"), ctx.get("step_time_median_s")
    if gbs is None or not st:
        return _printed_median(ctx, "samples_per_s")  # a trainer that prints its own throughput
    return gbs / st


def _printed_median(ctx: Ctx, col: str) -> float | None:
    t = ctx.run.steps
    if not len(t) or not t.has(col):
        return None
    v = t[col][t.present(col) & np.isfinite(t[col])]
    if len(v) > 2:
        v = v[1:]  # the first row carries the warm-up
    return float(np.median(v)) if len(v) else None


@feature("tokens_per_s", "tokens/s", "Throughput in tokens: samples/s × mean token length (packed rows when packing).", FAMILY)
def _tps(ctx: Ctx):
    sps, tl = ctx.get("samples_per_s"), ctx.get("token_len_mean")
    if sps is None or tl is None:
        return _printed_median(ctx, "tokens_per_s")
    return sps * tl


def _col(ctx: Ctx, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    t = ctx.run.steps
    if not len(t):
        return np.zeros(0), np.zeros(0, bool), np.zeros(0)
    return t[name], t.present(name), t["line"]


def _finite(ctx: Ctx, name: str) -> tuple[np.ndarray, np.ndarray]:
    """The printed, finite values of a column and their source lines."""
    v, p, ln = _col(ctx, name)
    ok = p & np.isfinite(v)
    return v[ok], ln[ok]


@feature("loss_nonfinite_count", "rows", "Logged steps whose loss is nan or inf.", FAMILY)
def _lnan(ctx: Ctx):
    v, p, ln = _col(ctx, "loss")
    bad = p & ~np.isfinite(v)
    return int(bad.sum()), [int(x) for x in ln[bad][:5]]


@feature("grad_norm_nonfinite_count", "rows", "Logged steps whose grad_norm is nan or inf.", FAMILY)
def _gnan(ctx: Ctx):
    v, p, ln = _col(ctx, "grad_norm")
    bad = p & ~np.isfinite(v)
    return int(bad.sum()), [int(x) for x in ln[bad][:5]]


@feature("loss_masked_rows", "rows",
         "Rows whose loss prints exactly 0 while grad_norm is nan/inf: transformers' logging_nan_inf_filter "
         "(on by default) logged a stand-in for a nan/inf loss.", FAMILY)
def _lmask(ctx: Ctx):
    loss, lp, ln = _col(ctx, "loss")
    g, gp, _ = _col(ctx, "grad_norm")
    if not len(loss) or not gp.any():
        return None
    hit = lp & (loss == 0) & gp & ~np.isfinite(g)
    return int(hit.sum()), [int(x) for x in ln[hit][:5]]


@feature("nonfinite_tail_frac", "fraction",
         "Of the rows after the first nan/inf, the share that are nan/inf too (1 = diverged, 0 = one skipped step); "
         "1 when the nan row is the last one.", FAMILY)
def _tail(ctx: Ctx):
    t = ctx.run.steps
    if not len(t):
        return None
    bad = np.zeros(len(t), bool)
    for c in ("loss", "grad_norm"):
        bad |= t.present(c) & ~np.isfinite(t[c])
    if not bad.any():
        return 0.0
    i = int(np.flatnonzero(bad)[0])
    after = bad[i + 1:]
    return (float(after.mean()) if len(after) else 1.0), [int(t["line"][i])]


@feature("nan_first_step", "step", "First step with a nan/inf loss or grad_norm.", FAMILY)
def _nfs(ctx: Ctx):
    for e in ctx.run.events:
        if e.kind == "nan":
            return e.detail.get("step"), [e.line]
    return None


@feature("grad_norm_median", "norm", "Median finite grad_norm.", FAMILY)
def _gmed(ctx: Ctx):
    f, _ = _finite(ctx, "grad_norm")
    return float(np.median(f)) if len(f) else None


@feature("grad_norm_spike_count", "rows", "Steps whose grad_norm exceeds 5× the running median.", FAMILY)
def _gspike(ctx: Ctx):
    f, fl = _finite(ctx, "grad_norm")
    if len(f) < 5:
        return None
    med = np.median(f)
    sp = f > 5 * med if med > 0 else np.zeros(len(f), bool)
    return int(sp.sum()), [int(x) for x in fl[sp][:5]]


@feature("grad_norm_swing_frac", "fraction", "Share of consecutive grad_norm pairs changing by more than 2× (swinging).", FAMILY)
def _gswing(ctx: Ctx):
    f, _ = _finite(ctx, "grad_norm")
    if len(f) < 6:
        return None
    r = f[1:] / np.maximum(f[:-1], 1e-12)
    return float(((r > 2) | (r < 0.5)).mean())


@feature("loss_first", "loss", "First finite logged loss.", FAMILY)
def _lf(ctx: Ctx):
    f, _ = _finite(ctx, "loss")
    return float(f[0]) if len(f) else None


@feature("loss_last", "loss", "Last finite logged loss.", FAMILY)
def _ll(ctx: Ctx):
    f, _ = _finite(ctx, "loss")
    return float(f[-1]) if len(f) else None


@feature("loss_min", "loss", "Lowest finite logged loss.", FAMILY)
def _lmin(ctx: Ctx):
    f, ln = _finite(ctx, "loss")
    if not len(f):
        return None
    i = int(np.argmin(f))
    return float(f[i]), [int(ln[i])]


@feature("loss_zero_share", "fraction", "Share of the logged finite losses that are exactly 0 (printed 0.0): no "
         "signal reaches the weights from those steps' loss.", FAMILY)
def _lzero(ctx: Ctx):
    f, ln = _finite(ctx, "loss")
    if not len(f):
        return None
    z = f == 0
    return float(z.mean()), [int(x) for x in ln[z][:3]]


@feature("loss_zeroed_rows", "rows", "Rows at the end of the log whose loss is exactly 0 after earlier rows with a "
         "non-zero loss (unknown when no row before them had one).", FAMILY)
def _lzeroed(ctx: Ctx):
    f, ln = _finite(ctx, "loss")
    if len(f) < 2 or f[-1] != 0:
        return None
    nz = np.nonzero(f != 0)[0]
    if not len(nz):
        return None
    first_zero = int(nz[-1]) + 1
    return len(f) - first_zero, [int(ln[first_zero])]


@feature("rl_metrics_logged", "bool", "The step rows carry reinforcement-learning metrics (rewards, kl, "
         "completions/...): a GRPO/PPO/DPO-style trainer, whose loss can legitimately sit at 0.", FAMILY)
def _rl(ctx: Ctx):
    keys = ctx.run.metric_ranges
    t = ctx.run.steps
    if not keys and not len(t):
        return None
    return any(k.split("/")[-1].startswith(("reward", "kl")) or "reward" in k or k.startswith("completions/")
               for k in keys)


@feature("reward_zero_std_frac_min", "fraction",
         "Lowest frac_reward_zero_std a GRPO trainer logged (TRL GRPOTrainer, ms-swift swift/rl_core/advantage.py): "
         "the share of prompts whose generations all got the same reward, so their advantages are 0.  1.0 on every "
         "logged step: no step had a learning signal.", FAMILY)
def _zstd(ctx: Ctx):
    hits = [v for k, v in ctx.run.metric_ranges.items() if k.split("/")[-1] == "frac_reward_zero_std"]
    return min(v[0] for v in hits) if hits else None


@feature("loss_trend_frac", "fraction", "Relative change of median loss, last quarter vs first quarter (+ = rising).", FAMILY)
def _ltrend(ctx: Ctx):
    f, _ = _finite(ctx, "loss")
    if len(f) < 8:
        return None
    q = len(f) // 4
    a, b = np.median(f[:q]), np.median(f[-q:])
    return float((b - a) / abs(a)) if a else None


def _loss_blocks(ctx: Ctx) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    """The finite losses, their lines, and the medians of consecutive blocks of w of them (w = 20 from 40 losses on,
    else 5): O(n), not a sliding window; computed once for the features that compare a loss with those before it."""
    if "loss_blocks" not in ctx.cache:
        f, fl = _finite(ctx, "loss")
        w = 20 if len(f) >= 40 else 5
        nb = len(f) // w
        blocks = np.median(f[: nb * w].reshape(nb, w), axis=1) if nb else np.zeros(0)
        ctx.cache["loss_blocks"] = (f, fl, w, blocks)
    return ctx.cache["loss_blocks"]


@feature("loss_spike_count", "rows", "Steps whose loss exceeds 3× the median of the preceding block of 20 finite values.", FAMILY)
def _lspike(ctx: Ctx):
    f, fl, w, blocks = _loss_blocks(ctx)
    if len(f) < 10:
        return None
    ref = np.repeat(blocks, w)[: len(f) - w]
    cur = f[w : w + len(ref)]
    hit = (ref > 0) & (cur > 3 * ref)
    return int(hit.sum()), [int(x) for x in fl[w : w + len(ref)][hit][:5]]


@feature("loss_explosion_x", "ratio",
         "The largest logged loss ÷ the median of the finite losses logged before it (all of them for the first 40, "
         "then the preceding block of 20): a loss that leaps by orders of magnitude in one logging interval.", FAMILY)
def _lexplode(ctx: Ctx):
    f, fl, w, blocks = _loss_blocks(ctx)
    n = len(f)
    if n < 3:
        return None
    ratio = np.zeros(n)
    for i in range(2, min(n, 40)):  # the first rows: against the median of all before them (a positive one)
        ref = float(np.median(f[:i]))
        ratio[i] = f[i] / ref if ref > 0 else 0.0
    if n > 40:  # then against the previous block of 20 (the block medians loss_spike_count reads too)
        ref = np.repeat(blocks, w)[20 : n - 20]  # row i's reference: the block before i's block (ref[i - 40])
        top = 40 + len(ref)
        ratio[40:top] = f[40:top] / np.maximum(ref, 1e-300) * (ref > 0)
    i = int(np.argmax(ratio))
    return (float(ratio[i]), [int(fl[i])]) if ratio[i] > 0 else None


@feature("final_train_loss", "loss", "The mean training loss of the whole run, from the trainer's final summary "
         "(transformers' train_loss in its summary dict or its '***** train metrics *****' table), when finite.", FAMILY)
def _final_loss(ctx: Ctx):
    v = (ctx.run.summary or {}).get("train_loss")
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v), [ctx.run.end_line] if ctx.run.end_line else []
    return None


@feature("progress_frac", "fraction", "last_step ÷ max_steps.", FAMILY)
def _prog(ctx: Ctx):
    ls, ms = ctx.get("last_step"), ctx.get("max_steps")
    if ls is None or not ms:
        return None
    return ls / ms


def _thirds(ctx: Ctx, name: str) -> tuple[float, float, list[int]] | None:
    """Mean of the first and last third of a column's finite values (>= 6 of them), with their lines."""
    f, fl = _finite(ctx, name)
    if len(f) < 6:
        return None
    k = len(f) // 3
    return float(np.mean(f[:k])), float(np.mean(f[-k:])), [int(fl[0]), int(fl[-1])]


@feature("loss_rise_frac", "fraction",
         "Rise of the mean loss from the first third of the logged rows to the last third (+0.5 = 50% higher); "
         "only for losses that start above 0.1 (GRPO/DPO losses near 0 are not read).", FAMILY)
def _lrise(ctx: Ctx):
    t = _thirds(ctx, "loss")
    if t is None or t[0] <= 0.1:
        return None
    return (t[1] - t[0]) / t[0], t[2]


@feature("grad_norm_rise_ratio", "ratio", "Mean grad_norm of the last third of the logged rows ÷ that of the first third.", FAMILY)
def _grise(ctx: Ctx):
    t = _thirds(ctx, "grad_norm")
    if t is None or t[0] <= 0:
        return None
    return t[1] / t[0], t[2]


@feature("lr_vanished", "lr",
         "The smallest learning rate the rows print when it is above 0 and below 1e-20: a schedule decayed past any "
         "use (an exponential decay run far past its steps, a scheduler stepped per batch where it was meant per "
         "epoch); 0 itself is not read (warm-up starts there, schedules end there). Also the rate a schedule says it "
         "set ('Adjusting learning rate of group 0 to X.', 'Updating learning rate to X').", FAMILY)
def _lrv(ctx: Ctx):
    f, fl = _finite(ctx, "learning_rate")
    said = [(r["lr"], r["line"]) for r in ctx.run.lr_announced if r["lr"] > 0]  # the schedule's own 'lr set to X'
    vals = [(float(v), int(ln)) for v, ln in zip(f, fl) if v > 0] + said
    if not vals:
        return None
    v, ln = min(vals)
    return (v, [ln]) if v < 1e-20 else None


@feature("token_acc_first", "fraction", "First logged training token accuracy.", FAMILY)
def _taf(ctx: Ctx):
    f, fl = _finite(ctx, "token_acc")
    return (float(f[0]), [int(fl[0])]) if len(f) else None


@feature("token_acc_last", "fraction", "Last logged training token accuracy.", FAMILY)
def _tal(ctx: Ctx):
    f, fl = _finite(ctx, "token_acc")
    return (float(f[-1]), [int(fl[-1])]) if len(f) else None


@feature("data_time_frac", "fraction",
         "Median share of an iteration spent waiting for data, from logs that print both (mmengine/YOLOX "
         "'time: X data_time: Y'); the first 3 iterations are warm-up and dropped when there are 7 or more.", FAMILY)
def _dtf(ctx: Ctx):
    rows = _data_rows(ctx)
    if rows is None:
        return None
    fr = [min(1.0, r["data_time_s"] / r["time_s"]) for r in rows]
    return float(np.median(fr)), [rows[0]["line"], rows[-1]["line"]]


def _data_rows(ctx: Ctx) -> list[dict] | None:
    """The iterations that print both their time and their data wait, warm-up dropped (None below 2)."""
    rows = [r for r in ctx.run.iter_times if r["time_s"] > 0]
    t = ctx.run.steps
    if not rows and len(t) and t.has("data_time_s"):  # any trainer's rows that print both (parse.dialects)
        ok = t.present("data_time_s") & np.isfinite(t["interval_s"]) & (t["interval_s"] > 0)
        rows = [{"time_s": float(a), "data_time_s": float(b), "line": int(ln)}
                for a, b, ln in zip(t["interval_s"][ok], t["data_time_s"][ok], t["line"][ok])]
    if len(rows) >= 7:
        rows = rows[3:]
    return rows if len(rows) >= 2 else None


@feature("data_time_share", "fraction",
         "Σ data_time ÷ Σ iteration time over the same iterations as data_time_frac: a few iterations that wait "
         "very long for data count at their full weight (bursty stalls that a median hides).", FAMILY)
def _dts(ctx: Ctx):
    rows = _data_rows(ctx)
    if rows is None:
        return None
    total = sum(r["time_s"] for r in rows)
    worst = max(rows, key=lambda r: r["data_time_s"])
    return min(1.0, sum(r["data_time_s"] for r in rows) / total), [worst["line"]]


@feature("data_time_avg_share", "fraction",
         "data_time ÷ iteration time from the running averages the last step row printed (pytorch/examples' "
         "AverageMeter 'Time 0.427 (2.552)  Data 0.000 (2.167)': the averages cover every batch since the epoch "
         "began, the stalls between two printed rows included).", FAMILY)
def _dtas(ctx: Ctx):
    a = ctx.run.data_time_avg
    if not a or not a["time_s"] > 0:
        return None
    return min(1.0, a["data_time_s"] / a["time_s"]), [a["line"]]


@feature("profiler_data_wait_frac", "fraction",
         "Share of the training epoch Lightning's profiler measured in fetching the next batch: "
         "train_dataloader_next (get_train_batch before 1.6) total ÷ run_training_epoch total, else its percentage "
         "of the profiled time.", FAMILY)
def _pdw(ctx: Ctx):
    rows = ctx.run.profiler_actions
    data = [r for r in rows if r["action"].endswith(("train_dataloader_next", "get_train_batch"))]
    if not data:
        return None
    d = data[-1]
    epoch = [r for r in rows if r["action"] == "run_training_epoch" and r["total_s"] > 0]
    if epoch:
        return min(1.0, d["total_s"] / epoch[-1]["total_s"]), [d["line"], epoch[-1]["line"]]
    if d.get("pct") is not None:
        return min(1.0, d["pct"] / 100), [d["line"]]
    return None


def _ms(row: dict, *names: str) -> float | None:
    for n in names:
        if n in row:
            return float(row[n])
    return None


@feature("optimizer_step_frac", "fraction",
         "Share of forward + backward + optimizer step time spent in the optimizer step, from DeepSpeed's "
         "wall_clock_breakdown timers (median over the per-iteration rows, else the micro-step rows).", FAMILY)
def _osf(ctx: Ctx):
    fr, lines = [], []
    rows = [r for r in ctx.run.timers if "step" in r] or ctx.run.timers  # the per-iteration rows when printed
    for r in rows:
        # names: deepspeed/utils/timer.py ('fwd', 'bwd', 'step'; 'forward', 'backward' in older releases)
        f = _ms(r, "fwd", "forward", "fwd_microstep", "forward_microstep")
        b = _ms(r, "bwd", "backward", "bwd_microstep", "backward_microstep")
        s = _ms(r, "step", "step_microstep")
        if f is None or b is None or s is None or f + b + s <= 0:
            continue
        fr.append(s / (f + b + s))
        lines.append(r["line"])
    if not fr:
        return None
    return float(np.median(fr)), lines[:3]


_NONFINITE_OWN = ("loss", "grad_norm", "train_loss")  # read by their own features and rules (NAN001 ...)


def _others_nonfinite(ctx: Ctx) -> dict[str, list[int]]:
    t = ctx.run.steps
    rows_nan = bool(len(t)) and t.has("loss") and bool((~np.isfinite(t["loss"][t.present("loss")])).any())
    return {k: v for k, v in ctx.run.nonfinite.items()
            if k not in _NONFINITE_OWN and "std" not in k.lower() and not k.endswith("_runtime")
            and not (k == "final train_loss" and rows_nan)}  # the summary's mean of losses the rows show nan


@feature("nonfinite_metrics", "text",
         "Metrics other than loss and grad_norm printed as nan/inf on some row (rewards, kl, logps, clip ratios, eval "
         "metrics), most rows first; spreads (`*std*`) are left out: one sample has no spread.", FAMILY)
def _nonfinite(ctx: Ctx):
    bad = _others_nonfinite(ctx)
    if not bad:
        return None
    keys = sorted(bad, key=lambda k: (-bad[k][0], bad[k][1]))
    return ", ".join(keys[:6]) + (f" (+{len(keys) - 6} more)" if len(keys) > 6 else ""), [bad[k][1] for k in keys[:5]]


@feature("nonfinite_metric_rows", "rows", "Rows with a nan/inf in a metric of `nonfinite_metrics` (the most of any one).",
         FAMILY)
def _nonfinite_rows(ctx: Ctx):
    bad = [v[0] for v in _others_nonfinite(ctx).values()]
    return max(bad) if bad else None


@feature("loss_scale_min", "scale", "The lowest fp16 dynamic loss scale the text shows a step falling back to "
         "(DeepSpeed 'reducing to', apex 'reducing loss scale to'; a step row's loss scale only when it is 0); it starts "
         "at 2^16 and halves on every overflow.",
         FAMILY)
def _ls_min(ctx: Ctx):
    ls = list(ctx.run.loss_scales)
    t = ctx.run.steps
    if t.has("loss_scale"):
        # a step row's loss scale at 0 (fairseq's '| loss_scale 0.000 |'): the scale collapsed, every step overflows;
        # other row values are left out (bf16 trainers print a constant 'loss scale: 1.0')
        zero = t.present("loss_scale") & (t["loss_scale"] == 0)
        if zero.any():
            i = int(np.flatnonzero(zero)[0])
            ls.append({"scale": 0.0, "line": int(t["line"][i])})
    if not ls:
        return None
    low = min(ls, key=lambda r: r["scale"])
    return low["scale"], [low["line"]]


@feature("loss_scale_drops", "count", "Skipped steps the fp16 loss scaler reported (a drop of the scale each).", FAMILY)
def _ls_drops(ctx: Ctx):
    return len(ctx.run.loss_scales) or None
