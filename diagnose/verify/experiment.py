"""The experiment: interleaved trials of every arm, an adaptive number of repeats, one VerifyReport.

Contract: `run_verify(job, variants, options, runner=None, progress=None) -> VerifyReport`.
- `variants[0]` is the baseline (the job unchanged), the last one is the patched
  arm (every change); with --ablate the ones in between are one change each.
- Schedule: rounds of one trial per arm, in the same order every round (A B A B
  ..., so slow drift of the machine hits both arms alike); `options.repeats`
  rounds first (default 2), then one more round at a time while the CI of an
  arm straddles 0 or the minimum effect, up to `options.max_repeats` (default 3).
  When the flag table (or ms-swift's own parser) already rejects a change, the
  patched arm runs first, so a broken patch costs one trial.
- Every trial of every arm has the same argv apart from the change: the same
  seed, data subset, steps, trial flags (see `job.trial_argv`), in a fresh
  temporary output_dir under `options.workdir`, removed after the trial (the
  log is kept until the end; everything is removed unless `options.keep`).
- A patched trial that fails (crash, OOM, NaN, timeout) ends that arm with the
  verdict `failed` and its diagnosis; a failing baseline ends the experiment
  (`failed`, arm `baseline`): there is nothing to compare against.
- A confirmed (or worse) verdict that rests on disturbed trials must hold on
  the undisturbed ones too, else it is `not_confirmed` (`judge`): contention
  never produces a gain.
- Loss parity is checked when every change of the arm is `safe` and both arms
  have the same global batch: mean loss per step over the arm's trials.
- A trial whose steps ran mostly while other processes saturated the CPUs
  (`disturbed`, see `diagnose.verify.contention`) is run again with its whole
  wave (with slots: every trial that ran beside it, so that no trial runs with
  its neighbours idle), at most `options.max_reruns` times in all; the
  replaced trials stay in the report (`replaced: true`) and are not used.
- `VerifyProgress` receives plan/start/step/end/note events; `NullProgress`
  ignores them.
"""
from __future__ import annotations

import dataclasses
import math
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from diagnose.verify.job import Job, TrialSettings, Variant, global_batch_of, trial_argv
from diagnose.verify.models import AblationRow, ArmSummary, CandidateRow, LossParity, SlotRow, TrialResult, VerifyReport
from diagnose.verify.stats import Comparison, compare, default_warmup, loss_parity
from diagnose.verify.trial import TrialRunner, TrialSpec


@dataclass
class VerifyOptions:
    max_steps: int = 50
    warmup: int | None = None  # None: default_warmup(max_steps)
    repeats: int = 2
    max_repeats: int = 3
    confidence: float = 0.95
    min_effect: float = 0.03
    subset: int | None = None  # rows per dataset; None: the whole dataset
    trial_timeout_s: float = 1800.0
    sample_gpus: bool = False
    sampler_note: str | None = None
    workdir: str | None = None
    keep: bool = False
    rel_tol: float = 2e-2
    abs_tol: float = 5e-3
    seed: int | None = None
    patched_first: bool = False
    sweep: bool = False  # variants[1:] are candidates (--try / --candidate), ranked against the baseline
    max_reruns: int = 2  # disturbed trials (other processes saturated the CPUs) re-run, in all

    @property
    def warmup_steps(self) -> int:
        return self.warmup if self.warmup is not None else default_warmup(self.max_steps)


class VerifyProgress:
    """Events of an experiment; subclass and override what you show."""

    def plan(self, arms: list[str], rounds: int, max_rounds: int, max_steps: int) -> None: ...
    def start(self, spec: TrialSpec, planned: int) -> None: ...
    def step(self, step: int, max_steps: int | None) -> None: ...
    def end(self, result: TrialResult) -> None: ...
    def note(self, text: str) -> None: ...


NullProgress = VerifyProgress


def _mean(xs: list[float | None]) -> float | None:
    v = [x for x in xs if x is not None and math.isfinite(x)]
    return float(np.mean(v)) if v else None


