"""`swiftdoc analyze PATH...`: what holds the run back or what killed it, with evidence and remedies.

`--save RECORD.json` keeps the analysis as a versioned record (`diagnose.record`);
`--load RECORD.json` renders one again, in any format, with no log at hand (the
record carries the lines it quotes: no file it names is opened).  Everything written
(text, JSON, Markdown, the record) is redacted (`diagnose.redact`: tokens, keys,
passwords); `--save`/`--plot` never overwrite an input; `--max-input` bounds each input.
Several captures of unrelated runs (different launch commands, versions or run folders:
`diagnose.parse.relate`) are said to be unrelated and analysed apart, one report per run
(JSON: `outputs.AnalyzeApartOut`); the captures of one job's nodes are read as one job.

Exit codes: 0 ran (whatever the verdict); 1 with --fail-on SEVERITY when a finding
reaches it; 2 bad input or usage; 3 missing environment (e.g. matplotlib for --plot).
Never imports torch, swift or pynvml.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from diagnose.commands.common import add_max_input_arg, quoted_lines, read_inputs, read_stdin
from diagnose.errors import UsageError
from diagnose.redact import redact

HELP = "diagnose a run"
from diagnose.engine import SEVERITY_RANK as _SEV  # noqa: E402


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("inputs", nargs="*", metavar="PATH",
                        help="log capture(s), logging.jsonl, args.json, an output dir, or - for stdin")
    parser.add_argument("--save", metavar="RECORD.json", help="also save the analysis as a reloadable record")
    parser.add_argument("--load", metavar="RECORD.json", help="render a saved record (no log needed)")
    parser.add_argument("--format", choices=["text", "json", "markdown"], default="text")
    parser.add_argument("--gpu", help="GPU model for capacity and MFU, e.g. A100-80GB, H100, RTX4090")
    parser.add_argument("--cpu-cores", type=int, help="CPU cores of the training machine (for worker suggestions)")
    parser.add_argument("--samples", help="NVML samples file (swiftdoc sample / attach); found next to the log by default")
    parser.add_argument("--param", action="append", default=[], metavar="RULE.param=VALUE",
                        help="override a rule threshold, e.g. DL001.max_util=40 (repeatable)")
    parser.add_argument("--fail-on", choices=["info", "warning", "error"], help="exit 1 when a finding reaches this severity")
    parser.add_argument("--select", action="append", default=[], metavar="RULES",
                        help="only these rules: ids (OOM001), id prefixes (NC), slugs (oom.cuda) or categories (nccl); "
                             "comma-separated, repeatable")
    parser.add_argument("--ignore", action="append", default=[], metavar="RULES", help="leave these rules out (same forms)")
    parser.add_argument("--plot", metavar="FILE.png", help="write a timeline plot with the findings marked")
    parser.add_argument("--features", action="store_true", help="include every feature value in the JSON output")
    add_max_input_arg(parser)


def _samples(args: argparse.Namespace, output_dir: str | None) -> dict | None:
    """The samples file named by --samples, else one attach/sample wrote next to the log or in the run folder."""
    path = args.samples
    if path is None:
        from diagnose.nvml.samples import find_samples_near

        for p in args.inputs:
            if p != "-":
                found = find_samples_near(Path(p), output_dir=output_dir)
                if found:
                    path = str(found)
                    break
    if path is None:
        return None
    from diagnose.nvml.samples import load_samples

    samples = load_samples(Path(path))
    try:
        return samples.summary()
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError) as e:
        from diagnose.errors import InputError

        raise InputError(f"{path}: a malformed samples file ({type(e).__name__}: {str(e)[:100]})",
                         hint="move the file aside to analyze without it") from None


def run(args: argparse.Namespace) -> int:
    from diagnose.features.gpu import GPUS, gpu_from_flag
    from diagnose.parse.bounded import set_max_input
    from diagnose.parse.probe import load_probe
    from diagnose.pipeline import AnalyzeOptions, analyze_run

    set_max_input(args.max_input)
    if args.gpu and gpu_from_flag(args.gpu) is None:
        raise UsageError(f"unknown --gpu '{args.gpu}'", hint="known: " + ", ".join(GPUS))
    if args.plot:  # before any analysis: a plot that cannot be written fails now, not after the report
        from diagnose.render.plot import check_plot_target

        check_plot_target(args.plot)
    from diagnose.pipeline import get_rules
    from diagnose.rules import select_rules

    stdin = None
    _refuse_overwriting_inputs(args, [*args.inputs, *([args.load] if args.load else [])])
    if args.load:
        if args.inputs:
            raise UsageError("--load renders a saved record: give no log with it")
        from diagnose.record import read_record

        r, diag, quoted = read_record(args.load)  # its lines travel in it: no file it names is opened
    else:
        if not args.inputs:
            raise UsageError("nothing to analyze", hint="give a log, an output dir, - for stdin, or --load RECORD.json")
        rules = select_rules(get_rules(args.param), args.select, args.ignore)
        grouping = None
        if len(args.inputs) > 1:
            from diagnose.parse.relate import group_inputs

            grouping = group_inputs(args.inputs)
        if grouping is not None and len(grouping.groups) > 1:
            return _apart(args, grouping, rules)
        r, stdin = read_inputs(args.inputs)
        load_probe(r, args.inputs)  # swiftdoc probe files beside the run (docs/probe.md), when there are any
        diag = analyze_run(r, samples=_samples(args, r.output_dir),
                           options=AnalyzeOptions(gpu=args.gpu, cpu_cores=args.cpu_cores, params=args.param), rules=rules)
    _refuse_overwriting_inputs(args, [*args.inputs, *(r.sources or []), *([args.load] if args.load else [])])
    plot_run, plot_diag = r, diag
    r, diag = redact(r), redact(diag)  # what is written from here on is shareable: no tokens, keys or passwords
    if not args.load:
        quoted = quoted_lines(r, diag, stdin)
    if args.save:
        from diagnose.record import save_record

        save_record(diag, r, args.save, quoted)
    if args.format == "json":
        from diagnose.render.analysis_json import diagnosis_json

        json.dump(diagnosis_json(diag, r, features=args.features), sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")
    elif args.format == "markdown":
        from diagnose.render.analysis_markdown import diagnosis_markdown

        sys.stdout.write(diagnosis_markdown(diag, r, quoted, gpu=args.gpu))
    else:
        from diagnose.render.analysis_console import print_diagnosis

        print_diagnosis(diag, r, verbose=args.verbose)
    if args.plot:
        from diagnose.render.plot import plot_timeline

        plot_timeline(plot_run, plot_diag, args.plot)
    if args.fail_on and any(_SEV[f.severity] >= _SEV[args.fail_on] for f in diag.findings):
        return 1
    return 0


def _refuse_overwriting_inputs(args: argparse.Namespace, inputs: list[str]) -> None:
    """--save and --plot write files: never one this analysis read (`analyze x.log --save x.log`)."""
    import os

    for opt, out in (("--save", args.save), ("--plot", args.plot)):
        if not out or not os.path.exists(out):
            continue
        for src in inputs:
            try:
                same = src not in ("-", "<stdin>") and os.path.samefile(out, src)
            except OSError:
                same = False
            if same:
                raise UsageError(f"{opt} {out}: that is an input of this analysis; it would be overwritten",
                                 hint=f"give {opt} a new file name")


def _apart(args: argparse.Namespace, grouping, rules) -> int:
    """Unrelated runs given together: one analysis per run, in the input order, each said apart."""
    from diagnose.parse import parse_run
    from diagnose.parse.probe import load_probe
    from diagnose.pipeline import AnalyzeOptions, analyze_run

    n = len(grouping.groups)
    if args.save or args.plot or args.load:
        raise UsageError(f"these inputs are {n} unrelated runs ({grouping.reasons[0]}): --save and --plot keep one run",
                         hint="give one run's captures at a time")
    stdin = read_stdin() if "-" in args.inputs else None
    done = []
    for i, paths in enumerate(grouping.groups):
        r = parse_run(paths, stdin=stdin if "-" in paths else None)
        load_probe(r, paths)
        one = argparse.Namespace(**{**vars(args), "inputs": paths})
        diag = analyze_run(r, samples=_samples(one, r.output_dir),
                           options=AnalyzeOptions(gpu=args.gpu, cpu_cores=args.cpu_cores, params=args.param), rules=rules)
        done.append((paths, grouping.reasons[i - 1] if i else None, redact(r), redact(diag)))
    head = f"{len(args.inputs)} inputs, {n} unrelated runs ({'; '.join(grouping.reasons)}): each is analysed apart"
    if args.format == "json":
        from diagnose.outputs import AnalyzeApartOut
        from diagnose.render.analysis_json import analyze_document

        doc = AnalyzeApartOut(unrelated=[{"inputs": p, "apart_because": why, "analysis": analyze_document(d, r, args.features)}
                                         for p, why, r, d in done])
        json.dump(doc.model_dump(mode="json"), sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")
    elif args.format == "markdown":
        from diagnose.render.analysis_markdown import diagnosis_markdown

        sys.stdout.write(f"> {head}\n\n")
        for i, (paths, why, r, d) in enumerate(done, 1):
            sys.stdout.write(f"# Run {i} of {n}: {', '.join(paths)}" + (f" ({why})" if why else "") + "\n\n")
            sys.stdout.write(diagnosis_markdown(d, r, quoted_lines(r, d, None), gpu=args.gpu))
    else:
        from rich.console import Console

        from diagnose.render.analysis_console import print_diagnosis

        Console(stderr=True).print(f"note: {head}", style="yellow", highlight=False)
        for i, (paths, why, r, d) in enumerate(done, 1):
            Console().rule(f"run {i} of {n}: {', '.join(paths)}", style="dim")
            print_diagnosis(d, r, verbose=args.verbose)
    if args.fail_on and any(_SEV[f.severity] >= _SEV[args.fail_on] for *_x, d in done for f in d.findings):
        return 1
    return 0
