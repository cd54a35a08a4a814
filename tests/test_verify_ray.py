"""verify through Ray, end to end on this machine: `--ray local`, a Ray head started by the test, Ctrl-C.

Skipped without Ray (the `ray` extra) or ms-swift.  Each trial is a Ray actor running the real `swift sft`.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_verify_swift import SWIFT, _disturbed, tiny_job

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "fixtures"))
RAY = shutil.which("ray", path=str(Path(sys.executable).parent))

pytestmark = [pytest.mark.swift, pytest.mark.slow,
              pytest.mark.skipif(SWIFT is None, reason="ms-swift CLI not installed (pip install -e '.[swift]')"),
              pytest.mark.skipif(RAY is None, reason="Ray not installed (pip install -e '.[ray]')"),
              pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="two slots need two CPU cores")]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_job(tmp_path_factory, "ray")


def _trainers(marker: str) -> list[int]:
    """Every live process of a trial of this test's job (they run under Ray's workers, not under verify)."""
    out = []
    for pid in [int(x) for x in os.listdir("/proc") if x.isdigit()]:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
        except (OSError, IndexError):
            continue
        if marker in cmd and "swift" in cmd and "diagnose" not in cmd and state != "Z":
            out.append(pid)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ray_local_runs_the_trials_as_ray_actors_side_by_side(tiny):
    p = subprocess.run([sys.executable, "-m", "diagnose", "verify", "train.sh", "--set", "gradient_checkpointing=false",
                        "--slots", "2", "--repeats", "1", "--max-repeats", "3", "--ray", "local", "--format", "json",
                        "--no-progress", "--max-steps", "16", "--swift", SWIFT], cwd=tiny, capture_output=True,
                       text=True, timeout=900)
    doc = json.loads(p.stdout) if p.stdout.strip().startswith("{") else pytest.fail(p.stderr[-3000:])
    used = [t for t in doc["trials"] if not t["replaced"]]
    assert {t["executor"] for t in used} == {"ray"} and {t["slot"] for t in used} == {"cpu:0", "cpu:1"}
    assert any(a["slot"] != b["slot"] and a["start_s"] < b["end_s"] and b["start_s"] < a["end_s"]
               for a in used for b in used), "no two trials overlapped"
    for t in used:
        assert t["status"] == "ok" and t["steps_done"] == 16
    if doc["verdict"] != "confirmed" and _disturbed(doc):
        pytest.skip(f"other processes saturated the CPUs during trials {_disturbed(doc)}: {doc['reason']}")
    assert doc["verdict"] == "confirmed", (doc["reason"], [(t["arm"], t["slot"], t["samples_per_s"]) for t in used])
    assert not _trainers(str(tiny)), "a trial process outlived verify"
    assert subprocess.run(["pgrep", "-f", "raylet"], capture_output=True).returncode != 0, "the local Ray was not stopped"


def test_ctrl_c_during_trials_on_a_ray_head_leaves_no_trial_process(tiny, tmp_path):
    # GIVEN a Ray head started by the test (as on a cluster), and verify submitting to it
    port = _free_port()
    # (Ray's sockets live under /tmp: no long TMPDIR; no token auth between the test's head and verify)
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")
    subprocess.run([RAY, "start", "--head", "--port", str(port), "--num-cpus", "2", "--include-dashboard=false",
                    "--disable-usage-stats"], check=True, capture_output=True, env=env, timeout=180)
    try:
        p = subprocess.Popen([sys.executable, "-m", "diagnose", "verify", "train.sh", "--set",
                              "gradient_checkpointing=false", "--slots", "2", "--ray", f"127.0.0.1:{port}",
                              "--no-progress", "--max-steps", "200", "--swift", SWIFT], cwd=tiny, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and len([q for q in _trainers(str(tiny)) if "sft.py" in
                                                   Path(f"/proc/{q}/cmdline").read_bytes().decode(errors="replace")]) < 2:
            if p.poll() is not None:
                pytest.fail(f"verify ended early: {p.communicate()[1][-2000:]}")
            time.sleep(0.5)
        assert len(_trainers(str(tiny))) >= 2, "the two trials did not start on the Ray workers"
        time.sleep(1.0)
        # WHEN the user presses Ctrl-C
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
        # THEN verify stops (130) and no trial process is left on the workers
        assert p.returncode == 130, err[-2000:]
        time.sleep(1.0)
        assert not _trainers(str(tiny)), f"left behind: {_trainers(str(tiny))}"
    finally:
        subprocess.run([RAY, "stop", "--force"], capture_output=True, env=env, timeout=120)


def test_a_ray_address_that_does_not_answer_is_one_line_and_exit_3(tiny):
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "diagnose", "verify", "train.sh", "--set", "gradient_checkpointing=false",
                        "--ray", "127.0.0.1:1", "--no-progress", "--swift", SWIFT], cwd=tiny, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 3 and "Traceback" not in p.stderr
    assert p.stderr.startswith("error: the Ray address 127.0.0.1:1 does not answer"), p.stderr
    assert time.monotonic() - t0 < 20
