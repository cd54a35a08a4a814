"""One ms-swift version's command-line flags, as HfArgumentParser builds them.

Contract
--------
``FlagTable`` wraps one ``data/<version>.json.gz`` document (generated from the
real wheel by ``tools/gen_flag_tables.py``) and answers, per CLI command
(``sft``, ``pt``, ``rlhf``, ``megatron_sft``, ``megatron_pt``,
``megatron_rlhf`` -- whichever exist in that version):

* ``resolve(command, flag) -> Resolution`` -- what argparse does with ``flag``:
  ``exact`` (an option string of the parser), ``prefix`` (allow_abbrev: a
  unique prefix of exactly one option string; ``name`` is the real field),
  ``ambiguous`` (prefix of several option strings -> argparse error; see
  ``candidates``), ``unknown`` (ends up in ``remaining_argv`` -> ms-swift raises
  ``ValueError: remaining_argv``).
  Option strings per field are the ones HfArgumentParser registers:
  ``--name``, ``--name-with-dashes`` (when the name has an underscore),
  metadata aliases, and ``--no_name``/``--no-name`` (store_false) for bool
  fields whose default is True; plus argparse's own ``-h``/``--help``.
  Ambiguity follows CPython's argparse (3.10 - 3.13.0): several matching option
  strings are ambiguous even if they belong to the same field (e.g. ``--lazy``
  matches ``--lazy_tokenize`` and ``--lazy-tokenize``); ``same_field`` tells
  when that is the only reason.
* ``spec(command, flag) -> FlagSpec | None`` -- type / nargs / choices /
  default of the field the flag resolves to (exact or unique prefix).
* ``validate_value(command, flag, value) -> str | None`` -- error message, or
  None if HfArgumentParser would accept ``value`` (str: one token; list: the
  tokens after the flag; None/[]: flag given bare).

Behaviour recorded in the data (``FlagSpec``): bool fields use HF's
``string_to_bool`` (yes/no/true/false/t/f/y/n/1/0, case-insensitive); with a
non-None default they take ``nargs='?'`` and a bare ``--flag`` means True;
``Optional[bool] = None`` fields require a value.  ``nargs='+'`` for list
fields.  ``Literal``/``Enum`` types and metadata choices give ``choices``
(a value is accepted when it equals ``str(choice)``).

Import cost: stdlib + pydantic.
"""
from __future__ import annotations

import gzip
import json
from functools import cached_property
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict

_TRUE = ('yes', 'true', 't', 'y', '1')
_FALSE = ('no', 'false', 'f', 'n', '0')

COMMAND_ALIASES = {
    'pretrain': 'pt',
    'megatron_pretrain': 'megatron_pt',
}


class UnknownCommand(ValueError):
    """The table has no such CLI command for this ms-swift version."""


class FlagSpec(BaseModel):
    """How HfArgumentParser builds one field's option (see module docstring)."""
    model_config = ConfigDict(frozen=True, extra='ignore')

    name: str
    type: str  # bool | int | float | str | list | dict-json | dict | other
    nargs: Optional[str] = None  # '+' (lists) | '?' (bools with a non-None default)
    const: Optional[bool] = None  # value of a bare bool flag (True) when nargs == '?'
    item_type: Optional[str] = None  # element type for lists
    item_choices: Optional[list] = None
    choices: Optional[list] = None
    choices_expr: Optional[str] = None  # metadata choices that are not a literal
    default: Any = None
    default_expr: Optional[str] = None  # source of a non-literal default
    required: bool = False
    no_flag: bool = False  # bool defaulting True: --no_<name> exists
    aliases: list[str] = []
    optional: bool = False  # annotation included None
    src: Optional[str] = None  # 'hf' = inherited from transformers TrainingArguments
    type_repr: Optional[str] = None

    @property
    def is_bool(self) -> bool:
        return self.type == 'bool'

    @property
    def bare_ok(self) -> bool:
        """True when ``--flag`` with no value is accepted (bool with nargs='?')."""
        return self.type == 'bool' and self.nargs == '?'

    def option_strings(self, dash_aliases: bool = True) -> list[str]:
        opts = [f'--{self.name}']
        if dash_aliases and '_' in self.name:
            opts.append('--' + self.name.replace('_', '-'))
        opts.extend(self.aliases)
        return opts

    def negative_option_strings(self) -> list[str]:
        if not self.no_flag:
            return []
        return [f'--no_{self.name}', '--no-' + self.name.replace('_', '-')]


