"""`swiftdoc lint PATH... [--swift-version V]`: what the job's ms-swift version will reject or ignore.

Reports, per training command of every script (a script with `swift sft` then
`swift rlhf` is two commands, each with its own lines): flags the version
rejects (renamed ones with their replacement), flags that only match by prefix,
values outside the flag's choices, combinations ms-swift refuses or silently
ignores, and script problems (broken `\\` continuations, CRLF endings, variables
set but not exported, an argv the script does not give statically).  Bash
arrays (`ARGS=(...)`, `swift sft "${ARGS[@]}"`) are read and edited in place.
PATH is a script, a 4.x YAML/JSON config, a directory (its `*.sh`, recursively)
or `-` (stdin, read only).  Problems have stable codes (`swiftdoc.patch.lint_codes`)
and print as `file:line:col: CODE severity: message`, like ruff; `--select` /
`--ignore` take codes, names, code prefixes or groups; `--output-format` adds
`github` (workflow annotations) and `sarif`.  `--fix` rewrites what has a fix,
like `patch --write` (atomic, backup kept, every other byte preserved; a value
written as an expression is never replaced by a literal); fixes that change
training need `--unsafe-fixes` as well, the way ruff separates safe and unsafe.
Every edit of every file is planned first, then all are written or none
(`patch.safewrite`): a command that cannot be fixed safely leaves every file as it was.

Exit codes: 0 no error left (or --exit-zero); 1 errors remain; 2 bad input.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HELP = "check a launch script's flags against its ms-swift version"
SCHEMA_VERSION = 2  # 2: files -> commands, codes and columns on problems


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="launch scripts, 4.x YAML/JSON config files, directories (their *.sh) or - for stdin")
    parser.add_argument("--swift-version", metavar="V", help="ms-swift version to check against (default: from --log, "
                                                             "else the installed one, else the newest 4.x)")
    parser.add_argument("--log", action="append", default=[], metavar="PATH", help="take the version from this log")
    parser.add_argument("--fix", action="store_true", help="rewrite what has a safe fix (a backup is kept)")
    parser.add_argument("--unsafe-fixes", action="store_true",
                        help="with --fix, also apply fixes that change training (labelled 'changes training')")
    parser.add_argument("--line", type=int, help="lint only the swift command on this line")
    parser.add_argument("--backup-suffix", default=".bak")
    parser.add_argument("--force", action="store_true", help="with --fix, also write read-only files (mode kept)")
    parser.add_argument("--output-format", "--format", dest="format", default="text",
                        choices=["text", "json", "github", "sarif"])
    parser.add_argument("--select", action="append", default=[], metavar="CODES",
                        help="only these codes, names, code prefixes or groups (comma-separated, repeatable)")
    parser.add_argument("--ignore", action="append", default=[], metavar="CODES", help="leave these out (same forms)")
    parser.add_argument("--exit-zero", action="store_true", help="exit 0 even when errors remain")
    parser.add_argument("--no-swift-check", action="store_true",
                        help="skip validating with the installed ms-swift's parser")


@dataclass
class CommandResult:
    line: int | None
    plan: Any
    launch: Any
    problems: list[dict[str, Any]]
    diff: str = ""
    check: str | None = None


@dataclass
class FileResult:
    path: str
    version: str
    how: str
    commands: list[CommandResult] = field(default_factory=list)
    backups: list[str] = field(default_factory=list)  # one per file written (the script, a config beside it)
    pending: list[tuple[Path, str, str]] = field(default_factory=list)  # --fix: (path, new text, encoding), unwritten


def _tokens(values: list[str]) -> list[str]:
    return [t.strip() for v in values for t in v.split(",") if t.strip()]


def run(args: argparse.Namespace) -> int:
    from diagnose.errors import UsageError
    from diagnose.patch.cli_common import choose_version
    from diagnose.patch.lint_codes import GROUPS, known_token

    select, ignore = _tokens(args.select), _tokens(args.ignore)
    args.select_t, args.ignore_t = select, ignore
    for t in select + ignore:
        if not known_token(t):
            raise UsageError(f"unknown code {t!r} in --select/--ignore",
                             hint="codes look like SW002 or SH001; names like renamed-flag; groups: " + ", ".join(GROUPS))
    run_ = None
    if args.log:
        from diagnose.parse import parse_run

        run_ = parse_run(args.log)
    version, how = choose_version(args.swift_version, run_)
    files = _collect(args.paths, args.fix)
    results = [_lint_file(name, text, version, how, args, select, ignore) for name, text in files]
    if args.fix:
        _write(results, args)
    return _report(results, args)


def _write(results: list[FileResult], args: argparse.Namespace) -> None:
    """--fix: every file's edits were planned (an unsafe one raised before this); now all are written, or none."""
    from diagnose.patch.safewrite import write_files

    writes = [w for f in results for w in f.pending]
    backups = iter(write_files(writes, args.backup_suffix, force=args.force))
    for f in results:
        f.backups = [str(next(backups)) for _ in f.pending]
        f.pending = []


