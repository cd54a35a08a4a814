"""Turn what the user named (files, output dirs, `-`) into typed sources to parse.

Contract: `resolve_inputs(inputs, stdin=None) -> Sources`.
- a file named `*.jsonl` is a logging.jsonl; `args.json` / `sft_args.json` an args
  dump; anything else a stdout/stderr capture;
- a directory contributes its top-level `*.log|*.txt|*.out|*.err` captures, its
  `logging.jsonl` (or the newest `v<N>-<date>/logging.jsonl` below it), and the
  args file next to that logging.jsonl; its file names are kept as version clues;
- `-` reads standard input as one capture.
Raises `InputError` (exit 2) for a missing path, a directory with no logs, or
binary data.  `iter_blocks(path)` yields ~8 MiB byte blocks cut at newlines.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from diagnose.errors import InputError

BLOCK = 1 << 23  # 8 MiB: bounds the per-block numpy temporaries
_LOG_SUFFIXES = {".log", ".txt", ".out", ".err", ".stdout", ".stderr"}
_VDIR = re.compile(r"^v(\d+)-\d{8}-\d{6}$")


@dataclass
class Sources:
    stdout: list[tuple[str, bytes | Path]] = field(default_factory=list)  # (display name, path or data)
    jsonl: list[Path] = field(default_factory=list)
    args: list[Path] = field(default_factory=list)
    file_names: set[str] = field(default_factory=set)


def _newest_version_dir(d: Path) -> Path | None:
    best: tuple[int, str] | None = None
    found = None
    try:
        entries = list(d.iterdir())
    except OSError:
        return None
    for p in entries:
        m = _VDIR.match(p.name)
        if m and p.is_dir() and ((p / "logging.jsonl").exists() or (p / "args.json").exists()):
            key = (int(m.group(1)), p.name)
            if best is None or key > best:
                best, found = key, p
    return found


_CONTROL = bytes(range(0, 9)) + bytes(range(14, 27)) + bytes(range(28, 32))


def check_not_binary(head: bytes, name: str) -> None:
    """Text logs (UTF-8, GBK, latin-1, with ANSI colours and \\r) have no NULs and few control bytes."""
    if not head:
        return
    ctrl = len(head) - len(head.translate(None, _CONTROL))
    if b"\0" in head or ctrl > len(head) // 20:
        raise InputError(f"{name}: binary data, not a text log", hint="give the stdout/stderr capture or logging.jsonl")


def check_not_empty(size: int, name: str) -> None:
    if size == 0:
        raise InputError(f"{name}: empty file", hint="the capture has no content yet; is the job writing elsewhere?")


def _add_dir(d: Path, src: Sources) -> None:
    names = set()
    try:
        entries = sorted(d.iterdir())
    except OSError as e:
        raise InputError(f"{d}: cannot list directory ({e.strerror})") from None
    for p in entries:
        names.add(p.name)
        if p.is_file() and p.suffix.lower() in _LOG_SUFFIXES:
            src.stdout.append((str(p), p))
    base = d
    if not (d / "logging.jsonl").exists() and not (d / "args.json").exists():
        v = _newest_version_dir(d)
        if v is not None:
            base = v
            names |= {p.name for p in v.iterdir()}
    if (base / "logging.jsonl").is_file():
        src.jsonl.append(base / "logging.jsonl")
    for n in ("args.json", "sft_args.json"):
        if (base / n).is_file():
            src.args.append(base / n)
    src.file_names |= names


def resolve_inputs(inputs: list[str], stdin: bytes | None = None) -> Sources:
    src = Sources()
    if not inputs:
        raise InputError("nothing to read", hint="give a log file, an output dir, or - for stdin")
    for raw in inputs:
        if raw == "-":
            data = stdin if stdin is not None else b""
            check_not_empty(len(data), "<stdin>")
            check_not_binary(data[:65536], "<stdin>")
            src.stdout.append(("<stdin>", data))
            continue
        p = Path(raw)
        if not p.exists():
            raise InputError(f"{raw}: no such file or directory")
        if p.is_dir():
            before = len(src.stdout) + len(src.jsonl) + len(src.args)
            _add_dir(p, src)
            if len(src.stdout) + len(src.jsonl) + len(src.args) == before:
                raise InputError(
                    f"{raw}: no ms-swift logs in this directory",
                    hint="expected *.log captures, logging.jsonl or args.json (or a v<N>-<date>/ run folder)",
                )
            continue
        try:
            with p.open("rb") as f:
                head = f.read(65536)
        except OSError as e:
            raise InputError(f"{raw}: cannot read ({e.strerror})") from None
        check_not_empty(len(head), raw)
        check_not_binary(head, raw)
        src.file_names.add(p.name)
        if p.suffix == ".jsonl":
            src.jsonl.append(p)
        elif p.name in ("args.json", "sft_args.json") or (p.suffix == ".json" and "args" in p.name):
            src.args.append(p)
        else:
            src.stdout.append((str(p), p))
    return src


def iter_blocks(source: bytes | Path, block: int = BLOCK) -> Iterator[bytes]:
    """Yield blocks of whole lines (the last one may lack a newline)."""
    if isinstance(source, bytes):
        data = source
        start = 0
        while start < len(data):
            end = min(len(data), start + block)
            if end < len(data):
                cut = data.rfind(b"\n", start, end)
                end = cut + 1 if cut >= start else data.find(b"\n", end) + 1 or len(data)
            yield data[start:end]
            start = end
        return
    rest = b""
    with source.open("rb") as f:
        while True:
            chunk = f.read(block)
            if not chunk:
                if rest:
                    yield rest
                return
            buf = rest + chunk
            cut = buf.rfind(b"\n")
            if cut < 0:
                rest = buf
                continue
            yield buf[: cut + 1]
            rest = buf[cut + 1 :]