class Resolution(BaseModel):
    """Outcome of looking a flag up the way argparse (allow_abbrev=True) does."""
    model_config = ConfigDict(frozen=True)

    query: str  # normalized '--flag' (any '=value' stripped)
    status: Literal['exact', 'prefix', 'ambiguous', 'unknown']
    name: Optional[str] = None  # real field name (dest) for exact/prefix
    option: Optional[str] = None  # the option string matched, e.g. '--use_liger_kernel'
    negated: bool = False  # matched a '--no_<field>' store_false option
    candidates: list[str] = []  # option strings matched by the prefix (ambiguous)
    candidate_names: list[str] = []  # distinct field names behind `candidates`

    @property
    def accepted(self) -> bool:
        return self.status in ('exact', 'prefix')

    @property
    def same_field(self) -> bool:
        """Ambiguous only because the dash/underscore spellings of one field both match."""
        return self.status == 'ambiguous' and len(self.candidate_names) == 1


def normalize_command(command: str) -> str:
    c = command.strip().lower().replace('-', '_').replace(' ', '_')
    return COMMAND_ALIASES.get(c, c)


def normalize_flag(flag: str) -> str:
    f = flag.strip()
    if not f.startswith('-'):
        f = '--' + f
    return f


def string_to_bool(v: str) -> Optional[bool]:
    """HF's ``string_to_bool``; None where HF raises."""
    low = v.lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    return None