def _collect(paths: list[str], fix: bool) -> list[tuple[str, str | None]]:
    """(display path, text for stdin else None) for every script to lint."""
    from diagnose.errors import InputError, UsageError

    out: list[tuple[str, str | None]] = []
    for p in paths:
        if p == "-":
            if fix:
                raise UsageError("--fix cannot rewrite standard input", hint="give the script's path")
            from diagnose.parse.sources import read_text_stream

            out.append(("<stdin>", read_text_stream(sys.stdin.buffer, "<stdin>").decode("utf-8", "replace")))
            continue
        path = Path(p)
        if path.is_dir():
            found = sorted(x for x in path.rglob("*.sh") if x.is_file())
            if not found:
                raise InputError(f"{p}: no *.sh scripts in this directory")
            out += [(str(x), None) for x in found]
        elif not path.exists():
            raise InputError(f"{p}: no such file or directory")
        else:
            out.append((str(path), None))
    return out


def _lint_file(name: str, text: str | None, version: str, how: str, args: argparse.Namespace,
               select: list[str], ignore: list[str]) -> FileResult:
    from diagnose.patch.launch import training_command_lines
    from diagnose.patch.source import read_script

    res = FileResult(name, version, how)
    if text is None:
        sf = read_script(name)
        text, base, encoding, spath = sf.text, sf.path.parent, sf.encoding, sf.path
        is_config = sf.path.suffix.lower() in (".yaml", ".yml", ".json")
        if is_config:
            _refuse_foreign_config(sf)
    else:
        base, encoding, spath, is_config = Path.cwd(), "utf-8", None, False
    original = text
    if is_config:
        lines: list[int | None] = [None]
    elif args.line is not None:
        lines = [args.line]
    else:
        lines = list(training_command_lines(text)) or [None]  # none: read_launch says why (a clear error)
    # bottom-up: a fix to a later command never moves the lines of an earlier one
    for ln in sorted(lines, key=lambda x: -(x or 0)):
        out = _lint_command(text, ln, is_config, base, spath, version, how, args)
        if args.fix and out.new_text is not None:
            text = out.new_text
        res.commands.insert(0, out.result)
        res.pending += out.writes
    for cr in res.commands:
        cr.problems = [p for p in cr.problems if _kept(p["code"], select, ignore)]
    if args.fix and text != original and spath is not None:
        res.pending.insert(0, (spath, text, encoding))
    if res.commands:
        res.version = res.commands[0].plan.version  # the flag table used, not the spec asked for
    return res


def _kept(code: str, select: list[str], ignore: list[str]) -> bool:
    from diagnose.patch.lint_codes import select_matches

    if select and not any(select_matches(code, t) for t in select):
        return False
    return not any(select_matches(code, t) for t in ignore)


@dataclass
class _Out:
    result: CommandResult
    new_text: str | None
    writes: list[tuple[Path, str, str]] = field(default_factory=list)  # config files beside the script, unwritten


