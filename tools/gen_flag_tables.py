#!/usr/bin/env python3
"""Generate the per-version ms-swift flag tables in ``diagnose/flags/data/``.

Contract
--------
For every ms-swift release listed in ``SWIFT_VERSIONS`` this script

1. downloads the wheel (``pip download --no-deps ms-swift==X -d CACHE``) and the
   transformers wheel in ``TRANSFORMERS_FOR`` (the newest release allowed by
   that ms-swift's ``Requires-Dist: transformers`` pin when the tables were
   generated; ``--newest-transformers`` recomputes it).  The transformers
   ``TrainingArguments`` fields are inherited by the swift argument classes in
   3.x/4.x, so HF-inherited flags are those of that transformers version;
2. WITHOUT importing anything, reads the argument dataclasses with ``ast``:
   finds the CLI entry points (``sft_main``, ``pt_main``/``pretrain_main``,
   ``rlhf_main``, ``megatron_sft_main``, ``megatron_pt_main``/
   ``megatron_pretrain_main``, ``megatron_rlhf_main``), their ``args_class``,
   walks the class hierarchy with a C3 MRO (swift + transformers classes),
   collects dataclass fields exactly like ``dataclasses.fields`` would, and
   applies the rules of ``transformers.HfArgumentParser._parse_dataclass_field``
   (Union filtering -- including the argument order that typing's Union cache
   hands back when transformers created an equal Union first --,
   Literal/Enum -> choices, bool -> ``string_to_bool`` with
   ``nargs='?'``/``const=True`` when the default is not None, ``--no_x`` for
   bools defaulting to True, ``list`` -> ``nargs='+'``, metadata ``choices`` and
   ``aliases``; ms-swift's own ``_patch_get_type_hints`` Union[str, dict, None]
   fix is applied when the wheel contains it);
3. writes ``<out>/<swift_version>.json.gz`` (compact JSON, gzip with mtime 0) with the layout::

     {"swift_version", "transformers_version", "source_wheel",
      "transformers_wheel", "generated_by", "parser": {...},
      "commands": {"sft": {dest: spec, ...}, ...}}

   A spec holds ``type`` (bool/int/float/str/dict-json/dict/other), optional
   ``nargs`` ('+' lists, '?' bools with const True), ``item_type`` (lists),
   ``choices``, ``default`` (JSON value or null), ``default_expr`` (source text
   of a default that is not a literal), ``required``, ``no_flag`` (bools
   defaulting True), ``aliases`` and ``src`` ('hf' for fields inherited from
   transformers).

Output is byte-for-byte reproducible.  Validated against the real parsers of
installed ms-swift 4.6.0 (transformers 5.19.0) and 3.8.1 (transformers 4.56.2),
all six commands: see ``tests/test_flags.py::test_real_parser_matches_table``.

Usage: ``python tools/gen_flag_tables.py [--cache DIR] [--out DIR] [--only 4.6.0 ...]``
Needs network access to PyPI (only for wheels not yet in the cache).
"""
from __future__ import annotations

import argparse
import ast
import builtins
import gzip
import json
import os
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from typing import Any

GENERATED_BY = 'tools/gen_flag_tables.py (ast extraction, no imports)'

# Last release of each minor line (plus 3.12.4: the log format changes inside 3.12).
SWIFT_VERSIONS = [
    '2.5.2.post1', '2.6.1',
    '3.0.3', '3.1.1.post1', '3.2.2', '3.3.1', '3.4.1.post1', '3.5.3', '3.6.4', '3.7.3', '3.8.3', '3.9.3',
    '3.10.3', '3.11.3', '3.12.4', '3.12.6',
    '4.0.4', '4.1.3', '4.2.3', '4.3.2', '4.4.2', '4.5.3', '4.6.0',
]

# transformers used for each table: the newest release allowed by that ms-swift's pin (as of generation).
# Pinned here so regeneration is reproducible; --newest-transformers recomputes it from PyPI.
TRANSFORMERS_FOR = {
    '2.5.2.post1': '4.47.1', '2.6.1': '4.47.1', '3.0.3': '4.48.3', '3.1.1.post1': '4.49.0', '3.2.2': '4.50.3',
    '3.3.1': '4.52.4', '3.4.1.post1': '4.52.4', '3.5.3': '4.52.4', '3.6.4': '4.52.4', '3.7.3': '4.55.4',
    '3.8.3': '4.56.2', '3.9.3': '4.57.6', '3.10.3': '4.57.6', '3.11.3': '4.57.6', '3.12.4': '4.57.6',
    '3.12.6': '4.57.6', '4.0.4': '5.3.0', '4.1.3': '5.6.2', '4.2.3': '5.8.1', '4.3.2': '5.12.1', '4.4.2': '5.12.1',
    '4.5.3': '5.16.1', '4.6.0': '5.19.0',
}

COMMAND_MAINS = {
    'sft': ['sft_main'],
    'pt': ['pt_main', 'pretrain_main'],
    'rlhf': ['rlhf_main'],
    'megatron_sft': ['megatron_sft_main'],
    'megatron_pt': ['megatron_pt_main', 'megatron_pretrain_main'],
    'megatron_rlhf': ['megatron_rlhf_main'],
}

