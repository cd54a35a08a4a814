"""Error and warning signatures: one text line -> events, plus traceback grouping.

Contract: `EventScanner.feed(lineno, text)` is called for every non-step line in
order; `EventScanner.events` then holds `Event`s with 1-based line numbers.
Kinds: cuda_oom, host_oom, nccl_timeout, nccl_error, nccl_rtx40, ib_error, nan,
bus_error, allocator_flush, child_failed, signal, bad_args, ddp_inactive (several
processes but transformers did not turn DDP on), traceback.  A Python
traceback whose final exception line carries a specific kind is reported only as
that kind; any other traceback becomes `traceback` at its exception line.
Repeats of the same (kind, text) - one per rank - are folded into the first
event (`detail["repeats"]`).
"""
from __future__ import annotations

import re
from typing import Any

from diagnose.models import Event

_GIB = r"([\d.]+)\s*(GiB|MiB|KiB|B)"
_UNIT = {"GiB": 1.0, "MiB": 1 / 1024, "KiB": 1 / 1024**2, "B": 1 / 1024**3}


def _gib(v: str, u: str) -> float:
    return round(float(v) * _UNIT[u], 4)


def _oom_detail(m: re.Match[str], line: str) -> dict[str, Any]:
    d: dict[str, Any] = {}
    t = re.search(r"Tried to allocate " + _GIB, line)
    if t:
        d["tried_gib"] = _gib(t.group(1), t.group(2))
    c = re.search(r"GPU (\d+) has a total capacity of " + _GIB + r" of which " + _GIB + " is free", line)
    if c:
        d["gpu"] = int(c.group(1))
        d["capacity_gib"] = _gib(c.group(2), c.group(3))
        d["free_gib"] = _gib(c.group(4), c.group(5))
    else:  # older torch: "GPU 0; 79.15 GiB total capacity; 75.12 GiB already allocated; ..."
        c = re.search(r"GPU (\d+); " + _GIB + r" total capacity", line)
        if c:
            d["gpu"] = int(c.group(1))
            d["capacity_gib"] = _gib(c.group(2), c.group(3))
        f = re.search(_GIB + r" free", line)
        if f:
            d["free_gib"] = _gib(f.group(1), f.group(2))
    return d


def _timeout_detail(m: re.Match[str], line: str) -> dict[str, Any]:
    d: dict[str, Any] = {}
    op = re.search(r"OpType=(\w+)", line)
    if op:
        d["op"] = op.group(1)
    to = re.search(r"Timeout\(ms\)=(\d+)", line)
    if to:
        d["timeout_s"] = int(to.group(1)) / 1000
    ran = re.search(r"ran for (\d+) milliseconds", line)
    if ran:
        d["ran_s"] = int(ran.group(1)) / 1000
    r = re.search(r"\[Rank (\d+)\]|Rank (\d+)\]", line)
    if r:
        d["rank"] = int(r.group(1) or r.group(2))
    return d


def _signal_detail(m: re.Match[str], line: str) -> dict[str, Any]:
    num = re.search(r"(?:signal:?|Received|Signal)\s*(\d+)", line)
    name = re.search(r"SIG(HUP|INT|TERM|KILL|ABRT|BUS|SEGV)", line)
    d: dict[str, Any] = {}
    if num:
        d["signal"] = int(num.group(1))
    if name:
        d["name"] = "SIG" + name.group(1)
    elif "KeyboardInterrupt" in line:
        d["name"] = "SIGINT"
    return d


def _exitcode_detail(m: re.Match[str], line: str) -> dict[str, Any]:
    e = re.search(r"exitcode\s*:\s*(-?\d+)", line)
    return {"exitcode": int(e.group(1))} if e else {}


