"""Slots, waves and sweeps of verify: the pure schedule, and whole experiments over replayed trials."""
from __future__ import annotations

import itertools

import pytest

from diagnose.patch.plan import parse_assignments
from diagnose.verify import job as J
from diagnose.verify.executor import Slot, SlotError, plan_slots
from diagnose.verify.experiment import VerifyOptions, run_verify
from diagnose.verify.schedule import round_waves
from diagnose.verify.trial import RecordedTrialRunner


def make_job(tmp_path):
    return J.job_from_argv(["swift", "sft", "--model", "m", "--dataset", "d.jsonl", "--per_device_train_batch_size",
                            "4", "--gradient_accumulation_steps", "4"], swift="swift", version="4.6.0", cwd=str(tmp_path))


def steps(t, n=12, start=20.0):
    return [start] + [t] * (n - 1)


def opts(tmp_path, **kw):
    kw.setdefault("max_steps", 12)
    return VerifyOptions(workdir=str(tmp_path / "w"), **kw)


@pytest.mark.parametrize("k,n,rnd", list(itertools.product([2, 3, 5], [1, 2, 3, 4], [1, 2])))
def test_every_round_runs_every_arm_once_in_every_slot(k, n, rnd):
    arms = [f"a{i}" for i in range(k)]
    waves = round_waves(arms, n, rnd)
    assert len(waves) == k and all(len(w) == n for w in waves)  # a wave never holds more trials than slots
    for s in range(n):
        assert sorted(arm for w in waves for slot, arm in w if slot == s) == arms
    if k >= n:  # no arm twice in one wave when there are enough arms
        assert all(len({a for _s, a in w}) == n for w in waves)


def test_one_slot_keeps_the_alternating_order():
    assert round_waves(["baseline", "patched"], 1) == [[(0, "baseline")], [(0, "patched")]]
    # two slots: the arms swap slots from one wave to the next
    assert round_waves(["b", "p"], 2, 1) == [[(0, "b"), (1, "p")], [(0, "p"), (1, "b")]]


def test_cpu_slots_split_the_cores_and_too_many_slots_is_one_clear_error():
    import os

    cores = sorted(os.sched_getaffinity(0))
    no_gpu = lambda: None  # noqa: E731
    slots = plan_slots(len(cores), env={}, probe=no_gpu)
    assert [s.cpus for s in slots] == [[c] for c in cores] and slots[0].env["OMP_NUM_THREADS"] == "1"
    assert plan_slots(None, env={}, probe=no_gpu) == [Slot("all")]
    with pytest.raises(SlotError, match=f"{len(cores) + 1} slots need at least"):
        plan_slots(len(cores) + 1, env={}, probe=no_gpu)


def _gpus(*names, busy=()):
    return lambda: [{"index": i, "name": n, "mem_used_mib": 5000 if i in busy else 3, "procs": 1 if i in busy else 0}
                    for i, n in enumerate(names)]


def test_gpu_slots_are_disjoint_same_model_and_free():
    slots = plan_slots(2, env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, probe=_gpus(*["NVIDIA H100 80GB HBM3"] * 4))
    assert [s.name for s in slots] == ["gpu:0,1", "gpu:2,3"]
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in slots] == ["0,1", "2,3"]
    assert [s.name for s in plan_slots(None, 1, env={}, probe=_gpus("A", "A", "A"))] == ["gpu:0", "gpu:1", "gpu:2"]
    with pytest.raises(SlotError, match="need 6 GPUs; 4 visible"):
        plan_slots(3, 2, env={}, probe=_gpus(*["H100"] * 4))
    with pytest.raises(SlotError, match="not the same model"):
        plan_slots(2, env={}, probe=_gpus("NVIDIA A100-SXM4-80GB", "NVIDIA A100-PCIE-40GB"))
    with pytest.raises(SlotError, match=r"GPU\(s\) 1 are busy"):
        plan_slots(2, env={}, probe=_gpus("H100", "H100", busy=(1,)))


def test_two_slots_confirm_a_gain_and_name_the_slower_slot(tmp_path):
    # GIVEN a 1.5x gain, and slot cpu:1 running 25% slower than cpu:0 for every arm
    job = make_job(tmp_path)
    v = J.build_variants(job, J.units_from_requests(job, parse_assignments(["gradient_checkpointing=false"], "set"), True))
    runner = RecordedTrialRunner({"baseline": [steps(0.300), steps(0.306)], "patched": [steps(0.200), steps(0.203)]},
                                 slot_speed={"cpu:0": 1.0, "cpu:1": 0.75})
    slots = [Slot("cpu:0", cpus=[0]), Slot("cpu:1", cpus=[1])]
    rep = run_verify(job, v, opts(tmp_path), runner, slots=slots)
    # THEN both arms ran in both slots each round, and the gain is confirmed with the slot effect taken out
    assert rep.verdict == "confirmed" and rep.gain == pytest.approx(0.5, abs=0.03)
    per = {(t.arm, t.slot) for t in rep.trials}
    assert per == {("baseline", "cpu:0"), ("baseline", "cpu:1"), ("patched", "cpu:0"), ("patched", "cpu:1")}
    assert all(t.executor == "local" and t.start_s is not None and t.end_s >= t.start_s for t in rep.trials)
    rows = {r.slot: r for r in rep.slots}
    assert rows["cpu:1"].slow and not rows["cpu:0"].slow and rows["cpu:1"].relative == pytest.approx(0.866, abs=0.01)
    assert any("slot cpu:1 runs consistently slower" in n for n in rep.notes)
    # the CI is tight because the slot is a block: raw throughputs (slot effect left in) would straddle far wider
    assert rep.ci[1] - rep.ci[0] < 0.1


