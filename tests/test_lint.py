"""`swiftdoc lint`: every invalid flag in the seed articles' commands is reported with its replacement.

GIVEN the seed articles' launch commands (fixtures/scripts/seed*.sh) and ms-swift 4.6.0
WHEN they are linted
THEN each flag 4.6 rejects is named on its line with the flag that replaces it (or "drop it"),
     prefix-only flags, bad values and refused combinations are reported,
     `--fix` rewrites what it can (backup kept, second run finds nothing), exit 1 while errors remain.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "fixtures" / "scripts"


def lint(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, SWIFTDOC_SWIFT_PYTHON="/nonexistent")
    return subprocess.run([sys.executable, "-m", "diagnose", "lint", *args], capture_output=True, cwd=ROOT, timeout=120,
                          env=env)


def problems(script: str, version: str = "4.6.0") -> list[dict]:
    p = lint(str(SCRIPTS / script), "--swift-version", version, "--format", "json")
    assert p.returncode in (0, 1), p.stderr
    return json.loads(p.stdout)["files"][0]["problems"]


# (script, line, flag, replacement text that must appear in the message)
SEED_INVALID = [
    ("seed000_baseline.sh", 5, "--train_type", "--tuner_type lora"),
    ("seed000_golden.sh", 9, "--train_type", "--tuner_type lora"),
    ("seed000_golden.sh", 17, "--torch_dtype", "float16"),
    ("seed000_golden.sh", 19, "--use_flash_attn", "--attn_impl flash_attn"),
    ("seed000_golden.sh", 21, "--check_dataset_strategy", "drop"),
    ("seed000_nccl_4090.sh", 9, "--train_type", "--tuner_type lora"),
    ("seed000_megatron_moe.sh", 5, "--train_type", "--tuner_type lora"),
    ("seed000_megatron_moe.sh", 6, "--tp_size", "--tensor_model_parallel_size 2"),
    ("seed000_megatron_moe.sh", 7, "--ep_size", "--expert_model_parallel_size 2"),
    ("seed001_ddp.sh", 7, "--train_type", "--tuner_type lora"),
    ("seed001_deepspeed.sh", 7, "--train_type", "--tuner_type lora"),
    ("seed001_fsdp.sh", 8, "--train_type", "--tuner_type lora"),
    ("seed001_fsdp.sh", 13, "--fsdp_transformer_layer_cls_to_wrap", "--fsdp_config"),
    ("seed001_multinode.sh", 5, "--train_type", "--tuner_type lora"),
    ("seed001_multinode.sh", 8, "--nnodes", "NNODES=2"),
    ("seed001_multinode.sh", 9, "--node_rank", "NODE_RANK=0"),
    ("seed001_multinode.sh", 10, "--master_addr", "MASTER_ADDR=192.168.1.10"),
    ("seed001_multinode.sh", 11, "--master_port", "MASTER_PORT=29500"),
    ("seed002_single_template.sh", 8, "--train_type", "--tuner_type lora"),
    ("seed002_8xa100_ds.sh", 7, "--train_type", "--tuner_type lora"),
    ("seed002_megatron_moe.sh", 7, "--load_safetensors", "drop"),
    ("seed002_megatron_moe.sh", 10, "--train_type", "--tuner_type lora"),
    ("seed002_megatron_moe.sh", 11, "--tp", "--tensor_model_parallel_size 2"),
    ("seed002_megatron_moe.sh", 12, "--pp", "--pipeline_model_parallel_size 1"),
    ("seed002_megatron_moe.sh", 13, "--ep", "--expert_model_parallel_size 1"),
    ("seed002_megatron_moe.sh", 15, "--per_device_train_batch_size", "--micro_batch_size 1"),
    ("seed002_megatron_moe.sh", 16, "--gradient_accumulation_steps", "--global_batch_size 16"),
    ("seed002_megatron_moe.sh", 17, "--learning_rate", "--lr 1e-4"),
    ("seed002_megatron_moe.sh", 18, "--warmup_ratio", "--lr_warmup_fraction 0.05"),
    ("seed003_qlora.sh", 8, "--quantization_bit", "--quant_bits 4 --quant_method bnb"),
    ("seed003_qlora.sh", 9, "--use_lora", "--tuner_type lora"),
    ("seed003_long_context.sh", 7, "--use_ring_attention", "--sequence_parallel_size"),
]


@pytest.mark.parametrize("script,line,flag,replacement", SEED_INVALID, ids=[f"{s}:{n}" for s, n, _, _ in SEED_INVALID])
def test_seed_flags_are_reported_with_their_replacement(script, line, flag, replacement):
    hits = [p for p in problems(script) if p.get("line") == line and p.get("flag") == flag]
    assert hits, problems(script)
    assert hits[0]["severity"] == "error"
    assert replacement in hits[0]["message"] + " " + hits[0].get("fix", "")


def test_every_rejected_seed_flag_is_in_the_table_above():
    """No 4.6 rejection in the seeds' commands goes unlisted (the table above is complete)."""
    from diagnose.flags import table_for
    from diagnose.patch.argv import resolve_occurrences, split_argv
    from diagnose.patch.launch import read_launch

    t = table_for("4.6.0")
    listed = {(s, f) for s, _, f, _ in SEED_INVALID}
    for p in sorted(SCRIPTS.glob("seed*.sh")):
        L = read_launch(p.read_text(), base_dir=SCRIPTS)
        _, occs = split_argv(L.argv)
        resolve_occurrences(occs, t, L.subcommand)
        for o in occs:
            if o.status in ("unknown", "ambiguous"):
                assert (p.name, o.flag) in listed, (p.name, o.flag)


