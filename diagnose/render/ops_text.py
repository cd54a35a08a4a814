"""Human text for remedy operations (shared by the console and markdown renderers).

Contract: `op_lines(op) -> list[str]` gives flag-diff-style lines such as
`+ --dataloader_num_workers 4`, `+ export NCCL_P2P_DISABLE=1`; names are the
flag concepts (the patcher spells them for the user's version).
"""
from __future__ import annotations

from diagnose.engine import RemedyOp


def _v(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def op_lines(op: RemedyOp) -> list[str]:
    if op.op == "set_env":
        return [f"+ export {op.env}={_v(op.value)}"]
    if op.op == "halve_batch_keep_global":
        return ["~ --per_device_train_batch_size ÷2", "~ --gradient_accumulation_steps ×2 (global batch unchanged)"]
    if op.op == "remove":
        return [f"- --{op.flag}"]
    if op.op == "at_least":
        return [f"+ --{op.flag} {_v(op.value)}  (at least)"]
    if op.op == "at_most":
        return [f"+ --{op.flag} {_v(op.value)}  (at most)"]
    return [f"+ --{op.flag} {_v(op.value)}"]
