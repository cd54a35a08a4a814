"""verify's experiment with recorded per-step times: schedule, adaptivity, failures, ablation, reports."""
from __future__ import annotations

import io
import json
import re

import pytest

from diagnose.patch.plan import parse_assignments
from diagnose.verify import job as J
from diagnose.verify.experiment import VerifyOptions, run_verify
from diagnose.verify.render import print_report, report_json, report_markdown
from diagnose.verify.trial import RecordedTrialRunner


def make_job(tmp_path):
    return J.job_from_argv(["swift", "sft", "--model", "m", "--dataset", "d.jsonl", "--per_device_train_batch_size",
                            "4", "--gradient_accumulation_steps", "4"], swift="swift", version="4.6.0", cwd=str(tmp_path))


def variants(job, sets, ablate=False):
    return J.build_variants(job, J.units_from_requests(job, parse_assignments(sets, "set"), True), ablate=ablate)


def steps(t, n=12, start=20.0):
    return [start] + [t] * (n - 1)


def opts(tmp_path, **kw):
    kw.setdefault("max_steps", 12)
    return VerifyOptions(workdir=str(tmp_path / "w"), **kw)


def test_real_gain_confirmed_in_two_rounds_alternating(tmp_path):
    # GIVEN gradient checkpointing costing 1.5x, with a little noise between trials
    job = make_job(tmp_path)
    runner = RecordedTrialRunner({"baseline": [steps(0.300), steps(0.310)], "patched": [steps(0.200), steps(0.205)]},
                                 losses={"baseline": [[6.0 - 0.01 * i for i in range(12)]],
                                         "patched": [[6.0 - 0.01 * i for i in range(12)]]})
    # WHEN verified
    rep = run_verify(job, variants(job, ["gradient_checkpointing=false"]), opts(tmp_path), runner)
    # THEN confirmed after 2 trials per arm, run A B A B, per sample, with loss parity
    assert rep.verdict == "confirmed"
    assert runner.order == ["baseline", "patched", "baseline", "patched"]
    assert rep.gain == pytest.approx((16 / 0.2025) / (16 / 0.305) - 1, rel=1e-3)
    assert rep.ci[0] > 0.03
    assert rep.baseline.global_batch == 16 and rep.baseline.samples_per_s == pytest.approx(16 / 0.305, rel=2e-3)
    assert rep.loss_parity.checked and rep.loss_parity.ok
    assert not (tmp_path / "w").exists() or not any((tmp_path / "w").rglob("out"))


def test_no_op_is_not_confirmed_and_gets_a_third_round(tmp_path):
    job = make_job(tmp_path)
    runner = RecordedTrialRunner({"baseline": [steps(0.30), steps(0.33), steps(0.31)],
                                  "patched": [steps(0.32), steps(0.30), steps(0.31)]})
    rep = run_verify(job, variants(job, ["dataloader_num_workers=4"]), opts(tmp_path), runner)
    assert rep.verdict == "not_confirmed"
    assert rep.ci[0] < 0 < rep.ci[1]
    assert runner.order == ["baseline", "patched"] * 3  # CI straddled 0 after two rounds: one more, then stop
    assert rep.settings["rounds"] == 3


def test_worse(tmp_path):
    job = make_job(tmp_path)
    runner = RecordedTrialRunner({"baseline": [steps(0.200), steps(0.201)], "patched": [steps(0.300), steps(0.302)]})
    rep = run_verify(job, variants(job, ["dataloader_num_workers=4"]), opts(tmp_path), runner)
    assert rep.verdict == "worse" and rep.ci[1] < 0


def test_patched_failure_stops_and_is_diagnosed(tmp_path):
    job = make_job(tmp_path)
    runner = RecordedTrialRunner({"baseline": [steps(0.3)]}, failures={"patched": "oom"})
    rep = run_verify(job, variants(job, ["per_device_train_batch_size=8"]), opts(tmp_path), runner)
    assert rep.verdict == "failed" and rep.failure.arm == "patched" and rep.failure.status == "oom"
    assert runner.order == ["baseline", "patched"]


