"""attach against a real `swift sft` on CPU, from start to finish, by PID and by output dir.

The log must be followed live (several different steps seen while the job runs)
and the final diagnosis must equal `swiftdoc analyze` on the finished files.
Skipped with the reason when no ms-swift CLI is found: set SWIFTDOC_SWIFT to a
`swift` executable, install `.[swift]`, or provide /work/venvs/swift46.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _find_swift() -> str | None:
    for c in (os.environ.get("SWIFTDOC_SWIFT"), shutil.which("swift", path=str(Path(sys.executable).parent)),
              "/work/venvs/swift46/bin/swift"):
        if c and os.path.exists(c):
            return c
    return None


SWIFT = _find_swift()
pytestmark = [pytest.mark.swift, pytest.mark.slow,
              pytest.mark.skipif(SWIFT is None, reason="ms-swift CLI not found (set SWIFTDOC_SWIFT or pip install -e '.[swift]')"),
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="attach reads /proc (Linux)")]
OFFLINE = {"HF_HUB_OFFLINE": "1", "MODELSCOPE_OFFLINE": "1", "USE_HF": "1", "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Model + data built with the swift venv's interpreter (it has torch and transformers)."""
    d = tmp_path_factory.mktemp("attach_swift")
    py = str(Path(SWIFT).parent / "python")
    code = ("import sys, json; sys.path.insert(0, %r); import tinyjob\n"
            "m = tinyjob.build_tiny_model(%r); data = tinyjob.build_dataset(%r, n=200)\n"
            "print(json.dumps([str(m), str(data)]))" % (str(ROOT / "fixtures"), str(d / "model"), str(d / "data.jsonl")))
    p = subprocess.run([py, "-c", code], capture_output=True, text=True, timeout=600, env={**os.environ, **OFFLINE})
    assert p.returncode == 0, p.stderr[-3000:]
    model, data = json.loads(p.stdout.strip().splitlines()[-1])
    sys.path.insert(0, str(ROOT / "fixtures"))
    import tinyjob

    return tinyjob, d, model, data


def _start(tiny, name: str, steps: int = 150):
    tinyjob, d, model, data = tiny
    out = d / name / "out"
    out.mkdir(parents=True)
    log = d / name / "train.log"
    argv = tinyjob.sft_argv(model, data, out, swift=SWIFT, max_steps=steps)
    fh = log.open("wb")
    p = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=tinyjob.swift_env(OFFLINE),
                         start_new_session=True)
    fh.close()
    return p, out, log


def _attach(target: str, timeout: float = 900) -> list[dict]:
    r = subprocess.run([sys.executable, "-m", "diagnose", "attach", target, "--format", "json", "--poll", "0.1",
                        "--timeout", str(timeout)], capture_output=True, text=True, timeout=timeout + 60)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "log-only mode" in r.stderr or "notice" not in r.stderr  # no NVML here: one-line notice at most
    return [json.loads(x) for x in r.stdout.splitlines() if x.strip()]


