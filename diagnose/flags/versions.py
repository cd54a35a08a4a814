"""Version strings -> checked-in flag table.

Contract
--------
* ``available_versions()`` lists the ms-swift versions that have a table in
  ``diagnose/flags/data/<version>.json.gz`` (oldest first).  These are the last
  release of each minor line (2.5, 2.6, 3.0 ... 3.12, 4.0 ... 4.6) plus 3.12.4.
* ``pick_version(spec)`` maps a user/log version spec onto one of them, or
  raises ``UnknownVersion`` (a ``ValueError``) that lists the known versions.
  Accepted specs (a leading ``v`` and whitespace are ignored):

  - exact ``"4.6.0"`` / ``"3.4.1.post1"`` / ``"4.6.0rc1"`` (suffixes after the
    patch number other than ``.postN`` are ignored);
  - ``"3.12.5"``: the newest table **at or below** it within the same minor line
    (-> 3.12.4).  A request older than every table of its line gets the
    oldest table of the line (``"3.8.0"`` -> 3.8.3): flags within a minor line
    change rarely, and the tables of 3.12.4 and 3.12.6 are identical (tested).
  - ``"3.7"`` / ``"3.7.x"`` -> newest table of that minor line; ``"4"`` /
    ``"4.x"`` / ``"4.*"`` -> newest table of that major; ``"3.8+"`` / ``">=3.8"``
    -> newest table of that major that is >= 3.8;
  - ranges ``"3.8-3.12.4"``, ``"3.0-3.7"``, ``"3.12.5-3.12.6"`` (also ``–``,
    ``..`` or `` to `` as separator): resolved by their **upper** bound, so
    ``"3.8-3.12.4"`` -> 3.12.4 and ``"3.0-3.7"`` -> 3.7.3.
  - A minor line without a table (``"2.4.0"``, ``"4.7.0"``) raises
    ``UnknownVersion``; pass ``"4.x"`` explicitly to accept the newest 4.x table.

Import cost: stdlib only.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / 'data'
_SUFFIX = '.json.gz'


class UnknownVersion(ValueError):
    """No flag table matches the requested ms-swift version spec."""

    def __init__(self, spec: str, known: list[str], reason: str = ''):
        self.spec = spec
        self.known = list(known)
        msg = f'no ms-swift flag table for {spec!r}'
        if reason:
            msg += f' ({reason})'
        msg += '; known versions: ' + ', '.join(known)
        super().__init__(msg)


def vkey(version: str) -> tuple[int, int, int, int]:
    """Sort key (major, minor, patch, post) for '3.4.1.post1'-style strings."""
    m = re.match(r'^(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:\.post(\d+))?', version)
    if not m:
        raise ValueError(f'not a version: {version!r}')
    return tuple(int(x or 0) for x in m.groups())  # type: ignore[return-value]


@functools.lru_cache(maxsize=1)
def _available() -> tuple[str, ...]:
    names = [p.name[:-len(_SUFFIX)] for p in DATA_DIR.glob('*' + _SUFFIX)]
    return tuple(sorted(names, key=vkey))


def available_versions() -> list[str]:
    """ms-swift versions that have a flag table, oldest first."""
    return list(_available())


_RANGE_SEP = re.compile(r'\s*(?:–|—|\.\.|\bto\b|(?<=[\dx*])-(?=\s*v?\d))\s*')


def _parts(text: str) -> list[str]:
    return [p for p in text.split('.') if p != '']


def pick_version(spec: str) -> str:
    """Map a version spec (see module docstring) onto an available table version."""
    known = list(_available())
    if not isinstance(spec, str) or not spec.strip():
        raise UnknownVersion(str(spec), known, 'empty version')
    s = spec.strip().lower()
    pieces = _RANGE_SEP.split(s)
    if len(pieces) == 2 and pieces[1]:
        s = pieces[1]
    elif len(pieces) > 2:
        raise UnknownVersion(spec, known, 'cannot parse range')
    s = s.strip().lstrip('v').strip()
    at_least = None
    if s.startswith('>='):
        s = s[2:].strip().lstrip('v')
        at_least = s
    elif s.endswith('+'):
        s = s[:-1].strip()
        at_least = s
    if at_least is not None:
        try:
            lo = vkey(at_least)
        except ValueError:
            raise UnknownVersion(spec, known, 'cannot parse version') from None
        cands = [v for v in known if vkey(v)[0] == lo[0] and vkey(v) >= lo]
        if not cands:
            raise UnknownVersion(spec, known)
        return cands[-1]
    s = re.sub(r'\.(x|\*)$', '', s)
    m = re.match(r'^(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:\.post(\d+))?', s)
    if not m:
        raise UnknownVersion(spec, known, 'cannot parse version')
    major, minor, patch, post = m.groups()
    if minor is None:
        cands = [v for v in known if vkey(v)[0] == int(major)]
        if not cands:
            raise UnknownVersion(spec, known, f'no {major}.x table')
        return cands[-1]
    line = [v for v in known if vkey(v)[:2] == (int(major), int(minor))]
    if not line:
        raise UnknownVersion(spec, known, f'no table for the {major}.{minor} line')
    if patch is None:
        return line[-1]
    want = (int(major), int(minor), int(patch), int(post or 0))
    below = [v for v in line if vkey(v) <= want]
    if below:
        return below[-1]
    # same patch level with an unknown .post, or older than every table of the line
    return line[0]


def versions_in(spec: str | None) -> list[str]:
    """Every table version a detected version spec may be (oldest first); [] when the spec says nothing.

    ``"4.6.0"`` -> [4.6.0]; ``"4.x"`` -> every 4.x table; ``"3.8-3.12.4"`` -> 3.8.3 .. 3.12.4 (the lower bound's
    minor line up to the table of the upper bound); ``"3.x-4.x"`` -> every 3.x and 4.x table; ``"4.6+"`` -> 4.6.0
    and newer 4.x tables.  Used where a value must hold in *every* version the text may come from (a flag's default).
    """
    if not spec or not isinstance(spec, str):
        return []
    known = list(_available())
    s = spec.strip().lower().lstrip('v')
    pieces = [p for p in _RANGE_SEP.split(s) if p]
    try:
        if len(pieces) == 2:
            lo_s, hi_s = pieces
        elif s.endswith('+') or s.startswith('>='):
            lo_s, hi_s = s.rstrip('+').lstrip('>=').strip(), None
        else:
            lo_s = hi_s = s
        lo_parts = re.sub(r'\.(x|\*)$', '', lo_s.strip().lstrip('v')).split('.')
        lo = tuple(int(p) for p in lo_parts[:2] if p.isdigit())
        hi = pick_version(hi_s) if hi_s is not None else None
    except (ValueError, UnknownVersion):
        return []
    if not lo:
        return []
    out = [v for v in known if vkey(v)[:len(lo)] >= lo]
    if hi_s is not None and len(pieces) != 2 and not (s.endswith('+') or s.startswith('>=')):
        # a single spec: an exact version is one table; "4.x" / "3.7" every table of that major / minor line
        if re.match(r'^\d+\.\d+\.\d+', lo_s.strip().lstrip('v')):
            return [hi] if hi else []
        return [v for v in known if vkey(v)[:len(lo)] == lo]
    if hi is not None:
        hi_major = vkey(hi)[0]
        if re.search(r'^\d+(\.(x|\*))?$', hi_s.strip().lstrip('v')):  # "4.x" as an upper bound: all of that major
            out = [v for v in out if vkey(v)[0] <= hi_major]
        else:
            out = [v for v in out if vkey(v) <= vkey(hi)]
    else:
        out = [v for v in out if vkey(v)[0] == lo[0]]
    return out
