"""Renderers of a VerifyReport (text with rich, markdown, JSON) and the live progress display.

Contract:
- `report_json(report) -> dict`: the `--format json` document (JSON-safe; NaN
  and inf become strings): verdict, metric, gain, ci [lo, hi], baseline {...},
  patched {...}, trials [...], and the rest of `VerifyReport`.
- `report_markdown(report) -> str`: the `--report FILE.md` document.
- `print_report(report, console)`: the text form; a `rich.console.Console`
  (tests render it without colour at a fixed width).
- `ConsoleProgress(console)`: a `VerifyProgress` with a rich progress display
  (trials done / planned, the current trial's live step counter) on a terminal,
  one line per finished trial otherwise.
Renderers take the report and an output, nothing else.
"""
from __future__ import annotations

from typing import Any

from diagnose.verify.experiment import VerifyProgress
from diagnose.verify.models import TrialResult, VerifyReport
from diagnose.verify.trial import TrialSpec

VERDICT_TEXT = {"confirmed": "CONFIRMED", "not_confirmed": "NOT CONFIRMED", "worse": "WORSE", "failed": "FAILED"}
VERDICT_STYLE = {"confirmed": "bold green", "not_confirmed": "bold yellow", "worse": "bold red", "failed": "bold red"}


def report_json(report: VerifyReport) -> dict[str, Any]:
    from diagnose.render.run_json import jsonable

    return jsonable(report.model_dump(mode="python"))


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.1%}"


def _f(x: float | None, fmt: str = ".3g", unit: str = "") -> str:
    if x is None:
        return "–"
    if fmt.endswith("g") and abs(x) >= 1e4:  # no exponents in tables: 12870, not 1.287e+04
        return f"{x:.0f}{unit}"
    return f"{x:{fmt}}{unit}"


def headline(r: VerifyReport) -> str:
    conf = f"{r.confidence:.0%}"
    if r.verdict == "failed":
        arm = r.failure.arm if r.failure else "?"
        what = r.failure.status if r.failure else "failed"
        return f"{VERDICT_TEXT[r.verdict]}: a {arm} trial ended with '{what}'"
    ci = f" ({conf} CI {_pct(r.ci[0])} … {_pct(r.ci[1])})" if r.ci else " (no CI)"
    return f"{VERDICT_TEXT[r.verdict]}: {_pct(r.gain)} samples/s{ci}"


def _trial_row(t: TrialResult) -> list[str]:
    last_loss = next((x for x in reversed(t.losses) if x is not None), None)
    status = t.status + (" (replaced)" if t.replaced else " (disturbed)" if t.disturbed else "")
    when = f"{t.start_s:.0f}–{t.end_s:.0f}" if t.start_s is not None and t.end_s is not None else "–"
    return [str(t.index), t.arm, str(t.repeat), t.slot, when, status, _f(t.startup_s, ".1f"), _f(t.step_time_s, ".4g"),
            _f(t.step_time_iqr_s, ".2g"), _f(t.samples_per_s, ".4g"), _f(t.tokens_per_s, ".4g"),
            _f(t.peak_memory_gib, ".1f"), _f(t.gpu_util_mean_pct, ".0f"), _f(t.external_cpu_cores, ".2f"),
            _f(last_loss, ".4g"), f"{t.measured_steps}/{t.steps_done}"]


TRIAL_COLUMNS = ["#", "arm", "rep", "slot", "ran s", "status", "start-up s", "s/step", "IQR s", "samples/s", "tokens/s", "peak GiB",
                 "GPU %", "other CPU", "last loss", "measured/steps"]


