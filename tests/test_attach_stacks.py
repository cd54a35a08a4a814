"""Hang localisation: real processes, real py-spy dumps, grouped by where they wait, and the odd one out."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from diagnose.attach.stacks import _py_spy, dump_stacks, localise

pytestmark = pytest.mark.skipif(_py_spy() is None, reason="py-spy is not installed")


@pytest.fixture(scope="module", autouse=True)
def _py_spy_may_read_processes():
    """py-spy needs ptrace rights on the target (a container may withhold them): skip, saying why."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.3)
        err = dump_stacks([p.pid])[p.pid]["error"]
    finally:
        p.kill()
        p.wait()
    if err is not None and ("ermission" in err or "ptrace" in err.lower()):
        pytest.skip(f"py-spy cannot read processes here: {err}")

WAITER = textwrap.dedent("""
    import sys, time
    def all_reduce(tensor):          # stands in for the collective the healthy ranks block in
        time.sleep(120)
    def load_next_batch():           # the rank that never reached the collective
        time.sleep(120)
    def training_step(rank):
        if rank == int(sys.argv[2]):
            load_next_batch()
        else:
            all_reduce(None)
    training_step(int(sys.argv[1]))
""")


def test_the_rank_not_in_the_collective_is_named(tmp_path):
    script = tmp_path / "rank.py"
    script.write_text(WAITER)
    procs = [subprocess.Popen([sys.executable, str(script), str(r), "2"]) for r in range(4)]
    try:
        time.sleep(1.5)  # let every rank reach its wait
        dumps = dump_stacks([p.pid for p in procs])
        assert all(d["error"] is None for d in dumps.values()), dumps
        res = localise(dumps, ranks={p.pid: r for r, p in enumerate(procs)})
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert res["groups"][0]["ranks"] == [0, 1, 3] and res["groups"][0]["where"].startswith("all_reduce (rank.py:")
    odd = res["odd"]
    assert odd["rank"] == 2 and odd["where"].startswith("load_next_batch") and odd["others_wait_in"].startswith("all_reduce")
    assert [f["name"] for f in odd["stack"]][:2] == ["load_next_batch", "training_step"]


def test_no_odd_one_without_a_majority():
    dumps = {1: {"frames": [{"name": "a", "file": "/x/a.py", "line": 1}], "error": None},
             2: {"frames": [{"name": "b", "file": "/x/b.py", "line": 1}], "error": None}}
    assert localise(dumps)["odd"] is None


LAUNCHER = textwrap.dedent("""
    import os, subprocess, sys, time
    print("[INFO:swift] Start time of running main: 2026-11-23 20:00:00", flush=True)
    print("{'loss': 2.5, 'grad_norm': 1.0, 'learning_rate': 1e-05, 'epoch': 0.1, 'global_step/max_steps': '1/100'}", flush=True)
    ranks = [subprocess.Popen([sys.executable, os.environ["RANK_SCRIPT"], str(r), "2"], env={**os.environ, "RANK": str(r)})
             for r in range(4)]
    for p in ranks:
        p.wait()
""")


