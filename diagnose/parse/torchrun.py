"""torchrun's failure report (ChildFailedError table): which rank failed first, where, how.

Contract: `FailureTable.feed(lineno, text)` reads each (prefix-stripped) line and
collects the entries of torch/distributed/elastic/multiprocessing/errors'
report, in both its forms:

    Failures:                                   Root Cause (first observed failure):
    [1]:                                        [0]:
      time      : 2023-09-15_08:38:11             time      : ...
      host      : 09e05f797e4a                    host      : ...
      rank      : 6 (local_rank: 6)               rank      : 0 (local_rank: 0)
      exitcode  : -7 (pid: 5063)                  exitcode  : -7 (pid: 5057)
      error_file: <N/A>                           error_file: <N/A>
      traceback : Signal 7 (SIGBUS) received by PID 5063

`entries` is a list of dicts {rank, local_rank, host, time, exitcode, pid,
traceback, root_cause (bool), line}; an entry cut by the paste keeps what it has.
Lines in double-spaced pastes (a blank line after each) are read the same.
"""
from __future__ import annotations

import re
from typing import Any

_FIELD = re.compile(r"^\s*(time|host|rank|exitcode|error_file|traceback)\s*:\s*(.*?)\s*$")
_INDEX = re.compile(r"^\s*\[(\d+)\]:\s*$")


class FailureTable:
    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self._mode: str | None = None  # "failures" | "root"
        self._cur: dict[str, Any] | None = None

    def feed(self, lineno: int, text: str) -> None:
        t = text.strip()
        if not t:
            return
        if t.startswith("Root Cause (first observed failure)"):
            self._close()
            self._mode = "root"
            return
        if t == "Failures:":
            self._close()
            self._mode = "failures"
            return
        m = _INDEX.match(t)
        if m:
            self._close()
            self._cur = {"root_cause": self._mode == "root", "line": lineno}
            return
        m = _FIELD.match(text)
        if m and (self._cur is not None or self._mode is not None):
            if self._cur is None:  # the paste began inside an entry
                self._cur = {"root_cause": self._mode == "root", "line": lineno}
            self._field(m.group(1), m.group(2), lineno)
            return
        if t.startswith(("=====", "-----", "<NO_OTHER_FAILURES>")) or t.endswith("FAILED") or t == "....":
            self._close()
            if t.startswith("====="):
                self._mode = None
            return

    def _field(self, key: str, val: str, lineno: int) -> None:
        cur = self._cur
        assert cur is not None
        if key == "rank":
            m = re.match(r"(-?\d+)(?:\s*\(local_rank:\s*(\d+)\))?", val)
            if m:
                cur["rank"] = int(m.group(1))
                if m.group(2):
                    cur["local_rank"] = int(m.group(2))
        elif key == "exitcode":
            m = re.match(r"(-?\d+)(?:\s*\(pid:\s*(\d+)\))?", val)
            if m:
                cur["exitcode"] = int(m.group(1))
                if m.group(2):
                    cur["pid"] = int(m.group(2))
                cur.setdefault("line", lineno)
        elif key == "error_file":
            if val and val != "<N/A>":
                cur["error_file"] = val
        else:
            cur[key] = val

    def _close(self) -> None:
        if self._cur is not None and len(self._cur) > 2:
            self.entries.append(self._cur)
        self._cur = None

    def finish(self) -> list[dict[str, Any]]:
        self._close()
        return self.entries


__all__ = ["FailureTable"]
