"""What ms-swift rejects or silently ignores in an argv, and the fix for each.

Contract:
- `spell_for(concept, table, command) -> str | None`: the flag that expresses a
  remedy concept in this version and CLI (the `diagnose.flags` concepts, plus
  the Megatron names: micro_batch_size, train_iters, lr, lr_warmup_fraction,
  clip_grad); None when there is none.
- `check_flags(occs, table, command) -> [Finding]`: per occurrence -- flags the
  parser rejects (with the replacement when one exists: renamed flags, 2.x
  spellings, torchrun options given to swift, Megatron shorthands), flags that
  only match by prefix, ambiguous prefixes, values outside the flag's choices or
  type, duplicates.  `Finding.tokens` replaces the occurrence ([] drops it),
  `Finding.env` moves it into the environment.
- `check_combos(values, env, table, command, launcher) -> [Finding]`:
  combinations ms-swift refuses or ignores (packing/padding_free without flash
  attention, quant_bits without quant_method, deepspeed with device_map or with
  one process on several GPUs, fsdp with deepspeed, streaming without
  max_steps, several visible GPUs without NPROC_PER_NODE, lazy_tokenize with
  packing/streaming).  Fixes are `Request`s.
Severity: error = ms-swift stops at start-up (or the shell never passes the flag);
warning = accepted but not what it looks like; info = style.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Any

from diagnose.engine import RemedyOp
from diagnose.flags.table import string_to_bool
from diagnose.flags.versions import vkey
from diagnose.patch.argv import Occurrence
from diagnose.patch.models import Request

TORCHRUN_ENV = {"nproc_per_node": "NPROC_PER_NODE", "nnodes": "NNODES", "node_rank": "NODE_RANK",
                "master_addr": "MASTER_ADDR", "master_port": "MASTER_PORT"}
MEGATRON_CONCEPTS = {"per_device_train_batch_size": "micro_batch_size", "max_steps": "train_iters",
                     "learning_rate": "lr", "warmup_ratio": "lr_warmup_fraction", "max_grad_norm": "clip_grad"}
# shorthands from blog posts / other frameworks -> (real field, megatron only)
_ALIASES = {"tp_size": "tensor_model_parallel_size", "pp_size": "pipeline_model_parallel_size",
            "ep_size": "expert_model_parallel_size", "ep": "expert_model_parallel_size",
            "etp": "expert_tensor_parallel_size", "cp": "context_parallel_size", "cp_size": "context_parallel_size",
            "vpp": "virtual_pipeline_model_parallel_size", "tp": "tensor_model_parallel_size",
            "pp": "pipeline_model_parallel_size"}
_SEQ_PAR = {"use_ring_attention", "ring_attn", "ulysses_attn", "use_ulysses", "ring_attention"}


@dataclass
class Finding:
    problem_code: str  # renamed | unknown | ambiguous | torchrun | prefix | deprecated | value | duplicate | combo
    severity: str
    message: str
    occ: Occurrence | None = None
    tokens: list[str] | None = None  # replacement argv tokens for the occurrence ([] = drop it)
    env: dict[str, str] = field(default_factory=dict)  # move into the environment
    requests: list[Request] = field(default_factory=list)  # combination fixes
    fix: str | None = None  # one-line description of the fix
    effect: str = "safe"
    env_name: str | None = None  # the env var the finding is about (its line is the script's)
    effect_set: bool = False


def _concept_spell(concept: str, table: Any, command: str) -> str | None:
    from diagnose.flags.concepts import CONCEPTS, spell

    try:
        if concept in CONCEPTS or concept in _concept_aliases():
            return spell(concept, table.version, command)
    except KeyError:
        pass
    return None


def _concept_aliases() -> dict[str, str]:
    from diagnose.flags.concepts import CONCEPT_ALIASES

    return CONCEPT_ALIASES


def spell_for(concept: str, table: Any, command: str) -> str | None:
    name = _concept_spell(concept, table, command)
    if name:
        return name
    if command.startswith("megatron") and concept in MEGATRON_CONCEPTS and table.has(command, MEGATRON_CONCEPTS[concept]):
        return MEGATRON_CONCEPTS[concept]
    if table.has(command, concept):
        return concept
    return None


def _major(table: Any) -> int:
    return vkey(table.version)[0]


def _fmt_tokens(tokens: list[str]) -> str:
    from diagnose.patch.shell import shell_quote

    return " ".join(shell_quote(t) if not t.startswith("--") else t for t in tokens)


def check_flags(occs: list[Occurrence], table: Any, command: str, env: dict[str, str] | None = None) -> list[Finding]:
    from diagnose.flags.concepts import renamed, translate_value

    out: list[Finding] = []
    ctx = {"occs": occs, "env": env or {}}
    v = table.version
    seen: dict[str, Occurrence] = {}
    present = {o.field for o in occs if o.field}
    for o in occs:
        name = o.flag.lstrip("-").replace("-", "_")
        if o.status in ("unknown", "ambiguous"):
            out.append(_rejected(o, name, table, command, present, ctx))
            continue
        spec = table.specs(command)[o.field] if o.field and o.field != "help" else None
        if o.status == "prefix":
            rn = renamed(o.flag, v, command)
            toks = rn.apply(o.values if not o.eq_form else o.values) if rn is not None and rn.action == "rename" \
                else [o.option or f"--{o.field}", *o.values]
            if o.negated and rn is None:
                toks = [o.option or f"--no_{o.field}"]
            out.append(Finding("prefix", "warning",
                               f"{o.flag} is not a flag of ms-swift {v}; argparse accepts it only as an abbreviation "
                               f"of {o.option} (use the full name)",
                               occ=o, tokens=toks, fix=f"write {_fmt_tokens(toks)}"))
        # deprecated spelling of a concept that has a newer name in this version (4.0.x --train_type)
        if o.status == "exact" and o.field:
            newer = _concept_spell(o.field, table, command)
            if newer and newer != o.field and table.has(command, newer):
                toks = [f"--{newer}", *o.values]
                if o.field == "train_type":
                    msg, sev = (f"--train_type is deprecated in ms-swift {v} (a warning at start-up); 4.1+ rejects it: "
                                f"use --{newer}"), "warning"
                else:
                    msg, sev = f"--{o.field} is an older spelling; ms-swift {v} also takes --{newer}, the name later " \
                               "versions keep", "info"
                out.append(Finding("deprecated", sev, msg, occ=o, tokens=toks, fix=f"write {_fmt_tokens(toks)}"))
        # values
        if spec is not None and not any("$" in x for x in o.values):
            err = table.validate_value(command, o.flag, None if (not o.values and not o.eq_form) else
                                       (o.values[0] if len(o.values) == 1 and spec.type != "list" and spec.nargs != "+"
                                        else list(o.values)))
            if err:
                f = _value_fix(o, spec, table, command)
                if f is None and spec.name == "deepspeed" and o.values:
                    nv = translate_value(o.flag, o.values[0], v, command)
                    if nv:
                        f = [o.flag, nv]
                out.append(Finding("value", "error", f"{err} (ms-swift {v} stops at argument parsing)", occ=o,
                                   tokens=f, fix=f"write {_fmt_tokens(f)}" if f else None))
            elif spec.name == "deepspeed" and o.values:
                nv = translate_value(o.flag, o.values[0], v, command)
                if nv:
                    toks = [o.flag, nv]
                    out.append(Finding("value", "error",
                                       f"--deepspeed {o.values[0]} is a 2.x preset; ms-swift {v} reads it as a file "
                                       f"path and fails (the {v} preset is {nv})", occ=o, tokens=toks,
                                       fix=f"write {_fmt_tokens(toks)}"))
            if spec.name == "model_type" and o.values and _major(table) >= 3 and "-" in o.values[0] \
                    and re.fullmatch(r"[a-z][a-z0-9.]*(-[a-z0-9.]+)+", o.values[0]):
                out.append(Finding("value", "warning",
                                   f"--model_type {o.values[0]} looks like a 2.x model id; 3.x/4.x model types are "
                                   "spelled like qwen2_5 (or drop --model_type and let --model decide)", occ=o))
        if o.values and any(x.strip() == "" for x in o.values):
            out.append(Finding("value", "error", f"{o.flag} gets a blank argument (an escaped space `\\ `?)", occ=o))
        if o.field:
            if o.field in seen and o.field != "help":
                first = seen[o.field]
                again = "again" if first.flag == o.flag else f"again (first as {first.flag})"
                out.append(Finding("duplicate", "warning",
                                   f"{o.flag} is given {again}: argparse keeps this last value and ignores "
                                   f"{first.value_text or 'the earlier one'}", occ=o))
            seen[o.field] = o
    return out


def _value_fix(o: Occurrence, spec: Any, table: Any, command: str) -> list[str] | None:
    """A replacement value in this version's vocabulary (bf16 -> bfloat16, truncation_left -> left ...)."""
    from diagnose.flags.concepts import CONCEPTS, spell_value

    if not o.values or len(o.values) != 1:
        return None
    val = o.values[0]
    concept = spec.name if spec.name in CONCEPTS else None
    if concept is None:
        from diagnose.flags.concepts import CONCEPT_ALIASES

        concept = CONCEPT_ALIASES.get(spec.name)
    cand: str | None = None
    if concept is not None:
        sv = spell_value(concept, val, table.version, command)
        if sv is not None and sv[0] == spec.name and sv[1] is not None and sv[1] != val:
            cand = sv[1]
        elif sv is not None and sv[1] is None:
            return []  # AUTO: drop, the default applies
    if cand is None and spec.choices:
        low = val.lower()
        extra = {"truncation_left": "left", "truncation_right": "right", "fp16": "float16", "bf16": "bfloat16",
                 "fp32": "float32"}
        if extra.get(low) in {str(c) for c in spec.choices}:
            cand = extra[low]
        else:
            m = difflib.get_close_matches(low, [str(c) for c in spec.choices if c is not None], n=1, cutoff=0.8)
            cand = m[0] if m else None
    if cand is None or table.validate_value(command, o.flag, cand) is not None:
        return None
    return [o.flag, cand] if not o.eq_form else [f"{o.flag}={cand}"]


