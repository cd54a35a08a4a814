"""Tests for diagnose.flags: checked-in per-version ms-swift flag tables.

The real-parser comparison builds ms-swift's actual HfArgumentParser in a
subprocess (each interpreter that can ``import swift``: ``$SWIFTDOC_SWIFT_PYTHON``,
the current one, /work/venvs/swift46 and /work/venvs/swift38 when present;
megatron-core is stubbed if missing) and compares option strings / nargs /
const / choices / types / defaults with the table for that version.  It is
skipped when no such interpreter exists.  HF-inherited fields are only
compared when the installed transformers equals the table's.
"""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from diagnose.flags import UnknownVersion, available_versions, renamed, spell, spell_value, table_for, translate_value  # noqa: E402
from diagnose.flags.table import UnknownCommand  # noqa: E402

# --------------------------------------------------------------------------- data files


def test_available_versions_cover_every_minor_line():
    vs = available_versions()
    for v in ['2.6.1', '3.0.3', '3.7.3', '3.8.3', '3.12.4', '3.12.6', '4.0.4', '4.1.3', '4.5.3', '4.6.0']:
        assert v in vs
    lines = {tuple(v.split('.')[:2]) for v in vs}
    for minor in range(13):
        assert ('3', str(minor)) in lines
    for minor in range(7):
        assert ('4', str(minor)) in lines


def test_data_files_small_and_well_formed():
    data = ROOT / 'diagnose' / 'flags' / 'data'
    total = 0
    for p in data.glob('*.json.gz'):
        total += p.stat().st_size
        doc = json.loads(gzip.decompress(p.read_bytes()))
        assert set(doc) >= {'swift_version', 'transformers_version', 'source_wheel', 'generated_by', 'commands'}
        assert p.name == doc['swift_version'] + '.json.gz'
        assert doc['source_wheel'] == f"ms_swift-{doc['swift_version']}-py3-none-any.whl"
        assert {'sft', 'pt', 'rlhf'} <= set(doc['commands'])
    assert total < 3_000_000


def test_transformers_versions_follow_the_pins():
    assert table_for('2.6.1').transformers_version.startswith('4.47')
    assert table_for('3.12.6').transformers_version.startswith('4.57')
    tf46 = table_for('4.6.0').transformers_version
    assert tf46.startswith('5.') and int(tf46.split('.')[1]) < 20


# --------------------------------------------------------------------------- version selection


@pytest.mark.parametrize('spec,expected', [
    ('4.6.0', '4.6.0'),
    ('v4.6.0', '4.6.0'),
    ('4.x', '4.6.0'),
    ('4', '4.6.0'),
    ('2.x', '2.6.1'),
    ('3.x', '3.12.6'),
    ('3.8-3.12.4', '3.12.4'),
    ('3.0-3.7', '3.7.3'),
    ('3.12.5-3.12.6', '3.12.6'),
    ('3.12.5', '3.12.4'),
    ('3.12.6', '3.12.6'),
    ('3.8.0', '3.8.3'),
    ('3.4.1', '3.4.1.post1'),
    ('3.7', '3.7.3'),
    ('4.0.x', '4.0.4'),
    ('3.8+', '3.12.6'),
    ('>=4.1', '4.6.0'),
])
def test_table_for_specs(spec, expected):
    assert table_for(spec).version == expected


@pytest.mark.parametrize('spec', ['4.7.0', '1.x', '2.4.0', 'banana', '', '5.x'])
def test_unknown_version(spec):
    with pytest.raises(UnknownVersion) as ei:
        table_for(spec)
    assert isinstance(ei.value, ValueError)
    assert '4.6.0' in str(ei.value)  # lists the known ones


def test_3_12_4_and_3_12_6_have_identical_flags():
    a, b = table_for('3.12.4'), table_for('3.12.6')
    for cmd in a.commands:
        assert a.doc['commands'][cmd] == b.doc['commands'][cmd]


