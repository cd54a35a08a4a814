"""Plan a patch: remedies, explicit changes and lint fixes -> one PatchPlan in the job's ms-swift dialect.

Contract: `plan_patch(argv, env, remedies, version, ...) -> PatchPlan` is pure
(it reads the checked-in flag tables, nothing else).
- `remedies`: a `Diagnosis`, a list of `Finding`s or of `Request`s (explicit
  `--set`/`--env` changes).  Findings are merged the way
  `diagnosis.merge_remedies` does (the first finding to touch a flag or env var
  wins; a later conflicting op is reported in `dropped`); `advice` remedies are
  listed, never applied; with `only_safe` only `safe` ones are applied.
- Concepts (`dataloader_num_workers`, `attn_impl`, `tuner_type` ...) are spelled
  for `version`/`command` (`--attn_impl flash_attn` or `--use_flash_attn true`,
  `--torch_dtype bfloat16` or `--dtype bf16`, `micro_batch_size` on Megatron);
  a concept the version has no flag for is reported and skipped.
- Flags the version rejects are fixed first (`fix="error"`; `"warning"` also
  fixes prefix-only matches, deprecated names and combinations ms-swift
  ignores; `"none"` fixes nothing), so every argv this returns passes the flag
  table's checks, except for problems it names.
- Ops: `set`; `at_least`/`at_most` (no change when the current value -- from
  the argv, else `effective`, else the version default -- already satisfies it);
  `remove`; `set_env`; `halve_batch_keep_global` (batch -> max(1, b//2) of the
  logged batch in `effective`, else the argv's; accumulation scaled so the
  global batch stays the same unless `keep_global=False`; Megatron halves
  micro_batch_size and keeps global_batch_size).  Explicit lower batch sizes
  also scale the accumulation.  When accumulation is not given, ms-swift's
  own default `ceil(16 / batch / world_size)` is assumed and said so.
- Labels are honest: a change is `safe` only for speed-only flags/env vars
  (workers, attention kernel, env vars such as NCCL_*, pin memory ...); anything
  else is `changes-training` with a note saying what changes; the stricter of
  the rule's label and this classification wins.
- Values are checked with the flag table (type, choices) and against
  `cpu_cores` for worker counts; an invalid explicit value raises `InputError`
  (naming the line when `sources` are given); an invalid remedy value becomes a
  problem and is skipped.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Sequence

from diagnose.diagnosis import Diagnosis, Dropped, merge_remedies, remedy_target
from diagnose.engine import Finding, RemedyOp
from diagnose.errors import InputError
from diagnose.flags.table import normalize_command, string_to_bool
from diagnose.parse.values import to_number
from diagnose.patch.argv import Occurrence, occurrence_value, resolve_occurrences, split_argv
from diagnose.patch.checks import TORCHRUN_ENV, check_combos, check_flags, spell_for
from diagnose.patch.models import Advice, Change, PatchPlan, Problem, Request, stricter
from diagnose.remedies import same_value, satisfies

SAFE_FLAGS = {"dataloader_num_workers", "num_workers", "dataset_num_proc", "preprocess_num_proc", "attn_impl",
              "use_flash_attn", "attention_backend", "dataloader_pin_memory", "dataloader_persistent_workers",
              "dataloader_prefetch_factor", "lazy_tokenize", "load_from_cache_file", "ddp_timeout", "use_liger_kernel",
              "use_liger", "gradient_checkpointing", "logging_steps", "report_to", "deepspeed", "fsdp", "device_map",
              "packing_num_proc", "save_total_limit", "check_model", "torch_compile", "logging_nan_inf_filter"}
SAFE_ENV = ("NCCL_", "TORCH_NCCL_", "PYTORCH_CUDA_ALLOC_CONF", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
            "TOKENIZERS_PARALLELISM", "CUDA_DEVICE_MAX_CONNECTIONS", "HF_HUB_OFFLINE", "MODELSCOPE_CACHE",
            "HF_DATASETS_CACHE", "PACKING_CACHE", "LOG_LEVEL", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK")
TRAINING_NOTES = {
    "max_length": "rows longer than {new} tokens are {trunc}",
    "packing": "samples are packed into full rows: fewer, fuller steps per epoch (the step count changes)",
    "padding_free": "batches are concatenated without padding: memory per step varies with the rows drawn",
    "torch_dtype": "weights and compute in {new} instead of {old}",
    "learning_rate": "peak learning rate {old} -> {new}",
    "lr": "peak learning rate {old} -> {new}",
    "warmup_ratio": "learning rate warms up over the first {pct} of the steps",
    "max_grad_norm": "gradients are clipped to norm {new}",
    "max_steps": "training stops after {new} optimizer steps",
    "train_iters": "training stops after {new} iterations",
    "streaming": "{streaming}",
    "quant_method": "the base model is quantized ({new}): less memory, slower steps, slightly different numerics",
    "quant_bits": "the base model is quantized to {new} bits",
    "split_dataset_ratio": "{pct} of the data is held out for evaluation",
    "truncation_strategy": "over-length rows are handled with '{new}'",
    "group_by_length": "batches group rows of similar length: a different sample order",
    "resume_from_checkpoint": "training resumes from {new}",
    "NPROC_PER_NODE": "{new} processes per node: the global batch grows with them unless accumulation is lowered",
    "MAX_PIXELS": "images are downscaled to at most {new} pixels: fewer image tokens, less detail",
}


def classify(name: str, is_env: bool = False) -> str:
    if is_env:
        return "safe" if name.startswith(SAFE_ENV) else "changes-training"
    return "safe" if name in SAFE_FLAGS else "changes-training"


def fmt_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        if v.is_integer() and abs(v) < 1e15:
            return str(int(v))
        if 0 < abs(v) < 1e-3:  # learning rates read as 1e-4, the way people write them
            mant, _, exp = f"{v:.6e}".partition("e")
            mant = mant.rstrip("0").rstrip(".")
            return f"{mant}e{int(exp)}"
        return f"{v:.12g}"
    if isinstance(v, (list, tuple)):
        return " ".join(fmt_value(x) for x in v)
    return str(v)


def _num(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        n = to_number(v)
        return float(n) if n is not None else None
    return None


# ----------------------------------------------------------------------------- requests
def requests_from(remedies: Diagnosis | Sequence[Finding] | Sequence[Request] | None
                  ) -> tuple[list[Request], list[Advice], list[Dropped] | None]:
    if remedies is None:
        return [], [], None
    findings: list[Finding]
    dropped: list[Dropped] | None = None
    if isinstance(remedies, Diagnosis):
        findings = list(remedies.findings)
        dropped = list(remedies.dropped)
    else:
        items = list(remedies)
        if all(isinstance(x, Request) for x in items):
            return list(items), [], None  # type: ignore[arg-type]
        findings = [x for x in items if isinstance(x, Finding)]
        dropped = merge_remedies(findings)
    reqs: list[Request] = []
    advice: list[Advice] = []
    for f in findings:
        for rem in f.remedies:
            if rem.effect == "advice":
                ops = " ".join(t for t in (_op_text(o) for o in rem.ops) if t not in (rem.note or ""))
                advice.append(Advice(rule=f.rule, title=rem.title, note=" ".join(x for x in (rem.note, ops) if x) or None))
                continue
            for op in rem.ops:
                reqs.append(Request(op=op, effect=rem.effect, rule=f.rule, title=rem.title, note=rem.note))
    return reqs, advice, dropped


def _op_text(op: RemedyOp) -> str:
    if op.op == "set_env":
        return f"{op.env}={fmt_value(op.value)}"
    if op.op == "halve_batch_keep_global":
        return "(halve the batch, keep the global batch)"
    return f"--{op.flag}" + ("" if op.value is None else f" {fmt_value(op.value)}")


def _merge(reqs: list[Request], dropped: list[Dropped] | None) -> tuple[list[tuple[Request, list[str]]], list[Dropped]]:
    """First request per target wins; same op/value from a later rule is merged; conflicts are dropped."""
    kept: dict[str, tuple[Request, list[str]]] = {}
    order: list[str] = []
    own_dropped: list[Dropped] = []
    for r in reqs:
        key = remedy_target(r.op)
        if key in kept:
            prev, rules = kept[key]
            if prev.op.op == r.op.op and prev.op.value == r.op.value:
                if r.rule not in rules:
                    rules.append(r.rule)
            else:
                own_dropped.append(Dropped(rule=r.rule, op=r.op, reason=f"conflicts with {prev.rule}"))
            continue
        kept[key] = (r, [r.rule])
        order.append(key)
    return [kept[k] for k in order], (dropped if dropped is not None else own_dropped)


def parse_assignments(items: Iterable[str], kind: str) -> list[Request]:
    """`--set flag=value` / `--env VAR=value` / `--remove flag` from the command line."""
    out: list[Request] = []
    for raw in items:
        if kind == "remove":
            name = raw.strip().lstrip("-")
            if not name:
                raise InputError("--remove needs a flag name")
            out.append(Request(op=RemedyOp(op="remove", flag=name), effect="changes-training", rule="explicit",
                               title=f"remove --{name}"))
            continue
        name, eq, value = raw.partition("=")
        name = name.strip()
        if not eq or not name:
            raise InputError(f"--{kind} {raw!r}: expected NAME=VALUE", hint=f"e.g. --{kind} "
                             + ("dataloader_num_workers=8" if kind == "set" else "NCCL_P2P_DISABLE=1"))
        if kind == "set":
            name = name.lstrip("-")
            out.append(Request(op=RemedyOp(op="set", flag=name, value=value), effect="safe", rule="explicit",
                               title=f"--{name} {value}"))
        else:
            if not (name[0].isalpha() or name[0] == "_") or not all(c.isalnum() or c == "_" for c in name):
                raise InputError(f"--env {raw!r}: {name!r} is not an environment variable name")
            out.append(Request(op=RemedyOp(op="set_env", env=name, value=value), effect="safe", rule="explicit",
                               title=f"{name}={value}"))
    return out


def _lint_title(f: Any, version: str) -> str:
    if f.problem_code in ("renamed", "unknown", "ambiguous", "torchrun"):
        return f"ms-swift {version} rejects {f.occ.flag}" if f.occ is not None else f"ms-swift {version} spelling"
    if f.problem_code == "value":
        return f"a value ms-swift {version} accepts"
    if f.problem_code == "prefix":
        return "full flag name instead of an abbreviation"
    if f.problem_code == "deprecated":
        return "current spelling"
    return f.fix or f"fix for ms-swift {version}"


def _name(flag_token: str) -> str:
    return flag_token.split("=", 1)[0].lstrip("-")


def _spellings(field: str, table: Any, command: str) -> set[str]:
    from diagnose.flags.concepts import CONCEPT_ALIASES, CONCEPTS

    concept = CONCEPT_ALIASES.get(field, field)
    return {n for n in CONCEPTS.get(concept, []) if table.has(command, n)}


# ----------------------------------------------------------------------------- argv state
class _State:
    """The argv being patched: original occurrences, their replacements, appended flags."""

    def __init__(self, argv: list[str], table: Any, command: str):
        self.orig = list(argv)
        self.table = table
        self.cmd = command
        self.positional, self.occs = split_argv(self.orig)
        resolve_occurrences(self.occs, table, command)
        self.repl: dict[int, list[str]] = {}  # occurrence number -> tokens
        self.added: list[list[str]] = []
        self.flag_at = {o.index: k for k, o in enumerate(self.occs)}
        self.value_at = {i for o in self.occs for i in o.value_indexes}

    def tokens(self) -> tuple[list[str], list[tuple[str, int]]]:
        out: list[str] = []
        origin: list[tuple[str, int]] = []
        for i, tok in enumerate(self.orig):
            if i in self.flag_at:
                k = self.flag_at[i]
                toks = self.repl.get(k, self.occs[k].tokens)
                out.extend(toks)
                origin.extend(("occ", k) for _ in toks)
            elif i not in self.value_at:
                out.append(tok)
                origin.append(("pos", i))
        for k, toks in enumerate(self.added):
            out.extend(toks)
            origin.extend(("add", k) for _ in toks)
        return out, origin

    def current(self) -> tuple[list[Occurrence], list[tuple[str, int]]]:
        toks, origin = self.tokens()
        _, occs = split_argv(toks)
        resolve_occurrences(occs, self.table, self.cmd)
        return occs, [origin[o.index] for o in occs]

    def find(self, field: str) -> tuple[Occurrence, tuple[str, int]] | None:
        """Last occurrence of `field`, else of another spelling of the same concept that this version also takes
        (2.x `--batch_size` for per_device_train_batch_size)."""
        occs, where = self.current()
        names = {field} | _spellings(field, self.table, self.cmd)
        hit = alt = None
        for o, w in zip(occs, where):
            if o.field == field:
                hit = (o, w)
            elif o.field in names:
                alt = (o, w)
        return hit or alt

    def last_occs(self) -> dict[str, Occurrence]:
        occs, _ = self.current()
        out: dict[str, Occurrence] = {}
        for o in occs:
            if o.field:
                out[o.field] = o
        return out

    def values(self) -> dict[str, Any]:
        occs, _ = self.current()
        out: dict[str, Any] = {}
        specs = self.table.specs(self.cmd)
        for o in occs:
            if o.field:
                out[o.field] = occurrence_value(o, specs.get(o.field))
        return out

    def put(self, where: tuple[str, int] | None, tokens: list[str]) -> None:
        if where is None:
            self.added.append(tokens)
        elif where[0] == "occ":
            self.repl[where[1]] = tokens
        elif where[0] == "add":
            self.added[where[1]] = tokens

    def remove_field(self, field: str) -> list[tuple[Occurrence, tuple[str, int]]]:
        occs, where = self.current()
        names = {field} | _spellings(field, self.table, self.cmd)
        gone = [(o, w) for o, w in zip(occs, where) if o.field in names]
        for _, w in gone:
            self.put(w, [])
        return gone


# ----------------------------------------------------------------------------- planning
class _Planner:
    def __init__(self, argv: list[str], env: dict[str, str], table: Any, command: str, *, effective: dict[str, Any],
                 cpu_cores: int | None, world_size: int | None, only_safe: bool, keep_global: bool, fix: str,
                 launcher: str, sources: list[tuple[int | None, str | None]] | None, strict: bool):
        self.table = table
        self.cmd = command
        self.v = table.version
        self.state = _State(argv, table, command)
        self.env = dict(env)
        self.env0 = dict(env)
        self.effective = effective
        self.cpu_cores = cpu_cores
        self.world_size = world_size
        self.only_safe = only_safe
        self.keep_global = keep_global
        self.fix = fix
        self.launcher = launcher
        self.sources = sources
        self.strict = strict  # explicit requests: invalid values raise
        self.plan = PatchPlan(version=self.v, command=command, old_argv=list(argv))
        self.changes_by_occ: dict[tuple[str, int], Change] = {}
        self._explicit: list[Request] = []
        self.env_lines: dict[str, int] = {}
        self.fix_effects: set[str] = {"safe", "changes-training"}
        self.fix_codes: Callable[[str], bool] | None = None

    # -- helpers
    def line_of(self, where: tuple[str, int] | None) -> tuple[int | None, str | None]:
        if where is None or where[0] != "occ" or self.sources is None:
            return None, None
        idx = self.state.occs[where[1]].index
        return self.sources[idx] if idx < len(self.sources) else (None, None)

    def occ_line(self, o: Occurrence | None) -> tuple[int | None, str | None]:
        if o is None or self.sources is None:
            return None, None
        if o not in self.state.occs:  # an occurrence of the patched argv: map it back to the original one
            occs, where = self.state.current()
            for oc, w in zip(occs, where):
                if oc.index == o.index and w[0] == "occ":
                    return self.line_of(w)
            return None, None
        return self.sources[o.index] if o.index < len(self.sources) else (None, None)

    def problem(self, message: str, *, severity: str = "error", flag: str | None = None, line: int | None = None,
                code: str = "flag", fix: str | None = None, file: str | None = None, fixed: bool = False,
                fix_effect: str | None = None) -> None:
        p = Problem(line=line, flag=flag, message=message, severity=severity, code=code, fix=fix, file=file,
                    fixed=fixed, fix_effect=fix_effect)
        if not any(q.message == p.message and q.line == p.line for q in self.plan.problems):
            self.plan.problems.append(p)

    def record(self, ch: Change, where: tuple[str, int] | None) -> None:
        """Add a change; a second change to the same occurrence folds into the first (old value kept)."""
        if where is not None and where[0] == "occ" and where in self.changes_by_occ:
            first = self.changes_by_occ[where]
            first.new, first.tokens, first.flag = ch.new, ch.tokens, ch.flag
            first.effect = stricter(first.effect, ch.effect)
            for r in [ch.rule, *ch.rules]:
                if r not in first.rules:
                    first.rules.append(r)
            first.note = "; ".join(x for x in (first.note, ch.note) if x) or None
            return
        line, file = self.line_of(where)
        ch.line = ch.line if ch.line is not None else line
        ch.file = ch.file or file
        if where is not None and where[0] == "occ":
            ch.at = self.state.occs[where[1]].index
            self.changes_by_occ[where] = ch
        if not ch.rules:
            ch.rules = [ch.rule]
        self.plan.changes.append(ch)

    def effective_value(self, field: str, concept: str) -> Any:
        """The value the job runs with when the argv does not give it: the logged value, else the version's default
        (diagnose.effective, the one home for defaults)."""
        for k in (field, concept):
            if k in self.effective and self.effective[k] is not None:
                return self.effective[k]
        from diagnose.effective import EffectiveConfig

        vals = {k: v for k, v in self.state.values().items() if v is not None}
        cfg = EffectiveConfig(trainer="ms-swift", version=self.v, versions=[self.v], command=self.cmd,
                              world_size=self.world_size)
        from diagnose.effective import Known

        cfg.values = {k: Known(v, "argv", "the argv") for k, v in {**self.effective, **vals}.items() if v is not None}
        k = cfg.default(field) or cfg.default(concept)
        return None if k is None else k.value

    # -- lint fixes
    def apply_findings(self, findings: list, level: str) -> None:
        allowed = {"error"} if level == "error" else {"error", "warning"} if level == "warning" else set()
        for f in findings:
            if f.requests and not f.effect_set:
                f.effect = max((r.effect for r in f.requests), key=lambda e: e == "changes-training")
                f.effect_set = True
            line, file = self.occ_line(f.occ)
            if line is None and f.env_name and f.env_name in self.env_lines:
                line = self.env_lines[f.env_name]
            flag = f.occ.flag if f.occ is not None else None
            fixable = (f.tokens is not None or f.env or f.requests) and f.severity in allowed \
                and (f.effect in self.fix_effects) and (self.fix_codes is None or self.fix_codes(f.problem_code))
            self.problem(f.message, severity=f.severity, flag=flag, line=line, code=f.problem_code,
                         fix=f.fix if f.fix else None, file=file, fixed=bool(fixable),
                         fix_effect=f.effect if f.fix else None)
            if not fixable:
                continue
            if f.occ is not None and f.tokens is not None:
                where = self._where_of(f.occ)
                if where is None:
                    continue
                old = f.occ.value_text
                new_field = None
                if f.tokens:
                    r = self.table.resolve(self.cmd, f.tokens[0].split("=", 1)[0])
                    new_field = r.name if r.accepted else f.tokens[0].lstrip("-")
                self.state.put(where, list(f.tokens))
                new_val = " ".join(f.tokens[1:]) if f.tokens and "=" not in f.tokens[0] else \
                    (f.tokens[0].split("=", 1)[1] if f.tokens else None)
                renamed_flag = f.tokens and f.tokens[0].split("=", 1)[0] != f.occ.flag
                self.record(Change(flag=new_field or (f.occ.field or f.occ.flag.lstrip("-")),
                                   old=old if old is not None else "", new=new_val if f.tokens else None,
                                   old_flag=f.occ.flag if (renamed_flag or not f.tokens) else None,
                                   effect="safe", rule="lint", title=_lint_title(f, self.v),
                                   note=None, tokens=list(f.tokens), line=line, file=file), where)
            for name, val in f.env.items():
                self.set_env(Request(op=RemedyOp(op="set_env", env=name, value=val), effect="safe", rule="lint",
                                     title=f"{name} for the swift CLI"), [])
            for req in f.requests:
                self.apply_request(req, [req.rule])

    def _where_of(self, occ: Occurrence) -> tuple[str, int] | None:
        for k, o in enumerate(self.state.occs):
            if o.index == occ.index and k not in self.state.repl:
                return ("occ", k)
        # a re-split occurrence (after an earlier fix) -> locate by origin
        occs, where = self.state.current()
        for o, w in zip(occs, where):
            if o.flag == occ.flag and o.values == occ.values:
                return w
        return None

    # -- requests
    def apply_request(self, req: Request, rules: list[str]) -> None:
        op = req.op
        if req.effect == "advice":
            self.plan.advice.append(Advice(rule=req.rule, title=req.title, note=req.note))
            return
        if op.op == "set_env":
            self.set_env(req, rules)
            return
        if op.op == "halve_batch_keep_global":
            self.halve(req, rules)
            return
        concept = (op.flag or "").lstrip("-")
        from diagnose.flags.concepts import CONCEPT_ALIASES

        concept = CONCEPT_ALIASES.get(concept, concept)
        flag = spell_for(concept, self.table, self.cmd)
        if flag is None:
            r = self.table.resolve(self.cmd, "--" + concept)
            if r.status in ("exact", "prefix") and r.name != "help":
                flag = r.name
        if flag is None:
            msg = f"ms-swift {self.v} ({self.cmd.replace('_', ' ')}) has no flag for {concept}"
            if req.rule == "explicit" and self.strict:
                raise InputError(f"--{concept}: {msg}", hint="check the spelling, or pass --swift-version")
            self.problem(f"{req.rule}: {msg}; remedy '{req.title}' skipped", severity="info", flag=f"--{concept}",
                         code="unsupported")
            return
        # the probe's plugin and callback lists observe the run and change no training (tests/test_probe_swift.py:
        # the same loss curve with and without it); any other plugin may change anything
        effect = req.effect if req.rule == "probe" else stricter(req.effect, classify(flag))
        if self.only_safe and effect != "safe":
            self.plan.unchanged.append(f"{req.rule}: --{flag} not changed (--only-safe; this change is {effect})")
            return
        spec = self.table.specs(self.cmd).get(flag)
        hit = self.state.find(flag)
        occ, where = (hit if hit else (None, None))
        cur = occurrence_value(occ, spec) if occ is not None else None
        cur_src = "argv" if occ is not None else None
        if cur is None:
            cur = self.effective_value(flag, concept)
            logged = any(self.effective.get(k) is not None for k in (flag, concept))
            cur_src = ("logged" if logged else "default") if cur is not None else None
        if op.op == "remove":
            if occ is None:
                self.plan.unchanged.append(f"{req.rule}: --{flag} is not given")
                return
            gone = self.state.remove_field(flag)
            for o, w in gone:
                self.record(Change(flag=flag, old=o.value_text or "", new=None, old_flag=o.flag, effect=effect,
                                   rule=req.rule, rules=list(rules), title=req.title, note=req.note, tokens=[],
                                   concept=concept), w)
            return
        target = op.value
        if op.op in ("at_least", "at_most"):
            cn, tn = _num(cur), _num(target)
            if tn is None:
                self.problem(f"{req.rule}: {op.op} needs a number for --{flag} (got {target!r})", severity="warning",
                             flag=f"--{flag}", code="value")
                return
            if cn is not None and satisfies(op.op, tn, cn, concept):
                self.plan.unchanged.append(f"{req.rule}: --{flag} is {fmt_value(cur)} (want {op.op.replace('_', ' ')} "
                                           f"{fmt_value(target)})")
                return
        if self._satisfied(concept, flag, spec, cur, target) and op.op == "set":
            self.plan.unchanged.append(f"{req.rule}: --{flag} is already {fmt_value(cur)}")
            return
        values = self.render(concept, flag, spec, target)
        if values is None:  # not expressible in this version: omit the flag, the default applies
            if occ is not None:
                self.state.remove_field(flag)
                self.record(Change(flag=flag, old=occ.value_text or "", new=None, old_flag=occ.flag, effect=effect,
                                   rule=req.rule, rules=list(rules), title=req.title, tokens=[], concept=concept), where)
            return
        err = self.validate(flag, spec, values, concept)
        if err:
            line, _ = self.line_of(where)
            if req.rule == "explicit" and self.strict:
                at = f"line {line}: " if line else ""
                raise InputError(f"{at}--{flag} {' '.join(values)}: {err}", hint="nothing was written")
            self.problem(f"{req.rule}: --{flag} {' '.join(values)} would be rejected ({err}); skipped",
                         severity="warning", flag=f"--{flag}", line=line, code="value")
            return
        flag_tok = occ.flag if (occ is not None and occ.status == "exact" and not occ.negated) else f"--{flag}"
        tokens = [f"{flag_tok}={values[0]}"] if (occ is not None and occ.eq_form and len(values) == 1) else \
            [flag_tok, *values]
        new_text = " ".join(values)
        note = self.note_for(flag, concept, cur, new_text, req.note, effect)
        if op.op == "set" and concept in ("per_device_train_batch_size",) and not self.cmd.startswith("megatron") \
                and req.rule == "explicit":
            self.state.put(where, tokens)
            old = occ.value_text if occ is not None else None
            self.record(Change(flag=_name(flag_tok), old=old, new=new_text, effect=stricter(effect, "changes-training"),
                               rule=req.rule, rules=list(rules), title=req.title, tokens=tokens, concept=concept,
                               old_flag=occ.flag if occ is not None and occ.flag != flag_tok else None), where)
            self._keep_global_after(cur, target, req, rules)
            return
        self.state.put(where, tokens)
        old = (occ.value_text if occ.values else "true" if not occ.negated else "false") if occ is not None else None
        if occ is not None and occ.negated:
            old = ""
        ch = Change(flag=_name(flag_tok), old=old, new=new_text, effect=effect, rule=req.rule, rules=list(rules),
                    title=req.title,
                    note=note, tokens=tokens, concept=concept,
                    old_flag=occ.flag if occ is not None and occ.flag != flag_tok else None)
        if occ is None and cur_src is not None and fmt_value(cur) not in ("", "[]", "None"):
            was = f"ms-swift used {fmt_value(cur)}" if cur_src == "logged" else f"ms-swift's default: {fmt_value(cur)}"
            ch.note = "; ".join(x for x in (ch.note, was) if x)
        self.record(ch, where)

    def _satisfied(self, concept: str, flag: str, spec: Any, cur: Any, target: Any) -> bool:
        if cur is None:
            return False
        if spec is not None and spec.type == "bool" and not isinstance(target, bool):
            target = string_to_bool(str(target))
        if same_value(concept, cur, target):  # diagnose.remedies: the comparison analyze uses too
            return True
        rendered = self.render(concept, flag, spec, target)
        cur_r = self.render(concept, flag, spec, cur)
        return rendered is not None and rendered == cur_r

    def render(self, concept: str, flag: str, spec: Any, value: Any) -> list[str] | None:
        from diagnose.flags.concepts import CONCEPTS, spell_value

        if isinstance(value, list):
            return [fmt_value(x) for x in value]
        text = fmt_value(value)
        if concept in CONCEPTS and concept != flag:  # another version's vocabulary (attn_impl -> use_flash_attn true)
            sv = spell_value(concept, text, self.v, self.cmd)
            if sv is not None and sv[0] == flag:
                return None if sv[1] is None else [sv[1]]
        if spec is not None and spec.type == "bool":
            b = value if isinstance(value, bool) else string_to_bool(str(value))
            return [fmt_value(b if b is not None else value)]
        if concept in CONCEPTS:
            sv = spell_value(concept, text, self.v, self.cmd)
            if sv is not None and sv[0] == flag:
                return None if sv[1] is None else [sv[1]]
        if spec is not None and (spec.type == "list" or spec.nargs == "+") and isinstance(value, str) and " " in value:
            return value.split()
        return [text]

    def validate(self, flag: str, spec: Any, values: list[str], concept: str) -> str | None:
        if spec is None:
            return None
        val: Any = values[0] if len(values) == 1 and spec.type != "list" and spec.nargs != "+" else values
        err = self.table.validate_value(self.cmd, "--" + flag, val)
        if err:
            return err.split(": ", 1)[-1]
        if concept in ("dataloader_num_workers", "dataset_num_proc") and self.cpu_cores:
            n = _num(values[0])
            if n is not None and n > self.cpu_cores:
                return f"{int(n)} is more than the {self.cpu_cores} CPU cores of the machine"
        if concept in ("dataloader_num_workers", "dataset_num_proc", "per_device_train_batch_size",
                       "gradient_accumulation_steps", "micro_batch_size", "max_length"):
            n = _num(values[0])
            if n is not None and n < (0 if concept == "dataloader_num_workers" else 1):
                return f"{values[0]} is out of range"
        return None

    def note_for(self, flag: str, concept: str, cur: Any, new: str, rule_note: str | None, effect: str) -> str | None:
        tmpl = TRAINING_NOTES.get(flag) or TRAINING_NOTES.get(concept)
        parts = [rule_note] if rule_note and not (tmpl and effect == "changes-training") else []
        if tmpl and effect == "changes-training":
            vals = self.state.values()
            trunc = vals.get("truncation_strategy") or self.effective.get("truncation_strategy") or "delete"
            trunc_txt = {"delete": "dropped from the dataset (truncation_strategy delete)",
                         "left": "cut from the left", "right": "cut from the right",
                         "split": "split into several rows"}.get(str(trunc), f"handled with '{trunc}'")
            try:
                pct = f"{float(new) * 100:g}%"
            except ValueError:
                pct = new
            streaming = ("rows are read as a stream: preprocessing runs inside the training loop, one loader worker, "
                         "no global shuffle" if string_to_bool(new) else
                         "the dataset is preprocessed before step 1 and shuffled as a whole: the same rows, in another "
                         "order")
            parts.append(tmpl.format(new=new, old=fmt_value(cur) if cur is not None else "the default",
                                     trunc=trunc_txt, pct=pct, streaming=streaming))
        return "; ".join(parts) or None

    def set_env(self, req: Request, rules: list[str]) -> None:
        name = req.op.env or ""
        value = fmt_value(req.op.value)
        effect = stricter(req.effect, classify(name, is_env=True))
        if self.only_safe and effect != "safe":
            self.plan.unchanged.append(f"{req.rule}: {name} not changed (--only-safe; this change is {effect})")
            return
        if name in TORCHRUN_ENV.values() and self.launcher not in ("swift", "megatron", "torchrun"):
            self.problem(f"{req.rule}: {name} only works through the swift/megatron CLI; this script starts the "
                         f"trainer with {self.launcher} (set its own process options instead)", severity="warning",
                         code="env")
            return
        if name in ("NPROC_PER_NODE", "NNODES") and (_num(value) is None or (_num(value) or 0) < 1):
            if req.rule == "explicit" and self.strict:
                raise InputError(f"--env {name}={value}: must be a positive integer", hint="nothing was written")
            self.problem(f"{req.rule}: {name}={value} is not a positive integer; skipped", severity="warning",
                         code="env")
            return
        old = self.env.get(name)
        if name == "PYTORCH_CUDA_ALLOC_CONF" and old:
            merged = dict(p.split(":", 1) if ":" in p else (p, "") for p in old.split(",") if p)
            for p in value.split(","):
                k, _, v = p.partition(":")
                merged[k] = v
            value = ",".join(f"{k}:{v}" if v else k for k, v in merged.items())
        if old is not None and str(old) == value:
            self.plan.unchanged.append(f"{req.rule}: {name} is already {value}")
            return
        self.env[name] = value
        note = self.note_for(name, name, old, value, req.note, effect)
        for c in self.plan.changes:
            if c.env == name:
                c.new, c.note = value, note
                if req.rule not in c.rules:
                    c.rules.append(req.rule)
                return
        via = "torchrun" if self.launcher == "torchrun" and name in TORCHRUN_ENV.values() else None
        self.plan.changes.append(Change(env=name, old=old, new=value, effect=effect, rule=req.rule,
                                        rules=list(rules) or [req.rule], title=req.title, note=note,
                                        line=self.env_lines.get(name) if old is not None else None, via=via))

    def world(self) -> tuple[int, bool]:
        if self.world_size:
            return int(self.world_size), True
        n = _num(self.env.get("NPROC_PER_NODE"))
        nn = _num(self.env.get("NNODES")) or 1
        if n:
            return int(n * nn), True
        return 1, False

    def _ga(self) -> tuple[int | None, tuple[str, int] | None, Occurrence | None, str | None]:
        ga_flag = spell_for("gradient_accumulation_steps", self.table, self.cmd)
        if ga_flag is None:
            return None, None, None, None
        hit = self.state.find(ga_flag)
        if hit:
            n = _num(occurrence_value(hit[0], None))
            return (int(n) if n else None), hit[1], hit[0], ga_flag
        eff = _num(self.effective.get(ga_flag))
        return (int(eff) if eff else None), None, None, ga_flag

    def _default_ga(self, bs: int) -> int:
        world, known = self.world()
        ga = max(1, math.ceil(16 / bs / world))
        self.plan.assumptions.append(
            f"gradient_accumulation_steps is not given; assumed ms-swift's default ceil(16 / batch {bs} / world size "
            f"{world}{'' if known else ', assumed 1'}) = {ga}")
        return ga

    def halve(self, req: Request, rules: list[str]) -> None:
        meg = self.cmd.startswith("megatron")
        bs_flag = spell_for("per_device_train_batch_size", self.table, self.cmd)
        if bs_flag is None:
            self.problem(f"{req.rule}: ms-swift {self.v} has no per-device batch flag here; skipped", severity="info",
                         code="unsupported")
            return
        spec = self.table.specs(self.cmd).get(bs_flag)
        hit = self.state.find(bs_flag)
        occ, where = (hit if hit else (None, None))
        cur = _num(occurrence_value(occ, spec)) if occ is not None else None
        if cur is None:
            cur = _num(self.effective.get(bs_flag)) or _num(self.effective.get("per_device_train_batch_size")) \
                or _num(spec.default if spec is not None else None) or 1.0
        base = next((_num(self.effective.get(n)) for n in [bs_flag, *_spellings(bs_flag, self.table, self.cmd),
                                                           "per_device_train_batch_size"]
                     if _num(self.effective.get(n))), None) or cur
        cur_i, base_i = int(cur), int(base)
        target = max(1, base_i // 2)
        effect = stricter(req.effect, "changes-training")
        if self.only_safe:
            self.plan.unchanged.append(f"{req.rule}: batch size not changed (--only-safe; this change is {effect})")
            return
        if cur_i < 2:
            self.plan.unchanged.append(f"{req.rule}: {_name(occ.flag) if occ else bs_flag} is 1: nothing to halve")
            return
        if cur_i <= target:
            self.plan.unchanged.append(f"{req.rule}: --{bs_flag} is {cur_i}, already at most half the run's {base_i}")
            return
        new_bs = target
        bs_tok = occ.flag if occ is not None and occ.status == "exact" else f"--{bs_flag}"
        toks = [bs_tok, str(new_bs)]
        self.state.put(where, toks)
        if meg:
            gbs = self.state.values().get("global_batch_size") or self.effective.get("global_batch_size")
            note = (f"micro batch {cur_i} -> {new_bs}; global_batch_size {fmt_value(gbs) if gbs else '(unchanged)'} "
                    "stays, Megatron accumulates more micro-batches")
            self.record(Change(flag=_name(bs_tok), old=occ.value_text if occ else None, new=str(new_bs), effect=effect,
                               rule=req.rule, rules=list(rules), title=req.title, note=note, tokens=toks,
                               concept="per_device_train_batch_size"), where)
            return
        world, _ = self.world()
        if not self.keep_global:
            note = (f"global batch halves: {cur_i}×GA×{world} -> {new_bs}×GA×{world} samples per optimizer step "
                    "(--no-keep-global)")
            self.record(Change(flag=_name(bs_tok), old=occ.value_text if occ else None, new=str(new_bs), effect=effect,
                               rule=req.rule, rules=list(rules), title=req.title, note=note, tokens=toks,
                               concept="per_device_train_batch_size"), where)
            return
        ga, ga_where, ga_occ, ga_flag = self._ga()
        if ga is None:
            ga = self._default_ga(cur_i)
        from diagnose.batch import halved_keep_global

        if new_bs == max(1, cur_i // 2):
            _, new_ga, exact = halved_keep_global(cur_i, ga, world)
        else:  # the logged batch was already halved once: scale to the target, not to half of the current value
            new_ga = math.ceil(ga * cur_i / new_bs)
            exact = new_ga * new_bs == ga * cur_i
        g0, g1 = cur_i * ga * world, new_bs * new_ga * world
        note = (f"global batch {cur_i}×{ga}×{world} = {g0} -> {new_bs}×{new_ga}×{world} = {g1} samples per optimizer "
                f"step ({'kept' if exact else 'as close as whole numbers allow'}); the same samples per step, "
                "more micro-steps each")
        self.record(Change(flag=_name(bs_tok), old=occ.value_text if occ else None, new=str(new_bs), effect=effect,
                           rule=req.rule, rules=list(rules), title=req.title, note=note, tokens=toks,
                           concept="per_device_train_batch_size"), where)
        if ga_flag and new_ga != ga:
            ga_tok = ga_occ.flag if ga_occ is not None and ga_occ.status == "exact" else f"--{ga_flag}"
            gtoks = [ga_tok, str(new_ga)]
            self.state.put(ga_where, gtoks)
            self.record(Change(flag=_name(ga_tok), old=ga_occ.value_text if ga_occ else None, new=str(new_ga), effect=effect,
                               rule=req.rule, rules=list(rules), title=req.title,
                               note=f"keeps the global batch at {g1} with {bs_tok} {new_bs}", tokens=gtoks,
                               concept="gradient_accumulation_steps"), ga_where)

    def _keep_global_after(self, cur: Any, target: Any, req: Request, rules: list[str]) -> None:
        """An explicit batch change scales accumulation when that keeps the global batch exactly."""
        if not self.keep_global:
            return
        if any(r.op.flag in ("gradient_accumulation_steps",) for r in self._explicit):
            return
        c, t = _num(cur), _num(target)
        if not c or not t or c == t:
            return
        ga, ga_where, ga_occ, ga_flag = self._ga()
        if ga_flag is None:
            return
        if ga is None:
            ga = self._default_ga(int(c))
        new_ga = ga * c / t
        if not float(new_ga).is_integer() or new_ga < 1:
            self.plan.assumptions.append(f"--{ga_flag} stays {ga}: no whole number keeps the global batch with batch "
                                         f"{fmt_value(t)}; the global batch changes")
            return
        new_ga = int(new_ga)
        world, _ = self.world()
        ga_tok = ga_occ.flag if ga_occ is not None and ga_occ.status == "exact" else f"--{ga_flag}"
        gtoks = [ga_tok, str(new_ga)]
        self.state.put(ga_where, gtoks)
        self.record(Change(flag=_name(ga_tok), old=ga_occ.value_text if ga_occ else None, new=str(new_ga),
                           effect="changes-training", rule=req.rule, rules=list(rules), title="keep the global batch",
                           note=f"global batch stays {int(c * ga * world)} ({fmt_value(t)}×{new_ga}×{world})",
                           tokens=gtoks, concept="gradient_accumulation_steps"), ga_where)


def plan_patch(argv: list[str], env: dict[str, str] | None = None,
               remedies: Diagnosis | Sequence[Finding] | Sequence[Request] | None = None, version: str = "4.x", *,
               command: str = "sft", effective: dict[str, Any] | None = None, cpu_cores: int | None = None,
               world_size: int | None = None, only_safe: bool = False, keep_global: bool = True, fix: str = "error",
               launcher: str = "swift", sources: list[tuple[int | None, str | None]] | None = None,
               explicit: Sequence[Request] = (), version_source: str = "", config_file: bool = False,
               env_lines: dict[str, int] | None = None, fix_effects: Iterable[str] = ("safe", "changes-training"),
               fix_codes: Callable[[str], bool] | None = None) -> PatchPlan:
    """Plan the changes to one launch command; see the module docstring."""
    from diagnose.flags import table_for

    table = table_for(version)
    cmd = normalize_command(command)
    if not table.has_command(cmd):
        raise InputError(f"ms-swift {table.version} has no `{cmd.replace('_', ' ')}` command",
                         hint="pass the right --swift-version")
    pl = _Planner(list(argv), dict(env or {}), table, cmd, effective=dict(effective or {}), cpu_cores=cpu_cores,
                  world_size=world_size, only_safe=only_safe, keep_global=keep_global, fix=fix, launcher=launcher,
                  sources=sources, strict=True)
    pl._explicit = list(explicit)
    pl.env_lines = dict(env_lines or {})
    pl.fix_effects = set(fix_effects)
    pl.fix_codes = fix_codes  # lint --select/--ignore: fix only the problems that are reported
    if only_safe:
        pl.fix_effects.discard("changes-training")
    pl.plan.version_source = version_source
    # 1. flags this version rejects (or, for lint --fix, merely misspells)
    pl.apply_findings(check_flags(pl.state.occs, table, cmd, env=pl.env), fix)
    # 2. remedies and explicit changes
    reqs, advice, dropped = requests_from(remedies)
    reqs = list(explicit) + reqs
    kept, dropped_all = _merge(reqs, dropped)
    pl.plan.advice.extend(advice)
    pl.plan.dropped = list(dropped_all)
    for req, rules in kept:
        pl.apply_request(req, rules)
    # 3. combinations ms-swift refuses or ignores, on the patched argv
    combos = check_combos(pl.state.values(), pl.env, table, cmd, launcher, config_file=config_file,
                          occs=pl.state.last_occs())
    pl.apply_findings(combos, fix)
    # 4. the result
    toks, _ = pl.state.tokens()
    pl.plan.argv = toks
    pl.plan.env = pl.env
    _, occs = split_argv(toks)
    resolve_occurrences(occs, table, cmd)
    for f in check_flags(occs, table, cmd, env=pl.env):
        if f.severity == "error" and not any(p.flag == (f.occ.flag if f.occ else None) and p.severity == "error"
                                             for p in pl.plan.problems):
            pl.problem("after the patch: " + f.message, flag=f.occ.flag if f.occ else None, code=f.problem_code)
    pl.plan.problems.sort(key=lambda p: (p.line is None, p.line or 0))
    return pl.plan