def _megatron_global_batch(o: Occurrence, ctx: dict[str, Any]) -> int | None:
    """global_batch_size = micro × accumulation × data-parallel size, when every factor is known."""
    from diagnose.parse.values import to_number

    def val(*names: str, default: int | None = None) -> int | None:
        hit = None
        for oc in ctx["occs"]:
            n = oc.flag.lstrip("-").replace("-", "_")
            if (n in names or oc.field in names) and oc.values:
                hit = to_number(oc.values[0])
        if hit is None:
            return default
        return int(hit) if float(hit).is_integer() else None

    env = ctx["env"]
    nproc = to_number(env.get("NPROC_PER_NODE", "")) if env.get("NPROC_PER_NODE") else None
    nnodes = to_number(env.get("NNODES", "1")) if env.get("NNODES") else 1
    ga = to_number(o.values[0]) if len(o.values) == 1 else None
    if not nproc or not nnodes or ga is None:
        return None
    tp = val("tensor_model_parallel_size", "tp", "tp_size", default=1)
    pp = val("pipeline_model_parallel_size", "pp", "pp_size", default=1)
    cp = val("context_parallel_size", "cp", "cp_size", default=1)
    micro = val("micro_batch_size", "per_device_train_batch_size", "batch_size", default=1)
    if None in (tp, pp, cp, micro):
        return None
    world = int(nproc) * int(nnodes)
    if world % (tp * pp * cp):  # type: ignore[operator]
        return None
    dp = world // (tp * pp * cp)  # type: ignore[operator]
    return int(micro * ga * dp)  # type: ignore[operator]


