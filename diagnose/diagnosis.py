"""Findings -> a Diagnosis: the primary verdict, secondary findings, skipped rules.

Contract: `build_diagnosis(findings, skipped, features, run) -> Diagnosis`.
The primary finding is the most severe (error > warning > info), then the
highest rule priority; `info` findings never become the primary verdict.  With
no warning/error finding the verdict is `healthy` when training steps were
logged (with throughput and MFU when computable; weak from one or two rows), else `unknown` (naming an error a
logger printed that nothing explains, when there is one).
Remedies are first checked against the run's effective values (diagnose.remedies:
an op the run already satisfies is `already`, one the text cannot decide `unknown`);
then merged: the first finding to touch a flag or env var wins and the later
conflicting op is reported in `dropped` (ops already in place take no part).  Remedies are
put in the dialect of the trainer that printed the text (`in_trainer_dialect`).
The verdict carries a confidence: certain (the category's own signature), probable
(inferred, or an excerpt read as far as it goes), weak (thin evidence).
"""
from __future__ import annotations

import math
import re
from typing import Any, Literal

from pydantic import BaseModel, Field

from diagnose.engine import SEVERITY_RANK as _SEV  # noqa: E402
from diagnose.engine import Finding, RemedyOp, Skipped
from diagnose.features.registry import Features
from diagnose.models import Run
from diagnose.parse.events import ORDINARY_KINDS, WARNING_KINDS


class Primary(BaseModel):
    category: str
    rule: str | None
    severity: str
    summary: str
    confidence: Literal["certain", "probable", "weak"] = "certain"
    missing: str | None = None  # what the text lacks for a surer verdict


class Dropped(BaseModel):
    rule: str
    op: RemedyOp
    reason: str


class Diagnosis(BaseModel):
    primary: Primary
    culprit: dict[str, Any] | None = None  # the rank that failed first (diagnose.culprit), when several ranks failed
    consequences: list[dict[str, Any]] = Field(default_factory=list)  # what the other ranks did because of it
    stragglers: list[dict[str, Any]] = Field(default_factory=list)  # GPUs slower than the others (NVML samples)
    ranks: list[dict[str, Any]] = Field(default_factory=list)  # one row per rank the text names (culprit.rank_table)
    findings: list[Finding] = Field(default_factory=list)
    skipped: list[Skipped] = Field(default_factory=list)
    dropped: list[Dropped] = Field(default_factory=list)
    features: dict[str, Any] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)


def remedy_target(op: RemedyOp) -> str:
    """What an op changes ('flag:NAME' / 'env:NAME'): two ops on one target conflict."""
    if op.op == "set_env":
        return "env:" + (op.env or "")
    if op.op == "halve_batch_keep_global":
        return "flag:per_device_train_batch_size"
    return "flag:" + (op.flag or "")


def merge_remedies(findings: list[Finding]) -> list[Dropped]:
    """Keep the first op per target (findings are ranked); drop later conflicting ones."""
    taken: dict[str, tuple[str, RemedyOp]] = {}
    dropped: list[Dropped] = []
    for f in findings:
        for rem in f.remedies:
            if rem.effect == "advice":
                continue
            for op in rem.ops:
                if op.status == "already":
                    continue
                key = remedy_target(op)
                if key in taken:
                    prev_rule, prev = taken[key]
                    if prev.op != op.op or prev.value != op.value:
                        dropped.append(Dropped(rule=f.rule, op=op, reason=f"conflicts with {prev_rule}"))
                else:
                    taken[key] = (f.rule, op)
    return dropped


def healthy_summary(feats: dict[str, Any]) -> str:
    parts = []
    if feats.get("samples_per_s") is not None:
        parts.append(f"{feats['samples_per_s']:.3g} samples/s")
    if feats.get("tokens_per_s") is not None:
        parts.append(f"{feats['tokens_per_s']:.4g} tokens/s")
    if feats.get("step_time_median_s") is not None:
        parts.append(f"{feats['step_time_median_s']:.3g} s/step (median)")
    if feats.get("mfu_pct") is not None:
        parts.append(f"MFU ≈ {feats['mfu_pct']:.1f}%")
    if feats.get("memory_frac") is not None:
        parts.append(f"memory {100 * feats['memory_frac']:.0f}% of capacity")
    tail = ": " + ", ".join(parts) if parts else ""
    return "No problem found; training runs steadily" + tail + "."


