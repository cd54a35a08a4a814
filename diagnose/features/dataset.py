"""Dataset features from `Dataset Token Length` and the preprocessing progress bars.

Padding waste model: without packing/padding_free each micro-batch is padded to
its longest row, so waste ≈ 1 − mean ÷ E[max of B rows], with E[max] ≈
mean + std·c(B) (c = expected maximum of B standard normals), capped at max.
"""
from __future__ import annotations

from diagnose.features.registry import Ctx, feature

FAMILY = "dataset"
# expected maximum of B iid standard normals
_EMAX = {1: 0.0, 2: 0.564, 3: 0.846, 4: 1.029, 5: 1.163, 6: 1.267, 8: 1.424, 10: 1.539, 16: 1.766, 32: 2.043, 64: 2.290}


def expected_max_z(b: int) -> float:
    if b in _EMAX:
        return _EMAX[b]
    keys = sorted(_EMAX)
    lo = max(k for k in keys if k <= b) if b >= 1 else 1
    hi = min((k for k in keys if k >= b), default=keys[-1])
    if hi == lo:
        return _EMAX[lo]
    return _EMAX[lo] + (_EMAX[hi] - _EMAX[lo]) * (b - lo) / (hi - lo)


def _ds(ctx: Ctx):
    return ctx.run.dataset


@feature("token_len_mean", "tokens", "Mean sequence length (prompt + response) of the training set.", FAMILY)
def _mean(ctx: Ctx):
    d = _ds(ctx)
    return (d.mean, [d.line] if d.line else []) if d else None


@feature("token_len_max", "tokens", "Longest training sequence.", FAMILY)
def _max(ctx: Ctx):
    d = _ds(ctx)
    return (d.max, [d.line] if d.line else []) if d else None


@feature("token_len_p99_est", "tokens", "Estimated 99th percentile length: mean + 2.33·std, capped at the max.", FAMILY)
def _p99(ctx: Ctx):
    d = _ds(ctx)
    return (min(d.max, d.mean + 2.33 * d.std), [d.line] if d.line else []) if d else None


@feature("dataset_size", "rows", "Training rows after filtering (size= in Dataset Token Length).", FAMILY)
def _size(ctx: Ctx):
    d = _ds(ctx)
    return d.size if d else None


@feature("padding_waste_frac", "fraction",
         "Share of computed tokens that are padding (0 with packing/padding_free or batch 1).", FAMILY)
def _waste(ctx: Ctx):
    d = _ds(ctx)
    if d is None:
        return None
    if ctx.get("packing") or ctx.get("padding_free"):
        return 0.0
    b = ctx.get("per_device_train_batch_size")
    if b is None:
        return None
    if b <= 1 or d.mean <= 0:
        return 0.0
    emax = min(d.max, d.mean + d.std * expected_max_z(int(b)))
    return (max(0.0, 1.0 - d.mean / emax) if emax > 0 else None), [d.line] if d.line else []


@feature("max_length_over_longest", "ratio", "--max_length ÷ the longest sample (≫1: the cap is far above the data).", FAMILY)
def _ml_ratio(ctx: Ctx):
    d, ml = _ds(ctx), ctx.get("max_length")
    if d is None or not ml or d.max <= 0:
        return None
    return ml / d.max, [d.line] if d.line else []


@feature("preprocess_rate_min_per_s", "rows/s", "Slowest `Map`/`Filter` preprocessing rate seen in progress bars.", FAMILY)
def _rate(ctx: Ctx):
    rates = [r for r in ctx.run.preprocess if r.get("rate_per_s")]
    if not rates:
        return None
    r = min(rates, key=lambda r: r["rate_per_s"])
    return r["rate_per_s"], [r["line"]]


@feature("preprocess_num_proc", "processes", "num_proc of the slowest preprocessing bar (dataset_num_proc).", FAMILY)
def _np(ctx: Ctx):
    rates = [r for r in ctx.run.preprocess if r.get("rate_per_s")]
    if not rates:
        v = ctx.flag("dataset_num_proc", "preprocess_num_proc")
        return int(v) if isinstance(v, (int, float)) else None
    return min(rates, key=lambda r: r["rate_per_s"])["num_proc"]


@feature("preprocess_eta_s", "s", "Estimated time the slowest preprocessing pass takes for the whole dataset.", FAMILY)
def _eta(ctx: Ctx):
    rates = [r for r in ctx.run.preprocess if r.get("rate_per_s")]
    if not rates:
        return None
    r = min(rates, key=lambda r: r["rate_per_s"])
    return r["total"] / r["rate_per_s"] if r["rate_per_s"] > 0 else None


def _last_bar(ctx: Ctx) -> dict | None:
    return ctx.run.preprocess[-1] if ctx.run.preprocess else None


@feature("preprocess_eta_max_s", "s",
         "Longest time still to go on a preprocessing bar (tqdm's remaining time, else rows left ÷ rate).", FAMILY)
def _eta_max(ctx: Ctx):
    best: tuple[float, int] | None = None
    for r in ctx.run.preprocess:
        left = r.get("remaining_s")
        if left is None and r.get("rate_per_s"):
            left = (r["total"] - r["done"]) / r["rate_per_s"]
        if left is not None and (best is None or left > best[0]):
            best = (float(left), r["line"])
    return (best[0], [best[1]]) if best else None