def test_seed_dialect_on_its_own_version_is_clean():
    # the 3.x spelling is right for 3.x
    assert not [p for p in problems("seed000_baseline.sh", "3.12.6") if p["severity"] == "error"]


def test_prefix_values_combinations():
    ps = problems("packing_quant_prefix.sh")
    by_flag = {p.get("flag"): p for p in ps}
    assert by_flag["--use_liger"]["severity"] == "warning" and "--use_liger_kernel" in by_flag["--use_liger"]["message"]
    assert any("flash-attention" in p["message"] and p["line"] == 8 for p in ps)
    assert any("quant_method" in p["message"] for p in ps)
    ds = problems("deepspeed_device_map.sh")
    assert any("device_map" in p["message"] and p["severity"] == "error" for p in ds)
    st = problems("seed002_8xa100_ds.sh")
    assert any("--streaming without --max_steps" in p["message"] for p in st)
    gpus = problems("seed000_baseline.sh")
    assert any("NPROC_PER_NODE" in p["message"] and p["severity"] == "warning" for p in gpus)


def test_exit_codes():
    assert lint(str(SCRIPTS / "fsdp2_4x.sh"), "--swift-version", "4.6.0").returncode == 0
    assert lint(str(SCRIPTS / "seed000_golden.sh"), "--swift-version", "4.6.0").returncode == 1
    p = lint(str(ROOT / "nope.sh"))
    assert p.returncode == 2 and p.stderr.decode().startswith("error: ")


def test_fix_rewrites_with_backup_and_is_idempotent(tmp_path):
    s = tmp_path / "train.sh"
    original = (SCRIPTS / "seed001_multinode.sh").read_bytes()
    s.write_bytes(original)
    p = lint(str(s), "--swift-version", "4.6.0", "--fix")
    assert p.returncode == 0, p.stdout + p.stderr
    assert (tmp_path / "train.sh.bak").read_bytes() == original
    text = s.read_text()
    assert "export NNODES=2" in text and "--nnodes" not in text and "--tuner_type lora" in text
    again = lint(str(s), "--swift-version", "4.6.0", "--fix")
    assert again.returncode == 0 and b"nothing to fix" in again.stdout
    assert not (tmp_path / "train.sh.bak.1").exists()


def test_fix_leaves_training_changes_to_unsafe_fixes(tmp_path):
    s = tmp_path / "train.sh"
    s.write_bytes((SCRIPTS / "packing_quant_prefix.sh").read_bytes())
    lint(str(s), "--swift-version", "4.6.0", "--fix")
    assert "--quant_method" not in s.read_text() and "--attn_impl flash_attn" in s.read_text()
    lint(str(s), "--swift-version", "4.6.0", "--fix", "--unsafe-fixes")
    assert "--quant_method bnb" in s.read_text()


def test_fix_on_a_config_file(tmp_path):
    for name in ("yaml_config.sh", "sft_config.yaml"):
        (tmp_path / name).write_bytes((SCRIPTS / name).read_bytes())
    p = lint(str(tmp_path / "sft_config.yaml"), "--swift-version", "4.6.0", "--fix")
    assert p.returncode == 0, p.stdout
    text = (tmp_path / "sft_config.yaml").read_text()
    assert "attn_impl: flash_attn" in text and "use_flash_attn" not in text
    assert "dataloader_num_workers: 1   # raise when the GPU waits for data" in text  # other bytes untouched


def test_crlf_is_reported_and_kept(tmp_path):
    ps = problems("windows_crlf.sh")
    assert any("CRLF" in p["message"] for p in ps)


def test_lint_version_from_the_log():
    p = lint(str(SCRIPTS / "seed000_baseline.sh"), "--log", str(ROOT / "fixtures" / "synthetic_3125_nccl_timeout"),
             "--format", "json")
    out = json.loads(p.stdout)["files"][0]
    assert out["version"] == "3.12.4" and not [x for x in out["problems"] if x["severity"] == "error"]
