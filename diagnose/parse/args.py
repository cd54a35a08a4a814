"""Launch configuration from what ms-swift echoes: the `run sh:` line and the args dump.

Contract:
- `parse_run_sh(line)` -> {argv, command, launcher, nproc_per_node, nnodes, node_rank, flags}
  or None; `argv` is the swift argv after the CLI script path.
- `argv_to_flags(argv)` -> {flag: value}: `--k v` (typed: int/float/bool/str),
  multi-value flags as lists, a bare `--k` as True.
- `parse_args_body(body, multiline)` reads the inside of `XArguments(...)`: the
  3.x/4.x multi-line sorted form (`key=value,` per line, values unquoted) or the
  2.x/Megatron single-line dataclass repr (quoted strings).
- `load_args_json(path)` reads args.json / sft_args.json.
"""
from __future__ import annotations

import ast
import json
import re
import shlex
from pathlib import Path
from typing import Any

from diagnose.parse.values import to_number

_SCRIPT = re.compile(r"(?:^|/)swift/cli/(?:(_megatron)/)?(\w+)\.py$")


def typed(v: str) -> Any:
    low = v.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    n = to_number(v)
    return n if n is not None else v


def argv_to_flags(argv: list[str]) -> dict[str, Any]:
    flags: dict[str, Any] = {}
    key: str | None = None
    vals: list[str] = []

    def flush() -> None:
        if key is None:
            return
        if not vals:
            flags[key] = True
        elif len(vals) == 1:
            flags[key] = typed(vals[0])
        else:
            flags[key] = [typed(v) for v in vals]

    for tok in argv:
        if tok.startswith("--") and len(tok) > 2 and not _is_negative_number(tok):
            flush()
            if "=" in tok:
                k, _, v = tok[2:].partition("=")
                key, vals = k, [v]
            else:
                key, vals = tok[2:], []
        elif key is not None:
            vals.append(tok)
    flush()
    return flags


def _is_negative_number(tok: str) -> bool:
    return to_number(tok) is not None


def parse_run_sh(line: str) -> dict[str, Any] | None:
    m = re.search(r"run sh: `(.*)`\s*$", line) or re.search(r"run sh: `(.*)", line)
    if not m:
        return None
    try:
        toks = shlex.split(m.group(1))
    except ValueError:
        toks = m.group(1).split()
    out: dict[str, Any] = {"launcher": "plain", "command": None}
    script_at = None
    for i, t in enumerate(toks):
        sm = _SCRIPT.search(t)
        if sm:
            script_at = i
            out["command"] = ("megatron " if sm.group(1) else "") + sm.group(2)
            break
    if script_at is None:
        return None
    pre = toks[:script_at]
    if "torch.distributed.run" in pre or any(p.endswith("torchrun") for p in pre):
        out["launcher"] = "torchrun"
        tflags = argv_to_flags([p for p in pre if p.startswith("--") or not p.startswith("-")])
        if "nproc_per_node" in tflags:
            out["nproc_per_node"] = int(tflags["nproc_per_node"]) if isinstance(tflags["nproc_per_node"], (int, float)) else None
        if "nnodes" in tflags:
            nn = tflags["nnodes"]
            out["nnodes"] = int(nn) if isinstance(nn, (int, float)) else None
        if "node_rank" in tflags:
            nr = tflags["node_rank"]
            out["node_rank"] = int(nr) if isinstance(nr, (int, float)) else None
    out["argv"] = toks[script_at + 1 :]
    out["flags"] = argv_to_flags(out["argv"])
    return out


def _split_top(body: str) -> list[str]:
    """Split on commas at bracket depth 0 outside quotes."""
    parts, depth, quote, cur = [], 0, "", []
    i = 0
    while i < len(body):
        c = body[i]
        if quote:
            cur.append(c)
            if c == "\\" and i + 1 < len(body):
                cur.append(body[i + 1])
                i += 2
                continue
            if c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
            cur.append(c)
        elif c in "([{":
            depth += 1
            cur.append(c)
        elif c in ")]}":
            depth -= 1
            cur.append(c)
        elif c == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    if cur:
        parts.append("".join(cur))
    return parts


def _value(raw: str) -> Any:
    raw = raw.strip()
    if not raw:
        return ""
    if raw[0] in "'\"[{(" or raw in ("None", "True", "False"):
        try:
            return ast.literal_eval(raw)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return raw.strip("'\"") if raw[0] in "'\"" else raw
    return typed(raw)


def parse_args_body(body: str, multiline: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    items = [ln.rstrip(",") for ln in body.splitlines()] if multiline else _split_top(body)
    for item in items:
        k, sep, v = item.strip().partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_]\w*", k.strip()):
            continue
        out[k.strip()] = _value(v)
    return out


def load_args_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