def _arm_rows(r: VerifyReport) -> list[tuple[str, str, str]]:
    b, p = r.baseline, r.patched

    def sps(a: Any) -> str:
        if a.samples_per_s is None:
            return "–"
        sd = f" ± {a.samples_per_s_sd:.2g}" if a.samples_per_s_sd is not None else ""
        return f"{a.samples_per_s:.4g}{sd} (n={a.ok_trials})"

    return [
        ("samples/s", sps(b), sps(p)),
        ("tokens/s", _f(b.tokens_per_s, ".4g"), _f(p.tokens_per_s, ".4g")),
        ("s/step (median)", _f(b.step_time_s, ".4g"), _f(p.step_time_s, ".4g")),
        *_split_rows(b, p),
        ("CPU s/step (trial processes)", _f(b.cpu_s_per_step, ".4g"), _f(p.cpu_s_per_step, ".4g")),
        ("global batch", _f(b.global_batch, "d"), _f(p.global_batch, "d")),
        ("start-up s (excluded)", _f(b.startup_s, ".1f"), _f(p.startup_s, ".1f")),
        ("peak memory GiB", _f(b.peak_memory_gib, ".2f"), _f(p.peak_memory_gib, ".2f")),
        ("GPU util %", _f(b.gpu_util_mean_pct, ".0f"), _f(p.gpu_util_mean_pct, ".0f")),
    ]


def _split_rows(b: Any, p: Any) -> list[tuple[str, str, str]]:
    """--probe: where each arm's mean step went (verify.probe_split)."""
    if not b.time_split and not p.time_split:
        return []
    rows = []
    for key, label in (("step_s", "probe: s/step (mean)"), ("data_s", "  data wait s/step"),
                       ("compute_s", "  compute s/step"), ("other_s", "  other s/step")):
        rows.append((label, _f((b.time_split or {}).get(key), ".3g"), _f((p.time_split or {}).get(key), ".3g")))
    return rows


def _parity_text(r: VerifyReport) -> str | None:
    lp = r.loss_parity
    if lp is None:
        return None
    if not lp.checked:
        return f"loss parity: not checked ({lp.reason})"
    state = "ok" if lp.ok else "FAILED"
    return (f"loss parity: {state} - {lp.reason}; max |Δ| {_f(lp.max_abs_diff, '.2g')}, "
            f"max rel {_f(lp.max_rel_diff, '.2%')}")


def _settings_text(r: VerifyReport) -> str:
    s = r.settings
    sub = f", {s['subset_rows']} rows per dataset" if s.get("subset_rows") else ""
    order = str(s.get("order", ""))
    what = " / ".join(order.replace(" per round", "").split()) if order.endswith(" per round") else order
    slots = s.get("slots") or []
    where = f" in {len(slots)} slots ({', '.join(slots)})" if len(slots) > 1 else ""
    limit = f" (limit {s['max_repeats']})" if s.get("max_repeats") else ""
    why = f"; stopped: {r.stopped_because}" if r.stopped_because else ""
    return (f"{s.get('max_steps')} steps per trial ({s.get('warmup_steps')} warm-up dropped){sub}; "
            f"{s.get('rounds')} round(s){limit} of {what}{where}; min effect {r.min_effect:.0%}{why}")


