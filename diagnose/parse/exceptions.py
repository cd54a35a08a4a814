"""What an exception means, from the exception: the last traceback as a typed object, classified by a table.

Contract:
- `TypedException(cls, message, module, function, line, chain, rank)`: the exception class (its last dotted part),
  its message, the raising frame (the last `File "...", line N, in FUNC` before the exception line: its path and
  function), the chained exceptions before it (root cause first), the rank that printed it and every frame shown
  (`stack`: an entry's `via` is searched there - the DataLoader anywhere in the stack means the data pipeline).
  An entry with `reports_worker: true` is a launcher's summary that a worker failed (torchrun's ChildFailedError,
  the CalledProcessError of torch.distributed.launch and accelerate launch): `reports_worker(exc)`
  says so, and the worker's own exception, earlier in the log, is the one to read.
  `typed_exception(event)` builds it from a `traceback` event of parse.events.
- `MEANINGS`: the entries of `exceptions.yaml` (derived from the frameworks' sources: argument classes and
  validators -> config, datasets/pyarrow/json/media decoders -> data_loading, the allocator -> oom,
  torch.distributed/NCCL/gloo -> nccl, ...; each with the class names, the raising module and function and the
  message it matches, its confidence, a one-line explanation, the source that raises it and its own cases).
- `classify(exc) -> Meaning | None`: the first entry matching the exception itself (for an error line a logger
  printed, `logged=True`: the entries keyed on a message, whatever class they name); for a chain, the root cause is
  tried first and a specific entry (one that names a class or a message) beats a fallback keyed on the raising
  module alone, whichever link it matched. Entries of `tier: shape` (the wording of a message no other entry
  explains: "must be", "is not supported", "contains NaN"...) are tried after both, on every link; entries of
  `tier: lean` (the exception's class and the frames it passed through, weak: what such a crash most often is)
  last of all, on the raised exception only.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Meaning:
    id: str
    category: str
    confidence: str  # certain | probable | weak (shape tier)
    explain: str
    exceptions: tuple[str, ...] = ()
    module: re.Pattern[str] | None = None
    function: re.Pattern[str] | None = None
    message: re.Pattern[str] | None = None
    source: str = ""
    cases: dict[str, Any] = field(default_factory=dict)
    tier: str = ""  # '' (the table), 'shape' (a message's wording) or 'lean' (its class and frames): tried in that order
    via: re.Pattern[str] | None = None  # searched in every frame of the traceback ('FILE FUNC'), not only the raising one
    reports_worker: bool = False  # a launcher's summary that a worker failed: the worker's own exception says why

    @property
    def shape(self) -> bool:
        """Read only when no specific entry and no module fallback matched (tier shape or lean)."""
        return self.tier != ""

    @property
    def generic(self) -> bool:
        """A fallback keyed on where the exception was raised, not on what it says."""
        return not self.exceptions and self.message is None


@dataclass
class TypedException:
    cls: str
    message: str
    module: str | None = None  # path of the raising frame
    function: str | None = None
    line: int | None = None  # the exception line in the log
    chain: list[TypedException] = field(default_factory=list)  # causes, root first
    rank: int | None = None
    qualified: str = ""
    stack: tuple[str, ...] = ()  # every frame the traceback showed, outermost first, as 'FILE FUNC'
    logged: bool = False  # an error line a logger printed (no class, no frames): only entries keyed on a message match

    def describe(self) -> str:
        mod = re.sub(r"^.*?(?:site-packages|dist-packages)/", "", self.module) if self.module else None
        if not self.cls:  # a traceback cut before its exception line
            return f"a traceback cut in {mod}" + (f", {self.function}" if self.function else "") if mod else \
                "a traceback cut before its exception line"
        where = f" (raised in {mod}" + (f", {self.function}" if self.function else "") + ")" if mod else ""
        return f"{self.qualified or self.cls}: {self.message}".rstrip(": ") + where


_LOADED: list[Meaning] | None = None


def load_meanings(path: Path | None = None) -> list[Meaning]:
    import yaml

    p = path or Path(__file__).with_name("exceptions.yaml")
    if not p.is_file():
        return []
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    out: list[Meaning] = []
    for e in yaml.load(p.read_text(encoding="utf-8"), Loader=loader) or []:
        exc = e.get("exception") or []
        exc = [exc] if isinstance(exc, str) else list(exc)
        out.append(Meaning(
            id=e["id"], category=e["category"], confidence=e.get("confidence", "probable"),
            explain=str(e.get("explain", "")).strip(), exceptions=tuple(x.split(".")[-1] for x in exc),
            module=re.compile(e["module"]) if e.get("module") else None,
            function=re.compile(e["function"]) if e.get("function") else None,
            message=re.compile(e["message"]) if e.get("message") else None,
            source=str(e.get("source", "")), cases=e.get("cases") or {}, tier=_tier(e),
            via=re.compile(e["via"]) if e.get("via") else None, reports_worker=bool(e.get("reports_worker"))))
    return out


def meanings() -> list[Meaning]:
    global _LOADED
    if _LOADED is None:
        _LOADED = load_meanings()
    return _LOADED


def _matches(m: Meaning, exc: TypedException) -> bool:
    if exc.logged:  # its message read as an exception's, whatever class the entry names; never an entry without one
        if m.message is None or m.reports_worker:  # nor a launcher's summary, whose message only qualifies its class
            return False
    elif m.exceptions and exc.cls not in m.exceptions:
        return False
    if m.module is not None and not (exc.module and m.module.search(exc.module.replace("\\", "/"))):
        return False
    if m.function is not None and not (exc.function and m.function.search(exc.function)):
        return False
    if m.message is not None and not m.message.search(exc.message[:2000]):
        return False
    if m.via is not None and not any(m.via.search(f.replace("\\", "/")) for f in exc.stack):
        return False
    return True


def _tier(e: dict[str, Any]) -> str:
    t = e.get("tier") or ""
    if t not in ("", "shape", "lean"):
        raise ValueError(f"exceptions.yaml {e.get('id')}: tier must be shape or lean, not {t!r}")
    return t


def classify_one(exc: TypedException, shape: bool = False, tier: str | None = None) -> Meaning | None:
    """The first entry of the given tier matching: the table's, with shape=True the message-shape tier, or the one
    named by `tier`."""
    want = tier if tier is not None else ("shape" if shape else "")
    for m in meanings():
        if m.tier == want and _matches(m, exc):
            return m
    return None


def classify(exc: TypedException) -> tuple[Meaning, TypedException] | None:
    """The meaning of a crash: root cause first; a specific entry on any link beats a module-only fallback."""
    links = [*exc.chain, exc]
    fallback = None
    for link in links:
        m = classify_one(link)
        if m is None:
            continue
        if not m.generic:
            return m, link
        fallback = fallback or (m, link)
    if fallback is not None:
        return fallback
    for link in links:
        m = classify_one(link, shape=True)
        if m is not None:
            return m, link
    m = None if exc.logged else classify_one(exc, tier="lean")  # what such a crash most often is: class and frames
    return (m, exc) if m is not None else None


def reports_worker(exc: TypedException) -> bool:
    """A launcher's report that a worker failed, not a worker's own exception (the entry that explains it says so)."""
    got = classify(exc)
    return got is not None and got[0].reports_worker


_TWICE = re.compile(r"^((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception))\1$")
_EXC = re.compile(r"^([A-Za-z_][\w.]*)(?:\(([A-Z]\w*)\))?(?::\s?(.*))?$", re.S)


def parse_exception_line(text: str) -> tuple[str, str, str]:
    """'torch.distributed.DistBackendError: NCCL error ...' -> ('DistBackendError', message, qualified name); Ray's
    'ray.exceptions.RayTaskError(OutOfMemoryError): ...' is the remote task's exception, its class in parentheses."""
    m = _EXC.match(text.strip())
    if not m:
        return text.strip()[:80], "", text.strip()[:80]
    qual = m.group(1) + (f"({m.group(2)})" if m.group(2) else "")
    msg = (m.group(3) or "").strip()
    twice = _TWICE.match(qual)
    if twice:  # two ranks wrote the same line at once, character runs interleaved: 'KeyErrorKeyError: : 'x''
        qual = twice.group(1)
        msg = msg[1:].strip() if msg.startswith(":") else msg
    return m.group(2) or qual.split(".")[-1], msg, qual


def typed_exception(event: Any) -> TypedException:
    cls, msg, qual = parse_exception_line(event.text)
    if event.detail.get("more"):  # a message the terminal wrapped onto the next lines
        msg = " ".join([msg, *event.detail["more"]]).strip()
    frames = event.detail.get("frames") or []
    last = frames[-1] if frames else {}
    chain = []
    for c in event.detail.get("causes") or []:
        c_cls, c_msg, c_qual = parse_exception_line(c.get("text", ""))
        chain.append(TypedException(c_cls, c_msg, line=c.get("line"), qualified=c_qual))
    if not msg and cls == "AssertionError" and str(last.get("code", "")).startswith("assert "):
        msg = last["code"]  # a bare assert says what it checked only in its source line ('assert args.bs % n == 0')
    stack = tuple(event.detail.get("stack") or (f"{f.get('file')} {f.get('func')}" for f in frames))
    return TypedException(cls, msg, last.get("file"), last.get("func"), event.line, chain,
                          event.detail.get("rank"), qual, stack)


__all__ = ["Meaning", "TypedException", "meanings", "load_meanings", "classify", "classify_one", "typed_exception",
           "parse_exception_line", "reports_worker"]