@feature("preprocess_stalled", "bool",
         "The last preprocessing bar in the text sits at 0 rows of a large dataset (>= 1000 rows) with no rate yet, "
         "and no training step follows it.", FAMILY)
def _stalled(ctx: Ctx):
    r = _last_bar(ctx)
    if r is None:
        return None
    t = ctx.run.steps
    after = len(t) and float(t["line"][-1]) > r["line"]
    stalled = r["done"] == 0 and r["total"] >= 1000 and not r.get("rate_per_s") and not after
    return bool(stalled), [r["line"]]


@feature("preprocess_what", "text", "What the last preprocessing bar does (Map, Running tokenizer on dataset, ...).", FAMILY)
def _what(ctx: Ctx):
    r = _last_bar(ctx)
    return (r["what"] or "preprocessing", [r["line"]]) if r else None


@feature("preprocess_done", "rows", "Rows the last preprocessing bar has done.", FAMILY)
def _done(ctx: Ctx):
    r = _last_bar(ctx)
    return r["done"] if r else None


@feature("preprocess_total", "rows", "Rows the last preprocessing bar has in all.", FAMILY)
def _total(ctx: Ctx):
    r = _last_bar(ctx)
    return r["total"] if r else None


@feature("preprocess_rate_last_per_s", "rows/s", "Rate of the last preprocessing bar (None while tqdm shows '?').", FAMILY)
def _rate_last(ctx: Ctx):
    r = _last_bar(ctx)
    return r.get("rate_per_s") if r else None


_COLLECTIVE_FAILURES = ("nccl_timeout", "nccl_stuck", "dist_init_timeout", "nccl_error", "nccl_failed")


@feature("preprocess_when_collective_failed", "text",
         "Which came first: a preprocessing bar still unfinished (and no training step after it) when the first "
         "collective failure was printed (an NCCL/gloo timeout, a heartbeat report, a store timeout): the rank still "
         "preprocessing is why the others' collective timed out.", FAMILY)
def _pre_before_collective(ctx: Ctx):
    run = ctx.run
    fails = [e for e in run.events if e.kind in _COLLECTIVE_FAILURES and (e.file in (None, run.line_file))]
    # a rank that failed while it waited for the others: an exception of the distributed backend, or a traceback
    # (cut or not) through HF's main_process_first, whose barrier holds the other ranks while the main one maps
    for e in run.events:
        if e.kind in ("traceback", "traceback_cut") and e.file in (None, run.line_file):
            frames = e.detail.get("frames") or []
            if any("main_process_first" in f"{f.get('func')} {f.get('code', '')}" or "distributed_c10d" in str(f.get("file"))
                   for f in frames) \
                    or (e.kind == "traceback" and ctx.get("crash_category") == "nccl"):
                fails.append(e)
    if not fails or not run.preprocess:
        return None
    first = min(e.line for e in fails)
    bars = [r for r in run.preprocess if r["line"] <= first]  # a bar the timeout line was glued to counts
    if not bars:
        return None
    last = bars[-1]
    if last.get("total") and last["done"] >= last["total"]:
        return None
    t = run.steps
    if len(t) and bool(((t["line"] > last["line"]) & (t["line"] < first)).any()):
        return None  # training had started after that bar: the timeout is not about preprocessing
    what = last.get("what") or "preprocessing"
    np_ = f" (num_proc={last['num_proc']})" if last.get("num_proc", 1) > 1 else ""
    return f"{what}{np_} at {last['done']} of {last['total']} rows", [last["line"], first]


@feature("preprocess_imbalance", "text",
         "Per-process preprocessing bars (`#N:`) far out of balance: the slowest process at less than half the "
         "progress (or a third of the rate) of the fastest while it still runs; the whole map waits for it.", FAMILY)
def _imbalance(ctx: Ctx):
    last: dict[int, dict] = {}
    for r in ctx.run.preprocess:
        if r.get("shard") is not None:
            last[r["shard"]] = r
    if len(last) < 2:
        return None
    frac = {k: (r["done"] / r["total"] if r.get("total") else 0.0) for k, r in last.items()}
    slow, fast = min(frac, key=frac.get), max(frac, key=frac.get)
    rates = {k: r["rate_per_s"] for k, r in last.items() if r.get("rate_per_s")}
    lopsided = frac[slow] < 1.0 and frac[fast] - frac[slow] >= 0.5
    if not lopsided and len(rates) >= 2 and min(rates.values()) * 3 <= max(rates.values()):
        slow, fast = min(rates, key=rates.get), max(rates, key=rates.get)
        lopsided = frac[slow] < 1.0
    if not lopsided:
        return None
    return (f"process #{slow} at {100 * frac[slow]:.0f}% ({last[slow]['done']} of {last[slow]['total']} rows) while "
            f"#{fast} is at {100 * frac[fast]:.0f}%", [last[slow]["line"], last[fast]["line"]])


@feature("preprocess_total_s", "s",
         "How long one preprocessing pass takes in all, from its bar: time elapsed + time still to go (the longest "
         "pass in the text).", FAMILY)
def _pre_total(ctx: Ctx):
    best = None
    for r in ctx.run.preprocess:
        el, left = r.get("elapsed_s"), r.get("remaining_s")
        if left is None and r.get("rate_per_s") and r.get("total"):
            left = (r["total"] - r["done"]) / r["rate_per_s"]
        if el is None or left is None:
            continue
        if best is None or el + left > best[0]:
            best = (el + left, r["line"])
    return (best[0], [best[1]]) if best else None