def test_unknown_command():
    with pytest.raises(UnknownCommand):
        table_for('2.6.1').resolve('megatron_sft', '--tp')
    assert table_for('3.1.1').has_command('megatron_sft') is False
    assert table_for('3.2.2').has_command('megatron_sft')  # `megatron` CLI exists from 3.2 (wheel entry point)
    assert table_for('4.6.0').has_command('megatron pretrain')


# --------------------------------------------------------------------------- presence of flags


def test_tuner_type_spellings():
    t46, t40, t38, t26 = table_for('4.6.0'), table_for('4.0.4'), table_for('3.8'), table_for('2.6.1')
    assert t46.has('sft', 'tuner_type') and not t46.has('sft', 'train_type')
    assert t40.has('sft', 'tuner_type') and t40.has('sft', 'train_type')  # 4.0.x compat field
    assert t40.has('megatron_sft', 'train_type')
    assert table_for('4.1.3').resolve('sft', '--train_type').status == 'unknown'
    assert t38.has('sft', 'train_type') and not t38.has('sft', 'tuner_type')
    assert t26.has('sft', 'sft_type') and not t26.has('sft', 'train_type')
    assert t26.specs('sft')['sft_type'].default == 'lora'
    assert t26.specs('pt')['sft_type'].default == 'full'  # PtArguments override (3.x/4.x pt: parser default lora)


def test_prefix_resolution_4_6():
    t = table_for('4.6.0')
    r = t.resolve('sft', '--use_liger')
    assert r.status == 'prefix' and r.name == 'use_liger_kernel' and r.option == '--use_liger_kernel'
    assert t.resolve('sft', 'use_liger=true').name == 'use_liger_kernel'
    r = t.resolve('sft', '--save')
    assert r.status == 'ambiguous'
    assert {'save_steps', 'save_strategy'} <= set(r.candidate_names)
    assert t.resolve('sft', '--load').status == 'ambiguous'
    r = t.resolve('sft', '--lazy')  # --lazy_tokenize and --lazy-tokenize both match
    assert r.status == 'ambiguous' and r.same_field and r.candidate_names == ['lazy_tokenize']
    assert t.resolve('sft', '--lazy_tok').status == 'prefix'
    assert t.resolve('sft', '--per-device-train-batch-size').name == 'per_device_train_batch_size'
    r = t.resolve('sft', '--no_gradient_checkpointing')
    assert r.status == 'exact' and r.negated and r.name == 'gradient_checkpointing'
    assert t.resolve('sft', '--h').status == 'ambiguous'
    assert t.resolve('sft', '--tuner_type').status == 'exact'


def test_prefix_resolution_other_versions():
    assert table_for('3.8').resolve('sft', '--use_liger').name == 'use_liger_kernel'
    assert table_for('3.2').resolve('sft', '--use_liger').status == 'exact'  # 3.0-3.2 still had use_liger
    # 2.x uses the same HfArgumentParser (allow_abbrev=True)
    t26 = table_for('2.6.1')
    assert t26.allow_abbrev
    assert t26.resolve('sft', '--model_id').name == 'model_id_or_path'
    assert t26.resolve('sft', '--model').status == 'ambiguous'
    assert table_for('3.12.6').resolve('megatron_sft', '--save').status == 'exact'
    assert table_for('4.6.0').resolve('megatron_sft', '--save').status == 'ambiguous'
    assert table_for('3.12.6').resolve('sft', '--tp').status == 'ambiguous'  # --tpu_num_cores, --tpu_metrics...


@pytest.mark.parametrize('version', ['3.0', '3.8', '3.12.6', '4.0', '4.6.0'])
def test_use_flash_attn_unknown_on_3_and_4(version):
    t = table_for(version)
    assert t.resolve('sft', '--use_flash_attn').status == 'unknown'
    assert t.has('sft', 'attn_impl')
    assert table_for('2.6.1').resolve('sft', '--use_flash_attn').status == 'exact'


