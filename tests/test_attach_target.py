"""Finding the job from a PID, an output dir or a log; bad targets exit 2 with a clear message."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from diagnose.attach import target as T
from diagnose.attach.replay import write_launcher
from diagnose.attach.target import resolve_target, swift_role
from diagnose.errors import InputError

ROOT = Path(__file__).resolve().parent.parent
HEALTHY = ROOT / "fixtures" / "healthy_4x"
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="attach reads /proc (Linux)")


def start_replay(tmp: Path, *, pace=0.005, step_pace=None, hold=30.0, env=None, cwd=None, output_dir=None,
                 via_launcher=False):
    """A fake ms-swift job replaying the healthy_4x capture; stdout goes to tmp/train.log."""
    rank = write_launcher(tmp / "pkg")
    log = tmp / "train.log"
    out = output_dir or str(tmp / "out")
    argv = [str(rank), "--replay", str(HEALTHY / "train.log"), "--jsonl", str(HEALTHY / "logging.jsonl"),
            "--args-json", str(HEALTHY / "args.json"), "--output_dir", out, "--pace", str(pace), "--hold", str(hold)]
    if step_pace is not None:
        argv += ["--step-pace", str(step_pace)]
    if via_launcher:
        # a `swift sft ...` launcher that runs the rank as a child, like ms-swift's CLI does
        launcher = tmp / "bin" / "swift"
        launcher.parent.mkdir(parents=True, exist_ok=True)
        launcher.write_text(textwrap.dedent(f"""
            import subprocess, sys
            sys.exit(subprocess.call([sys.executable] + {argv!r}))
        """))
        cmd = [sys.executable, str(launcher), "sft"] + argv[1:]
    else:
        cmd = [sys.executable] + argv
    fh = log.open("wb")
    p = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
                         cwd=cwd, start_new_session=True)
    fh.close()
    return p, log


def stop(p):
    try:
        os.killpg(p.pid, 9)
    except ProcessLookupError:
        pass
    p.wait()


def wait_for(cond, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("cmd,role", [
    (["/v/bin/python3", "/v/bin/swift", "sft", "--model", "m"], "launcher"),
    (["/v/bin/megatron", "sft", "--model", "m"], "launcher"),
    (["/v/bin/python3", "/v/lib/python3.11/site-packages/swift/cli/sft.py", "--model", "m"], "rank"),
    (["/v/bin/python3", "-u", "/v/lib/python3.11/site-packages/swift/cli/rlhf.py"], "rank"),
    (["/v/bin/python3", "-m", "torch.distributed.run", "--nproc_per_node", "8", "/v/swift/cli/sft.py"], "torchrun"),
    (["/v/bin/python3", "train.py", "--output_dir", "x"], None),
    (["sleep", "100"], None),
    ([], None),
])
def test_swift_role(cmd, role):
    assert swift_role(cmd) == role


def test_pid_not_found():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    with pytest.raises(InputError, match="no such process") as e:
        resolve_target(str(p.pid))
    assert e.value.exit_code == 2


def test_not_an_ms_swift_job():
    p = subprocess.Popen(["sleep", "30"])
    try:
        with pytest.raises(InputError, match="is not an ms-swift job"):
            resolve_target(str(p.pid))
    finally:
        p.kill()
        p.wait()


def test_missing_path():
    with pytest.raises(InputError, match="no such file, directory or PID"):
        resolve_target("/nonexistent/swiftdoc/out")


def test_empty_dir_without_job(tmp_path):
    with pytest.raises(InputError, match="no ms-swift run in this directory"):
        resolve_target(str(tmp_path))


def test_no_permission(tmp_path, monkeypatch):
    p, log = start_replay(tmp_path)
    try:
        def deny(path):
            raise PermissionError(13, "Permission denied")

        # GIVEN another user's job: /proc/PID/fd and cwd are unreadable
        monkeypatch.setattr(T, "_readlink", deny)
        monkeypatch.setattr(T.os, "readlink", deny)
        monkeypatch.setattr(T, "_cmdline", lambda pid: [sys.executable, "/x/swift/cli/sft.py", "--model", "rel/m"])
        with pytest.raises(InputError, match="no permission") as e:
            resolve_target(str(p.pid))
        assert e.value.exit_code == 2 and "job's user" in (e.value.hint or "")
    finally:
        stop(p)


def test_by_pid_finds_log_output_dir_run_dir_and_gpus(tmp_path):
    p, log = start_replay(tmp_path, env={"CUDA_VISIBLE_DEVICES": "2,3"})
    try:
        assert wait_for(lambda: list((tmp_path / "out").glob("v0-*")))
        t = resolve_target(str(p.pid))
        assert t.pid == p.pid and t.kind == "pid"
        assert t.stdout_log == log
        assert t.output_dir == tmp_path / "out"
        assert t.run_dir is not None and t.run_dir.parent == tmp_path / "out"
        assert t.gpus == [2, 3] and t.gpu_source == "CUDA_VISIBLE_DEVICES"
        assert t.rank_pids == [p.pid]
        assert t.log_paths() == [log, t.run_dir]
        # the NVML process list names the GPU the job really holds
        t.refresh({5: {p.pid}, 6: {4242}})
        assert t.gpus == [5] and t.gpu_source == "nvml-procs"
        j = t.as_json()
        assert j["pid"] == p.pid and j["log"] == str(log) and j["gpus"] == [5] and j["alive"] is True
    finally:
        stop(p)


def test_rank_pid_walks_up_to_the_launcher(tmp_path):
    p, log = start_replay(tmp_path, via_launcher=True)
    try:
        assert wait_for(lambda: T._descendants(p.pid, T._children_map()))
        rank = T._descendants(p.pid, T._children_map())[0]
        t = resolve_target(str(rank))
        assert t.pid == p.pid and rank in t.rank_pids and p.pid not in t.rank_pids
        assert t.stdout_log == log
    finally:
        stop(p)


def test_relative_output_dir_is_resolved_against_the_job_cwd(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    p, log = start_replay(tmp_path, cwd=str(work), output_dir="rel_out")
    try:
        t = resolve_target(str(p.pid))
        assert t.output_dir == work / "rel_out"
    finally:
        stop(p)


def test_by_output_dir_and_by_log_find_the_running_job(tmp_path):
    p, log = start_replay(tmp_path)
    try:
        assert wait_for(lambda: list((tmp_path / "out").glob("v0-*")))
        by_dir = resolve_target(str(tmp_path / "out"))
        assert by_dir.pid == p.pid and by_dir.kind == "dir" and by_dir.stdout_log == log
        run_dir = next((tmp_path / "out").glob("v0-*"))
        by_run = resolve_target(str(run_dir))
        assert by_run.pid == p.pid and by_run.run_dir == run_dir
        by_log = resolve_target(str(log))
        assert by_log.pid == p.pid and by_log.kind == "log"
        by_jsonl = resolve_target(str(run_dir / "logging.jsonl"))
        assert by_jsonl.pid == p.pid
    finally:
        stop(p)


def test_finished_run_dir_without_process(tmp_path):
    t = resolve_target(str(HEALTHY))
    assert t.pid is None and t.run_dir == HEALTHY and t.stdout_log == HEALTHY / "train.log"
    assert any("following the files only" in n for n in t.notes)


def test_stdout_piped_through_tee(tmp_path):
    # GIVEN `swift sft ... 2>&1 | tee train.log` (the usual way ms-swift docs run it)
    rank = write_launcher(tmp_path / "pkg")
    log = tmp_path / "train.log"
    cmd = (f"{sys.executable} {rank} --replay {HEALTHY / 'train.log'} --output_dir {tmp_path / 'out'} "
           f"--pace 0.001 --hold 30 2>&1 | tee {log} > /dev/null")
    sh = subprocess.Popen(["sh", "-c", cmd], start_new_session=True)
    try:
        assert wait_for(lambda: any(swift_role(T._cmdline(c) or []) == "rank"
                                    for c in T._descendants(sh.pid, T._children_map())))
        rank_pid = next(c for c in T._descendants(sh.pid, T._children_map())
                        if swift_role(T._cmdline(c) or []) == "rank")
        # WHEN attached by the rank's PID THEN the tee'd file is the log
        t = resolve_target(str(rank_pid))
        assert t.stdout_log == log
    finally:
        stop(sh)