def test_attach_localises_a_hang_when_the_log_goes_silent(tmp_path):
    # GIVEN a job of four ranks (scripts under a swift/cli/ path, RANK set as torchrun does) whose log
    # stops after one step: rank 2 never reaches the collective the other three wait in
    from diagnose.attach.session import AttachOptions, AttachSession
    from diagnose.attach.target import resolve_target
    from diagnose.errors import InputError

    rank = tmp_path / "swift" / "cli" / "sft.py"
    rank.parent.mkdir(parents=True)
    rank.write_text(WAITER)
    launcher = tmp_path / "torchrun"  # attach follows a swift process only: a command line as torchrun's
    launcher.write_text(LAUNCHER)
    log = tmp_path / "train.log"
    with open(log, "w") as out:
        job = subprocess.Popen([sys.executable, str(launcher), "--nproc_per_node", "4", str(rank)], env={**os.environ, "RANK_SCRIPT": str(rank)}, stdout=out, stderr=subprocess.STDOUT,
                               cwd=tmp_path, start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        target = None
        while time.monotonic() < deadline:  # the ranks start
            try:
                target = resolve_target(str(job.pid))
            except InputError:  # the ranks have not started yet
                time.sleep(0.2)
                continue
            target.refresh()
            if len(target.rank_pids) == 4 and log.stat().st_size > 0:
                break
            time.sleep(0.2)
        assert target is not None and len(target.rank_pids) == 4, target
        session = AttachSession(target, AttachOptions(nvml=False, samples_out=None, hang_after_s=1.5))
        session.start()
        hang = None
        t0 = time.monotonic()
        # WHEN attach follows it and the log stays silent past hang_after_s
        while time.monotonic() - t0 < 30 and hang is None:
            snap = session.update(force=hang is None and time.monotonic() - t0 < 0.1)
            if snap is not None and snap.hang is not None:
                hang = snap
            time.sleep(0.1)
        session.close()
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    # THEN the snapshot names rank 2 and where it waits, and the JSON carries it
    assert hang is not None, "no hang localisation within 30 s"
    assert hang.hang["stalled_s"] >= 1.5
    assert hang.hang["odd"]["rank"] == 2 and hang.hang["odd"]["where"].startswith("load_next_batch (sft.py:")
    assert hang.hang["groups"][0]["ranks"] == [0, 1, 3]
    doc = hang.as_json()
    assert doc["attach"]["hang"]["odd"]["rank"] == 2
    from rich.console import Console

    from diagnose.attach.view import render_snapshot

    con = Console(record=True, width=120)
    con.print(render_snapshot(hang))
    assert "rank 2 waits in load_next_batch" in con.export_text()


def test_the_silence_that_makes_a_hang_follows_the_runs_step_time():
    from diagnose.attach.session import hang_threshold, progress_of
    from diagnose.parse import parse_run
    from tests.conftest import FIXTURES

    run = parse_run([str(FIXTURES / "healthy_4x")])
    spi = progress_of(run)["s_per_it"]
    assert spi and spi > 0
    assert hang_threshold("auto", run) == max(60.0, 10 * spi)
    assert hang_threshold("auto", None) == 300.0  # no step time yet
    assert hang_threshold(12.5, run) == 12.5 and hang_threshold(None, run) is None


def _dump(*frames):
    return {"frames": [{"name": n, "file": f, "line": 1} for n, f in frames], "error": None}


def test_with_two_ranks_the_one_outside_the_collective_is_the_odd_one():
    dumps = {10: _dump(("all_reduce", "/t/torch/distributed/distributed_c10d.py"), ("step", "/s/trainer.py")),
             11: _dump(("fetch", "/p/plugin.py"), ("step", "/s/trainer.py"))}
    res = localise(dumps, ranks={10: 0, 11: 1})
    assert res["odd"]["rank"] == 1 and res["odd"]["where"] == "fetch (plugin.py:1)"
    assert res["odd"]["others_wait_in"] == "all_reduce (distributed_c10d.py:1)"
    both_inside = {10: dumps[10], 11: _dump(("barrier", "/t/torch/distributed/distributed_c10d.py"))}
    assert localise(both_inside)["odd"] is None  # two collectives: a desync, not an odd one out


def _recorded(name: str) -> tuple[list[dict], dict[int, int]]:
    """A fixture's stacks.jsonl (real py-spy dumps of a real 2-rank swift sft) as dump_stacks rounds."""
    import json

    from tests.conftest import FIXTURES

    rows = [json.loads(x) for x in (FIXTURES / name / "stacks.jsonl").read_text().splitlines()]
    rounds: dict[int, dict] = {}
    for r in rows:
        rounds.setdefault(r["round"], {})[r["pid"]] = {"frames": r["frames"], "error": r["error"]}
    return [rounds[k] for k in sorted(rounds)], {r["pid"]: r["rank"] for r in rows}


def test_the_real_straggler_is_named_from_rounds_of_stacks():
    from diagnose.attach.stacks import stragglers_from_stacks

    # GIVEN 12 rounds of both ranks' stacks while rank 1 sleeps 0.6 s per step (fixtures/straggler_2rank_4x)
    rounds, ranks = _recorded("straggler_2rank_4x")
    (s,) = stragglers_from_stacks(rounds, ranks)
    # THEN rank 1 is the straggler, where it spends its time is named, and rank 0 waits in DDP's collectives
    assert s["rank"] == 1 and s["where"].startswith("_slow_input_pipeline (plugin.py")
    assert s["slowdown"] > 2 and "lower bound" in s["evidence"] and "_sync_buffers" in s["evidence"]
    # too few rounds say nothing
    assert stragglers_from_stacks(rounds[:3], ranks) == []


def test_ranks_that_take_turns_are_not_stragglers():
    from diagnose.attach.stacks import stragglers_from_stacks

    work = _dump(("forward", "/m/model.py"))
    wait = _dump(("all_reduce", "/t/torch/distributed/distributed_c10d.py"))
    even = [{1: work, 2: wait} if i % 2 else {1: wait, 2: work} for i in range(12)]
    assert stragglers_from_stacks(even, {1: 0, 2: 1}) == []
    busy = [{1: work, 2: work} for _ in range(12)]
    assert stragglers_from_stacks(busy) == []


def test_the_real_hung_rank_is_localised_from_its_recorded_stacks():
    # GIVEN one round of stacks of a real job whose rank 1 stopped for good at step 3 (fixtures/hang_2rank_4x)
    rounds, ranks = _recorded("hang_2rank_4x")
    res = localise(rounds[0], ranks)
    assert res["odd"]["rank"] == 1 and res["odd"]["where"].startswith("_read_next_shard_forever (plugin.py")
    assert "_distributed_broadcast_coalesced" in res["odd"]["others_wait_in"]  # DDP's buffer broadcast, a collective
