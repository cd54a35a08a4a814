"""verify with slots, end to end: real `swift sft` trials running side by side on this machine's cores.

Two slots on two cores (each trial pinned to its core, OMP_NUM_THREADS=1).  Skipped without ms-swift, or on a
machine with fewer than two cores.  A shared machine can saturate the CPUs during a trial; verify measures that
(`disturbed`) and the gain test skips, with the reason, when contention left it without a verdict.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_verify_swift import SWIFT, _disturbed, interrupt_leaves_nothing, tiny_job

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "fixtures"))

pytestmark = [pytest.mark.swift, pytest.mark.slow,
              pytest.mark.skipif(SWIFT is None, reason="ms-swift CLI not installed (pip install -e '.[swift]')"),
              pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="two slots need two CPU cores")]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_job(tmp_path_factory, "slots")


def verify(d: Path, *args: str, steps: int = 12, timeout: float = 900) -> tuple[int, dict]:
    p = subprocess.run([sys.executable, "-m", "diagnose", "verify", "train.sh", *args, "--format", "json",
                        "--no-progress", "--max-steps", str(steps), "--swift", SWIFT], cwd=d, capture_output=True,
                       text=True, timeout=timeout)
    try:
        return p.returncode, json.loads(p.stdout)
    except ValueError:
        pytest.fail(f"no JSON (rc {p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")


def _overlapping(trials: list[dict]) -> list[tuple[int, int]]:
    return [(a["index"], b["index"]) for i, a in enumerate(trials) for b in trials[i + 1:]
            if a["slot"] != b["slot"] and a["start_s"] < b["end_s"] and b["start_s"] < a["end_s"]]


def test_two_slots_confirm_gradient_checkpointing_off_with_trials_side_by_side(tiny):
    # WHEN verify runs baseline and patched side by side, one trial per core, every arm in every slot per round
    rc, doc = verify(tiny, "--set", "gradient_checkpointing=false", "--slots", "2", "--repeats", "1",
                     "--max-repeats", "3", steps=16)
    used = [t for t in doc["trials"] if not t["replaced"]]
    assert {t["slot"] for t in doc["trials"]} == {"cpu:0", "cpu:1"} and {t["executor"] for t in used} == {"local"}
    # THEN trials really overlapped in time, in different slots
    assert len(_overlapping(used)) >= 2, [(t["index"], t["slot"], t["start_s"], t["end_s"]) for t in used]
    for t in used:
        assert t["status"] == "ok" and t["steps_done"] == 16 and t["end_s"] > t["start_s"] >= 0
    assert {r["slot"] for r in doc["slots"]} == {"cpu:0", "cpu:1"} and all(r["relative"] for r in doc["slots"])
    if doc["verdict"] != "confirmed" and _disturbed(doc):
        pytest.skip(f"other processes saturated the CPUs during trials {_disturbed(doc)}: {doc['reason']}")
    # and the gain (about 1.3-1.5x on CPU) is confirmed with the slot (and the wave, when there are several) as blocks
    assert doc["verdict"] == "confirmed", (doc["reason"], [(t["arm"], t["slot"], t["samples_per_s"]) for t in used])
    assert rc == 0 and doc["ci"][0] > 0 and "as blocks" in doc["reason"] and "slot" in doc["reason"]
    assert doc["loss_parity"]["checked"] and doc["loss_parity"]["ok"]
    # every arm ran in every slot
    assert {(t["arm"], t["slot"]) for t in used} == {(a, s) for a in ("baseline", "patched") for s in ("cpu:0", "cpu:1")}


def test_a_no_op_is_not_confirmed_in_two_slots(tiny):
    rc, doc = verify(tiny, "--env", "SWIFTDOC_VERIFY_NOOP=1", "--slots", "2", "--repeats", "1", "--max-repeats", "2")
    assert doc["verdict"] == "not_confirmed", (doc["reason"], [(t["arm"], t["samples_per_s"]) for t in doc["trials"]])
    assert rc == 1


def test_a_sweep_of_dataloader_workers_is_ranked(tiny):
    # WHEN three candidates of dataloader_num_workers (the job has 0) are tried against the baseline in two slots
    rc, doc = verify(tiny, "--try", "dataloader_num_workers=1,2", "--candidate", "dataloader_num_workers=1 "
                     "dataloader_pin_memory=false", "--slots", "2", "--repeats", "1", "--max-repeats", "1")
    cands = doc["candidates"]
    # THEN each candidate has a verdict, a gain and an interval, ranked: confirmed first, then by gain
    assert sorted(c["label"] for c in cands) == sorted(["--dataloader_num_workers 1", "--dataloader_num_workers 2",
                                                       "--dataloader_num_workers 1 --dataloader_pin_memory false"])
    order = {"confirmed": 0, "not_confirmed": 1, "worse": 2, "failed": 3}
    keys = [(order[c["verdict"]], -(c["gain"] if c["gain"] is not None else -1e9)) for c in cands]
    assert keys == sorted(keys)
    used = [t for t in doc["trials"] if not t["replaced"]]
    for c in cands:
        assert c["verdict"] in order and c["gain"] is not None and c["ci"] is not None
        assert len([t for t in used if t["arm"] == c["label"]]) == 2 and c["trials"] >= 2  # + any re-run
    assert doc["patched"]["label"] == cands[0]["label"] and doc["verdict"] == cands[0]["verdict"]
    # every arm once in every slot, and the baseline too
    assert len({(t["arm"], t["slot"]) for t in used}) == 8


def test_ctrl_c_during_concurrent_trials_leaves_no_process(tiny, tmp_path):
    # both trials of the first wave (one per slot) are running when the user presses Ctrl-C
    interrupt_leaves_nothing(tiny, tmp_path, ["--set", "gradient_checkpointing=false", "--slots", "2"], trainers=2)
