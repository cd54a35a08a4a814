"""Remedies checked against the run before anyone sees them: the one remedy engine of analyze, patch and verify.

Contract: `resolve_findings(findings, features) -> list[Finding]` gives every remedy op a `status` against the
run's effective values (`features.config`, diagnose.effective: the launch script being patched, ms-swift's
`Setting` lines, the `run sh:` argv, the args dump, the version's defaults):
- `change`: the op changes the run (`current` and `source` say what the value is now, when known);
- `already`: the run already satisfies it: a `set` to the value it has, an `at_least` it meets, an `at_most` it is
  under, a `remove` of a flag it does not give, a micro-batch of 1 to halve.  A remedy therefore never lowers a value
  it means to raise, nor raises one it means to lower;
- `unknown`: the text shows neither the value nor a default that holds for every version it may come from; or only
  a default the user may have changed (`assumed`): the op is shown as conditional, never as a fact.
Each remedy gets `status`: `already` when every op is, `conditional` when its rule's `when` depends on a value the
text does not show (set by the engine), else `apply`.  `halve_batch_keep_global` is worked out into the concrete
micro-batch and accumulation when they are known (diagnose.batch.halved_keep_global).
`same_value(concept, a, b)` and `satisfies(op, target, current)` are the comparisons patch's planner uses too, so
`analyze` and `patch` tell one story.  Pure.
"""
from __future__ import annotations

import math
from typing import Any

from diagnose.effective import EffectiveConfig, Known
from diagnose.engine import Finding, RemedyOp, ResolvedRemedy
from diagnose.features.registry import Features

# values the run's own output states for a flag, when no flag value is in the text: flag -> (feature, label)
_OBSERVED = {"ddp_timeout": ("collective_timeout_s", "the watchdog line's Timeout(ms)", "s")}
_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "half": "float16", "float": "float32"}


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v.strip())
        except ValueError:
            return None
    return None


def _bool(v: Any) -> bool | None:
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return bool(v)
    if isinstance(v, str):
        low = v.strip().lower()
        if low in ("yes", "true", "t", "y", "1"):
            return True
        if low in ("no", "false", "f", "n", "0"):
            return False
    return None


def same_value(concept: str, current: Any, target: Any) -> bool:
    """Does the run's value already mean the target? (bools as HF parses them, numbers to 12 digits, dtype and
    attention-kernel synonyms, strings case-insensitively)."""
    if current is None:
        return target is None
    if concept in ("attn_impl", "use_flash_attn") and isinstance(target, str) and "flash" in target.lower():
        return current is True or (isinstance(current, str) and "flash" in current.lower())
    if isinstance(target, bool) or isinstance(current, bool):
        tb, cb = _bool(target), _bool(current)
        return tb is not None and tb == cb
    cn, tn = _num(current), _num(target)
    if cn is not None and tn is not None:
        return math.isclose(cn, tn, rel_tol=1e-12)
    cs, ts = str(current).strip().lower().replace("torch.", ""), str(target).strip().lower().replace("torch.", "")
    if concept in ("torch_dtype", "dtype"):
        cs, ts = _DTYPE.get(cs, cs), _DTYPE.get(ts, ts)
    return cs == ts


def satisfies(op: str, target: Any, current: Any, concept: str = "") -> bool | None:
    """Whether `current` already meets `op target` (None: cannot compare, e.g. a number against text)."""
    if op == "set":
        return same_value(concept, current, target)
    if op in ("at_least", "at_most"):
        cn, tn = _num(current), _num(target)
        if cn is None or tn is None:
            return None
        return cn >= tn if op == "at_least" else cn <= tn
    return None


def known_value(cfg: EffectiveConfig | None, feats: dict[str, Any], flag: str) -> Known | None:
    """The run's value of `flag`: given in the text or script, else stated by the run's own output, else default."""
    if cfg is None:
        return None
    k = cfg.given(flag)
    if k is not None:
        return k
    obs = _OBSERVED.get(flag)
    if obs and feats.get(obs[0]) is not None:
        return Known(feats[obs[0]], "observed", obs[1])
    return cfg.default(flag)


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return str(v)


