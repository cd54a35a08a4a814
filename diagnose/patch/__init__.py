"""The patch stage: a diagnosis (or explicit changes) -> the exact change to the user's launch command.

Public API (see docs/patch.md):

* ``plan_patch(argv, env, remedies, version, **options) -> PatchPlan`` --
  pure planning over an ms-swift argv, spelled for ``version``
  (:mod:`diagnose.patch.plan`).
* ``apply_to_script(text, plan, base_dir=None) -> str`` -- the script text with
  the plan applied, every other byte preserved (:mod:`diagnose.patch.edit`);
  ``edits_for(launch, plan)`` also edits a 4.x YAML/JSON config file.
* ``read_launch(text, base_dir=None, select_line=None) -> Launch`` -- the swift
  command of a launch script (:mod:`diagnose.patch.launch`);
  ``plan_for_launch(launch, remedies, version, **options)`` plans over it with
  line numbers (:mod:`diagnose.patch.source`).
* ``check_argv(command, argv, version) -> SwiftCheck | None`` -- parse-only
  validation with the installed ms-swift's own parser
  (:mod:`diagnose.patch.swiftcheck`).
* Models: ``PatchPlan``, ``Change``, ``Problem``, ``Request``, ``Advice``
  (:mod:`diagnose.patch.models`).

Import cost: stdlib only until an attribute is used.
"""
from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "plan_patch": "plan", "parse_assignments": "plan", "requests_from": "plan",
    "apply_to_script": "edit", "edits_for": "edit", "UnsafeEdit": "edit", "FileEdit": "edit",
    "read_launch": "launch", "Launch": "launch",
    "plan_for_launch": "source", "read_script": "source", "launch_from_run": "source", "effective_from_run": "source",
    "check_argv": "swiftcheck", "SwiftCheck": "swiftcheck",
    "PatchPlan": "models", "Change": "models", "Problem": "models", "Request": "models", "Advice": "models",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{mod}"), name)
    globals()[name] = value
    return value
