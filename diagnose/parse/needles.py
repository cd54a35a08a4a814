"""A fast "does any of these words occur" regex: the one home of the needle prefilters.

Contract (pure, stdlib only): `any_of(words) -> re.Pattern` matches (with `.search`) exactly where one of `words`
occurs, case-sensitively (callers lower-case both the words and the text: Python's IGNORECASE turns off the
literal optimisations and made the signature prefilter ~40 µs a line).  The words are laid out as a trie
(`ab|ac` -> `a(?:b|c)`), so at each position of the text the engine compares one character per distinct
first letter instead of trying every word: ~1 µs for an ordinary 50-character log line against 110 needles.
Only whether (and where a) word occurs is meant: the matched text is the shortest word found there.
"""
from __future__ import annotations

import re
from collections.abc import Iterable


def _emit(node: dict) -> str:
    if "" in node:  # a word ends here: it occurs, whatever follows (a longer word with this prefix adds nothing)
        return ""
    alts = [re.escape(ch) + _emit(node[ch]) for ch in sorted(node)]
    return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"


def any_of(words: Iterable[str]) -> re.Pattern[str]:
    trie: dict = {}
    for w in {w for w in words if w}:
        node = trie
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = True
    if not trie:
        return re.compile(r"(?!)")
    return re.compile(_emit(trie))


__all__ = ["any_of"]
