"""`swiftdoc patch [SCRIPT] --log LOG`: the diagnosis as the exact change to the launch command.

Sources: a launch script (edited in place with `--write`), or, without one, the
command ms-swift logged (`run sh:` line, args dump, args.json).  Changes come
from the rules that fire on `--log` (safe and changes-training remedies; advice
is printed, never applied; `--only-safe` keeps the safe ones) and from explicit
`--set FLAG=VALUE`, `--env VAR=VALUE`, `--remove FLAG`.  Flags the version
rejects are fixed on the way.  Output: the flag diff (with the finding and label
of every change), problems, and the unified diff of the script; `--format json`
gives {changes, argv, env, problems, dropped, advice, ...}.

Exit codes: 0 planned (or written); 2 bad input (unreadable script, no swift
command, invalid explicit value, unsafe edit with --write): nothing is written.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from diagnose.errors import UsageError

HELP = "turn the diagnosis into a flag diff for the launch script"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("script", nargs="?", help="the launch script (train.sh); without it the logged command is patched")
    parser.add_argument("--log", action="append", default=[], metavar="PATH",
                        help="the run's log / logging.jsonl / output dir: version, diagnosis and the logged command")
    parser.add_argument("--swift-version", metavar="V", help="ms-swift version the job uses (default: from the log)")
    parser.add_argument("--set", action="append", default=[], metavar="FLAG=VALUE", help="an explicit flag change")
    parser.add_argument("--env", action="append", default=[], metavar="VAR=VALUE", help="an explicit env change")
    parser.add_argument("--remove", action="append", default=[], metavar="FLAG", help="remove a flag")
    parser.add_argument("--only-safe", action="store_true", help="apply only changes that do not alter training")
    parser.add_argument("--probe", action="store_true", help="also add swiftdoc's in-trainer probe to the command "
                        "(per-rank step time and data wait; docs/probe.md)")
    parser.add_argument("--no-keep-global", action="store_true",
                        help="when the batch goes down, do not raise gradient accumulation to keep the global batch")
    parser.add_argument("--cpu-cores", type=int, help="CPU cores of the training machine (worker suggestions and limits)")
    parser.add_argument("--gpu", help="GPU model, as for analyze")
    parser.add_argument("--param", action="append", default=[], metavar="RULE.param=VALUE", help="rule threshold override")
    parser.add_argument("--line", type=int, help="patch the swift command on this line (scripts with several)")
    parser.add_argument("--write", action="store_true", help="apply the change to the script (a backup is kept)")
    parser.add_argument("--backup-suffix", default=".bak", help="backup file suffix (default .bak)")
    parser.add_argument("--force", action="store_true", help="with --write, also write read-only files (mode kept)")
    parser.add_argument("--format", choices=["text", "json"], default="text")
    parser.add_argument("--no-swift-check", action="store_true",
                        help="skip validating the new argv with the installed ms-swift's parser")


def run(args: argparse.Namespace) -> int:
    from diagnose.flags import table_for
    from diagnose.patch.cli_common import choose_version, swift_check
    from diagnose.patch.plan import parse_assignments

    if not args.script and not args.log:
        raise UsageError("nothing to patch", hint="swiftdoc patch train.sh --log train.log (or --log alone)")
    if args.cpu_cores is not None and args.cpu_cores < 1:
        raise UsageError("--cpu-cores must be at least 1")
    explicit = parse_assignments(args.set, "set") + parse_assignments(args.env, "env") + \
        parse_assignments(args.remove, "remove")
    run_ = diag = launch = sf = None
    if args.log:
        from diagnose.parse import parse_run

        run_ = parse_run(args.log)
    version, how = choose_version(args.swift_version, run_)
    table = table_for(version)
    if args.script:
        from diagnose.patch.launch import read_launch
        from diagnose.patch.source import read_script

        sf = read_script(args.script)
        launch = read_launch(sf.text, base_dir=sf.path.parent, select_line=args.line)
    if args.probe:  # the probe's flags, merged into the command's own plugin/callback lists
        from diagnose.patch.probe_flags import probe_requests
        from diagnose.patch.source import launch_from_run

        explicit += probe_requests(launch.argv if launch is not None else launch_from_run(run_, table).argv, version)
    if run_ is not None:
        from diagnose.pipeline import AnalyzeOptions, analyze_run

        opts = AnalyzeOptions(gpu=args.gpu, cpu_cores=args.cpu_cores, params=args.param)
        if launch is not None:  # remedies are resolved against the script that will run, as analyze does against the log
            from diagnose.patch.source import script_values

            opts.script, opts.script_lines, world = script_values(launch, version)
            opts.script_label = sf.path.name
            if run_.world_size is None and world:
                run_.world_size = world
        diag = analyze_run(run_, options=opts)
    kw = dict(cpu_cores=args.cpu_cores, only_safe=args.only_safe, keep_global=not args.no_keep_global,
              explicit=explicit, version_source=how)
    if run_ is not None:
        from diagnose.patch.source import effective_from_run

        kw["effective"] = effective_from_run(run_)
        kw["world_size"] = run_.world_size
    edits = []
    unsafe: list[tuple[int, str]] = []
    if args.script:
        from diagnose.patch.edit import edits_for
        from diagnose.patch.source import plan_for_launch

        plan = plan_for_launch(launch, diag, version, **kw)
        unsafe = launch.unsafe
        if not unsafe:
            edits = edits_for(launch, plan, sf.path)
        label, encoding = str(sf.path), sf.encoding
        new_command = None
    else:
        from diagnose.patch.plan import plan_patch
        from diagnose.patch.source import launch_from_run

        rc = launch_from_run(run_, table)
        plan = plan_patch(rc.argv, rc.env, diag, version, command=rc.command, launcher=rc.launcher, **kw)
        plan.assumptions = rc.assumptions + plan.assumptions
        label, encoding = "the logged command", "utf-8"
        new_command = _command_line(plan, rc)
    check = swift_check(plan, not args.no_swift_check)
    changed = [e for e in edits if e.new != e.old]
    if args.format == "json":
        out = plan.as_json()
        out["source"] = label
        out["diff"] = "".join(_unified(e) for e in changed)
        out["edited"] = bool(changed) and args.write
        out["unsafe"] = [{"line": ln, "reason": why} for ln, why in unsafe]
        if check:
            out["swift_check"] = check
        if new_command:
            out["command_line"] = new_command
    if args.write:
        if not args.script:
            raise UsageError("--write needs the launch script", hint="swiftdoc patch train.sh --log train.log --write")
        if unsafe:
            if args.format == "text":
                _print_text(plan, label, changed, unsafe, check, None, spec=version, clue=run_.version_clue if run_ is not None else None)
            from diagnose.patch.edit import UnsafeEdit

            raise UnsafeEdit("not written: the script cannot be edited safely ("
                             + "; ".join(f"line {ln}: {why}" for ln, why in unsafe) + ")",
                             hint="make the change shown in the flag diff by hand")
        from diagnose.patch.safewrite import write_files

        # every file planned first, then all written or none (a config beside the script, the script itself)
        written = write_files([(Path(e.label), e.new, encoding if e.path == Path(args.script) else "utf-8")
                               for e in changed], args.backup_suffix, force=args.force)
        backups = [(e.label, b) for e, b in zip(changed, written)]
        if args.format == "json":
            out["backups"] = [str(b) for _, b in backups]
            json.dump(_typed(out), sys.stdout, ensure_ascii=False, indent=1)
            sys.stdout.write("\n")
            return 0
        _print_text(plan, label, changed, unsafe, check, None, show_diff=False, spec=version, clue=run_.version_clue if run_ is not None else None)
        if backups:
            for name, b in backups:
                print(f"wrote {name} (backup: {b})")
        else:
            print("nothing to change: the script already has every change")
        return 0
    if args.format == "json":
        json.dump(_typed(out), sys.stdout, ensure_ascii=False, indent=1)
        sys.stdout.write("\n")
        return 0
    _print_text(plan, label, changed, unsafe, check, new_command, spec=version, clue=run_.version_clue if run_ is not None else None)
    if changed:
        print(f"Run again with --write to apply it (the original is kept as {args.script}{args.backup_suffix}).")
    return 0


def _typed(out: dict) -> dict:
    """The JSON document, validated by its model (docs/schemas/patch.schema.json)."""
    from diagnose.outputs import PatchOut
    from diagnose.render.run_json import jsonable

    return PatchOut.model_validate(jsonable({"schema_version": 2, **out})).model_dump(mode="json")


def _unified(e) -> str:
    from diagnose.patch.render import unified

    return unified(e.old, e.new, Path(e.label).name if e.path else e.label)


def _command_line(plan, rc) -> str:
    env = [f"{k}={shlex.quote(v)}" for k, v in plan.env.items() if k in ("NPROC_PER_NODE", "NNODES") or
           any(c.env == k for c in plan.changes)]
    prog = "megatron" if plan.command.startswith("megatron") else "swift"
    sub = plan.command.replace("megatron_", "")
    return " ".join([*env, prog, sub, *(shlex.quote(t) for t in plan.argv)])


def _print_text(plan, label, changed, unsafe, check, new_command, show_diff: bool = True, spec: str | None = None,
                clue: str | None = None) -> None:
    from diagnose.parse.versions import version_words
    from diagnose.patch.render import flag_diff, other_sections, problems_text

    prefix = f"detected in the log ({clue})" if clue else None
    if prefix and plan.version_source.startswith(prefix):  # the one wording of a detected version (parse.versions)
        extra = plan.version_source[len(prefix):].lstrip(": ")
        words = version_words(spec or plan.version, clue, plan.version) + (f"; {extra}" if extra else "")
    else:
        words = f"ms-swift {plan.version} ({plan.version_source})"
    print(f"swiftdoc patch: {label} -- {words}, "
          f"{plan.command.replace('_', ' ')}")
    print()
    if plan.changes:
        print("Flag diff:")
        sys.stdout.write(flag_diff(plan))
    else:
        print("Flag diff: nothing to change.")
    probs = problems_text(plan, Path(label).name if label != "the logged command" else "argv")
    if probs:
        print()
        print("Problems:")
        sys.stdout.write(probs)
    rest = other_sections(plan)
    if rest:
        print()
        sys.stdout.write(rest)
    if check:
        print()
        print(f"ms-swift check: {check}")
    if unsafe:
        print()
        print("The script is not edited automatically:")
        for ln, why in unsafe:
            print(f"  line {ln}: {why}")
        print("Make the change in the flag diff by hand.")
    if new_command:
        print()
        print("New command:")
        print(f"  {new_command}")
    if show_diff and changed:
        print()
        for e in changed:
            sys.stdout.write(_unified(e))
