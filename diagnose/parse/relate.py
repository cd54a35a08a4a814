"""Which of several input files belong to one job, and which are unrelated runs given together.

Contract: `group_inputs(paths) -> Grouping(groups, reasons)`.
- Each capture's header is read from its first 256 KiB: the `run sh:` line (the launch: torchrun's options
  and the training argv), the `swift.__version__` line and the `output_dir:` line (ms-swift's run folder,
  `v0-YYYYMMDD-HHMMSS`, which every node of one job shares: rank 0 broadcasts it).
- Two captures are of one job when what both show agrees: the same training argv, the same torchrun
  options apart from `--node_rank`, the same version, the same run folder.  One node's capture per node of a
  multi-node job is one job; two launches of different commands, versions or start times are not.
- Inputs without a header (an excerpt, logging.jsonl, args.json, a folder, stdin) cannot be told apart:
  they go with the group of a capture in the same folder, else with the first group.
- `groups` keep the order of the inputs; `reasons[i]` says why group i+1 is apart from the groups before
  it ("different launch commands", "ms-swift 4.6.0 vs 3.8.1", "different run folders: …").
Reads only the heads of the files; never parses a whole log.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

_HEAD_BYTES = 256 * 1024
_RUN_SH = re.compile(r"run sh: `([^`\n]*)`")
_VERSION = re.compile(r"swift\.__version__: (\S+)")
_OUTPUT_DIR = re.compile(r"\boutput_dir: (\S+)")
_PER_NODE = {"--node_rank", "--node-rank"}


@dataclass
class Header:
    path: str
    launcher: tuple[str, ...] | None = None  # torchrun's options without --node_rank
    argv: tuple[str, ...] | None = None  # the training command's flags
    version: str | None = None
    output_dir: str | None = None

    @property
    def known(self) -> bool:
        return self.argv is not None or self.version is not None or self.output_dir is not None


@dataclass
class Grouping:
    groups: list[list[str]] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)


def _split(cmd: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    toks = cmd.split()
    at = next((i for i, t in enumerate(toks) if t.endswith(".py") and "/swift/cli/" in t.replace("\\", "/")
               or t.endswith("/sft.py") or t.endswith("/rlhf.py") or t.endswith("/pt.py")), None)
    if at is None:
        return (), tuple(toks)
    launcher, skip = [], False
    for t in toks[:at]:
        if skip:
            skip = False
            continue
        if t in _PER_NODE:
            skip = True
            continue
        if t.split("=", 1)[0] in _PER_NODE:
            continue
        launcher.append(t)
    return tuple(launcher[1:]), tuple(toks[at + 1:])  # the interpreter's path differs between machines


def read_header(path: str) -> Header:
    h = Header(path)
    p = Path(path)
    if path == "-" or not p.is_file():
        return h
    try:
        with p.open("rb") as fh:
            head = fh.read(_HEAD_BYTES).decode("utf-8", "replace")
    except OSError:
        return h
    m = _RUN_SH.search(head)
    if m:
        h.launcher, h.argv = _split(m.group(1))
    m = _VERSION.search(head)
    if m:
        h.version = m.group(1)
    m = _OUTPUT_DIR.search(head)
    if m:
        h.output_dir = m.group(1)
    return h


def _apart(a: Header, b: Header) -> str | None:
    """Why two captures are not of one job, or None when nothing they both show disagrees."""
    if a.argv is not None and b.argv is not None and a.argv != b.argv:
        return "different launch commands"
    if a.launcher is not None and b.launcher is not None and a.launcher != b.launcher:
        return "different launcher options (torchrun)"
    if a.version and b.version and a.version != b.version:
        return f"ms-swift {a.version} vs {b.version}"
    if a.output_dir and b.output_dir and a.output_dir != b.output_dir:
        return f"different run folders (start times): {Path(a.output_dir).name} vs {Path(b.output_dir).name}"
    return None


def group_inputs(paths: list[str]) -> Grouping:
    heads = [read_header(p) for p in paths]
    groups: list[list[Header]] = []
    reasons: list[str] = []
    loose: list[Header] = []
    for h in heads:
        if not h.known:
            loose.append(h)
            continue
        why = None
        for g in groups:
            why = _apart(g[0], h)
            if why is None:
                g.append(h)
                break
        else:
            if groups:
                reasons.append(why or "")
            groups.append([h])
    if not groups:
        return Grouping([list(paths)], [])
    for h in loose:
        parent = Path(h.path).parent if h.path != "-" else None
        home = next((g for g in groups if parent is not None and any(Path(x.path).parent == parent for x in g)), groups[0])
        home.append(h)
    order = {p: i for i, p in enumerate(paths)}
    out = [sorted((h.path for h in g), key=lambda p: order[p]) for g in groups]
    return Grouping(out, reasons)


__all__ = ["Header", "Grouping", "read_header", "group_inputs"]
