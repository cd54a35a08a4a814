"""The slow, general reader of one printed log dict (any version, any quirk).

Contract: `find_dict(text, pos=0)` locates the first `{'...': ...}` or `{"...": ...}` in a
line (after tqdm `\\r` fragments, `[rank3]:` prefixes, timestamps, `> ` quotes)
and returns (start, end) or None.  `parse_dict(text)` returns the key -> value
mapping with values converted by `values.to_number` where numeric, else left as
strings; it never raises.  Used for odd lines the vectorised path skips, for
eval/summary dicts and for pasted text.  `iter_dicts(text)` yields every dict on a
line (pasted terminals glue several together); `is_train_row(d)` tells a
training row from eval, summary and data rows.
"""
from __future__ import annotations

import re
from typing import Any

from diagnose.parse.values import to_number

_PAIR = re.compile(
    r"""(['"])(?P<key>[^'"]{1,80})\1\s*:\s*(?P<val>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|\{[^{}]*\}|\[[^\[\]]*\]|[^,{}]+)"""
)
_START = re.compile(r"""\{\s*['"][A-Za-z_]""")


def find_dict(text: str, pos: int = 0) -> tuple[int, int] | None:
    m = _START.search(text, pos)
    if not m:
        return None
    start = m.start()
    depth = 0
    for i in range(start, len(text)):
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return start, i + 1
    return start, len(text)  # unterminated (truncated or wrapped line)


def parse_dict(text: str) -> dict[str, Any]:
    span = find_dict(text)
    if span is None:
        return {}
    return _parse_span(text, span)


def iter_dicts(text: str):
    """Every dict on a line, in order: users' terminals glue several log dicts onto one line."""
    pos = 0
    while True:
        span = find_dict(text, pos)
        if span is None:
            return
        d = _parse_span(text, span)
        if d:
            yield d
        pos = span[1]


_TRAIN_KEYS = ("loss", "grad_norm", "train_loss")  # train_loss: DeiT/MAE's per-epoch log.txt rows


def is_train_row(d: dict[str, Any]) -> bool:
    """A training log row (ms-swift, HF Trainer, TRL, trainer_state): loss or grad_norm, no eval_ or run-summary keys."""
    if "train_runtime" in d or any(k.startswith("eval_") and d[k] is not None for k in d):
        return False  # (LLaMA-Factory's trainer_log rows carry "eval_loss": null on every training row)
    return any(isinstance(d.get(k), (int, float)) for k in _TRAIN_KEYS)


def _parse_span(text: str, span: tuple[int, int]) -> dict[str, Any]:
    closed = text[span[1] - 1 : span[1]] == "}"
    body = text[span[0] + 1 : span[1] - (1 if closed else 0)]
    out: dict[str, Any] = {}
    pairs = list(_PAIR.finditer(body))
    if not closed and pairs and not body.rstrip().endswith(",") and pairs[-1].group("val").strip()[:1] not in "'\"":
        pairs = pairs[:-1]  # a dict cut by the end of the excerpt: its last bare number may be cut ('lr': 4. of 4.99e-05)
    for m in pairs:
        key = m.group("key")
        raw = m.group("val").strip()
        if raw[:1] in "'\"" and raw[-1:] == raw[:1] and len(raw) >= 2:
            inner = raw[1:-1]
            num = to_number(inner)
            out[key] = num if num is not None and not any(c in inner for c in "/%hms ") else inner
        else:
            num = to_number(raw)
            if num is not None:
                out[key] = num
            elif raw in ("True", "False", "true", "false"):
                out[key] = raw.lower() == "true"
            elif raw in ("None", "null"):
                out[key] = None
            else:
                out[key] = raw
    return out