def test_evaluation_strategy_depends_on_transformers():
    # HF TrainingArguments still had evaluation_strategy up to transformers 4.50 (pins of ms-swift 3.0-3.2)
    assert table_for('3.2').has('sft', 'evaluation_strategy')
    assert not table_for('3.3').has('sft', 'evaluation_strategy')
    assert not table_for('4.6.0').has('sft', 'evaluation_strategy')
    assert table_for('2.6.1').has('sft', 'evaluation_strategy') and table_for('2.6.1').has('sft', 'eval_strategy')


def test_megatron_renames_in_tables():
    t3, t4 = table_for('3.12.6'), table_for('4.6.0')
    for old, new in [('log_interval', 'logging_steps'), ('save', 'output_dir'), ('save_interval', 'save_steps'),
                     ('eval_interval', 'eval_steps'), ('max_epochs', 'num_train_epochs'),
                     ('num_workers', 'dataloader_num_workers'), ('load', 'mcore_model'),
                     ('adapter_load', 'mcore_adapter'), ('train_type', 'tuner_type')]:
        assert t3.has('megatron_sft', old) and not t3.has('megatron_sft', new), old
        assert t4.has('megatron_sft', new) and not t4.has('megatron_sft', old), new
    assert t3.has('megatron_sft', 'log_throughput') and not t4.has('megatron_sft', 'log_throughput')
    assert t3.has('megatron_sft', 'load_safetensors') and not t4.has('megatron_sft', 'load_safetensors')


# --------------------------------------------------------------------------- specs & values


def test_choices():
    t = table_for('4.6.0')
    assert t.spec('sft', 'truncation_strategy').choices == ['delete', 'left', 'right', 'split', None]
    assert t.spec('sft', 'attn_impl').choices is None  # plain Optional[str] in 4.6
    assert t.spec('sft', 'deepspeed').choices is None and t.spec('sft', 'deepspeed').type == 'dict-json'
    assert t.spec('sft', 'torch_dtype').choices == ['bfloat16', 'float16', 'float32', None]
    assert 'fp8' in t.spec('sft', 'quant_method').choices
    assert t.spec('sft', 'quant_bits').choices == [1, 2, 3, 4, 8, 'float8']
    t26 = table_for('2.6.1')
    assert t26.spec('sft', 'truncation_strategy').choices == ['delete', 'truncation_left']
    assert t26.spec('sft', 'dtype').choices == ['bf16', 'fp16', 'fp32', 'AUTO']
    assert t26.spec('sft', 'check_dataset_strategy').choices == ['none', 'discard', 'error', 'warning']
    assert t26.spec('sft', 'quantization_bit').choices == [0, 1, 2, 3, 4, 8]
    # the reference says delete/left for 3.0; the 3.0.3 wheel already has 'right'
    assert table_for('3.0').spec('sft', 'truncation_strategy').choices == ['delete', 'left', 'right']
    assert 'split' in table_for('3.11').spec('sft', 'truncation_strategy').choices
    assert 'split' not in table_for('3.10').spec('sft', 'truncation_strategy').choices
    # attn_impl was a Literal up to 3.6 and a free string from 3.7
    assert table_for('3.0').spec('sft', 'attn_impl').choices == ['flash_attn', 'sdpa', 'eager', None]
    assert table_for('3.6').spec('sft', 'attn_impl').choices == ['flash_attn', 'sdpa', 'eager', 'flex_attention', None]
    assert table_for('3.7').spec('sft', 'attn_impl').choices is None
    assert table_for('3.6').validate_value('sft', '--attn_impl', 'flash_attention_2') is not None
    assert table_for('4.6').validate_value('sft', '--attn_impl', 'flash_attention_2') is None
    for v in ('2.6.1', '3.0', '3.12.6', '4.6.0'):  # deepspeed is free-form everywhere (preset name, path or JSON)
        assert table_for(v).spec('sft', 'deepspeed').choices is None
    assert table_for('4.6.0').spec('sft', 'log_level').choices[-1] == 'passive'
    assert set(t.spec('sft', 'eval_strategy').__dict__) and t.spec('sft', 'eval_strategy').choices is None


