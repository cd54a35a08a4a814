"""Concept spellings across ms-swift versions, and renames for rejected flags.

Contract
--------
* ``CONCEPTS`` (data): concept -> candidate flag names, newest spelling first.
  ``spell(concept, version, command='sft')`` returns the first candidate that
  is an exact field of that version's table for ``command`` (so the answer is
  always derived from the real wheel data), or None when no spelling exists.
  Where a version keeps a compatibility field (2.x ``per_device_train_batch_size``,
  4.0.x ``train_type``) the newer spelling wins.
* ``VALUE_MAPS`` (data, the only place value semantics live): for a legacy
  spelling, legacy value -> canonical value (canonical = the newest spelling's
  vocabulary) and the reverse.  ``spell_value(concept, value, version,
  command='sft') -> (flag, value) | None`` gives the flag and the value to use in
  ``version``; the value part is None when the meaning cannot be expressed
  there (e.g. ``attn_impl sdpa`` on 2.x, ``dtype AUTO`` on 3.x): omit the flag
  to get the default.  If the target field has choices that lack the value, a
  synonym from ``VALUE_SYNONYMS`` is used (``flash_attention_2`` -> ``flash_attn``
  on 3.0-3.6, whose ``attn_impl`` is a Literal).  Returns None when the concept has no flag there.
* ``renamed(flag, target_version, command='sft') -> Rename | None``: when
  ``flag`` is not an exact option of the target version, the replacement
  (possibly several flags, a value translation, a drop, or "use the megatron
  CLI").  Covers every row of the reference's section 8 table, the Megatron
  3.x->4.x renames and the reverse direction for concepts (e.g. ``--tuner_type``
  on 3.x -> ``--train_type``).  ``Rename.apply(value)`` returns the replacement
  argv tokens.  ``Rename.parser_accepts`` is True when the target parser would
  still take the old flag as an abbreviation (e.g. ``--use_liger`` on 3.3+).
* ``translate_value(flag, value, target_version, command='sft')``: value-only
  changes for flags that keep their name (2.x DeepSpeed presets
  ``default-zero2`` -> ``zero2`` ...); None when nothing to change.

Import cost: stdlib + pydantic (tables are loaded lazily on first use).
"""
from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict

from .table import normalize_command, string_to_bool

# concept -> candidate field names, newest first
CONCEPTS: dict[str, list[str]] = {
    'tuner_type': ['tuner_type', 'train_type', 'sft_type'],
    'attn_impl': ['attn_impl', 'use_flash_attn'],
    'torch_dtype': ['torch_dtype', 'dtype'],
    'per_device_train_batch_size': ['per_device_train_batch_size', 'batch_size'],
    'per_device_eval_batch_size': ['per_device_eval_batch_size', 'eval_batch_size'],
    'target_modules': ['target_modules', 'lora_target_modules'],
    'split_dataset_ratio': ['split_dataset_ratio', 'dataset_test_ratio'],
    'dataset_num_proc': ['dataset_num_proc', 'preprocess_num_proc'],
    'eval_strategy': ['eval_strategy', 'evaluation_strategy'],
    'use_liger_kernel': ['use_liger_kernel', 'use_liger'],
    'quant_bits': ['quant_bits', 'quantization_bit'],
    'model': ['model', 'model_id_or_path'],
    'add_version': ['add_version', 'add_output_dir_suffix'],
    # Megatron 3.x -> 4.x
    'logging_steps': ['logging_steps', 'log_interval'],
    'output_dir': ['output_dir', 'save'],
    'save_steps': ['save_steps', 'save_interval'],
    'eval_steps': ['eval_steps', 'eval_interval'],
    'num_train_epochs': ['num_train_epochs', 'max_epochs'],
    'dataloader_num_workers': ['dataloader_num_workers', 'num_workers'],
    'mcore_model': ['mcore_model', 'load'],
    'mcore_adapter': ['mcore_adapter', 'adapter_load'],
}
# aliases so callers may name a concept by any of its spellings' common names
CONCEPT_ALIASES = {'train_type': 'tuner_type', 'sft_type': 'tuner_type', 'use_flash_attn': 'attn_impl',
                   'dtype': 'torch_dtype', 'batch_size': 'per_device_train_batch_size',
                   'eval_batch_size': 'per_device_eval_batch_size', 'model_id_or_path': 'model',
                   'evaluation_strategy': 'eval_strategy', 'use_liger': 'use_liger_kernel',
                   'quantization_bit': 'quant_bits', 'lora_target_modules': 'target_modules',
                   'dataset_test_ratio': 'split_dataset_ratio', 'preprocess_num_proc': 'dataset_num_proc',
                   'log_interval': 'logging_steps', 'save_interval': 'save_steps', 'eval_interval': 'eval_steps',
                   'max_epochs': 'num_train_epochs', 'num_workers': 'dataloader_num_workers',
                   'load': 'mcore_model', 'adapter_load': 'mcore_adapter', 'add_output_dir_suffix': 'add_version',
                   'save': 'output_dir'}
