"""Resolve what the user pointed at (PID, output dir, log file) into the job to follow.

Contract: `resolve_target(spec, all_users=False) -> Target`; raises `InputError` (exit 2) when the
PID does not exist, is not itself an ms-swift process (a launcher, torchrun or a rank: never a shell, init
or any other process whose tree holds some job), cannot be read for lack of permission, or the path holds
no ms-swift run.  `Target.refresh()` re-reads what can change while the job runs (children, the run folder
created after start-up, GPUs once the job holds CUDA contexts).  A target is one job of one user: its
processes are the launcher's tree, only those of the launcher's user (`all_users` lifts that), and a job
found from a path is one of the path owner's processes.  Every PID is recorded with its start time;
`Target.verified(pids)` keeps those still the same processes (a recycled PID is never dumped or followed) and
`alive()` checks the launcher's.

How a PID becomes a job: walk up to the launcher (`swift sft ...`, `megatron
sft ...`, `torchrun ... swift/cli/sft.py`), then down its process tree; the
ranks are processes running `swift/cli/<cmd>.py`.  `--output_dir` (relative to
the launcher's cwd; default `output/<model basename>`) gives the output dir; its
newest `v<N>-<date>` folder created after the job started is the run dir
(`logging.jsonl`, `args.json`); `/proc/PID/fd/1` gives the stdout capture when
stdout is a regular file, or a pipe read by `tee FILE`.  GPUs: `CUDA_VISIBLE_DEVICES` from the ranks'
environment (indices are taken as NVML indices, i.e. CUDA_DEVICE_ORDER=PCI_BUS_ID),
refined by the NVML process list when it names a job PID.
"""
from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from diagnose.errors import InputError
from diagnose.parse.sources import VERSION_DIR, newest_version_dir

_SWIFT_CMDS = {"sft", "pt", "rlhf", "pretrain", "infer", "export", "eval", "sample", "app", "deploy", "web-ui"}
_LOG_SUFFIXES = {".log", ".txt", ".out", ".err", ".stdout", ".stderr"}


# ---------------------------------------------------------------------------- /proc helpers
def _cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return None
    except PermissionError:
        return []
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]


