"""Rule files: schema, loading and validation.

Contract: `load_rules(directory=None, overrides=None) -> list[Rule]` reads every
`rules/*.yaml`, validates it (pydantic schema; every feature named in `requires`,
`when` and `value_from` is registered; every remedy flag is a known flag concept;
every `$param` is declared) and applies `overrides` ("ID.param=value" or
"slug.param=value").  A broken file raises `RuleError` naming the file and field.
Rules compare; features compute: conditions have no arithmetic.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from diagnose.errors import SwiftdocError

CATEGORIES = ("data_loading", "nccl", "memory_bandwidth", "oom", "nan", "bus_error", "config", "interrupted",
              "healthy", "unknown")
SEVERITIES = ("info", "warning", "error")
OPS = ("lt", "le", "gt", "ge", "eq", "ne", "in", "not_in", "true", "false", "present", "absent")
REMEDY_OPS = ("set", "at_least", "at_most", "remove", "set_env", "halve_batch_keep_global")
# flag concepts a remedy may name (the patcher spells them per ms-swift version)
FLAG_CONCEPTS = {
    "dataloader_num_workers", "dataset_num_proc", "streaming", "lazy_tokenize", "attn_impl", "packing",
    "padding_free", "per_device_train_batch_size", "gradient_accumulation_steps", "gradient_checkpointing",
    "max_length", "torch_dtype", "learning_rate", "warmup_ratio", "max_grad_norm", "deepspeed", "fsdp",
    "quant_method", "quant_bits", "max_steps", "resume_from_checkpoint", "group_by_length",
    "dataloader_pin_memory", "dataloader_persistent_workers", "use_liger_kernel", "device_map",
    "truncation_strategy", "split_dataset_ratio", "load_from_cache_file", "ddp_timeout", "eval_strategy", "use_cpu",
    "logging_nan_inf_filter",
}


class RuleError(SwiftdocError):
    exit_code = 2


class Cond(BaseModel):
    model_config = ConfigDict(extra="forbid")
    feature: str
    op: Literal["lt", "le", "gt", "ge", "eq", "ne", "in", "not_in", "true", "false", "present", "absent"]
    value: Any = None

    @field_validator("op", mode="before")
    @classmethod
    def _yaml_bool(cls, v: Any) -> Any:
        # YAML reads `op: true` as a boolean
        return {True: "true", False: "false"}.get(v, v) if isinstance(v, bool) else v


class Group(BaseModel):
    model_config = ConfigDict(extra="forbid")
    all: list[Union["Group", Cond]] | None = None
    any: list[Union["Group", Cond]] | None = None
    not_: Union["Group", Cond, None] = Field(default=None, alias="not")


class Op(BaseModel):
    model_config = ConfigDict(extra="forbid")
    op: Literal["set", "at_least", "at_most", "remove", "set_env", "halve_batch_keep_global"]
    flag: str | None = None
    env: str | None = None
    value: Any = None
    value_from: str | None = None


class Remedy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str
    effect: Literal["safe", "changes-training", "advice"]
    ops: list[Op] = Field(default_factory=list)
    note: str | None = None  # what changes in training, or how to act on advice
    when: Group | None = None  # the remedy applies only if this holds


class Rule(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    slug: str
    category: Literal["data_loading", "nccl", "memory_bandwidth", "oom", "nan", "bus_error", "config",
                      "interrupted", "healthy", "unknown"]
    severity: Literal["info", "warning", "error"]
    priority: int = 50
    # a finding that names no category steps back behind any serious finding that does, whatever their severity and
    # priority (a traceback cut before its exception line says only that something was raised)
    defers: bool = False
    summary: str
    description: str = ""
    requires: list[str] = Field(default_factory=list)
    params: dict[str, Any] = Field(default_factory=dict)
    when: Group
    evidence: str
    remedies: list[Remedy] = Field(default_factory=list)
    references: list[str] = Field(default_factory=list)
    confidence: Literal["certain", "probable", "weak"] = "certain"  # how sure a finding of this rule is
    # a feature whose value (certain / probable / weak) replaces `confidence` when present: rules over a table whose
    # entries carry their own confidence (the meaning of an exception, parse.exceptions)
    confidence_from: str | None = None
    source: str = ""

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        if not v.replace("_", "").isalnum():
            raise ValueError("id must be alphanumeric, e.g. DL001")
        return v


Group.model_rebuild()


def default_rules_dir() -> Path:
    """The rule files: $SWIFTDOC_RULES when set, else the ones shipped inside the package.

    They live in `diagnose/rules_data/` (the checkout's top-level `rules` is a link to
    it), so a wheel or a non-editable install carries them.
    """
    env = os.environ.get("SWIFTDOC_RULES")
    if env:
        return Path(env)
    from importlib.resources import files

    return Path(str(files("diagnose") / "rules_data"))


def _walk_conds(g: Group | Cond | None):
    if g is None:
        return
    if isinstance(g, Cond):
        yield g
        return
    for sub in (g.all or []) + (g.any or []):
        yield from _walk_conds(sub)
    if g.not_ is not None:
        yield from _walk_conds(g.not_)


def _validate_refs(rule: Rule, known: set[str]) -> None:
    where = rule.source or rule.id
    for name in rule.requires:
        if name not in known:
            raise RuleError(f"{where}: requires: unknown feature '{name}'")
    groups = [rule.when] + [r.when for r in rule.remedies if r.when is not None]
    for g in groups:
        for c in _walk_conds(g):
            if c.feature not in known:
                raise RuleError(f"{where}: when: unknown feature '{c.feature}'")
            if isinstance(c.value, str) and c.value.startswith("$") and c.value[1:] not in rule.params:
                raise RuleError(f"{where}: when: parameter '{c.value}' is not declared in params")
    for i, rem in enumerate(rule.remedies):
        for op in rem.ops:
            loc = f"{where}: remedies[{i}].ops"
            if op.op == "set_env":
                if not op.env:
                    raise RuleError(f"{loc}: set_env needs 'env'")
            elif op.op != "halve_batch_keep_global":
                if not op.flag:
                    raise RuleError(f"{loc}: {op.op} needs 'flag'")
                if op.flag not in FLAG_CONCEPTS:
                    raise RuleError(f"{loc}: unknown flag concept '{op.flag}'")
            if op.value_from and op.value_from not in known:
                raise RuleError(f"{loc}: value_from: unknown feature '{op.value_from}'")
    try:
        rule.evidence.format_map(_Probe())
    except (ValueError, KeyError, IndexError) as e:
        raise RuleError(f"{where}: evidence: bad template ({e})") from None
    for name in template_names(rule.evidence):
        if name not in known and name not in rule.params:
            raise RuleError(f"{where}: evidence: unknown feature '{name}'")
    if rule.confidence_from and rule.confidence_from not in known:
        raise RuleError(f"{where}: confidence_from: unknown feature '{rule.confidence_from}'")


class _Probe(dict):
    def __missing__(self, key: str) -> Any:
        return 1.0


def template_names(tpl: str) -> list[str]:
    import string

    return [f.split(".")[0].split("[")[0] for _, f, _, _ in string.Formatter().parse(tpl) if f]


def _coerce(v: str) -> Any:
    from diagnose.parse.args import typed

    return typed(v)


def apply_overrides(rules: list[Rule], overrides: list[str] | None) -> None:
    for ov in overrides or []:
        key, sep, val = ov.partition("=")
        rid, dot, param = key.rpartition(".")
        if not sep or not dot:
            raise RuleError(f"--param {ov!r}: expected RULE.param=value (e.g. DL001.max_util=40)")
        hits = [r for r in rules if rid in (r.id, r.slug)]
        if not hits:
            raise RuleError(f"--param {ov!r}: no rule '{rid}'", hint="see `swiftdoc rules`")
        for r in hits:
            if param not in r.params:
                raise RuleError(f"--param {ov!r}: rule {r.id} has no parameter '{param}'",
                                hint="parameters: " + (", ".join(r.params) or "none"))
            new = _coerce(val)
            old = r.params[param]
            number = isinstance(old, (int, float)) and not isinstance(old, bool)
            if number and (isinstance(new, bool) or not isinstance(new, (int, float))):
                raise RuleError(f"--param {ov!r}: {r.id}.{param} takes a number, got {val!r}",
                                hint=f"e.g. {r.id}.{param}={old}")
            if isinstance(old, bool) and not isinstance(new, bool):
                raise RuleError(f"--param {ov!r}: {r.id}.{param} takes true or false, got {val!r}")
            r.params[param] = new


def load_rules(directory: Path | None = None, overrides: list[str] | None = None) -> list[Rule]:
    import yaml

    from diagnose.features.registry import REGISTRY, load_families

    load_families()

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: ~10x faster than pure Python
    d = directory or default_rules_dir()
    files = sorted(d.glob("*.yaml")) + sorted(d.glob("*.yml"))
    if not files:
        raise RuleError(f"no rule files in {d}")
    known = set(REGISTRY)
    rules: list[Rule] = []
    seen: dict[str, str] = {}
    for f in files:
        try:
            data = yaml.load(f.read_text(encoding="utf-8"), Loader=loader)
        except yaml.YAMLError as e:
            raise RuleError(f"{f.name}: not valid YAML ({str(e).splitlines()[0]})") from None
        if not isinstance(data, dict):
            raise RuleError(f"{f.name}: expected a mapping with id, slug, category, ...")
        try:
            rule = Rule.model_validate({**data, "source": f.name})
        except ValidationError as e:
            err = e.errors()[0]
            loc = ".".join(str(x) for x in err["loc"])
            raise RuleError(f"{f.name}: field '{loc}': {err['msg']}") from None
        _validate_refs(rule, known)
        for key in (rule.id, rule.slug):
            if key in seen:
                raise RuleError(f"{f.name}: '{key}' already used by {seen[key]}")
            seen[key] = f.name
        rules.append(rule)
    apply_overrides(rules, overrides)
    return rules


def select_rules(rules: list[Rule], select: list[str], ignore: list[str]) -> list[Rule]:
    """`--select` / `--ignore` (ruff's way): rule ids, id prefixes (`NC`), slugs, slug prefixes (`nccl.`) or
    categories, comma-separated; an entry that names no rule is an error with a hint."""
    def tokens(values: list[str]) -> list[str]:
        return [t.strip() for v in values for t in v.split(",") if t.strip()]

    def hits(rule: Rule, t: str) -> bool:
        return (t in (rule.slug, rule.category) or (t.isalnum() and rule.id.startswith(t.upper()))
                or rule.slug.startswith(t if t.endswith(".") else t + "."))

    sel, ign = tokens(select), tokens(ignore)
    for t in sel + ign:
        if not any(hits(r, t) for r in rules):
            cats = sorted({r.category for r in rules})
            raise RuleError(f"--select/--ignore {t!r} names no rule",
                            hint="ids like OOM001 or prefixes like NC; slugs like oom.cuda; categories: " + ", ".join(cats))
    out = [r for r in rules if not sel or any(hits(r, t) for t in sel)]
    return [r for r in out if not any(hits(r, t) for t in ign)]
