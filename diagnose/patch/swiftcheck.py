"""Validate argvs with the installed ms-swift's own argument parser (parse only, no training).

Contract: `check_argvs([(command, argv), ...], version=None, python=None) ->
list[SwiftCheck] | None`.  None when no interpreter with ms-swift is found
(`$SWIFTDOC_SWIFT_PYTHON`, else the current one when `import swift` would work).
The parser is built in a subprocess exactly as ms-swift builds it
(`HfArgumentParser([<Args class>])` under swift's type-hint patch), and
`parse_known_args` is run: argparse errors (bad choice, bad type, ambiguous
prefix) and the leftover tokens (`remaining_argv`, which ms-swift turns into a
ValueError) are reported; the argument dataclass is never constructed, so
nothing is downloaded or trained.  Megatron classes import with stand-ins when
megatron-core is not installed.  When the installed ms-swift's minor line is
not `version`'s, every result has `skipped` set (the flag tables remain the
check).  `check_argv(command, argv, version)` is the one-argv form.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from typing import Optional

from pydantic import BaseModel

from diagnose.isolated import run_python

# megatron-core / transformer-engine stand-ins so ms-swift's argument classes import without them
# (they only need the names); shared with tests/test_flags.py's real-parser dump.
MEGATRON_STUB = r'''
import abc, importlib, importlib.abc, importlib.machinery, importlib.util, os, sys, types
class _Meta(abc.ABCMeta):
    def __getattr__(cls, name):
        if name.startswith('__'):
            raise AttributeError(name)
        return _Meta(name, (), {})
    def __call__(cls, *a, **k):
        return cls
    def __iter__(cls):
        return iter(())
    def __bool__(cls):
        return False
class _Mod(types.ModuleType):
    __path__ = []
    def __getattr__(self, name):
        if name.startswith('__'):
            raise AttributeError(name)
        v = _Meta(name, (), {})
        setattr(self, name, v)
        return v
_MISSING = {m for m in ('megatron', 'transformer_engine', 'mcore_bridge') if importlib.util.find_spec(m) is None}
class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.split('.')[0] in _MISSING:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None
    def create_module(self, spec):
        return _Mod(spec.name)
    def exec_module(self, m):
        m.__version__ = '0.15.0'
sys.meta_path.insert(0, _Finder())
if 'megatron' in _MISSING:  # ms-swift 3.x would otherwise git-clone Megatron-LM on import
    import tempfile
    os.environ.setdefault('MEGATRON_LM_PATH', tempfile.mkdtemp())
'''

_SCRIPT = MEGATRON_STUB + r'''
import contextlib, io, json, sys
req = json.loads(sys.stdin.read())
with contextlib.redirect_stdout(io.StringIO()):
    import swift
    from transformers import HfArgumentParser
    try:
        from swift.utils.utils import _patch_get_type_hints
    except ImportError:
        _patch_get_type_hints = contextlib.nullcontext
out = {'swift': swift.__version__, 'results': []}
parsers = {}
class _Err(Exception):
    pass
def _error(msg):
    raise _Err(msg)
for item in req['items']:
    cmd, argv = item['command'], item['argv']
    res = {'command': cmd, 'ok': False, 'rejected': [], 'error': None}
    try:
        if cmd not in parsers:
            qual = req['classes'][cmd]
            mod, _, name = qual.rpartition('.')
            with contextlib.redirect_stdout(io.StringIO()):
                cls = getattr(importlib.import_module(mod), name)
                with _patch_get_type_hints():
                    p = HfArgumentParser([cls])
            p.error = _error
            parsers[cmd] = p
        ns, rest = parsers[cmd].parse_known_args(argv)
        res['rejected'] = rest
        res['ok'] = not rest
    except _Err as e:
        res['error'] = str(e)
    except SystemExit as e:
        res['error'] = f'argparse exit {e.code}'
    except Exception as e:
        res['error'] = f'{type(e).__name__}: {e}'
    out['results'].append(res)
print('@@SWIFTCHECK@@' + json.dumps(out))
'''


class SwiftCheck(BaseModel):
    command: str
    ok: bool
    rejected: list[str] = []
    error: Optional[str] = None
    swift_version: str = ""
    python: str = ""
    skipped: Optional[str] = None

    def message(self) -> str:
        if self.skipped:
            return self.skipped
        if self.ok:
            return f"ms-swift {self.swift_version}'s parser accepts it"
        if self.error:
            return f"ms-swift {self.swift_version}'s parser rejects it: {self.error}"
        return f"ms-swift {self.swift_version} leaves {self.rejected} over (ValueError: remaining_argv)"


def find_swift_python() -> str | None:
    env = os.environ.get("SWIFTDOC_SWIFT_PYTHON")
    if env:
        return env if os.path.exists(env) else None
    try:
        if importlib.util.find_spec("swift") is not None and importlib.util.find_spec("transformers") is not None:
            return sys.executable
    except (ImportError, ValueError):
        return None
    return None


def _minor(v: str) -> tuple[int, ...]:
    from diagnose.flags.versions import vkey

    return vkey(v)[:2]


def check_argvs(items: list[tuple[str, list[str]]], version: str | None = None, python: str | None = None,
                timeout: float = 600) -> list[SwiftCheck] | None:
    from diagnose.flags import table_for
    from diagnose.flags.table import normalize_command

    py = python or find_swift_python()
    if py is None:
        return None
    table = table_for(version or "4.x")
    classes = table.doc.get("args_classes", {})
    payload = {"items": [{"command": normalize_command(c), "argv": list(a)} for c, a in items], "classes": classes}
    env = dict(os.environ)
    env.setdefault("PYTHONWARNINGS", "ignore")
    try:
        r = run_python(py, _SCRIPT, input=json.dumps(payload), capture_output=True, text=True,  # never the cwd's modules
                       timeout=timeout, env=env)
    except (OSError, subprocess.TimeoutExpired) as e:
        return [SwiftCheck(command=c, ok=False, python=py, skipped=f"could not run ms-swift's parser ({e})")
                for c, _ in items]
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("@@SWIFTCHECK@@")), None)
    if line is None:
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]
        return [SwiftCheck(command=c, ok=False, python=py, skipped=f"ms-swift's parser did not run: {tail[0]}")
                for c, _ in items]
    data = json.loads(line[len("@@SWIFTCHECK@@"):])
    sv = data["swift"]
    out = []
    for res in data["results"]:
        chk = SwiftCheck(command=res["command"], ok=res["ok"], rejected=res["rejected"], error=res["error"],
                         swift_version=sv, python=py)
        if version is not None and _minor(sv) != _minor(table.version):
            chk.skipped = (f"installed ms-swift {sv} is not the {table.version} line; checked with the {table.version} "
                           "flag table only")
        out.append(chk)
    return out


def check_argv(command: str, argv: list[str], version: str | None = None, python: str | None = None) -> SwiftCheck | None:
    res = check_argvs([(command, argv)], version, python)
    return res[0] if res else None
