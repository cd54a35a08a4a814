"""GPU features: the card (from --gpu or NVML samples), utilisation, PCIe, power, MFU.

MFU ≈ FLOPs per token × tokens/s ÷ (GPUs × dense bf16 peak).  FLOPs per token:
6·P for full training; for LoRA-style tuning 4·P_frozen + 6·P_trainable (frozen
weights get no weight gradient); + 2·P with gradient checkpointing (forward
recomputed).  Peak figures are the vendor's dense bf16 tensor numbers.
"""
from __future__ import annotations

import re

import numpy as np

from diagnose.features.registry import Ctx, feature

FAMILY = "gpu"

# name -> (memory GiB, dense bf16 TFLOP/s (fp16 where no bf16), bf16 supported)
GPUS: dict[str, tuple[float, float, bool]] = {
    "H200": (141.0, 989.0, True),
    "H100-SXM": (80.0, 989.0, True),
    "H100-PCIE": (80.0, 756.0, True),
    "H800": (80.0, 989.0, True),
    "H20": (96.0, 148.0, True),
    "A100-80GB": (80.0, 312.0, True),
    "A100-40GB": (40.0, 312.0, True),
    "A800-80GB": (80.0, 312.0, True),
    "L40S": (48.0, 362.0, True),
    "L40": (48.0, 181.0, True),
    "L20": (48.0, 119.0, True),
    "A6000": (48.0, 155.0, True),
    "A40": (48.0, 150.0, True),
    "A10": (24.0, 125.0, True),
    "L4": (24.0, 121.0, True),
    "RTX4090": (24.0, 165.0, True),
    "RTX4080": (16.0, 97.0, True),
    "RTX3090": (24.0, 71.0, True),
    "V100-32GB": (32.0, 125.0, False),
    "V100-16GB": (16.0, 125.0, False),
    "T4": (16.0, 65.0, False),
}
_ALIASES = {"H100": "H100-SXM", "A100": "A100-80GB", "A800": "A800-80GB", "V100": "V100-32GB", "4090": "RTX4090",
            "3090": "RTX3090", "4080": "RTX4080"}


def normalize_gpu(name: str) -> str | None:
    """'NVIDIA A100-SXM4-80GB' / 'a100-80gb' / 'RTX 4090' -> a GPUS key, or None."""
    s = name.upper().replace("NVIDIA", "").replace("GEFORCE", "").replace(" ", "").replace("_", "-")
    if s in GPUS:
        return s
    if s in _ALIASES:
        return _ALIASES[s]
    for key in sorted(GPUS, key=len, reverse=True):
        base = key.split("-")[0]
        if base in s:
            if key.endswith("GB") and key.split("-")[1] not in s:
                continue
            if key in ("H100-PCIE",) and "PCIE" not in s:
                continue
            return key
    m = re.search(r"(4090|3090|4080|A100|H100|H800|A800|V100)", s)
    if m:
        return _ALIASES.get(m.group(1)) or normalize_gpu(m.group(1))
    return None


# what may surround the model in a product name: form factors, memory, generations
_DECOR = re.compile(r"^(?:SXM\d?|PCIE|HBM\d?E?|NVL|TESLA|RTX|ADA|GENERATION|GEN|\d+GB|\d+G|MIG.*)$")


def gpu_from_flag(name: str) -> str | None:
    """A GPUS key for a name a user typed (--gpu): the table's names, their aliases and full product names
    ('NVIDIA A100-SXM4-80GB', 'RTX 4090'); None for anything with a part that is neither the model nor a
    known decoration ('V100X', 'A100-FOO'), so a typo is an error, never a silent near match."""
    key = normalize_gpu(name)
    if key is None:
        return None
    s = name.upper().replace("NVIDIA", " ").replace("GEFORCE", " ")
    parts = [p for p in re.split(r"[\s_-]+", s) if p]
    base = key.split("-")[0].replace("RTX", "")
    rest = [p for p in parts if p.replace("RTX", "") != base and p != key.replace("-", "") and not _DECOR.match(p)]
    if key.endswith("GB"):  # 'A100-80GB': the size is part of the key, already matched
        rest = [p for p in rest if p != key.split("-")[1]]
    return None if rest else key


