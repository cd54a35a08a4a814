"""Pieces shared by `swiftdoc patch` and `swiftdoc lint`: version choice, parser check, atomic writes.

Contract:
- `choose_version(explicit, run) -> (version_spec, how)`: `--swift-version`,
  else the version detected in the log, else the installed ms-swift, else the
  newest flag table (said so).  A detected version without a table of its own (a newer 4.7.0) takes the
  nearest table of its major, said so in `how`; `UsageError` for an explicit one or an unknown major.
- `swift_check(plan, enabled) -> str | None`: one line about ms-swift's own
  parser on the plan's argv (a `Problem` is added when it rejects it); None when
  disabled or ms-swift is not installed.
- `write_atomic(path, text, encoding, suffix='.bak', force=False) -> Path`: one file written through
  `patch.safewrite.write_files` (link target edited, owner and mode kept, read-only refused without
  force, nothing left behind on failure); returns the backup.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from diagnose.patch.models import PatchPlan, Problem


def installed_swift_version() -> str | None:
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover
        return None
    try:
        return version("ms-swift")
    except PackageNotFoundError:
        return None


def choose_version(explicit: str | None, run: Any = None) -> tuple[str, str]:
    """patch/lint: --swift-version, else the log's version, else the installed ms-swift (diagnose.flags.choice)."""
    from diagnose.flags.choice import choose_version as choose

    logged = (run.swift_version, f"detected in the log ({run.version_clue or 'version clues'})") if run is not None \
        and run.swift_version else (None, "")
    return choose(explicit, [logged, (installed_swift_version(), "the installed ms-swift")])


def swift_check(plan: PatchPlan, enabled: bool) -> str | None:
    if not enabled:
        return None
    from diagnose.patch.swiftcheck import check_argv

    dynamic = [t for t in plan.argv if "$" in t or "`" in t]
    if dynamic:
        return f"not run: the argv holds shell expansions ({', '.join(dynamic[:3])}) that only bash can fill in"
    res = check_argv(plan.command, plan.argv, plan.version)
    if res is None:
        return None
    if res.skipped:
        return res.skipped
    if not res.ok:
        plan.problems.append(Problem(message=res.message(), severity="error", code="swift-parser"))
    return res.message()


def write_atomic(path: Path, text: str, encoding: str = "utf-8", suffix: str = ".bak", force: bool = False) -> Path:
    """One file through `patch.safewrite.write_files` (the one home of writing the user's files)."""
    from diagnose.patch.safewrite import write_files

    return write_files([(path, text, encoding)], suffix, force)[0]