def test_spec_types():
    t = table_for('4.6.0')
    s = t.spec('sft', 'gradient_checkpointing')
    assert s.type == 'bool' and s.nargs == '?' and s.const is True and s.default is True and s.no_flag
    s = t.spec('sft', 'bf16')  # Optional[bool] = None: a value is required
    assert s.type == 'bool' and s.nargs is None and s.default is None
    s = t.spec('sft', 'target_modules')
    assert s.nargs == '+' and s.item_type == 'str' and s.default == ['all-linear']
    assert t.spec('sft', 'learning_rate').type == 'float'
    assert t.spec('sft', 'max_length').type == 'int'
    assert t.spec('sft', 'adam_beta1').src == 'hf'
    assert t.spec('sft', 'per_device_train_batch_size').src is None  # re-declared by swift's TrainArgumentsMixin
    assert t.spec('sft', 'tuner_type').src is None
    assert t.spec('sft', 'use_liger').name == 'use_liger_kernel'
    assert t.spec('sft', 'no_such_flag') is None


def test_validate_value():
    t = table_for('4.6.0')
    for v in ['true', 'False', '1', '0', 'YES', 'n']:
        assert t.validate_value('sft', '--use_liger_kernel', v) is None
    assert t.validate_value('sft', '--use_liger_kernel', None) is None  # bare flag = True
    assert 'invalid bool' in t.validate_value('sft', '--use_liger_kernel', 'maybe')
    assert t.validate_value('sft', '--bf16', None) is not None  # Optional[bool] needs a value
    assert t.validate_value('sft', '--bf16', 'true') is None
    assert t.validate_value('sft', '--learning_rate', '1e-4') is None
    assert 'invalid float' in t.validate_value('sft', '--learning_rate', 'fast')
    assert t.validate_value('sft', '--max_length', '2048') is None
    assert 'invalid int' in t.validate_value('sft', '--max_length', '2k')
    assert t.validate_value('sft', '--truncation_strategy', 'left') is None
    assert 'invalid choice' in t.validate_value('sft', '--truncation_strategy', 'truncation_left')
    assert t.validate_value('sft', '--torch_dtype', 'bfloat16') is None
    assert 'invalid choice' in t.validate_value('sft', '--torch_dtype', 'bf16')
    assert t.validate_value('sft', '--quant_bits', '4') is None
    assert t.validate_value('sft', '--quant_bits', '5') is not None
    assert t.validate_value('sft', '--target_modules', ['q_proj', 'v_proj']) is None
    assert t.validate_value('sft', '--target_modules', []) is not None
    assert 'unknown' in t.validate_value('sft', '--use_flash_attn', 'true')
    assert 'ambiguous' in t.validate_value('sft', '--save', '1')
    assert t.validate_value('sft', '--no_gradient_checkpointing', None) is None
    assert t.validate_value('sft', '--no_gradient_checkpointing', 'true') is not None
    assert t.validate_value('sft', '--deepspeed', 'zero2') is None  # free-form (path, JSON or preset)
    assert t.validate_value('sft', '--liger_kernel_config', '{"rope": true}') is not None  # dict-typed HF field
    t26 = table_for('2.6.1')
    assert t26.validate_value('sft', '--quantization_bit', '4') is None
    assert t26.validate_value('sft', '--quantization_bit', '5') is not None
    assert t26.validate_value('sft', '--dtype', 'bf16') is None


# --------------------------------------------------------------------------- concepts


