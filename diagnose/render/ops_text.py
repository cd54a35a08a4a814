"""Human text for remedy operations (shared by the console and markdown renderers).

Contract: `op_lines(op) -> list[str]` gives flag-diff-style lines that say what the op does to
*this* run, from the status diagnose.remedies gave it:
- a change: `+ --ddp_timeout 7200  (at least; now 1800, from the args dump)`, `+ export NCCL_P2P_DISABLE=1`;
- already in place: `= --ddp_timeout 18000000 already (the args dump; at least 7200 wanted)`;
- not decidable from the text: `? --gradient_checkpointing true  (ms-swift 4.x's default; only if you turned it off)`;
- the batch arithmetic of halve_batch_keep_global, worked out when the values are known.
Names are the flag concepts (the patcher spells them for the user's version).
`remedy_heading(rem)` is the label line's status part ("already in place", "if …").
"""
from __future__ import annotations

from diagnose.engine import RemedyOp, ResolvedRemedy


def _v(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return str(v)


_WANT = {"at_least": "at least", "at_most": "at most"}


def _flag_lines(op: RemedyOp) -> list[str]:
    flag, want = f"--{op.flag}", _WANT.get(op.op)
    target = f"{flag} {_v(op.value)}"
    if op.status == "already":
        wanted = f"; {want} {_v(op.value)} wanted" if want else ""
        line = f"= {flag} {_v(op.current)} already ({op.source}{wanted})"
        return [line] + ([f"  {op.detail}"] if op.detail else [])
    if op.status == "unknown":
        if op.current is not None and op.assumed:
            if op.op == "set":
                why = f"{op.source} is {_v(op.current)}: only if you changed it"
            else:
                why = f"{want}; {op.source} is {_v(op.current)}: only if you set it {'lower' if op.op == 'at_least' else 'higher'}"
            return [f"? {target}  ({why})"]
        why = "the text does not show its value: only if it is not already" if op.op == "set" else \
            f"{want}; the text does not show its value: only if it is {'lower' if op.op == 'at_least' else 'higher'} now"
        return [f"? {target}  ({why}{' so' if op.op == 'set' else ''})"]
    parts = [want] if want else []
    if op.current is not None:
        if op.assumed:
            parts.append(f"{op.source} is {_v(op.current)}, unless you set it")
        elif (op.source or "").endswith("default"):
            parts.append(f"{op.source}: {_v(op.current)}")
        else:
            parts.append(f"now {_v(op.current)}, from {op.source}")
    out = [f"+ {target}" + (f"  ({'; '.join(parts)})" if parts else "")]
    return out + ([f"  {op.detail}"] if op.detail else [])


def op_lines(op: RemedyOp) -> list[str]:
    if op.op == "set_env":
        return [f"+ export {op.env}={_v(op.value)}"]
    if op.op == "halve_batch_keep_global":
        if op.status == "already":
            return [f"= {op.detail or 'the micro-batch is already 1'} ({op.source})"]
        if op.status == "change" and op.detail:
            return [f"~ {op.detail}"]
        if op.current is not None and op.status == "unknown" and op.detail and "nothing to halve" not in op.detail:
            return [f"? {op.detail}  ({op.source}: only if you did not change it)"]
        why = f"{op.source} is {op.current}" if op.current is not None else "the text does not show the micro-batch"
        return [f"? halve --per_device_train_batch_size, double --gradient_accumulation_steps (global batch kept; {why})"]
    if op.op == "remove":
        if op.status == "already":
            return [f"= --{op.flag} is not given"]
        return [f"- --{op.flag}"]
    return _flag_lines(op)


def remedy_heading(rem: ResolvedRemedy) -> str | None:
    """What the label line adds for this run: 'already in place', or the condition it depends on."""
    if rem.status == "already":
        return "already in place"
    if rem.condition:
        return f"if {rem.condition}"
    return None
