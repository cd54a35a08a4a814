"""Turn what the user named (files, output dirs, `-`) into typed sources to parse.

Contract: `resolve_inputs(inputs, stdin=None) -> Sources`.
- a file named `*.jsonl` is a logging.jsonl; `args.json` / `sft_args.json` an args
  dump; anything else a stdout/stderr capture;
- a directory contributes its top-level `*.log|*.txt|*.out|*.err` captures, its
  `logging.jsonl` (or the newest `v<N>-<date>/logging.jsonl` below it), and the
  args file next to that logging.jsonl; its file names are kept as version clues;
- `-` reads standard input as one capture; so is a path that is not a regular file
  (a FIFO, bash's `<(...)`), read once into memory: its head is checked for binary data first
  (`/dev/zero` fails at once) and the whole is bounded (`parse.bounded`, `--max-input`); a regular
  file longer than the bound is refused;
- in a directory only regular files are read (a FIFO or a link to a device is passed over) and a
  file that cannot be opened is left out with a note;
- UTF-16 text (PowerShell's `>` writes it, with a BOM) is re-encoded to UTF-8 in memory.
Raises `InputError` (exit 2) for a missing path, a directory with no logs, or
binary data.  `iter_blocks(source)` yields ~4 MiB byte blocks cut at newlines
(`block_bounds` gives a file's block byte ranges, `read_block` reads one).
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from diagnose.errors import InputError
from diagnose.parse.bounded import check_size, max_input, read_file, read_stream, too_big

BLOCK = 1 << 22  # 4 MiB: bounds the per-block numpy temporaries (and measured fastest)
_LOG_SUFFIXES = {".log", ".txt", ".out", ".err", ".stdout", ".stderr"}
VERSION_DIR = re.compile(r"^v(\d+)-\d{8}-\d{6}$")  # ms-swift's run folder under output_dir


@dataclass
class Sources:
    stdout: list[tuple[str, bytes | Path]] = field(default_factory=list)  # (display name, path or data)
    jsonl: list[Path] = field(default_factory=list)
    args: list[Path] = field(default_factory=list)
    fr: list[Path] = field(default_factory=list)  # flight recorder dumps (parse.flight_recorder)
    notes: list[str] = field(default_factory=list)  # inputs read as nothing (an empty capture among several)
    file_names: set[str] = field(default_factory=set)


def newest_version_dir(d: Path, since: float | None = None, with_logs: bool = False) -> Path | None:
    """Newest `v<N>-<date>-<time>` folder of an ms-swift output dir (by N, then name).

    `with_logs`: only folders holding `logging.jsonl` or `args.json`; `since`: only
    folders modified no earlier than that time (minus 5 s of clock slack), which is
    how attach finds the folder a job it watches has just created."""
    best: tuple[int, str] | None = None
    found = None
    try:
        entries = list(d.iterdir())
    except OSError:
        return None
    for p in entries:
        m = VERSION_DIR.match(p.name)
        if not m or not p.is_dir():
            continue
        if with_logs and not ((p / "logging.jsonl").exists() or (p / "args.json").exists()):
            continue
        if since is not None:
            try:
                if p.stat().st_mtime < since - 5:
                    continue
            except OSError:
                continue
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


def utf16_codec(head: bytes) -> str | None:
    """'utf-16' when the bytes are UTF-16 text (a BOM, or ASCII text with every other byte NUL), else None."""
    if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return "utf-16"
    sample = head[:4096]
    if len(sample) >= 8:
        even, odd = sample[0::2], sample[1::2]
        if odd.count(0) > 0.9 * len(odd) and even.count(0) < 0.1 * len(even):
            return "utf-16-le"
        if even.count(0) > 0.9 * len(even) and odd.count(0) < 0.1 * len(odd):
            return "utf-16-be"
    return None


def from_utf16(data: bytes) -> bytes:
    """UTF-16 text re-encoded as UTF-8; any other bytes unchanged."""
    codec = utf16_codec(data)
    if codec is None:
        return data
    return data.decode(codec, errors="replace").encode("utf-8")


def check_not_empty(size: int, name: str) -> None:
    if size == 0:
        raise InputError(f"{name}: empty file", hint="the capture has no content yet; is the job writing elsewhere?")


_FR_NAME = re.compile(r"trace\w*?_?\d+$|fr\w*?_?\d+$")


def _is_fr(p: Path) -> bool:
    from diagnose.parse.flight_recorder import looks_like_dump

    try:
        with p.open("rb") as f:
            return looks_like_dump(f.read(65536))
    except OSError:
        return False


_RANK_FILE = re.compile(r"attempt_\d+[/\\](\d+)[/\\]std(?:out|err)\.log$")


def rank_of_file(name: str) -> int | None:
    """The local rank of one of torchrun's per-rank files (`--log-dir D --redirects 3`:
    D/<run id>/attempt_<n>/<local rank>/stdout.log, stderr.log), else None."""
    m = _RANK_FILE.search(name)
    return int(m.group(1)) if m else None


def _torchrun_rank_files(d: Path) -> list[Path]:
    """torchrun's per-rank logs at most three levels below `d` (the log dir, a run id's or an attempt's
    folder), the newest attempt of each run id only."""
    found: list[Path] = []
    for pattern in ("*/std*.log", "attempt_*/*/std*.log", "*/attempt_*/*/std*.log", "*/*/attempt_*/*/std*.log"):
        found += [p for p in d.glob(pattern) if p.is_file() and rank_of_file(str(p)) is not None]
    newest: dict[Path, int] = {}
    for p in found:
        att = p.parent.parent
        n = int(att.name.split("_", 1)[1]) if att.name.startswith("attempt_") and att.name[8:].isdigit() else 0
        newest[att.parent] = max(newest.get(att.parent, -1), n)
    return sorted({p for p in found if p.parent.parent.name == f"attempt_{newest[p.parent.parent.parent]}"})


def _unreadable(p: Path) -> str | None:
    """Why a regular file cannot be opened for reading (permissions), or None."""
    try:
        with open(p, "rb"):
            return None
    except OSError as e:
        return e.strerror or type(e).__name__


def _add_dir(d: Path, src: Sources) -> None:
    names = set()
    try:
        entries = sorted(d.iterdir())
    except OSError as e:
        raise InputError(f"{d}: cannot list directory ({e.strerror})") from None
    for p in entries:  # regular files only (is_file): a FIFO or a link to /dev/zero named *.log is not read
        names.add(p.name)
        if p.is_file() and p.suffix.lower() in _LOG_SUFFIXES:
            why = _unreadable(p)
            if why:  # one unreadable capture in a folder: said, and the others are read
                src.notes.append(f"{p}: cannot read ({why}), left out")
                continue
            check_size(p, str(p))
            src.stdout.append((str(p), p))
        elif p.is_file() and _FR_NAME.search(p.name) and _is_fr(p):
            src.fr.append(p)
    for p in _torchrun_rank_files(d):
        if p.stat().st_size and not _unreadable(p):
            src.stdout.append((str(p), p))
    base = d
    if not (d / "logging.jsonl").exists() and not (d / "args.json").exists():
        v = newest_version_dir(d, with_logs=True)
        if v is not None:
            base = v
            names |= {p.name for p in v.iterdir()}
    for f, into in [(base / "logging.jsonl", src.jsonl), (base / "args.json", src.args), (base / "sft_args.json", src.args)]:
        if f.is_file():
            why = _unreadable(f)
            if why:
                src.notes.append(f"{f}: cannot read ({why}), left out")
            else:
                into.append(f)
    src.file_names |= names


def read_text_stream(f: BinaryIO, name: str) -> bytes:
    """Standard input, a pipe or a device: its head is checked for binary data before the rest is read
    (so `/dev/zero` or `/dev/urandom` fail at once), and the whole is bounded (`bounded.max_input`)."""
    head = b""
    while len(head) < 65536:
        b = f.read(65536 - len(head))
        if not b:
            break
        head += b
    if not utf16_codec(head):
        check_not_binary(head, name)
    return head + (read_stream(f, name) if len(head) == 65536 else b"")


def _read_pipe(p: Path, raw: str) -> bytes:
    try:
        with p.open("rb") as f:
            return read_text_stream(f, raw)
    except OSError as e:
        raise InputError(f"{raw}: cannot read ({e.strerror})") from None


def resolve_inputs(inputs: list[str], stdin: bytes | None = None) -> Sources:
    src = Sources()
    if not inputs:
        raise InputError("nothing to read", hint="give a log file, an output dir, or - for stdin")
    for raw in inputs:
        if raw == "-":
            data = from_utf16(stdin if stdin is not None else b"")
            if len(data) > max_input():
                raise too_big("<stdin>", max_input())
            check_not_empty(len(data), "<stdin>")
            check_not_binary(data[:65536], "<stdin>")
            src.stdout.append(("<stdin>", data))
            continue
        p = Path(raw)
        if not p.exists():
            raise InputError(f"{raw}: no such file or directory")
        if p.is_dir():
            before = len(src.stdout) + len(src.jsonl) + len(src.args) + len(src.fr)
            _add_dir(p, src)
            if len(src.stdout) + len(src.jsonl) + len(src.args) + len(src.fr) == before:
                left_out = [n for n in src.notes if n.endswith("left out")]
                if left_out:
                    raise InputError(left_out[0].replace(", left out", ""), hint="no other log in this directory")
                raise InputError(
                    f"{raw}: no ms-swift logs in this directory",
                    hint="expected *.log captures, logging.jsonl or args.json (or a v<N>-<date>/ run folder)",
                )
            continue
        if not p.is_file():  # a pipe: `<(ssh host cat train.log)`, a FIFO: read once, like stdin (bounded)
            data = from_utf16(_read_pipe(p, raw))
            check_not_empty(len(data), raw)
            check_not_binary(data[:65536], raw)
            src.stdout.append((str(p), data))
            continue
        check_size(p, raw)
        try:
            with p.open("rb") as f:
                head = f.read(65536)
        except OSError as e:
            raise InputError(f"{raw}: cannot read ({e.strerror})") from None
        if not head and len(inputs) > 1:  # one rank's or node's capture still empty: the others say what is known
            src.notes.append(f"{raw}: empty (nothing written yet), read as nothing")
            src.file_names.add(p.name)
            continue
        check_not_empty(len(head), raw)
        from diagnose.parse.flight_recorder import looks_like_dump

        if looks_like_dump(head):
            src.fr.append(p)
            src.file_names.add(p.name)
            continue
        if utf16_codec(head):  # PowerShell's `>` writes UTF-16: read it once, as UTF-8, into memory
            data = from_utf16(read_file(p, raw))
            check_not_binary(data[:65536], raw)
            src.file_names.add(p.name)
            src.stdout.append((str(p), data))
            continue
        check_not_binary(head, raw)
        src.file_names.add(p.name)
        if p.suffix == ".jsonl":
            src.jsonl.append(p)
        elif p.name in ("args.json", "sft_args.json") or (p.suffix == ".json" and "args" in p.name):
            src.args.append(p)
        else:
            src.stdout.append((str(p), p))
    if len(inputs) > 1 and not (src.stdout or src.jsonl or src.args or src.fr):
        raise InputError("every input is empty", hint="the captures have no content yet; is the job writing elsewhere?")
    return src


def block_bounds(path: Path, block: int = BLOCK) -> list[tuple[int, int]]:
    """Byte ranges [start, end) of the blocks of `path`: each ends at the first newline at or
    after `start + block - 1` (the last at the file's current size).  Computed with a few small
    reads, so any process can read any block on its own."""
    size = path.stat().st_size
    bounds: list[tuple[int, int]] = []
    start = 0
    with path.open("rb") as f:
        while start < size:
            pos = start + block - 1
            end = size
            f.seek(pos)
            while pos < size:
                chunk = f.read(1 << 16)
                if not chunk:
                    break
                j = chunk.find(b"\n")
                if j >= 0:
                    end = pos + j + 1
                    break
                pos += len(chunk)
            end = min(end, size)
            bounds.append((start, end))
            start = end
    return bounds


def read_block(path: Path, start: int, end: int) -> bytes:
    with path.open("rb") as f:
        f.seek(start)
        return f.read(end - start)


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
    bounds = block_bounds(source, block)
    with source.open("rb") as f:
        for start, end in bounds:
            f.seek(start)
            data = f.read(end - start)
            if data:
                yield data


def read_lines(source: str | Path | bytes, numbers: set[int], max_len: int = 400) -> dict[int, str]:
    """The text of the given 1-based lines of a capture (a path, or the bytes read from stdin), each cut to max_len."""
    want = sorted(n for n in numbers if n > 0)
    if not want:
        return {}
    out: dict[int, str] = {}
    last = want[-1]
    wanted = set(want)
    try:
        stream = iter(source.splitlines()) if isinstance(source, bytes) else open(source, "rb")  # noqa: SIM115
    except OSError:
        return {}
    try:
        for i, raw in enumerate(stream, 1):
            if i in wanted:
                text = from_utf16(raw).decode("utf-8", "replace").rstrip("\r\n")
                out[i] = text if len(text) <= max_len else text[: max_len - 1] + "…"
            if i >= last:
                break
    finally:
        if not isinstance(source, bytes):
            stream.close()  # type: ignore[union-attr]
    return out
