"""Markdown escaping: the one place a user string (a path, `<stdin>`, a log line, an exception) becomes Markdown.

Contract (pure, stdlib only):
- `md_text(s)`: for running text and table cells: terminal control sequences and other control characters removed,
  `&`, `<`, `>` as HTML entities (GitHub drops unknown tags such as `<stdin>`), Markdown's punctuation that could
  start emphasis, links, code, tables or HTML backslash-escaped, newlines as spaces.
- `md_code(s)`: an inline code span that holds any text (its fence is longer than any backtick run in it);
- `md_fence(lines, lang)`: a fenced block whose fence is longer than any fence inside the lines;
- `html_text(s)`: for HTML contexts (`<summary>`, `<sub>`): entities only.
- `clean(s)`: control sequences and characters removed, nothing else (for text inside code spans and blocks).
"""
from __future__ import annotations

import re

# CSI (colours, cursor), OSC (window title, clipboard OSC 52, hyperlinks) ended by BEL or ST, other ESC sequences
_ESC = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]{0,4096}(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]|\x9b[0-?]*[ -/]*[@-~]")
_CTRL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def clean(s: object) -> str:
    text = str(s)
    if "\x1b" in text or "\x9b" in text:
        text = _ESC.sub("", text)
    return _CTRL.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))


def html_text(s: object) -> str:
    return clean(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def md_text(s: object) -> str:
    text = clean(s).replace("\n", " ").replace("\t", " ")
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL.sub(r"\\\1", text)


def md_code(s: object) -> str:
    text = clean(s).replace("\n", " ")
    runs = [len(m) for m in re.findall(r"`+", text)]
    fence = "`" * (max(runs) + 1 if runs else 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_fence(lines: list[str], lang: str = "") -> list[str]:
    body = [clean(x) for x in lines]
    runs = [len(m) for ln in body for m in re.findall(r"`{3,}|~{3,}", ln)]
    fence = "`" * max(3, (max(runs) + 1) if runs else 3)
    return [fence + lang, *body, fence]


__all__ = ["clean", "html_text", "md_text", "md_code", "md_fence"]
