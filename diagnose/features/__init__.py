"""Features: named, unit-carrying numbers (and flags) computed from a Run.

Contract: `compute_features(run, samples=None, host=None, options=None) -> Features`.
`Features.values[name]` is the value or None when its input is missing (never 0
for missing); `Features.lines[name]` lists the source lines behind it.  Every
feature is declared once in a family module with `@feature(name, unit, doc)`;
`REGISTRY` lists them all (docs/features.md is generated from it).
"""
from __future__ import annotations

from diagnose.features.registry import REGISTRY, Features, compute_features

__all__ = ["REGISTRY", "Features", "compute_features"]