MISSING = object()


# --------------------------------------------------------------------------- version helpers
def vkey(v: str) -> tuple:
    m = re.match(r'^(\d+)\.(\d+)(?:\.(\d+))?(?:\.post(\d+))?', v)
    if not m:
        return (0,)
    return tuple(int(x or 0) for x in m.groups())


def satisfies(version: str, spec: str) -> bool:
    for part in spec.split(','):
        part = part.strip()
        if not part:
            continue
        m = re.match(r'(<=|>=|==|!=|<|>|~=)\s*(.+)', part)
        op, ref = m.group(1), m.group(2)
        a, b = vkey(version), vkey(ref)
        ok = {'<': a < b, '<=': a <= b, '>': a > b, '>=': a >= b, '==': a == b, '!=': a != b,
              '~=': a >= b}[op]
        if not ok:
            return False
    return True


def pip_available_versions(package: str) -> list[str]:
    out = subprocess.run([sys.executable, '-m', 'pip', 'index', 'versions', package], capture_output=True,
                         text=True, check=True).stdout
    m = re.search(r'Available versions:\s*(.+)', out)
    return [v.strip() for v in m.group(1).split(',')] if m else []


def download(package: str, version: str, cache: str) -> str:
    norm = package.replace('-', '_')
    for fn in os.listdir(cache):
        if fn.startswith(f'{norm}-{version}-') and fn.endswith('.whl'):
            return os.path.join(cache, fn)
    subprocess.run([sys.executable, '-m', 'pip', 'download', '-q', '--no-deps', f'{package}=={version}', '-d', cache],
                   check=True)
    for fn in os.listdir(cache):
        if fn.startswith(f'{norm}-{version}-') and fn.endswith('.whl'):
            return os.path.join(cache, fn)
    raise FileNotFoundError(f'{package}=={version} not found in {cache}')


def transformers_pin(swift_wheel: str) -> str:
    with zipfile.ZipFile(swift_wheel) as z:
        meta_name = next(n for n in z.namelist() if n.endswith('.dist-info/METADATA'))
        meta = z.read(meta_name).decode()
    for line in meta.splitlines():
        m = re.match(r'Requires-Dist:\s*transformers\s*([<>=!~][^;]*)$', line.strip())
        if m:
            return m.group(1).strip()
    raise ValueError('no transformers pin in ' + swift_wheel)


# --------------------------------------------------------------------------- source index
class Source:
    """Lazily parsed python modules of one wheel, keyed by dotted module name."""

    def __init__(self, wheel: str, top: str):
        self.wheel = wheel
        self.zip = zipfile.ZipFile(wheel)
        self.paths: dict[str, str] = {}
        self.packages: set[str] = set()
        for n in self.zip.namelist():
            if not n.startswith(top + '/') or not n.endswith('.py'):
                continue
            mod = n[:-3].replace('/', '.')
            if mod.endswith('.__init__'):
                mod = mod[:-len('.__init__')]
                self.packages.add(mod)
            self.paths[mod] = n
        self._cache: dict[str, ast.Module] = {}

    def text(self, mod: str) -> str:
        return self.zip.read(self.paths[mod]).decode('utf-8')

    def module(self, mod: str) -> ast.Module | None:
        if mod not in self.paths:
            return None
        if mod not in self._cache:
            self._cache[mod] = ast.parse(self.text(mod))
        return self._cache[mod]


@dataclass
class ClassSym:
    mod: str
    node: ast.ClassDef

    @property
    def qualname(self):
        return f'{self.mod}.{self.node.name}'


@dataclass
class ExprSym:
    mod: str
    node: ast.AST


@dataclass
class ExternalSym:
    qualname: str


@dataclass
class ModuleSym:
    mod: str


@dataclass
class FuncSym:
    mod: str
    node: ast.FunctionDef


def _toplevel_stmts(body):
    """Module-level statements, descending into if/try/with blocks (not defs/classes)."""
    for st in body:
        yield st
        if isinstance(st, ast.If):
            yield from _toplevel_stmts(st.body)
            yield from _toplevel_stmts(st.orelse)
        elif isinstance(st, ast.Try):
            yield from _toplevel_stmts(st.body)
            for h in st.handlers:
                yield from _toplevel_stmts(h.body)
            yield from _toplevel_stmts(st.orelse)
            yield from _toplevel_stmts(st.finalbody)
        elif isinstance(st, ast.With):
            yield from _toplevel_stmts(st.body)