class FlagTable:
    """Flags of one ms-swift version (see module docstring)."""

    def __init__(self, doc: dict):
        self.doc = doc
        self.version: str = doc['swift_version']
        self.transformers_version: str = doc.get('transformers_version', '')
        self.source_wheel: str = doc.get('source_wheel', '')
        parser = doc.get('parser', {})
        self.allow_abbrev: bool = parser.get('allow_abbrev', True)
        self.dash_aliases: bool = parser.get('dash_aliases', True)
        self._specs: dict[str, dict[str, FlagSpec]] = {}
        self._options: dict[str, dict[str, tuple[str, bool]]] = {}

    @classmethod
    def load(cls, path) -> 'FlagTable':
        with gzip.open(path, 'rt', encoding='utf-8') as fh:
            return cls(json.load(fh))

    def __repr__(self):
        return f'FlagTable({self.version!r}, transformers={self.transformers_version!r})'

    # ------------------------------------------------------------------ basics
    @cached_property
    def commands(self) -> list[str]:
        return list(self.doc['commands'])

    def _cmd(self, command: str) -> str:
        c = normalize_command(command)
        if c not in self.doc['commands']:
            raise UnknownCommand(f'ms-swift {self.version} has no command {command!r}; '
                                 f'known: {", ".join(self.commands)}')
        return c

    def has_command(self, command: str) -> bool:
        return normalize_command(command) in self.doc['commands']

    def specs(self, command: str) -> dict[str, FlagSpec]:
        c = self._cmd(command)
        if c not in self._specs:
            self._specs[c] = {n: FlagSpec(name=n, **d) for n, d in self.doc['commands'][c].items()}
        return self._specs[c]

    def names(self, command: str) -> list[str]:
        """Field names (argparse dests), in dataclass order."""
        return list(self.doc['commands'][self._cmd(command)])

    def has(self, command: str, name: str) -> bool:
        """Exact field name (``'tuner_type'`` or ``'--tuner_type'``) exists for ``command``."""
        n = name.strip().lstrip('-')
        c = normalize_command(command)
        return c in self.doc['commands'] and n in self.doc['commands'][c]

    def options(self, command: str) -> dict[str, tuple[str, bool]]:
        """option string -> (field name, negated), in argparse registration order."""
        c = self._cmd(command)
        if c not in self._options:
            opts: dict[str, tuple[str, bool]] = {'-h': ('help', False), '--help': ('help', False)}
            for name, spec in self.specs(c).items():
                for o in spec.option_strings(self.dash_aliases):
                    opts[o] = (name, False)
                for o in spec.negative_option_strings():
                    opts[o] = (name, True)
            self._options[c] = opts
        return self._options[c]

    # ------------------------------------------------------------------ lookups
    def resolve(self, command: str, flag: str) -> Resolution:
        q = normalize_flag(flag)
        opts = self.options(command)
        if q in opts:
            name, neg = opts[q]
            return Resolution(query=q, status='exact', name=name, option=q, negated=neg)
        if '=' in q:
            q = q.split('=', 1)[0]
            if q in opts:
                name, neg = opts[q]
                return Resolution(query=q, status='exact', name=name, option=q, negated=neg)
        if not (self.allow_abbrev and q.startswith('--')):
            return Resolution(query=q, status='unknown')
        matches = [o for o in opts if o.startswith(q)]
        if len(matches) == 1:
            name, neg = opts[matches[0]]
            return Resolution(query=q, status='prefix', name=name, option=matches[0], negated=neg)
        if len(matches) > 1:
            names = list(dict.fromkeys(opts[o][0] for o in matches))
            return Resolution(query=q, status='ambiguous', candidates=matches, candidate_names=names)
        return Resolution(query=q, status='unknown')

    def spec(self, command: str, flag: str) -> Optional[FlagSpec]:
        """Spec of the field ``flag`` resolves to (exact or unique prefix), else None."""
        r = self.resolve(command, flag)
        if not r.accepted or r.name == 'help':
            return None
        return self.specs(command)[r.name]

    def validate_value(self, command: str, flag: str, value: Union[str, list[str], None]) -> Optional[str]:
        """Error message if HfArgumentParser would reject ``flag value``; None when accepted."""
        r = self.resolve(command, flag)
        if r.status == 'unknown':
            return f'{r.query}: unknown flag for ms-swift {self.version} {normalize_command(command)}'
        if r.status == 'ambiguous':
            return f'{r.query}: ambiguous option, could match {", ".join(r.candidates)}'
        if r.name == 'help':
            return f'{r.query}: matches --help'
        spec = self.specs(command)[r.name]
        tokens = [] if value is None else [value] if isinstance(value, str) else list(value)
        opt = r.option
        if r.negated:
            if tokens:
                return f'{opt} takes no value (got {tokens!r}; it would end up in remaining_argv)'
            return None
        if spec.type == 'list' or spec.nargs == '+':
            if not tokens:
                return f'{opt}: expected at least one argument'
            for t in tokens:
                err = _check_scalar(t, spec.item_type or 'str', spec.item_choices)
                if err:
                    return f'{opt}: {err}'
            return None
        if not tokens:
            if spec.bare_ok:
                return None
            return f'{opt}: expected one argument'
        if len(tokens) > 1:
            return f'{opt}: takes one value, got {len(tokens)} ({tokens!r}; extra tokens end up in remaining_argv)'
        return (lambda e: f'{opt}: {e}' if e else None)(_check_scalar(tokens[0], spec.type, spec.choices))


def _check_scalar(tok: str, typ: str, choices: Optional[list]) -> Optional[str]:
    if typ == 'bool' and choices is None:
        if string_to_bool(tok) is None:
            return (f'invalid bool {tok!r}: expected one of yes/no, true/false, t/f, y/n, 1/0 '
                    '(case insensitive)')
        return None
    if choices is not None:
        if tok in {str(c) for c in choices}:
            return None
        return f'invalid choice {tok!r} (choose from {", ".join(repr(str(c)) for c in choices)})'
    if typ == 'int':
        try:
            int(tok)
        except ValueError:
            return f'invalid int value {tok!r}'
    elif typ == 'float':
        try:
            float(tok)
        except ValueError:
            return f'invalid float value {tok!r}'
    elif typ == 'dict':
        return (f'invalid value {tok!r}: this field is typed dict and HfArgumentParser calls dict() on the '
                'string, so it cannot be set from the command line')
    return None
