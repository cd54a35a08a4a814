"""The spine: parse -> features -> rules -> diagnosis (and the patch plan on top).

Contract: `analyze_run(run, samples=None, host=None, options=None, rules=None) ->
Diagnosis` is pure (no I/O beyond loading rule files once); `analyze_paths(paths,
...)` parses first (and reads the run's swiftdoc probe files: `parse.probe.load_probe`).
`options` is `AnalyzeOptions` (gpu name, cpu cores, rule
parameter overrides, live flag for attach).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from diagnose.diagnosis import Diagnosis, build_diagnosis
from diagnose.engine import evaluate_rules
from diagnose.features.registry import Options, compute_features
from diagnose.models import Run
from diagnose.rules import Rule, load_rules


@dataclass
class AnalyzeOptions:
    gpu: str | None = None
    cpu_cores: int | None = None
    params: list[str] = field(default_factory=list)  # "RULE.param=value"
    live: bool = False  # the job is still running (attach): an unfinished log is not an interruption
    script: dict[str, Any] | None = None  # the launch script's flag values (patch): remedies are resolved against them
    script_label: str | None = None
    script_lines: dict[str, int] | None = None


_RULES_CACHE: dict[tuple[str, ...], list[Rule]] = {}


def get_rules(params: list[str] | None = None) -> list[Rule]:
    key = tuple(params or ())
    if key not in _RULES_CACHE:
        _RULES_CACHE[key] = load_rules(overrides=list(key))
    return _RULES_CACHE[key]


def analyze_run(run: Run, samples: dict[str, Any] | None = None, host: dict[str, Any] | None = None,
                options: AnalyzeOptions | None = None, rules: list[Rule] | None = None) -> Diagnosis:
    opts = options or AnalyzeOptions()
    feats = compute_features(run, samples, host, Options(gpu=opts.gpu, cpu_cores=opts.cpu_cores, live=opts.live,
                                                         script=opts.script, script_label=opts.script_label,
                                                         script_lines=opts.script_lines))
    findings, skipped = evaluate_rules(rules if rules is not None else get_rules(opts.params), feats)
    diag = build_diagnosis(findings, skipped, feats, run)
    from diagnose.features.gpu import stragglers_of

    diag.stragglers = stragglers_of(samples)
    return diag


def analyze_paths(paths: list[str], stdin: bytes | None = None, **kw: Any) -> tuple[Run, Diagnosis]:
    from diagnose.parse import parse_run
    from diagnose.parse.probe import load_probe

    run = parse_run(paths, stdin=stdin)
    load_probe(run, paths)  # swiftdoc probe files beside the run, when there are any
    return run, analyze_run(run, **kw)
