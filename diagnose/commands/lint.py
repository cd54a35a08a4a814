"""`swiftdoc lint SCRIPT [--swift-version V]`: what the job's ms-swift version will reject or ignore.

Reports, with the line: flags the version rejects (renamed ones with their
replacement), flags that only match by prefix, values outside the flag's
choices, combinations ms-swift refuses or silently ignores, and script problems
(broken `\\` continuations, CRLF endings, variables set but not exported).  A
YAML/JSON config file can be linted directly.  `--fix` rewrites what has a fix,
like `patch --write` (atomic, backup kept, every other byte preserved); fixes
that change training (NPROC_PER_NODE for idle GPUs, --quant_method) need
`--unsafe-fixes` as well, the way ruff separates safe and unsafe fixes.

Exit codes: 0 no error left; 1 errors remain; 2 bad input.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HELP = "check a launch script's flags against its ms-swift version"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("script", help="the launch script (or a 4.x YAML/JSON config file)")
    parser.add_argument("--swift-version", metavar="V", help="ms-swift version to check against (default: from --log, "
                                                             "else the installed one, else the newest 4.x)")
    parser.add_argument("--log", action="append", default=[], metavar="PATH", help="take the version from this log")
    parser.add_argument("--fix", action="store_true", help="rewrite what has a safe fix (a backup is kept)")
    parser.add_argument("--unsafe-fixes", action="store_true",
                        help="with --fix, also apply fixes that change training (labelled 'changes training')")
    parser.add_argument("--line", type=int, help="lint the swift command on this line (scripts with several)")
    parser.add_argument("--backup-suffix", default=".bak")
    parser.add_argument("--format", choices=["text", "json"], default="text")
    parser.add_argument("--no-swift-check", action="store_true",
                        help="skip validating with the installed ms-swift's parser")


def run(args: argparse.Namespace) -> int:
    from diagnose.patch.cli_common import choose_version, swift_check, write_atomic
    from diagnose.patch.edit import UnsafeEdit, edits_for
    from diagnose.patch.launch import read_launch
    from diagnose.patch.render import problems_text, unified
    from diagnose.patch.source import plan_for_launch, read_script

    run_ = None
    if args.log:
        from diagnose.parse import parse_run

        run_ = parse_run(args.log)
    version, how = choose_version(args.swift_version, run_)
    sf = read_script(args.script)
    is_config = sf.path.suffix.lower() in (".yaml", ".yml", ".json")
    if is_config:
        _refuse_foreign_config(sf)
    text = f"swift sft {sf.path.name}\n" if is_config else sf.text
    launch = read_launch(text, base_dir=sf.path.parent, select_line=None if is_config else args.line)
    effects = ("safe", "changes-training") if args.unsafe_fixes else ("safe",)
    plan = plan_for_launch(launch, None, version, fix="warning", version_source=how, fix_effects=effects)
    name = sf.path.name
    edits = []
    if not launch.unsafe:
        edits = [e for e in edits_for(launch, plan, None if is_config else sf.path) if e.new != e.old]
        if is_config:
            edits = [e for e in edits if e.path is not None]
    written = []
    if args.fix:
        if launch.unsafe and plan.changes:
            raise UnsafeEdit("not fixed: the script cannot be edited safely (" + "; ".join(
                f"line {ln}: {why}" for ln, why in launch.unsafe) + ")", hint="fix the flags shown by hand")
        for e in edits:
            enc = sf.encoding if e.path == sf.path else "utf-8"
            written.append((e.label, write_atomic(Path(e.label), e.new, enc, args.backup_suffix)))
        remaining = [p for p in plan.problems if not p.fixed]
    else:
        remaining = list(plan.problems)
    check = swift_check(plan, not args.no_swift_check) if args.fix else _check_current(launch, plan, args)
    errors = [p for p in remaining if p.severity == "error"]
    if args.format == "json":
        out = plan.as_json()
        out["problems"] = [dict(p.model_dump(exclude_none=True), fixed=p.fixed and args.fix) for p in plan.problems]
        out["source"] = str(sf.path)
        out["diff"] = "".join(unified(e.old, e.new, Path(e.label).name) for e in edits)
        if check:
            out["swift_check"] = check
        if written:
            out["backups"] = [str(b) for _, b in written]
        json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
        sys.stdout.write("\n")
        return 1 if errors else 0
    print(f"swiftdoc lint: {sf.path} -- ms-swift {plan.version} ({how}), {plan.command.replace('_', ' ')}")
    shown = plan.model_copy(deep=True)
    if not args.fix:
        for p in shown.problems:
            p.fixed = False
    body = problems_text(shown, name)
    print(body.rstrip("\n") if body else "no problems found")
    n_err = sum(p.severity == "error" for p in plan.problems)
    n_warn = sum(p.severity == "warning" for p in plan.problems)
    n_fix = sum(1 for p in plan.problems if p.fixed)
    n_unsafe = sum(1 for p in plan.problems if p.fix and not p.fixed and p.fix_effect == "changes-training")
    more = f", {n_unsafe} more with --unsafe-fixes (they change training)" if n_unsafe else ""
    print(f"{n_err} error(s), {n_warn} warning(s); {n_fix} with an automatic fix{more}")
    if check:
        print(f"ms-swift check{'' if args.fix else ' (as written)'}: {check}")
    if args.fix:
        for label, b in written:
            print(f"fixed {label} (backup: {b})")
        if not written:
            print("nothing to fix automatically")
        if errors:
            print(f"{len(errors)} error(s) need a change by hand")
    elif edits:
        print("`--fix` would change:")
        for e in edits:
            sys.stdout.write(unified(e.old, e.new, Path(e.label).name))
    return 1 if errors else 0


def _check_current(launch, plan, args) -> str | None:
    """Without --fix: what the installed ms-swift's parser says about the command as it is."""
    if args.no_swift_check:
        return None
    from diagnose.patch.swiftcheck import check_argv

    res = check_argv(plan.command, launch.argv, plan.version)
    if res is None:
        return None
    return res.message()


# keys only a DeepSpeed config has at its top level (deepspeed/runtime/config.py, constants.py)
_DEEPSPEED_KEYS = {"zero_optimization", "train_micro_batch_size_per_gpu", "train_batch_size", "gradient_clipping",
                   "zero_allow_untested_optimizer", "wall_clock_breakdown", "steps_per_print", "activation_checkpointing"}
_ACCELERATE_KEYS = {"compute_environment", "distributed_type", "deepspeed_config", "num_machines", "mixed_precision"}


def _refuse_foreign_config(sf) -> None:
    """A DeepSpeed or accelerate config is not an ms-swift config: reading it as flags gives nonsense errors."""
    from diagnose.errors import UsageError

    data = None
    try:
        if sf.path.suffix.lower() == ".json":
            data = json.loads(sf.text)
        else:
            import yaml

            data = yaml.safe_load(sf.text)
    except Exception:  # noqa: BLE001 - unreadable configs are reported by the config reader itself
        return
    if not isinstance(data, dict):
        return
    keys = set(data)
    if len(keys & _DEEPSPEED_KEYS) >= 1 and not keys & {"model", "dataset", "tuner_type", "train_type"}:
        raise UsageError(f"{sf.path.name} is a DeepSpeed config, not a launch script or an ms-swift config",
                         hint=f"lint the script that passes it (`--deepspeed {sf.path.name}`)")
    if len(keys & _ACCELERATE_KEYS) >= 2:
        raise UsageError(f"{sf.path.name} is an accelerate config, not a launch script or an ms-swift config",
                         hint="lint the script that launches the training")
