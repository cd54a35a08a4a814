"""`swiftdoc verify [SCRIPT] [--log LOG | --plan FILE | --set/--env/--remove ...] [-- swift sft ...]`.

Runs short trials of the real job through the ms-swift CLI, unpatched and
patched, alternating, and reports whether the patch is faster in samples/s,
with a confidence interval (docs/verify.md).  The job comes from a launch
script, from the `run sh:` line of `--log`, or from the command after `--`.
The patch comes from the diagnosis of `--log`, from a plan saved with
`swiftdoc patch --format json` (`--plan`), or from explicit changes.

Exit codes: 0 confirmed; 1 not_confirmed or worse; 4 failed (a trial crashed,
OOMed, logged NaN or timed out; the diagnosis is in the report); 2 bad input or
usage; 3 missing environment (no ms-swift CLI); 130 interrupted (every trial
process is killed, temporary outputs removed).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from diagnose.errors import InputError, SwiftdocError, UsageError

HELP = "re-run baseline and patched trials through ms-swift and measure the gain"
EXIT = {"confirmed": 0, "not_confirmed": 1, "worse": 1, "failed": 4}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("inputs", nargs="*", metavar="SCRIPT | -- swift sft ...",
                        help="the launch script (train.sh), or the swift command after --")
    src = parser.add_argument_group("which patch")
    src.add_argument("--log", metavar="PATH", help="the job's log: its diagnosis is the patch (and its `run sh:` line "
                                                   "the job, when no script is given)")
    src.add_argument("--plan", metavar="FILE", help="a plan saved by `swiftdoc patch --format json`")
    src.add_argument("--set", action="append", default=[], metavar="FLAG=VALUE", help="an explicit flag change")
    src.add_argument("--env", action="append", default=[], metavar="VAR=VALUE", help="an explicit env change")
    src.add_argument("--remove", action="append", default=[], metavar="FLAG", help="remove a flag")
    src.add_argument("--ablate", action="store_true", help="also try each change alone, to see which ones pay")
    sw = parser.add_argument_group("sweep: several candidates against the baseline, ranked by gain")
    sw.add_argument("--try", dest="try_", action="append", default=[], metavar="FLAG=V1,V2,...",
                    help="one candidate per value (repeatable); --set/--env changes join every candidate")
    sw.add_argument("--candidate", action="append", default=[], metavar="'FLAG=V FLAG=V'",
                    help="a group of flag changes tried together as one candidate (repeatable)")
    where = parser.add_argument_group("where trials run")
    where.add_argument("--slots", type=int, metavar="N", help="run N trials at once on disjoint device sets (the "
                       "visible GPUs split N ways; with no GPU, the CPU cores)")
    where.add_argument("--gpus-per-trial", type=int, metavar="K", help="GPUs per slot (default: visible GPUs / --slots)")
    where.add_argument("--ray", metavar="ADDRESS", help="run every trial as a Ray task: a cluster's address, `auto`, "
                       "or `local` (starts a Ray on this machine); needs the `ray` extra")
    tr = parser.add_argument_group("trials")
    tr.add_argument("--max-steps", type=int, metavar="N",
                    help="optimizer steps per trial (default: ~150 s of steps from --log's step time, else 50)")
    tr.add_argument("--warmup", type=int, metavar="K", help="steps dropped at the start of each trial "
                                                           "(default: 10%% of the steps, at least 3)")
    tr.add_argument("--repeats", type=int, default=2, metavar="N", help="rounds before the first verdict (default 2); a "
                    "round runs every arm once in every slot (one trial per arm without --slots; 1 is allowed with "
                    "--slots 2 or more)")
    tr.add_argument("--max-repeats", type=int, default=None, metavar="N",
                    help="rounds at most; more are run only while undecided: the CI straddles the threshold, or too few "
                         "degrees of freedom (default 3; 6 with --slots, whose rounds decide in pairs of waves)")
    tr.add_argument("--min-effect", type=float, default=0.03, metavar="FRAC", help="smallest gain worth confirming (default 0.03)")
    tr.add_argument("--confidence", type=float, default=0.95, help="confidence of the interval (default 0.95)")
    tr.add_argument("--subset", default="auto", metavar="ROWS",
                    help="rows per dataset for a trial (`path#ROWS`; default auto: steps x global batch x 1.25; 0 = all)")
    tr.add_argument("--trial-timeout", type=float, default=1800.0, metavar="S", help="kill a trial after S seconds (default 1800)")
    tr.add_argument("--seed", type=int, help="--seed for both arms when the job sets none (ms-swift's default is 42)")
    tr.add_argument("--max-reruns", type=int, default=2, metavar="N",
                    help="re-run at most N times a trial (with --slots: its whole wave) that other processes disturbed "
                         "(saturated CPUs; default 2)")
    tr.add_argument("--patched-first", action="store_true", help="start with a patched trial (a risky patch fails fast)")
    env = parser.add_argument_group("environment")
    env.add_argument("--swift", metavar="PATH", help="the ms-swift CLI to run (default: next to swiftdoc, else on PATH)")
    env.add_argument("--swift-version", metavar="V", help="ms-swift version (default: the one the CLI runs)")
    env.add_argument("--cwd", metavar="DIR", help="directory the trials run in (default: the current one)")
    env.add_argument("--line", type=int, help="the swift command on this line of the script (scripts with several)")
    env.add_argument("--keep", metavar="DIR", help="keep every trial's log and output under DIR (default: temporary, removed)")
    env.add_argument("--no-sampler", action="store_true", help="do not sample GPU metrics with NVML")
    env.add_argument("--probe", action="store_true", help="run every trial with swiftdoc's in-trainer probe: the "
                     "report says where each arm's step time went (data wait, compute) and where a gain came from")
    env.add_argument("--gpu", help="GPU model, for the diagnosis of --log (as for analyze)")
    env.add_argument("--cpu-cores", type=int, help="CPU cores of the machine (worker suggestions of --log's diagnosis)")
    out = parser.add_argument_group("output")
    out.add_argument("--format", choices=["text", "json"], default="text")
    out.add_argument("--report", metavar="FILE.md", help="also write the report as markdown")
    out.add_argument("--no-progress", action="store_true", help="no live progress on stderr")


def _subset(value: str) -> int | None | str:
    v = value.strip().lower()
    if v == "auto":
        return "auto"
    if v in ("0", "all", "none", "off"):
        return None
    try:
        n = int(v)
    except ValueError:
        raise UsageError(f"--subset {value!r}: expected auto, 0 or a number of rows") from None
    if n < 1:
        raise UsageError("--subset must be >= 1 (or 0 for the whole dataset)")
    return n


def _plan_requests(path: str) -> list[Any]:
    """Requests from a `swiftdoc patch --format json` document (its changes, with their labels and rules)."""
    from diagnose.engine import RemedyOp
    from diagnose.patch.models import Request

    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise InputError(f"--plan {path}: cannot read it ({e.strerror})") from None
    except ValueError as e:
        raise InputError(f"--plan {path}: not JSON ({e})", hint="save one with: swiftdoc patch ... --format json > plan.json") from None
    changes = doc.get("changes") if isinstance(doc, dict) else None
    if not isinstance(changes, list):
        raise InputError(f"--plan {path}: no `changes` list", hint="save one with: swiftdoc patch ... --format json > plan.json")
    reqs = []
    for ch in changes:
        if not isinstance(ch, dict):
            continue
        effect = ch.get("effect") if ch.get("effect") in ("safe", "changes-training") else "changes-training"
        rule = str(ch.get("rule") or "plan")
        title = str(ch.get("title") or "")
        if ch.get("env"):
            if ch.get("new") is None:
                continue  # unsetting a variable is not a plan operation
            op = RemedyOp(op="set_env", env=ch["env"], value=str(ch["new"]))
        elif ch.get("flag"):
            if ch.get("new") is None:
                op = RemedyOp(op="remove", flag=ch["flag"])
            else:
                toks = ch.get("tokens")
                val: Any = toks[1:] if isinstance(toks, list) and len(toks) > 2 and "=" not in toks[0] else ch["new"]
                op = RemedyOp(op="set", flag=ch["flag"], value=val)
        else:
            continue
        reqs.append(Request(op=op, effect=effect, rule=rule, title=title or f"{op.op} {op.flag or op.env}"))
    if not reqs:
        raise InputError(f"--plan {path}: the plan has no change to verify")
    return reqs


def _candidates(tries: list[str], groups: list[str]) -> list[tuple[str, list[Any]]]:
    """(label, requests) per candidate: every value of every --try, and every --candidate group."""
    from diagnose.patch.plan import parse_assignments

    out: list[tuple[str, list[Any]]] = []
    for raw in tries:
        name, eq, values = raw.partition("=")
        vals = [v.strip() for v in values.split(",") if v.strip()]
        if not eq or not name.strip() or not vals:
            raise UsageError(f"--try {raw!r}: expected FLAG=V1,V2,...", hint="e.g. --try dataloader_num_workers=0,2,4")
        for v in vals:
            out.append((f"--{name.strip().lstrip('-')} {v}", parse_assignments([f"{name.strip()}={v}"], "set")))
    for raw in groups:
        items = raw.split()
        if not items:
            raise UsageError("--candidate needs FLAG=VALUE items", hint="e.g. --candidate 'gradient_checkpointing=false "
                             "per_device_train_batch_size=4'")
        reqs = parse_assignments(items, "set")
        out.append((" ".join(f"--{r.op.flag} {r.op.value}" for r in reqs), reqs))
    labels = [label for label, _ in out]
    dup = sorted({x for x in labels if labels.count(x) > 1})
    if dup:
        raise UsageError(f"candidate {dup[0]!r} is given twice")
    return out


def _best_patch(inputs: list[str], args: argparse.Namespace, job: Any, report: Any,
                candidates: list[tuple[str, list[Any]]], explicit: list[Any]) -> dict[str, Any]:
    """The confirmed best candidate as the patch to apply: the `swiftdoc patch` command that writes it (atomically,
    with a backup) and, for a script, the diff it makes."""
    import shlex

    label = report.patched.label
    reqs = explicit + next(r for lab, r in candidates if lab == label)
    sets = " ".join(f"--set {shlex.quote(f'{r.op.flag}={r.op.value}')}" for r in reqs if r.op.op == "set")
    sets += "".join(f" --env {shlex.quote(f'{r.op.env}={r.op.value}')}" for r in reqs if r.op.op == "set_env")
    sets += "".join(f" --remove {r.op.flag}" for r in reqs if r.op.op == "remove")
    out: dict[str, Any] = {"label": label, "command": None, "diff": None}
    if len(inputs) == 1 and Path(inputs[0]).is_file():
        from diagnose.patch.edit import UnsafeEdit, edits_for
        from diagnose.patch.launch import read_launch
        from diagnose.patch.render import unified
        from diagnose.patch.source import plan_for_launch, read_script

        out["command"] = f"swiftdoc patch {shlex.quote(inputs[0])} {sets} --write"
        try:
            sf = read_script(inputs[0])
            launch = read_launch(sf.text, base_dir=sf.path.parent, select_line=args.line)
            plan = plan_for_launch(launch, None, job.version, explicit=reqs)
            out["diff"] = "".join(unified(e.old, e.new, Path(e.label).name) for e in edits_for(launch, plan, sf.path)
                                  if e.new != e.old) or None
        except (UnsafeEdit, SwiftdocError):
            pass
    else:
        out["command"] = f"swiftdoc patch --log <the job's log> {sets}"
    return out


def _default_steps(diag: Any) -> tuple[int, str]:
    st = diag.features.get("step_time_median_s") if diag is not None else None
    if isinstance(st, (int, float)) and st > 0:
        n = int(min(400, max(20, round(150.0 / st))))
        return n, f"{n} steps: ~150 s of training at the logged {st:.3g} s/step"
    return 50, "50 steps (default; pass --max-steps to size trials to ~2-5 minutes)"


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from diagnose.patch.plan import parse_assignments, requests_from
    from diagnose.verify import job as J
    from diagnose.verify.experiment import VerifyOptions, auto_subset, run_verify
    from diagnose.verify.render import ConsoleProgress, print_report, report_json, report_markdown
    from diagnose.verify.sampling import probe_nvml

    min_rounds = 1 if (args.slots or 1) >= 2 or args.gpus_per_trial else 2  # a round runs every arm in every slot
    if args.max_repeats is None:
        args.max_repeats = max(args.repeats, 3 if min_rounds == 2 else 6)
    if args.repeats < min_rounds or args.max_repeats < args.repeats:
        raise UsageError(f"--repeats must be >= {min_rounds} and --max-repeats >= --repeats",
                         hint="with --slots N a round already gives every arm N trials" if min_rounds == 2 else None)
    if args.max_steps is not None and args.max_steps < 5:
        raise UsageError("--max-steps must be at least 5")
    if not 0.5 <= args.confidence < 1:
        raise UsageError("--confidence must be in [0.5, 1)")
    subset = _subset(args.subset)
    explicit = parse_assignments(args.set, "set") + parse_assignments(args.env, "env") + \
        parse_assignments(args.remove, "remove")
    candidates = _candidates(args.try_, args.candidate)
    if not (explicit or args.log or args.plan or candidates):
        raise UsageError("no patch to verify", hint="give --log train.log, --plan plan.json, --set FLAG=VALUE or "
                         "--try FLAG=V1,V2")
    if candidates and args.ablate:
        raise UsageError("--ablate and a sweep (--try / --candidate) both split the changes; give one")
    if args.slots is not None and args.slots < 1:
        raise UsageError("--slots must be >= 1")
    if args.gpus_per_trial is not None and args.gpus_per_trial < 1:
        raise UsageError("--gpus-per-trial must be >= 1")
    if args.plan and args.log:
        raise UsageError("--plan and --log both name the patch; give one")
    swift = J.find_swift(args.swift)
    cwd = os.path.abspath(args.cwd or os.getcwd())
    run_ = diag = None
    if args.log:
        from diagnose.parse import parse_run
        from diagnose.parse.probe import load_probe
        from diagnose.pipeline import AnalyzeOptions, analyze_run

        run_ = parse_run([args.log])
        load_probe(run_, [args.log])  # its probe files, when the job ran with swiftdoc probe
        diag = analyze_run(run_, options=AnalyzeOptions(gpu=args.gpu, cpu_cores=args.cpu_cores))
    inputs = list(args.inputs)
    if len(inputs) == 1 and Path(inputs[0]).is_file():
        job = J.job_from_script(inputs[0], swift=swift, version=args.swift_version, cwd=cwd, line=args.line)
    elif inputs:
        job = J.job_from_argv(inputs, swift=swift, version=args.swift_version, cwd=cwd)
    elif run_ is not None:
        job = J.job_from_run(run_, swift=swift, version=args.swift_version, cwd=cwd, log=args.log)
    else:
        raise UsageError("which job?", hint="swiftdoc verify train.sh --set ..., or --log train.log, or -- swift sft ...")
    if args.probe:  # both arms get the same probe: it changes no training (docs/probe.md)
        from diagnose.patch.probe_flags import add_probe

        job.argv = add_probe(job.argv, job.version)
    if run_ is not None and not job.effective:
        from diagnose.patch.source import effective_from_run

        job.effective = effective_from_run(run_)
        job.world_size = run_.world_size
    units = J.units_from_requests(job, explicit, explicit=True)
    if args.plan:
        units += J.units_from_requests(job, _plan_requests(args.plan), explicit=False)
    if diag is not None:
        reqs, _advice, _dropped = requests_from(diag)
        reqs = [r for r in reqs if r.effect != "advice"]
        if not reqs and not units:
            raise UsageError(f"the diagnosis of {args.log} proposes no change ({diag.primary.category}); "
                             "nothing to verify", hint="give explicit changes with --set / --env")
        units += J.units_from_requests(job, reqs, explicit=False)
    if candidates:
        cand_units = [(label, J.units_from_requests(job, reqs, explicit=True)) for label, reqs in candidates]
        variants = J.sweep_variants(job, units, cand_units)
        same = [v.label for v in variants[1:] if not v.changes]
        if same:
            raise UsageError(f"candidate(s) {', '.join(same)} change nothing in this job (already in place)")
    else:
        variants = J.build_variants(job, units, ablate=args.ablate)
    if not variants[-1].changes:
        raise UsageError("the patch changes nothing in this job (every change is already in place)",
                         hint="; ".join(variants[-1].notes) or None)
    max_steps, why = (args.max_steps, f"{args.max_steps} steps (--max-steps)") if args.max_steps else _default_steps(diag)
    if subset == "auto":
        subset = auto_subset(job, variants, max_steps)
    opts = VerifyOptions(max_steps=max_steps, warmup=args.warmup, repeats=args.repeats, max_repeats=args.max_repeats,
                         confidence=args.confidence, min_effect=args.min_effect, subset=subset,  # type: ignore[arg-type]
                         trial_timeout_s=args.trial_timeout, workdir=args.keep, keep=bool(args.keep), seed=args.seed,
                         patched_first=args.patched_first, max_reruns=max(0, args.max_reruns), sweep=bool(candidates))
    if opts.warmup_steps >= max_steps - 2:
        raise UsageError(f"--warmup {opts.warmup_steps} leaves fewer than 2 measured steps of {max_steps}")
    if args.no_sampler:
        opts.sampler_note = "GPU metrics not sampled (--no-sampler)"
    else:
        opts.sample_gpus, opts.sampler_note = probe_nvml()
    job.notes.append(f"trial length: {why}")
    # every check of the machine (slots, Ray) before the first trial: one line, exit 3
    from diagnose.verify.executor import LocalExecutor, plan_slots

    slots = plan_slots(args.slots, args.gpus_per_trial, job.env)
    executor: Any = LocalExecutor()
    if args.ray:
        from diagnose.verify.ray_executor import RayExecutor

        executor = RayExecutor.connect(args.ray, slots, job)
    err = Console(stderr=True, highlight=False)
    progress = ConsoleProgress(err, enabled=not args.no_progress)
    old = signal.getsignal(signal.SIGTERM)

    def _term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        signal.signal(signal.SIGTERM, _term)  # a scheduler's cancel cleans up like Ctrl-C
    except ValueError:  # not the main thread
        old = None
    try:
        report = run_verify(job, variants, opts, progress=progress, executor=executor, slots=slots)
    finally:
        progress.close()
        if old is not None:
            signal.signal(signal.SIGTERM, old)
    if candidates and report.verdict == "confirmed":
        report.best_patch = _best_patch(inputs, args, job, report, candidates, explicit)
    from diagnose.redact import redact

    shown = redact(report)  # what is written is shareable: no tokens, keys or passwords from the job's command
    if args.report:
        Path(args.report).write_text(report_markdown(shown), encoding="utf-8")
    if args.format == "json":
        json.dump(redact(report_json(shown)), sys.stdout, ensure_ascii=False, indent=1)
        sys.stdout.write("\n")
    else:
        out = Console(highlight=False)
        if not out.is_terminal:
            out = Console(highlight=False, width=160)  # a file or pipe: no truncated table columns
        print_report(shown, out)
    return EXIT[report.verdict]