# transformers.TrainingArguments fields: the same flag in ms-swift, HF Trainer scripts, LLaMA-Factory and TRL
HF_TRAINING_ARGS = frozenset({
    "per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps", "gradient_checkpointing",
    "learning_rate", "warmup_ratio", "warmup_steps", "weight_decay", "max_grad_norm", "num_train_epochs", "max_steps",
    "lr_scheduler_type", "logging_steps", "save_steps", "eval_steps", "save_strategy", "eval_strategy", "bf16", "fp16",
    "dataloader_num_workers", "dataloader_persistent_workers", "dataloader_prefetch_factor", "dataloader_pin_memory",
    "logging_nan_inf_filter", "ddp_timeout", "torch_compile", "optim", "resume_from_checkpoint", "report_to",
    "deepspeed", "fsdp", "group_by_length", "seed",
})
_SWIFT = ("ms-swift", "ms-swift-megatron")


def in_trainer_dialect(findings: list[Finding], trainer: str) -> list[Finding]:
    """Remedies in the flags of the trainer that printed the text, else as advice.

    ms-swift's flags stay flags for ms-swift logs (and for text whose trainer is
    unknown).  For HF Trainer, LLaMA-Factory and TRL, a flag that is a
    TrainingArguments field is theirs too; any other flag operation (ms-swift's own
    concepts) becomes advice that names the ms-swift flag, since the user's script
    cannot take it as is.
    """
    if trainer in _SWIFT or trainer == "unknown":
        return findings
    out = []
    for f in findings:
        rems = []
        for r in f.remedies:
            flags = [op.flag for op in r.ops if op.op != "set_env"]
            if r.effect == "advice" or all(fl in HF_TRAINING_ARGS for fl in flags if fl):
                rems.append(r)
                continue
            said = ", ".join(f"--{op.flag} {op.value}" if op.value is not None else f"--{op.flag}"
                             for op in r.ops if op.flag)
            note = f"ms-swift's flag: {said}; {trainer} has no flag of that name - use its equivalent setting"
            rems.append(r.model_copy(update={"effect": "advice", "ops": [], "note": (r.note + "; " if r.note else "") + note}))
        out.append(f.model_copy(update={"remedies": rems}))
    return out