# The megatron-only spellings must not be used to rename HF-path flags of the same name.
MEGATRON_ONLY = {'log_interval', 'save', 'save_interval', 'eval_interval', 'num_workers', 'load', 'adapter_load',
                 'mcore_model', 'mcore_adapter'}

# (concept, legacy spelling) -> {legacy value (lower-case) -> canonical value or None (= use the default)}
VALUE_MAPS: dict[tuple[str, str], dict[str, Optional[str]]] = {
    ('attn_impl', 'use_flash_attn'): {'true': 'flash_attn', 'false': 'eager'},
    ('torch_dtype', 'dtype'): {'bf16': 'bfloat16', 'fp16': 'float16', 'fp32': 'float32', 'auto': None},
    ('target_modules', 'lora_target_modules'): {'all': 'all-linear', 'default': None},
    ('add_version', 'add_output_dir_suffix'): {},
}
# canonical value (lower-case) -> legacy value, where the inverse of VALUE_MAPS is not enough
EXTRA_REVERSE: dict[tuple[str, str], dict[str, Optional[str]]] = {
    ('attn_impl', 'use_flash_attn'): {'flash_attention_2': 'true', 'flash_attention_3': 'true',
                                      'flash_attention_4': 'true', 'sdpa': None},
    ('target_modules', 'lora_target_modules'): {'all-linear': 'ALL'},
    ('torch_dtype', 'dtype'): {'bfloat16': 'bf16', 'float16': 'fp16', 'float32': 'fp32'},
}
# same meaning, different word: used when the target field has choices that lack the given value
VALUE_SYNONYMS: dict[str, dict[str, str]] = {
    'attn_impl': {'flash_attention_2': 'flash_attn', 'flash_attn': 'flash_attention_2'},
}
# legacy spellings whose values are bools (HF string_to_bool)
BOOL_SPELLINGS = {'use_flash_attn'}

# 2.x DeepSpeed presets -> 3.x/4.x names
DEEPSPEED_PRESETS = {'default-zero2': 'zero2', 'default-zero3': 'zero3', 'zero2-offload': 'zero2_offload',
                     'zero3-offload': 'zero3_offload'}


class Rename(BaseModel):
    """Replacement for a flag the target version rejects (see module docstring)."""
    model_config = ConfigDict(frozen=True)

    old: str  # '--quantization_bit'
    new: list[str]  # flags used by the replacement; [] = drop
    action: Literal['rename', 'drop', 'use_megatron_cli']
    target_version: str
    command: str
    template: Optional[list[str]] = None  # tokens; '{value}' expands to the (item-mapped) value tokens
    value_map: dict[str, list[str]] = {}  # normalized whole old value -> full replacement tokens
    item_map: dict[str, Optional[str]] = {}  # per-token translation (lower-case keys); None drops the token
    bool_value: bool = False  # old flag is a bool: values normalized with HF string_to_bool, bare = true
    parser_accepts: bool = False  # target parser still accepts the old flag by prefix
    note: str = ''

    def apply(self, value: Union[str, list[str], None] = None) -> list[str]:
        """Replacement argv tokens for ``old value``; [] means: drop the flag."""
        vals = [] if value is None else [value] if isinstance(value, str) else list(value)
        if self.bool_value:
            b = True if not vals else string_to_bool(vals[0])
            key = '' if b is None else ('true' if b else 'false')
        else:
            key = ' '.join(vals).lower()
        if key in self.value_map:
            return list(self.value_map[key])
        if self.template is None:
            return []
        mapped: list[str] = []
        for v in vals:
            if v.lower() in self.item_map:
                m = self.item_map[v.lower()]
                if m is not None:
                    mapped.append(m)
            else:
                mapped.append(v)
        if vals and not mapped:
            return []
        out: list[str] = []
        for t in self.template:
            if t == '{value}':
                out.extend(mapped)
            else:
                out.append(t)
        return out


def _table(version: str):
    from . import table_for
    return table_for(version)