# (kind, pattern, detail function or None); first match wins per line
SIGNATURES: list[tuple[str, re.Pattern[str], Any]] = [
    ("cuda_oom", re.compile(r"CUDA out of memory|(?:torch\.cuda\.|torch\.)?OutOfMemoryError: CUDA|HIP out of memory"), _oom_detail),
    ("nccl_rtx40", re.compile(r"RTX 4000 series doesn't support faster communication"), None),
    ("nccl_timeout", re.compile(r"Watchdog caught collective operation timeout|collective operation timeout"), _timeout_detail),
    ("bus_error", re.compile(
        r"\bBus error\b|\bSIGBUS\b|exitcode\s*:\s*-7\b|insufficient shared memory|unable to write to file </torch_"
        r"|unable to (?:open|mmap|allocate) shared memory"), _exitcode_detail),
    ("host_oom", re.compile(
        r"^\s*Killed\s*$|exitcode\s*:\s*-9\b|killed by signal: Killed|Signal 9 \(SIGKILL\)|^\s*MemoryError\b"
        r"|Cannot allocate memory|std::bad_alloc|DefaultCPUAllocator: can't allocate memory"), _exitcode_detail),
    ("ib_error", re.compile(r"\bibv_\w+ failed|NCCL WARN NET/IB|NET/IB\s*:.*(?:error|failed|unable|Got async event)|IBV? error", re.I), None),
    ("nccl_error", re.compile(
        r"DistBackendError|NCCL error|unhandled system error|ncclSystemError|ncclInternalError|ncclRemoteError"
        r"|NCCL communicator was aborted|NCCL WARN"), None),
    ("allocator_flush", re.compile(r"pytorch allocator cache flushes"), None),
    ("nan", re.compile(r"Unexpected result nan|found NaN in local grad norm|Rank \d+: found NaN"), None),
    ("bad_args", re.compile(r"remaining_argv: \[|ValueError: remaining_argv|^\S+\.py: error: (?:argument|unrecognized arguments|ambiguous option)"), None),
    ("signal", re.compile(
        r"Received \d+ death signal|SignalException: Process \d+ got signal|^\s*KeyboardInterrupt\b"
        r"|Signal (?:1|2|15) \((?:SIGHUP|SIGINT|SIGTERM)\) received|got signal: (?:1|2|15)\b"), _signal_detail),
    ("child_failed", re.compile(r"ChildFailedError:"), None),
    ("ddp_inactive", re.compile(r"process group is initialized, but parallel_mode != ParallelMode\.DISTRIBUTED"), None),
]

# cheap prefilter: a line without any of these words cannot carry an event
_PREFILTER = re.compile(
    r"memory|Killed|exitcode|Signal|signal|NCCL|nccl|ibv_|NET/IB|IB|Bus error|SIGBUS|shared memory|torch_|"
    r"allocator|nan|remaining_argv|Interrupt|ChildFailed|Error|Traceback|RTX 4000|timeout|bad_alloc|allocate|parallel_mode|error: "
)
_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Failure|Warning)?)(?::\s?(.*))?$")
_FRAME = re.compile(r"^\s+|^\s*File \"|^\s*\^+\s*$|^During handling|^The above exception|^\s*$")


class EventScanner:
    def __init__(self, file: str | None = None):
        self.file = file
        self.events: list[Event] = []
        self._seen: dict[tuple[str, str], Event] = {}
        self._in_tb = False
        self._tb_start = 0
        self._lines_with_event: set[int] = set()

    def _add(self, kind: str, lineno: int, text: str, detail: dict[str, Any] | None = None) -> None:
        text = text.strip()[:500]
        key = (kind, re.sub(r"\d+", "#", text)[:200])
        prev = self._seen.get(key)
        if prev is not None:
            prev.detail["repeats"] = prev.detail.get("repeats", 1) + 1
            self._lines_with_event.add(lineno)
            return
        ev = Event(kind=kind, line=lineno, text=text, file=self.file, detail=detail or {})
        self._seen[key] = ev
        self.events.append(ev)
        self._lines_with_event.add(lineno)

    def feed(self, lineno: int, line: str) -> None:
        if _PREFILTER.search(line):
            for kind, pat, fn in SIGNATURES:
                m = pat.search(line)
                if m:
                    if kind == "nan" and "nan" not in line.lower():
                        continue
                    self._add(kind, lineno, line, fn(m, line) if fn else None)
                    break
        self._traceback(lineno, line)

    def _traceback(self, lineno: int, line: str) -> None:
        if "Traceback (most recent call last)" in line:
            self._in_tb = True
            self._tb_start = lineno
            return
        if not self._in_tb:
            return
        if _FRAME.match(line):
            return
        m = _EXC_LINE.match(line.strip())
        self._in_tb = False
        if not m:
            return
        if lineno in self._lines_with_event:
            return
        self._add("traceback", lineno, line.strip(), {"exception": m.group(1), "traceback_line": self._tb_start})
