"""Host-side checks: /dev/shm, cores, RAM, and the job's data-loader workers found by process name."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from diagnose import host
from diagnose.host import HOST_KEYS, HostMonitor, host_features

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="host checks read /proc (Linux)")

# a fake ms-swift rank: lives under swift/cli/, forks two "data-loader workers" that name
# themselves pt_data_worker (as torch >= 2.2 does) and burn CPU
RANK = textwrap.dedent("""
    import ctypes, os, sys, time
    def worker():
        ctypes.CDLL(None).prctl(15, b"pt_data_worker", 0, 0, 0)
        end = time.time() + 60
        while time.time() < end:
            sum(range(10000))
    kids = []
    for _ in range(2):
        pid = os.fork()
        if pid == 0:
            worker(); os._exit(0)
        kids.append(pid)
    print("ready", flush=True)
    time.sleep(60)
""")


@pytest.fixture
def fake_job(tmp_path):
    d = tmp_path / "swift" / "cli"
    d.mkdir(parents=True)
    (d / "sft.py").write_text(RANK)
    p = subprocess.Popen([sys.executable, str(d / "sft.py"), "--output_dir", str(tmp_path / "out")],
                         stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert p.stdout.readline().strip() == "ready"
    yield p
    os.killpg(p.pid, 9)
    p.wait()


def test_machine_level_features_without_pid():
    f = host_features()
    assert set(HOST_KEYS) <= set(f)
    assert f["cpu_cores"] >= 1 and f["cpu_cores_total"] >= f["cpu_cores"]
    assert f["host_mem_total_gib"] > 0 and 0 <= f["host_mem_available_frac"] <= 1
    if os.path.isdir("/dev/shm"):
        assert f["shm_total_gib"] > 0 and 0 <= f["shm_used_frac"] <= 1
    # no PID: job numbers are unknown (None), not 0
    assert f["worker_cpu_pct"] is None and f["dataloader_workers_running"] is None and f["job_pids"] is None


def test_shm_missing_is_none(tmp_path):
    f = host.shm_features(str(tmp_path / "nope"))
    assert f == {"shm_total_gib": None, "shm_used_gib": None, "shm_free_gib": None, "shm_used_frac": None}


def test_job_workers_and_their_cpu(fake_job):
    # GIVEN a rank with two busy data-loader workers WHEN measured over 0.5 s
    f = host_features(fake_job.pid, interval_s=0.5)
    # THEN both workers are found and their CPU use is visible
    assert f["rank_processes"] == 1
    assert f["dataloader_workers_running"] == 2
    assert f["worker_cpu_pct"] is not None and f["worker_cpu_pct"] > 30
    assert f["worker_cpu_pct_max"] <= f["worker_cpu_pct"]
    assert f["job_rss_gib"] > 0 and fake_job.pid in f["job_pids"]


def test_monitor_measures_between_calls(fake_job):
    m = HostMonitor(fake_job.pid)
    first = m.features()
    assert first["worker_cpu_pct"] is None  # nothing to compare with yet
    time.sleep(0.3)
    assert m.features()["worker_cpu_pct"] is not None


def test_gone_pid():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    f = host_features(p.pid)
    assert f["job_pids"] is None and f["cpu_cores"] >= 1


def test_cgroup_limit_caps_available_memory(monkeypatch):
    monkeypatch.setattr(host, "_meminfo", lambda: {"MemTotal": 64 * 2**30, "MemAvailable": 60 * 2**30})
    monkeypatch.setattr(host, "_cgroup_limit", lambda pid: (8 * 2**30, 6 * 2**30))
    f = host.memory_features(None)
    assert f["host_mem_total_gib"] == 8.0 and f["host_mem_available_gib"] == 2.0 and f["cgroup_mem_limit_gib"] == 8.0


def test_is_rank():
    assert host._is_rank(("/venv/bin/python3", "/venv/lib/site-packages/swift/cli/sft.py", "--model", "m"))
    assert host._is_rank(("/venv/bin/python3", "-u", "/venv/lib/site-packages/swift/cli/_megatron/sft.py"))
    assert not host._is_rank(("/venv/bin/python3", "/venv/bin/swift", "sft", "--model", "m"))
    assert not host._is_rank(("/venv/bin/python3", "-m", "torch.distributed.run", "--nproc_per_node", "8",
                              "/venv/lib/site-packages/swift/cli/sft.py"))
