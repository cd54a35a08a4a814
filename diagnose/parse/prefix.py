"""What wraps a log line on its way into a paste, removed in one place.

Contract: `strip_paste(line) -> (text, rank)` removes, in any order and repeated,
the wrappers users' tools and terminals put in front of a line: ANSI colours,
Markdown quotes (`> `), bold markers (`**`), log-viewer line numbers (`[1743] `,
or `1743] ` when the selection began mid-prefix), container/collector timestamps
(`2024-01-14T17:41:37.636863045Z `, `2024-05-25 09:08:45,291 `, `18:11:06.680 `,
`[2023-08-14 01:18:54,483] `), torchrun's `[rankN]:` tag and its `--tee` copy's `[defaultN]:` (a
local rank).  `rank` is the rank
that tag named, else None.  Megatron's own ` > ` prefix goes too (harmless: the
text after it is what the recognisers read).  `is_fence(line)` tells a Markdown
code-fence line.  Pure string work, no state.
"""
from __future__ import annotations

import re

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_WRAP = re.compile(
    r"^(?:"
    r"\s{0,3}>\s?"  # markdown quote / Megatron's ' > '
    r"|\*\*"  # bold
    r"|\[\d{1,7}\] "  # log viewer line number
    r"|\d{1,7}\] (?=\S)"  # ... its tail when the selection began mid-prefix
    r"|\[?\d{4}[-/]\d\d[-/]\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?Z?\]?\s+(?:\|\s*)?"  # date time (ISO, RFC3339, logging)
    r"|\d\d:\d\d:\d\d\.\d{3,9} (?=\S)"  # time-only collector stamp
    r"|\[(?:rank|RANK)\s*(\d+)\]:\s?"  # torchrun's rank tag
    r"|\[default(\d+)\]:"  # torchrun --tee's copy of a local rank's line (role 'default')
    r")"
)
_FENCE = re.compile(r"^\s*(?:```|~~~)[\w+-]*\s*$")


def strip_paste(line: str) -> tuple[str, int | None]:
    s = _ANSI.sub("", line) if "\x1b" in line else line
    rank: int | None = None
    for _ in range(8):  # prefixes stack: '18:11:06.680 [rank4]:[E205 ...' or '> [rank0]: ...'
        m = _WRAP.match(s)
        if not m or m.end() == 0:
            break
        if m.group(1) is not None:
            rank = int(m.group(1))
        elif m.group(2) is not None and rank is None:
            rank = int(m.group(2))
        s = s[m.end():]
    return s, rank


def strip_ansi(line: str) -> str:
    return _ANSI.sub("", line) if "\x1b" in line else line


def is_fence(line: str) -> bool:
    return bool(_FENCE.match(line))


__all__ = ["strip_paste", "strip_ansi", "is_fence"]
