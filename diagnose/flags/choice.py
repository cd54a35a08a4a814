"""Which ms-swift version's flag table to use: one home for patch, lint and verify.

Contract: `choose_version(explicit, candidates) -> (spec, how)`.  `--swift-version`
wins; else the first candidate that has a version (each caller orders its own: the
log's version, the installed ms-swift, the one that runs verify's trials), else the
newest known 4.x, said so.  A detected version without a table of its own (a newer
4.7.0) takes the nearest table of its major, and `how` says so; an explicit one
without a table, or one of an unknown major, is a `UsageError` listing the known
versions.  `nearest_table(spec)` is that fallback.
"""
from __future__ import annotations

from diagnose.errors import UsageError


def nearest_table(spec: str) -> str | None:
    """The known table closest to a concrete version of a known major (a newer 4.7.0 -> 4.6.x), else None."""
    from diagnose.flags.versions import available_versions, vkey

    try:
        want = vkey(spec.strip().lstrip("v"))
    except ValueError:
        return None
    same = [v for v in available_versions() if vkey(v)[0] == want[0]]
    if not same:
        return None
    return min(same, key=lambda v: (abs(vkey(v)[1] - want[1]), abs(vkey(v)[2] - want[2]), -vkey(v)[1]))


def choose_version(explicit: str | None, candidates: list[tuple[str | None, str]]) -> tuple[str, str]:
    from diagnose.flags import UnknownVersion, table_for

    if explicit:
        spec, how = explicit, "--swift-version"
    else:
        spec, how = next(((s, h) for s, h in candidates if s),
                         ("4.x", "no version given or detected: the newest known 4.x (pass --swift-version)"))
    try:
        table_for(spec)
    except UnknownVersion as e:
        near = nearest_table(spec)
        if near is None or explicit:
            raise UsageError(f"ms-swift version {spec!r} ({how}) has no flag table", hint=str(e).split("; ", 1)[-1]) from None
        return near, (f"{how}: {spec} has no flag table, using the nearest known {near} "
                      f"(flags added or renamed after {near} are not known to swiftdoc)")
    return spec, how
