"""What wraps a log line on its way into a paste, removed in one place.

Contract: `strip_paste(line) -> (text, rank)` removes, in any order and repeated,
the wrappers users' tools and terminals put in front of a line: terminal control sequences
(colours, and also window titles, OSC 52 clipboard writes, screen clears: a report never replays them),
Markdown quotes (`> `), bold markers (`**`), log-viewer line numbers (`[1743] `,
or `1743] ` when the selection began mid-prefix), `cat -n`'s (`  5898<TAB>`), container/collector timestamps
(`2024-01-14T17:41:37.636863045Z `, `2024-05-25 09:08:45,291 `, `18:11:06.680 `,
`[2023-08-14 01:18:54,483] `, also followed by a colon), torchrun's `[rankN]:` tag and its `--tee` copy's
`[defaultN]:` (a local rank) and the task number srun --label puts before them (`15: [rank15]:`) or before a
traceback's lines (`0:   File "..."`), Open MPI's
`--tag-output` `[jobid,rank]<stderr>:` (the rank), Ray's `(ActorName pid=N, ip=X) ` and `(raylet) `, SkyPilot's
`(head, rank=0, pid=N) ` / `(worker1, rank=1, pid=N, ip=X) ` (the node's rank), a colour
code whose ESC the copy lost, and the
host tag pdsh, MPI and DeepSpeed's multi-node runner put before every line (`worker-1: `, `c000001: `,
`10.0.0.2: `; a host name holds a digit or a hyphen, so `ValueError: ` is never one, and a name ending like an
exception class - `cv2.error: `, `h5py.OSError: ` - is kept as the exception line it is).  `rank` is the rank
that tag named, else None.  Megatron's own ` > ` prefix goes too (harmless: the
text after it is what the recognisers read).  `is_fence(line)` tells a Markdown
code-fence line.  Pure string work, no state.
"""
from __future__ import annotations

import re

# every terminal control sequence a log can carry: CSI (colours, cursor, screen clear), OSC (window title, OSC 52
# clipboard write, hyperlinks) ended by BEL or ST, DCS/SOS/PM/APC strings, other ESC sequences, their 8-bit C1 forms,
# and the control characters left over (not tab, newline or carriage return): a report never replays them
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b\x9c]{0,4096}(?:\x07|\x1b\\|\x9c)?"
                   r"|\x9d[^\x07\x1b\x9c]{0,4096}(?:\x07|\x1b\\|\x9c)?|\x1b[PX^_][^\x1b\x9c]{0,4096}(?:\x1b\\|\x9c)?"
                   r"|\x1b[ -/]*[0-~]?|\x9b[0-?]*[ -/]*[@-~]|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\x9b\x9c]")


def _has_control(line: str) -> bool:
    return "\x1b" in line or "\x9b" in line or "\x9d" in line or "\x07" in line


_WRAP = re.compile(
    r"^(?!\{)(?:"  # no wrapper starts with '{': a step dict (most lines of a big log) fails at once
    r"\s{0,3}>\s?"  # markdown quote / Megatron's ' > '
    r"|\*\*"  # bold
    r"|\[\d{1,7}\] "  # log viewer line number
    r"|\d{1,7}\] (?=\S)"  # ... its tail when the selection began mid-prefix
    # `cat -n` / `nl` line numbers: right-aligned to six columns, then a tab ('  5898\t[rank4]: ...'); never before
    # a digit, so a tab-separated table of numbers keeps its first column
    r"|(?: {5}\d| {4}\d\d| {3}\d{3}| {2}\d{4}| \d{5}|\d{6})\t(?=\D)"
    r"|\[?\d{4}[-/]\d\d[-/]\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?Z?\]?:?\s+(?:\|\s*)?"  # date time (ISO, RFC3339, logging)
    r"|\d\d:\d\d:\d\d\.\d{3,9} (?=\S)"  # time-only collector stamp
    r"|\[(?:rank|RANK)\s*(\d+)\]:\s?"  # torchrun's rank tag
    r"|\[default(\d+)\]:"  # torchrun --tee's copy of a local rank's line (role 'default')
    r"|\s{0,3}\d{1,4}: (?=\[rank\d+\]:|\[default\d+\]:)"  # srun --label's task number before torchrun's tag
    # ... or before a traceback's lines ('0: Traceback (most recent call last):', '0:   File "...", line 5, in f')
    r"|\s{0,3}\d{1,4}: (?=Traceback \(|\s+File \"|\s+\^|[A-Za-z_][\w.]*(?:Error|Exception|Interrupt): )"
    r"|\[\d+,(\d+)\]<std(?:out|err|diag)>:\s?"  # Open MPI's --tag-output: '[jobid,rank]<stderr>:'  (mpirun(1))
    r"|\((?:[A-Za-z_][\w.]*\s+)?pid=\d+(?:,\s*ip=[\w.:]+)?\)\s?"  # Ray: '(ActorName pid=N, ip=X) '
    r"|\(raylet(?:,\s*ip=[\w.:]+)?\)\s?"  # Ray's raylet
    # SkyPilot's per-node prefix: '(head, rank=0, pid=4773) ', '(worker1, rank=1, pid=2769, ip=10.0.0.2) '
    r"|\((?:head|worker\d+|[\w.-]{1,40}), rank=(\d+)(?:, pid=\d+)?(?:, ip=[\w.:]+)?\)\s*"
    r"|\[\d{1,2}(?:;\d{1,2})*m(?=\S)"  # a colour code whose ESC was lost in the copy ('[33m(raylet)')
    r"|(?!(?:default|rank|RANK)\d+:|[\w.-]*(?:[Ee]rror|Exception|Warning|Interrupt|Exit): )(?:[A-Za-z][A-Za-z0-9.-]*\d[A-Za-z0-9.-]*|[A-Za-z][\w.]*-[\w.-]+|\d{1,3}(?:\.\d{1,3}){3}): (?=.)"  # pdsh/MPI host
    # (a host name has no '_': 'stage1_pafs_loss: nan' is a metric, not a host's line)
    r")"
)
_FENCE = re.compile(r"^\s*(?:```|~~~)[\w+-]*\s*$")


def strip_paste(line: str) -> tuple[str, int | None]:
    s = _ANSI.sub("", line) if _has_control(line) else line
    rank: int | None = None
    for _ in range(8):  # prefixes stack: '18:11:06.680 [rank4]:[E205 ...' or '> [rank0]: ...'
        m = _WRAP.match(s)
        if not m or m.end() == 0:
            break
        if m.group(1) is not None:
            rank = int(m.group(1))
        elif m.group(2) is not None and rank is None:
            rank = int(m.group(2))
        elif m.group(3) is not None:
            rank = int(m.group(3))
        elif m.group(4) is not None:  # a node's rank (SkyPilot), not a process's: only when nothing finer said one
            rank = int(m.group(4)) if rank is None else rank
        s = s[m.end():]
    return s, rank


def strip_ansi(line: str) -> str:
    return _ANSI.sub("", line) if _has_control(line) else line


def is_fence(line: str) -> bool:
    return bool(_FENCE.match(line))


__all__ = ["strip_paste", "strip_ansi", "is_fence"]