def _concept(concept: str) -> str:
    c = concept.strip().lstrip('-')
    c = CONCEPT_ALIASES.get(c, c)
    if c not in CONCEPTS:
        raise KeyError(f'unknown concept {concept!r}; known: {", ".join(CONCEPTS)}')
    return c


def spell(concept: str, version: str, command: str = 'sft') -> Optional[str]:
    """Flag name (without ``--``) for ``concept`` in ``version``/``command``, or None."""
    c = _concept(concept)
    t = _table(version)
    cmd = normalize_command(command)
    if not t.has_command(cmd):
        return None
    for name in CONCEPTS[c]:
        if t.has(cmd, name):
            return name
    return None


def _to_canonical(c: str, value: str) -> tuple[bool, Optional[str]]:
    """(recognized_as_legacy, canonical value)."""
    low = value.lower()
    for (cc, spelling), m in VALUE_MAPS.items():
        if cc != c:
            continue
        if spelling in BOOL_SPELLINGS:
            b = string_to_bool(value)
            if b is not None:
                return True, m['true' if b else 'false']
        elif low in m:
            return True, m[low]
    return False, value


def _from_canonical(c: str, spelling: str, value: Optional[str]) -> Optional[str]:
    if value is None:
        return None
    low = value.lower()
    extra = EXTRA_REVERSE.get((c, spelling), {})
    if low in extra:
        return extra[low]
    for legacy, canon in VALUE_MAPS.get((c, spelling), {}).items():
        if canon is not None and canon.lower() == low:
            return legacy
    return value


def spell_value(concept: str, value: str, version: str, command: str = 'sft') -> Optional[tuple[str, Optional[str]]]:
    """(flag, value) expressing ``concept=value`` in ``version``; value None = not expressible, omit the flag.

    ``value`` may be given in any version's vocabulary (``bf16`` or ``bfloat16``,
    ``true`` or ``flash_attn`` ...).  Returns None when the concept has no flag in
    that version/command.
    """
    c = _concept(concept)
    flag = spell(c, version, command)
    if flag is None:
        return None
    canonical_name = CONCEPTS[c][0]
    is_legacy, canon = _to_canonical(c, value)
    if not is_legacy:
        canon = value
    if flag == canonical_name or (c, flag) not in VALUE_MAPS:
        out = canon
    else:
        out = _from_canonical(c, flag, canon)
    if out is not None:
        spec = _table(version).specs(normalize_command(command)).get(flag)
        if spec is not None and spec.choices is not None and out not in {str(x) for x in spec.choices}:
            syn = VALUE_SYNONYMS.get(c, {}).get(out.lower())
            if syn is not None and syn in {str(x) for x in spec.choices}:
                out = syn
    return flag, out


# ----------------------------------------------------------------------------- renames
def _special_rules(name: str, target: str, cmd: str, t) -> Optional[dict]:
    """Renames that are not a plain concept re-spelling."""
    megatron = cmd.startswith('megatron')
    if name == 'quantization_bit' and not t.has(cmd, 'quantization_bit'):
        qb = spell('quant_bits', target, cmd) or 'quant_bits'
        vm = {'0': []}
        for bits in ('1', '2', '3'):
            vm[bits] = [f'--{qb}', bits, '--quant_method', 'hqq']
        return dict(new=[f'--{qb}', '--quant_method'], action='rename',
                    template=[f'--{qb}', '{value}', '--quant_method', 'bnb'], value_map=vm,
                    note='2.x picked bnb automatically for 4/8 bits (hqq for 1/2/3); in 3.x/4.x --quant_bits '
                    'without --quant_method does nothing. 0 = no quantization: drop.')
    if name == 'check_dataset_strategy' and not t.has(cmd, name):
        return dict(new=[], action='drop', template=None,
                    note='no equivalent in 3.x/4.x; drop (related: --strict, --truncation_strategy)')
    if name == 'train_backend' and not t.has(cmd, name):
        return dict(new=[], action='use_megatron_cli', template=None, value_map={'transformers': []},
                    note='2.x --train_backend megatron --tp N --pp M -> run `megatron sft` with '
                    '--tensor_model_parallel_size N --pipeline_model_parallel_size M (3.2+)')
    if name in ('tp', 'pp') and not t.has(cmd, name):
        real = {'tp': 'tensor_model_parallel_size', 'pp': 'pipeline_model_parallel_size'}[name]
        if megatron and t.has(cmd, real):
            return dict(new=[f'--{real}'], action='rename', template=[f'--{real}', '{value}'],
                        note='2.x Megatron-backend shorthand')
        return dict(new=[], action='use_megatron_cli', template=None,
                    note=f'2.x Megatron-backend flag; use `megatron sft --{real} N` instead')
    return None