def test_spell():
    assert spell('tuner_type', '2.6.1') == 'sft_type'
    assert spell('tuner_type', '3.8') == 'train_type'
    assert spell('tuner_type', '4.0.4') == 'tuner_type'
    assert spell('tuner_type', '4.6.0') == 'tuner_type'
    assert spell('attn_impl', '2.x') == 'use_flash_attn'
    assert spell('attn_impl', '3.x') == 'attn_impl'
    assert spell('torch_dtype', '2.x') == 'dtype'
    assert spell('torch_dtype', '4.x') == 'torch_dtype'
    assert spell('model', '2.x') == 'model_id_or_path'
    assert spell('model', '3.0') == 'model'
    assert spell('quant_bits', '2.x') == 'quantization_bit'
    assert spell('split_dataset_ratio', '2.x') == 'dataset_test_ratio'
    assert spell('dataset_num_proc', '2.x') == 'preprocess_num_proc'
    assert spell('use_liger_kernel', '2.x') == 'use_liger'
    assert spell('use_liger_kernel', '3.8') == 'use_liger_kernel'
    assert spell('eval_strategy', '4.x') == 'eval_strategy'
    assert spell('target_modules', '4.x') == 'target_modules'
    assert spell('per_device_train_batch_size', '3.x') == 'per_device_train_batch_size'
    assert spell('per_device_eval_batch_size', '4.x') == 'per_device_eval_batch_size'
    # Megatron
    for concept, old, new in [('logging_steps', 'log_interval', 'logging_steps'), ('output_dir', 'save', 'output_dir'),
                              ('save_steps', 'save_interval', 'save_steps'),
                              ('eval_steps', 'eval_interval', 'eval_steps'),
                              ('num_train_epochs', 'max_epochs', 'num_train_epochs'),
                              ('dataloader_num_workers', 'num_workers', 'dataloader_num_workers'),
                              ('mcore_model', 'load', 'mcore_model'), ('mcore_adapter', 'adapter_load', 'mcore_adapter'),
                              ('tuner_type', 'train_type', 'tuner_type')]:
        assert spell(concept, '3.12.6', 'megatron_sft') == old
        assert spell(concept, '4.6.0', 'megatron_sft') == new
    assert spell('tuner_type', '2.x', 'megatron_sft') is None
    with pytest.raises(KeyError):
        spell('no_such_concept', '4.x')


def test_spell_value():
    assert spell_value('attn_impl', 'flash_attn', '2.x') == ('use_flash_attn', 'true')
    assert spell_value('attn_impl', 'flash_attention_2', '2.x') == ('use_flash_attn', 'true')
    assert spell_value('attn_impl', 'eager', '2.x') == ('use_flash_attn', 'false')
    assert spell_value('attn_impl', 'sdpa', '2.x') == ('use_flash_attn', None)
    assert spell_value('attn_impl', 'true', '4.x') == ('attn_impl', 'flash_attn')
    assert spell_value('attn_impl', 'sdpa', '4.x') == ('attn_impl', 'sdpa')
    assert spell_value('torch_dtype', 'bf16', '3.x') == ('torch_dtype', 'bfloat16')
    assert spell_value('torch_dtype', 'bfloat16', '2.x') == ('dtype', 'bf16')
    assert spell_value('torch_dtype', 'AUTO', '4.x') == ('torch_dtype', None)
    assert spell_value('tuner_type', 'lora', '3.x') == ('train_type', 'lora')
    assert spell_value('target_modules', 'ALL', '4.x') == ('target_modules', 'all-linear')
    assert spell_value('per_device_train_batch_size', '2', '2.x') == ('per_device_train_batch_size', '2')
    assert spell_value('tuner_type', 'lora', '2.x', 'megatron_sft') is None
    assert spell_value('attn_impl', 'flash_attention_2', '3.0') == ('attn_impl', 'flash_attn')  # Literal in 3.0-3.6
    assert spell_value('attn_impl', 'flash_attention_2', '4.6') == ('attn_impl', 'flash_attention_2')


# --------------------------------------------------------------------------- renames (reference section 8)