def summarize_arm(variant: Variant, trials: list[TrialResult], job: Job) -> ArmSummary:
    ok = [t for t in trials if t.status == "ok" and not t.replaced]
    sps = [t.samples_per_s for t in ok if t.samples_per_s is not None]
    s = ArmSummary(label=variant.label, changes=[c.label() for c in variant.changes], trials=len(trials),
                   ok_trials=len(ok), argv=[Path(job.swift).name, job.command, *variant.argv],
                   env={k: v for k, v in variant.env.items() if job.env.get(k) != v})
    gbs = [t.global_batch for t in ok if t.global_batch]
    s.global_batch = gbs[0] if gbs else None
    if sps:
        s.samples_per_s = float(np.mean(sps))
        if len(sps) > 1:
            s.samples_per_s_sd = float(np.std(sps, ddof=1))
            s.samples_per_s_cv = s.samples_per_s_sd / s.samples_per_s
    s.tokens_per_s = _mean([t.tokens_per_s for t in ok])
    s.step_time_s = _mean([t.step_time_s for t in ok])
    from diagnose.verify.probe_split import arm_split

    s.time_split = arm_split(ok)  # --probe
    s.cpu_s_per_step = _mean([t.cpu_s_per_step for t in ok])
    s.startup_s = _mean([t.startup_s for t in trials])
    mems = [t.peak_memory_gib for t in ok if t.peak_memory_gib is not None]
    s.peak_memory_gib = max(mems) if mems else None
    s.gpu_util_mean_pct = _mean([t.gpu_util_mean_pct for t in ok])
    return s


def _loss_by_step(trials: list[TrialResult]) -> dict[int, float]:
    acc: dict[int, list[float]] = {}
    for t in trials:
        if t.status != "ok" or t.replaced:
            continue
        for s, v in zip(t.steps, t.losses):
            if v is not None and math.isfinite(v):
                acc.setdefault(s, []).append(v)
    return {s: float(np.mean(v)) for s, v in acc.items()}


def _parity(base: list[TrialResult], arm: list[TrialResult], variant: Variant, gb_base: int | None,
            gb_arm: int | None, opts: VerifyOptions) -> LossParity:
    if not variant.changes:
        return LossParity(checked=False, reason="no change")
    if not variant.safe:
        risky = [c.label() for c in variant.changes if c.effect != "safe"]
        return LossParity(checked=False, reason="not a speed-only patch (" + ", ".join(risky) + "): the math may change")
    if gb_base and gb_arm and gb_base != gb_arm:
        return LossParity(checked=False, reason=f"global batch differs ({gb_base} vs {gb_arm})")
    p = loss_parity(_loss_by_step(base), _loss_by_step(arm), opts.rel_tol, opts.abs_tol)
    return LossParity(checked=p.ok is not None, **dataclasses.asdict(p))


def _used(ts: list[TrialResult]) -> list[TrialResult]:
    return [t for t in ts if t.status == "ok" and not t.replaced]


def _one_sided(trials: list[TrialResult]) -> set[Any]:
    """Waves in which some trials were disturbed and others not: the disturbance did not hit the wave as a whole."""
    by: dict[Any, set[bool]] = {}
    for t in trials:
        if t.wave is not None:
            by.setdefault(t.wave, set()).add(bool(t.disturbed))
    return {w for w, kinds in by.items() if len(kinds) > 1}


def judge(base: list[TrialResult], arm: list[TrialResult], opts: VerifyOptions, blocked: bool = False) -> Comparison:
    """compare() over the trials used; a decisive verdict must also hold without the disturbed trials.
    `blocked`: the trials ran in several slots, side by side: the slot and the wave are blocks
    (`stats.compare_blocked`); a disturbance that hit a whole wave drops out with the wave, so only waves that
    were disturbed on one side are left out for the check."""
    from diagnose.verify.stats import compare_blocked

    def cmp_of(b: list[TrialResult], a: list[TrialResult]) -> Comparison:
        if blocked:
            return compare_blocked([(t.slot, t.samples_per_s, t.wave) for t in b],
                                   [(t.slot, t.samples_per_s, t.wave) for t in a], opts.confidence, opts.min_effect)
        return compare([t.samples_per_s for t in b], [t.samples_per_s for t in a], opts.confidence, opts.min_effect)

    b, a = _used(base), _used(arm)
    cmp = cmp_of(b, a)
    if cmp.verdict not in ("confirmed", "worse") or not any(t.disturbed for t in b + a):
        return cmp
    if blocked:
        lopsided = _one_sided(b + a)
        if not lopsided:
            return cmp
        cb, ca = [t for t in b if t.wave not in lopsided], [t for t in a if t.wave not in lopsided]
    else:
        cb, ca = [t for t in b if not t.disturbed], [t for t in a if not t.disturbed]
    clean = cmp_of(cb, ca)
    if clean.verdict == cmp.verdict:
        return cmp
    cmp.verdict = "not_confirmed"
    cmp.reason = (f"{cmp.reason}, but only with trials disturbed by other processes; the undisturbed trials "
                  f"({len(cb)} + {len(ca)}) do not show it")
    return cmp


