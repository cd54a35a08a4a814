"""verify --probe: each trial's and arm's time split from the probe files, and where a confirmed gain came from.

Trials are replayed (RecordedTrialRunner) with the split a probe would have measured; `trial_split` reads real-format
probe files (tests/probeutil.py) from a trial's output folder.
"""
from __future__ import annotations

import io

import pytest

from diagnose.patch.plan import parse_assignments
from diagnose.verify import job as J
from diagnose.verify.experiment import VerifyOptions, run_verify
from diagnose.verify.probe_split import arm_split, gain_source, trial_split
from diagnose.verify.render import print_report
from diagnose.verify.trial import RecordedTrialRunner
from tests.probeutil import header, step, write_rank

SPLITS = {"baseline": {"step_s": 0.30, "data_s": 0.20, "compute_s": 0.09, "other_s": 0.01, "data_frac": 0.667},
          "patched": {"step_s": 0.12, "data_s": 0.02, "compute_s": 0.09, "other_s": 0.01, "data_frac": 0.167}}


class ProbedRunner(RecordedTrialRunner):
    def run(self, spec, on_step=None):
        res = super().run(spec, on_step)
        res.time_split = dict(SPLITS[spec.arm])
        return res


def test_trial_split_reads_the_trials_run_folder(tmp_path):
    d = tmp_path / "out" / "v0-20261124-120000" / "swiftdoc-probe"
    for r in range(2):
        write_rank(d, r, [header(r, 2), *[step(i, 0.3, data=0.2, host=0.0, fwd=0.05, opt=0.01) for i in range(1, 11)]])
    sp = trial_split(str(tmp_path / "out"))
    assert sp["step_s"] == pytest.approx(0.3) and sp["data_s"] == pytest.approx(0.2) and sp["data_frac"] == pytest.approx(0.667, abs=1e-3)
    assert trial_split(str(tmp_path / "nothing")) is None and trial_split(None) is None


def test_a_confirmed_gain_says_it_came_from_data_wait(tmp_path):
    job = J.job_from_argv(["swift", "sft", "--model", "m", "--dataset", "d.jsonl", "--streaming", "true"],
                          swift="swift", version="4.6.0", cwd=str(tmp_path))
    variants = J.build_variants(job, J.units_from_requests(job, parse_assignments(["streaming=false"], "set"), True))
    runner = ProbedRunner({"baseline": [[20.0] + [0.30] * 11], "patched": [[20.0] + [0.12] * 11]})
    rep = run_verify(job, variants, VerifyOptions(workdir=str(tmp_path / "w"), max_steps=12), runner)
    assert rep.verdict == "confirmed"
    assert rep.baseline.time_split["data_s"] == pytest.approx(0.20) and rep.patched.time_split["data_s"] == pytest.approx(0.02)
    note = next(n for n in rep.notes if n.startswith("probe:"))
    assert "0.18 s shorter" in note and "mostly data wait" in note
    from rich.console import Console

    buf = io.StringIO()
    print_report(rep, Console(file=buf, width=160))
    out = buf.getvalue()
    assert "data wait s/step" in out and "0.2" in out and "0.02" in out


def test_arm_split_and_gain_source_edges():
    class T:
        def __init__(self, s):
            self.time_split = s

    assert arm_split([T(None)]) is None
    a = arm_split([T({"step_s": 0.2, "data_s": 0.1, "compute_s": 0.1, "other_s": 0.0}),
                   T({"step_s": 0.4, "data_s": 0.1, "compute_s": 0.3, "other_s": 0.0})])
    assert a["step_s"] == pytest.approx(0.3) and a["compute_s"] == pytest.approx(0.2) and a["data_frac"] == pytest.approx(1 / 3, abs=1e-3)
    assert gain_source(None, a) is None
    worse = gain_source({"step_s": 0.2, "data_s": 0.1, "compute_s": 0.1, "other_s": 0.0}, a)
    assert "longer" in worse and "mostly compute" in worse