def _gpu_key(ctx: Ctx) -> str | None:
    if ctx.options.gpu:
        return normalize_gpu(ctx.options.gpu)
    if ctx.samples and ctx.samples.get("gpu_name"):
        return normalize_gpu(str(ctx.samples["gpu_name"]))
    return None


@feature("gpu_name", "text", "GPU model from --gpu or NVML samples.", FAMILY)
def _name(ctx: Ctx):
    return _gpu_key(ctx)


@feature("gpu_peak_tflops", "TFLOP/s", "Dense bf16 tensor peak of one GPU of that model.", FAMILY)
def _peak(ctx: Ctx):
    k = ctx.get("gpu_name")
    return GPUS[k][1] if k else None


@feature("bf16_supported", "bool", "The GPU supports bf16 (Ampere, Ada, Hopper: yes; V100/T4: no).", FAMILY)
def _bf16(ctx: Ctx):
    k = ctx.get("gpu_name")
    return GPUS[k][2] if k else None


def _s(ctx: Ctx, key: str):
    return ctx.samples.get(key) if ctx.samples else None


for _f, _u, _d in [
    ("gpu_util_mean_pct", "%", "Mean NVML GPU utilisation over the samples."),
    ("gpu_util_p10_pct", "%", "10th percentile of NVML GPU utilisation (long idle gaps)."),
    ("mem_util_mean_pct", "%", "Mean NVML memory-controller utilisation."),
    ("pcie_rx_mean_mbps", "MB/s", "Mean PCIe receive throughput per GPU."),
    ("pcie_tx_mean_mbps", "MB/s", "Mean PCIe transmit throughput per GPU."),
    ("power_mean_w", "W", "Mean board power."),
    ("power_limit_w", "W", "Board power limit."),
    ("sm_clock_mean_mhz", "MHz", "Mean SM clock."),
    ("temperature_max_c", "°C", "Hottest GPU temperature seen."),
]:
    def _mk(key=_f):
        return lambda ctx: _s(ctx, key)

    feature(_f, _u, _d, FAMILY)(_mk())


@feature("throttle_reasons", "list", "Clock-throttle reasons NVML reported (power cap, thermal ...).", FAMILY)
def _thr(ctx: Ctx):
    v = _s(ctx, "throttle_reasons")
    return list(v) if v else ([] if ctx.samples else None)


@feature("gpus_used", "count", "GPUs doing the training: data-parallel ranks × model-parallel split.", FAMILY)
def _gused(ctx: Ctx):
    ws = ctx.get("world_size")
    if ctx.get("device_map_parallel") and ctx.get("visible_gpus"):
        return ctx.get("visible_gpus")
    return ws


@feature("flops_per_token", "FLOP", "Training FLOPs per token: 6·P (full) or 4·P_frozen + 6·P_trainable, + 2·P with gradient checkpointing.", FAMILY)
def _fpt(ctx: Ctx):
    pb, tf = ctx.get("model_params_b"), ctx.get("trainable_frac")
    if pb is None:
        return None
    p = pb * 1e9
    tf = 1.0 if tf is None else tf
    f = 6 * p * tf + 4 * p * (1 - tf)
    if ctx.get("gradient_checkpointing"):
        f += 2 * p
    return f


@feature("mfu_pct", "%", "Estimated model FLOPs utilisation: FLOPs/token × tokens/s ÷ (GPUs × bf16 peak).", FAMILY)
def _mfu(ctx: Ctx):
    f, tps, peak, n = ctx.get("flops_per_token"), ctx.get("tokens_per_s"), ctx.get("gpu_peak_tflops"), ctx.get("gpus_used")
    if None in (f, tps, peak) or not n:
        t = ctx.run.steps  # a trainer that prints its own MFU (nanoGPT, torchtitan)
        if len(t) and t.has("mfu_pct"):
            v = t["mfu_pct"][t.present("mfu_pct") & np.isfinite(t["mfu_pct"])]
            return float(np.median(v[1:] if len(v) > 2 else v)) if len(v) else None
        return None
    return 100.0 * f * tps / (n * peak * 1e12)


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def _why_slow(g: dict, per: list[dict]) -> list[str]:
    """What in the samples can make this GPU slower than its peers: throttling, heat, a narrow PCIe link, XIDs,
    another process on it."""
    why = []
    if g.get("throttle_reasons"):
        why.append("throttled: " + ", ".join(g["throttle_reasons"]))
    if g.get("temperature_max_c") is not None:
        why.append(f"up to {g['temperature_max_c']:.0f} °C")
    w, wmax = g.get("pcie_width"), g.get("pcie_max_width")
    others_w = [x.get("pcie_width") for x in per if x is not g and x.get("pcie_width")]
    if w and ((wmax and w < wmax) or (others_w and w < _median(others_w))):
        why.append(f"PCIe link x{w}" + (f" of x{wmax}" if wmax else "") + (f" (the others x{_median(others_w):.0f})" if others_w else ""))
    if g.get("xid_codes"):
        why.append("XID " + ", ".join(map(str, g["xid_codes"])))
    others_p = [x.get("procs_max") for x in per if x is not g and x.get("procs_max") is not None]
    if g.get("procs_max") is not None and others_p and g["procs_max"] > max(others_p):
        why.append(f"{g['procs_max']} processes on it (the others {max(others_p)}): another job shares it")
    return why