@pytest.mark.parametrize('target', ['3.8', '3.12.6', '4.6.0'])
def test_renames_of_2x_seed_flags(target):
    tt = 'tuner_type' if target.startswith('4') else 'train_type'
    cases = [
        ('--use_flash_attn', 'true', ['--attn_impl', 'flash_attn']),
        ('--use_flash_attn', None, ['--attn_impl', 'flash_attn']),
        ('--use_flash_attn', 'false', ['--attn_impl', 'eager']),
        ('--check_dataset_strategy', 'warning', []),
        ('--sft_type', 'lora', [f'--{tt}', 'lora']),
        ('--model_id_or_path', 'qwen/Qwen-7B', ['--model', 'qwen/Qwen-7B']),
        ('--dtype', 'bf16', ['--torch_dtype', 'bfloat16']),
        ('--dtype', 'AUTO', []),
        ('--batch_size', '4', ['--per_device_train_batch_size', '4']),
        ('--eval_batch_size', '4', ['--per_device_eval_batch_size', '4']),
        ('--lora_target_modules', 'ALL', ['--target_modules', 'all-linear']),
        ('--lora_target_modules', ['q_proj', 'v_proj'], ['--target_modules', 'q_proj', 'v_proj']),
        ('--lora_target_modules', 'DEFAULT', []),
        ('--quantization_bit', '4', ['--quant_bits', '4', '--quant_method', 'bnb']),
        ('--quantization_bit', '8', ['--quant_bits', '8', '--quant_method', 'bnb']),
        ('--quantization_bit', '0', []),
        ('--dataset_test_ratio', '0.01', ['--split_dataset_ratio', '0.01']),
        ('--preprocess_num_proc', '8', ['--dataset_num_proc', '8']),
        ('--add_output_dir_suffix', 'false', ['--add_version', 'false']),
        ('--evaluation_strategy', 'steps', ['--eval_strategy', 'steps']),
        ('--train_backend', 'megatron', []),
        ('--tp', '2', []),
        ('--pp', '2', []),
    ]
    t = table_for(target)
    for flag, value, expected in cases:
        assert t.resolve('sft', flag).status != 'exact', flag
        r = renamed(flag, target)
        assert r is not None, flag
        assert r.apply(value) == expected, (flag, value, r)
        for tok in expected:
            if tok.startswith('--'):
                assert t.resolve('sft', tok).status == 'exact', tok
    assert renamed('--train_backend', target).action == 'use_megatron_cli'
    assert renamed('--check_dataset_strategy', target).action == 'drop'


def test_renames_between_3_and_4():
    r = renamed('--train_type', '4.6.0')
    assert r.apply('lora') == ['--tuner_type', 'lora'] and not r.parser_accepts
    assert renamed('--train_type', '4.0.4') is None  # still accepted (deprecation warning)
    assert renamed('--train_type', '4.1.3').new == ['--tuner_type']
    assert renamed('--tuner_type', '3.12.6').apply('full') == ['--train_type', 'full']
    r = renamed('--use_liger', '4.6.0')
    assert r.apply('true') == ['--use_liger_kernel', 'true'] and r.parser_accepts
    assert renamed('--use_liger', '3.1') is None
    assert renamed('--use_liger_kernel', '2.6.1').apply('true') == ['--use_liger', 'true']
    assert renamed('--attn_impl', '2.6.1').apply('flash_attn') == ['--use_flash_attn', 'true']
    assert renamed('--attn_impl', '2.6.1').apply('sdpa') == []
    assert renamed('--torch_dtype', '2.6.1').apply('float16') == ['--dtype', 'fp16']
    assert renamed('--quant_bits', '2.6.1').apply('4') == ['--quantization_bit', '4']
    assert renamed('--model', '2.6.1').apply('Qwen/Qwen2.5-7B') == ['--model_id_or_path', 'Qwen/Qwen2.5-7B']
    assert renamed('--evaluation_strategy', '3.2') is None  # transformers 4.50 still had it
    assert renamed('--tuner_type', '4.6.0') is None
    assert renamed('--use-liger-kernel', '4.6.0') is None
    assert renamed('--no_such_flag', '4.6.0') is None


