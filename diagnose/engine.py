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
import re
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
    # set by diagnose.remedies against the run's effective values: change (the op changes the run), already (the run
    # already satisfies it), unknown (the text shows no value to compare with); None before resolution
    status: Literal["change", "already", "unknown"] | None = None
    current: Any = None  # the run's value now, when known
    source: str | None = None  # where `current` comes from: "the args dump", "script line 12", "ms-swift 4.x's default"
    assumed: bool = False  # `current` is only a default the text does not show: the user may have changed it
    detail: str | None = None  # e.g. the concrete batch arithmetic of halve_batch_keep_global


class ResolvedRemedy(BaseModel):
    title: str
    effect: str
    ops: list[RemedyOp] = Field(default_factory=list)
    note: str | None = None
    # apply: at least one op changes the run; already: every op is already in place; conditional: it depends on a
    # value the text does not show (`condition` says which); None before resolution
    status: Literal["apply", "already", "conditional"] | None = None
    condition: str | None = None  # the rule's `when` over values the text does not show, in words


class Finding(BaseModel):
    rule: str
    slug: str
    category: str
    severity: str
    priority: int = 50
    defers: bool = False  # the rule's `defers`: steps back behind a serious finding that names a category
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


def eval3(g: Group | Cond, feats: dict[str, Any], params: dict[str, Any], unknown: set[str]) -> bool | None:
    """Three-valued `eval_group`: a comparison on a feature in `unknown` (a flag value the text does not show: only
    a default, or nothing) is None, and None propagates (Kleene logic).  `present`/`absent` are always decided; a
    comparison on any other missing feature is false, as in `eval_group`."""
    if isinstance(g, Cond):
        if g.op not in ("present", "absent") and g.feature in unknown:
            return None
        return _cond(g, feats, params, set())
    parts: list[bool | None] = []
    if g.all is not None:
        subs = [eval3(x, feats, params, unknown) for x in g.all]
        parts.append(False if False in subs else None if None in subs else True)
    if g.any is not None:
        subs = [eval3(x, feats, params, unknown) for x in g.any]
        parts.append(True if True in subs else None if None in subs else False)
    if g.not_ is not None:
        sub = eval3(g.not_, feats, params, unknown)
        parts.append(None if sub is None else not sub)
    return False if False in parts else None if None in parts else True


_OP_WORDS = {"lt": "<", "le": "≤", "gt": ">", "ge": "≥", "eq": "=", "ne": "≠", "in": "in", "not_in": "not in"}


def condition_text(g: Group | Cond, params: dict[str, Any], unknown: set[str], feats: dict[str, Any]) -> str:
    """The undecided part of a remedy's `when`, in words ("per_device_train_batch_size ≥ 2")."""
    if isinstance(g, Cond):
        if g.op == "true":
            return f"{g.feature} is on"
        if g.op == "false":
            return f"{g.feature} is off"
        v = _val(g.value, params)
        return f"{g.feature} {_OP_WORDS.get(g.op, g.op)} {v}"
    out = []
    for sub in (g.all or []) + (g.any or []):
        if eval3(sub, feats, params, unknown) is None:
            out.append(condition_text(sub, params, unknown, feats))
    if g.not_ is not None and eval3(g.not_, feats, params, unknown) is None:
        inner = g.not_
        if isinstance(inner, Cond) and inner.op in ("true", "false"):
            out.append(f"{inner.feature} is {'off' if inner.op == 'true' else 'on'}")
        else:
            out.append("not (" + condition_text(inner, params, unknown, feats) + ")")
    return (" or " if g.any and not g.all else " and ").join(out)


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
    """Formats None as n/a and numbers with the spec, strings as-is; a default the text does not show says so."""

    def __init__(self, v: Any, default: bool = False):
        self.v = v
        self.default = default

    def __format__(self, spec: str) -> str:
        v = self.v
        if v is None:
            return "n/a"
        if isinstance(v, bool):
            out = str(v).lower()
        elif isinstance(v, (int, float)):
            try:
                out = format(v, spec)
            except ValueError:
                out = str(v)
        elif isinstance(v, list):
            out = ", ".join(str(x) for x in v) or "none"
        else:
            out = str(v)
        return out + " (default)" if self.default else out


# `[[ ... ]]` in an evidence template: a part left out when any value in it is unknown (no "n/a" in the evidence)
_OPTIONAL = re.compile(r"\[\[((?:(?!\[\[|\]\]).)*)\]\]", re.S)  # innermost first: groups nest


def _evidence(rule: Rule, feats: dict[str, Any], assumed: set[str] | frozenset[str] = frozenset()) -> str:
    def known(m: re.Match[str]) -> str:
        names = template_names(m.group(1))
        # a count of 0 is nothing to report either ("0 report(s) of ..." says nothing)
        return m.group(1) if all((feats.get(n) is not None and not (n.endswith("_count") and feats.get(n) == 0))
                                 or n in rule.params for n in names) else ""

    template = rule.evidence
    while "[[" in template:
        nxt = _OPTIONAL.sub(known, template)
        if nxt == template:
            break
        template = nxt
    data = _Fmt({k: _Safe(v, k in assumed) for k, v in feats.items()})
    for k, v in rule.params.items():
        data[k] = _Safe(v)
    try:
        text = template.format_map(data)
    except (ValueError, KeyError, IndexError):
        return rule.evidence.replace("[[", "").replace("]]", "")
    text = text.replace("n/a%", "n/a").replace("n/a GiB", "n/a").replace("n/a s", "n/a")
    # an optional part that came first and was left out leaves the next one's separator at the start
    return re.sub(r"\s*;\s*(?=;|$)", "", text).strip().lstrip(";,").rstrip(";,").strip()


def _resolve(rule: Rule, feats: dict[str, Any], assumed: set[str] | None = None) -> list[ResolvedRemedy]:
    """Each remedy whose `when` holds, or cannot be decided from the text (then `condition` says on what)."""
    out = []
    for rem in rule.remedies:
        condition = None
        if rem.when is not None:
            # a condition over a flag value the text does not show is not guessed: the remedy is kept and says it
            verdict = eval3(rem.when, feats, rule.params, assumed or set())
            if verdict is False:
                continue
            if verdict is None:
                condition = condition_text(rem.when, rule.params, assumed or set(), feats)
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
            out.append(ResolvedRemedy(title=rem.title, effect=rem.effect, ops=ops, note=rem.note, condition=condition,
                                      status="conditional" if condition else None))
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


def unknown_flags(features: Features) -> set[str]:
    """Config features the text does not pin down: a default it does not show, or no value at all."""
    from diagnose.features.registry import REGISTRY

    missing = {n for n, f in REGISTRY.items() if f.family == "config" and features.values.get(n) is None}
    return set(features.assumed) | missing


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
        declared = rule.confidence
        if rule.confidence_from and feats.get(rule.confidence_from) in _CONF_ORDER:
            declared = feats[rule.confidence_from]
        conf, missing = _confidence(declared, decisive, features.probable_lines)
        findings.append(Finding(
            rule=rule.id, slug=rule.slug, category=rule.category, severity=rule.severity, priority=rule.priority,
            defers=rule.defers,
            summary=rule.summary, evidence=_evidence(rule, feats, features.assumed),
            values={n: feats.get(n) for n in sorted(names)}, lines=lines,
            remedies=_resolve(rule, feats, unknown_flags(features)), references=rule.references, confidence=conf, missing=missing,
            refs=[{"file": f, "line": ln} for f, ln in refs],
        ))
    return findings, skipped