def _stat(pid: int) -> tuple[int, str, float] | None:
    """(ppid, state, start time in clock ticks) from /proc/PID/stat."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = raw[raw.rfind(")") + 2:].split()
    return int(rest[1]), rest[0], float(rest[19])


def pid_alive(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[1] not in ("Z", "X")


def start_ticks(pid: int) -> float | None:
    """When the process started (clock ticks since boot): with the PID, what tells a process from a later one that
    was given the same PID."""
    st = _stat(pid)
    return st[2] if st is not None else None


def same_process(pid: int, ticks: float | None) -> bool:
    """`pid` is still the process first seen with start time `ticks` (not a recycled PID); unknown ticks: alive."""
    now = start_ticks(pid)
    return now is not None and (ticks is None or now == ticks) and pid_alive(pid)


def uid_of(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def _start_time(pid: int) -> float | None:
    """Process start as a unix time."""
    st = _stat(pid)
    if st is None:
        return None
    try:
        with open("/proc/stat") as f:
            btime = next(float(line.split()[1]) for line in f if line.startswith("btime"))
    except (OSError, StopIteration):
        return None
    return btime + st[2] / os.sysconf("SC_CLK_TCK")


def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = _stat(int(d))
            if st:
                kids.setdefault(st[0], []).append(int(d))
    return kids


def _descendants(pid: int, kids: dict[int, list[int]]) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in kids.get(p, ()):
            out.append(c)
            todo.append(c)
    return sorted(out)


def _readlink(path: str) -> str | None:
    try:
        return os.readlink(path)
    except FileNotFoundError:
        return None
    except PermissionError:
        raise
    except OSError:
        return None


def _environ(pid: int) -> dict[str, str] | None:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except (PermissionError, FileNotFoundError, ProcessLookupError):
        return None
    env = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            env[k.decode("utf-8", "replace")] = v.decode("utf-8", "replace")
    return env


def rank_of(pid: int) -> int | None:
    """The global rank torchrun gave a process (its RANK environment variable), None when unreadable."""
    env = _environ(pid) or {}
    try:
        return int(env["RANK"])
    except (KeyError, ValueError):
        return None


# ---------------------------------------------------------------------------- what a swift process looks like
def swift_role(cmd: list[str]) -> str | None:
    """'launcher' (swift/megatron CLI), 'torchrun' (wrapping a swift script), 'rank', or None."""
    if not cmd:
        return None
    for i, a in enumerate(cmd[:4]):
        if "/swift/cli/" in a and a.endswith(".py"):
            return "rank"
        if a in ("-m",) and i + 1 < len(cmd) and cmd[i + 1].startswith("swift.cli"):
            return "rank"
    if any(a.endswith(("torch.distributed.run", "torchrun")) for a in cmd[:3]) and \
            any("/swift/cli/" in a for a in cmd):
        return "torchrun"
    for i, a in enumerate(cmd[:3]):
        base = os.path.basename(a)
        if base in ("swift", "megatron") and i + 1 < len(cmd) and cmd[i + 1] in _SWIFT_CMDS:
            return "launcher"
    return None


def _arg(cmd: list[str], name: str) -> str | None:
    """Last value of --name (or --name=value) in an argv."""
    val = None
    for i, a in enumerate(cmd):
        if a == f"--{name}" and i + 1 < len(cmd):
            val = cmd[i + 1]
        elif a.startswith(f"--{name}="):
            val = a.split("=", 1)[1]
    return val


def _config_value(cmd: list[str], cwd: str | None, name: str) -> str | None:
    """ms-swift 4.x: a first argument ending in .yaml/.json is a config file of flags."""
    for a in cmd:
        if a.endswith((".yaml", ".yml", ".json")) and not a.startswith("--"):
            p = Path(a) if os.path.isabs(a) or cwd is None else Path(cwd) / a
            try:
                text = p.read_text()
            except OSError:
                continue
            m = re.search(rf'^\s*"?{name}"?\s*[:=]\s*"?([^"\n,]+)"?', text, re.M)
            if m:
                return m.group(1).strip()
    return None


def newest_run_dir(output_dir: Path, since: float | None = None) -> Path | None:
    """Newest v<N>-<date> folder (by N) created no earlier than `since` (minus clock slack)."""
    return newest_version_dir(output_dir, since=since)


def _is_run_dir(p: Path) -> bool:
    return bool(VERSION_DIR.match(p.name)) or (p / "logging.jsonl").exists() or (p / "args.json").exists()


# ---------------------------------------------------------------------------- the target
@dataclass
class Target:
    kind: str  # pid | dir | log
    spec: str
    pid: int | None = None  # the job's root process (launcher), when running here
    rank_pids: list[int] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)  # every process of the job
    cmdline: list[str] | None = None
    cwd: str | None = None
    started: float | None = None  # unix time the root process started
    output_dir: Path | None = None
    run_dir: Path | None = None  # v<N>-<date> folder holding logging.jsonl
    stdout_log: Path | None = None
    gpus: list[int] | None = None  # NVML indices; None = not known (all GPUs shown)
    gpu_source: str | None = None  # nvml-procs | CUDA_VISIBLE_DEVICES | none
    cuda_visible_devices: str | None = None
    add_version: bool = True
    gpus_pinned: bool = False  # the user named the GPUs (--gpus): keep them
    notes: list[str] = field(default_factory=list)
    uid: int | None = None  # the job's user: only its processes are followed or dumped (unless all_users)
    all_users: bool = False
    starts: dict[int, float | None] = field(default_factory=dict)  # pid -> start ticks when first seen

    def alive(self) -> bool:
        return self.pid is not None and same_process(self.pid, self.starts.get(self.pid))

    def verified(self, pids: list[int]) -> list[int]:
        """The PIDs that are still the processes this target found (start time unchanged): only these may be
        dumped or followed; a PID given to another process since is dropped."""
        return [p for p in pids if p in self.starts and same_process(p, self.starts[p])]

    def log_paths(self) -> list[Path]:
        """The inputs to parse, as `analyze` would be given them."""
        out: list[Path] = []
        if self.stdout_log is not None:
            out.append(self.stdout_log)
        if self.run_dir is not None and ((self.run_dir / "logging.jsonl").exists() or (self.run_dir / "args.json").exists()):
            out.append(self.run_dir)
        return out

    def primary_log(self) -> Path | None:
        if self.stdout_log is not None:
            return self.stdout_log
        if self.run_dir is not None:
            return self.run_dir / "logging.jsonl"
        return None

    def refresh(self, nvml_pids: dict[int, set[int]] | None = None) -> None:
        """Re-read the process tree, the run folder and the GPUs (cheap; call every second or so)."""
        if self.pid is not None and self.alive():
            kids = _children_map()
            tree = [self.pid] + _descendants(self.pid, kids)
            if not self.all_users:  # one user's processes: a setuid helper or another user's process is not the job's
                tree = [p for p in tree if p == self.pid or uid_of(p) == self.uid]
            for p in tree:
                now = start_ticks(p)
                if self.starts.get(p) != now:  # new to us (or a PID the job's tree reused): its start time from now on
                    self.starts[p] = now
            self.pids = tree
            ranks = []
            for p in self.pids:
                cmd = _cmdline(p) or []
                if swift_role(cmd) == "rank" and _cmdline(_stat(p)[0] if _stat(p) else -1) != cmd:
                    ranks.append(p)
            self.rank_pids = ranks
            if self.cuda_visible_devices is None:
                for p in ranks + [self.pid]:
                    env = _environ(p)
                    if env and "CUDA_VISIBLE_DEVICES" in env:
                        self.cuda_visible_devices = env["CUDA_VISIBLE_DEVICES"]
                        break
        if self.output_dir is not None and self.add_version and (
                self.run_dir is None or self.run_dir.parent == self.output_dir):
            newer = newest_run_dir(self.output_dir, since=self.started)
            if newer is not None:
                self.run_dir = newer
        if self.run_dir is None and self.stdout_log is not None:
            rd = _run_dir_from_log(self.stdout_log)
            if rd is not None:
                self.run_dir = rd
        self._gpus(nvml_pids)

    def pin_gpus(self, gpus: list[int]) -> None:
        self.gpus, self.gpu_source, self.gpus_pinned = list(gpus), "--gpus", True

    def _gpus(self, nvml_pids: dict[int, set[int]] | None) -> None:
        if self.gpus_pinned:
            return
        if nvml_pids and self.pids:
            mine = set(self.pids)
            hit = sorted(i for i, ps in nvml_pids.items() if ps & mine)
            if hit:
                self.gpus, self.gpu_source = hit, "nvml-procs"
                return
        if self.gpu_source == "nvml-procs":
            return  # keep what NVML told us while the job ran
        cvd = self.cuda_visible_devices
        if cvd is not None:
            idx = [int(x) for x in cvd.split(",") if x.strip().isdigit()]
            if idx:
                self.gpus, self.gpu_source = idx, "CUDA_VISIBLE_DEVICES"
                return
            if cvd.strip() in ("", "-1"):
                self.gpus, self.gpu_source = [], "CUDA_VISIBLE_DEVICES"
                return
        self.gpus, self.gpu_source = None, None

    def as_json(self) -> dict[str, Any]:
        log = self.primary_log()
        return {
            "kind": self.kind,
            "pid": self.pid,
            "pids": self.pids,
            "rank_pids": self.rank_pids,
            "log": str(log) if log else None,
            "logs": [str(p) for p in self.log_paths()],
            "output_dir": str(self.output_dir) if self.output_dir else None,
            "run_dir": str(self.run_dir) if self.run_dir else None,
            "gpus": self.gpus,
            "gpu_source": self.gpu_source,
            "alive": self.alive(),
            "command": _short_command(self.cmdline),
        }


def _short_command(cmd: list[str] | None) -> str | None:
    """`swift sft`, `torchrun swift/cli/sft.py`, `swift/cli/sft.py`: what the job is, in a few words."""
    if not cmd:
        return None
    role = swift_role(cmd)
    if role == "launcher":
        i = next(i for i, a in enumerate(cmd) if os.path.basename(a) in ("swift", "megatron"))
        return f"{os.path.basename(cmd[i])} {cmd[i + 1]}"
    script = next((a for a in cmd if "/swift/cli/" in a), None)
    if script:
        short = "swift/cli/" + script.split("/swift/cli/", 1)[1]
        return ("torchrun " if role == "torchrun" else "") + short
    return " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(cmd[:3]))[:80]


def _run_dir_from_log(log: Path, limit: int = 4 << 20) -> Path | None:
    """The `[INFO:swift] output_dir: /abs/vN-...` line near the top of a stdout capture."""
    try:
        with log.open("rb") as f:
            head = f.read(limit)
    except OSError:
        return None
    m = re.search(rb"\[INFO:swift\] output_dir: ([^\r\n]+)", head)
    if not m:
        m = re.search(rb"\[INFO:swift\] logging_path: ([^\r\n]+)/logging\.jsonl", head)
    if not m:
        return None
    p = Path(m.group(1).decode("utf-8", "replace").strip())
    return p if p.is_dir() else None


def _job_root(pid: int) -> int:
    """Walk up while the parent is still part of the swift job (launcher, torchrun) and the same user's."""
    cur = pid
    for _ in range(8):
        st = _stat(cur)
        if st is None or st[0] <= 1:
            return cur
        parent = st[0]
        if swift_role(_cmdline(parent) or []) is None or uid_of(parent) != uid_of(cur):
            return cur
        cur = parent
    return cur


