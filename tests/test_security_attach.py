"""Issue #20, item 6: attach adopts only its own job: a swift launcher or rank (never init or a shell whose tree holds
jobs), that job's processes of one user unless asked, and each PID re-checked against its start time before a dump."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from diagnose.attach import target as T
from diagnose.attach.target import resolve_target
from diagnose.errors import InputError
from tests.test_attach_target import start_replay, stop, wait_for

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="attach reads /proc (Linux)")


def test_init_or_a_parent_of_jobs_is_not_adopted(tmp_path):
    p, _log = start_replay(tmp_path)
    wrapper = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        time.sleep(60)
    """)])
    try:
        assert wait_for(lambda: T.swift_role(T._cmdline(p.pid) or []) == "rank")
        with pytest.raises(InputError, match="is not an ms-swift job"):
            resolve_target("1")  # init's tree holds every job on the machine
        with pytest.raises(InputError, match="is not an ms-swift job"):
            resolve_target(str(wrapper.pid))
        t = resolve_target(str(p.pid))  # the job itself is still found
        assert t.pid == p.pid and t.rank_pids == [p.pid]
    finally:
        wrapper.kill()
        wrapper.wait()
        stop(p)


def test_a_shell_that_started_a_job_names_it_in_the_hint(tmp_path):
    from diagnose.attach.replay import write_launcher

    rank = write_launcher(tmp_path / "pkg")
    sh = subprocess.Popen(["sh", "-c", f"{sys.executable} {rank} --replay /dev/null --output_dir {tmp_path / 'out'} --hold 30 > /dev/null; sleep 1"],
                          start_new_session=True)
    try:
        assert wait_for(lambda: any(T.swift_role(T._cmdline(c) or []) for c in T._descendants(sh.pid, T._children_map())))
        with pytest.raises(InputError) as e:
            resolve_target(str(sh.pid))
        child = next(c for c in T._descendants(sh.pid, T._children_map()) if T.swift_role(T._cmdline(c) or []))
        assert str(child) in (e.value.hint or "")
    finally:
        stop(sh)


def test_only_the_jobs_user_is_followed_unless_asked(tmp_path, monkeypatch):
    p, _log = start_replay(tmp_path, via_launcher=True)
    try:
        assert wait_for(lambda: T._descendants(p.pid, T._children_map()))
        rank = T._descendants(p.pid, T._children_map())[0]
        real = T.uid_of
        monkeypatch.setattr(T, "uid_of", lambda pid: 4242 if pid == rank else real(pid))  # another user's process
        t = resolve_target(str(p.pid))
        assert rank not in t.pids and rank not in t.rank_pids
        t = resolve_target(str(p.pid), all_users=True)
        assert rank in t.pids and rank in t.rank_pids
    finally:
        stop(p)


def test_a_log_is_tied_only_to_a_job_of_its_owner(tmp_path, monkeypatch):
    p, log = start_replay(tmp_path)
    try:
        assert wait_for(lambda: log.stat().st_size > 0)
        assert resolve_target(str(log)).pid == p.pid
        real = T.uid_of
        monkeypatch.setattr(T, "uid_of", lambda pid: 4242 if pid == p.pid else real(pid))
        t = resolve_target(str(log))
        assert t.pid is None and any("following the file only" in n for n in t.notes)
    finally:
        stop(p)


def test_a_recycled_pid_is_never_dumped(tmp_path, monkeypatch):
    from diagnose.attach import stacks

    p, _log = start_replay(tmp_path)
    try:
        assert wait_for(lambda: T.swift_role(T._cmdline(p.pid) or []) == "rank")
        t = resolve_target(str(p.pid))
        assert t.verified(t.rank_pids) == [p.pid] and t.alive()
        t.starts[p.pid] = (t.starts[p.pid] or 0) - 5  # as if the job's process had ended and the PID gone to another
        assert t.verified(t.rank_pids) == [] and not t.alive()
        calls = []
        monkeypatch.setattr(stacks, "_py_spy", lambda: "/bin/true")
        monkeypatch.setattr(stacks.subprocess, "run", lambda *a, **k: calls.append(a) or None)
        out = stacks.dump_stacks([p.pid], still_ours=lambda pid: bool(t.verified([pid])))
        assert calls == [] and "not dumped" in out[p.pid]["error"]
    finally:
        stop(p)


def test_the_session_dumps_only_verified_pids(tmp_path, monkeypatch):
    from diagnose.attach import stacks
    from diagnose.attach.session import AttachOptions, AttachSession

    p, _log = start_replay(tmp_path, hold=60)
    try:
        assert wait_for(lambda: T.swift_role(T._cmdline(p.pid) or []) == "rank")
        t = resolve_target(str(p.pid))
        t.rank_pids = [p.pid, 999_999]  # a PID the target never saw start
        seen = []
        monkeypatch.setattr(stacks, "dump_stacks", lambda pids, **kw: seen.append(list(pids)) or {})
        s = AttachSession(t, AttachOptions(nvml=False, samples_out=None, hang_after_s=0.01))
        s._last_growth -= 120  # silent for two minutes
        s._check_hang(s._last_growth + 120, alive=True)
        assert seen == [[p.pid]]
    finally:
        stop(p)
