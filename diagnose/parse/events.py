"""Error and warning signatures: one text line -> events, plus traceback grouping.

Contract: `EventScanner.feed(lineno, text)` is called for every non-step line in
order; `EventScanner.events` then holds `Event`s with 1-based line numbers.
Kinds: every `kind` of the signature table (`signatures.yaml`, loaded and
validated here: pattern, needles for the cheap prefilter, detail extractor,
confidence, the emitting source and line cases), plus `traceback` (an exception
line no signature claims, also when the paste kept only that line) and
`traceback_cut` (a traceback whose exception line is not in the text: the
excerpt ends inside it).  A Python traceback whose final exception line carries a
specific kind is reported only as that kind; one CPython printed after 'Exception ignored in ...' (a
destructor, an exit handler) is none, an exception line the terminal wrapped keeps its next lines
(`detail["more"]`), and an IPython traceback whose bottom was cut is named by the class printed at its top, a Ray
task's by its wrapper line above it (`RayTaskError(Cls): ray::task() (pid=...)`).  An exception line another stream
glued onto a frame's source line ends its traceback when the real end is missing; VS Code's exception pane
(`Exception has occurred: Cls`, the message on the next line, frames innermost first) is a traceback too.
Call `finish()` at the end of input.
Repeats of the same (kind, text) - one per rank - are folded into the first
event (`detail["repeats"]`).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, NamedTuple

from diagnose.models import Event
from diagnose.parse.needles import any_of

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
    # torch >= 2.1 lists the GPU's processes from NVML (c10/cuda/CUDACachingAllocator.cpp, reportProcessMemoryInfo):
    # 'Process 853 has 136.79 GiB memory in use. Including non-PyTorch memory, this process has 2.94 GiB memory in use.'
    others = re.findall(r"Process (\d+) has " + _GIB + r" memory in use", line)
    if others:
        d["others_gib"] = round(sum(_gib(v, u) for _, v, u in others), 4)
        d["other_pids"] = [int(p) for p, _, _ in others]
    own = re.search(r"this process has " + _GIB + r" memory in use", line)
    if own:
        d["self_gib"] = _gib(own.group(1), own.group(2))
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
    for key, rx in (("seq", r"SeqNum=(\d+)"), ("numel_in", r"NumelIn=(\d+)"), ("numel_out", r"NumelOut=(\d+)")):
        v = re.search(rx, line)
        if v:
            d[key] = int(v.group(1))
    pg = re.search(r"PG ID (\d+)", line)
    if pg:
        d["pg"] = int(pg.group(1))
    return d


# bash's job report for SIGTERM and SIGHUP in the user's locale (glibc libc.mo; see signatures.yaml)
_TERMINATED = {"Terminated", "已终止", "終止", "종료됨", "Beendet", "Завершено", "Terminado", "Terminato"}
_HANGUP = {"Hangup", "挂起", "掛斷", "끊어짐", "Aufgelegt"}


def _signal_detail(m: re.Match[str], line: str) -> dict[str, Any]:
    num = re.search(r"(?:signal:?|Received|Signal)\s*(\d+)", line)
    name = re.search(r"SIG(HUP|INT|TERM|KILL|ABRT|BUS|SEGV|USR1|USR2|QUIT)", line)
    d: dict[str, Any] = {}
    if num:
        d["signal"] = int(num.group(1))
    if name:
        d["name"] = "SIG" + name.group(1)
    elif "KeyboardInterrupt" in line or line.lstrip().startswith("^C") or re.search(r"(?i)keyboard interrupt", line):
        d["name"] = "SIGINT"
    elif "Preemption detected" in line or "initiating graceful stop" in line:
        sig = {10: "SIGUSR1", 12: "SIGUSR2", 15: "SIGTERM"}.get(d.get("signal"), "a signal")
        d["name"] = f"{sig} (the scheduler's preemption: the trainer saved a checkpoint and stopped)"
    elif line.strip() in _TERMINATED:
        d["name"] = "SIGTERM"
    elif line.strip() in _HANGUP:
        d["name"] = "SIGHUP"
    elif line.rstrip().endswith("^C"):  # the terminal's echo of Ctrl-C glued to a progress bar
        d["name"] = "SIGINT"
    elif "closed by remote host" in line or "send disconnect" in line or "packet_write_wait" in line:
        d["name"] = "SIGHUP (the ssh session that ran the job dropped)"
    elif "CANCELLED AT" in line:
        why = re.search(r"DUE TO ([A-Z ]+?)\s*\*", line)
        d["name"] = "Slurm cancelled the job" + (f" ({why.group(1).lower()})" if why else "")
    return d


def _exitcode_detail(m: re.Match[str], line: str) -> dict[str, Any]:
    e = re.search(r"exitcode\s*:\s*(-?\d+)|exits with return code = (-?\d+)", line)
    return {"exitcode": int(e.group(1) or e.group(2))} if e else {}


def _stuck_detail(m: re.Match[str], line: str) -> dict[str, Any]:
    d: dict[str, Any] = {}
    s = re.search(r"stuck for (\d+) seconds", line)
    if s:
        d["stuck_s"] = int(s.group(1))
    r = re.search(r"Rank (\d+)\]", line)
    if r:
        d["rank"] = int(r.group(1))
    g = re.search(r"PG GUID \d+\((\w+)\)", line)
    if g:
        d["group"] = g.group(1)
    return d


def _dist_timeout_detail(m: re.Match[str], line: str) -> dict[str, Any]:
    t = re.search(r"(?:timed out after|wait timeout after)\s*(\d+)\s*ms", line)
    return {"timeout_s": int(t.group(1)) / 1000} if t else {}


def _closing_detail(m: re.Match[str], line: str) -> dict[str, Any]:
    return {"name": m.group(1) or m.group(2)}


def _shards_detail(m: re.Match[str], line: str) -> dict[str, Any]:
    return {"workers": int(m.group(1)), "n_shards": int(m.group(2))}


def _workers_detail(m: re.Match[str], line: str) -> dict[str, Any]:
    """The DataLoader's workers and the most torch suggests for the CPUs this process may use (absent when torch
    could not tell)."""
    return {"workers": int(m.group(1)), **({"suggested": int(m.group(2))} if m.group(2) else {})}


def _index_detail(m: re.Match[str], line: str) -> dict[str, Any]:
    return {"seconds": float(m.group(1))} if m.lastindex and m.group(1) else {}


def _flushes_detail(m: re.Match[str], line: str) -> dict[str, Any]:
    n = re.search(r"(\d+) (?:pytorch allocator cache flushes|CUDA memory allocation retries)|Cuda Malloc retires\s*:\s*(\d+)",
                  line)
    return {"flushes": int(n.group(1) or n.group(2))} if n else {}


_NATIVE = (("Segmentation fault", "SIGSEGV"), ("Aborted", "SIGABRT"), ("Floating point exception", "SIGFPE"),
           ("Illegal instruction", "SIGILL"), ("illegal memory access", "a CUDA illegal memory access"),
           ("misaligned address", "a CUDA misaligned address"), ("unspecified launch failure", "a CUDA launch failure"),
           ("illegal instruction", "a CUDA illegal instruction"),
           # bash's text in the user's locale (glibc libc.mo), see signatures.yaml native_crash
           ("段错误", "SIGSEGV"), ("區段錯誤", "SIGSEGV"), ("세그멘테이션 오류", "SIGSEGV"), ("Speicherzugriffsfehler", "SIGSEGV"),
           ("Erreur de segmentation", "SIGSEGV"), ("Violación de segmento", "SIGSEGV"), ("Ошибка сегментирования", "SIGSEGV"),
           ("已放弃", "SIGABRT"), ("terminate called after throwing", "SIGABRT"))
_NATIVE_CODES = {-11: "SIGSEGV", -6: "SIGABRT", -8: "SIGFPE", -4: "SIGILL", 139: "SIGSEGV", 134: "SIGABRT"}


def _native_detail(m: re.Match[str], line: str) -> dict[str, Any]:
    """What killed the process from native code: the signal (bash's strsignal text, faulthandler's line, a launcher's
    negative return code) or the CUDA kernel fault."""
    code = re.search(r"(?:exitcode\s*:|return code =|exit code:?)\s*(-?\d+)", line)
    if code and int(code.group(1)) in _NATIVE_CODES:
        return {"exitcode": int(code.group(1)), "name": _NATIVE_CODES[int(code.group(1))]}
    for text, name in _NATIVE:
        if text in line:
            return {"name": name}
    return {}


def _logged_detail(m: re.Match[str], line: str) -> dict[str, Any]:
    """An error a logger printed: its level word and its message (the text after the level and the logger's name)."""
    msg = next((g for g in m.groups() if g), "")
    level = re.search(r"ERROR|CRITICAL|FATAL|[Ff]atal error|Error", line)
    return {"message": msg.strip()[:2000], "level": level.group(0) if level else "ERROR"}


_DETAILS: dict[str, Any] = {
    "none": None, "oom": _oom_detail, "timeout": _timeout_detail, "signal": _signal_detail,
    "exitcode": _exitcode_detail, "stuck": _stuck_detail, "dist_timeout": _dist_timeout_detail,
    "closing": _closing_detail, "shards": _shards_detail, "workers": _workers_detail, "index_build": _index_detail,
    "flushes": _flushes_detail, "config": None, "native": _native_detail,
    "logged": _logged_detail,
}


class Signature(NamedTuple):
    kind: str
    pattern: re.Pattern[str]
    detail: Any  # (match, line) -> dict, or None
    confidence: str
    needles: tuple[str, ...]
    source: str
    cases: dict[str, list[str]]
    fold_kind: bool = False  # every line of this kind folds into its first event (chatty logs such as NCCL INFO)
    in_source: bool = False  # may match a traceback's source-code line (the message printed as code, not as output)
    missing: str | None = None  # for a partial signature: what the text lacks for certainty


def load_signatures(path: Path = Path(__file__).with_name("signatures.yaml")) -> list[Signature]:
    """The signature table (diagnose/parse/signatures.yaml), validated: it is code as data."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    out: list[Signature] = []
    for i, e in enumerate(yaml.load(path.read_text(encoding="utf-8"), Loader=loader)):
        where = f"{path.name}[{i}] ({e.get('kind')})"
        if e.get("detail", "none") not in _DETAILS:
            raise ValueError(f"{where}: unknown detail extractor {e.get('detail')!r}")
        if e.get("confidence", "certain") not in ("certain", "probable", "weak"):
            raise ValueError(f"{where}: confidence must be certain, probable or weak")
        if not e.get("needles") or not e.get("source"):
            raise ValueError(f"{where}: needs needles and source")
        flags = re.I if "ignorecase" in str(e.get("flags", "")) else 0
        out.append(Signature(e["kind"], re.compile(e["pattern"], flags), _DETAILS[e.get("detail", "none")],
                             e.get("confidence", "certain"), tuple(e["needles"]), e["source"], e.get("cases") or {},
                             e.get("fold") == "kind", bool(e.get("in_source", False)), e.get("missing")))
    return out


SIGNATURE_TABLE: list[Signature] = load_signatures()
KINDS: tuple[str, ...] = tuple(dict.fromkeys(s.kind for s in SIGNATURE_TABLE))
# kinds that are a run's ordinary output - warnings (Python's, loggers') and the notices normal runs print: they
# stop nothing, make nothing urgent, and a text of them alone is read as healthy
WARNING_KINDS: tuple[str, ...] = ("py_warning", "logged_warning")
ORDINARY_KINDS: tuple[str, ...] = (*WARNING_KINDS, "harmless_warning")
# (kind, pattern, detail function or None), first match wins per line - the view attach's follower reads
SIGNATURES: list[tuple[str, re.Pattern[str], Any]] = [(s.kind, s.pattern, s.detail) for s in SIGNATURE_TABLE]

# cheap prefilter: a line holding none of the needles cannot carry an event (tracebacks are tracked apart); it reads
# the lower-cased line (a trie of the needles, parse.needles: ~1 us a line, re.I took ~40), then each signature's
# pattern runs only where one of its own needles is in the line
_PREFILTER = any_of(n.lower() for s in SIGNATURE_TABLE for n in s.needles)
_SIG_NEEDLES = [frozenset(n.lower() for n in s.needles) for s in SIGNATURE_TABLE]
_ALL_NEEDLES = tuple(sorted(frozenset().union(*_SIG_NEEDLES)))
# Ray prints a remote task's exception as its wrapper with the cause's class: 'ray.exceptions.RayTaskError(OutOfMemoryError): ...'
_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Failure|Warning)?(?:\([A-Z]\w*\))?)(?::\s?(.*))?$")
_IPY_CONTEXT = re.compile(r"^\s*(?:-+>\s*)?\d+\s|^\s*$|^\s*\.\.\.\s*$|^<ipython-input-|^Cell In\[\d+\]")
# IPython 8's own frames: 'File ~\\proj\\dataset.py:101, in Batch.get_batch(self)' (the groups of _FRAME_AT's)
_IPY_FRAME = re.compile(r'^\s*File ([^"\n]+?\.py):(\d+), in ([\w.<>]+)')
# Ray prints a remote task's traceback under its wrapper's line, 'Traceback (most recent call last):' replaced by the
# task's name (ray python/ray/exceptions.py RayTaskError.__str__: f"{self.proctitle}() (pid={self.pid}, ip={self.ip}"):
# 'ray.exceptions.RayTaskError(OutOfMemoryError): ray::Worker.get_logprobs() (pid=26, ip=10.0.0.1, ...)'
_RAY_TOP = re.compile(r"^(?:[A-Za-z_]\w*\.)*Ray\w*Error\(([A-Z]\w*)\):\s*ray::\S+\(\)\s*\(pid=")
# VS Code's debugger (debugpy) pane, copied: 'Exception has occurred: AttributeError       (note: full exception
# trace is shown but execution is paused at: ...)', the message on the next line, then the frames innermost first
_VSCODE_TOP = re.compile(r"^Exception has occurred: ((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)\b")
# an exception line another stream wrote into the middle of a traceback, glued to a frame's source line
# ('    main(args)RuntimeError:  [!] NaN loss with decoder_loss.'): stderr and stdout interleaved in one capture
_GLUED = re.compile(r"[)\]]((?:[A-Za-z_]\w{0,60}\.){0,8}[A-Z]\w{0,60}(?:Error|Exception)):\s+(\S.{0,400})$")
_IPYTHON_TOP = re.compile(r"^\s*((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Interrupt|Exit))\s{2,}Traceback \(most recent call last\)")
_CLASS_ALONE = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Interrupt|Exit|Iteration|Quit|Failure|Warning)$")
_FRAME = re.compile(r"^\s+|^\s*File \"|^\s*\^+\s*$|^During handling|^The above exception|^\s*$|^\s*\[Previous line repeated")
# a path after 'File "' may hold spaces ('C:\Program Files\Anaconda3\lib\...'); without the quote it may not
_FRAME_AT = re.compile(r'^\s*(?:File ")?((?<=File ")[^"\n]{1,400}?\.py|[^"\s]*\.py|<[^>]+>)", line (\d+), in (\S+)')
# a line that cannot continue an exception message wrapped by the terminal (rich's traceback wraps at the console
# width): indented code, a new traceback or chain, another exception, a logger's or launcher's own line
_NOT_CONT = re.compile(r"^\s|^Traceback|^During handling|^The above exception|^[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit"
                       r"|Warning|Failure)\b|^(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL|FATAL|NOTICE|TRACE)\b|^[\[({<]|^\d{4}[-/]|^[WEIF]\d{4} |^[-=*#~]{3}|^\W*$")
_WRAPPED_AT = 60  # an exception line this long may have been wrapped by the terminal


_HANDLED_WARNING = re.compile(r"(?:^|[\s\]|:(-])WARN(?:ING)?\b.{0,200}?\b(?:not available|will not be (?:enabled|used)|"
                              r"falling back|fall back|skipping|ignored|disabled)\b")


def _may_go_on(line: str) -> bool:
    """An exception line whose message may continue on the next lines: long enough to have been wrapped, or ending in
    its colon (DeepSpeed's 'ZeRORuntimeException: ' puts the message on the lines after)."""
    t = line.strip()
    return len(t) >= _WRAPPED_AT or t.endswith(":")


# an exception line printed on its own (the paste kept only the last line of a traceback)
_BARE_EXC = re.compile(r"^(?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Interrupt)(?::\s.*)?$"
                       r"|^(?:[a-z_]\w*\.)+[A-Z][a-z]\w*:\s\S.*$")  # module.Class: message (pkg_resources.DistributionNotFound)


def _work(d: dict[str, Any], line: int) -> dict[str, Any]:
    return {"rank": d.get("rank"), "seq": d.get("seq"), "op": d.get("op"), "numel_in": d.get("numel_in"),
            "pg": d.get("pg"), "line": line}


# rich's traceback box (rich/traceback.py): '│ /path/file.py:123 in func │', its function alone on the next box line
# when the path is long, and the current line marked '❱'
_RICH_FRAME = re.compile(r"^│ (\S{1,400}?\.py):(\d{1,7}) in ?(\S{0,200}?)\s{0,400}│\s*$")
_RICH_CELL = re.compile(r"^│ ([\w.<>]{1,200})\s{0,400}│\s*$")
_RICH_CODE = re.compile(r"^│ ❱ ?\d{1,7} ?│?(.{0,400}?)\s{0,400}│\s*$")
_LISTED = re.compile(r"'(?:[^'\\\n]|\\.){0,4000}'|\"(?:[^\"\\\n]|\\.){0,4000}\"")


def _listed_lines(line: str) -> list[str]:
    """The text lines of a list of strings printed with repr() ("['a\\n', 'b\\n']"), a cut list's complete items."""
    import ast

    out: list[str] = []
    for m in _LISTED.finditer(line[:200_000]):
        try:
            item = ast.literal_eval(m.group(0))
        except (ValueError, SyntaxError):
            continue
        out.extend(x for x in str(item).split("\n") if x.strip())
    return out


class EventScanner:
    def __init__(self, file: str | None = None):
        self.file = file
        self.events: list[Event] = []
        self._seen: dict[tuple[str, str], Event] = {}
        self._in_tb = False
        self._tb_start = 0
        self._lines_with_event: set[int] = set()
        self._frames: list[dict[str, Any]] = []
        self._last_frame_line = 0
        self._last_exc: dict[str, Any] | None = None  # the last exception line, for chained tracebacks
        self._causes_of_last: list[dict[str, Any]] = []
        self._causes: list[dict[str, Any]] = []  # set by 'The above exception was the direct cause ...'
        self._rank: int | None = None  # rank of the line being read
        self._cont: list[Any] | None = None  # [event, last line] of an exception line whose message may go on
        # CPython's 'Exception ignored in: <function X.__del__>' / '... in atexit callback': the traceback after it is
        # cleanup the interpreter reported and went on from (a destructor, an exit handler), never what stopped the run
        self._ignored_next = False
        self._tb_ignored = False
        self._tb_class: str | None = None  # the class IPython printed above the traceback
        self._tb_top: str | None = None  # Ray's wrapper line above a remote traceback (it names the cause's class)
        self._vscode: Event | None = None  # the exception VS Code's pane named; its frames follow, innermost first
        self._glued: tuple[int, str] | None = None  # an exception line glued to a source line of this traceback
        self._prev = ""  # the last non-blank line read
        self._wrapped: tuple[int, str] | None = None  # a frame line the terminal cut at its width ('File "a.py", line 15')

    def _add(self, kind: str, lineno: int, text: str, detail: dict[str, Any] | None = None, fold_kind: bool = False) -> None:
        text = text.strip()[:500]
        key = (kind, "") if fold_kind else (kind, re.sub(r"\d+", "#", text)[:200])
        prev = self._seen.get(key)
        rank = self._rank if self._rank is not None else (detail or {}).get("rank")
        if prev is not None:
            prev.detail["repeats"] = prev.detail.get("repeats", 1) + 1
            if rank is not None:  # the same message from several ranks: keep who said it, in order
                ranks = prev.detail.setdefault("ranks", [prev.detail["rank"]] if "rank" in prev.detail else [])
                if rank not in ranks:
                    ranks.append(rank)
            if detail and "seq" in detail:  # watchdog reports: keep each rank's collective (SeqNum, op, size)
                per = prev.detail.setdefault("per_rank", [_work(prev.detail, prev.line)])
                per.append(_work({**detail, "rank": rank}, lineno))
            self._lines_with_event.add(lineno)
            return
        detail = dict(detail or {})
        if rank is not None:
            detail["rank"] = rank
        ev = Event(kind=kind, line=lineno, text=text, file=self.file, detail=detail)
        self._seen[key] = ev
        self.events.append(ev)
        self._lines_with_event.add(lineno)

    def feed(self, lineno: int, line: str, rank: int | None = None) -> None:
        """One text line (paste prefixes stripped); `rank`: the rank its `[rankN]:` tag named."""
        if line.startswith(("['Traceback (most recent call last)", '["Traceback (most recent call last)')):
            # a traceback printed as the list traceback.format_exception() returns ("['Traceback ...\\n', '  File
            # ...\\n', "TypeError: ...\\n"]"): its lines are read as if printed
            for sub in _listed_lines(line):
                self.feed(lineno, sub, rank)
            return
        self._rank = rank
        low = line.lower()
        if _PREFILTER.search(low):
            # inside a traceback an indented line is source code ('raise ValueError("DeepSpeed is not ...")'):
            # the message it quotes is not what happened, the exception line below it is
            code = self._in_tb and line[:1] in (" ", "\t") and not _FRAME_AT.match(line)
            present = {n for n in _ALL_NEEDLES if n in low}
            for sig, needles in zip(SIGNATURE_TABLE, _SIG_NEEDLES):
                if (code and not sig.in_source) or present.isdisjoint(needles):
                    continue
                m = sig.pattern.search(line)
                if m:
                    detail = sig.detail(m, line) if sig.detail else {}
                    if sig.confidence != "certain":
                        detail["confidence"] = sig.confidence
                        if sig.missing:
                            detail["missing"] = sig.missing
                    self._add(sig.kind, lineno, line, detail, sig.fold_kind)
                    break
        self._traceback(lineno, line)
        if line.strip():
            self._prev = line

    def _traceback(self, lineno: int, line: str) -> None:
        if self._cont is not None:
            ev, last = self._cont
            more = ev.detail.get("more", [])
            # a message that starts on the next line keeps its indentation ('RuntimeError: ' then the text of
            # multiprocessing's bootstrapping error, indented as in its source)
            empty = ev.detail.get("indented_message", not more) and ev.text.rstrip().endswith(":")
            indented = empty and line[:1] in (" ", "\t") and bool(line.strip()) and not _FRAME_AT.match(line)
            if lineno == last + 1 and len(more) < 3 and (indented or not _NOT_CONT.match(line)):
                if indented:
                    ev.detail["indented_message"] = True
                more.append(line.strip()[:300])  # the message goes on: the terminal wrapped it
                ev.detail["more"], self._cont = more, [ev, lineno]
                return
            self._cont = None
        if "above exception" in line and ("direct cause" in line or "During handling" in line):
            # a chained exception follows: the one just printed is its cause
            self._causes = self._causes_of_last + ([self._last_exc] if self._last_exc else [])
            return
        if line.startswith("Exception ignored in"):
            self._ignored_next = True
            return
        if "Traceback (most recent call last)" in line:
            self._in_tb = True
            self._tb_start = lineno
            self._frames = []
            # a logger's warning that something optional is off, its traceback printed as the record's exc_info
            # (xformers: 'A matching Triton is not available, some optimizations will not be enabled' + the
            # ModuleNotFoundError): handled, the program went on
            self._tb_ignored = self._ignored_next or bool(_HANDLED_WARNING.search(self._prev))
            self._ignored_next = False
            # IPython/Jupyter name the exception class at the top: 'OutOfMemoryError    Traceback (most recent ...)'
            top = _IPYTHON_TOP.match(line)
            self._tb_class, self._tb_top, self._glued = (top.group(1) if top else None), None, None
            return
        if line.startswith("Exception has occurred: ") and not self._in_tb:
            vm = _VSCODE_TOP.match(line)
            if vm:
                self._add("traceback", lineno, vm.group(1) + ":", {"exception": vm.group(1), "traceback_line": lineno,
                                                                   "frames": [], "stack": [], "debugger_pane": True})
                if self.events and self.events[-1].line == lineno:
                    self._vscode = self.events[-1]
                    self._cont = [self._vscode, lineno]  # its message is the next line
                return
        if self._vscode is not None and not self._in_tb:
            fm = _FRAME_AT.match(line)
            if fm:  # innermost first: each frame read goes above the ones before it
                d = self._vscode.detail
                if len(d["frames"]) >= 40:
                    return
                d["frames"].insert(0, {"file": fm.group(1), "line": int(fm.group(2)), "func": fm.group(3), "at": lineno})
                d["stack"].insert(0, f"{fm.group(1)} {fm.group(3)}")
                return
            if line[:1] in (" ", "\t"):
                return  # a frame's source line
            self._vscode = None
        if "ray::" in line and not self._in_tb and _RAY_TOP.match(line.strip()):
            self._in_tb, self._tb_start, self._frames, self._tb_ignored = True, lineno, [], False
            self._tb_top, self._tb_class = line.strip(), None
            return
        if line[:1] in ("│", "╰") and (self._in_tb or line.startswith("│ /")) and self._rich_box(lineno, line):
            return
        fm = _FRAME_AT.match(line) or (_IPY_FRAME.match(line) if "File " in line else None)
        at = lineno
        if fm is None and self._wrapped is not None:
            # the rest of a frame line the terminal wrapped ('...aligner.py", line 15' + '3, in convert_sharegpt')
            w_line, w_text = self._wrapped
            if lineno == w_line + 1 and len(w_text) + len(line) < 1000:
                fm, at = _FRAME_AT.match(w_text + line.strip()), w_line
        self._wrapped = (lineno, line.rstrip()) if fm is None and 'File "' in line and len(line) < 600 else None
        if fm:
            if not self._in_tb:  # a paste that starts inside a traceback: its frames count all the same
                self._in_tb, self._tb_start, self._frames = True, lineno, []
            self._frames.append({"file": fm.group(1), "line": int(fm.group(2)), "func": fm.group(3), "at": at})
            self._last_frame_line = lineno
            return
        if not self._in_tb:
            if _BARE_EXC.match(line) and lineno not in self._lines_with_event:
                exc = line.split(":", 1)[0].strip()
                self._add("traceback", lineno, line.strip(), {"exception": exc, "traceback_line": None, "frames": [],
                                                              "standalone": True})
                if _may_go_on(line) and self.events and self.events[-1].line == lineno:
                    self._cont = [self.events[-1], lineno]
            return
        if self._tb_class and _IPY_CONTEXT.match(line):
            return  # IPython prints each frame's source context between frames ('--> 101 image = next(it)')
        if _FRAME.match(line):
            code = line.strip()
            if ("Error:" in code or "Exception:" in code) and not code.startswith(("raise ", "except ")):
                gm = _GLUED.search(code)
                if gm:
                    self._glued = (lineno, f"{gm.group(1)}: {gm.group(2)}")
            if self._frames and code and lineno == self._last_frame_line + 1 and "code" not in self._frames[-1] \
                    and not code.startswith(("^", "~")):
                self._frames[-1]["code"] = code[:200]  # the frame's own source line ('with args.main_process_first(')
            return
        m = _EXC_LINE.match(line.strip())
        if m and m.group(2) is None and ":" not in line and not _CLASS_ALONE.match(line.strip()):
            m = None  # a bare word is an exception line only when it is named like one ('StopIteration', 'bdb.BdbQuit')
        if not m:
            if self._frames and lineno == self._last_frame_line + 1 and "code" not in self._frames[-1] \
                    and line.strip() and not line.strip().startswith(("^", "~")):
                self._frames[-1]["code"] = line.strip()[:200]  # a paste that lost the indentation of the source line
                return
            if not self._frames or lineno - self._last_frame_line > 3:  # the traceback is over, its end not printed
                self._cut()
            return
        self._in_tb, self._tb_class, self._tb_top, self._glued = False, None, None, None
        if self._tb_ignored:  # an exception the interpreter ignored: not a crash
            self._tb_ignored, self._causes = False, []
            return
        causes, self._causes = self._causes, []
        self._last_exc, self._causes_of_last = {"line": lineno, "text": line.strip()[:300]}, causes
        if lineno in self._lines_with_event:
            # a signature claimed the exception line (KeyboardInterrupt, an OOM...): its event keeps the frames,
            # which say where the process was when it happened
            for ev in reversed(self.events):
                if ev.line == lineno and "frames" not in ev.detail and self._frames:
                    ev.detail["frames"] = self._frames[-6:]
                    break
            return
        detail: dict[str, Any] = {"exception": m.group(1), "traceback_line": self._tb_start, "frames": self._frames[-4:],
                                  "stack": [f"{f['file']} {f['func']}" for f in self._frames[-40:]]}
        if causes:
            detail["causes"] = causes  # outermost first: what led, link by link, to this exception
        self._add("traceback", lineno, line.strip(), detail)
        if _may_go_on(line) and self.events and self.events[-1].line == lineno:
            self._cont = [self.events[-1], lineno]

    def _rich_box(self, lineno: int, line: str) -> bool:
        """A line of rich's traceback box (rich.traceback, which accelerate installs whenever rich is importable):
        '│ /path/file.py:123 in func │' is a frame (the function may wrap onto the next box line), '│ ❱ 123 │ code │'
        its current line; the other box lines (context, blanks, the bottom border) are read past.  The exception line
        follows the box."""
        fm = _RICH_FRAME.match(line)
        if fm:
            if not self._in_tb:  # a paste that starts inside the box
                self._in_tb, self._tb_start, self._frames = True, lineno, []
            self._frames.append({"file": fm.group(1), "line": int(fm.group(2)), "func": fm.group(3) or "", "at": lineno})
        elif self._frames and not self._frames[-1]["func"] and lineno == self._last_frame_line + 1 and _RICH_CELL.match(line):
            self._frames[-1]["func"] = _RICH_CELL.match(line).group(1)  # the function, wrapped onto the next line
        elif self._frames and (cm := _RICH_CODE.match(line)):
            self._frames[-1]["code"] = re.sub(r"^[\s│]+", "", cm.group(1))[:200]
        self._last_frame_line = lineno  # the box goes on: the traceback is not cut
        return True

    def _cut(self) -> None:
        """A traceback whose exception line never came (the excerpt or the capture ends inside it)."""
        self._in_tb = False
        if self._tb_ignored:
            self._tb_ignored = False
            return
        if self._tb_class:  # the paste lost the bottom of an IPython traceback, but its top named the class
            self._add("traceback", self._tb_start, self._tb_class,
                      {"exception": self._tb_class, "traceback_line": self._tb_start, "frames": self._frames[-4:],
                       "stack": [f"{f['file']} {f['func']}" for f in self._frames[-40:]], "ipython_top": True})
            self._tb_class = None
            return
        if self._glued is not None:  # the exception line was printed into the traceback, glued to a source line
            at, text = self._glued
            self._glued = None
            self._add("traceback", at, text, {"exception": text.split(":", 1)[0], "traceback_line": self._tb_start,
                                              "frames": self._frames[-4:],
                                              "stack": [f"{f['file']} {f['func']}" for f in self._frames[-40:]],
                                              "glued": True})
            return
        if self._tb_top:  # the paste lost the bottom of a Ray task's traceback; the wrapper's line above named the cause
            self._add("traceback", self._tb_start, self._tb_top,
                      {"exception": self._tb_top.split(":", 1)[0], "traceback_line": self._tb_start,
                       "frames": self._frames[-4:], "stack": [f"{f['file']} {f['func']}" for f in self._frames[-40:]],
                       "header_only": True})
            self._tb_top = None
            return
        if self._frames:
            last = self._frames[-1]
            self._add("traceback_cut", last["at"], f'File "{last["file"]}", line {last["line"]}, in {last["func"]}',
                      {"frames": self._frames[-4:], "traceback_line": self._tb_start, "confidence": "probable",
                       "stack": [f"{f['file']} {f['func']}" for f in self._frames[-40:]]})
        else:
            self._add("traceback_cut", self._tb_start, "Traceback (most recent call last): (cut before its first frame)",
                      {"frames": [], "traceback_line": self._tb_start, "confidence": "probable"})

    def finish(self) -> None:
        """End of input: a traceback still open was cut."""
        if self._in_tb:
            self._cut()