def test_megatron_renames():
    for old, new in [('--log_interval', '--logging_steps'), ('--save', '--output_dir'),
                     ('--save_interval', '--save_steps'), ('--eval_interval', '--eval_steps'),
                     ('--max_epochs', '--num_train_epochs'), ('--num_workers', '--dataloader_num_workers'),
                     ('--load', '--mcore_model'), ('--adapter_load', '--mcore_adapter'),
                     ('--train_type', '--tuner_type')]:
        r = renamed(old, '4.6.0', 'megatron_sft')
        assert r is not None and r.apply('5') == [new, '5'], old
        back = renamed(new, '3.12.6', 'megatron_sft')
        assert back is not None and back.apply('5') == [old, '5'], new
    assert renamed('--tp', '3.12.6', 'megatron_sft').apply('4') == ['--tensor_model_parallel_size', '4']
    # HF path: --save / --load are not megatron renames there
    assert renamed('--save', '4.6.0', 'sft') is None


def test_translate_value():
    assert translate_value('--deepspeed', 'default-zero2', '4.6.0') == 'zero2'
    assert translate_value('--deepspeed', 'zero3-offload', '3.x') == 'zero3_offload'
    assert translate_value('--deepspeed', 'zero2', '4.6.0') is None
    assert translate_value('--deepspeed', 'default-zero2', '2.6.1') is None


def test_lazy_import_is_light():
    code = ('import sys, time; sys.path.insert(0, %r); import diagnose; pre = "pydantic" in sys.modules; '
            't = time.time(); import diagnose.flags as f; vs = f.available_versions(); '
            'assert pre or "pydantic" not in sys.modules; assert time.time() - t < 0.5; print(len(vs))' % str(ROOT))
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.strip()) == len(available_versions())


# --------------------------------------------------------------------------- real parser comparison

from diagnose.patch.swiftcheck import MEGATRON_STUB  # noqa: E402

_DUMP = MEGATRON_STUB + r'''
import argparse, json, sys
import swift, transformers
from transformers import HfArgumentParser
from transformers.hf_argparser import string_to_bool
try:
    from swift.utils.utils import _patch_get_type_hints
except ImportError:
    import contextlib
    _patch_get_type_hints = contextlib.nullcontext

classes = json.loads(sys.argv[1])
out = {'swift': swift.__version__, 'transformers': transformers.__version__, 'commands': {}, 'errors': {}}

def tname(t):
    if t is string_to_bool:
        return 'bool'
    if t in (int, float, str):
        return t.__name__
    if getattr(t, '__name__', '') == '<lambda>':
        return 'choice'
    return repr(t)

def jsonable(v):
    try:
        json.dumps(v)
        return v
    except TypeError:
        return repr(v)

for cmd, qual in classes.items():
    mod, _, name = qual.rpartition('.')
    try:
        cls = getattr(importlib.import_module(mod), name)
        with _patch_get_type_hints():
            parser = HfArgumentParser([cls])
    except Exception as e:  # noqa
        out['errors'][cmd] = f'{type(e).__name__}: {e}'
        continue
    acts = []
    for a in parser._actions:
        acts.append({'options': a.option_strings, 'dest': a.dest, 'nargs': a.nargs, 'const': jsonable(a.const),
                     'choices': jsonable(list(a.choices)) if a.choices is not None else None,
                     'default': jsonable(a.default), 'type': tname(a.type), 'required': a.required,
                     'store_false': isinstance(a, argparse._StoreFalseAction),
                     'allow_abbrev': parser.allow_abbrev})
    out['commands'][cmd] = acts
print('@@JSON@@' + json.dumps(out))
'''


def _swift_pythons() -> list[str]:
    cands = [os.environ.get('SWIFTDOC_SWIFT_PYTHON'), sys.executable, '/work/venvs/swift46/bin/python',
             '/work/venvs/swift38/bin/python']
    out, seen = [], set()
    for c in cands:
        if c and os.path.exists(c) and os.path.abspath(c) not in seen:  # not realpath: venvs symlink the base
            seen.add(os.path.abspath(c))
            out.append(c)
    return out


