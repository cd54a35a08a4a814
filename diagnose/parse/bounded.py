"""Reading what the user names, with a bound: no input is endless, and none blocks the reader unasked.

Contract (stdlib only):
- `max_input() -> int`: the most bytes one input may hold: `SWIFTDOC_MAX_INPUT` (`512M`, `8G`, bytes), else 2 GiB;
  `set_max_input(text)` sets it for this process and the processes it starts (`--max-input SIZE`);
  `parse_size(text)` reads such a size (a bad one is a `UsageError`).
- `is_regular(path)`: a regular file (after symlinks): not a FIFO, a socket or a device such as `/dev/zero`.
- `check_size(path, name)`: a regular file longer than the bound is an `InputError` (exit 2) naming the option.
- `read_stream(fh, name)`: every byte of a stream (stdin, a pipe, `<(...)`) up to the bound, else `InputError`.
- `read_file(path, name, regular=True)`: the bytes of one file, bounded; with `regular` a FIFO or a device is an
  `InputError` (never opened: opening a FIFO blocks).
- `expanded_nodes(obj, limit)` / `check_expanded(obj, name, limit)`: the size of a loaded document written out in
  full (aliases and shared references counted each time they are reached), counted no further than the limit;
  past it an `InputError` (a YAML alias bomb is refused before anything formats it); `check_nesting(text, name)`:
  a config text whose brackets nest deeper than `MAX_DEPTH` is refused before a parser recurses into it.
"""
from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import BinaryIO

from diagnose.errors import InputError, UsageError

DEFAULT = 2 << 30
MAX_NODES = 200_000  # values one loaded config may expand to (a real one holds hundreds)
MAX_DEPTH = 100  # bracket levels of a config text
_ENV = "SWIFTDOC_MAX_INPUT"
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.I)


def parse_size(text: str) -> int:
    m = _SIZE.match(str(text))
    if not m or float(m.group(1)) <= 0:
        raise UsageError(f"--max-input {text!r}: expected a size such as 512M, 4G or 8G")
    return int(float(m.group(1)) * (1 << (10 * " kmgt".index(m.group(2).lower() or " "))))


def max_input() -> int:
    raw = os.environ.get(_ENV)
    if not raw:
        return DEFAULT
    try:
        return parse_size(raw)
    except UsageError:
        return DEFAULT


def set_max_input(text: str | None) -> None:
    if text:
        os.environ[_ENV] = str(parse_size(text))


def words(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.3g} {unit}"
    return f"{n} bytes"


def too_big(name: str, limit: int) -> InputError:
    more = 2 * limit
    size = f"{-(-more >> 30)}G" if more >= 1 << 30 else f"{-(-more >> 20)}M"
    return InputError(f"{name}: more than {words(limit)}, the most swiftdoc reads from one input",
                      hint=f"--max-input {size} reads more (or set {_ENV})")


def is_regular(path: str | Path) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def check_size(path: str | Path, name: str | None = None) -> int:
    limit = max_input()
    try:
        size = os.stat(path).st_size
    except OSError as e:
        raise InputError(f"{name or path}: cannot read ({e.strerror})") from None
    if size > limit:
        raise too_big(str(name or path), limit)
    return size


def read_stream(fh: BinaryIO, name: str) -> bytes:
    limit = max_input()
    chunks: list[bytes] = []
    n = 0
    while True:
        b = fh.read(min(1 << 20, limit + 1 - n))
        if not b:
            return b"".join(chunks)
        chunks.append(b)
        n += len(b)
        if n > limit:
            raise too_big(name, limit)


def read_file(path: str | Path, name: str | None = None, regular: bool = True) -> bytes:
    label = str(name or path)
    if regular and not is_regular(path):
        if not os.path.exists(path):
            raise InputError(f"{label}: no such file")
        raise InputError(f"{label}: not a regular file (a FIFO, a socket or a device)", hint="give the file itself")
    if regular:
        check_size(path, label)
    try:
        with open(path, "rb") as fh:
            return read_stream(fh, label)
    except OSError as e:
        raise InputError(f"{label}: cannot read ({e.strerror})") from None


def expanded_nodes(obj: object, limit: int = MAX_NODES) -> int:
    """How many nodes `obj` has when written out in full (a YAML alias or a pickle memo reference counts each time it
    is reached), counting at most to `limit + 1`: a 10-line alias bomb stops after `limit` steps, not after 10^9."""
    n = 0
    stack = [obj]
    while stack:
        x = stack.pop()
        n += 1
        if n > limit:
            return n
        if isinstance(x, dict):
            stack.extend(x.keys())
            stack.extend(x.values())
        elif isinstance(x, (list, tuple, set)):
            stack.extend(x)
        elif isinstance(x, (str, bytes)):
            n += len(x) // 64  # long strings weigh by their length
    return n


_BRACKETS = re.compile(r"[\[\]{}]")


def check_nesting(text: str, name: str, limit: int = MAX_DEPTH) -> None:
    """An `InputError` when a YAML/JSON text opens brackets deeper than `limit` (parsers recurse on them: PyYAML
    takes seconds to fail on 5,000 levels).  Brackets inside quotes count too: a real config never comes close."""
    depth = worst = 0
    for m in _BRACKETS.finditer(text):
        depth = depth + 1 if m.group() in "[{" else max(0, depth - 1)
        if depth > worst:
            worst = depth
            if worst > limit:
                raise InputError(f"{name}: nested more than {limit} levels deep; not read")


def check_expanded(obj: object, name: str, limit: int = MAX_NODES) -> None:
    """An `InputError` when a loaded document expands past `limit` nodes (YAML aliases, shared pickle lists)."""
    if expanded_nodes(obj, limit) > limit:
        raise InputError(f"{name}: expands to more than {limit:,} values (YAML aliases or shared references "
                         "repeated); not read", hint="write the values out, or remove the repeated aliases")


__all__ = ["DEFAULT", "MAX_DEPTH", "MAX_NODES", "check_expanded", "check_nesting", "expanded_nodes", "check_size", "is_regular", "max_input", "parse_size", "read_file", "read_stream",
           "set_max_input", "too_big", "words"]