def _stdout_file(pid: int) -> tuple[Path | None, str | None]:
    """(regular file the process's stdout goes to, note)."""
    try:
        link = _readlink(f"/proc/{pid}/fd/1")
    except PermissionError:
        return None, "permission"
    if link is None:
        return None, None
    if link.endswith(" (deleted)"):
        return None, f"its stdout file {link[:-10]} was deleted"
    if link.startswith("pipe:"):
        return _tee_file(link), None  # `swift sft ... 2>&1 | tee train.log`
    if not link.startswith("/") or link.startswith(("/dev/", "/proc/")):
        return None, None  # a terminal or socket: nothing to follow
    p = Path(link)
    return (p, None) if p.is_file() else (None, None)


def _tee_file(pipe: str) -> Path | None:
    """The file a `| tee FILE` reading this pipe writes to (the first regular file among its fds >= 3)."""
    for pid in _proc_pids():
        try:
            if os.readlink(f"/proc/{pid}/fd/0") != pipe:
                continue
            fds = sorted(int(f) for f in os.listdir(f"/proc/{pid}/fd") if f.isdigit() and int(f) >= 3)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("/") and not target.startswith(("/dev/", "/proc/")) and os.path.isfile(target):
                return Path(target)
    return None


def _from_pid(pid: int, spec: str, all_users: bool = False) -> Target:
    cmd = _cmdline(pid)
    if cmd is None:
        raise InputError(f"PID {pid}: no such process", hint="check the PID with `ps -ef | grep swift`")
    for _ in range(10):  # a process a moment old may not have exec'd yet: its command line is empty
        if cmd:
            break
        time.sleep(0.05)
        cmd = _cmdline(pid) or []
    if swift_role(cmd) is None:  # only a swift launcher, torchrun or rank: never a shell, init or another job's parent
        what = " ".join(cmd[:3]) if cmd else "unreadable command line"
        kids = _children_map()
        jobs = [p for p in _descendants(pid, kids) if swift_role(_cmdline(p) or []) is not None
                and swift_role(_cmdline(_stat(p)[0] if _stat(p) else -1) or []) is None][:5]
        raise InputError(f"PID {pid} ({what[:120]}) is not an ms-swift job",
                         hint=(f"it started the ms-swift process(es) {', '.join(map(str, jobs))}: attach one of them"
                               if jobs else "give the PID of `swift sft ...` (or its torchrun / rank processes), an "
                                            "output dir or a log"))
    root = _job_root(pid)
    uid = uid_of(root)
    kids = _children_map()
    tree = [root] + [p for p in _descendants(root, kids) if all_users or uid_of(p) == uid]
    roles = {p: swift_role(_cmdline(p) or []) for p in tree}
    t = Target(kind="pid", spec=spec, pid=root, pids=tree, uid=uid, all_users=all_users)
    t.starts = {p: start_ticks(p) for p in tree}
    t.cmdline = _cmdline(root) or cmd
    t.started = _start_time(root)
    try:
        t.cwd = os.readlink(f"/proc/{root}/cwd")
    except PermissionError:
        t.cwd = None
    except OSError:
        t.cwd = None
    # the argv that carries the flags: launcher's, else a rank's
    flag_cmd = next((_cmdline(p) or [] for p in tree if roles[p] in ("launcher", "rank", "torchrun")), t.cmdline)
    out = _arg(flag_cmd, "output_dir") or _arg(flag_cmd, "save") or _config_value(flag_cmd, t.cwd, "output_dir")
    if out is None:
        model = _arg(flag_cmd, "model") or _config_value(flag_cmd, t.cwd, "model")
        if model:
            out = os.path.join("output", os.path.basename(model.rstrip("/")))
    if out is not None:
        if not os.path.isabs(out):
            out = os.path.join(t.cwd, out) if t.cwd else None
        if out is not None:
            t.output_dir = Path(out)
    add_version = (_arg(flag_cmd, "add_version") or "true").lower()
    t.add_version = add_version not in ("false", "0", "no")
    if not t.add_version and t.output_dir is not None:
        t.run_dir = t.output_dir
    perm = False
    for p in [root] + [q for q in tree if roles[q] == "rank"]:
        log, note = _stdout_file(p)
        if note == "permission":
            perm = True
            continue
        if note:
            t.notes.append(f"PID {p}: {note}")
        if log is not None:
            t.stdout_log = log
            break
    if t.stdout_log is None and t.cwd is None and perm:
        raise InputError(f"PID {pid}: no permission to read the job's files descriptors or working directory",
                         hint="run swiftdoc as the job's user (or root), or give its output dir / log file")
    t.refresh()
    if t.stdout_log is None and t.output_dir is None:
        raise InputError(f"PID {pid}: cannot find the job's logs (stdout is not a file and no --output_dir)",
                         hint="give the output dir or the log file instead of the PID")
    return t