def run_verify(job: Job, variants: list[Variant], options: VerifyOptions, runner: TrialRunner | None = None,
               progress: VerifyProgress | None = None, executor: Any = None, slots: list[Any] | None = None) -> VerifyReport:
    if len(variants) < 2:
        raise ValueError("run_verify needs a baseline and at least one patched variant")
    from diagnose.verify.executor import LocalExecutor, Slot
    from diagnose.verify.schedule import clearly_worse, open_arms, round_waves

    slots = slots or [Slot("all")]
    executor = executor or LocalExecutor(runner)
    prog = progress or NullProgress()
    opts = options
    warmup = opts.warmup_steps
    if warmup >= opts.max_steps - 1:
        raise ValueError(f"warm-up ({warmup} steps) leaves nothing to measure in {opts.max_steps} steps")
    settings = TrialSettings(max_steps=opts.max_steps, warmup=warmup, subset=opts.subset, seed=opts.seed)
    made_dir = opts.workdir is None
    workdir = Path(opts.workdir or tempfile.mkdtemp(prefix="swiftdoc-verify-"))
    workdir.mkdir(parents=True, exist_ok=True)
    labels = [v.label for v in variants]
    by_label = {v.label: v for v in variants}
    base_v, patched_v = variants[0], variants[-1]
    trials: dict[str, list[TrialResult]] = {v.label: [] for v in variants}
    all_trials: list[TrialResult] = []
    failed: dict[str, TrialResult] = {}
    dropped: dict[str, str] = {}  # a sweep's candidates stopped early: label -> why
    t_start = time.monotonic()
    comparisons: dict[str, Comparison] = {}
    stop_reason = ""
    stopped = ""
    reruns = [0]
    counter = [0]
    wave_no = [0]
    prog.plan(labels, opts.repeats, opts.max_repeats, opts.max_steps)

    def order_for(rnd: int) -> list[Variant]:
        live = [v for v in variants if v.label not in failed and v.label not in dropped]
        if rnd == 1 and (opts.patched_first or any(v.prevalidation for v in live[1:])):
            return [v for v in live[1:] if v.prevalidation] + [live[0]] + [v for v in live[1:] if not v.prevalidation]
        return live

    def spec_for(v: Variant, rnd: int, slot: Any) -> TrialSpec:
        counter[0] += 1
        idx = counter[0]
        tdir = workdir / f"t{idx:02d}-{'base' if v is base_v else 'patch' if v is patched_v else 'arm'}"
        argv, env = trial_argv(v, job, settings, str(tdir / "out"))
        env = {**env, **slot.env}
        spec = TrialSpec(index=idx, arm=v.label, repeat=rnd, argv=argv, env=env, cwd=job.cwd,
                         output_dir=str(tdir / "out"), log_path=str(tdir / "trial.log"), max_steps=opts.max_steps,
                         warmup=warmup, timeout_s=opts.trial_timeout_s, sample_gpus=opts.sample_gpus,
                         prevalidation=list(v.prevalidation), slot=slot.name, cpus=slot.cpus)
        if opts.sample_gpus:
            from diagnose.verify.sampling import visible_indices

            spec.gpu_indices = visible_indices(env)
        return spec

    def run_wave(jobs: list[tuple[Variant, int, Any]], planned: int) -> list[TrialResult]:
        specs = [spec_for(v, rnd, slot) for v, rnd, slot in jobs]
        handles, starts = [], []
        for spec in specs:
            prog.start(spec, planned)
            starts.append(time.monotonic() - t_start)
            handles.append(executor.submit(spec, prog.step))
        results = executor.wait(handles)
        wave_no[0] += 1
        for (v, _rnd, _slot), spec, res, t0 in zip(jobs, specs, results, starts):
            res.slot, res.executor = spec.slot, executor.name
            res.wave = wave_no[0]
            res.start_s = round(t0, 3)
            res.end_s = round(t0 + (res.wall_s or 0.0), 3)
            if not opts.keep:
                shutil.rmtree(Path(spec.output_dir), ignore_errors=True)
            all_trials.append(res)
            trials[v.label].append(res)
            prog.end(res)
        hit = [r for r in results if r.status == "ok" and r.disturbed]
        if len(jobs) > 1 and len(hit) == len(results):
            # side by side, every trial of the wave was disturbed alike: the wave is a block of the comparison, and
            # the disturbance drops out with it; running it again would only wait for a quiet machine
            prog.note(f"wave of trial(s) {', '.join(str(r.index) for r in results)} ran while other processes were "
                      "busy; they hit every trial of the wave, which the comparison takes out (the wave is a block)")
            return results
        if hit and all(r.status == "ok" for r in results) and reruns[0] + len(jobs) <= opts.max_reruns * len(jobs):
            # the whole wave again, not the disturbed trial alone: a trial re-run with its slot neighbours idle would
            # run faster than the trials it is compared with (shared memory bandwidth and caches)
            reruns[0] += len(jobs)
            for r in results:
                r.replaced = True
            prog.note(f"trial(s) {', '.join(str(r.index) for r in hit)} disturbed by other processes (mean "
                      f"{hit[0].external_cpu_cores} CPU cores): running "
                      + ("it again" if len(jobs) == 1 else f"the whole wave of {len(jobs)} again"))
            return run_wave(jobs, planned + len(jobs))
        return results

    try:
        rnd = 0
        while True:
            rnd += 1
            order = order_for(rnd)
            waves = round_waves([v.label for v in order], len(slots), rnd if len(slots) > 1 else 1)
            planned = len(all_trials) + sum(len(w) for w in waves)
            for wave in waves:
                for res in run_wave([(by_label[arm], rnd, slots[s]) for s, arm in wave], planned):
                    if res.status != "ok" and res.arm not in failed:
                        failed[res.arm] = res
                        if res.arm == base_v.label:
                            stop_reason = "the unpatched job fails: nothing to compare against"
                        elif res.arm == patched_v.label and len(variants) == 2:
                            stop_reason = "the patched job fails"
                if stop_reason:
                    break
            if stop_reason or base_v.label in failed or (patched_v.label in failed and len(variants) == 2):
                stopped = stop_reason or "a trial failed"
                break
            comparisons = {}
            for v in variants[1:]:
                if v.label in failed:
                    continue
                comparisons[v.label] = judge(trials[base_v.label], trials[v.label], opts, blocked=len(slots) > 1)
            if opts.sweep:
                for k, c in comparisons.items():
                    if k not in dropped and clearly_worse(c) and len([v for v in variants[1:] if v.label not in
                                                                      dropped and v.label not in failed]) > 1:
                        dropped[k] = f"clearly worse after round {rnd} ({c.reason}): no further trials"
                        prog.note(f"{k}: {dropped[k]}")
            if rnd < opts.repeats:
                continue
            open_ = [k for k in open_arms(comparisons, opts.min_effect) if k not in dropped]
            if not comparisons:
                stopped = "no comparison could be made"
                break
            if not open_:
                stopped = f"decided after {rnd} round(s)"
                break
            if rnd >= opts.max_repeats:
                stopped = (f"still undecided after {rnd} round(s): the limit (--max-repeats {opts.max_repeats}); "
                           "more rounds, or a quieter machine, would narrow the interval")
                break
            short = [k for k in open_ if comparisons[k].more]
            prog.note((f"{', '.join(short)}: too few degrees of freedom for a verdict yet" if short else
                       f"CI still straddles the threshold for {', '.join(open_)}") + ": one more round")
    finally:
        try:
            executor.close()
        finally:
            if made_dir and not opts.keep:
                shutil.rmtree(workdir, ignore_errors=True)

    if opts.sweep:
        rep = _sweep_report(job, variants, opts, trials, all_trials, failed, dropped, comparisons, slots, warmup,
                            workdir, t_start, stop_reason)
        rep.stopped_because = stopped or None
        return rep
    # -------------------------------------------------------------- the report
    base_sum = summarize_arm(base_v, trials[base_v.label], job)
    patched_sum = summarize_arm(patched_v, trials[patched_v.label], job)
    notes: list[str] = list(job.notes)
    for v in variants[1:]:
        notes += [f"{v.label}: {n}" for n in v.notes]
    if base_sum.global_batch and patched_sum.global_batch and base_sum.global_batch != patched_sum.global_batch:
        notes.append(f"the global batch changes ({base_sum.global_batch} -> {patched_sum.global_batch} samples per "
                     "optimizer step): compared per sample (samples/s), not per step")
    from diagnose.verify.probe_split import gain_source

    if gain_source(base_sum.time_split, patched_sum.time_split):  # --probe: where the step time went
        notes.append(gain_source(base_sum.time_split, patched_sum.time_split))
    if base_sum.startup_s and patched_sum.startup_s and abs(patched_sum.startup_s - base_sum.startup_s) > max(
            5.0, 0.2 * base_sum.startup_s):
        notes.append(f"start-up differs: {base_sum.startup_s:.0f} s -> {patched_sum.startup_s:.0f} s per trial "
                     "(not part of samples/s; it is paid once per run)")
    failure = None
    if base_v.label in failed:
        failure = failed[base_v.label].failure
        verdict, reason, cmp = "failed", stop_reason, None
    elif patched_v.label in failed:
        failure = failed[patched_v.label].failure
        verdict, reason, cmp = "failed", f"a patched trial ended with '{failed[patched_v.label].status}'", None
    else:
        cmp = comparisons.get(patched_v.label)
        verdict = cmp.verdict if cmp else "not_confirmed"
        reason = cmp.reason if cmp else "no comparison"
    parity = None
    if patched_v.label not in failed and base_v.label not in failed:
        parity = _parity(trials[base_v.label], trials[patched_v.label], patched_v, base_sum.global_batch,
                         patched_sum.global_batch, opts)
        if parity.checked and parity.ok is False:
            notes.append("loss parity FAILED for a patch labelled safe: " + parity.reason)
    ablation: list[AblationRow] = []
    if len(variants) > 2:
        for v in variants[1:]:
            if v.label in failed:
                ablation.append(AblationRow(label=v.label, changes=[c.label() for c in v.changes], verdict="failed",
                                            reason=f"trial ended with '{failed[v.label].status}'"))
                continue
            c = comparisons.get(v.label)
            sps = _mean([t.samples_per_s for t in trials[v.label] if t.status == "ok" and not t.replaced])
            ablation.append(AblationRow(label=v.label, changes=[ch.label() for ch in v.changes],
                                        verdict=c.verdict if c else "not_confirmed", gain=c.gain if c else None,
                                        ci=list(c.ci) if c and c.ci else None, samples_per_s=sps,
                                        reason=c.reason if c else ""))
    used = [t for t in all_trials if t.status == "ok" and not t.replaced]
    dist = [t.index for t in used if t.disturbed]
    if dist:
        notes.append(f"trial(s) {', '.join(map(str, dist))} ran while other processes saturated the CPUs: the "
                     "noise they add widens the CI; verify on an idle machine for a tighter answer")
    if any(t.replaced for t in all_trials):
        notes.append("disturbed trial(s) " + ", ".join(str(t.index) for t in all_trials if t.replaced)
                     + " were re-run and are not used")
    pre = [p for v in variants[1:] for p in v.prevalidation]
    if pre:
        notes.append("rejected before the run by the flag table: " + "; ".join(pre))
    notes += _slot_notes(_slot_rows(all_trials, slots))
    return VerifyReport(
        verdict=verdict, reason=reason, gain=cmp.gain if cmp else None, ci=list(cmp.ci) if cmp and cmp.ci else None,
        confidence=opts.confidence, min_effect=opts.min_effect, df=cmp.df if cmp else None,
        baseline=base_sum, patched=patched_sum, trials=all_trials, changes=list(patched_v.changes),
        loss_parity=parity, ablation=ablation, failure=failure, slots=_slot_rows(all_trials, slots),
        job={"source": job.source, "command": job.command_line(), "swift": job.swift, "version": job.version,
             "version_source": job.version_source, "cwd": job.cwd},
        settings={"max_steps": opts.max_steps, "warmup_steps": warmup, "repeats": opts.repeats,
                  "max_repeats": opts.max_repeats, "rounds": max((t.repeat for t in all_trials), default=0),
                  "subset_rows": opts.subset, "trial_timeout_s": opts.trial_timeout_s,
                  "order": " ".join(v.label for v in variants) + " per round",
                  "trial_flags": "--max_steps N --logging_steps 1 --save_strategy no --eval_strategy no "
                                 "--report_to none --output_dir <temp> --check_model false",
                  "workdir": str(workdir) if opts.keep else None, "slots": [sl.name for sl in slots]},
        sampler=opts.sampler_note, notes=notes, elapsed_s=round(time.monotonic() - t_start, 1),
        stopped_because=stopped or None)