def _judge_flag(op: RemedyOp, k: Known | None, feats: dict[str, Any]) -> RemedyOp:
    flag = op.flag or ""
    upd: dict[str, Any] = {}
    if k is None:
        return op.model_copy(update={"status": "unknown"})
    upd.update(current=k.value, source=k.where, assumed=k.assumed)
    if op.op == "remove":
        given = k.source not in ("default", "observed") and k.value not in (None, False, "", [])
        upd["status"] = "change" if given else ("unknown" if k.assumed else "already")
        return op.model_copy(update=upd)
    ok = satisfies(op.op, op.value, k.value, flag)
    if ok is None:
        upd["status"] = "unknown"
    elif ok:
        upd["status"] = "unknown" if k.assumed else "already"
    else:
        upd["status"] = "change"
    obs = _OBSERVED.get(flag)
    if obs and k.source not in ("observed", "default") and feats.get(obs[0]) is not None \
            and not same_value(flag, k.value, feats[obs[0]]):
        upd["detail"] = (f"{obs[1]} says {_fmt(feats[obs[0]])} {obs[2]}: the collective that timed out does not "
                         f"follow --{flag} {_fmt(k.value)}")
    return op.model_copy(update=upd)


def _judge_halve(op: RemedyOp, cfg: EffectiveConfig | None) -> RemedyOp:
    from diagnose.batch import default_accumulation, halved_keep_global

    bs = cfg.get("per_device_train_batch_size") if cfg else None
    if bs is None or _num(bs.value) is None:
        return op.model_copy(update={"status": "unknown"})
    b = int(_num(bs.value) or 1)
    upd: dict[str, Any] = {"current": b, "source": bs.where, "assumed": bs.assumed}
    if b < 2:
        upd["status"] = "unknown" if bs.assumed else "already"
        upd["detail"] = "the micro-batch is 1: nothing to halve"
        return op.model_copy(update=upd)
    world = int(cfg.world_size or 1) if cfg else 1
    ga_k = cfg.get("gradient_accumulation_steps") if cfg else None
    ga = int(_num(ga_k.value) or 0) if ga_k is not None and _num(ga_k.value) else default_accumulation(b, world)
    nb, na, exact = halved_keep_global(b, ga, world)
    upd["status"] = "unknown" if bs.assumed else "change"
    upd["detail"] = (f"per_device_train_batch_size {b} -> {nb}, gradient_accumulation_steps {ga} -> {na}: global batch "
                     f"{b}×{ga}×{world} = {b * ga * world} -> {nb}×{na}×{world} = {nb * na * world}"
                     + ("" if exact else " (as close as whole numbers allow)"))
    return op.model_copy(update=upd)


def resolve_op(op: RemedyOp, cfg: EffectiveConfig | None, feats: dict[str, Any]) -> RemedyOp:
    if op.op == "halve_batch_keep_global":
        return _judge_halve(op, cfg)
    if op.op == "set_env":
        return op.model_copy(update={"status": "change"})  # the environment is not in the log: applied as said
    if not op.flag:
        return op.model_copy(update={"status": "change"})
    if op.flag == "resume_from_checkpoint":  # a path the run itself names
        return op.model_copy(update={"status": "change"})
    return _judge_flag(op, known_value(cfg, feats, op.flag), feats)


def resolve_remedy(rem: ResolvedRemedy, cfg: EffectiveConfig | None, feats: dict[str, Any]) -> ResolvedRemedy:
    ops = [resolve_op(op, cfg, feats) for op in rem.ops]
    if rem.condition:
        status = "conditional"
    elif ops and all(o.status == "already" for o in ops):
        status = "already"
    else:
        status = "apply"
    return rem.model_copy(update={"ops": ops, "status": status})


def resolve_findings(findings: list[Finding], features: Features) -> list[Finding]:
    cfg, feats = features.config, features.values
    return [f.model_copy(update={"remedies": [resolve_remedy(r, cfg, feats) for r in f.remedies]}) for f in findings]


__all__ = ["resolve_findings", "resolve_remedy", "resolve_op", "same_value", "satisfies", "known_value"]
