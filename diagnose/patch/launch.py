"""Find the ms-swift training command in a launch script and everything that feeds it.

Contract: `read_launch(text, base_dir=None, select_line=None) -> Launch`.
Raises `InputError` when the script has no swift training command.  A `Launch`
gives the swift argv as the program will receive it (`argv`, with a 4.x
YAML/JSON config file expanded the way `swift/cli/main.py` does), the source of
every argv token (`sources`: the script word or the config key and line), the
environment the command sees (`env`: exports and assignments before it, its
inline `VAR=x` prefix, torchrun options as NPROC_PER_NODE/NNODES/...; a config
`ENV:` section), and `unsafe`: (line, reason) pairs for what an editor must not
touch (a command inside a loop, case or heredoc, several training commands,
a command built inside a string).  `problems` are script-level findings for lint
(broken continuations, CRLF endings, variables set but not exported ...).

Launchers understood: `swift sft|pt|rlhf`, `megatron sft|pt|rlhf`, `torchrun ...
<...>/swift/cli/[_megatron/]sft.py`, `python -m torch.distributed.run ...`,
`python [-m swift.cli.sft | <...>/swift/cli/sft.py]`, `deepspeed`/`accelerate
launch` with the CLI script path, behind `nohup`, `env`, `time`, `exec`, `srun`.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from diagnose.errors import InputError
from diagnose.patch.shell import Script, SimpleCommand, Word, is_assignment, lex_script

TRAINING = {"sft", "pt", "rlhf", "pretrain"}
SUBCOMMANDS = TRAINING | {"infer", "export", "deploy", "eval", "app", "web-ui", "sample", "rollout", "merge-lora"}
_SCRIPT = re.compile(r"(?:^|/)swift/cli/(?:(_megatron)/)?(\w+)\.py$")
_MODULE = re.compile(r"^swift\.cli\.(?:(_megatron)\.)?(\w+)$")
_NOT_LAUNCH = {"echo", "printf", "cat", "grep", "tee", "ls", "cd", "export", "local", "declare", "read", "test", "[",
               "[[", "if", "which", "type", "pip", "pip3", "conda", "git", "sed", "awk", "mkdir", "rm", "cp", "mv"}
_WRAPPERS = {"nohup", "time", "exec", "command", "stdbuf", "nice", "taskset", "numactl", "srun", "sudo", "env",
             "unbuffer", "setsid", "ionice"}
TORCHRUN_ENV = {"nproc_per_node": "NPROC_PER_NODE", "nnodes": "NNODES", "node_rank": "NODE_RANK",
                "master_addr": "MASTER_ADDR", "master_port": "MASTER_PORT"}


@dataclass
class EnvDef:
    name: str
    value: str
    kind: str  # export | assign | inline | torchrun | config
    line: int
    word: Word | None = None  # the NAME=value word (None for torchrun/config)
    value_word: Word | None = None  # torchrun option value word
    exported: bool = True
    standalone: bool = False  # `VAR=x` alone on its command (a shell variable)
    file: str | None = None


@dataclass
class Source:
    """Where one argv token comes from."""

    where: str  # script | config
    word: Word | None = None
    key: str | None = None  # config key
    line: int | None = None


@dataclass
class ConfigFile:
    path: Path | None
    name: str  # as written in the script
    kind: str  # yaml | json
    text: str | None
    data: dict[str, Any] | None
    key_lines: dict[str, int] = field(default_factory=dict)


@dataclass
class Launch:
    script: Script
    command: SimpleCommand
    kind: str  # swift | megatron | torchrun | python | other launcher name
    subcommand: str  # table command: sft | pt | rlhf | megatron_sft ...
    launcher_words: list[Word]
    argv_words: list[Word]
    prefix_env: list[Word]
    env: dict[str, EnvDef]
    argv: list[str]
    sources: list[Source]
    config: ConfigFile | None = None
    torchrun_opts: dict[str, tuple[Word, Word | None]] = field(default_factory=dict)
    joined: list[SimpleCommand] = field(default_factory=list)  # orphan `--flag` lines joined back (broken continuation)
    unsafe: list[tuple[int, str]] = field(default_factory=list)
    problems: list[tuple[int, str, str, str]] = field(default_factory=list)  # (line, severity, message, code slug)
    variables: dict[str, str] = field(default_factory=dict)
    line: int = 0
    end_line: int = 0
    others: list[tuple[int, str]] = field(default_factory=list)  # other swift commands (line, what)
    array_words: list[Word] = field(default_factory=list)  # "${ARGS[@]}" words expanded from a script array
    unknown_argv: list[str] = field(default_factory=list)  # argv words whose value the script does not give

    @property
    def editable(self) -> bool:
        return not self.unsafe

    @property
    def megatron(self) -> bool:
        return self.subcommand.startswith("megatron")


def _base(v: str) -> str:
    return v.rsplit("/", 1)[-1]


def detect(words: list[Word]) -> tuple[str, str, int, int] | None:
    """(kind, subcommand, index of the launcher's first word, index where the swift argv starts) or None."""
    first = 0
    while first < len(words) and is_assignment(words[first]):
        first += 1
    if first >= len(words):
        return None
    vals = [w.value for w in words]
    b0 = _base(vals[first])
    if b0 in _NOT_LAUNCH:
        return None
    if not (b0 in _WRAPPERS or b0 in ("swift", "megatron", "torchrun", "deepspeed", "accelerate")
            or b0.startswith("python") or _SCRIPT.search(vals[first])):
        return None
    for j in range(first, len(vals)):
        b = _base(vals[j])
        if b in ("swift", "megatron") and j + 1 < len(vals) and vals[j + 1] in SUBCOMMANDS:
            sub = "pt" if vals[j + 1] == "pretrain" else vals[j + 1]
            return b, ("megatron_" if b == "megatron" else "") + sub, j, j + 2
        m = _SCRIPT.search(vals[j])
        if m:
            cmd = ("megatron_" if m.group(1) else "") + m.group(2)
            return _launcher_kind(vals[first:j]), cmd, first, j + 1
        if vals[j] == "-m" and j + 1 < len(vals):
            mm = _MODULE.match(vals[j + 1])
            if mm:
                kind = _launcher_kind(vals[first:j])
                meg = "megatron_" if mm.group(1) else ""
                if mm.group(2) == "main" and j + 2 < len(vals):
                    return kind, meg + vals[j + 2], first, j + 3
                return kind, meg + mm.group(2), first, j + 2
    return None


def _launcher_kind(vals: list[str]) -> str:
    for i, v in enumerate(vals):
        b = _base(v)
        if b == "torchrun" or (v == "-m" and i + 1 < len(vals) and vals[i + 1].startswith("torch.distributed")):
            return "torchrun"
        if b in ("deepspeed", "accelerate"):
            return b
    return "python"


def _torchrun_opts(words: list[Word]) -> dict[str, tuple[Word, Word | None]]:
    out: dict[str, tuple[Word, Word | None]] = {}
    i = 0
    while i < len(words):
        v = words[i].value
        if v.startswith("--"):
            name, eq, val = v[2:].partition("=")
            key = name.replace("-", "_")
            if key in TORCHRUN_ENV:
                if eq:
                    out[key] = (words[i], None)
                elif i + 1 < len(words):
                    out[key] = (words[i], words[i + 1])
                    i += 1
        i += 1
    return out


def _find_key_lines(text: str, kind: str) -> dict[str, int]:
    lines: dict[str, int] = {}
    pat = re.compile(r'^\s*"([^"]+)"\s*:') if kind == "json" else re.compile(r"^([A-Za-z_][\w.-]*)\s*:")
    for n, ln in enumerate(text.splitlines(), 1):
        m = pat.match(ln)
        if m and m.group(1) not in lines:
            lines[m.group(1)] = n
    return lines


def load_config(name: str, base_dir: Path | None) -> ConfigFile:
    kind = "json" if name.endswith(".json") else "yaml"
    cands = []
    p = Path(name)
    if p.is_absolute():
        cands.append(p)
    else:
        if base_dir is not None:
            cands.append(base_dir / p)
        cands.append(Path.cwd() / p)
    for c in cands:
        if c.is_file():
            from diagnose.parse.bounded import check_expanded, check_nesting, read_file

            try:
                text = read_file(c, str(c)).decode("utf-8")
            except UnicodeDecodeError as e:
                raise InputError(f"{c}: cannot read the config file ({e})") from None
            check_nesting(text, str(c))
            try:
                if kind == "json":
                    data = json.loads(text)
                else:
                    import yaml

                    data = yaml.safe_load(text)
            except Exception as e:  # noqa: BLE001 - any parse error is the user's input
                raise InputError(f"{c}: not valid {kind.upper()}: {(str(e).splitlines() or [type(e).__name__])[0]}") from None
            check_expanded(data, str(c))  # aliases share one value: never write out a bomb's 10^9 of them
            if not isinstance(data, dict):
                raise InputError(f"{c}: a swift config file must be a mapping of flag: value")
            return ConfigFile(c, name, kind, text, data, _find_key_lines(text, kind))
    return ConfigFile(None, name, kind, None, None)


def config_argv(data: dict[str, Any]) -> tuple[list[str], list[str], dict[str, str]]:
    """ms-swift 4.x `parse_yaml_args`: (argv tokens, the key of each token, ENV)."""
    env = {str(k): str(v) for k, v in (data.get("ENV") or {}).items()} if isinstance(data.get("ENV"), dict) else {}
    toks: list[str] = []
    keys: list[str] = []
    for k, v in data.items():
        if k == "ENV":
            continue
        toks.append(f"--{k}")
        keys.append(k)
        if isinstance(v, list):
            vals = [str(i) for i in v]
        elif isinstance(v, dict):
            vals = [json.dumps(v, ensure_ascii=False)]
        else:
            vals = [str(v)]
        toks.extend(vals)
        keys.extend([k] * len(vals))
    return toks, keys, env


_VAR = re.compile(r"\$(?:\{([A-Za-z_]\w*)\}|([A-Za-z_]\w*))")


def expand(value: str, variables: dict[str, str]) -> str:
    def rep(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        return variables.get(name, m.group(0))

    return _VAR.sub(rep, value)


def _scan_inner(text: str) -> bool:
    return bool(re.search(r"(?:^|[\s;&|(`])(?:\S*/)?(?:swift|megatron)\s+(?:sft|pt|rlhf)\b|swift/cli/(?:_megatron/)?(?:sft|pt|rlhf)\.py|-m\s+swift\.cli\.", text))


def training_command_lines(text: str) -> list[int]:
    """First lines of every swift training command written as a plain command of the script, in order."""
    out = []
    for c in lex_script(text).commands:
        d = detect(c.words)
        if d is not None and d[1].replace("megatron_", "") in TRAINING:
            out.append(c.first_line)
    return out


def read_launch(text: str, base_dir: Path | None = None, select_line: int | None = None) -> Launch:
    script = lex_script(text)
    found: list[tuple[int, SimpleCommand, tuple[str, str, int, int]]] = []
    others: list[tuple[int, str]] = []
    for k, c in enumerate(script.commands):
        d = detect(c.words)
        if d is None:
            continue
        if d[1].replace("megatron_", "") in TRAINING:
            found.append((k, c, d))
        else:
            others.append((c.first_line, f"{' '.join(w.value for w in c.words[d[2]:d[3]])}"))
    hidden: list[tuple[int, str]] = []
    for first, last, _delim in script.heredocs:
        s, _ = script.line_span(first)
        _, e = script.line_span(last)
        if _scan_inner(text[s:e]):
            hidden.append((first, f"a swift command inside a heredoc (lines {first}-{last})"))
    for c in script.commands:
        for w in c.words:
            if w.quoted and _scan_inner(w.value):
                hidden.append((w.line, "a swift command inside a quoted string (bash -c / eval)"))
            elif w.dynamic and "$(" in w.text and _scan_inner(w.text):
                hidden.append((w.line, "a swift command inside a command substitution"))
    if select_line is not None:
        sel = [f for f in found if f[1].first_line <= select_line <= script.line_of(max(f[1].end - 1, 0))]
        if not sel:
            raise InputError(f"line {select_line}: no swift training command there",
                             hint="lines with one: " + ", ".join(str(f[1].first_line) for f in found) if found else None)
        found_sel = sel
    else:
        found_sel = found
    if not found_sel:
        if hidden:
            return _hidden_launch(script, hidden, base_dir)
        what = f" (only: {others[0][1]} on line {others[0][0]})" if others else ""
        raise InputError(f"no swift training command in the script{what}",
                         hint="expected `swift sft|pt|rlhf`, `megatron sft|pt|rlhf`, or torchrun/python on swift/cli/sft.py")
    k, cmd, d = found_sel[0]
    launch = _build(script, k, cmd, d, base_dir)
    launch.others = others
    if len(found_sel) > 1:
        lines = ", ".join(str(f[1].first_line) for f in found_sel)
        launch.unsafe.append((found_sel[1][1].first_line,
                              f"several swift training commands (lines {lines}); pass --line N to pick one"))
    for ln, why in hidden:
        launch.unsafe.append((ln, why))
    ctx = [c for c in cmd.context if c in ("loop", "case")]
    if ctx:
        launch.unsafe.append((cmd.first_line, f"the swift command runs inside a {ctx[0]} (it may run several times "
                                              "with different values)"))
    return launch


def _hidden_launch(script: Script, hidden: list[tuple[int, str]], base_dir: Path | None) -> Launch:
    """A swift command only inside a heredoc/string: read it for the flag diff, never edit it."""
    text = script.text
    for first, last, _ in script.heredocs:
        s, _ = script.line_span(first)
        _, e = script.line_span(last)
        body = text[s:e]
        if _scan_inner(body):
            inner = read_launch(body, base_dir)
            inner.unsafe = list(hidden)
            _shift(inner, first - 1)
            return inner
    for c in script.commands:
        for w in c.words:
            if w.quoted and _scan_inner(w.value):
                inner = read_launch(w.value, base_dir)
                inner.unsafe = list(hidden)
                _shift(inner, w.line - 1)
                return inner
    raise InputError("a swift command was found only inside a command substitution; it cannot be read",
                     hint="write the swift command as a plain line of the script")


def _shift(launch: Launch, off: int) -> None:
    """Line numbers of a command read from a heredoc body / string, in the outer script's terms."""
    launch.line += off
    launch.end_line += off
    for src in launch.sources:
        if src.where == "script" and src.line is not None:
            src.line += off
    for d in launch.env.values():
        if d.kind != "config":
            d.line += off
    launch.problems = [(ln + off, sev, msg, code) for ln, sev, msg, code in launch.problems]


def _build(script: Script, k: int, cmd: SimpleCommand, d: tuple[str, str, int, int], base_dir: Path | None) -> Launch:
    kind, sub, lstart, astart = d
    words = cmd.words
    prefix = [w for w in words[:lstart] if is_assignment(w)]
    # `env A=1 swift sft`: assignments after `env`
    for w in words[:lstart]:
        if w not in prefix and is_assignment(w):
            prefix.append(w)
    launcher = words[lstart:astart]
    argv_words = list(words[astart:])
    launch = Launch(script=script, command=cmd, kind=kind, subcommand=sub, launcher_words=launcher,
                    argv_words=argv_words, prefix_env=prefix, env={}, argv=[], sources=[], line=cmd.first_line)
    # orphan `--flag` commands after a broken continuation belong to this command in intent
    j = k + 1
    prev = cmd
    while j < len(script.commands):
        nxt = script.commands[j]
        if not nxt.words or not nxt.words[0].value.startswith("--") or nxt.context != cmd.context:
            break
        if prev.separator not in ("\n", "comment"):
            break
        reason = _break_reason(script, prev)
        launch.problems.append((nxt.first_line, "error",
                                f"the swift command ends on line {script.line_of(prev.end - 1)} ({reason}); lines "
                                f"{nxt.first_line}-{script.line_of(nxt.end - 1)} run as a separate command, so "
                                f"ms-swift never sees {nxt.words[0].value} and the flags after it", "broken-continuation"))
        launch.joined.append(nxt)
        argv_words.extend(nxt.words)
        prev = nxt
        j += 1
    last_cmd = launch.joined[-1] if launch.joined else cmd
    launch.end_line = script.line_of(max(last_cmd.end - 1, 0))
    # escaped blanks (`\ ` + comment) become stray arguments
    broken_lasts = {id(c.words[-1]) for c in [cmd, *launch.joined[:-1]] if c.words} if launch.joined else set()
    for w in argv_words:
        if w.escaped_space_only and id(w) not in broken_lasts:
            launch.problems.append((w.line, "error", "`\\ ` followed by a blank passes a space as an argument and "
                                                     "does not continue the line (the comment after it ends the command)",
                                      "escaped-blank"))
    # variables and environment visible before the command
    variables: dict[str, str] = {}
    env: dict[str, EnvDef] = {}
    allexport = False
    for c in script.commands[:k]:
        if not c.words:
            continue
        w0 = c.words[0].value
        if w0 == "set" and any(w.value in ("-a", "-o allexport") or w.value == "allexport" for w in c.words[1:]):
            allexport = True
        if w0 in ("source", ".") and len(c.words) > 1:
            launch.problems.append((c.first_line, "info", f"environment from `{c.words[0].value} {c.words[1].value}` "
                                                          "is not read; its variables are unknown here", "sourced-env"))
        if w0 in ("export", "declare", "typeset") and (w0 == "export" or any(w.value == "-x" for w in c.words[1:])):
            for w in c.words[1:]:
                if is_assignment(w):
                    name, _, val = w.value.partition("=")
                    val = expand(val, variables)
                    variables[name] = val
                    env[name] = EnvDef(name, val, "export", w.line, word=w, exported=True)
                elif not w.value.startswith("-") and w.value in variables:
                    name = w.value
                    if name in env:
                        env[name].exported = True
                    else:
                        env[name] = EnvDef(name, variables[name], "export", w.line, exported=True)
            continue
        if all(is_assignment(w) for w in c.words):
            for w in c.words:
                name, _, val = w.value.partition("=")
                val = expand(val, variables)
                variables[name] = val
                prev_def = env.get(name)
                exported = allexport or (prev_def is not None and prev_def.exported)
                env[name] = EnvDef(name, val, "assign", w.line, word=w, exported=exported, standalone=True)
        if w0 == "unset":
            for w in c.words[1:]:
                env.pop(w.value, None)
                variables.pop(w.value, None)
    cli_reads_env = kind in ("swift", "megatron")
    for name, dfn in list(env.items()):
        if not dfn.exported:
            if (name in TORCHRUN_ENV.values() and cli_reads_env) or name.startswith(
                    ("NCCL_", "CUDA_VISIBLE", "PYTORCH_", "MAX_PIXELS", "OMP_NUM", "USE_HF", "FPS_", "VIDEO_")):
                launch.problems.append((dfn.line, "warning", f"{name} is set on line {dfn.line} but not exported: "
                                                             "the swift process never sees it (use `export`)", "not-exported"))
            del env[name]
    for w in prefix:
        name, _, val = w.value.partition("=")
        env[name] = EnvDef(name, expand(val, variables), "inline", w.line, word=w)
    launch.variables = variables
    if kind == "torchrun":
        launch.torchrun_opts = _torchrun_opts(launcher)
        for key, (nw, vw) in launch.torchrun_opts.items():
            val = nw.value.partition("=")[2] if vw is None else vw.value
            env[TORCHRUN_ENV[key]] = EnvDef(TORCHRUN_ENV[key], expand(val, variables), "torchrun", nw.line,
                                            word=nw, value_word=vw)
    # argv (config file first, as ms-swift 4.x expands it in place)
    argv: list[str] = []
    sources: list[Source] = []
    rest = argv_words
    if rest and re.search(r"\.(ya?ml|json)$", rest[0].value) and not rest[0].value.startswith("-"):
        cfg = load_config(expand(rest[0].value, variables), base_dir)
        launch.config = cfg
        if cfg.data is None:
            launch.problems.append((rest[0].line, "warning", f"config file {rest[0].value} not found next to the "
                                                             "script; its flags are not checked", "config-missing"))
        else:
            toks, keys, cenv = config_argv(cfg.data)
            argv.extend(toks)
            sources.extend(Source("config", key=key, line=cfg.key_lines.get(key)) for key in keys)
            for name, val in cenv.items():
                if name not in env:  # ms-swift: ENV applies only when the variable is not already set
                    env[name] = EnvDef(name, val, "config", cfg.key_lines.get("ENV", 0), file=cfg.name)
        rest = rest[1:]
    arrays = _arrays_before(script, cmd.start)
    for w in rest:
        if w.escaped_space_only:
            continue  # reported above; bash ends the command there, the blank is not meant as an argument
        m = _ARRAY_REF.match(w.value) if w.dynamic else None
        if m and m.group(1) in arrays:  # "${ARGS[@]}": the array's elements, each editable where it is written
            for el in arrays[m.group(1)]:
                argv.append(expand(el.value, variables))
                sources.append(Source("script", word=el, line=el.line))
            launch.array_words.append(w)
            continue
        value = expand(w.value, variables)
        if w.dynamic and ("$" in value or "`" in value):
            launch.problems.append((w.line, "warning", f"{w.text} has no value known from the script alone (set outside "
                                                       "it, computed, or a loop variable): what it passes is not checked", "unknown-argv"))
            launch.unknown_argv.append(w.text)
        argv.append(value)
        sources.append(Source("script", word=w, line=w.line))
    launch.argv = argv
    launch.sources = sources
    launch.env = env
    if script.crlf:
        launch.problems.append((1, "warning", "Windows (CRLF) line endings: bash on Linux reads the `\\r` as part of "
                                              "each line, so `\\` no longer continues it; convert with dos2unix "
                                              "before running it there", "crlf"))
    for ln, msg in script.problems:
        launch.problems.append((ln, "warning", msg, "shell"))
    return launch


_ARRAY_REF = re.compile(r"^\$\{(\w+)\[[@*]\]\}$")


def _arrays_before(script: Script, offset: int) -> dict[str, list[Word]]:
    """Bash arrays assigned before `offset` (`NAME=(...)` resets, `NAME+=(...)` appends), outside loops and branches."""
    out: dict[str, list[Word]] = {}
    for a in script.arrays:
        if a.end > offset:
            break
        if any(c in ("loop", "case", "if", "function") for c in a.context):
            out.pop(a.name, None)  # which branch ran is not known statically
            continue
        out[a.name] = (out.get(a.name, []) if a.append else []) + list(a.words)
    return out


def _break_reason(script: Script, prev: SimpleCommand) -> str:
    if prev.ended_by_comment:
        return "a comment after a `\\` continuation ends it; move the comment above the command"
    if prev.words and prev.words[-1].escaped_space_only:
        w = prev.words[-1]
        nl = script.text.find("\n", w.end)
        rest = script.text[w.end: nl if nl >= 0 else len(script.text)]
        fix = "move the comment above the command" if rest.lstrip().startswith("#") else "remove the blanks after the `\\`"
        return f"`\\` is followed by a blank, so it escapes the blank instead of continuing the line; {fix}"
    return "that line does not end with `\\`"
