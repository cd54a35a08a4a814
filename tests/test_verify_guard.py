"""A SIGKILLed verify leaves no trial process behind (issue #18): the trial guard (diagnose/verify/guard.py).

The trial here is a real process tree shaped like torchrun's: a launcher whose worker starts its own session
(torchrun's workers leave the launcher's process group), both sleeping.  The parent is a real Python process
running verify's real SwiftTrialRunner on it; the test SIGKILLs that parent."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")

LAUNCHER = textwrap.dedent("""\
    import subprocess, sys, time
    tag = sys.argv[1]
    # the worker starts its own session, as torchrun's workers leave their launcher's process group
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", tag], start_new_session=True)
    print("launcher up", flush=True)
    time.sleep(600)
""")

PARENT = textwrap.dedent("""\
    import sys
    sys.path.insert(0, {root!r})
    from diagnose.verify.trial import SwiftTrialRunner, TrialSpec
    spec = TrialSpec(index=1, arm="baseline", repeat=1, argv=[sys.executable, {launcher!r}, {tag!r}], env={{}},
                     cwd={cwd!r}, output_dir={cwd!r} + "/out", log_path={cwd!r} + "/trial.log", max_steps=10, warmup=1,
                     timeout_s=600)
    SwiftTrialRunner().run(spec)
""")


def _procs_with(tag: str) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if tag.encode() in cmd:
            try:
                state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state != "Z":
                out.append(int(d.name))
    return out


def _wait(cond, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.1)
    return cond()


def test_sigkilled_verify_leaves_no_trial_process(tmp_path):
    tag = f"swiftdoc-guard-test-{os.getpid()}-{time.monotonic_ns()}"
    (tmp_path / "launcher.py").write_text(LAUNCHER)
    (tmp_path / "parent.py").write_text(PARENT.format(root=str(ROOT), launcher=str(tmp_path / "launcher.py"), tag=tag,
                                                      cwd=str(tmp_path)))
    parent = subprocess.Popen([sys.executable, str(tmp_path / "parent.py")], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        # the launcher and its worker (in a session of its own) are up
        assert _wait(lambda: len(_procs_with(tag)) >= 2, 30), "the trial did not start"
        parent.send_signal(signal.SIGKILL)  # verify itself dies without a chance to clean up
        parent.wait(timeout=10)
        assert _wait(lambda: not _procs_with(tag), 15), f"trial processes survived: {_procs_with(tag)}"
    finally:
        for p in _procs_with(tag):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if parent.poll() is None:
            parent.kill()


def test_guard_passes_the_trial_s_return_code_and_signal():
    from diagnose.verify.guard import guard_argv

    ok = subprocess.run(guard_argv([sys.executable, "-c", "import sys; sys.exit(3)"]))
    assert ok.returncode == 3
    killed = subprocess.run(guard_argv([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]))
    assert killed.returncode == -signal.SIGKILL  # as if the runner had started the trial itself