def build_diagnosis(findings: list[Finding], skipped: list[Skipped], features: Features, run: Run) -> Diagnosis:
    from diagnose.remedies import resolve_findings

    findings = in_trainer_dialect(resolve_findings(findings, features), run.trainer)
    ranked = sorted(findings, key=lambda f: (-_SEV[f.severity], -f.priority, f.rule))
    serious = [f for f in ranked if f.severity in ("error", "warning")]

    def lead(f: Finding) -> None:
        nonlocal serious, ranked
        serious = [f] + [x for x in serious if x is not f]
        ranked = [f] + [x for x in ranked if x is not f]

    if serious and serious[0].defers:
        # a finding that names no category (a traceback cut before its exception line says only that something was
        # raised) steps back behind one that says what (fp16 overflows down to the floor, a shell 'Killed', a stall)
        known = next((f for f in serious[1:] if f.category not in ("unknown", "healthy")), None)
        if known is not None:
            lead(known)
    if serious and serious[0].confidence == "weak":
        # a weak lean (a cut traceback's frames) leads only where nothing surer says the same category
        surer = next((f for f in serious[1:] if f.category == serious[0].category and f.confidence != "weak"), None)
        if surer is not None:
            lead(surer)
    feats = features.values
    if serious:
        p = serious[0]
        primary = Primary(category=p.category, rule=p.rule, severity=p.severity, summary=p.summary,
                          confidence=p.confidence, missing=p.missing)
    elif len(run.steps):
        primary = _healthy(run, feats)
    elif any(f.rule == "MB004" for f in ranked):
        # a snapshot of busy GPUs with full memory and nothing wrong beside it: the job is working
        primary = Primary(category="healthy", rule=None, severity="info", confidence="probable",
                          summary="The GPUs are busy and their memory is full: PyTorch's caching allocator keeps freed "
                                  "memory reserved; nothing in the text says the job is in trouble.",
                          missing="no training step rows: only the GPU snapshot shows the job at work")
    elif (logged := [e for e in run.events if e.kind == "logged_error"]):
        e = logged[-1]
        primary = Primary(category="unknown", rule=None, severity="info", confidence="weak",
                          summary=f"An error was logged that no rule explains (line {e.line}): "
                                  f"{str(e.detail.get('message') or e.text)[:160]}",
                          missing="what the error means: no signature and no entry of the exception table reads its "
                                  "message, and no traceback shows where it came from")
    elif (warned := _only_warnings(run)):
        primary = Primary(category="healthy", rule=None, severity="info", confidence="weak",
                          summary=f"Only warnings in the text ({len(warned)}), and a warning does not stop a run: "
                                  + re.sub(r"^.*?(\w*Warning: )", r"\1", warned[0].text.strip())[:140],
                          missing="no training step rows and no error: whether the run trains well is not in the text")
    elif not len(run.steps) and not run.events and (prep := run.unfinished_preprocess()):
        # the last thing the text shows is a preprocessing pass that had not finished, and nothing else
        primary = Primary(category="data_loading", rule=None, severity="info", confidence="weak",
                          summary=f"The text ends inside dataset preprocessing ({prep}) and shows nothing after it: "
                                  "a run that stops or waits here is held by its data preparation.",
                          missing="whether the pass finished: no later line, no training step, no error")
    elif _at_work(run, feats):
        primary = Primary(category="healthy", rule=None, severity="info", confidence="weak",
                          summary="Nothing wrong in the text, and it shows the job at work (" + _at_work(run, feats)
                                  + ").",
                          missing="no training step rows: speed and loss cannot be judged")
    else:
        what = ("no training steps and no known error signature" if run.total_lines or run.sources
                else "nothing")
        primary = Primary(category="unknown", rule=None, severity="info", confidence="weak",
                          summary=f"Readable, but {what} was found in the input.",
                          missing="no training step rows and no error message in the text")
    from diagnose.culprit import find_culprit, rank_table

    culprit, consequences = find_culprit(run, primary.category)
    cc = (culprit or {}).get("category")
    if cc and cc != primary.category and (cc != "unknown" or primary.category == "nccl"):
        # the culprit's own failure is the diagnosis; the other ranks' errors are its consequences
        own = next((f for f in serious if f.category == cc), None)
        if own is not None:
            primary = Primary(category=own.category, rule=own.rule, severity=own.severity, summary=own.summary,
                              confidence=own.confidence, missing=own.missing)
            ranked = [own] + [f for f in ranked if f is not own]
    return Diagnosis(primary=primary, culprit=culprit, consequences=consequences, ranks=rank_table(run),
                     findings=ranked, skipped=skipped,
                     dropped=merge_remedies(ranked), features=feats, notes=list(features.notes) + list(run.notes))


_NOTICES = (("forked", "tokenizers turning its threads off in forked workers"),
            ("gradient checkpointing", "use_cache turned off under gradient checkpointing"),
            ("use_reentrant", "torch checkpoint's use_reentrant notice"),
            ("loss_type=None", "transformers' default-loss notice"),
            ("tried to get lr value", "the scheduler not stepped yet while the fp16 loss scale settles"),
            ("Grad strides", "DDP's grad-strides notice"),
            ("find_unused_parameters", "DDP's find_unused_parameters notice"),
            ("Flash Attention", "transformers' Flash Attention dtype notice"),
            ("autotuning", "torch.compile's autotuning dropping a kernel candidate"),
            ("were not used when initializing", "transformers' notice of checkpoint weights left unused"),
            ("This IS expected if", "transformers' notice of checkpoint weights left unused"),
            ("newly initialized", "transformers' notice of a newly initialized head"),
            ("Not an error", "a notice that says it is not an error"),
            ("Ignoring this choice", "torch.compile's autotuning dropping a kernel candidate"))


# a warning that speaks of one of the problems swiftdoc diagnoses is not read as ordinary output
_TROUBLE = re.compile(r"(?i)\bnan\b|\binf\b|overflow|out of memory|\boom\b|timed? ?out|\bnccl\b|deadlock|\bhang")