class World:
    def __init__(self, sources: list[Source]):
        self.sources = sources
        self._resolve_cache: dict = {}
        self.union_order: dict[frozenset, list] = {}

    def src(self, mod: str) -> Source | None:
        for s in self.sources:
            if mod in s.paths:
                return s
        return None

    def module(self, mod: str):
        s = self.src(mod)
        return s.module(mod) if s else None

    def is_package(self, mod):
        s = self.src(mod)
        return bool(s and mod in s.packages)

    def indexed_prefix(self, mod: str) -> bool:
        top = mod.split('.')[0]
        return any(any(p == top or p.startswith(top + '.') for p in s.paths) for s in self.sources)

    def abs_module(self, mod: str, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ''
        parts = mod.split('.')
        if not self.is_package(mod):
            parts = parts[:-1]
        if node.level > 1:
            parts = parts[:len(parts) - (node.level - 1)]
        base = '.'.join(parts)
        return f'{base}.{node.module}' if node.module else base

    def resolve(self, mod: str, name: str, _depth=0):
        key = (mod, name)
        if key in self._resolve_cache:
            return self._resolve_cache[key]
        res = self._resolve(mod, name, _depth)
        self._resolve_cache[key] = res
        return res

    def _resolve_in(self, target: str, name: str, depth: int):
        if self.module(target) is not None:
            r = self.resolve(target, name, depth + 1)
            if r is not None:
                return r
        sub = f'{target}.{name}'
        if self.module(sub) is not None:
            return ModuleSym(sub)
        if self.indexed_prefix(target):
            return None
        return ExternalSym(f'{target}.{name}')

    def _resolve(self, mod: str, name: str, depth: int):
        if depth > 40:
            return None
        tree = self.module(mod)
        if tree is None:
            return None
        classdef = imp = assign = None
        stars = []
        for st in _toplevel_stmts(tree.body):
            if isinstance(st, ast.ClassDef) and st.name == name and classdef is None:
                classdef = ClassSym(mod, st)
            elif isinstance(st, ast.FunctionDef) and st.name == name and classdef is None:
                classdef = FuncSym(mod, st)
            elif isinstance(st, ast.ImportFrom):
                for a in st.names:
                    if a.name == '*':
                        stars.append(self.abs_module(mod, st))
                    elif (a.asname or a.name) == name and imp is None:
                        imp = (self.abs_module(mod, st), a.name)
            elif isinstance(st, ast.Import):
                for a in st.names:
                    if a.asname == name and imp is None:
                        imp = ('<module>', a.name)
                    elif a.asname is None and a.name.split('.')[0] == name and imp is None:
                        imp = ('<module>', name)
            elif isinstance(st, ast.Assign) and assign is None:
                for t in st.targets:
                    if isinstance(t, ast.Name) and t.id == name:
                        assign = ExprSym(mod, st.value)
            elif isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.target.id == name \
                    and st.value is not None and assign is None:
                assign = ExprSym(mod, st.value)
        if classdef is not None:
            return classdef
        if imp is not None:
            target, orig = imp
            if target == '<module>':
                return ModuleSym(orig) if self.module(orig) is not None or self.indexed_prefix(orig) \
                    else ExternalSym(orig)
            r = self._resolve_in(target, orig, depth)
            if r is not None:
                return r
        if assign is not None:
            return assign
        # lazy-import packages: _import_structure = {'submodule': ['Name', ...]}
        for st in _toplevel_stmts(tree.body):
            if isinstance(st, (ast.Assign, ast.AnnAssign)):
                tgt = st.targets[0] if isinstance(st, ast.Assign) else st.target
                if isinstance(tgt, ast.Name) and tgt.id == '_import_structure' and isinstance(st.value, ast.Dict):
                    for k, v in zip(st.value.keys, st.value.values):
                        if isinstance(k, ast.Constant) and isinstance(v, (ast.List, ast.Tuple, ast.Set)):
                            names = [e.value for e in v.elts if isinstance(e, ast.Constant)]
                            if name in names:
                                r = self.resolve(f'{mod}.{k.value}', name, depth + 1)
                                if r is not None:
                                    return r
        for target in stars:
            if self.module(target) is not None:
                r = self.resolve(target, name, depth + 1)
                if r is not None:
                    return r
        if self.module(f'{mod}.{name}') is not None:
            return ModuleSym(f'{mod}.{name}')
        if hasattr(builtins, name):
            return ExternalSym(f'builtins.{name}')
        return None

    def eval_ref(self, mod: str, node: ast.AST):
        if isinstance(node, ast.Name):
            return self.resolve(mod, node.id)
        if isinstance(node, ast.Attribute):
            base = self.eval_ref(mod, node.value)
            if isinstance(base, ModuleSym):
                if self.module(base.mod) is not None:
                    return self._resolve_in(base.mod, node.attr, 0)
                return ExternalSym(f'{base.mod}.{node.attr}')
            if isinstance(base, ExternalSym):
                return ExternalSym(f'{base.qualname}.{node.attr}')
            if isinstance(base, ClassSym):
                return ('member', base, node.attr)
            return None
        return None

    # ---------------------------------------------------------------- classes
    def class_bases(self, cls: ClassSym) -> list:
        out = []
        for b in cls.node.bases:
            r = self.eval_ref(cls.mod, b)
            if isinstance(r, ExprSym):  # alias assignment: X = Y
                r = self.eval_ref(r.mod, r.node)
            if r is None:
                raise RuntimeError(f'cannot resolve base {ast.unparse(b)} of {cls.qualname}')
            out.append(r)
        return out

    def mro(self, cls) -> list:
        key = ('mro', cls.qualname if isinstance(cls, ClassSym) else cls.qualname)
        if key in self._resolve_cache:
            return self._resolve_cache[key]
        if isinstance(cls, ExternalSym):
            res = [cls]
        else:
            bases = [b for b in self.class_bases(cls) if not (isinstance(b, ExternalSym)
                                                               and b.qualname == 'builtins.object')]
            seqs = [self.mro(b) for b in bases] + [bases]
            res = [cls]
            seqs = [list(s) for s in seqs if s]
            while seqs:
                for s in seqs:
                    head = s[0]
                    if not any(_same(head, x) for t in seqs for x in t[1:]):
                        break
                else:
                    raise RuntimeError(f'inconsistent MRO for {cls.qualname}')
                res.append(head)
                seqs = [[x for x in t if not _same(x, head)] for t in seqs]
                seqs = [t for t in seqs if t]
        self._resolve_cache[key] = res
        return res

    def is_dataclass_decorated(self, cls: ClassSym) -> bool:
        for d in cls.node.decorator_list:
            target = d.func if isinstance(d, ast.Call) else d
            r = self.eval_ref(cls.mod, target)
            if isinstance(r, ExternalSym) and r.qualname in ('dataclasses.dataclass', ):
                return True
        return False

    def is_enum(self, cls) -> bool:
        for c in self.mro(cls):
            if isinstance(c, ExternalSym) and c.qualname in ('enum.Enum', 'enum.IntEnum', 'enum.StrEnum'):
                return True
        return False

    def enum_values(self, cls: ClassSym) -> list:
        vals = []
        for st in cls.node.body:
            if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) \
                    and not st.targets[0].id.startswith('_'):
                try:
                    vals.append(ast.literal_eval(st.value))
                except ValueError:
                    vals.append(None)
        return vals

    def dataclass_fields(self, cls) -> dict | None:
        """Emulates ``getattr(cls, '__dataclass_fields__')`` -> {name: FieldInfo}."""
        if isinstance(cls, ExternalSym):
            return None
        key = ('fields', cls.qualname)
        if key in self._resolve_cache:
            return self._resolve_cache[key]
        if not self.is_dataclass_decorated(cls):
            res = None
            for c in self.mro(cls)[1:]:
                f = self.dataclass_fields(c)
                if f is not None:
                    res = f
                    break
            self._resolve_cache[key] = res
            return res
        fields: dict[str, dict] = {}
        for b in reversed(self.mro(cls)[1:]):
            bf = self.dataclass_fields(b)
            if bf:
                for name, f in bf.items():
                    fields[name] = f
        for st in cls.node.body:
            if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)):
                continue
            ann = st.annotation
            ann_src = ast.unparse(ann)
            if re.match(r'^(typing\.)?ClassVar\b', ann_src) or re.match(r'^(dataclasses\.)?InitVar\b', ann_src):
                continue
            info = {'name': st.target.id, 'mod': cls.mod, 'cls': cls.qualname, 'annotation': ann,
                    'default': MISSING, 'default_factory': MISSING, 'metadata': {}, 'init': True}
            v = st.value
            if isinstance(v, ast.Call) and isinstance(self.eval_ref(cls.mod, v.func), ExternalSym) and \
                    self.eval_ref(cls.mod, v.func).qualname == 'dataclasses.field':
                for kw in v.keywords:
                    if kw.arg == 'default':
                        info['default'] = kw.value
                    elif kw.arg == 'default_factory':
                        info['default_factory'] = kw.value
                    elif kw.arg == 'metadata':
                        info['metadata'] = self.metadata(cls.mod, kw.value)
                    elif kw.arg == 'init':
                        info['init'] = not (isinstance(kw.value, ast.Constant) and kw.value.value is False)
            elif v is not None:
                info['default'] = v
            fields[st.target.id] = info
        self._resolve_cache[key] = fields
        return fields

    def metadata(self, mod, node) -> dict:
        items = {}
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if isinstance(k, ast.Constant):
                    items[k.value] = v
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == 'dict':
            for kw in node.keywords:
                items[kw.arg] = kw.value
        out = {}
        for k in ('choices', 'aliases', 'nargs'):
            if k in items:
                out[k] = items[k]
        return out

    # ---------------------------------------------------------------- types
    def eval_type(self, mod: str, node: ast.AST):
        """Type model: ('prim', name) | ('none',) | ('union', [..]) | ('list', item) | ('dict',) |
        ('literal', [values]) | ('enum', [values], qualname) | ('other', text)."""
        if node is None:
            return ('other', 'None?')
        if isinstance(node, ast.Constant):
            if node.value is None:
                return ('none', )
            if isinstance(node.value, str):
                return self.eval_type(mod, ast.parse(node.value, mode='eval').body)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return make_union([self.eval_type(mod, node.left), self.eval_type(mod, node.right)])
        if isinstance(node, ast.Subscript):
            base = self.eval_ref(mod, node.value)
            bq = base.qualname if isinstance(base, ExternalSym) else None
            sl = node.slice
            if isinstance(sl, ast.Index):  # py<3.9
                sl = sl.value
            elts = list(sl.elts) if isinstance(sl, ast.Tuple) else [sl]
            if bq == 'typing.Optional':
                return make_union([self.eval_type(mod, elts[0]), ('none', )])
            if bq == 'typing.Union':
                return make_union([self.eval_type(mod, e) for e in elts])
            if bq in ('typing.List', 'builtins.list', 'typing.Sequence', 'collections.abc.Sequence'):
                if bq == 'typing.Sequence' or bq == 'collections.abc.Sequence':
                    return ('other', ast.unparse(node))
                return ('list', self.eval_type(mod, elts[0]))
            if bq in ('typing.Dict', 'builtins.dict', 'typing.Mapping'):
                return ('dict', )
            if bq in ('typing.Tuple', 'builtins.tuple'):
                return ('other', ast.unparse(node))
            if bq in ('typing.Literal', 'typing_extensions.Literal'):
                vals = []
                for e in elts:
                    try:
                        vals.append(ast.literal_eval(e))
                    except ValueError:
                        return ('other', ast.unparse(node))
                return ('literal', vals)
            if bq in ('typing.Annotated', 'typing_extensions.Annotated'):
                return self.eval_type(mod, elts[0])
            return ('other', ast.unparse(node))
        ref = self.eval_ref(mod, node)
        if isinstance(ref, ExprSym):
            return self.eval_type(ref.mod, ref.node)
        if isinstance(ref, ExternalSym):
            q = ref.qualname
            prim = {'builtins.bool': 'bool', 'builtins.int': 'int', 'builtins.float': 'float', 'builtins.str': 'str'}
            if q in prim:
                return ('prim', prim[q])
            if q in ('builtins.list', 'typing.List'):
                return ('list', None)
            if q in ('builtins.dict', 'typing.Dict'):
                return ('dict', )
            if q == 'builtins.None':
                return ('none', )
            return ('other', q)
        if isinstance(ref, ClassSym):
            if self.is_enum(ref):
                return ('enum', self.enum_values(ref), ref.qualname)
            return ('other', ref.qualname)
        return ('other', ast.unparse(node))

    def eval_value(self, mod: str, node: ast.AST):
        """Literal value of a default expression, or MISSING when it is not a literal."""
        try:
            return _jsonable(ast.literal_eval(node))
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            pass
        ref = self.eval_ref(mod, node) if isinstance(node, (ast.Name, ast.Attribute)) else None
        if isinstance(ref, tuple) and ref[0] == 'member':
            cls, attr = ref[1], ref[2]
            if self.is_enum(cls):
                for st in cls.node.body:
                    if isinstance(st, ast.Assign) and isinstance(st.targets[0], ast.Name) and st.targets[0].id == attr:
                        return self.eval_value(cls.mod, st.value)
        if isinstance(ref, ExprSym):
            return self.eval_value(ref.mod, ref.node)
        if isinstance(ref, ExternalSym) and ref.qualname == 'builtins.None':
            return None
        return MISSING

    def seed_union_cache(self, modules: list[str]):
        """Record the argument order of every typing.Union built (at import time) by ``modules``.

        typing caches ``Union[...]``/``Optional[...]`` and Union equality ignores order, so a later
        ``Optional[Union[str, dict]]`` can come back as an earlier ``Optional[Union[dict, str]]``.  HfArgumentParser's
        Union filtering depends on that order.  PEP 604 unions (``X | Y``) are not cached and are skipped.
        """
        for mod in modules:
            tree = self.module(mod)
            if tree is None:
                continue
            anns = []
            for node in ast.walk(tree):
                if isinstance(node, ast.AnnAssign):
                    anns.append(node.annotation)
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    a = node.args
                    anns.extend(x.annotation for x in a.posonlyargs + a.args + a.kwonlyargs if x.annotation)
                    if node.returns is not None:
                        anns.append(node.returns)
            for ann in sorted(anns, key=lambda n: (n.lineno, n.col_offset)):
                src = ast.unparse(ann)
                if '|' in src or not ('Union[' in src or 'Optional[' in src):
                    continue
                try:
                    T = self.eval_type(mod, ann)
                except Exception:  # noqa: BLE001 - best effort
                    continue
                self._seed_walk(T)

    def _seed_walk(self, T):
        if not isinstance(T, tuple):
            return
        if T[0] == 'union':
            self.union_order.setdefault(frozenset(map(repr, T[1])), T[1])
            for a in T[1]:
                self._seed_walk(a)
        elif T[0] == 'list' and T[1] is not None:
            self._seed_walk(T[1])

    def cached_union(self, T):
        if T[0] != 'union':
            return T
        return ('union', self.union_order.get(frozenset(map(repr, T[1])), T[1]))

    def eval_keys(self, mod: str, node: ast.AST, depth: int = 0):
        """Keys of a dict-valued expression (``X.keys()``, ``dict(**X, k=v)``, ``X.copy()``, ``f()``), or None."""
        if depth > 20:
            return None
        if isinstance(node, ast.Dict):
            keys = []
            for k, v in zip(node.keys, node.values):
                if k is None:
                    sub = self.eval_keys(mod, v, depth + 1)
                    if sub is None:
                        return None
                    keys.extend(sub)
                elif isinstance(k, ast.Constant):
                    keys.append(k.value)
                else:
                    return None
            return keys
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr in ('keys', 'copy') and not node.args:
                return self.eval_keys(mod, f.value, depth + 1)
            if isinstance(f, ast.Name) and f.id in ('list', 'tuple', 'sorted') and len(node.args) == 1:
                return self.eval_keys(mod, node.args[0], depth + 1)
            ref = self.eval_ref(mod, f)
            if isinstance(ref, ExternalSym) and ref.qualname == 'builtins.dict':
                keys = []
                for a in node.args:
                    sub = self.eval_keys(mod, a, depth + 1)
                    if sub is None:
                        return None
                    keys.extend(sub)
                for kw in node.keywords:
                    if kw.arg is None:
                        sub = self.eval_keys(mod, kw.value, depth + 1)
                        if sub is None:
                            return None
                        keys.extend(sub)
                    else:
                        keys.append(kw.arg)
                return keys
            if isinstance(ref, FuncSym):
                rets = [n for n in ast.walk(ref.node) if isinstance(n, ast.Return) and n.value is not None]
                if len(rets) == 1:
                    return self.eval_keys(ref.mod, rets[0].value, depth + 1)
            return None
        if isinstance(node, (ast.List, ast.Tuple)):
            try:
                return _jsonable(ast.literal_eval(node))
            except ValueError:
                return None
        if isinstance(node, (ast.Name, ast.Attribute)):
            ref = self.eval_ref(mod, node)
            if isinstance(ref, ExprSym):
                return self.eval_keys(ref.mod, ref.node, depth + 1)
        return None

    def eval_factory(self, mod: str, node: ast.AST):
        ref = self.eval_ref(mod, node) if isinstance(node, (ast.Name, ast.Attribute)) else None
        if isinstance(ref, ExternalSym):
            if ref.qualname in ('builtins.list', 'typing.List'):
                return []
            if ref.qualname in ('builtins.dict', 'typing.Dict'):
                return {}
        if isinstance(node, ast.Lambda):
            return self.eval_value(mod, node.body)
        return MISSING