@pytest.fixture(scope='module', params=_swift_pythons(), ids=lambda p: p.replace('/', '_'))
def real_parser(request):
    py = request.param
    r = subprocess.run([py, '-c', 'import swift, transformers; print(swift.__version__)'], capture_output=True,
                       text=True)
    if r.returncode != 0:
        pytest.skip(f'ms-swift is not importable with {py} (set SWIFTDOC_SWIFT_PYTHON to an interpreter that has it)')
    ver = r.stdout.strip().splitlines()[-1]
    try:
        t = table_for(ver)
    except UnknownVersion:
        pytest.skip(f'installed ms-swift {ver} has no flag table for its minor line')
    r = subprocess.run([py, '-c', _DUMP, json.dumps(t.doc['args_classes'])], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith('@@JSON@@'))
    return t, json.loads(line[len('@@JSON@@'):])


def compare_with_real_parser(t, real) -> tuple[list, int]:
    """Differences between table ``t`` and a dump of the real parser (see ``_DUMP``)."""
    same_tf = real['transformers'] == t.transformers_version
    problems = []
    compared = 0
    for cmd, acts in real['commands'].items():
        specs = t.specs(cmd)
        table_opts = t.options(cmd)
        real_opts = {o: a for a in acts for o in a['options']}
        if same_tf:
            only_real = sorted(set(real_opts) - set(table_opts))
            only_table = sorted(set(table_opts) - set(real_opts))
            if only_real or only_table:
                problems.append((cmd, 'options', only_real[:10], only_table[:10]))
        for a in acts:
            if a['dest'] == 'help' or a['store_false']:
                continue
            assert a['allow_abbrev'] == t.allow_abbrev
            s = specs.get(a['dest'])
            if s is None:
                if same_tf:
                    problems.append((cmd, a['dest'], 'missing from table'))
                continue
            if not same_tf and s.src == 'hf':
                continue
            compared += 1
            if a['nargs'] != s.nargs:
                problems.append((cmd, a['dest'], 'nargs', a['nargs'], s.nargs))
            if a['const'] != s.const:
                problems.append((cmd, a['dest'], 'const', a['const'], s.const))
            # choice order can differ: typing's Literal/Union cache may return an equal (set-wise) type created
            # earlier with another order, e.g. megatron `scale_rewards`
            if (a['choices'] is None) != (s.choices is None) or \
                    (a['choices'] is not None and sorted(map(str, a['choices'])) != sorted(map(str, s.choices))):
                problems.append((cmd, a['dest'], 'choices', a['choices'], s.choices))
            if a['required'] != s.required:
                problems.append((cmd, a['dest'], 'required', a['required'], s.required))
            if s.default_expr is None and a['default'] != s.default:
                problems.append((cmd, a['dest'], 'default', a['default'], s.default))
            want = {'bool': 'bool', 'int': 'int', 'float': 'float', 'str': 'str', 'dict-json': 'str'}.get(s.type)
            if s.type == 'list':
                want = s.item_type
            rt = a['type']
            if rt == 'choice' and s.choices is not None:
                rt = want
            if s.type == 'list' and s.item_choices and rt.startswith('<enum'):
                rt = 'str'
            if s.type == 'dict' and rt.startswith('dict'):
                rt = want = 'dict'
            if s.type == 'other':
                continue
            if rt != want:
                problems.append((cmd, a['dest'], 'type', a['type'], s.type, s.item_type))
        # every table flag and option string that the real parser knows resolves identically
        for o, (name, neg) in table_opts.items():
            if o in real_opts:
                assert real_opts[o]['dest'] == name
                assert real_opts[o]['store_false'] == neg
    return problems, compared


def test_real_parser_matches_table(real_parser):
    """The installed ms-swift's real parser == its table (same-line table if no exact one: e.g. 3.8.1 vs 3.8.3)."""
    t, real = real_parser
    assert not real['errors'].get('sft'), real['errors']
    problems, compared = compare_with_real_parser(t, real)
    assert compared > 100
    if problems and real['swift'] != t.version:
        pytest.xfail(f"installed {real['swift']} differs from the {t.version} table: {problems[:10]}")
    assert not problems, problems[:30]
    if real['transformers'] == t.transformers_version:
        assert set(real['commands']) == set(t.commands), real['errors']