def _slot_rows(all_trials: list[TrialResult], slots: list[Any]) -> list[SlotRow]:
    if len(slots) < 2:
        return []
    from diagnose.verify.schedule import slot_rows

    return [SlotRow(**r) for r in slot_rows(all_trials)]


def _slot_notes(rows: list[SlotRow]) -> list[str]:
    return [f"slot {r.slot} runs consistently slower than the others ({r.relative:.2f}× their speed, the arms' mix "
            "taken out): its trials are corrected for it, but check that device set" for r in rows if r.slow]


def _sweep_report(job: Job, variants: list[Variant], opts: VerifyOptions, trials: dict[str, list[TrialResult]],
                  all_trials: list[TrialResult], failed: dict[str, TrialResult], dropped: dict[str, str],
                  comparisons: dict[str, Comparison], slots: list[Any], warmup: int, workdir: Path, t_start: float,
                  stop_reason: str) -> VerifyReport:
    """A sweep's report: every candidate against the baseline, best first; the best confirmed one is `patched`."""
    base_v = variants[0]
    rows: list[CandidateRow] = []
    for v in variants[1:]:
        ts = [t for t in trials[v.label] if t.status == "ok" and not t.replaced]
        if v.label in failed:
            rows.append(CandidateRow(label=v.label, changes=[c.label() for c in v.changes], verdict="failed",
                                     trials=len(trials[v.label]), stopped_early=True,
                                     reason=f"a trial ended with '{failed[v.label].status}'"))
            continue
        c = comparisons.get(v.label)
        rows.append(CandidateRow(label=v.label, changes=[ch.label() for ch in v.changes],
                                 verdict=c.verdict if c else "not_confirmed", gain=c.gain if c else None,
                                 ci=list(c.ci) if c and c.ci else None, samples_per_s=_mean([t.samples_per_s for t in ts]),
                                 trials=len(trials[v.label]), stopped_early=v.label in dropped,
                                 reason=(dropped.get(v.label) or (c.reason if c else "no comparison"))))
    rank = {"confirmed": 0, "not_confirmed": 1, "worse": 2, "failed": 3}
    rows.sort(key=lambda r: (rank[r.verdict], -(r.gain if r.gain is not None else -1e9)))
    base_sum = summarize_arm(base_v, trials[base_v.label], job)
    notes: list[str] = list(job.notes)
    slot_rows_ = _slot_rows(all_trials, slots)
    notes += _slot_notes(slot_rows_)
    best = rows[0] if rows else None
    best_v = next((v for v in variants if best and v.label == best.label), variants[-1])
    failure = None
    if base_v.label in failed:
        failure = failed[base_v.label].failure
        verdict, reason = "failed", stop_reason or "the unpatched job fails: nothing to compare against"
    elif best is None or best.verdict == "failed":
        verdict, reason = "failed", "every candidate failed"
        failure = failed[best_v.label].failure if best_v.label in failed else None
    else:
        verdict = best.verdict
        reason = (f"best of {len(rows)} candidates: {best.label} ({best.reason})" if best.verdict == "confirmed" else
                  f"no candidate confirmed; the best, {best.label}: {best.reason}")
    cmp = comparisons.get(best_v.label)
    return VerifyReport(
        verdict=verdict, reason=reason, gain=best.gain if best else None, ci=best.ci if best else None,
        confidence=opts.confidence, min_effect=opts.min_effect, df=cmp.df if cmp else None,
        baseline=base_sum, patched=summarize_arm(best_v, trials[best_v.label], job), trials=all_trials,
        changes=list(best_v.changes), candidates=rows, failure=failure, slots=slot_rows_,
        job={"source": job.source, "command": job.command_line(), "swift": job.swift, "version": job.version,
             "version_source": job.version_source, "cwd": job.cwd},
        settings={"max_steps": opts.max_steps, "warmup_steps": warmup, "repeats": opts.repeats,
                  "max_repeats": opts.max_repeats, "rounds": max((t.repeat for t in all_trials), default=0),
                  "subset_rows": opts.subset, "trial_timeout_s": opts.trial_timeout_s,
                  "order": "every arm once in every slot per round (a Latin square), arms swapping slots",
                  "trial_flags": "--max_steps N --logging_steps 1 --save_strategy no --eval_strategy no "
                                 "--report_to none --output_dir <temp> --check_model false",
                  "workdir": str(workdir) if opts.keep else None, "slots": [sl.name for sl in slots]},
        sampler=opts.sampler_note, notes=notes, elapsed_s=round(time.monotonic() - t_start, 1))


def auto_subset(job: Job, variants: list[Variant], max_steps: int) -> int:
    """Rows per dataset for a trial: every step sees fresh rows, with a margin for rows ms-swift drops."""
    gb = max((global_batch_of(v.argv, v.env, job) or 1) for v in variants)
    return int(math.ceil(max_steps * gb * 1.25)) + 8
