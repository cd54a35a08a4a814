"""Trials: run one ms-swift training subprocess and measure it; or replay recorded per-step times.

Contract:
- `TrialSpec`: what one trial runs (argv, env overlay, cwd, output_dir, log
  path, max_steps, warm-up, timeout) and where it sits (index, arm, repeat).
- `TrialRunner` (protocol): `run(spec, on_step=None) -> TrialResult`.
  `on_step(step, max_steps)` is called as steps are logged (live counter).
- `SwiftTrialRunner`: the real thing.  The child runs in its own session
  (process group) with stdout+stderr captured to `spec.log_path` and scanned
  live for step lines; the time from spawn to the first logged step is the
  start-up overhead (reported, never part of the throughput).  On timeout the
  whole tree gets SIGTERM then SIGKILL; on Ctrl-C (KeyboardInterrupt in the
  caller) SIGINT, SIGTERM, SIGKILL in turn, then the interrupt propagates.
  Descendants that left the process group are tracked with psutil and killed
  too; `leftovers()` is empty after every trial (tested).  The log is parsed
  with `parse_run([log, run_dir])` (logging.jsonl's 8-decimal values) and
  measured by `measure()`; a trial that crashes, OOMs or logs NaN is diagnosed
  with `analyze_run` (the same rules as `swiftdoc analyze`).
- `RecordedTrialRunner`: replays per-step interval times (and losses) given
  per arm, for tests and benches of the statistics and the schedule.
- `measure(spec, run, ...)`: a parsed trial log -> `TrialResult`.
"""
from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from diagnose.parse.values import STEP_IN_LINE
from diagnose.verify.models import Failure, TrialResult
from diagnose.verify.stats import trial_throughput

OnStep = Callable[[int, "int | None"], None]

_STEP = re.compile(STEP_IN_LINE.encode())
_ERROR_LINE = re.compile(r"^(?:[\w.]*(?:Error|Exception|Interrupt)\b.*|[\w.]+: error: .*|.*\bKilled\b.*)$")


@dataclass
class TrialSpec:
    index: int
    arm: str
    repeat: int
    argv: list[str]
    env: dict[str, str | None]  # overlay on os.environ (None = unset)
    cwd: str
    output_dir: str
    log_path: str
    max_steps: int
    warmup: int
    timeout_s: float = 1800.0
    sample_gpus: bool = False
    gpu_indices: list[int] | None = None
    prevalidation: list[str] = field(default_factory=list)
    slot: str = "all"  # the device set it runs on: "cpu:0", "gpu:0,1" (verify.executor.Slot.name)
    cpus: list[int] | None = None  # pin the trial's processes to these cores (a CPU slot)


class TrialRunner(Protocol):
    def run(self, spec: TrialSpec, on_step: OnStep | None = None) -> TrialResult: ...


# ----------------------------------------------------------------------------- process tree


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours counts as gone
        import psutil

        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except Exception:
        return True


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _pin(pid: int, cpus: list[int]) -> None:
    """Pin every thread of `pid` to `cpus` (threads and children created later inherit it)."""
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        tids = [pid]
    for t in tids:
        try:
            os.sched_setaffinity(t, cpus)
        except (OSError, AttributeError):
            pass


def _descendants(pid: int) -> set[int]:
    try:
        import psutil

        return {p.pid for p in psutil.Process(pid).children(recursive=True)}
    except Exception:
        return set()