def _proc_pids() -> list[int]:
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def find_job_for_paths(output_dir: Path | None, log: Path | None, all_users: bool = False) -> int | None:
    """The root PID of a running swift job writing to this output dir / stdout file, if any: a process of the user
    who owns that file or folder (any user's with `all_users`)."""
    want_out = str(output_dir.resolve()) if output_dir else None
    want_log = str(log.resolve()) if log else None
    owner = None
    if not all_users:
        try:
            owner = os.stat(log if log is not None else output_dir).st_uid  # type: ignore[arg-type]
        except (OSError, TypeError):
            owner = os.geteuid()
    for pid in _proc_pids():
        if pid == os.getpid():
            continue
        if owner is not None and uid_of(pid) != owner:
            continue
        cmd = _cmdline(pid)
        role = swift_role(cmd or [])
        if role is None:
            continue
        if want_log is not None:
            for fd in (1, 2):
                try:
                    if _readlink(f"/proc/{pid}/fd/{fd}") == want_log:
                        return _job_root(pid)
                except PermissionError:
                    break
        if want_out is not None:
            out = _arg(cmd or [], "output_dir") or _arg(cmd or [], "save")
            if out is None:
                continue
            if not os.path.isabs(out):
                try:
                    out = os.path.join(os.readlink(f"/proc/{pid}/cwd"), out)
                except OSError:
                    continue
            if os.path.realpath(out) == want_out:
                return _job_root(pid)
    return None


