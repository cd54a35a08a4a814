"""Where a hung job's ranks wait: every local rank's Python stack (py-spy), grouped, and the odd one out.

Contract:
- `dump_stacks(pids, timeout=15) -> {pid: {"frames": [...], "error": str | None}}` runs
  `py-spy dump --pid P --json` once per process (read-only: py-spy reads the process's memory;
  `--nonblocking` is not used, so the pause is one dump's, milliseconds).  `frames` is the main
  thread's stack, innermost first, as {name, file, line}.  Without py-spy every entry carries the
  install hint as its error.
- `where(frames) -> str`: where a rank waits: its innermost frame in code that is not the standard
  library's (`function (file:line)`), e.g. `all_reduce (distributed_c10d.py:2806)`.
- `localise(dumps, ranks=None) -> dict`: {"groups": [{"where", "pids", "ranks"}], biggest first,
  "odd": {"pid", "rank", "where", "stack"} | None}.  The odd one out is the single rank whose place
  differs from the place all the others share (the rank that is not in the collective the others
  wait in); with two places and one rank in each (a two-rank job), the one outside a collective
  (no `distributed_c10d.py` frame) while the other is in one.  Otherwise there is none.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any

_STDLIB = (os.path.dirname(os.__file__), "<frozen", "threading.py", "selectors.py", "queue.py")


def _py_spy() -> str | None:
    exe = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return exe if os.path.exists(exe) else shutil.which("py-spy")


def dump_stacks(pids: list[int], timeout: float = 15.0) -> dict[int, dict[str, Any]]:
    exe = _py_spy()
    out: dict[int, dict[str, Any]] = {}
    for pid in pids:
        if exe is None:
            out[pid] = {"frames": [], "error": "py-spy is not installed (pip install py-spy)"}
            continue
        try:
            p = subprocess.run([exe, "dump", "--pid", str(pid), "--json"], capture_output=True, text=True,
                               timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as e:
            out[pid] = {"frames": [], "error": f"py-spy failed: {e}"}
            continue
        if p.returncode != 0:
            out[pid] = {"frames": [], "error": (p.stderr.strip().splitlines() or ["py-spy failed"])[-1]}
            continue
        try:
            threads = json.loads(p.stdout)
        except ValueError:
            out[pid] = {"frames": [], "error": "py-spy printed no JSON"}
            continue
        main = next((t for t in threads if t.get("thread_name") == "MainThread"), threads[0] if threads else {})
        frames = [{"name": f.get("name"), "file": f.get("filename"), "line": f.get("line")}
                  for f in main.get("frames") or []]
        out[pid] = {"frames": frames, "error": None}
    return out


def where(frames: list[dict[str, Any]]) -> str:
    for f in frames:
        file = f.get("file") or ""
        if not any(s and s in file for s in _STDLIB):
            return f"{f.get('name')} ({os.path.basename(file)}:{f.get('line')})"
    if frames:
        f = frames[0]
        return f"{f.get('name')} ({os.path.basename(f.get('file') or '')}:{f.get('line')})"
    return "unknown"


def localise(dumps: dict[int, dict[str, Any]], ranks: dict[int, int] | None = None) -> dict[str, Any]:
    ranks = ranks or {}
    groups: dict[str, list[int]] = {}
    for pid, d in dumps.items():
        if d.get("error"):
            continue
        groups.setdefault(where(d["frames"]), []).append(pid)
    ordered = sorted(groups.items(), key=lambda kv: -len(kv[1]))
    out: dict[str, Any] = {"groups": [{"where": w, "pids": sorted(p), "ranks": sorted(ranks[x] for x in p if x in ranks)}
                                      for w, p in ordered], "odd": None}
    total = sum(len(p) for p in groups.values())
    odd = None
    if total >= 3 and len(ordered) == 2 and len(ordered[1][1]) == 1:
        odd, others = ordered[1], ordered[0]
    elif total == 2 and len(ordered) == 2:
        inside = [_in_collective(dumps[p[0]]["frames"]) for _w, p in ordered]
        if inside == [True, False]:
            odd, others = ordered[1], ordered[0]
        elif inside == [False, True]:
            odd, others = ordered[0], ordered[1]
    if odd is not None:
        pid = odd[1][0]
        out["odd"] = {"pid": pid, "rank": ranks.get(pid), "where": odd[0],
                      "others_wait_in": others[0], "stack": dumps[pid]["frames"]}
    return out


def _in_collective(frames: list[dict[str, Any]]) -> bool:
    return any((f.get("file") or "").endswith("distributed_c10d.py") for f in frames)


__all__ = ["dump_stacks", "where", "localise"]