def _same(a, b):
    qa = a.qualname
    qb = b.qualname
    return qa == qb


def _jsonable(v):
    if isinstance(v, tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (set, frozenset)):
        return sorted(_jsonable(x) for x in v)
    if isinstance(v, float) and (v != v or v in (float('inf'), float('-inf'))):
        return repr(v)
    if isinstance(v, (bytes, complex)):
        return repr(v)
    return v


def make_union(args):
    flat = []
    for a in args:
        items = a[1] if a[0] == 'union' else [a]
        for i in items:
            if i not in flat:
                flat.append(i)
    if len(flat) == 1:
        return flat[0]
    return ('union', flat)


STR = ('prim', 'str')
BOOL = ('prim', 'bool')
NONE = ('none', )


# --------------------------------------------------------------------------- HfArgumentParser emulation
def hf_field_spec(world: World, f: dict, patch_str_dict: bool, warnings: list) -> dict:
    """Emulate HfArgumentParser._parse_dataclass_field (transformers 4.47 .. 5.19 behave identically)."""
    mod = f['mod']
    T = world.cached_union(world.eval_type(mod, f['annotation']))
    orig_T = T
    if patch_str_dict and T == ('union', [STR, ('dict', ), NONE]):
        T = ('union', [('dict', ), STR, NONE])
    spec: dict[str, Any] = {}
    default = MISSING if f['default'] is MISSING else world.eval_value(mod, f['default'])
    default_expr = None
    if f['default'] is not MISSING and default is MISSING:
        default_expr = ast.unparse(f['default'])
    factory = MISSING
    if f['default_factory'] is not MISSING:
        factory = world.eval_factory(mod, f['default_factory'])
        if factory is MISSING:
            default_expr = ast.unparse(f['default_factory']) + '()'
    has_default = f['default'] is not MISSING
    dict_in_union = False
    if T[0] == 'union':
        args = T[1]
        dict_in_union = ('dict', ) in args
        if STR not in args and (len(args) != 2 or NONE not in args):
            warnings.append(f"{f['name']}: Union {args} would make HfArgumentParser raise")
            spec['type'] = 'other'
            return spec
        if NONE not in args:
            T = args[0] if args[1] == STR else args[1]
        elif BOOL not in args:
            if args[1][0] == 'list' and args[1][1] is not None and STR in args:
                # HF evaluates isinstance(None, List[str]) here, which raises TypeError ... unless typing's
                # Union cache hands back an equal Union created earlier with another argument order.  ms-swift
                # itself creates Optional[Union[List[str], str]] (swift/hub/hub.py) before its argument classes,
                # so e.g. 4.6 megatron `cp_comm_type: Optional[Union[str, List[str]]]` really parses as str.
                warnings.append(f"{f['name']}: {ast.unparse(f['annotation'])} -> str (typing Union cache order)")
                T = STR
            else:
                T = args[0] if args[1] == NONE else args[1]
    md = f['metadata']
    if 'choices' in md:
        try:
            spec['choices'] = _jsonable(ast.literal_eval(md['choices']))
        except ValueError:
            keys = world.eval_keys(mod, md['choices'])
            if keys is not None:
                spec['choices'] = keys
            else:
                spec['choices_expr'] = ast.unparse(md['choices'])
    if 'aliases' in md:
        try:
            al = ast.literal_eval(md['aliases'])
            spec['aliases'] = [al] if isinstance(al, str) else list(al)
        except ValueError:
            warnings.append(f"{f['name']}: non-literal aliases")
    is_bool = T == BOOL or T == ('union', [BOOL, NONE]) or T == ('union', [NONE, BOOL])
    if T[0] in ('literal', 'enum'):
        choices = _jsonable(T[1])
        spec['choices'] = choices
        spec.pop('choices_expr', None)
        vt = {type(c).__name__ for c in choices if c is not None}
        spec['type'] = {'str': 'str', 'int': 'int', 'float': 'float', 'bool': 'bool'}.get(vt.pop(), 'str') \
            if len(vt) == 1 else 'str'
        if not has_default:
            spec['required'] = True
    elif is_bool:
        spec['type'] = 'bool'
        if T == BOOL or (has_default and default is not None):
            spec['nargs'] = '?'
            spec['const'] = True
            if not has_default:
                default = False
                has_default = True
        if has_default and default is True:
            spec['no_flag'] = True
    elif T[0] == 'list':
        item = T[1]
        spec['nargs'] = '+'
        spec['type'] = 'list'
        if item is None:
            warnings.append(f"{f['name']}: bare list annotation (HfArgumentParser would crash)")
            spec['item_type'] = 'other'
        elif item[0] == 'prim':
            spec['item_type'] = item[1]
        elif item[0] in ('literal', 'enum'):
            spec['item_type'] = 'str'
            spec['item_choices'] = _jsonable(item[1])
        else:
            spec['item_type'] = 'other'
        # HfArgumentParser only passes default_factory() for lists; a plain `default=` is NOT given to
        # argparse (the namespace then holds None), e.g. HF `debug: str | list[DebugOption] = ""`.
        if factory is not MISSING:
            default, has_default = factory, True
        elif f['default_factory'] is not MISSING:
            has_default = False
        elif not has_default:
            spec['required'] = True
        else:
            default, default_expr, has_default = None, None, True
    else:
        if T[0] == 'prim':
            spec['type'] = T[1]
            if T[1] == 'str' and dict_in_union:
                spec['type'] = 'dict-json'
        elif T[0] == 'dict':
            spec['type'] = 'dict'
        else:
            spec['type'] = 'other'
            spec['type_repr'] = T[1] if isinstance(T[1], str) else repr(T)
        if not has_default:
            if factory is not MISSING:
                default, has_default = factory, True
            elif f['default_factory'] is MISSING:
                spec['required'] = True
    if has_default and default is not MISSING:
        spec['default'] = default
    elif default_expr is not None:
        spec['default'] = None
        spec['default_expr'] = default_expr
    else:
        spec['default'] = None
    if orig_T != T and orig_T[0] == 'union' and NONE in orig_T[1]:
        spec['optional'] = True
    if f['cls'].startswith('transformers.'):
        spec['src'] = 'hf'
    return spec


