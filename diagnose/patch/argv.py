"""An ms-swift argv as flag occurrences, resolved against a version's flag table.

Contract: `split_argv(tokens) -> (positional, [Occurrence])` groups `--flag v1 v2`
and `--flag=v` the way ms-swift's HfArgumentParser sees them (a token starting
with `-` that is not a number starts a flag; the tokens after it are its values).
`Occurrence.index` is the flag token's position in `tokens`, `values` the value
tokens.  `resolve_occurrences(occs, table, command)` fills in the field each flag
resolves to (exact, unique prefix, `--no_x` negation, dash spelling).
"""
from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as _field
from typing import Any

from diagnose.parse.values import to_number


@dataclass
class Occurrence:
    flag: str  # as written, without any '=value' ('--use_flash_attn')
    values: list[str]
    index: int  # position of the flag token in the argv
    eq_form: bool = False  # written as --flag=value (one token)
    value_indexes: list[int] = _field(default_factory=list)
    field: str | None = None  # resolved field name (None: unknown / ambiguous)
    status: str = "unknown"  # exact | prefix | ambiguous | unknown
    negated: bool = False
    option: str | None = None  # the option string matched
    candidates: list[str] = _field(default_factory=list)

    @property
    def tokens(self) -> list[str]:
        if self.eq_form:
            return [f"{self.flag}={self.values[0]}"]
        return [self.flag, *self.values]

    @property
    def value_text(self) -> str | None:
        if not self.values:
            return None
        return " ".join(self.values)


def is_flag_token(tok: str) -> bool:
    if len(tok) < 2 or not tok.startswith("-") or tok == "--":
        return False
    if to_number(tok) is not None:
        return False
    return tok[1].isalpha() or (tok.startswith("--") and len(tok) > 2)


def split_argv(tokens: list[str]) -> tuple[list[int], list[Occurrence]]:
    positional: list[int] = []
    occs: list[Occurrence] = []
    cur: Occurrence | None = None
    for i, tok in enumerate(tokens):
        if is_flag_token(tok):
            if tok.startswith("--") and "=" in tok:
                name, _, v = tok.partition("=")
                cur = Occurrence(flag=name, values=[v], index=i, eq_form=True, value_indexes=[i])
                occs.append(cur)
                cur = None  # --k=v takes no further tokens as its values
                continue
            cur = Occurrence(flag=tok, values=[], index=i)
            occs.append(cur)
        elif cur is not None:
            cur.values.append(tok)
            cur.value_indexes.append(i)
        elif occs:  # value after a --k=v flag: argparse leaves it over
            positional.append(i)
        else:
            positional.append(i)
    return positional, occs


def resolve_occurrences(occs: list[Occurrence], table: Any, command: str) -> None:
    for o in occs:
        r = table.resolve(command, o.flag)
        o.status = r.status
        o.field = r.name if r.accepted and r.name != "help" else None
        o.negated = r.negated
        o.option = r.option
        o.candidates = list(r.candidates)


def occurrence_value(o: Occurrence, spec: Any) -> Any:
    """The value argparse would store: bools normalised, bare bool flags True, negations False."""
    from diagnose.flags.table import string_to_bool

    if o.negated:
        return False
    if spec is not None and spec.type == "bool":
        if not o.values:
            return True
        b = string_to_bool(o.values[0])
        return b if b is not None else o.values[0]
    if not o.values:
        return True
    if spec is not None and (spec.type == "list" or spec.nargs == "+"):
        return list(o.values)
    return o.values[0] if len(o.values) == 1 else list(o.values)
