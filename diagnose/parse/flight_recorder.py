"""PyTorch flight recorder dumps: each rank's last collectives, as torch writes them.

With `TORCH_FR_BUFFER_SIZE` (older: `TORCH_NCCL_TRACE_BUFFER_SIZE`) > 0, every process group records its
collectives; NCCL's watchdog dumps them on a timeout to `TORCH_NCCL_DEBUG_INFO_TEMP_FILE<rank>` (default
`/tmp/nccl_trace_rank_<rank>`), and `torch._C._distributed_c10d._dump_fr_trace()` /
`_dump_fr_trace_json()` return the same document.  torch's own reader is
`torch/distributed/flight_recorder/components/loader.py` (`read_dump`: pickle, rank from the file name).

Contract:
- `looks_like_dump(head: bytes) -> bool`: a pickle (protocol 2+) or JSON document whose head names
  `entries` and `pg_config` or `pg_status`.
- `read_dump(path) -> dict`: {rank, file, version, pgs: {pg_id: {last_enqueued, last_started,
  last_completed}}, last: {pg_id: {seq, op, sizes, state, where}}} - per process group the collective
  with the highest `collective_seq_id` and its innermost Python frame.  The rank is the file name's
  trailing number (torch's loader does the same).  The pickle is read by an unpickler that refuses every
  global: a dump holds only dicts, lists, tuples, strings and numbers, so nothing in it can run code.
  Every field is then type-checked and bounded (ints in 64 bits, short strings, `sizes` formatted as short
  text within a budget of nodes: a pickle can store one list many times by reference, so bytes say nothing
  of its size).  A file that is not a dump, or one the unpickler cannot read (REDUCE/BUILD misuse, huge memo
  indexes or lengths, ints past Python's digit limit, deep JSON), raises InputError; one longer than
  `--max-input` too.
Never imports torch.
"""
from __future__ import annotations

import io
import json
import pickle
import re
from pathlib import Path
from typing import Any

from diagnose.errors import InputError

_RANK = re.compile(r"(\d+)$")


class _DataOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"a flight recorder dump holds no objects ({module}.{name} refused)")


def looks_like_dump(head: bytes) -> bool:
    if head[:1] == b"\x80" and b"entries" in head[:4096]:
        return b"pg_config" in head or b"pg_status" in head or b"collective_seq_id" in head
    if head.lstrip()[:1] == b"{":
        h = head[:65536]
        return b'"entries"' in h and (b'"pg_config"' in h or b'"pg_status"' in h)
    return False


def _load(path: Path) -> dict[str, Any]:
    from diagnose.parse.bounded import read_file

    data = read_file(path, str(path))
    try:
        if data[:1] == b"\x80":
            doc = _DataOnly(io.BytesIO(data)).load()
        else:
            doc = json.loads(data)
    except Exception as e:  # noqa: BLE001 - crafted bytes: REDUCE/BUILD misuse, memo indexes, 2^62 lengths, huge ints...
        raise InputError(f"{path}: not a readable flight recorder dump ({type(e).__name__}: {str(e)[:120]})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("entries"), list):
        raise InputError(f"{path}: not a flight recorder dump (no 'entries')")
    return doc


# bounds on what one dump may make us hold or print: a pickle stores one list many times by reference, so a
# few hundred bytes can stand for 10^8 nodes; every field is type-checked and read by counting nodes, not bytes
_MAX_ENTRIES = 100_000
_MAX_PGS = 4096
_MAX_FRAMES = 64
_MAX_TEXT = 200
_SIZE_NODES = 256
_INT_MAX = 1 << 63


def _text(v: Any, n: int = _MAX_TEXT) -> str | None:
    return v[:n] if isinstance(v, str) else None


def _int(v: Any) -> int | None:
    return v if type(v) is int and -_INT_MAX < v < _INT_MAX else None


def _key(v: Any) -> str | None:
    """A process group id: an int or a short string (never str() of something else)."""
    if type(v) is int:
        return str(v) if -_INT_MAX < v < _INT_MAX else None
    return _text(v, 64)


def _sizes(v: Any) -> str | None:
    """`input_sizes` ([[dims], ...]) as short text, formatted within a budget of nodes (a shared list counts
    every time it is reached), cut with '…'."""
    budget = [_SIZE_NODES]
    out: list[str] = []

    def put(x: Any, depth: int) -> None:
        if budget[0] <= 0:
            return
        budget[0] -= 1
        if isinstance(x, (list, tuple)) and depth < 4:
            out.append("[")
            for i, y in enumerate(x):
                if budget[0] <= 0:
                    break
                if i:
                    out.append(", ")
                put(y, depth + 1)
            out.append("…]" if budget[0] <= 0 else "]")
        elif type(x) is int:
            out.append(str(x) if -_INT_MAX < x < _INT_MAX else "…")
        else:
            out.append("?")

    if not isinstance(v, (list, tuple)):
        return None
    put(v, 0)
    text = "".join(out)
    return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT - 1] + "…"


def _where(entry: dict[str, Any]) -> str | None:
    frames = entry.get("frames")
    if not isinstance(frames, list):
        return None
    for f in frames[:_MAX_FRAMES]:
        if not isinstance(f, dict):
            continue
        name, file = _text(f.get("name"), 120), _text(f.get("filename"), 400) or ""
        if file and "torch/distributed" not in file.replace("\\", "/"):
            line = _int(f.get("line"))
            return f"{name} ({Path(file).name}:{line if line is not None else '?'})"
    return None


def read_dump(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    doc = _load(p)
    m = _RANK.search(p.name)
    pgs: dict[str, dict[str, Any]] = {}
    status = doc.get("pg_status")
    for i, (pg, st) in enumerate(status.items() if isinstance(status, dict) else ()):
        key = _key(pg)
        if i >= _MAX_PGS:
            break
        if key is not None and isinstance(st, dict):
            pgs[key] = {"last_enqueued": _int(st.get("last_enqueued_collective")),
                        "last_started": _int(st.get("last_started_collective")),
                        "last_completed": _int(st.get("last_completed_collective"))}
    last: dict[str, dict[str, Any]] = {}
    for e in doc["entries"][:_MAX_ENTRIES]:
        if not isinstance(e, dict) or e.get("is_p2p") is True:
            continue
        pg = _key(e.get("pg_id", 0))
        seq = _int(e.get("collective_seq_id"))
        if pg is None or seq is None:
            continue
        if pg not in last or seq >= last[pg]["seq"]:
            last[pg] = {"seq": seq, "op": _text(e.get("profiling_name")), "sizes": _sizes(e.get("input_sizes")),
                        "state": _text(e.get("state"), 32), "where": _where(e)}
    version = doc.get("version")
    return {"rank": int(m.group(1)) if m else None, "file": str(p),
            "version": _text(version, 32) if isinstance(version, str) else str(_int(version) or version)[:32]
            if type(version) in (int, float) else None,
            "pgs": pgs, "last": last}


__all__ = ["looks_like_dump", "read_dump"]