def test_prevalidated_breakage_runs_the_patched_arm_first(tmp_path):
    job = make_job(tmp_path)
    runner = RecordedTrialRunner({"baseline": [steps(0.3)]}, failures={"patched": "crashed"})
    rep = run_verify(job, variants(job, ["gradient_checkpointing=maybe"]), opts(tmp_path), runner)
    assert runner.order == ["patched"]  # one trial for a patch ms-swift rejects; the baseline is never run
    assert rep.verdict == "failed" and "invalid bool" in rep.failure.prevalidation[0]


def test_baseline_failure(tmp_path):
    job = make_job(tmp_path)
    runner = RecordedTrialRunner({"patched": [steps(0.2)]}, failures={"baseline": "crashed"})
    rep = run_verify(job, variants(job, ["dataloader_num_workers=4"]), opts(tmp_path), runner)
    assert rep.verdict == "failed" and rep.failure.arm == "baseline" and "unpatched" in rep.reason
    assert runner.order == ["baseline"]


def test_ablation_shows_which_change_pays(tmp_path):
    job = make_job(tmp_path)
    arms = {"baseline": [steps(0.300), steps(0.305)],
            "only --gradient_checkpointing false": [steps(0.200), steps(0.202)],
            "only --dataloader_num_workers 4": [steps(0.301), steps(0.299)],
            "patched": [steps(0.199), steps(0.203)]}
    runner = RecordedTrialRunner(arms)
    vs = variants(job, ["gradient_checkpointing=false", "dataloader_num_workers=4"], ablate=True)
    rep = run_verify(job, vs, opts(tmp_path, max_repeats=2), runner)
    assert runner.order[:4] == list(arms)
    rows = {r.label: r.verdict for r in rep.ablation}
    assert rows == {"only --gradient_checkpointing false": "confirmed",
                    "only --dataloader_num_workers 4": "not_confirmed", "patched": "confirmed"}
    assert rep.verdict == "confirmed"


def test_disturbed_trials_are_rerun_and_never_make_a_gain(tmp_path):
    # GIVEN a runner whose baseline trials look slow only because neighbours saturated the CPUs
    job = make_job(tmp_path)

    class Noisy(RecordedTrialRunner):
        def run(self, spec, on_step=None):
            r = super().run(spec, on_step)
            if spec.arm == "baseline":
                r.disturbed = True
            return r

    runner = Noisy({"baseline": [steps(0.40), steps(0.42)], "patched": [steps(0.30), steps(0.301)]})
    rep = run_verify(job, variants(job, ["dataloader_num_workers=4"]), opts(tmp_path, max_reruns=1), runner)
    # THEN one re-run, and no confirmed gain from disturbed trials alone
    assert sum(t.replaced for t in rep.trials) == 1
    assert rep.verdict == "not_confirmed" and "disturbed" in rep.reason


def test_reports(tmp_path):
    job = make_job(tmp_path)
    runner = RecordedTrialRunner({"baseline": [steps(0.300), steps(0.310)], "patched": [steps(0.200), steps(0.205)]})
    rep = run_verify(job, variants(job, ["gradient_checkpointing=false"]), opts(tmp_path), runner)
    doc = report_json(rep)
    json.dumps(doc)  # JSON-safe
    assert {"verdict", "metric", "gain", "ci", "baseline", "patched", "trials"} <= set(doc)
    assert doc["metric"] == "samples_per_s" and len(doc["ci"]) == 2 and len(doc["trials"]) == 4
    assert doc["trials"][0]["step_times_s"][0] == 20.0
    md = report_markdown(rep)
    assert md.startswith("# swiftdoc verify: CONFIRMED") and re.search(r"\| 4 \| patched \| 2 \| all \| \d+–\d+ \| ok \|", md)
    from rich.console import Console

    buf = io.StringIO()
    print_report(rep, Console(file=buf, width=160, color_system=None))
    text = buf.getvalue()
    assert "CONFIRMED: +" in text and "--gradient_checkpointing false [safe]" in text
    assert "samples/s" in text and "loss parity" in text