def find_commands(world: World, swift: Source) -> dict[str, ClassSym]:
    found: dict[str, ClassSym] = {}
    mains: dict[str, tuple[str, ast.AST]] = {}
    wanted = {n for names in COMMAND_MAINS.values() for n in names}
    for mod in sorted(swift.paths):
        if '.cli.' in mod or 'ray' in mod.split('.'):
            continue
        text = swift.text(mod)
        if not any(w in text for w in wanted):
            continue
        tree = swift.module(mod)
        for st in tree.body:
            if isinstance(st, ast.FunctionDef) and st.name in wanted:
                mains.setdefault(st.name, (mod, st))
            elif isinstance(st, ast.Assign) and isinstance(st.targets[0], ast.Name) and st.targets[0].id in wanted \
                    and isinstance(st.value, ast.Call):
                mains.setdefault(st.targets[0].id, (mod, st))
    for cmd, names in COMMAND_MAINS.items():
        for n in names:
            if n not in mains:
                continue
            mod, st = mains[n]
            args_cls = None
            if isinstance(st, ast.Assign):  # 2.x: sft_main = get_sft_main(SftArguments, llm_sft)
                args_cls = world.eval_ref(mod, st.value.args[0])
            else:
                for node in ast.walk(st):
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                            node.func.attr == 'main' and isinstance(node.func.value, ast.Call):
                        pipe = world.eval_ref(mod, node.func.value.func)
                        args_cls = pipeline_args_class(world, pipe)
                        break
            if isinstance(args_cls, ClassSym):
                found[cmd] = args_cls
                break
            raise RuntimeError(f'cannot find args class for {n} in {mod}')
    return found


