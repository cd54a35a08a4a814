"""Per-version ms-swift command-line flag tables (checked in, no ms-swift needed).

Contract
--------
Data: ``diagnose/flags/data/<swift_version>.json.gz``, generated from the real
wheels by ``tools/gen_flag_tables.py`` (ast extraction of the argument
dataclasses + the transformers ``TrainingArguments`` they inherit, emulating
``HfArgumentParser``).  One table per minor line (its last release) plus 3.12.4.

Public API (all lazy; loading a table reads one ~10 kB gzip file, cached):

* ``available_versions() -> list[str]``
* ``table_for(version: str) -> FlagTable`` -- exact versions, ``"3.12.5"``,
  ``"4.x"``, ``"3.8-3.12.4"`` ...; rules in :mod:`diagnose.flags.versions`.
  Raises ``UnknownVersion`` (``ValueError``).
* ``FlagTable.resolve(command, flag) -> Resolution`` (exact / prefix /
  ambiguous / unknown, argparse allow_abbrev semantics -- true for 2.x too),
  ``FlagTable.spec(command, flag) -> FlagSpec | None``,
  ``FlagTable.validate_value(command, flag, value) -> str | None``.
* ``spell(concept, version, command='sft') -> str | None``,
  ``spell_value(concept, value, version, command='sft') -> (flag, value) | None``,
  ``renamed(flag, target_version, command='sft') -> Rename | None``,
  ``translate_value(flag, value, target_version, command='sft') -> str | None``
  -- see :mod:`diagnose.flags.concepts`.

Import cost: stdlib only until a submodule attribute is first used (pydantic is
imported with the table / concept modules).
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from .versions import DATA_DIR, UnknownVersion, available_versions, pick_version

if TYPE_CHECKING:  # pragma: no cover
    from .concepts import CONCEPTS, Rename, renamed, spell, spell_value, translate_value
    from .table import FlagSpec, FlagTable, Resolution, UnknownCommand

__all__ = [
    'available_versions', 'table_for', 'pick_version', 'UnknownVersion', 'UnknownCommand', 'FlagTable', 'FlagSpec',
    'Resolution', 'Rename', 'CONCEPTS', 'spell', 'spell_value', 'renamed', 'translate_value', 'DATA_DIR'
]

_LAZY = {
    'FlagTable': 'table', 'FlagSpec': 'table', 'Resolution': 'table', 'UnknownCommand': 'table',
    'Rename': 'concepts', 'CONCEPTS': 'concepts', 'spell': 'concepts', 'spell_value': 'concepts',
    'renamed': 'concepts', 'translate_value': 'concepts',
}


def __getattr__(name):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
    import importlib
    value = getattr(importlib.import_module(f'{__name__}.{mod}'), name)
    globals()[name] = value
    return value


@functools.lru_cache(maxsize=None)
def _load(version: str) -> 'FlagTable':
    from .table import FlagTable
    return FlagTable.load(DATA_DIR / f'{version}.json.gz')


def table_for(version: str) -> 'FlagTable':
    """Flag table for an ms-swift version spec (see :func:`diagnose.flags.versions.pick_version`)."""
    return _load(pick_version(version))