def _lint_command(text: str, select_line: int | None, is_config: bool, base: Path, spath: Path | None, version: str,
                  how: str, args: argparse.Namespace) -> _Out:
    from diagnose.patch.cli_common import swift_check
    from diagnose.patch.edit import UnsafeEdit, edits_for
    from diagnose.patch.launch import read_launch
    from diagnose.patch.lint_codes import code_of
    from diagnose.patch.render import unified
    from diagnose.patch.source import plan_for_launch

    src_text = f"swift sft {spath.name}\n" if is_config and spath is not None else text
    launch = read_launch(src_text, base_dir=base, select_line=select_line)
    effects = ("safe", "changes-training") if args.unsafe_fixes else ("safe",)
    plan = plan_for_launch(launch, None, version, fix="warning", version_source=how, fix_effects=effects,
                           fix_codes=lambda slug: _kept(code_of(slug)[0], args.select_t, args.ignore_t))
    edits = []
    unsafe_why = None
    if not launch.unsafe:
        try:
            edits = [e for e in edits_for(launch, plan, None if is_config else spath) if e.new != e.old]
        except UnsafeEdit as e:
            unsafe_why = str(e)
        if is_config:
            edits = [e for e in edits if e.path is not None]
    new_text = None
    writes: list[tuple[Path, str, str]] = []
    if args.fix:
        if (launch.unsafe or unsafe_why) and plan.changes:
            why = unsafe_why or "; ".join(f"line {ln}: {w}" for ln, w in launch.unsafe)
            raise UnsafeEdit(f"not fixed: the script cannot be edited safely ({why})", hint="fix the flags shown by hand")
        for e in edits:
            if e.path is not None and (spath is None or Path(e.path) != spath):  # a config file beside the script
                writes.append((Path(e.path), e.new, "utf-8"))
            elif is_config and spath is not None:
                writes.append((spath, e.new, "utf-8"))
            else:
                new_text = e.new
    check = swift_check(plan, not args.no_swift_check) if args.fix else _check_current(launch, plan, args)
    problems = []
    for p in plan.problems:
        code, cname, group = code_of(p.code)
        d = p.model_dump(exclude_none=True)
        d.update(code=code, name=cname, group=group, col=_column(launch, p, src_text), fixed=bool(p.fixed and args.fix))
        problems.append(d)
    if unsafe_why:
        problems.append({"line": launch.line, "col": 1, "severity": "warning", "code": code_of("unsafe")[0],
                         "name": code_of("unsafe")[1], "group": "script", "fixed": False,
                         "message": f"not fixed automatically: {unsafe_why}"})
    diff = "".join(unified(e.old, e.new, Path(e.label).name) for e in edits)
    cr = CommandResult(launch.line if not is_config else None, plan, launch, problems, diff, check)
    return _Out(cr, new_text, writes)


def _column(launch: Any, p: Any, text: str) -> int:
    """1-based column of the problem's flag on its line (1 when the problem is about the line or the script)."""
    if not p.line or not p.flag or p.file:
        return 1
    for src in launch.sources:
        w = src.word
        if w is None or w.line != p.line:
            continue
        if w.value == p.flag or w.value.startswith(p.flag + "="):
            return w.start - (text.rfind("\n", 0, w.start) + 1) + 1
    return 1


def _report(results: list[FileResult], args: argparse.Namespace) -> int:
    from diagnose.patch.lint_codes import CODES
    from diagnose.redact import redact, redact_text

    problems = [(f, c, p) for f in results for c in f.commands for p in c.problems]
    remaining = [p for _, _, p in problems if not p.get("fixed")]
    errors = [p for p in remaining if p["severity"] == "error"]
    rc = 1 if errors and not args.exit_zero else 0
    if args.format == "json":
        from diagnose.outputs import LintOut

        out = LintOut.model_validate({"schema_version": SCHEMA_VERSION, "files": [_file_json(f, args) for f in results],
                                      "summary": _summary(results, args)}).model_dump(mode="json")
        json.dump(redact(out), sys.stdout, ensure_ascii=False, indent=1)  # CI output is shared: no secrets
        sys.stdout.write("\n")
        return rc
    if args.format == "github":
        level = {"error": "error", "warning": "warning", "info": "notice"}
        for f, _c, p in problems:
            if p.get("fixed"):
                continue
            msg = redact_text(p["message"]).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
            loc = f"file={f.path}" + (f",line={p['line']},col={p.get('col', 1)}" if p.get("line") else "")
            print(f"::{level[p['severity']]} {loc},title={p['code']} {p['name']}::{msg}")
        return rc
    if args.format == "sarif":
        json.dump(redact(_sarif(results, CODES)), sys.stdout, ensure_ascii=False, indent=1)
        sys.stdout.write("\n")
        return rc
    for f in results:
        for c in f.commands:
            where = f" (line {c.line})" if c.line else ""
            print(f"swiftdoc lint: {f.path}{where} -- ms-swift {c.plan.version} ({f.how}), "
                  f"{c.plan.command.replace('_', ' ')}")
            shown = [p for p in c.problems if not (p.get("fixed") and not args.fix)]
            for p in shown:
                print(_line(f.path, p, args.fix))
            if not c.problems:
                print("no problems found")
            if c.check:
                print(f"ms-swift check{'' if args.fix else ' (as written)'}: {c.check}")
            if not args.fix and c.diff and any(p.get("fix") for p in c.problems):
                print("`--fix` would change:")
                sys.stdout.write(c.diff)
        if args.fix:
            for b in f.backups:
                print(f"fixed {b[: -len(args.backup_suffix)] if b.endswith(args.backup_suffix) else f.path} (backup: {b})")
            if not f.backups:
                print(f"{f.path}: nothing to fix automatically")
    s = _summary(results, args)
    more = f", {s['unsafe_fixes']} more with --unsafe-fixes (they change training)" if s["unsafe_fixes"] else ""
    print(f"{s['errors']} error(s), {s['warnings']} warning(s) in {s['commands']} command(s) of {s['files']} file(s); "
          f"{s['fixable']} with an automatic fix{more}")
    if args.fix and errors:
        print(f"{len(errors)} error(s) need a change by hand")
    return rc