def renamed(flag: str, target_version: str, command: str = 'sft') -> Optional[Rename]:
    """Replacement for ``flag`` when ``target_version``'s parser has no such exact option (else None)."""
    t = _table(target_version)
    cmd = normalize_command(command)
    if not t.has_command(cmd):
        return None
    q = flag.strip()
    if not q.startswith('-'):
        q = '--' + q
    q = q.split('=', 1)[0]
    res = t.resolve(cmd, q)
    if res.status == 'exact':
        return None
    name = q.lstrip('-').replace('-', '_')
    if t.has(cmd, name):  # '--use-liger-kernel' style spelling of an existing field
        return None
    parser_accepts = res.status == 'prefix'
    base = dict(old=q, target_version=t.version, command=cmd, parser_accepts=parser_accepts)

    special = _special_rules(name, t.version, cmd, t)
    if special is not None:
        return Rename(**base, **special)

    concept = CONCEPT_ALIASES.get(name, name if name in CONCEPTS else None)
    if concept is None:
        return None
    if name in MEGATRON_ONLY and not cmd.startswith('megatron'):
        return None
    target_name = spell(concept, t.version, cmd)
    if target_name is None or target_name == name:
        return None
    old_is_legacy = name != CONCEPTS[concept][0]
    new_is_legacy = target_name != CONCEPTS[concept][0]
    note = f'--{name} is spelled --{target_name} in ms-swift {t.version} ({cmd})'
    bool_value = name in BOOL_SPELLINGS
    value_map: dict[str, list[str]] = {}
    item_map: dict[str, Optional[str]] = {}
    if old_is_legacy and (concept, name) in VALUE_MAPS:
        vm = VALUE_MAPS[(concept, name)]
        for legacy, canon in vm.items():
            out = canon if not new_is_legacy else _from_canonical(concept, target_name, canon)
            if concept == 'target_modules':
                item_map[legacy] = out
            else:
                value_map[legacy] = [] if out is None else [f'--{target_name}', out]
    elif new_is_legacy and (concept, target_name) in VALUE_MAPS:
        # newer flag written for an older version, e.g. --attn_impl flash_attn on 2.x
        known = set(VALUE_MAPS[(concept, target_name)].values()) | set(EXTRA_REVERSE.get((concept, target_name), {}))
        for canon in known:
            if canon is None:
                continue
            leg = _from_canonical(concept, target_name, canon)
            if concept == 'target_modules':
                item_map[canon.lower()] = leg
            else:
                value_map[canon.lower()] = [] if leg is None else [f'--{target_name}', leg]
    if concept == 'target_modules' and name == 'lora_target_modules':
        note += '; ALL -> all-linear, DEFAULT (2.x: the model\'s attention projections) has no 3.x/4.x ' \
                'spelling: dropped, so the 3.x/4.x default all-linear applies'
    if concept == 'attn_impl' and name == 'use_flash_attn':
        note += '; true -> flash_attn, false -> eager (2.x forced eager); sdpa has no 2.x spelling'
    if concept == 'quant_bits' and new_is_legacy:
        note += '; 2.x needs no --quant_method for bnb 4/8 bits'
    if concept == 'eval_strategy' and name == 'evaluation_strategy':
        note += ' (HF removed evaluation_strategy; transformers <= 4.50 still had it)'
    if concept == 'tuner_type' and name == 'train_type' and t.version.startswith('4.'):
        note += ' (4.0.x still accepted --train_type with a deprecation warning; 4.1+ rejects it)'
    # bool <-> enum translations (use_flash_attn <-> attn_impl) only make sense through value_map
    template = None if (bool_value or target_name in BOOL_SPELLINGS) else [f'--{target_name}', '{value}']
    return Rename(**base, new=[f'--{target_name}'], action='rename', template=template,
                  value_map=value_map, item_map=item_map, bool_value=bool_value, note=note)


def translate_value(flag: str, value: str, target_version: str, command: str = 'sft') -> Optional[str]:
    """New value for a flag that keeps its name but whose value vocabulary changed; None if unchanged."""
    name = flag.strip().lstrip('-').split('=', 1)[0].replace('-', '_')
    t = _table(target_version)
    cmd = normalize_command(command)
    if name == 'deepspeed' and t.has_command(cmd) and t.has(cmd, 'deepspeed') and not t.version.startswith('2.'):
        new = DEEPSPEED_PRESETS.get(value.strip().lower())
        return new
    return None
