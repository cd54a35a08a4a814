"""Follow log files that another process is writing: growth, truncation, rotation, deletion.

Contract: `LogFollower(paths, start_at_end=False)`; `poll() -> Change` stats every path (no reading
when nothing changed) and reads only the bytes appended since the last poll, up
to whole lines, to test them against `URGENT` (the error signatures of
`parse.events` other than notices and warnings, tracebacks, NaN/inf values).  A file that shrank was truncated
(read again from 0); one whose inode changed at the same path was rotated (the
new file is read from 0); a path that vanished is reported in `deleted`.  Paths
that do not exist yet are watched until they appear (`appeared`, scanned from 0).
With `start_at_end`, content present when a path is added is not scanned (the
caller parses it in full anyway).
The follower opens files read-only and never holds them open between polls.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from diagnose.parse.events import ORDINARY_KINDS, SIGNATURES

# a new line matching this makes attach re-parse and diagnose at once
URGENT = re.compile(
    "|".join(f"(?:{p.pattern})" for kind, p, _ in SIGNATURES if kind not in ORDINARY_KINDS)
    + r"|Traceback \(most recent call last\)|[:=]\s*'?(?:nan|NaN|-?inf|-?Infinity)\b'?"
    + r"|End time of running main|train_runtime",
    re.M,
)


@dataclass
class _State:
    path: Path
    dev: int = -1
    ino: int = -1
    size: int = 0
    pos: int = 0  # bytes scanned for URGENT (always at a line start)
    exists: bool = False


@dataclass
class Change:
    grown: list[Path] = field(default_factory=list)
    truncated: list[Path] = field(default_factory=list)
    rotated: list[Path] = field(default_factory=list)
    deleted: list[Path] = field(default_factory=list)
    appeared: list[Path] = field(default_factory=list)
    urgent: list[str] = field(default_factory=list)  # matching lines (first few)
    new_bytes: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.grown or self.truncated or self.rotated or self.deleted or self.appeared)


class LogFollower:
    def __init__(self, paths: list[Path] | None = None, scan_limit: int = 8 << 20, start_at_end: bool = False):
        self.scan_limit = scan_limit
        self.start_at_end = start_at_end
        self._st: dict[Path, _State] = {}
        for p in paths or ():
            self.add(p)

    @property
    def paths(self) -> list[Path]:
        return list(self._st)

    def add(self, path: Path) -> None:
        if path in self._st:
            return
        st = _State(path)
        try:
            s = os.stat(path)
            st.dev, st.ino, st.size, st.exists = s.st_dev, s.st_ino, s.st_size, True
            # existing content is parsed in full by the caller; only what comes later is scanned
            st.pos = s.st_size if self.start_at_end else 0
        except OSError:
            pass
        self._st[path] = st

    def _scan(self, st: _State, ch: Change) -> None:
        if st.size <= st.pos:
            return
        start = max(st.pos, st.size - self.scan_limit)  # a burst larger than the limit: scan its tail
        try:
            with open(st.path, "rb") as f:
                f.seek(start)
                data = f.read(st.size - start)
        except OSError:
            return
        cut = data.rfind(b"\n")
        if cut < 0:
            return  # no complete line yet
        data = data[: cut + 1]
        st.pos = start + len(data)
        ch.new_bytes += len(data)
        text = data.decode("utf-8", "replace")
        for m in URGENT.finditer(text):
            a = text.rfind("\n", 0, m.start()) + 1
            b = text.find("\n", m.end())
            ch.urgent.append(text[a: b if b >= 0 else len(text)].strip()[:300])
            if len(ch.urgent) >= 5:
                break

    def poll(self) -> Change:
        ch = Change()
        for path, st in self._st.items():
            try:
                s = os.stat(path)
            except FileNotFoundError:
                if st.exists:
                    st.exists = False
                    ch.deleted.append(path)
                continue
            except OSError:
                continue
            if not st.exists:
                st.exists, st.dev, st.ino, st.size, st.pos = True, s.st_dev, s.st_ino, s.st_size, 0
                ch.appeared.append(path)
                self._scan(st, ch)
                continue
            if (s.st_dev, s.st_ino) != (st.dev, st.ino):
                st.dev, st.ino, st.size, st.pos = s.st_dev, s.st_ino, s.st_size, 0
                ch.rotated.append(path)
                self._scan(st, ch)
                continue
            if s.st_size < st.size or s.st_size < st.pos:
                st.size, st.pos = s.st_size, 0
                ch.truncated.append(path)
                self._scan(st, ch)
                continue
            if s.st_size > st.size:
                st.size = s.st_size
                ch.grown.append(path)
                self._scan(st, ch)
        return ch