def _rejected(o: Occurrence, name: str, table: Any, command: str, present: set[str | None],
              ctx: dict[str, Any]) -> Finding:
    from diagnose.flags.concepts import renamed

    v = table.version
    meg = command.startswith("megatron")
    base = "unknown" if o.status == "unknown" else "ambiguous"
    head = (f"{o.flag} is not a flag of ms-swift {v} ({command.replace('_', ' ')}): it stops at argument parsing "
            "(ValueError: remaining_argv)" if base == "unknown" else
            f"{o.flag} is an ambiguous abbreviation in ms-swift {v} ({', '.join(o.candidates[:4])}"
            f"{' ...' if len(o.candidates) > 4 else ''}): argparse stops with an error")
    rn = renamed(o.flag, v, command)
    if rn is not None:
        if rn.action == "use_megatron_cli":
            return Finding(base, "error", f"{head}; {rn.note}", occ=o)
        toks = rn.apply(o.values if o.values else None)
        if rn.action == "drop" or not toks:
            why = rn.note or "no equivalent"
            return Finding("renamed", "error", f"{head}; {why}", occ=o, tokens=[], fix="drop it")
        return Finding("renamed", "error", f"{head}; the {v} spelling is {_fmt_tokens(toks)}"
                       + (f" ({rn.note})" if rn.note and "spelled" not in rn.note else ""),
                       occ=o, tokens=toks, fix=f"write {_fmt_tokens(toks)}")
    if name in TORCHRUN_ENV and not table.has(command, name):
        env = {TORCHRUN_ENV[name]: o.values[0]} if o.values else {}
        return Finding("torchrun", "error", f"{head}; {o.flag} is a torchrun option: the swift CLI takes it from the "
                                            f"environment ({TORCHRUN_ENV[name]}={o.values[0] if o.values else '?'})",
                       occ=o, tokens=[] if env else None, env=env,
                       fix=f"export {TORCHRUN_ENV[name]}={o.values[0]} instead" if env else None)
    alias = _ALIASES.get(name)
    if alias and table.has(command, alias):
        toks = [f"--{alias}", *o.values]
        return Finding("renamed", "error", f"{head}; the {v} spelling is {_fmt_tokens(toks)}", occ=o, tokens=toks,
                       fix=f"write {_fmt_tokens(toks)}")
    if meg and name in MEGATRON_CONCEPTS and table.has(command, MEGATRON_CONCEPTS[name]):
        toks = [f"--{MEGATRON_CONCEPTS[name]}", *o.values]
        return Finding("renamed", "error", f"{head}; Megatron spells it {_fmt_tokens(toks)}", occ=o, tokens=toks,
                       fix=f"write {_fmt_tokens(toks)}")
    if meg and name == "gradient_accumulation_steps":
        why = (f"{head}; Megatron derives accumulation from --global_batch_size "
               "(= micro_batch_size × accumulation × data-parallel size)")
        if "global_batch_size" in present:
            return Finding("renamed", "error", why + "; --global_batch_size is already given", occ=o, tokens=[],
                           fix="drop it (--global_batch_size decides)")
        gbs = _megatron_global_batch(o, ctx)
        if gbs is not None:
            toks = ["--global_batch_size", str(gbs)]
            return Finding("renamed", "error", why, occ=o, tokens=toks, fix=f"write {_fmt_tokens(toks)} (the same "
                                                                            "samples per step)")
        return Finding(base, "error", why, occ=o)
    if meg and name == "load_safetensors" and not table.has(command, name):
        return Finding("renamed", "error", f"{head}; ms-swift {v} Megatron loads the safetensors given by --model "
                                           "itself (mcore checkpoints: --mcore_model)", occ=o, tokens=[],
                       fix="drop it")
    if name == "use_lora":
        b = string_to_bool(o.values[0]) if o.values else True
        tflag = _concept_spell("tuner_type", table, command)
        if tflag and b is not None:
            toks = [f"--{tflag}", "lora" if b else "full"]
            return Finding("renamed", "error", f"{head}; the tuner is chosen with {_fmt_tokens(toks)}", occ=o,
                           tokens=toks, fix=f"write {_fmt_tokens(toks)}")
    if name == "fsdp_transformer_layer_cls_to_wrap" and table.has(command, "fsdp_config") and "fsdp_config" not in present:
        import json

        toks = ["--fsdp_config", json.dumps({"transformer_layer_cls_to_wrap": list(o.values)})]
        return Finding("renamed", "error", f"{head}; it moved into --fsdp_config", occ=o, tokens=toks,
                       fix=f"write {_fmt_tokens(toks)}")
    if name in _SEQ_PAR:
        alt = "--sequence_parallel_size N" if table.has(command, "sequence_parallel_size") else \
            "--context_parallel_size N" if table.has(command, "context_parallel_size") else None
        tail = f"; sequence parallelism is {alt} (Ulysses, ring attention when the heads do not divide)" if alt else ""
        return Finding(base, "error", head + tail, occ=o)
    opts = [k for k in table.options(command) if k.startswith("--")]
    close = difflib.get_close_matches(o.flag, opts, n=1, cutoff=0.85)
    hint = f"; did you mean {close[0]}?" if close else ""
    return Finding(base, "error", head + hint, occ=o)