def pipeline_args_class(world: World, pipe):
    for c in world.mro(pipe):
        if not isinstance(c, ClassSym):
            continue
        for st in c.node.body:
            if isinstance(st, ast.Assign) and isinstance(st.targets[0], ast.Name) and st.targets[0].id == 'args_class':
                return world.eval_ref(c.mod, st.value)
    return None


def build_table(swift_whl: str, tf_whl: str, swift_version: str, tf_version: str) -> tuple[dict, list]:
    swift = Source(swift_whl, 'swift')
    tf = Source(tf_whl, 'transformers')
    world = World([swift, tf])
    warnings: list[str] = []
    utils_text = swift.text('swift.utils.utils') if 'swift.utils.utils' in swift.paths else ''
    patch_str_dict = '_patch_get_type_hints' in utils_text and 'Union[str, dict, type(None)]' in utils_text
    hf_text = tf.text('transformers.hf_argparser')
    dash_aliases = 'field.name.replace("_", "-")' in hf_text or "field.name.replace('_', '-')" in hf_text
    # modules whose typing.Unions exist before the swift argument classes are created (see seed_union_cache)
    world.seed_union_cache(['transformers.utils.generic', 'transformers.trainer_utils', 'transformers.debug_utils',
                            'transformers.training_args', 'transformers.training_args_seq2seq',
                            'transformers.hf_argparser', 'swift.hub.hub'])
    commands = {}
    classes = {}
    for cmd, cls in find_commands(world, swift).items():
        fields = world.dataclass_fields(cls)
        table = {}
        for name, f in fields.items():
            if not f['init']:
                continue
            table[name] = hf_field_spec(world, f, patch_str_dict, warnings)
        commands[cmd] = table
        classes[cmd] = cls.qualname
    doc = {
        'swift_version': swift_version,
        'transformers_version': tf_version,
        'source_wheel': os.path.basename(swift_whl),
        'transformers_wheel': os.path.basename(tf_whl),
        'generated_by': GENERATED_BY,
        'parser': {
            'class': 'transformers.HfArgumentParser',
            'allow_abbrev': True,
            'dash_aliases': dash_aliases,
            'swift_str_dict_patch': patch_str_dict,
            'unknown_flags': 'ValueError: remaining_argv (parse_args_into_dataclasses(return_remaining_strings=True))',
        },
        'args_classes': classes,
        'commands': commands,
    }
    return doc, sorted(set(warnings))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument('--cache', default=os.environ.get('SWIFTDOC_WHEEL_CACHE',
                                                      os.path.expanduser('~/.cache/swiftdoc/wheels')))
    ap.add_argument('--out', default=os.path.join(here, '..', 'diagnose', 'flags', 'data'))
    ap.add_argument('--only', nargs='*', default=None, help='subset of ms-swift versions')
    ap.add_argument('--transformers', default=None, help='force one transformers version for every table')
    ap.add_argument('--newest-transformers', action='store_true',
                    help='ignore TRANSFORMERS_FOR and use the newest PyPI release allowed by each pin')
    args = ap.parse_args(argv)
    os.makedirs(args.cache, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    tf_versions = None
    for sv in args.only or SWIFT_VERSIONS:
        swhl = download('ms-swift', sv, args.cache)
        pin = transformers_pin(swhl)
        tv = args.transformers or (None if args.newest_transformers else TRANSFORMERS_FOR.get(sv))
        if tv is not None and not satisfies(tv, pin):
            raise SystemExit(f'transformers {tv} does not satisfy the ms-swift {sv} pin {pin}')
        if tv is None:
            if tf_versions is None:
                tf_versions = [v for v in pip_available_versions('transformers') if re.fullmatch(r'[\d.]+', v)]
            tv = max((v for v in tf_versions if satisfies(v, pin)), key=vkey)
        twhl = download('transformers', tv, args.cache)
        doc, warnings = build_table(swhl, twhl, sv, tv)
        doc['transformers_pin'] = pin
        path = os.path.join(args.out, f'{sv}.json.gz')
        payload = (json.dumps(doc, separators=(',', ':'), sort_keys=False) + '\n').encode()
        with open(path, 'wb') as fh:  # mtime=0 and no file name: byte-for-byte reproducible output
            with gzip.GzipFile(filename='', mode='wb', fileobj=fh, mtime=0, compresslevel=9) as gz:
                gz.write(payload)
        sizes = {c: len(t) for c, t in doc['commands'].items()}
        print(f'{sv}: transformers {tv} ({pin}) {sizes} -> {len(payload)} bytes json, {os.path.getsize(path)} gz')
        for w in warnings:
            print('   warning:', w)


if __name__ == '__main__':
    main()