def _analyze(paths: list[str]) -> dict:
    r = subprocess.run([sys.executable, "-m", "diagnose", "analyze", *paths, "--format", "json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _check(lines: list[dict], p: subprocess.Popen, steps: int) -> None:
    live_steps = [x["attach"]["progress"]["step"] for x in lines
                  if x["attach"]["alive"] and x["attach"]["progress"]]
    # followed live: several distinct steps were seen while the job ran, in order
    assert len(set(live_steps)) >= 3, live_steps
    assert live_steps == sorted(live_steps)
    final = lines[-1]
    assert final["attach"]["ended"] is True and final["attach"]["alive"] is False
    assert final["run"]["last_step"]["step"] == steps
    assert final["target"]["pid"] == p.pid
    keys = ("schema_version", "primary", "findings", "skipped", "dropped", "notes", "run")
    want = _analyze(final["target"]["logs"])
    assert {k: final[k] for k in keys} == {k: want[k] for k in keys}
    assert final["primary"]["category"] == "healthy", final["findings"]


def test_attach_by_pid_start_to_finish(tiny):
    p, out, log = _start(tiny, "by_pid")
    try:
        lines = _attach(str(p.pid))
        assert p.wait(timeout=60) == 0
    finally:
        if p.poll() is None:
            os.killpg(p.pid, 9)
            p.wait()
    _check(lines, p, 150)
    assert lines[-1]["target"]["log"] == str(log)


def test_attach_by_output_dir_start_to_finish(tiny):
    p, out, log = _start(tiny, "by_dir")
    try:
        time.sleep(0.5)  # the process exists; its run folder does not yet
        lines = _attach(str(out))
        assert p.wait(timeout=60) == 0
    finally:
        if p.poll() is None:
            os.killpg(p.pid, 9)
            p.wait()
    _check(lines, p, 150)
    assert Path(lines[-1]["target"]["run_dir"]).parent == out


from fixtures.make_rank_faults import HANG_PLUGIN, SLOW_PLUGIN  # noqa: E402 (the committed captures' plugins)


def _kill_job(job: subprocess.Popen, marker: Path) -> None:
    """torchrun's workers leave the launcher's process group: kill every process of the job by its output dir."""
    import signal

    for pid in [int(x) for x in os.listdir("/proc") if x.isdigit()]:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if str(marker) in cmd and pid != os.getpid():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    try:
        os.killpg(job.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    job.wait()


NO_PY_SPY = shutil.which("py-spy", path=str(Path(sys.executable).parent)) is None and shutil.which("py-spy") is None


@pytest.mark.skipif(NO_PY_SPY, reason="py-spy is not installed")
def test_a_real_hung_rank_is_localised_from_the_stacks(tiny):
    # GIVEN a real 2-rank `swift sft` over gloo whose rank 1 stops for good at step 3 (an external plugin)
    tinyjob, d, model, data = tiny
    (d / "hang").mkdir()
    plugin = d / "hang" / "plugin.py"
    plugin.write_text(HANG_PLUGIN)
    log = d / "hang" / "train.log"
    argv = tinyjob.sft_argv(model, data, d / "hang" / "out", swift=SWIFT, max_steps=40, ddp_backend="gloo",
                            external_plugins=str(plugin))
    env = tinyjob.swift_env({**OFFLINE, "NPROC_PER_NODE": "2", "MASTER_PORT": "29571", "OMP_NUM_THREADS": "1"})
    with log.open("wb") as fh:
        job = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    hangs: list[dict] = []
    attach = subprocess.Popen([sys.executable, "-m", "diagnose", "attach", str(job.pid), "--format", "json",
                               "--no-gpu", "--hang-after", "15", "--timeout", "240"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # WHEN attach follows it by PID and the log stays silent for 15 s (read until a localisation arrives)
        for line in attach.stdout:
            h = json.loads(line)["attach"]["hang"] if line.strip() else None
            if h:
                hangs.append(h)
                if h.get("odd"):  # a silent start-up (both ranks loading) has none: read on
                    break
    finally:
        attach.kill()
        attach.wait()
        _kill_job(job, d / "hang" / "out")
    assert hangs, f"no hang localised; stderr: {attach.stderr.read()[-1000:]}\n{log.read_text()[-2000:]}"
    # THEN the stacks name rank 1, stuck outside the collective rank 0 waits in
    odd = hangs[-1]["odd"]
    assert odd is not None, hangs[-1]
    assert odd["rank"] == 1 and odd["where"].startswith("_read_next_shard_forever (plugin.py:"), odd
    assert "distributed_c10d.py" in odd["others_wait_in"]
    assert hangs[-1]["stalled_s"] >= 15





@pytest.mark.skipif(NO_PY_SPY, reason="py-spy is not installed")
def test_a_real_straggler_is_named_while_the_job_trains(tiny):
    # GIVEN a real 2-rank DDP `swift sft` over gloo (--use_cpu true) whose rank 1 sleeps 0.6 s in every step
    tinyjob, d, model, data = tiny
    (d / "slow").mkdir()
    plugin = d / "slow" / "plugin.py"
    plugin.write_text(SLOW_PLUGIN)
    log = d / "slow" / "train.log"
    argv = tinyjob.sft_argv(model, data, d / "slow" / "out", swift=SWIFT, max_steps=40, ddp_backend="gloo",
                            use_cpu="true", external_plugins=str(plugin))
    env = tinyjob.swift_env({**OFFLINE, "NPROC_PER_NODE": "2", "MASTER_PORT": "29573", "OMP_NUM_THREADS": "1"})
    with log.open("wb") as fh:
        job = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    found: list[dict] = []
    attach = subprocess.Popen([sys.executable, "-m", "diagnose", "attach", str(job.pid), "--format", "json",
                               "--no-gpu", "--rank-stacks", "0.5", "--timeout", "240"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # WHEN attach follows it by PID, taking both ranks' stacks every 0.5 s while it trains
        for line in attach.stdout:
            doc = json.loads(line) if line.strip() else {}
            if doc.get("stragglers"):
                found = doc["stragglers"]
                break
    finally:
        attach.kill()
        attach.wait()
        _kill_job(job, d / "slow" / "out")
    assert found, f"no straggler named; stderr: {attach.stderr.read()[-1000:]}\n{log.read_text()[-2000:]}"
    # THEN rank 1 is named, with where it spends its time
    (s,) = found
    assert s["rank"] == 1 and s["gpu"] is None and s["slowdown"] > 1.5
    assert "_slow_input_pipeline (plugin.py" in s["evidence"]
