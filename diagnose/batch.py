"""The global batch size, computed in one place: samples per optimizer step.

Contract: `global_batch(micro, accum, world) -> int | None` (micro-batch x
gradient accumulation x data-parallel ranks; None when a part is unknown);
`halved_keep_global(micro, accum, world)` halves the micro-batch and raises the accumulation so the
global batch stays (the OOM remedy, for analyze and patch alike); `default_accumulation(micro, world)` is ms-swift's default when the flag is not
given (`ceil(16 / micro / world)`, reference section 3, `Setting
args.gradient_accumulation_steps`); `global_batch_of_run(run)` reads a parsed run:
Megatron's `global_batch_size` when stated, else the effective values (a `Setting
args.X` line wins over the args dump and argv) times the world size.  Used by the
features, verify's trials and attach's live view.
"""
from __future__ import annotations

import math
from typing import Any

from diagnose.models import Run


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
        return None
    return float(v)


def global_batch(micro: Any, accum: Any, world: Any) -> int | None:
    m, a, w = _num(micro), _num(accum), _num(world)
    if m is None or a is None or w is None:
        return None
    return int(m * a * w)


def default_accumulation(micro: float, world: int) -> int:
    return max(1, math.ceil(16 / micro / max(1, world)))


def halved_keep_global(micro: int, accum: int, world: int) -> tuple[int, int, bool]:
    """(new micro-batch, new accumulation, exact): micro -> max(1, micro // 2), accumulation scaled up so that
    micro x accum x world stays the same (exact), or as close as whole numbers allow (rounded up)."""
    new_micro = max(1, int(micro) // 2)
    new_accum = math.ceil(int(accum) * int(micro) / new_micro)
    return new_micro, new_accum, new_micro * new_accum == int(micro) * int(accum)


def _effective(run: Run, *names: str) -> Any:
    from diagnose.parse.args import typed

    for n in names:
        if n in run.settings:
            return typed(run.settings[n])
    for n in names:
        v = run.launch.flags.get(n)
        if v is not None:
            return v
    return None


def global_batch_of_run(run: Run) -> int | None:
    gb = run.launch.flags.get("global_batch_size")  # Megatron states it directly
    if _num(gb) is not None:
        return int(gb)
    micro = _effective(run, "per_device_train_batch_size", "batch_size", "micro_batch_size")
    accum = _effective(run, "gradient_accumulation_steps")
    return global_batch(micro, accum, run.world_size or 1)


__all__ = ["global_batch", "default_accumulation", "global_batch_of_run", "halved_keep_global"]
