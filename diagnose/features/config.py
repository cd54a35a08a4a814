"""Launch-configuration features: effective flag values, parallelism, dtype, data pipeline.

Effective values follow ms-swift's own precedence: a `Setting args.X: Y` line (what
ms-swift decided) over the args dump / args.json over the `run sh` argv over the
version's default.  Booleans are True/False, never strings.
"""
from __future__ import annotations

from typing import Any

from diagnose.features.registry import Ctx, feature

FAMILY = "config"


def _bool(v: Any) -> bool | None:
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return bool(v)
    if isinstance(v, str):
        low = v.strip().lower()
        if low in ("true", "1", "yes"):
            return True
        if low in ("false", "0", "no", "none", ""):
            return False
    return None


def effective(ctx: Ctx, *names: str) -> Any:
    script = ctx.options.script or {}
    for n in names:
        if script.get(n) is not None:
            return script[n]
    for n in names:
        if n in ctx.run.settings:
            from diagnose.parse.args import typed

            return typed(ctx.run.settings[n])
    return ctx.flag(*names)


def default_of(ctx: Ctx, feature_name: str, flag: str) -> Any:
    """The version's default for `flag` (diagnose.effective), marking `feature_name` assumed when the text shows no
    flags at all (the user may have changed it)."""
    k = ctx.config.default(flag) if ctx.config is not None else None
    if k is None:
        return None
    if k.assumed:
        ctx.assumed.add(feature_name)
    return k.value


def _major(ctx: Ctx) -> str | None:
    v = ctx.run.swift_version or ""
    return v[:1] if v[:1] in ("2", "3", "4") else None


@feature("dataloader_num_workers", "count", "Effective DataLoader worker processes per rank (streaming forces 1).", FAMILY)
def _workers(ctx: Ctx):
    v = effective(ctx, "dataloader_num_workers", "num_workers")
    if isinstance(v, (int, float)):
        return int(v)
    d = default_of(ctx, "dataloader_num_workers", "dataloader_num_workers")
    if d is not None:
        return int(d)
    if _major(ctx) in ("2", "3", "4"):  # a version the tables do not pin down (3.x): ms-swift's usual None -> 1
        ctx.assumed.add("dataloader_num_workers")
        return 1
    return None


@feature("cpu_cores", "count", "CPU cores of the training machine (from --cpu-cores or host sampling when attached).", FAMILY)
def _cores(ctx: Ctx):
    if ctx.options.cpu_cores:
        return int(ctx.options.cpu_cores)
    if ctx.host and ctx.host.get("cpu_cores"):
        return int(ctx.host["cpu_cores"])
    return None


@feature("local_processes", "count", "Training processes on one node (local_world_size, NPROC_PER_NODE).", FAMILY)
def _local(ctx: Ctx):
    run = ctx.run
    return run.local_world_size or run.launch.nproc_per_node or (1 if run.world_size == 1 else None)


@feature("suggested_num_workers", "count",
         "Workers to suggest per rank: min(8, max(2, cores per process // 2)); 4 when the core count is unknown.", FAMILY)
def _suggest(ctx: Ctx):
    return suggested_workers(ctx.get("cpu_cores"), ctx.get("local_processes"))


