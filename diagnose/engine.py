"""Evaluate rules over features -> findings, skipped rules.

Contract: `evaluate_rules(rules, features) -> (list[Finding], list[Skipped])`.
A rule whose `requires` features are missing (None) is skipped, with the names.
Inside a condition, a comparison against a missing feature is false (so `any`
branches over optional inputs work); `present`/`absent` test missingness.
Evidence templates are filled with the feature values (and params); a finding's
`lines` are the source lines behind every feature the rule referenced.
Remedy values are resolved here (`value_from` -> the feature's value).
"""
from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, Field

from diagnose.features.registry import Features
from diagnose.rules import Cond, Group, Rule, template_names

SEVERITY_RANK = {"info": 1, "warning": 2, "error": 3}  # the one order of severities (--fail-on, ranking)


class RemedyOp(BaseModel):
    op: str
    flag: str | None = None
    env: str | None = None
    value: Any = None


class ResolvedRemedy(BaseModel):
    title: str
    effect: str
    ops: list[RemedyOp] = Field(default_factory=list)
    note: str | None = None


class Finding(BaseModel):
    rule: str
    slug: str
    category: str
    severity: str
    priority: int = 50
    summary: str
    evidence: str
    values: dict[str, Any] = Field(default_factory=dict)
    lines: list[int] = Field(default_factory=list)  # lines of the run's main capture (Run.line_file)
    refs: list[dict[str, Any]] = Field(default_factory=list)  # every (file, line) of the evidence, all captures
    remedies: list[ResolvedRemedy] = Field(default_factory=list)
    references: list[str] = Field(default_factory=list)
    # certain: the category's own signature is in the text; probable: inferred; weak: thin evidence
    confidence: Literal["certain", "probable", "weak"] = "certain"
    missing: str | None = None  # what the text lacks for a surer verdict


class Skipped(BaseModel):
    rule: str
    slug: str
    missing: list[str]


def _val(v: Any, params: dict[str, Any]) -> Any:
    if isinstance(v, str) and v.startswith("$"):
        return params[v[1:]]
    if isinstance(v, list):
        return [_val(x, params) for x in v]
    return v


def _cond(c: Cond, feats: dict[str, Any], params: dict[str, Any], used: set[str]) -> bool:
    used.add(c.feature)
    x = feats.get(c.feature)
    if c.op == "present":
        return x is not None
    if c.op == "absent":
        return x is None
    if x is None:
        return False
    if c.op == "true":
        return x is True
    if c.op == "false":
        return x is False
    y = _val(c.value, params)
    try:
        if c.op == "eq":
            return x == y
        if c.op == "ne":
            return x != y
        if c.op == "in":
            return x in y
        if c.op == "not_in":
            return x not in y
        if isinstance(x, float) and math.isnan(x):
            return False
        return {"lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y}[c.op]
    except TypeError:
        return False


def eval_group(g: Group | Cond, feats: dict[str, Any], params: dict[str, Any], used: set[str]) -> bool:
    if isinstance(g, Cond):
        return _cond(g, feats, params, used)
    ok = True
    if g.all is not None:
        ok = all([eval_group(s, feats, params, used) for s in g.all])  # list: mark every feature used
    if ok and g.any is not None:
        ok = any([eval_group(s, feats, params, used) for s in g.any])
    if ok and g.not_ is not None:
        ok = not eval_group(g.not_, feats, params, used)
    return ok


class _Fmt(dict):
    def __missing__(self, key: str) -> Any:
        return "n/a"


class _Safe:
    """Formats None as n/a and numbers with the spec, strings as-is."""

    def __init__(self, v: Any):
        self.v = v

    def __format__(self, spec: str) -> str:
        v = self.v
        if v is None:
            return "n/a"
        if isinstance(v, bool):
            return str(v).lower()
        if isinstance(v, (int, float)):
            try:
                return format(v, spec)
            except ValueError:
                return str(v)
        if isinstance(v, list):
            return ", ".join(str(x) for x in v) or "none"
        return str(v)


def _evidence(rule: Rule, feats: dict[str, Any]) -> str:
    data = _Fmt({k: _Safe(v) for k, v in feats.items()})
    for k, v in rule.params.items():
        data[k] = _Safe(v)
    try:
        text = rule.evidence.format_map(data)
    except (ValueError, KeyError, IndexError):
        return rule.evidence
    return text.replace("n/a%", "n/a").replace("n/a GiB", "n/a").replace("n/a s", "n/a")


def _resolve(rule: Rule, feats: dict[str, Any]) -> list[ResolvedRemedy]:
    out = []
    for rem in rule.remedies:
        if rem.when is not None and not eval_group(rem.when, feats, rule.params, set()):
            continue
        ops = []
        skip = False
        for op in rem.ops:
            value = feats.get(op.value_from) if op.value_from else _val(op.value, rule.params)
            if op.value_from and value is None:
                skip = True
                break
            value = _round_for(op.flag, value)
            ops.append(RemedyOp(op=op.op, flag=op.flag, env=op.env, value=value))
        if not skip:
            out.append(ResolvedRemedy(title=rem.title, effect=rem.effect, ops=ops, note=rem.note))
    return out


_INT_FLAGS = {"dataloader_num_workers", "dataset_num_proc", "per_device_train_batch_size", "gradient_accumulation_steps",
              "max_steps", "ddp_timeout"}


def _round_for(flag: str | None, value: Any) -> Any:
    """Integer flags get integers; max_length rounds up to a multiple of 64."""
    if not isinstance(value, float) or isinstance(value, bool):
        return value
    if flag == "max_length":
        return int(math.ceil(value / 64.0) * 64)
    if flag in _INT_FLAGS or value.is_integer():
        return int(math.ceil(value))
    return value


_CONF_ORDER = ("certain", "probable", "weak")


def _confidence(declared: str, decisive: list[tuple[str | None, int]],
                probable: dict[tuple[str | None, int], str]) -> tuple[str, str | None]:
    """The rule's own confidence, lowered to probable when every line that decided it is a partial signature."""
    if declared == "certain" and decisive and all(r in probable for r in decisive):
        return "probable", probable[decisive[0]]
    return declared, None


def evaluate_rules(rules: list[Rule], features: Features) -> tuple[list[Finding], list[Skipped]]:
    feats = features.values
    findings: list[Finding] = []
    skipped: list[Skipped] = []
    for rule in rules:
        missing = [n for n in rule.requires if feats.get(n) is None]
        if missing:
            skipped.append(Skipped(rule=rule.id, slug=rule.slug, missing=missing))
            continue
        used: set[str] = set()
        if not eval_group(rule.when, feats, rule.params, used):
            continue
        names = set(used) | set(rule.requires) | {n for n in template_names(rule.evidence) if n in feats}
        refs = sorted({r for n in names for r in features.lines.get(n, [])}, key=lambda r: (r[0] or "", r[1]))
        lines = sorted({ln for f, ln in refs if f == features.line_file})
        decisive = sorted({r for n in used for r in features.lines.get(n, [])}, key=lambda r: (r[0] or "", r[1]))
        conf, missing = _confidence(rule.confidence, decisive, features.probable_lines)
        findings.append(Finding(
            rule=rule.id, slug=rule.slug, category=rule.category, severity=rule.severity, priority=rule.priority,
            summary=rule.summary, evidence=_evidence(rule, feats),
            values={n: feats.get(n) for n in sorted(names)}, lines=lines,
            remedies=_resolve(rule, feats), references=rule.references, confidence=conf, missing=missing,
            refs=[{"file": f, "line": ln} for f, ln in refs],
        ))
    return findings, skipped
