"""Read the per-rank files of swiftdoc's in-trainer probe (`<run dir>/swiftdoc-probe/rank<N>.jsonl`).

Contract:
- `probe_folders(inputs, run=None) -> list[Path]`: where a run's probe files may be, in order: an input that is
  the probe folder itself, `<input dir>/swiftdoc-probe`, `<newest v<N>-<date> folder of it>/swiftdoc-probe`, the
  same beside an input file, and the log's own `output_dir` only when it lies below that log's folder (a path a
  log names is never followed elsewhere).
- `read_probe(folder) -> ProbeSet | None`: None when the folder holds no `rank<N>.jsonl`.  Never raises for what
  is in the files: a cut last line, a line that is not JSON, a value of the wrong type, a rank file missing, a
  format this swiftdoc does not read, files of two runs in one folder (told apart by the order of a file's
  segments, the launch settings and the start times; the newest run is read) each become one line in
  `ProbeSet.notes`.
- `load_probe(run, inputs) -> ProbeSet | None`: the first folder that holds probe files, read, stored on
  `run.probe`.
- Within a rank every duration is that rank's own (monotonic clock); ranks are matched by step number, never by
  their wall clocks.  Wall clocks (`start_time`) only order runs, and the note says so when they are from several
  nodes.
The probe that writes these files is `diagnose/probe_plugin/swiftdoc_probe.py` (its FORMAT is the one read here).
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from diagnose.errors import InputError
from diagnose.parse.bounded import check_size, is_regular

FORMAT = 1  # the probe file format this module reads (swiftdoc_probe.FORMAT)
FOLDER = "swiftdoc-probe"
_RANK_FILE = re.compile(r"^rank(\d{1,6})\.jsonl$")
COLUMNS = ("step", "mono", "wall_s", "data_s", "dispatch_s", "host_s", "sync_s", "fwd_s", "bwd_s", "opt_s", "micro", "samples",
           "tokens", "rss_gib", "alloc_gib", "reserved_gib", "peak_gib", "gpu_fb_s", "gpu_opt_s")
_SAME_RUN_S = 600.0  # ranks of one launch start within this many seconds of each other


@dataclass
class RankProbe:
    rank: int
    file: str
    header: dict[str, Any]
    cols: dict[str, np.ndarray]  # COLUMNS as float arrays, nan where a step did not record the value
    marked: np.ndarray  # bool per step: a save or an evaluation ran inside the step's interval
    ended: bool  # the rank wrote its end line (training ended; a killed rank has none)

    @property
    def steps(self) -> int:
        return int(len(self.cols["step"]))

    @property
    def node(self) -> str | None:
        v = self.header.get("node")
        return str(v) if v is not None else None

    @property
    def loader(self) -> str | None:
        v = self.header.get("loader")
        return str(v) if v is not None else None

    @property
    def cuda(self) -> bool:
        return str(self.header.get("device") or "").startswith("cuda")


@dataclass
class ProbeSet:
    folder: str
    ranks: list[RankProbe] = field(default_factory=list)  # sorted by rank
    world_size: int | None = None
    notes: list[str] = field(default_factory=list)
    cache: dict[str, Any] = field(default_factory=dict)  # computations over it (features.probe.summary)


# ----------------------------------------------------------------------------- finding the folder


def probe_folders(inputs: list[str], run: Any = None) -> list[Path]:
    from diagnose.parse.sources import newest_version_dir

    out: list[Path] = []

    def add(p: Path | None) -> None:
        if p is not None and p not in out:
            out.append(p)

    for raw in inputs:
        if not raw or raw == "-":
            continue
        p = Path(raw)
        if p.name == FOLDER and p.is_dir():
            add(p)
            continue
        base = p if p.is_dir() else p.parent
        add(base / FOLDER)
        v = newest_version_dir(base)
        add(v / FOLDER if v is not None else None)
    od = getattr(run, "output_dir", None) if run is not None else None
    if od:
        for raw in inputs:
            if not raw or raw == "-":
                continue
            base = Path(raw) if Path(raw).is_dir() else Path(raw).parent
            cand = Path(od) if Path(od).is_absolute() else base / od
            try:
                inside = cand.resolve().is_relative_to(base.resolve())
            except (OSError, ValueError):
                inside = False
            if inside:
                add(cand / FOLDER)
    return out


def load_probe(run: Any, inputs: list[str]) -> ProbeSet | None:
    for folder in probe_folders(inputs, run):
        ps = read_probe(folder)
        if ps is not None:
            run.probe = ps
            return ps
    return None


# ----------------------------------------------------------------------------- reading


@dataclass
class _Segment:
    rank: int
    file: str
    header: dict[str, Any]
    rows: list[dict[str, Any]] = field(default_factory=list)
    ended: bool = False


def _num(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return math.nan
    f = float(v)
    return f if math.isfinite(f) and f >= 0 else math.nan


def _launch_key(h: dict[str, Any]) -> tuple:
    launch = h.get("launch") if isinstance(h.get("launch"), dict) else {}
    return (launch.get("MASTER_ADDR"), launch.get("MASTER_PORT"), launch.get("TORCHELASTIC_RUN_ID"),
            launch.get("TORCHELASTIC_RESTART_COUNT"), h.get("world_size"), h.get("output_dir"))


def _read_file(path: Path, rank: int, notes: list[str]) -> list[_Segment]:
    name = f"{path.parent.name}/{path.name}"
    if not is_regular(path):
        notes.append(f"{name}: not a regular file; left out")
        return []
    try:
        check_size(path, name)
        data = path.read_bytes()
    except (InputError, OSError) as e:
        notes.append(f"{getattr(e, 'message', None) or name + ': cannot read'}; left out")
        return []
    lines = data.split(b"\n")
    cut = lines[-1] != b""  # a file that does not end with a newline: its last line was being written
    if not cut:
        lines.pop()
    segs: list[_Segment] = []
    bad = 0
    other: set[Any] = set()
    for i, raw in enumerate(lines):
        last = i == len(lines) - 1
        try:
            rec = json.loads(raw)
        except ValueError:
            if last and cut:
                notes.append(f"{name}: its last line is cut (the process stopped while writing it); "
                             "read up to the line before")
            else:
                bad += 1
            continue
        if not isinstance(rec, dict):
            bad += 1
            continue
        if last and cut:
            notes.append(f"{name}: its last line has no newline (the process stopped while writing it)")
        kind = rec.get("kind")
        if kind == "header":
            fmt = rec.get("format")
            if fmt != FORMAT:
                other.add(fmt)
                segs.append(_Segment(rank, name, {}, []))  # a segment that is not read
                segs[-1].header = {"_format": fmt}
                continue
            r = rec.get("rank")
            if isinstance(r, int) and not isinstance(r, bool) and r != rank:
                notes.append(f"{name}: its header says rank {r}; the file name is kept")
            segs.append(_Segment(rank, name, rec))
        elif not segs:
            bad += 1  # a step before any header (the header line lost)
        elif "_format" in segs[-1].header:
            continue
        elif kind == "step":
            segs[-1].rows.append(rec)
        elif kind == "end":
            segs[-1].ended = True
    if bad:
        notes.append(f"{name}: {bad} line(s) that are not probe records; left out")
    for fmt in sorted(other, key=str):
        what = "older" if isinstance(fmt, int) and fmt < FORMAT else "newer" if isinstance(fmt, int) else "unknown"
        notes.append(f"{name}: written by an {what} probe (format {fmt}); this swiftdoc reads format {FORMAT}, so "
                     "those records are left out (re-run with this swiftdoc's probe: swiftdoc probe --print-args)")
    return [s for s in segs if "_format" not in s.header]


def _columns(rows: list[dict[str, Any]]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    n = len(rows)
    cols = {c: np.full(n, np.nan) for c in COLUMNS}
    marked = np.zeros(n, dtype=bool)
    for i, r in enumerate(rows):
        for c in COLUMNS:
            if c in r:
                cols[c][i] = _num(r[c])
        m = r.get("marks")
        if isinstance(m, list) and m:
            marked[i] = True
    return cols, marked


def _start(s: _Segment) -> float:
    return _num(s.header.get("start_time"))


def _group(per_file: list[list[_Segment]], notes: list[str]) -> list[_Segment]:
    """The segments of the newest run in the folder.

    A file's segments are in the order its rank appended them, so its last one is its newest (no clock needed).
    Those last segments are grouped by launch settings (master address and port, run id, restart, world size,
    output folder); of several groups the one that started last is read (wall clocks: said when they come from
    several nodes).  Within the group, a segment that started more than _SAME_RUN_S before a newer one of the same
    node is a file left by an earlier run (same-node clocks are comparable) and is left out."""
    earlier = sum(len(f) - 1 for f in per_file if f)
    if earlier:
        notes.append(f"{earlier} earlier run(s) appended to the same rank files (the folder was reused); the newest "
                     "segment of each file is read")
    last = [f[-1] for f in per_file if f]
    if not last:
        return []
    groups: dict[tuple, list[_Segment]] = {}
    for sg in last:
        groups.setdefault(_launch_key(sg.header), []).append(sg)
    chosen = max(groups.values(), key=lambda g: max((_start(x) for x in g if not math.isnan(_start(x))), default=0.0))
    if len(groups) > 1:
        left = [x for g in groups.values() if g is not chosen for x in g]
        nodes = {str(x.header.get("node")) for x in last}
        clocks = (" (by the wall clocks of several nodes: a clock difference between them could pick the wrong one)"
                  if len(nodes) > 1 else "")
        notes.append(f"files of {len(groups)} runs in one probe folder (their launch settings differ); the run that "
                     f"started last is read{clocks}, and {', '.join(sorted(x.file for x in left))} left out")
    newest_on: dict[str, float] = {}
    for x in chosen:
        t = _start(x)
        if not math.isnan(t):
            node = str(x.header.get("node"))
            newest_on[node] = max(newest_on.get(node, t), t)
    keep, stale = [], []
    for x in chosen:
        t = _start(x)
        if not math.isnan(t) and newest_on[str(x.header.get("node"))] - t > _SAME_RUN_S:
            stale.append(x)
        else:
            keep.append(x)
    if stale:
        notes.append(f"{', '.join(sorted(x.file for x in stale))}: started long before the other ranks of its node, "
                     "so left by an earlier run with the same launch settings; left out")
    starts = [_start(x) for x in keep if not math.isnan(_start(x))]
    if starts and max(starts) - min(starts) > _SAME_RUN_S:
        notes.append(f"the ranks' start times differ by {max(starts) - min(starts):.0f} s (the clocks of different "
                     "nodes?); they are read as one run by their launch settings, and compared by step number only")
    return keep


def read_probe(folder: str | Path) -> ProbeSet | None:
    d = Path(folder)
    try:
        entries = sorted(d.iterdir()) if d.is_dir() else []
    except OSError:
        return None
    files = [(int(m.group(1)), p) for p in entries if (m := _RANK_FILE.match(p.name))]
    if not files:
        return None
    ps = ProbeSet(folder=str(d))
    per_file = [_read_file(p, rank, ps.notes) for rank, p in sorted(files)]
    chosen = _group(per_file, ps.notes)
    for s in sorted(chosen, key=lambda s: s.rank):
        cols, marked = _columns(s.rows)
        ps.ranks.append(RankProbe(s.rank, s.file, s.header, cols, marked, s.ended))
    worlds = {s.header.get("world_size") for s in chosen if isinstance(s.header.get("world_size"), int)}
    ps.world_size = max(worlds) if worlds else None
    if ps.world_size and ps.ranks:
        missing = sorted(set(range(ps.world_size)) - {r.rank for r in ps.ranks})
        if missing:
            shown = ", ".join(map(str, missing[:8])) + (" ..." if len(missing) > 8 else "")
            ps.notes.append(f"{len(missing)} of {ps.world_size} ranks have no probe file (rank {shown}); the job-level "
                            f"numbers are over the {len(ps.ranks)} rank(s) read")
    if not ps.ranks and not ps.notes:
        ps.notes.append(f"{d}: probe files without a header line; nothing read")
    return ps


__all__ = ["COLUMNS", "FOLDER", "FORMAT", "ProbeSet", "RankProbe", "load_probe", "probe_folders", "read_probe"]