def _only_warnings(run: Run) -> list:
    """The warnings (Python's and loggers') of a text whose every event is ordinary output, none of them speaking of a
    problem swiftdoc diagnoses (nan, overflow, out of memory, a timeout, NCCL, a hang); [] otherwise."""
    warned = [e for e in run.events if e.kind in WARNING_KINDS]
    if not warned or not all(e.kind in ORDINARY_KINDS for e in run.events):
        return []
    return [] if any(_TROUBLE.search(e.text) for e in warned) else warned


def _at_work(run: Run, feats: dict[str, Any]) -> str:
    """Signs in a text without step rows that the job is doing its work: finished preprocessing, Megatron's index
    maps built in a time DL008 does not call slow, only warnings that normal runs print, the fp16 loss scale
    settling as it does at the start, the trainer's training-loop banner, evaluation rows, checkpoints saved ('' when
    there are none)."""
    signs = []
    if feats.get("index_build_s") is not None:
        signs.append(f"the dataset index maps built, the longest in {feats['index_build_s']:.3g} s")
    done = [r for r in run.preprocess if r.get("total") and r["done"] >= r["total"]]
    if done and not [r for r in run.preprocess if r.get("total") and r["done"] < r["total"]]:
        signs.append(f"{len(done)} preprocessing pass(es) finished")
    harmless = [e for e in run.events if e.kind == "harmless_warning"]
    if harmless and all(e.kind in ORDINARY_KINDS for e in run.events):
        said = {name for e in harmless for needle, name in _NOTICES if needle in e.text}
        signs.append("only notices that normal runs print: " + ", ".join(sorted(said)))
    if run.loss_scales and min(r["scale"] for r in run.loss_scales) > 128:
        signs.append("the fp16 loss scale coming down from its start, as it does in the first steps")
    if run.model_loaded_line is not None and not run.steps and not run.events:
        signs.append("the model's checkpoint shards loaded")
    if run.loop_start_line is not None and not run.steps:
        signs.append("the trainer's own line that the training loop began")
    if run.evals:
        signs.append(f"{len(run.evals)} evaluation row(s)")
    if run.checkpoints:
        signs.append(f"{len(run.checkpoints)} checkpoint(s) saved")
    if run.ended and not run.summary:
        signs.append("the trainer's own end-of-run line")
    summary = run.summary or {}
    loss = summary.get("train_loss")
    if summary and (loss is None or isinstance(loss, (int, float)) and math.isfinite(loss)):
        rt = summary.get("train_runtime")
        said = ([f"{rt:.0f} s"] if isinstance(rt, (int, float)) else []) + ([f"train_loss {loss:.4g}"] if loss is not None else [])
        signs.append("the trainer's final summary" + (f" ({', '.join(said)})" if said else ""))
    return "; ".join(signs)


def _healthy(run: Run, feats: dict[str, Any]) -> Primary:
    """No problem found: certain for a whole run, probable for an excerpt (it only shows the part given), weak for an
    excerpt of one or two step rows."""
    if not feats.get("excerpt"):
        return Primary(category="healthy", rule=None, severity="info", summary=healthy_summary(feats),
                       confidence="certain" if run.ended else "probable")
    t = run.steps
    steps = [int(s) for s in t["step"] if s == s]
    span = f"steps {steps[0]}-{steps[-1]}" if steps else f"{len(t)} logged rows"
    parts = [span]
    few = len(t) < 3  # one or two rows: nothing to say about speed or trend, only that steps ran
    if feats.get("step_time_median_s") is not None and not few:
        cv = feats.get("step_time_cv")
        steady = "steady speed" if cv is None or cv < 0.25 else "uneven speed"
        parts.append(f"{steady} ({feats['step_time_median_s']:.3g} s/step)")
    if feats.get("samples_per_s") is not None:
        parts.append(f"{feats['samples_per_s']:.3g} samples/s")
    mem = t["memory_gib"][t.present("memory_gib")] if t.has("memory_gib") else []
    if len(mem) >= 2:
        flat = max(mem) - min(mem) <= 0.05 * max(max(mem), 1e-9)
        parts.append(("memory flat at " if flat else "memory ") + f"{max(mem):.4g} GiB")
    return Primary(category="healthy", rule=None, severity="info", confidence="weak" if few else "probable",
                   summary="Healthy as far as the excerpt goes: " + ", ".join(parts) + ".",
                   missing=f"only {len(t)} step row(s) and neither the start nor the end of the run" if few else
                   "the excerpt shows neither the start nor the end of the run")