def stragglers_of(samples: dict | None, min_slowdown: float = 1.1) -> list[dict]:
    """GPUs that run slower than the others of the job, from NVML samples (one home: features and analyze's report).

    In data-parallel training every collective waits for the slowest GPU, so the slow one is either clocked
    lower than the others (thermal or power throttling, a lower clock cap: median SM clock of the others ÷
    its own) or, at the same clock, busier than the others while they idle waiting for it (a narrow PCIe
    link, XID errors, another process on it: its utilisation ÷ the others' median).  `slowdown` is the
    larger ratio, a straggler when it reaches `min_slowdown`.  The evidence names the ratio and what the
    samples show about the cause.  Each entry: {gpu, rank, node, slowdown, evidence}.
    """
    per = [g for g in (samples or {}).get("per_gpu") or [] if g.get("sm_clock_mean_mhz") or g.get("util_mean_pct")]
    if len(per) < 2:
        return []
    out = []
    for g in per:
        others = [x for x in per if x is not g]
        clocks = [x["sm_clock_mean_mhz"] for x in others if x.get("sm_clock_mean_mhz")]
        utils = [x["util_mean_pct"] for x in others if x.get("util_mean_pct")]
        by_clock = _median(clocks) / g["sm_clock_mean_mhz"] if clocks and g.get("sm_clock_mean_mhz") else None
        by_util = g["util_mean_pct"] / _median(utils) if utils and g.get("util_mean_pct") else None
        ratio = max(r for r in (by_clock, by_util, 1.0) if r is not None)
        if ratio < min_slowdown:
            continue
        if by_clock is not None and by_clock >= (by_util or 0):
            first = f"SM clock {g['sm_clock_mean_mhz']:.0f} MHz against {_median(clocks):.0f} on the others"
        else:
            first = (f"busy {g['util_mean_pct']:.0f}% of the time while the others are {_median(utils):.0f}% busy "
                     "(they wait for it)")
        out.append({"gpu": g["index"], "rank": None, "node": None, "slowdown": round(ratio, 3),
                    "evidence": "; ".join([first] + _why_slow(g, per))})
    return sorted(out, key=lambda s: -s["slowdown"])


@feature("straggler_slowdown", "ratio",
         "How much slower the slowest GPU runs than the job's others, from NVML samples: the larger of the others' "
         "median SM clock ÷ its own and its utilisation ÷ the others' median (they wait for it); None with fewer "
         "than two GPUs sampled.", FAMILY)
def _straggler(ctx: Ctx):
    per = [g for g in (ctx.samples or {}).get("per_gpu") or [] if g.get("sm_clock_mean_mhz")]
    if len(per) < 2:
        return None
    s = stragglers_of(ctx.samples, min_slowdown=1.0)
    return s[0]["slowdown"] if s else 1.0


@feature("straggler_gpu", "index", "NVML index of the slowest GPU (see straggler_slowdown).", FAMILY)
def _straggler_gpu(ctx: Ctx):
    s = stragglers_of(ctx.samples, min_slowdown=1.0)
    return s[0]["gpu"] if s else None


@feature("straggler_evidence", "text", "Why the slowest GPU is slow: its clock or utilisation against the others', "
         "throttle reasons, temperature, a narrow PCIe link, XID errors, another process on it.", FAMILY)
def _straggler_why(ctx: Ctx):
    s = stragglers_of(ctx.samples, min_slowdown=1.0)
    return s[0]["evidence"] if s else None