def suggested_workers(cores: int | None, local_procs: int | None) -> int:
    if not cores:
        return 4
    per = max(1, cores // max(1, local_procs or 1))
    return int(min(8, max(2, per // 2))) if per >= 2 else 1


@feature("workers_over_cores", "ratio", "Dataloader workers on the node ÷ CPU cores (above 1 oversubscribes).", FAMILY)
def _wc(ctx: Ctx):
    w, c, p = ctx.get("dataloader_num_workers"), ctx.get("cpu_cores"), ctx.get("local_processes")
    if w is None or not c:
        return None
    return w * (p or 1) / c


@feature("per_device_train_batch_size", "samples", "Micro-batch per device.", FAMILY)
def _bs(ctx: Ctx):
    v = effective(ctx, "per_device_train_batch_size", "batch_size", "micro_batch_size")
    if isinstance(v, (int, float)):
        return int(v)
    d = default_of(ctx, "per_device_train_batch_size", "per_device_train_batch_size")
    if d is None and _major(ctx) in ("3", "4"):
        ctx.assumed.add("per_device_train_batch_size")
        d = 1
    return int(d) if isinstance(d, (int, float)) else None


@feature("gradient_accumulation_steps", "steps", "Micro-batches per optimizer step (an 'iteration').", FAMILY)
def _ga(ctx: Ctx):
    v = effective(ctx, "gradient_accumulation_steps")
    return int(v) if isinstance(v, (int, float)) else None


@feature("world_size", "processes", "Data-parallel world size (ranks); 1 for a single process.", FAMILY)
def _ws(ctx: Ctx):
    return ctx.run.world_size


@feature("global_batch_size", "samples", "Samples per optimizer step: micro-batch × accumulation × data-parallel ranks.", FAMILY)
def _gbs(ctx: Ctx):
    from diagnose.batch import global_batch_of_run

    return global_batch_of_run(ctx.run)


@feature("trainer", "enum", "Which trainer printed the steps: ms-swift, ms-swift-megatron, megatron-lm, hf-trainer, "
         "deepspeed, another named trainer, or unknown.", FAMILY)
def _trainer(ctx: Ctx):
    return ctx.run.trainer


@feature("task_type", "enum", "ms-swift's --task_type (causal_lm, seq_cls, embedding, reranker...), when the args "
         "show it.", FAMILY)
def _task(ctx: Ctx):
    v = effective(ctx, "task_type")
    return str(v) if v else None


@feature("launcher", "enum", "plain (one process) or torchrun (NPROC_PER_NODE/NNODES set).", FAMILY)
def _launcher(ctx: Ctx):
    return ctx.run.launch.launcher


@feature("visible_gpus", "count", "GPUs visible to one process (device_count line, NVML samples, or an error message).", FAMILY)
def _visible(ctx: Ctx):
    run = ctx.run
    if run.device_count:
        return run.device_count
    for e in run.events:
        if "n_gpu:" in e.text:
            import re

            m = re.search(r"n_gpu: (\d+)", e.text)
            if m:
                return int(m.group(1)), [e.line]
    if ctx.samples and ctx.samples.get("gpu_count"):
        return int(ctx.samples["gpu_count"])
    return None


@feature("device_map_parallel", "bool",
         "One process drives several GPUs (device_map model parallelism: one GPU busy at a time).", FAMILY)
def _mp(ctx: Ctx):
    run = ctx.run
    if "hf_device_map" in run.settings:
        return True
    vis, local = ctx.get("visible_gpus"), ctx.get("local_processes")
    if vis is None or local is None:
        return None
    return vis > local


@feature("deepspeed", "text", "DeepSpeed config (zero2, zero3, a path) or None.", FAMILY)
def _ds(ctx: Ctx):
    v = ctx.flag("deepspeed")
    if isinstance(v, dict):
        return "zero%s" % v.get("zero_optimization", {}).get("stage", "?")
    return v if v else None


@feature("zero_stage", "stage",
         "DeepSpeed ZeRO stage (0 without DeepSpeed when the text shows the flags; None when the text does not say).",
         FAMILY)
def _zero(ctx: Ctx):
    import re

    v = ctx.flag("deepspeed")
    if isinstance(v, dict):
        st = v.get("zero_optimization", {}).get("stage")
        return int(st) if isinstance(st, int) else None
    if isinstance(v, str) and v.strip():
        m = re.search(r"zero[_-]?(\d)", v.lower())
        return int(m.group(1)) if m else None  # a config file's stage is not in the text
    if ctx.config is not None and (ctx.config.shown or ctx.options.script is not None):
        return 0
    return None


@feature("fsdp", "text", "FSDP setting (fsdp2, full_shard ...) or None.", FAMILY)
def _fsdp(ctx: Ctx):
    v = ctx.flag("fsdp")
    return v if v not in (None, "", [], False) else None


@feature("megatron", "bool", "The run uses the Megatron backend (megatron sft/pt/rlhf).", FAMILY)
def _meg(ctx: Ctx):
    run = ctx.run
    return run.trainer == "ms-swift-megatron" or (run.launch.command or "").startswith("megatron")


for _name, _flags, _doc in [
    ("lazy_tokenize", ("lazy_tokenize",), "Tokenization happens in the dataloader workers (multimodal default)."),
    ("streaming", ("streaming",), "The dataset is streamed (preprocessing on the critical path, 1 worker forced)."),
    ("packing", ("packing",), "Samples are packed into full-length rows."),
    ("padding_free", ("padding_free",), "Padding-free batching."),
    ("fp16", ("fp16",), "fp16 mixed precision is on."),
    ("bf16", ("bf16",), "bf16 mixed precision is on."),
    ("use_liger_kernel", ("use_liger_kernel", "use_liger"), "Liger kernels are on."),
]:
    def _mk(flags=_flags):
        def fn(ctx: Ctx):
            return _bool(effective(ctx, *flags))
        return fn

    feature(_name, "bool", _doc, FAMILY)(_mk())


@feature("gradient_checkpointing", "bool",
         "Activations are recomputed in backward (saves memory, costs ~20-40% speed); the version's default when not given.",
         FAMILY)
def _gc(ctx: Ctx):
    v = _bool(effective(ctx, "gradient_checkpointing"))
    if v is not None:
        return v
    d = default_of(ctx, "gradient_checkpointing", "gradient_checkpointing")
    return _bool(d) if d is not None else None


@feature("ddp_timeout", "s", "Collective timeout (HF ddp_timeout, seconds) as given, else the version's default.", FAMILY)
def _ddp_timeout(ctx: Ctx):
    v = effective(ctx, "ddp_timeout")
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        v = default_of(ctx, "ddp_timeout", "ddp_timeout")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


@feature("is_multimodal", "bool", "The model is multimodal (model_info is_multimodal, or image-pixel env lines).", FAMILY)
def _mm(ctx: Ctx):
    f = (ctx.run.model.fields if ctx.run.model else {}) or {}
    if "is_multimodal" in f:
        return _bool(f["is_multimodal"])
    if any(k in ctx.run.env_settings for k in ("MAX_PIXELS", "VIDEO_MAX_PIXELS", "FPS_MAX_FRAMES", "IMAGE_MAX_TOKEN_NUM")):
        return True
    return None


@feature("attn_impl", "text", "Attention kernel asked for (attn_impl, or 2.x use_flash_attn).", FAMILY)
def _attn(ctx: Ctx):
    v = ctx.flag("attn_impl")
    if v:
        return str(v)
    uf = _bool(ctx.flag("use_flash_attn"))
    if uf is True:
        return "flash_attn"
    return None


@feature("flash_attn", "bool", "A flash-attention kernel is in use (packing/padding_free need it).", FAMILY)
def _fa(ctx: Ctx):
    if ctx.get("megatron"):
        backend = str(ctx.flag("attention_backend") or "flash").lower()
        return backend not in ("local", "unfused", "fused")
    a = ctx.get("attn_impl")
    if a is None:
        return False if (ctx.run.launch.flags or ctx.run.swift_version) else None
    return "flash" in a


@feature("max_length", "tokens", "--max_length (sequence cap; longer rows are dropped by default).", FAMILY)
def _ml(ctx: Ctx):
    v = effective(ctx, "max_length", "seq_length")
    return int(v) if isinstance(v, (int, float)) and v > 0 else None


@feature("torch_dtype", "text", "Weight dtype (torch_dtype / 2.x dtype).", FAMILY)
def _dtype(ctx: Ctx):
    v = ctx.flag("torch_dtype", "dtype")
    return str(v).replace("torch.", "") if v else None


@feature("learning_rate", "1/step", "Peak learning rate: the flag, else the largest logged value.", FAMILY)
def _lr(ctx: Ctx):
    v = ctx.flag("learning_rate", "lr")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    t = ctx.run.steps
    if len(t) and t.has("learning_rate"):
        import numpy as np

        return float(np.nanmax(t["learning_rate"]))
    return None


@feature("warmup_ratio", "fraction", "--warmup_ratio.", FAMILY)
def _wr(ctx: Ctx):
    v = ctx.flag("warmup_ratio")
    return float(v) if isinstance(v, (int, float)) else None


@feature("warmup_steps", "steps", "--warmup_steps (0 = none).", FAMILY)
def _ws2(ctx: Ctx):
    v = ctx.flag("warmup_steps", "lr_warmup_iters")
    return int(v) if isinstance(v, (int, float)) else None


@feature("tuner_type", "text", "lora / full / ... (tuner_type, train_type or sft_type).", FAMILY)
def _tuner(ctx: Ctx):
    v = ctx.flag("tuner_type", "train_type", "sft_type")
    return str(v) if v else None


@feature("quant_bits_without_method", "bool", "--quant_bits given without --quant_method: 3.x/4.x silently load unquantized.", FAMILY)
def _qb(ctx: Ctx):
    if _major(ctx) == "2":
        return False
    qb, qm = ctx.flag("quant_bits"), ctx.flag("quant_method")
    if qb in (None, "", 0):
        return False
    return not qm


@feature("max_steps_set", "bool", "--max_steps is set (> 0); streaming needs it.", FAMILY)
def _msset(ctx: Ctx):
    v = ctx.flag("max_steps", "train_iters")
    if v is None:
        return False if ctx.run.launch.flags else None
    return isinstance(v, (int, float)) and v > 0


@feature("model_params_b", "1e9 params", "Model size from model_parameter_info.", FAMILY)
def _params(ctx: Ctx):
    m = ctx.run.model
    return (m.params_m / 1000.0, [m.line] if m.line else []) if m and m.params_m else None


@feature("trainable_frac", "fraction", "Trainable ÷ total parameters (LoRA is small).", FAMILY)
def _tf(ctx: Ctx):
    m = ctx.run.model
    if m and m.params_m and m.trainable_m is not None:
        return m.trainable_m / m.params_m
    return None


@feature("lr_over_default", "ratio",
         "Learning rate ÷ ms-swift's default for the tuner (1e-4 for LoRA-style tuners, 1e-5 for full).", FAMILY)
def _lr_ratio(ctx: Ctx):
    lr = ctx.get("learning_rate")
    if lr is None or not _llm_finetune(ctx):
        return None
    tuner = (ctx.get("tuner_type") or "lora").lower()
    base = 1e-5 if tuner == "full" else 1e-4
    return lr / base


@feature("warmup_frac", "fraction", "Warm-up as a share of training: max(warmup_ratio, warmup_steps ÷ max_steps); 0 when neither is set.", FAMILY)
def _wfrac(ctx: Ctx):
    wr, ws = ctx.get("warmup_ratio"), ctx.get("warmup_steps")
    ms = ctx.run.max_steps
    if wr is None and ws is None:
        return 0.0 if ctx.run.launch.flags else None
    frac = wr or 0.0
    if ws and ms:
        frac = max(frac, ws / ms)
    return frac


def _llm_finetune(ctx: Ctx) -> bool:
    """Is this an LLM fine-tuning trainer whose learning rates ms-swift's defaults describe? (not an image model's
    SGD at 0.1 read from another trainer's step lines)"""
    return not (ctx.run.trainer == "unknown" and ctx.run.step_dialect)


@feature("default_learning_rate", "1/step", "ms-swift's default learning rate for the tuner: 1e-5 for full, 1e-4 "
         "otherwise (None for other trainers' step lines: their defaults are not ms-swift's).", FAMILY)
def _dlr(ctx: Ctx):
    if not _llm_finetune(ctx):
        return None
    tuner = (ctx.get("tuner_type") or "lora").lower()
    return 1e-5 if tuner == "full" else 1e-4
