"""Helpers of the security tests (issue #20): run the CLI in this process or as a bounded child, build crafted files."""
from __future__ import annotations

import contextlib
import io
import os
import pickle
import resource
import subprocess
import sys
from dataclasses import dataclass

from tests.conftest import ROOT

OOM_LINE = ("[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
            "capacity of 79.15 GiB of which 1.05 GiB is free.\n")
HF = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567"
SK = "sk-proj-" + "Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2"
GHP = "ghp_" + "0123456789abcdefghijABCDEFGHIJklmnopqr"
SECRETS = (HF, SK, GHP, "wandb-plain-4f1d2c", "hunter2-pass", "s3cr3t-env")


def secret_log() -> str:
    """A capture whose launch line, env lines and args dump carry credentials, then an OOM."""
    argv = ("/usr/bin/python3 /opt/swift/cli/sft.py --model Qwen/Qwen2.5-7B --dataset d.jsonl --tuner_type lora "
            f"--per_device_train_batch_size 8 --hub_token {HF} --wandb_api_key=wandb-plain-4f1d2c "
            "--push_to_hub true --output_dir /out")
    return (f"run sh: `{argv}`\n"
            f"HF_TOKEN={HF} OPENAI_API_KEY={SK} DB_PASSWORD=hunter2-pass MY_SECRET=s3cr3t-env swift sft\n"
            "[INFO:swift] swift.__version__: 3.12.4\n"
            f"[INFO:swift] args: TrainArguments(model='Qwen/Qwen2.5-7B', hub_token='{HF}', max_new_tokens=64, "
            "pad_token='<pad>')\n"
            f"git clone https://bot:{GHP}@github.com/org/repo\n"
            "{'loss': 1.2, 'grad_norm': 0.5, 'learning_rate': 1e-4, 'epoch': 0.1, 'global_step/max_steps': '1/100', "
            "'memory(GiB)': 70.1, 'train_speed(iter/s)': 0.5}\n"
            + OOM_LINE
            + f"RuntimeError: push failed for https://user:{HF}@huggingface.co (token {HF})\n")


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def sd(*args: str, stdin: bytes | None = None) -> Result:
    """`swiftdoc ARGS` in this process (fast: no interpreter start-up); stdin as bytes."""
    from diagnose import cli

    out, err = io.StringIO(), io.StringIO()
    old_in, old_env = sys.stdin, os.environ.get("SWIFTDOC_MAX_INPUT")
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin or b""))
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli.main(list(args))
    finally:
        sys.stdin = old_in
        if old_env is None:
            os.environ.pop("SWIFTDOC_MAX_INPUT", None)
        else:
            os.environ["SWIFTDOC_MAX_INPUT"] = old_env
    return Result(rc, out.getvalue(), err.getvalue())


def sd_child(*args: str, stdin=None, timeout: float = 60, mem_mb: int = 1500, cwd=ROOT,
             env: dict | None = None) -> subprocess.CompletedProcess:
    """`swiftdoc ARGS` as a child with an address-space limit and a timeout (a hang or a blow-up fails the test)."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (mem_mb << 20, mem_mb << 20))

    kw = {"input": stdin} if isinstance(stdin, (bytes, type(None))) else {"stdin": stdin}
    return subprocess.run([sys.executable, "-m", "diagnose", *args], capture_output=True, cwd=cwd, timeout=timeout,
                          preexec_fn=limit, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}, **kw)


def nested_dump(depth: int = 7, width: int = 10) -> bytes:
    """A flight recorder dump whose input_sizes nests one shared list `depth` levels deep (width**depth leaves
    when expanded): a few hundred bytes of pickle."""
    x: list = [1] * width
    for _ in range(depth):
        x = [x] * width
    entry = {"record_id": 0, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": 5,
             "p2p_seq_id": 0, "op_id": 5, "profiling_name": "nccl:all_reduce", "time_created_ns": 1,
             "input_sizes": x, "input_dtypes": ["Float"], "output_sizes": x, "output_dtypes": ["Float"],
             "state": "scheduled", "time_discovered_started_ns": None, "time_discovered_completed_ns": None,
             "retired": False, "timeout_ms": 600000, "is_p2p": False, "frames": []}
    return pickle.dumps({"version": "2.4", "pg_config": {}, "pg_status": {}, "entries": [entry]}, protocol=4)
