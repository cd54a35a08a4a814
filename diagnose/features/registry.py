"""Feature registry and evaluation order.

Contract: `@feature(name, unit, doc, family)` registers a function `fn(ctx) -> value`
(or `(value, lines)`); `compute_features` imports the family modules, evaluates
every feature once in FAMILY_ORDER, registration order within a family (a feature may read earlier ones via
`ctx.get(name)`), and turns any exception inside one feature into None plus a
note, so one odd input never sinks the diagnosis.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from diagnose.effective import EffectiveConfig
from diagnose.models import Run


@dataclass
class Feature:
    name: str
    unit: str
    doc: str
    family: str
    fn: Callable[["Ctx"], Any]


REGISTRY: dict[str, Feature] = {}
# evaluation order by family: later families read earlier ones (whatever order modules were imported in)
FAMILY_ORDER = ("events", "host", "config", "dataset", "steps", "gpu", "memory", "probe")


def load_families() -> None:
    from diagnose.features import config, dataset, events, gpu, hostside, memory, probe, steps  # noqa: F401


def ordered() -> list[Feature]:
    load_families()
    rank = {f: i for i, f in enumerate(FAMILY_ORDER)}
    return sorted(REGISTRY.values(), key=lambda f: rank.get(f.family, len(rank)))  # stable within a family


def feature(name: str, unit: str, doc: str, family: str) -> Callable[[Callable[["Ctx"], Any]], Callable[["Ctx"], Any]]:
    def deco(fn: Callable[["Ctx"], Any]) -> Callable[["Ctx"], Any]:
        if name in REGISTRY:
            raise ValueError(f"feature {name} registered twice")
        REGISTRY[name] = Feature(name, unit, doc.strip(), family, fn)
        return fn

    return deco


@dataclass
class Options:
    gpu: str | None = None  # --gpu name, e.g. A100-80GB
    cpu_cores: int | None = None  # machine cores for worker suggestions (default: this machine when attached)
    live: bool = False  # the job is still running (attach)
    script: dict[str, Any] | None = None  # the launch script's flag values (patch): they win over the log's
    script_label: str | None = None
    script_lines: dict[str, int] | None = None


@dataclass
class Ctx:
    run: Run
    samples: dict[str, Any] | None
    host: dict[str, Any] | None
    options: Options
    values: dict[str, Any] = field(default_factory=dict)
    lines: dict[str, list[tuple[str | None, int]]] = field(default_factory=dict)
    config: EffectiveConfig | None = None  # the run's effective flag values (diagnose.effective)
    assumed: set[str] = field(default_factory=set)  # features whose value is only a default the text does not show
    cache: dict[str, Any] = field(default_factory=dict)  # computations several features share (not features)

    def get(self, name: str) -> Any:
        return self.values.get(name)

    def flag(self, *names: str) -> Any:
        """A flag's value as given (the launch script being patched, else the log's argv/args), no defaults."""
        script = self.options.script or {}
        for n in names:
            if script.get(n) is not None:
                return script[n]
        flags = self.run.launch.flags
        for n in names:
            if n in flags and flags[n] is not None:
                return flags[n]
        return None


@dataclass
class Features:
    values: dict[str, Any]
    lines: dict[str, list[tuple[str | None, int]]]  # (file, line): evidence of each feature
    notes: list[str] = field(default_factory=list)
    # (file, line) of events that only imply their kind (a cut message, SIGKILL for the OOM killer) -> what is missing
    probable_lines: dict[tuple[str | None, int], str] = field(default_factory=dict)
    line_file: str | None = None  # the capture bare line numbers point into
    config: EffectiveConfig | None = None  # the run's effective flag values: remedies are resolved against them
    assumed: set[str] = field(default_factory=set)  # features that hold a default the text does not show

    def get(self, name: str) -> Any:
        return self.values.get(name)


def _clean(v: Any) -> Any:
    if isinstance(v, float) and math.isnan(v):
        return None
    if hasattr(v, "item") and callable(v.item) and not isinstance(v, (list, dict, str)):
        try:
            return _clean(v.item())
        except (ValueError, TypeError):
            return v
    return v


def compute_features(run: Run, samples: dict[str, Any] | None = None, host: dict[str, Any] | None = None,
                     options: Options | None = None) -> Features:
    opts = options or Options()
    ctx = Ctx(run, samples, host, opts)
    ctx.config = EffectiveConfig.of(run, opts.script, opts.script_label, opts.script_lines)
    notes: list[str] = []
    for f in ordered():
        try:
            out = f.fn(ctx)
        except Exception as e:  # a feature bug must not hide the others
            notes.append(f"feature {f.name} failed: {type(e).__name__}: {e}")
            out = None
        if isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], list):
            val, lines = out
            ctx.lines[f.name] = [_ref(x, run.line_file) for x in lines if x is not None]
        else:
            val = out
        ctx.values[f.name] = _clean(val)
    # a line is a partial signature when only partial events sit on it (a nan row read by the step table is certain,
    # whatever generic line-reader also saw it)
    sure = {(e.file, e.line) for e in run.events if e.detail.get("confidence") not in ("probable", "weak")}
    sure |= {(run.line_file, int(v[1])) for v in run.nonfinite.values() if len(v) > 1}  # a metric a row reader read
    probable = {(e.file, e.line): e.detail.get("missing") or _MISSING for e in run.events
                if e.detail.get("confidence") in ("probable", "weak") and (e.file, e.line) not in sure}
    return Features(ctx.values, ctx.lines, notes, probable, run.line_file, ctx.config, set(ctx.assumed))


_MISSING = "the decisive message is cut or only implies the category (its full line is not in the text)"


def _ref(x: Any, line_file: str | None) -> tuple[str | None, int]:
    """A feature's evidence entry: a bare line (into the run's main capture) or (file, line)."""
    if isinstance(x, tuple):
        return (x[0] or line_file, int(x[1]))
    return (line_file, int(x))
