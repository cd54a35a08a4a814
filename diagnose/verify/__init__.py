"""Verify a patch by measurement: baseline and patched trials of the real job through ms-swift.

Public API (see docs/verify.md):

* ``run_verify(job, variants, options, runner=None, progress=None) -> VerifyReport``
  (:mod:`diagnose.verify.experiment`): the interleaved, adaptive experiment.
* ``job_from_script`` / ``job_from_argv`` / ``job_from_run``, ``build_variants``,
  ``units_from_requests``, ``trial_argv`` (:mod:`diagnose.verify.job`).
* Runners (:mod:`diagnose.verify.trial`): ``SwiftTrialRunner`` (subprocesses of
  the real CLI) and ``RecordedTrialRunner`` (replayed per-step times), both
  implementing ``TrialRunner.run(spec, on_step) -> TrialResult``.
* Statistics (:mod:`diagnose.verify.stats`): ``trial_throughput``, ``compare``,
  ``straddles``, ``loss_parity``, ``t_ppf``.
* Models (:mod:`diagnose.verify.models`): ``VerifyReport``, ``TrialResult``,
  ``ArmSummary``, ``Change``, ``Failure``, ``LossParity``, ``AblationRow``.
* Renderers (:mod:`diagnose.verify.render`): ``report_json``,
  ``report_markdown``, ``print_report``, ``ConsoleProgress``.

Import cost: stdlib only until an attribute is used; torch, swift and pynvml are
never imported in this process (trials are subprocesses; NVML only through
diagnose.nvml when sampling).
"""
from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "run_verify": "experiment", "VerifyOptions": "experiment", "VerifyProgress": "experiment",
    "auto_subset": "experiment",
    "Job": "job", "Variant": "job", "Unit": "job", "job_from_script": "job", "job_from_argv": "job",
    "job_from_run": "job", "build_variants": "job", "units_from_requests": "job", "trial_argv": "job",
    "find_swift": "job",
    "SwiftTrialRunner": "trial", "RecordedTrialRunner": "trial", "TrialRunner": "trial", "TrialSpec": "trial",
    "trial_throughput": "stats", "compare": "stats", "straddles": "stats", "loss_parity": "stats", "t_ppf": "stats",
    "VerifyReport": "models", "TrialResult": "models", "ArmSummary": "models", "Change": "models",
    "Failure": "models", "LossParity": "models", "AblationRow": "models",
    "report_json": "render", "report_markdown": "render", "print_report": "render", "ConsoleProgress": "render",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{mod}"), name)
    globals()[name] = value
    return value