def test_a_sweep_ranks_its_candidates_and_drops_the_clearly_worse_early(tmp_path):
    job = make_job(tmp_path)
    cands = [(f"--dataloader_num_workers {w}", parse_assignments([f"dataloader_num_workers={w}"], "set")) for w in (1, 2, 4)]
    v = J.sweep_variants(job, [], [(lab, J.units_from_requests(job, r, True)) for lab, r in cands])
    runner = RecordedTrialRunner({"baseline": [steps(0.30), steps(0.31)],
                                  "--dataloader_num_workers 1": [steps(0.45), steps(0.46)],
                                  "--dataloader_num_workers 2": [steps(0.25), steps(0.255)],
                                  "--dataloader_num_workers 4": [steps(0.20), steps(0.202)]})
    rep = run_verify(job, v, opts(tmp_path, sweep=True, repeats=2, max_repeats=3),
                     runner, slots=[Slot("cpu:0", cpus=[0]), Slot("cpu:1", cpus=[1])])
    labels = [c.label for c in rep.candidates]
    assert labels == ["--dataloader_num_workers 4", "--dataloader_num_workers 2", "--dataloader_num_workers 1"]
    assert rep.verdict == "confirmed" and rep.patched.label == "--dataloader_num_workers 4"
    assert [c.verdict for c in rep.candidates] == ["confirmed", "confirmed", "worse"]
    assert rep.candidates[0].gain > rep.candidates[1].gain > 0 > rep.candidates[2].gain
    assert rep.candidates[0].ci[0] > 0
    # the clearly worse one got one round (one trial per slot), the others two
    worst = rep.candidates[2]
    assert worst.stopped_early and worst.trials == 2 and rep.candidates[0].trials == 4
    assert "clearly worse after round 1" in worst.reason


def test_the_best_confirmed_candidate_becomes_the_patch_to_apply(tmp_path):
    import argparse

    from diagnose.commands.verify import _best_patch, _candidates

    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\nswift sft \\\n    --model m --dataset d.jsonl \\\n    --dataloader_num_workers 0 \\\n"
                      "    --output_dir out\n")
    job = J.job_from_script(str(script), swift="swift", version="4.6.0", cwd=str(tmp_path))
    cands = _candidates(["dataloader_num_workers=2,4"], [])
    v = J.sweep_variants(job, [], [(lab, J.units_from_requests(job, r, True)) for lab, r in cands])
    runner = RecordedTrialRunner({"baseline": [steps(0.30), steps(0.31)], "--dataloader_num_workers 2": [steps(0.25)],
                                  "--dataloader_num_workers 4": [steps(0.20), steps(0.201)]})
    rep = run_verify(job, v, opts(tmp_path, sweep=True), runner)
    assert rep.verdict == "confirmed" and rep.patched.label == "--dataloader_num_workers 4"
    bp = _best_patch([str(script)], argparse.Namespace(line=None), job, rep, cands, [])
    assert bp["command"] == f"swiftdoc patch {script} --set dataloader_num_workers=4 --write"
    assert "-    --dataloader_num_workers 0 \\" in bp["diff"] and "+    --dataloader_num_workers 4 \\" in bp["diff"]
    assert script.read_text().count("--dataloader_num_workers 0") == 1  # verify never edits the script


class _FakeRay:
    """Just enough of `ray` for the checks RayExecutor makes before any trial (the real Ray is in test_verify_ray)."""

    def __init__(self, resources, probe):
        self.resources, self.probe = resources, probe

    def cluster_resources(self):
        return self.resources

    def remote(self, *a, **kw):
        def deco(obj):
            class _R:
                def options(self, **kw):
                    return self

                def remote(self, *args):
                    return ("probe", args)

            return _R() if callable(obj) and not isinstance(obj, type) else obj
        return deco if not a or not callable(a[0]) else deco(a[0])

    def get(self, ref, timeout=None):
        return self.probe


def _executor(fake):
    from diagnose.verify.ray_executor import RayExecutor

    ex = RayExecutor.__new__(RayExecutor)
    ex.ray, ex.runtime_env, ex.remote = fake, None, True
    return ex