# ----------------------------------------------------------------------------- combinations
def _truthy(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str):
        b = string_to_bool(v)
        return bool(b)
    return bool(v)


def _visible(env: dict[str, str]) -> int | None:
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is None or "$" in cvd:
        return None
    ids = [x for x in cvd.replace(" ", "").split(",") if x != ""]
    return len(ids)


def _req(op: str, effect: str, title: str, note: str | None = None, **kw: Any) -> Request:
    return Request(op=RemedyOp(op=op, **kw), effect=effect, rule="lint", title=title, note=note)


def check_combos(values: dict[str, Any], env: dict[str, str], table: Any, command: str, launcher: str,
                 config_file: bool = False, occs: dict[str, Occurrence] | None = None) -> list[Finding]:
    """`values`: field -> value given in the argv (bools already bools); `launcher`: swift | megatron | torchrun | python.

    `occs` (field -> its last occurrence) lets each finding point at the flag's line."""
    out: list[Finding] = []
    occs = occs or {}
    v = table.version
    ver = vkey(v)
    meg = command.startswith("megatron")
    attn = values.get("attn_impl")
    if attn is None and "use_flash_attn" in values:
        attn = "flash_attn" if _truthy(values["use_flash_attn"]) else "eager"
    flash = attn is not None and "flash" in str(attn).lower()
    if not meg and ver >= (3, 5, 0, 0):
        for feat in ("packing", "padding_free"):
            if _truthy(values.get(feat, False)) and not flash:
                out.append(Finding("combo", "error",
                                   f"--{feat} needs a flash-attention kernel: ms-swift {v} stops with ValueError "
                                   f"(attn_impl is {attn or 'not set'})", occ=occs.get(feat),
                                   requests=[_req("set", "safe", f"flash attention for {feat}", flag="attn_impl",
                                                  value="flash_attn")],
                                   fix="add --attn_impl flash_attn (needs the flash-attn package)"))
                break
    if ver[0] >= 3 and values.get("quant_bits") not in (None, "", 0, "0") and not values.get("quant_method"):
        out.append(Finding("combo", "warning",
                           f"--quant_bits {values['quant_bits']} without --quant_method is accepted and does nothing: "
                           "the model loads unquantized", occ=occs.get("quant_bits"),
                           requests=[_req("set", "changes-training", "name the quantization method",
                                          "the base model is really quantized (QLoRA): less memory, slower steps",
                                          flag="quant_method", value="bnb")],
                           fix="add --quant_method bnb"))
    nproc = env.get("NPROC_PER_NODE")
    nnodes = env.get("NNODES")
    vis = _visible(env)
    multi_proc = launcher == "torchrun" or nproc is not None or nnodes is not None
    ds = values.get("deepspeed")
    if ds and not meg:
        if values.get("device_map") not in (None, ""):
            out.append(Finding("combo", "error", "--deepspeed with --device_map: ms-swift refuses it (DeepSpeed is not "
                                                 "compatible with `device_map`)", occ=occs.get("device_map"),
                               requests=[_req("remove", "safe", "drop device_map (DeepSpeed places the model)",
                                              flag="device_map")],
                               fix="drop --device_map"))
        elif vis is not None and vis > 1 and not multi_proc and launcher in ("swift", "python"):
            out.append(Finding("combo", "error",
                               f"--deepspeed with {vis} visible GPUs and one process: ms-swift falls back to device_map "
                               "and refuses (DeepSpeed is not compatible with `device_map`)", occ=occs.get("deepspeed"),
                               requests=[_req("set_env", "changes-training", "one process per GPU",
                                              f"data parallel over {vis} GPUs: the global batch grows {vis}× unless "
                                              "gradient_accumulation_steps is lowered", env="NPROC_PER_NODE", value=vis)],
                               fix=f"export NPROC_PER_NODE={vis}"))
        if values.get("fsdp") not in (None, "", False):
            out.append(Finding("combo", "error", "--fsdp with --deepspeed: use one of them (ms-swift/accelerate refuse "
                                                 "both)", occ=occs.get("fsdp"), fix=None))
    elif not ds and vis is not None and vis > 1 and not multi_proc and launcher in ("swift", "megatron"):
        sev = "error" if meg else "warning"
        env_name = "CUDA_VISIBLE_DEVICES"
        why = ("Megatron runs one process per GPU; without NPROC_PER_NODE it starts one" if meg else
               f"{vis} visible GPUs and no NPROC_PER_NODE: one process drives all of them with device_map "
               "(layers split, one GPU busy at a time)")
        out.append(Finding("combo", sev, why, env_name=env_name,
                           requests=[_req("set_env", "changes-training", "one process per GPU",
                                          f"data parallel over {vis} GPUs: the global batch grows {vis}× unless "
                                          "gradient_accumulation_steps is lowered", env="NPROC_PER_NODE", value=vis)],
                           fix=f"export NPROC_PER_NODE={vis}"))
    if _truthy(values.get("streaming", False)):
        steps_flag = "train_iters" if meg else "max_steps"
        ms = values.get(steps_flag)
        try:
            has_steps = ms is not None and float(ms) > 0
        except (TypeError, ValueError):
            has_steps = True
        if not has_steps:
            out.append(Finding("combo", "error" if ver[0] >= 4 else "warning",
                               f"--streaming without --{steps_flag}: a stream has no length, ms-swift {v} "
                               f"{'stops' if ver[0] >= 4 else 'cannot plan the schedule'}; add --{steps_flag} N",
                               occ=occs.get("streaming"), fix=None))
        if ver[0] >= 4 and _truthy(values.get("lazy_tokenize", False)):
            out.append(Finding("combo", "error", "--streaming with --lazy_tokenize: ms-swift 4.x refuses them together "
                                                 "(Streaming and lazy_tokenize are incompatible)",
                               occ=occs.get("lazy_tokenize")))
    if ver[0] >= 4 and _truthy(values.get("packing", False)) and _truthy(values.get("lazy_tokenize", False)):
        out.append(Finding("combo", "error", "--packing with --lazy_tokenize: ms-swift 4.x refuses them together "
                                             "(Packing and lazy_tokenize are incompatible)", occ=occs.get("lazy_tokenize")))
    if config_file and ver[0] < 4:
        out.append(Finding("combo", "error", f"ms-swift {v} does not expand a YAML/JSON config file (4.0+ does); "
                                             "the path ends up in remaining_argv"))
    return out