def _from_path(p: Path, spec: str, all_users: bool = False) -> Target:
    if p.is_dir():
        if _is_run_dir(p) and p.parent != p:
            out, run = p.parent, p
        else:
            out, run = p, newest_run_dir(p)
        pid = find_job_for_paths(out, None, all_users)
        if pid is None and run is None and not any(c.suffix in _LOG_SUFFIXES for c in p.iterdir() if c.is_file()):
            raise InputError(f"{spec}: no ms-swift run in this directory and no running job writing to it",
                             hint="give the --output_dir of a running job, a v<N>-<date> run folder, or a log file")
        if pid is not None:
            t = _from_pid(pid, spec, all_users)
            t.kind = "dir"
            if t.output_dir is None or t.output_dir.resolve() != out.resolve():
                t.output_dir = out
            if run is not None and run.parent == out and (t.run_dir is None or t.run_dir.parent != out):
                t.run_dir = run
            t.refresh()
            return t
        t = Target(kind="dir", spec=spec, output_dir=out, run_dir=run)
        logs = sorted((c for c in p.iterdir() if c.is_file() and c.suffix in _LOG_SUFFIXES), key=lambda c: c.name)
        if logs:
            t.stdout_log = logs[0]
        t.notes.append("no running job found on this machine for this directory: following the files only")
        return t
    # a file
    if p.suffix == ".jsonl":
        run = p.parent
        pid = find_job_for_paths(run.parent if VERSION_DIR.match(run.name) else run, None, all_users)
        if pid is not None:
            t = _from_pid(pid, spec, all_users)
            t.kind = "log"
            t.run_dir = run
            return t
        t = Target(kind="log", spec=spec, run_dir=run, output_dir=run.parent)
        t.notes.append("no running job found on this machine for this log: following the file only")
        return t
    pid = find_job_for_paths(None, p, all_users)
    if pid is not None:
        t = _from_pid(pid, spec, all_users)
        t.kind = "log"
        t.stdout_log = p
        t.refresh()
        return t
    t = Target(kind="log", spec=spec, stdout_log=p)
    t.run_dir = _run_dir_from_log(p)
    t.notes.append("no running job found on this machine for this log: following the file only")
    return t


def resolve_target(spec: str, all_users: bool = False) -> Target:
    if spec.isdigit():
        return _from_pid(int(spec), spec, all_users)
    p = Path(spec)
    if not p.exists():
        raise InputError(f"{spec}: no such file, directory or PID",
                         hint="attach takes a PID, an ms-swift output dir, or a log file")
    try:
        if p.is_dir():
            os.listdir(p)
        else:
            with p.open("rb") as f:
                f.read(1)
    except PermissionError:
        raise InputError(f"{spec}: permission denied", hint="run swiftdoc as the job's user") from None
    return _from_path(p, spec, all_users)


__all__ = ["Target", "resolve_target", "swift_role", "newest_run_dir", "pid_alive", "find_job_for_paths", "same_process",
           "start_ticks", "uid_of"]
