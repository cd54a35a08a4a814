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
  A file that is not a dump raises InputError.
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
    data = path.read_bytes()
    try:
        if data[:1] == b"\x80":
            doc = _DataOnly(io.BytesIO(data)).load()
        else:
            doc = json.loads(data)
    except (pickle.UnpicklingError, ValueError, EOFError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: not a readable flight recorder dump ({e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("entries"), list):
        raise InputError(f"{path}: not a flight recorder dump (no 'entries')")
    return doc


def _where(entry: dict[str, Any]) -> str | None:
    for f in entry.get("frames") or []:
        name, file = f.get("name"), f.get("filename") or ""
        if file and "torch/distributed" not in file.replace("\\", "/"):
            return f"{name} ({Path(file).name}:{f.get('line')})"
    return None


def read_dump(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    doc = _load(p)
    m = _RANK.search(p.name)
    pgs: dict[str, dict[str, Any]] = {}
    for pg, st in (doc.get("pg_status") or {}).items():
        if isinstance(st, dict):
            pgs[str(pg)] = {"last_enqueued": st.get("last_enqueued_collective"),
                            "last_started": st.get("last_started_collective"),
                            "last_completed": st.get("last_completed_collective")}
    last: dict[str, dict[str, Any]] = {}
    for e in doc["entries"]:
        if not isinstance(e, dict) or e.get("is_p2p"):
            continue
        pg = str(e.get("pg_id", 0))
        seq = e.get("collective_seq_id")
        if not isinstance(seq, int):
            continue
        if pg not in last or seq >= last[pg]["seq"]:
            last[pg] = {"seq": seq, "op": e.get("profiling_name"), "sizes": e.get("input_sizes"),
                        "state": e.get("state"), "where": _where(e)}
    return {"rank": int(m.group(1)) if m else None, "file": str(p), "version": str(doc.get("version")),
            "pgs": pgs, "last": last}


__all__ = ["looks_like_dump", "read_dump"]
