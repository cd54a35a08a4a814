"""The trial guard: a trial's processes never outlive the verify that started them, even a SIGKILLed one.

Contract: `guard_argv(argv, cpus=None) -> list[str]` wraps a trial's command line so that it runs as
`python -I guard.py PARENT_PID [--cpus 0,1] -- ARGV...`.  The guard (stdlib only, started as its own
session leader by the runner):
- asks the kernel for SIGTERM when its parent dies (`PR_SET_PDEATHSIG`) and becomes a child subreaper
  (`PR_SET_CHILD_SUBREAPER`): every orphaned descendant of the trial (torchrun's workers leave their
  launcher's process group) is re-parented to the guard, so the guard always knows the whole tree;
- pins itself to `--cpus` before starting the trial, so every process of the trial inherits the slot's cores;
- starts ARGV as its child and waits; on SIGTERM/SIGINT/SIGHUP (verify died, or cancels the trial) it sends
  SIGTERM to every descendant, then SIGKILL after a grace period, and exits;
- exits with the trial's return code; a trial killed by signal N makes the guard die of signal N, so the runner
  sees the same return code as without the guard (-N).
Linux only (prctl); elsewhere `guard_argv` returns the argv unchanged.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_GRACE_S = 5.0


def guard_argv(argv: list[str], cpus: list[int] | None = None) -> list[str]:
    if not sys.platform.startswith("linux"):
        return list(argv)
    head = [sys.executable, "-I", os.path.abspath(__file__), str(os.getpid())]
    if cpus:
        head += ["--cpus", ",".join(str(c) for c in cpus)]
    return head + ["--", *argv]


def _children_of(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/children") as fh:
                    out += [int(x) for x in fh.read().split()]
            except OSError:
                continue
    except OSError:
        pass
    return out


def _descendants(pid: int) -> list[int]:
    seen: list[int] = []
    todo = _children_of(pid)
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.append(p)
        todo += _children_of(p)
    return seen


def _signal(pids: list[int], sig: int) -> None:
    for p in pids:
        try:
            os.kill(p, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _kill_tree(me: int) -> None:
    _signal(_descendants(me), signal.SIGTERM)
    deadline = time.monotonic() + _GRACE_S
    while time.monotonic() < deadline:
        _reap()
        if not _descendants(me):
            return
        time.sleep(0.05)
    _signal(_descendants(me), signal.SIGKILL)
    for _ in range(40):
        _reap()
        if not _descendants(me):
            return
        time.sleep(0.05)


def main(args: list[str]) -> int:
    import ctypes

    if "--" not in args or not args[0].isdigit():
        sys.stderr.write("usage: guard.py PARENT_PID [--cpus LIST] -- ARGV...\n")
        return 2
    parent = int(args[0])
    cut = args.index("--")
    opts, argv = args[1:cut], args[cut + 1:]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the death signal was armed
        return 143
    if "--cpus" in opts:
        try:
            os.sched_setaffinity(0, [int(c) for c in opts[opts.index("--cpus") + 1].split(",")])
        except (OSError, ValueError, IndexError):
            pass
    me = os.getpid()
    stopping = []

    def stop(signum, _frame):
        stopping.append(signum)
        _kill_tree(me)
        os._exit(128 + signum)

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, stop)
    try:
        child = subprocess.Popen(argv)
    except OSError as e:
        sys.stderr.write(f"swiftdoc: could not start {argv[0] if argv else '?'}: {e}\n")
        return 127
    while True:
        try:
            rc = child.wait()
            break
        except InterruptedError:
            continue
    _reap()
    if rc < 0:  # die of the same signal, so the runner sees what it would have seen without the guard
        if -rc not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(-rc, signal.SIG_DFL)
        os.kill(me, -rc)
        time.sleep(1)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