def _line(path: str, p: dict[str, Any], fix: bool) -> str:
    loc = f"{p.get('file') or path}:{p['line']}:{p.get('col', 1)}" if p.get("line") else (p.get("file") or path)
    tail = ""
    if p.get("fix"):
        label = " (changes training)" if p.get("fix_effect") == "changes-training" else ""
        tail = f" [fixed{label}: {p['fix']}]" if (p.get("fixed") and fix) else f" [fix{label}: {p['fix']}]"
    return f"{loc}: {p['code']} {p['severity']}: {p['message']}{tail}"


def _summary(results: list[FileResult], args: argparse.Namespace) -> dict[str, int]:
    ps = [p for f in results for c in f.commands for p in c.problems]
    left = [p for p in ps if not (p.get("fixed") and args.fix)]
    return {"files": len(results), "commands": sum(len(f.commands) for f in results),
            "errors": sum(p["severity"] == "error" for p in left), "warnings": sum(p["severity"] == "warning" for p in left),
            "fixable": sum(1 for p in ps if p.get("fix") and (p.get("fix_effect") != "changes-training" or args.unsafe_fixes)),
            "unsafe_fixes": sum(1 for p in ps if p.get("fix") and p.get("fix_effect") == "changes-training"
                                and not args.unsafe_fixes)}


def _file_json(f: FileResult, args: argparse.Namespace) -> dict[str, Any]:
    cmds = []
    for c in f.commands:
        d = c.plan.as_json()
        d["line"] = c.line
        d["problems"] = c.problems
        d["diff"] = c.diff
        if c.check:
            d["swift_check"] = c.check
        cmds.append(d)
    out: dict[str, Any] = {"source": f.path, "version": f.version, "version_source": f.how, "commands": cmds,
                           "problems": [p for c in f.commands for p in c.problems]}
    if f.backups:
        out["backups"] = list(f.backups)
    return out


def _sarif(results: list[FileResult], codes: dict) -> dict[str, Any]:
    from diagnose import __version__

    rules = [{"id": c, "name": n, "properties": {"group": g}} for c, n, g in sorted(codes.values())]
    level = {"error": "error", "warning": "warning", "info": "note"}
    res = []
    for f in results:
        for c in f.commands:
            for p in c.problems:
                if p.get("fixed"):
                    continue
                loc: dict[str, Any] = {"artifactLocation": {"uri": p.get("file") or f.path}}
                if p.get("line"):
                    loc["region"] = {"startLine": p["line"], "startColumn": p.get("col", 1)}
                res.append({"ruleId": p["code"], "level": level[p["severity"]], "message": {"text": p["message"]},
                            "locations": [{"physicalLocation": loc}]})
    return {"$schema": "https://json.schemastore.org/sarif-2.1.0.json", "version": "2.1.0",
            "runs": [{"tool": {"driver": {"name": "swiftdoc", "version": __version__, "rules": rules}}, "results": res}]}


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
    from diagnose.parse.bounded import check_expanded, check_nesting

    check_nesting(sf.text, str(sf.path))
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
    check_expanded(data, str(sf.path))  # a YAML alias bomb: refused before anything writes its values out
    keys = set(data)
    if len(keys & _DEEPSPEED_KEYS) >= 1 and not keys & {"model", "dataset", "tuner_type", "train_type"}:
        raise UsageError(f"{sf.path.name} is a DeepSpeed config, not a launch script or an ms-swift config",
                         hint=f"lint the script that passes it (`--deepspeed {sf.path.name}`)")
    if len(keys & _ACCELERATE_KEYS) >= 2:
        raise UsageError(f"{sf.path.name} is an accelerate config, not a launch script or an ms-swift config",
                         hint="lint the script that launches the training")
