"""Where the command to patch comes from: a launch script, or the log (`run sh:` line, args dump, args.json).

Contract (no writing; reading files only):
- `read_script(path) -> ScriptFile`: the bytes decoded exactly (UTF-8, else
  GB18030), or `InputError` for a missing, unreadable, empty or binary file.
- `plan_for_launch(launch, remedies, version, **kw) -> PatchPlan`: `plan_patch`
  over the script's argv and environment, with line numbers and the script-level
  problems (broken continuations, CRLF, unexported variables, unsafe spots).
- `launch_from_run(run, table) -> RunCommand`: the argv ms-swift was started
  with (the `run sh:` line; else rebuilt from the args dump / args.json: the
  fields that differ from the version's defaults), its env (NPROC_PER_NODE /
  NNODES from the torchrun line), launcher and CLI command.
- `effective_from_run(run) -> dict`: the values ms-swift used (args dump /
  args.json, `Setting args.X: Y` lines), for current values the argv omits;
  `effective_from_argv(argv, version, command)` the same from an argv alone.
  Relative remedies (halving the batch) are computed from these, so applying
  a patch twice changes nothing.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from diagnose.errors import InputError
from diagnose.models import Run
from diagnose.patch.launch import Launch
from diagnose.patch.models import PatchPlan, Problem


@dataclass
class ScriptFile:
    path: Path
    text: str
    encoding: str


def _check_text(head: bytes, p: Path) -> None:
    ctrl = sum(1 for b in head if b < 9 or 13 < b < 32 and b != 27)
    if b"\0" in head or ctrl > len(head) // 20:
        raise InputError(f"{p}: binary data, not a shell script", hint="give the .sh file that runs swift")


def read_script(path: str | Path) -> ScriptFile:
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: no such file", hint="give the launch script (train.sh), or only --log to patch the logged command")
    if p.is_dir():
        raise InputError(f"{p}: is a directory, not a launch script")
    from diagnose.parse.bounded import check_size, is_regular, read_stream

    try:
        if is_regular(p):
            check_size(p, str(p))
        with p.open("rb") as fh:  # bounded, head first: `<(...)` is read, /dev/zero refused at once
            head = fh.read(65536)
            _check_text(head, p)
            data = head + (read_stream(fh, str(p)) if len(head) == 65536 else b"")
    except OSError as e:
        raise InputError(f"{p}: cannot read it ({e.strerror})") from None
    if not data.strip():
        raise InputError(f"{p}: empty file, no swift command in it")
    for enc in ("utf-8", "gb18030"):
        try:
            return ScriptFile(p, data.decode(enc), enc)
        except UnicodeDecodeError:
            continue
    raise InputError(f"{p}: not UTF-8 or GB18030 text")


def launcher_of(launch: Launch) -> str:
    if launch.kind in ("swift", "megatron", "torchrun"):
        return launch.kind
    return "python" if launch.kind == "python" else launch.kind


def plan_for_launch(launch: Launch, remedies: Any = None, version: str = "4.x", **kw: Any) -> PatchPlan:
    from diagnose.patch.plan import plan_patch

    cfg = launch.config.name if launch.config is not None else None
    sources = [(s.line, cfg if s.where == "config" else None) for s in launch.sources]
    env = {k: d.value for k, d in launch.env.items()}
    env_lines = {k: d.line for k, d in launch.env.items() if d.line}
    plan = plan_patch(launch.argv, env, remedies, version, command=launch.subcommand, sources=sources,
                      launcher=launcher_of(launch), config_file=launch.config is not None, env_lines=env_lines, **kw)
    extra = [Problem(line=ln, message=msg, severity=sev, code=code) for ln, sev, msg, code in launch.problems]  # type: ignore[arg-type]
    extra += [Problem(line=ln, message=f"not edited automatically: {why}", severity="warning", code="unsafe")
              for ln, why in launch.unsafe]
    plan.problems = sorted(extra + plan.problems, key=lambda p: (p.line is None, p.line or 0))
    return plan


@dataclass
class RunCommand:
    argv: list[str]
    command: str
    launcher: str
    env: dict[str, str] = field(default_factory=dict)
    source: str = ""
    assumptions: list[str] = field(default_factory=list)


_DERIVED = {"output_dir", "run_name", "logging_dir", "local_rank", "ddp_backend", "hub_token", "model_dir",
            "metric_for_best_model", "greater_is_better", "accelerator_config", "optim", "bf16", "fp16", "add_version",
            "ignore_data_skip", "save_safetensors", "overwrite_output_dir"}
_VERSION_DIR = re.compile(r"/v\d+-\d{8}-\d{6}")


def _table_command(run: Run) -> str:
    c = (run.launch.command or "sft").strip().replace(" ", "_")
    if run.trainer == "ms-swift-megatron" and not c.startswith("megatron"):
        c = "megatron_" + c
    return c


def launch_from_run(run: Run, table: Any) -> RunCommand:
    cmd = _table_command(run)
    from diagnose.flags.table import normalize_command

    cmd = normalize_command(cmd)
    if not table.has_command(cmd):
        cmd = "megatron_sft" if cmd.startswith("megatron") else "sft"
    launcher = "megatron" if cmd.startswith("megatron") else "swift"
    env: dict[str, str] = {}
    if run.launch.nproc_per_node:
        env["NPROC_PER_NODE"] = str(run.launch.nproc_per_node)
    if run.launch.nnodes:
        env["NNODES"] = str(run.launch.nnodes)
    if run.launch.argv:
        return RunCommand(list(run.launch.argv), cmd, launcher, env, "the `run sh:` line of the log")
    flags = {k: v for k, v in run.launch.flags.items() if run.launch.flag_sources.get(k) != "argv"}
    if not flags:
        raise InputError("the log has no `run sh:` line, args dump or args.json to rebuild the command from",
                         hint="give the launch script: swiftdoc patch train.sh --log train.log")
    specs = table.specs(cmd)
    argv: list[str] = []
    for k, v in flags.items():
        s = specs.get(k)
        if s is None or k in _DERIVED or v is None or v == [] or v == {} or v == "":
            continue
        if s.default_expr is None and s.default == v:
            continue
        if isinstance(v, str) and _VERSION_DIR.search(v):
            continue
        if isinstance(v, bool):
            vals = ["true" if v else "false"]
        elif isinstance(v, list):
            vals = [json.dumps(x) if isinstance(x, (dict, list)) else str(x) for x in v]
        elif isinstance(v, dict):
            vals = [json.dumps(v)]
        else:
            vals = [str(v)]
        if table.validate_value(cmd, f"--{k}", vals if (s.type == "list" or s.nargs == "+") else vals[0]):
            continue
        argv += [f"--{k}", *vals]
    srcs = sorted({run.launch.flag_sources.get(k, "args") for k in flags})
    return RunCommand(argv, cmd, launcher, env, "the arguments ms-swift logged (" + ", ".join(srcs) + ")",
                      [f"no `run sh:` line: the command was rebuilt from {', '.join(srcs)} (flags that differ from "
                       "ms-swift's defaults; some may be values ms-swift derived itself)"])


def effective_from_argv(argv: list[str], version: str, command: str = "sft") -> dict[str, Any]:
    """field -> value as given in an argv (the last occurrence wins): the baseline of a run whose log is not at hand."""
    from diagnose.flags import table_for
    from diagnose.patch.argv import occurrence_value, resolve_occurrences, split_argv

    table = table_for(version)
    _, occs = split_argv(argv)
    resolve_occurrences(occs, table, command)
    specs = table.specs(command)
    return {o.field: occurrence_value(o, specs.get(o.field)) for o in occs if o.field}


def script_values(launch: Launch, version: str) -> tuple[dict[str, Any], dict[str, int], int | None]:
    """The launch script's flag values (field -> value, the last occurrence wins), the line of each, and the world
    size its NPROC_PER_NODE x NNODES give: what the analysis resolves remedies against when patching a script.
    A value the script takes from a shell expansion it does not define is left out (unknown, not guessed)."""
    from diagnose.flags import table_for
    from diagnose.parse.args import typed
    from diagnose.patch.argv import occurrence_value, resolve_occurrences, split_argv

    table = table_for(version)
    cmd = launch.subcommand if table.has_command(launch.subcommand) else "sft"
    _, occs = split_argv(launch.argv)
    resolve_occurrences(occs, table, cmd)
    specs = table.specs(cmd)
    vals: dict[str, Any] = {}
    lines: dict[str, int] = {}
    for o in occs:
        if not o.field or any("$" in v or "`" in v for v in o.values):
            continue
        v = occurrence_value(o, specs.get(o.field))
        vals[o.field] = typed(v) if isinstance(v, str) else v
        src = launch.sources[o.index] if o.index < len(launch.sources) else None
        if src is not None and src.line:
            lines[o.field] = src.line
    world = None
    try:
        n = int(launch.env["NPROC_PER_NODE"].value) if "NPROC_PER_NODE" in launch.env else None
        nn = int(launch.env["NNODES"].value) if "NNODES" in launch.env else 1
        world = n * nn if n else None
    except (ValueError, TypeError):
        world = None
    return vals, lines, world


def effective_from_run(run: Run) -> dict[str, Any]:
    from diagnose.parse.args import typed

    out: dict[str, Any] = dict(run.launch.flags)
    for k, v in run.settings.items():
        out[k] = typed(v) if isinstance(v, str) else v
    return out