def print_report(r: VerifyReport, console: Any) -> None:
    from rich.table import Table
    from rich.text import Text

    say = lambda text: console.print(text, markup=False, highlight=False)  # noqa: E731 (flag text has brackets)
    console.print(Text(headline(r), style=VERDICT_STYLE[r.verdict]))
    if r.reason:
        say(f"  {r.reason}")
    say(f"job: {r.job.get('source')} (ms-swift {r.job.get('version')})")
    say("change: " + ("; ".join(f"{c.label()} [{c.effect}]" for c in r.changes) or "none"))
    say("trials: " + _settings_text(r))
    t = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    for c in TRIAL_COLUMNS:
        t.add_column(c, justify="left" if c in ("arm", "status") else "right", no_wrap=c != "arm")
    for tr in r.trials:
        t.add_row(*_trial_row(tr))
    console.print(t)
    a = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    a.add_column("")
    a.add_column("baseline", justify="right")
    a.add_column("patched", justify="right")
    for row in _arm_rows(r):
        a.add_row(*row)
    console.print(a)
    pt = _parity_text(r)
    if pt:
        say(pt)
    if r.ablation:
        ab = Table(title="ablation (each change alone, and all together)", show_header=True, header_style="bold",
                   box=None, pad_edge=False)
        for c in ("arm", "verdict", "gain", "CI", "samples/s"):
            ab.add_column(c, justify="left" if c in ("arm", "verdict") else "right")
        for row in r.ablation:
            ci = f"{_pct(row.ci[0])} … {_pct(row.ci[1])}" if row.ci else "–"
            ab.add_row(row.label, row.verdict, _pct(row.gain), ci, _f(row.samples_per_s, ".4g"))
        console.print(ab)
    if r.candidates:
        console.print(_candidates_table(r))
    if r.best_patch:
        say(f"the patch to apply ({r.best_patch['label']}): {r.best_patch['command']}")
        if r.best_patch.get("diff"):
            say(r.best_patch["diff"].rstrip("\n"))
    if r.slots:
        sl = Table(title="slots (disjoint device sets; relative = speed with the arms' mix taken out)", show_header=True,
                   header_style="bold", box=None, pad_edge=False)
        for c in ("slot", "trials", "samples/s", "relative"):
            sl.add_column(c, justify="left" if c == "slot" else "right")
        for row in r.slots:
            sl.add_row(row.slot + (" (slow)" if row.slow else ""), str(row.trials), _f(row.samples_per_s, ".4g"),
                       _f(row.relative, ".3f"))
        console.print(sl)
    if r.failure:
        f = r.failure
        console.print(Text(f"{f.arm} trial #{f.trial}: {f.status} (exit code {f.returncode})", style="bold red"))
        if f.error_line:
            say(f"  error: {f.error_line}")
        if f.summary:
            say(f"  diagnosis: [{f.rule or f.category}] {f.summary}")
        for e in f.evidence:
            say(f"    {e}")
        for p in f.prevalidation:
            say(f"  flag table: {p}")
    if r.sampler:
        say(r.sampler)
    for n in r.notes:
        say(f"note: {n}")


def _candidates_table(r: VerifyReport) -> Any:
    from rich.table import Table

    t = Table(title="candidates against the baseline, best first", show_header=True, header_style="bold", box=None,
              pad_edge=False)
    for c in ("candidate", "verdict", "gain", "CI", "samples/s", "trials", ""):
        t.add_column(c, justify="left" if c in ("candidate", "verdict", "") else "right")
    for c in r.candidates:
        ci = f"{_pct(c.ci[0])} … {_pct(c.ci[1])}" if c.ci else "–"
        t.add_row(c.label, c.verdict, _pct(c.gain), ci, _f(c.samples_per_s, ".4g"), str(c.trials),
                  "stopped early" if c.stopped_early else "")
    return t