def _signal_all(pgid: int, pids: set[int], sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for p in pids:
        try:
            os.kill(p, sig)
        except (ProcessLookupError, PermissionError):
            pass


def kill_tree(proc: subprocess.Popen, known: set[int], steps: Sequence[tuple[int, float]]) -> None:
    """Send each (signal, grace seconds) in turn to the process group and every known descendant until all are gone."""
    pgid = proc.pid
    known = set(known) | _descendants(proc.pid)
    for sig, grace in steps:
        if proc.poll() is not None and not _group_alive(pgid) and not any(_alive(p) for p in known):
            break
        _signal_all(pgid, known, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if proc.poll() is not None and not _group_alive(pgid) and not any(_alive(p) for p in known):
                break
            time.sleep(0.05)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def leftovers(pgid: int, known: set[int]) -> list[int]:
    out = [p for p in known if _alive(p)]
    if _group_alive(pgid) and pgid not in out:
        out.append(pgid)
    return out


# ----------------------------------------------------------------------------- measuring


def _run_dir(output_dir: str) -> Path | None:
    from diagnose.parse.sources import newest_version_dir

    d = Path(output_dir)
    if (d / "logging.jsonl").exists():
        return d
    return newest_version_dir(d, with_logs=True) or newest_version_dir(d)


def _global_batch(run: Any) -> int | None:
    from diagnose.batch import global_batch_of_run

    return global_batch_of_run(run)


def _log_tail(path: str, n: int = 15) -> tuple[list[str], str | None]:
    try:
        data = Path(path).read_bytes()[-65536:]
    except OSError:
        return [], None
    lines = []
    for raw in data.decode("utf-8", "replace").replace("\r", "\n").splitlines():
        s = raw.rstrip()
        if s and not re.match(r"^\s*(Train|Map|Val)\b.*\|", s):
            lines.append(s)
    err = next((ln.strip() for ln in reversed(lines) if _ERROR_LINE.match(ln.strip())), None)
    return lines[-n:], err


def diagnose_failure(spec: TrialSpec, run: Any, status: str, rc: int | None) -> Failure:
    tail, err = _log_tail(spec.log_path)
    fail = Failure(arm=spec.arm, trial=spec.index, status=status, returncode=rc, error_line=err, log_tail=tail,
                   prevalidation=list(spec.prevalidation))
    if run is None:
        return fail
    try:
        from diagnose.pipeline import analyze_run

        diag = analyze_run(run)
        fail.category, fail.rule, fail.summary = diag.primary.category, diag.primary.rule, diag.primary.summary
        fail.evidence = [f"{f.rule}: {f.evidence}" for f in diag.findings if f.severity in ("error", "warning")][:4]
    except Exception as e:  # the diagnosis must never hide the failure itself
        fail.summary = f"(diagnosis failed: {type(e).__name__}: {e})"
    return fail


MIN_CLEAN_FRAC = 0.5  # a trial needs at least half of its measured steps free of contention
MIN_CLEAN_STEPS = 3


def measure(spec: TrialSpec, run: Any, *, rc: int | None, status: str, wall_s: float | None,
            startup_s: float | None, train_s: float | None, samples: dict[str, Any] | None = None,
            contention: dict[int, tuple[float, float]] | None = None, ncpu: int | None = None,
            cpu_per_step: dict[int, float] | None = None) -> TrialResult:
    """A parsed trial log (a `Run`, or None when nothing could be read) -> TrialResult.

    `contention` maps a step to (external CPU cores, run-queue delay fraction) over the
    interval that ends at it; contended intervals are set aside when enough clean
    ones remain, else the trial is marked `disturbed` (and measured on all steps).
    """
    import numpy as np

    from diagnose.verify.contention import contended

    res = TrialResult(index=spec.index, arm=spec.arm, repeat=spec.repeat, returncode=rc, wall_s=wall_s,
                      startup_s=startup_s, train_s=train_s, max_steps=spec.max_steps, warmup_steps=spec.warmup)
    if run is not None and len(run.steps):
        t = run.steps
        steps = t["step"]
        iv = t["interval_s"]
        loss = t["loss"]
        ok = ~np.isnan(steps)
        res.steps = [int(s) for s in steps[ok]]
        res.step_times_s = [None if not math.isfinite(v) else round(float(v), 6) for v in iv[ok]]
        res.losses = [None if not math.isfinite(v) else float(v) for v in loss[ok]]
        res.steps_done = int(np.nanmax(steps)) if ok.any() else 0
        mem = t["memory_gib"]
        if t.has("memory_gib") and np.isfinite(mem).any():
            res.peak_memory_gib = float(np.nanmax(mem[np.isfinite(mem)]))
        res.global_batch = _global_batch(run)
        excl = None
        if contention:
            nc = ncpu or os.cpu_count() or 1
            measured = [int(x) for x in steps[ok] if x > spec.warmup]
            loads = [contention[x] for x in measured if x in contention]
            if loads:
                res.external_cpu_cores = round(float(np.mean([e for e, _ in loads])), 3)
                res.cpu_wait_frac = round(float(np.mean([w for _, w in loads])), 4)
            bad = {x for x in measured if x in contention and contended(*contention[x], nc)}
            clean = len(measured) - len(bad)
            if bad and clean >= max(MIN_CLEAN_STEPS, MIN_CLEAN_FRAC * len(measured)):
                excl = [int(x) in bad for x in steps[ok]]
                res.contended_steps = len(bad)
                res.notes.append(f"{len(bad)} of {len(measured)} measured steps set aside: the trial waited for "
                                 "CPUs that other processes held")
            elif bad:
                res.disturbed = True
                res.notes.append(f"{len(bad)} of {len(measured)} measured steps waited for CPUs held by other processes "
                                 f"(mean {res.external_cpu_cores} cores): the trial is disturbed")
        tp = trial_throughput(steps[ok], iv[ok], res.global_batch, spec.warmup, excl)
        if cpu_per_step:
            cpu = [v for k, v in cpu_per_step.items() if k > spec.warmup]
            if cpu:
                res.cpu_s_per_step = round(float(np.median(cpu)), 6)
        res.step_time_s, res.samples_per_s, res.measured_steps = tp.step_time_s, tp.samples_per_s, tp.measured_steps
        res.step_time_iqr_s = tp.step_time_iqr_s
        if tp.note:
            res.notes.append(tp.note)
        if res.samples_per_s is not None and run.dataset is not None and run.dataset.mean > 0:
            res.tokens_per_s = res.samples_per_s * run.dataset.mean  # mean sequence length (reference 6)
        if t.has("loss") and (t.present("loss") & ~np.isfinite(loss)).any() and status == "ok":
            status = "nan"
    if run is not None and status == "ok":
        kinds = {e.kind for e in run.events}
        if kinds & {"cuda_oom", "host_oom"}:
            status = "oom"
        elif "nan" in kinds:
            status = "nan"
    if status == "ok" and (rc not in (0, None) or res.steps_done < spec.max_steps):
        status = "crashed"
        if rc == 0:
            res.notes.append(f"exited 0 after {res.steps_done} of {spec.max_steps} steps")
    if samples:
        res.gpu_util_mean_pct = samples.get("gpu_util_mean_pct")
        res.gpu_mem_used_max_gib = samples.get("mem_used_max_gib")
    res.status = status  # type: ignore[assignment]
    if status != "ok":
        res.failure = diagnose_failure(spec, run, status, rc)
    return res


# ----------------------------------------------------------------------------- the real runner


class _Reader(threading.Thread):
    """Copy the child's output to the log file; timestamp the step lines."""

    def __init__(self, fd: int, log_path: str, on_step: OnStep | None, monitor: Any = None):
        super().__init__(name="swiftdoc-trial-reader", daemon=True)
        self.fd = fd
        self.log_path = log_path
        self.on_step = on_step
        self.monitor = monitor
        self.arrivals: dict[int, float] = {}  # step -> monotonic time its log line arrived
        self.first_step_t: float | None = None  # monotonic
        self.first_step_wall: float | None = None
        self.last_step_t: float | None = None
        self.last_step_wall: float | None = None
        self.last_step = 0

    def run(self) -> None:
        buf = b""
        with open(self.log_path, "wb") as out:
            while True:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                out.write(chunk)
                out.flush()
                buf += chunk
                *parts, buf = re.split(rb"[\r\n]", buf)
                for p in parts:
                    self._scan(p)
            if buf:
                self._scan(buf)

    def _scan(self, line: bytes) -> None:
        if b"global_step" not in line:
            return
        m = _STEP.search(line)
        if not m:
            return
        step = int(m.group(1) or m.group(3))
        total = int(m.group(2)) if m.group(2) else None
        now, wall = time.monotonic(), time.time()
        self.arrivals.setdefault(step, now)
        if self.monitor is not None:
            self.monitor.sample()
        if self.first_step_t is None:
            self.first_step_t, self.first_step_wall = now, wall
        self.last_step_t, self.last_step_wall = now, wall
        self.last_step = step
        if self.on_step is not None:
            try:
                self.on_step(step, total)
            except Exception:
                pass


class SwiftTrialRunner:
    """Runs each trial as a subprocess of the real ms-swift CLI (see module docstring)."""

    def __init__(self, poll_s: float = 0.25):
        self.poll_s = poll_s
        self.last_leftovers: list[int] = []
        self.last_contention: dict[int, tuple[float, float]] = {}
        self._cancel = threading.Event()

    def cancel(self) -> None:
        """Stop the running trial from another thread (Ctrl-C in the caller while trials run concurrently):
        its whole tree gets SIGINT, SIGTERM, SIGKILL in turn and `run` raises KeyboardInterrupt."""
        self._cancel.set()

    def run(self, spec: TrialSpec, on_step: OnStep | None = None) -> TrialResult:
        env = dict(os.environ)
        for k, v in spec.env.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = str(v)
        env.setdefault("PYTHONUNBUFFERED", "1")
        Path(spec.log_path).parent.mkdir(parents=True, exist_ok=True)
        sampler = None
        if spec.sample_gpus:
            from diagnose.verify.sampling import TrialSampler

            sampler = TrialSampler(spec.gpu_indices)
            sampler.start()
        rfd, wfd = os.pipe()
        t0 = time.monotonic()
        try:
            from diagnose.verify.guard import guard_argv

            # the guard: the trial's whole tree dies with this process, even when it is SIGKILLed (verify/guard.py)
            proc = subprocess.Popen(guard_argv(spec.argv, spec.cpus), stdout=wfd, stderr=wfd, stdin=subprocess.DEVNULL,
                                    env=env, cwd=spec.cwd, start_new_session=True)
        except OSError as e:
            os.close(rfd)
            os.close(wfd)
            if sampler is not None:
                sampler.stop(None, None)
            Path(spec.log_path).write_text(f"swiftdoc: could not start {spec.argv[0]}: {e}\n")
            return measure(spec, None, rc=None, status="crashed", wall_s=0.0, startup_s=None, train_s=None)
        os.close(wfd)
        from diagnose.verify.contention import CpuMonitor

        if spec.cpus:
            _pin(proc.pid, spec.cpus)
        monitor = CpuMonitor(cpus=spec.cpus)
        monitor.watch_tree(proc.pid)
        monitor.sample()
        reader = _Reader(rfd, spec.log_path, on_step, monitor)
        reader.start()
        known: set[int] = set()
        status = "ok"
        last_scan = 0.0
        try:
            while True:
                try:
                    proc.wait(timeout=self.poll_s)
                    break
                except subprocess.TimeoutExpired:
                    pass
                now = time.monotonic()
                if self._cancel.is_set():
                    raise KeyboardInterrupt
                if now - last_scan > (0.5 if spec.cpus else 2.0):  # children that may leave the process group later
                    new = _descendants(proc.pid) - known
                    known |= new
                    for p in known:
                        monitor.watch(p)
                    if spec.cpus:
                        for p in new | {proc.pid}:
                            _pin(p, spec.cpus)
                    last_scan = now
                monitor.sample()
                if now - t0 > spec.timeout_s:
                    status = "timeout"
                    kill_tree(proc, known, [(signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)])
                    break
        except BaseException:  # Ctrl-C (KeyboardInterrupt), SystemExit: the whole tree goes first
            kill_tree(proc, known, [(signal.SIGINT, 5.0), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)])
            reader.join(5)
            if sampler is not None:
                sampler.stop(None, None)
            raise
        finally:
            # grandchildren still holding the pipe (dataloader workers, torchrun ranks) must not outlive the trial
            if proc.poll() is not None and (_group_alive(proc.pid) or any(_alive(p) for p in known)):
                kill_tree(proc, known, [(signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)])
            self.last_leftovers = leftovers(proc.pid, known)
        reader.join(30)
        try:
            os.close(rfd)
        except OSError:
            pass
        wall = time.monotonic() - t0
        startup = (reader.first_step_t - t0) if reader.first_step_t is not None else None
        train = (reader.last_step_t - reader.first_step_t) if reader.first_step_t is not None and reader.last_step_t else None
        samples = None
        if sampler is not None:
            samples = sampler.stop(reader.first_step_wall, reader.last_step_wall)
        run = None
        try:
            from diagnose.parse import parse_run

            inputs = [spec.log_path]
            rd = _run_dir(spec.output_dir)
            if rd is not None and (rd / "logging.jsonl").exists():
                inputs.append(str(rd))
            run = parse_run(inputs)
        except Exception:
            run = None
        contention: dict[int, tuple[float, float]] = {}
        cpu_steps: dict[int, float] = {}
        arr = sorted(reader.arrivals.items())
        for (s0, t0_), (s1, t1_) in zip(arr, arr[1:]):
            if s1 == s0 + 1:
                load = monitor.interval_load(t0_, t1_)
                if load is not None:
                    contention[s1] = load
                c = monitor.own_cpu(t0_, t1_)
                if c is not None:
                    cpu_steps[s1] = c
        res = measure(spec, run, rc=proc.returncode, status=status, wall_s=round(wall, 3),
                      startup_s=None if startup is None else round(startup, 3),
                      train_s=None if train is None else round(train, 3), samples=samples,
                      contention=contention, ncpu=monitor.ncpu, cpu_per_step=cpu_steps)
        self.last_contention = contention
        from diagnose.verify.probe_split import trial_split

        res.time_split = trial_split(spec.output_dir)  # the trial ran with --probe: where its step time went
        if sampler is not None and sampler.error:
            res.notes.append(sampler.error)
        if self.last_leftovers:
            res.notes.append(f"processes still alive after the trial: {self.last_leftovers}")
        return res


# ----------------------------------------------------------------------------- recorded trials


class RecordedTrialRunner:
    """Replays recorded per-step interval times: `arms[arm]` is a list of trials, each a list of s/step.

    `losses[arm]` (optional) gives per-trial loss lists; `global_batch[arm]` the samples per step;
    `failures[arm]` a status ('oom', 'crashed', 'nan') that every trial of that arm ends with.
    Trials of an arm are used in order and cycle when more are asked for.  `slot_speed[slot]` (optional)
    makes a slot's device set slower or faster: its step times are divided by that factor.  Thread-safe
    (several slots may replay at once).
    """

    def __init__(self, arms: dict[str, list[list[float]]], global_batch: dict[str, int] | int = 16,
                 losses: dict[str, list[list[float]]] | None = None, failures: dict[str, str] | None = None,
                 startup_s: float = 30.0, slot_speed: dict[str, float] | None = None):
        self.slot_speed = slot_speed or {}
        self._lock = threading.Lock()
        self.arms = arms
        self.global_batch = global_batch
        self.losses = losses or {}
        self.failures = failures or {}
        self.startup_s = startup_s
        self.used: dict[str, int] = {}
        self.order: list[str] = []

    def run(self, spec: TrialSpec, on_step: OnStep | None = None) -> TrialResult:
        with self._lock:
            self.order.append(spec.arm)
            k = self.used.get(spec.arm, 0)
            self.used[spec.arm] = k + 1
        gb = self.global_batch if isinstance(self.global_batch, int) else self.global_batch.get(spec.arm, 16)
        if spec.arm in self.failures:
            res = TrialResult(index=spec.index, arm=spec.arm, repeat=spec.repeat, status=self.failures[spec.arm],
                              returncode=1, max_steps=spec.max_steps, warmup_steps=spec.warmup)
            res.failure = Failure(arm=spec.arm, trial=spec.index, status=self.failures[spec.arm], returncode=1,
                                  summary="recorded failure", prevalidation=list(spec.prevalidation))
            return res
        trials = self.arms[spec.arm]
        speed = self.slot_speed.get(spec.slot, 1.0)
        iv = [x / speed for x in list(trials[k % len(trials)])[: spec.max_steps]]
        steps = list(range(1, len(iv) + 1))
        if on_step is not None:
            for s in steps:
                on_step(s, spec.max_steps)
        tp = trial_throughput(steps, iv, gb, spec.warmup)
        ls = self.losses.get(spec.arm)
        losses = list(ls[k % len(ls)])[: len(iv)] if ls else []
        return TrialResult(index=spec.index, arm=spec.arm, repeat=spec.repeat, status="ok", returncode=0,
                           wall_s=self.startup_s + sum(iv), startup_s=self.startup_s, train_s=sum(iv[1:]),
                           steps_done=len(iv), max_steps=spec.max_steps, warmup_steps=spec.warmup,
                           measured_steps=tp.measured_steps, global_batch=gb, step_time_s=tp.step_time_s,
                           step_time_iqr_s=tp.step_time_iqr_s, samples_per_s=tp.samples_per_s, steps=steps,
                           step_times_s=iv, losses=losses)
