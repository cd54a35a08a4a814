"""Stable codes for lint problems, the way ruff and sqlfluff name theirs.

Contract: `code_of(slug) -> (code, name, group)` for a problem's internal slug
(`Problem.code`); `CODES` lists every code once.  Codes never change meaning:
a new kind of problem gets a new code.  `select_matches(problem_code, token)`
tells whether `--select/--ignore TOKEN` (a code, a name, a code prefix such as
`SW0`, or a group) covers a code.  Groups: flags (SW0xx), values (SW1xx),
combos (SW2xx), env (SW3xx), script (SH0xx), tool (SD9xx).
"""
from __future__ import annotations

# internal slug -> (code, stable name, group)
CODES: dict[str, tuple[str, str, str]] = {
    "unknown": ("SW001", "unknown-flag", "flags"),
    "renamed": ("SW002", "renamed-flag", "flags"),
    "ambiguous": ("SW003", "ambiguous-prefix", "flags"),
    "prefix": ("SW004", "prefix-only-flag", "flags"),
    "deprecated": ("SW005", "deprecated-flag", "flags"),
    "torchrun": ("SW006", "torchrun-option-as-flag", "flags"),
    "flag": ("SW009", "flag", "flags"),
    "value": ("SW101", "bad-value", "values"),
    "duplicate": ("SW102", "duplicate-flag", "values"),
    "combo": ("SW201", "refused-combination", "combos"),
    "env": ("SW301", "launch-env", "env"),
    "broken-continuation": ("SH001", "broken-continuation", "script"),
    "escaped-blank": ("SH002", "escaped-blank", "script"),
    "not-exported": ("SH003", "not-exported", "script"),
    "crlf": ("SH004", "crlf-line-endings", "script"),
    "unknown-argv": ("SH005", "argv-not-static", "script"),
    "sourced-env": ("SH006", "sourced-env-unread", "script"),
    "config-missing": ("SH007", "config-file-missing", "script"),
    "shell": ("SH008", "shell-syntax", "script"),
    "unsafe": ("SH009", "not-editable", "script"),
    "script": ("SH099", "script", "script"),
    "swift-parser": ("SD901", "swift-parser-rejects", "tool"),
    "unsupported": ("SD902", "remedy-unsupported", "tool"),
}
GROUPS = sorted({g for _, _, g in CODES.values()})


def code_of(slug: str) -> tuple[str, str, str]:
    return CODES.get(slug, ("SD999", slug, "tool"))


def known_token(token: str) -> bool:
    t = token.strip()
    return any(select_matches(code, t) for code, _, _ in CODES.values())


def select_matches(code: str, token: str) -> bool:
    t = token.strip()
    for c, name, group in CODES.values():
        if c == code:
            return t.upper() == c or t == name or t == group or (len(t) < len(c) and c.startswith(t.upper()) and t[:2].isalpha())
    return t.upper() == code