def report_markdown(r: VerifyReport) -> str:
    out = [f"# swiftdoc verify: {headline(r)}", ""]
    if r.reason:
        out += [r.reason, ""]
    out += [f"- job: {r.job.get('source')} (ms-swift {r.job.get('version')}, {r.job.get('version_source')})",
            f"- command: `{r.job.get('command')}`",
            "- change: " + ("; ".join(f"`{c.label()}` ({c.effect})" for c in r.changes) or "none"),
            f"- trials: {_settings_text(r)}",
            f"- metric: samples/s = global batch / median interval s/step after warm-up; gain = mean(patched) / "
            f"mean(baseline) - 1; {r.confidence:.0%} CI: "
            + ("least squares on log samples/s, arm + slot + wave (slot and wave as blocks), t" if r.slots else
               "Welch t on the log ratio") + (f" (df {r.df:.1f})" if r.df else ""), ""]
    out += ["| " + " | ".join(TRIAL_COLUMNS) + " |", "|" + "---|" * len(TRIAL_COLUMNS)]
    for t in r.trials:
        out.append("| " + " | ".join(_trial_row(t)) + " |")
    out += ["", "| | baseline | patched |", "|---|---:|---:|"]
    for name, b, p in _arm_rows(r):
        out.append(f"| {name} | {b} | {p} |")
    pt = _parity_text(r)
    if pt:
        out += ["", pt]
    if r.ablation:
        out += ["", "## Ablation", "", "| arm | verdict | gain | CI | samples/s |", "|---|---|---:|---:|---:|"]
        for row in r.ablation:
            ci = f"{_pct(row.ci[0])} … {_pct(row.ci[1])}" if row.ci else "–"
            out.append(f"| {row.label} | {row.verdict} | {_pct(row.gain)} | {ci} | {_f(row.samples_per_s, '.4g')} |")
    if r.candidates:
        out += ["", "## Candidates (best first)", "", "| candidate | verdict | gain | CI | samples/s | trials | note |",
                "|---|---|---:|---:|---:|---:|---|"]
        for c in r.candidates:
            ci = f"{_pct(c.ci[0])} … {_pct(c.ci[1])}" if c.ci else "–"
            out.append(f"| `{c.label}` | {c.verdict} | {_pct(c.gain)} | {ci} | {_f(c.samples_per_s, '.4g')} | "
                       f"{c.trials} | {'stopped early' if c.stopped_early else ''} |")
    if r.best_patch:
        out += ["", f"The patch to apply ({r.best_patch['label']}): `{r.best_patch['command']}`"]
        if r.best_patch.get("diff"):
            out += ["", "```diff", r.best_patch["diff"].rstrip("\n"), "```"]
    if r.slots:
        out += ["", "## Slots", "", "| slot | trials | samples/s | relative |", "|---|---:|---:|---:|"]
        for row in r.slots:
            out.append(f"| {row.slot}{' (slow)' if row.slow else ''} | {row.trials} | {_f(row.samples_per_s, '.4g')} | "
                       f"{_f(row.relative, '.3f')} |")
    if r.failure:
        f = r.failure
        out += ["", "## Failure", "", f"{f.arm} trial #{f.trial}: **{f.status}** (exit code {f.returncode})", ""]
        if f.error_line:
            out.append(f"- error: `{f.error_line}`")
        if f.summary:
            out.append(f"- diagnosis: [{f.rule or f.category}] {f.summary}")
        out += [f"  - {e}" for e in f.evidence]
        out += [f"- flag table: {p}" for p in f.prevalidation]
        if f.log_tail:
            out += ["", "```", *f.log_tail, "```"]
    if r.sampler or r.notes:
        out += ["", "## Notes", ""]
        if r.sampler:
            out.append(f"- {r.sampler}")
        out += [f"- {n}" for n in r.notes]
    return "\n".join(out) + "\n"


class ConsoleProgress(VerifyProgress):
    """Live display on a terminal (rich), plain lines otherwise."""

    def __init__(self, console: Any, enabled: bool = True):
        self.console = console
        self.live = enabled and console.is_terminal
        self.enabled = enabled
        self._progress: Any = None
        self._overall: Any = None
        self._trial: Any = None
        self.done = 0

    def plan(self, arms: list[str], rounds: int, max_rounds: int, max_steps: int) -> None:
        if not self.enabled:
            return
        self.console.print(f"verify: {len(arms)} arms ({', '.join(arms)}), {rounds}-{max_rounds} rounds, "
                           f"{max_steps} steps per trial")
        if self.live:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), console=self.console, transient=True)
            self._progress.start()
            self._overall = self._progress.add_task("trials", total=rounds * len(arms))

    def start(self, spec: TrialSpec, planned: int) -> None:
        if self._progress is not None:
            self._progress.update(self._overall, total=planned)
            self._trial = self._progress.add_task(f"trial {spec.index} {spec.arm} #{spec.repeat}: starting",
                                                  total=spec.max_steps)
            self._spec = spec

    def step(self, step: int, max_steps: int | None) -> None:
        if self._progress is not None and self._trial is not None:
            self._progress.update(self._trial, completed=step,
                                  description=f"trial {self._spec.index} {self._spec.arm} #{self._spec.repeat}: step")

    def end(self, result: TrialResult) -> None:
        self.done += 1
        if self._progress is not None:
            if self._trial is not None:
                self._progress.remove_task(self._trial)
                self._trial = None
            self._progress.update(self._overall, completed=self.done)
        if self.enabled:
            sps = f"{result.samples_per_s:.4g} samples/s" if result.samples_per_s else "no throughput"
            st = "" if result.startup_s is None else f", start-up {result.startup_s:.1f} s"
            self.console.print(f"  trial {result.index} {result.arm} #{result.repeat}: {result.status}, {sps}"
                               f" ({result.measured_steps} steps measured{st})", markup=False, highlight=False)

    def note(self, text: str) -> None:
        if self.enabled:
            self.console.print(f"  {text}", markup=False, highlight=False)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