def test_a_ray_worker_without_ms_swift_or_resources_is_refused_before_any_trial():
    from diagnose.verify.ray_executor import RayUnavailable

    job = J.job_from_argv(["swift", "sft", "--model", "m", "--dataset", "d"], swift="/no/such/swift", version="4.6.0", cwd=".")
    no_swift = _executor(_FakeRay({"CPU": 8.0}, {"host": "w1", "module": False, "cli": None, "python": "/usr/bin/python3"}))
    with pytest.raises(RayUnavailable, match="the Ray worker on w1 has no ms-swift") as e:
        no_swift._probe_swift(job)
    assert e.value.exit_code == 3
    ok = _executor(_FakeRay({"CPU": 8.0}, {"host": "w1", "module": True, "cli": "/opt/venv/bin/swift", "python": "p"}))
    assert ok._probe_swift(job) == "/opt/venv/bin/swift"
    with pytest.raises(RayUnavailable, match="has 0 GPU"):
        ok._check_resources([Slot("gpu:0,1", gpus=[0, 1])])
    with pytest.raises(RayUnavailable, match="has 1 CPU"):
        _executor(_FakeRay({"CPU": 1.0}, None))._check_resources([Slot("cpu:0,1", cpus=[0, 1])])


def test_one_round_in_two_slots_is_never_decisive_and_a_second_round_runs(tmp_path):
    job = make_job(tmp_path)
    v = J.build_variants(job, J.units_from_requests(job, parse_assignments(["gradient_checkpointing=false"], "set"), True))
    runner = RecordedTrialRunner({"baseline": [steps(0.300), steps(0.302)], "patched": [steps(0.200), steps(0.201)]})
    slots = [Slot("cpu:0", cpus=[0]), Slot("cpu:1", cpus=[1])]
    once = run_verify(job, v, opts(tmp_path, repeats=1, max_repeats=1), runner, slots=slots)
    # slot and wave as blocks: one round (2 waves of 2 trials) leaves no degree of freedom for the noise
    assert once.verdict == "not_confirmed" and once.ci is None and "the limit (--max-repeats 1)" in once.stopped_because
    again = run_verify(job, v, opts(tmp_path, repeats=1, max_repeats=4), runner, slots=slots)
    # two rounds leave 2 degrees of freedom, below the 3 a decisive verdict needs: a third round decides
    assert again.verdict == "confirmed" and again.settings["rounds"] == 3 and again.df >= 3
    assert again.stopped_because == "decided after 3 round(s)"


class _BusyMachine(RecordedTrialRunner):
    """A shared machine: whatever else runs slows every trial of a wave alike, by a different factor each wave
    (0.45-1.0), and the contention monitor flags every trial as disturbed."""

    def __init__(self, *a, factors, **kw):
        super().__init__(*a, **kw)
        self.factors = factors

    def run(self, spec, on_step=None):
        wave = (spec.index - 1) // 2
        f = self.factors[wave % len(self.factors)]
        self.slot_speed = {"cpu:0": f * 1.01, "cpu:1": f * 0.99}
        res = super().run(spec, on_step)
        res.disturbed = True
        res.external_cpu_cores = 1.5
        return res


def test_two_slots_decide_on_a_busy_machine(tmp_path):
    """Issue #18: on a shared machine every wave favoured the patch by ~40% and verify still ended not_confirmed.
    Side by side, the wave is a block: the machine's load drops out and the default schedule decides."""
    import random

    rng = random.Random(7)
    factors = [rng.uniform(0.45, 1.0) for _ in range(40)]
    job = make_job(tmp_path)
    v = J.build_variants(job, J.units_from_requests(job, parse_assignments(["gradient_checkpointing=false"], "set"), True))
    jitter = [1.0, 1.02, 0.98, 1.01, 0.99, 1.03]
    runner = _BusyMachine({"baseline": [steps(0.30 * j) for j in jitter], "patched": [steps(0.30 / 1.4 * j) for j in
                                                                                     reversed(jitter)]},
                          factors=factors)
    slots = [Slot("cpu:0", cpus=[0]), Slot("cpu:1", cpus=[1])]
    rep = run_verify(job, v, opts(tmp_path, repeats=2, max_repeats=6), runner, slots=slots)
    assert rep.verdict == "confirmed", rep.reason
    assert 0.3 < rep.gain < 0.5 and rep.ci[0] > 0.03
    assert rep.df >= 3 and rep.stopped_because.startswith("decided after")
    assert not any(t.replaced for t in rep.trials)  # a wave disturbed alike is not re-run: it is a block
    assert len({t.wave for t in rep.trials}) == len(rep.trials) // 2


def test_an_undecided_verify_says_why_it_stopped(tmp_path):
    job = make_job(tmp_path)
    v = J.build_variants(job, J.units_from_requests(job, parse_assignments(["gradient_checkpointing=false"], "set"), True))
    runner = RecordedTrialRunner({"baseline": [steps(0.30), steps(0.33), steps(0.27)],
                                  "patched": [steps(0.29), steps(0.32), steps(0.30)]})
    slots = [Slot("cpu:0", cpus=[0]), Slot("cpu:1", cpus=[1])]
    rep = run_verify(job, v, opts(tmp_path, repeats=2, max_repeats=4), runner, slots=slots)
    assert rep.verdict == "not_confirmed" and rep.settings["rounds"] == 4
    assert "the limit (--max-repeats 4)" in rep.stopped_because
    from diagnose.verify.render import report_markdown

    assert "stopped: still undecided after 4 round(s)" in report_markdown(rep)
