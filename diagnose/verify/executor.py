"""Where verify's trials run: slots (disjoint device sets) and executors (here, or on a Ray cluster).

Contract:
- `Slot(name, env, cpus, gpus)`: one device set.  `name` is what the report shows ("gpu:0,1", "cpu:1",
  "all" when verify does not split the machine); `env` is laid over the trial's environment
  (`CUDA_VISIBLE_DEVICES` for a GPU slot; `OMP_NUM_THREADS`/`MKL_NUM_THREADS` = its cores for a CPU slot);
  `cpus` pins a CPU slot's processes to its cores (sched_setaffinity, inherited by every child).
- `plan_slots(n_slots, gpus_per_trial=None, env=None, probe=probe_gpus) -> list[Slot]`: the visible GPUs
  (the job's CUDA_VISIBLE_DEVICES, else all) split into `n_slots` disjoint sets of `gpus_per_trial`
  (default: as many as divide evenly); with no GPU, the cores this process may run on split the same way.
  Raises `SlotError` (exit 3, one line, before any trial) when there are fewer devices than slots, when
  the GPUs are not all the same model, or when a GPU is busy (memory in use or a compute process on it).
  `n_slots=None` is one slot "all" (the machine as it is, nothing pinned).
- `Executor` protocol: `name`; `submit(spec, on_step) -> handle` starts one trial (`spec.slot`,
  `spec.cpus`, env already laid over); `wait(handles) -> [TrialResult]` blocks until those trials end, in
  the order given, and on Ctrl-C (KeyboardInterrupt in the waiting thread) cancels every running trial,
  waits for their process trees to be gone, then re-raises; `close()`.
- `LocalExecutor(runner=None)`: each trial is a subprocess here (a `SwiftTrialRunner` of its own per
  trial, in a thread; the given `runner` instead, e.g. a `RecordedTrialRunner`), `name` "local".
- `RayExecutor` (diagnose.verify.ray_executor): the same interface on a Ray cluster.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from diagnose.errors import EnvironmentMissing
from diagnose.verify.models import TrialResult
from diagnose.verify.trial import OnStep, SwiftTrialRunner, TrialRunner, TrialSpec


class SlotError(EnvironmentMissing):
    """The machine cannot give the slots asked for (exit 3, before any trial)."""


@dataclass
class Slot:
    name: str
    env: dict[str, str | None] = field(default_factory=dict)
    cpus: list[int] | None = None
    gpus: list[int] | None = None


def _span(xs: list[int]) -> str:
    return f"{xs[0]}-{xs[-1]}" if len(xs) > 2 and xs == list(range(xs[0], xs[-1] + 1)) else ",".join(map(str, xs))


def probe_gpus() -> list[dict[str, Any]] | None:
    """Every GPU NVML sees: {index, name, mem_used_mib, procs}; None without NVML or GPUs."""
    try:
        from diagnose.nvml.backend import open_backend

        nv = open_backend()
    except Exception:  # no library, no driver, no GPU: CPU slots
        return None
    try:
        out = []
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            name = nv.nvmlDeviceGetName(h)
            name = name.decode() if isinstance(name, bytes) else str(name)
            try:
                used = nv.nvmlDeviceGetMemoryInfo(h).used / 2**20
            except Exception:
                used = None
            try:
                procs = len(nv.nvmlDeviceGetComputeRunningProcesses(h))
            except Exception:
                procs = None
            out.append({"index": i, "name": name, "mem_used_mib": used, "procs": procs})
        return out or None
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:
            pass


def _visible(env: dict[str, str | None] | None, n: int) -> list[int]:
    raw = (env or {}).get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
    if raw is None or raw.strip() == "":
        return list(range(n)) if raw is None else []
    out = []
    for tok in raw.split(","):
        tok = tok.strip()
        if tok.isdigit() and int(tok) < n:
            out.append(int(tok))
    return out


def plan_slots(n_slots: int | None, gpus_per_trial: int | None = None, env: dict[str, str | None] | None = None,
               probe: Callable[[], list[dict[str, Any]] | None] = probe_gpus) -> list[Slot]:
    if n_slots is None and gpus_per_trial is None:
        return [Slot("all")]
    gpus = probe()
    if gpus:
        vis = _visible(env, len(gpus))
        if not vis:
            raise SlotError("CUDA_VISIBLE_DEVICES hides every GPU: no device to make slots of")
        k = gpus_per_trial or max(1, len(vis) // (n_slots or 1))
        n = n_slots or len(vis) // k
        if n < 1 or n * k > len(vis):
            raise SlotError(f"{n or n_slots} slot(s) of {k} GPU(s) need {(n or n_slots or 1) * k} GPUs; "
                            f"{len(vis)} visible ({_span(vis)})")
        used = [gpus[i] for i in vis[: n * k]]
        names = sorted({g["name"] for g in used})
        if len(names) > 1:
            raise SlotError("the slots' GPUs are not the same model (" + "; ".join(
                f"{g['index']}: {g['name']}" for g in used) + "): their speeds are not comparable")
        busy = [g for g in used if (g.get("procs") or 0) > 0 or (g.get("mem_used_mib") or 0) > 1024]
        if busy:
            raise SlotError("GPU(s) " + ", ".join(str(g["index"]) for g in busy) + " are busy (memory in use or a "
                            "compute process on them): trials there would measure the other job")
        out = []
        for s in range(n):
            ids = vis[s * k:(s + 1) * k]
            out.append(Slot(f"gpu:{','.join(map(str, ids))}", {"CUDA_VISIBLE_DEVICES": ",".join(map(str, ids))},
                            gpus=ids))
        return out
    if gpus_per_trial is not None:
        raise SlotError("--gpus-per-trial: no GPU on this machine (NVML sees none)",
                        hint="use --slots N to split the CPU cores instead")
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    n = n_slots or 1
    k = len(cores) // n
    if k < 1:
        raise SlotError(f"{n} slots need at least {n} CPU cores; this process may use {len(cores)} ({_span(cores)})")
    out = []
    for s in range(n):
        ids = cores[s * k:(s + 1) * k]
        out.append(Slot(f"cpu:{_span(ids)}", {"OMP_NUM_THREADS": str(k), "MKL_NUM_THREADS": str(k)}, cpus=ids))
    return out


class Executor(Protocol):
    name: str

    def submit(self, spec: TrialSpec, on_step: OnStep | None = None) -> Any: ...
    def wait(self, handles: list[Any]) -> list[TrialResult]: ...
    def close(self) -> None: ...


class _Local:
    __slots__ = ("spec", "runner", "thread", "result", "error", "done")

    def __init__(self, spec: TrialSpec, runner: Any):
        self.spec, self.runner = spec, runner
        self.thread: threading.Thread | None = None
        self.result: TrialResult | None = None
        self.error: BaseException | None = None
        # set when the trial's thread ends.  Not Thread.is_alive(): a join() that Ctrl-C interrupts can leave a
        # running thread marked as stopped (CPython before 3.13), and its trial would then never be cancelled
        self.done = threading.Event()


class LocalExecutor:
    name = "local"

    def __init__(self, runner: TrialRunner | None = None):
        self.runner = runner
        self._live: list[_Local] = []

    def submit(self, spec: TrialSpec, on_step: OnStep | None = None) -> _Local:
        h = _Local(spec, self.runner if self.runner is not None else SwiftTrialRunner())

        def go() -> None:
            try:
                h.result = h.runner.run(spec, on_step)
            except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
                h.error = e
            finally:
                h.done.set()

        h.thread = threading.Thread(target=go, name=f"trial-{spec.index}", daemon=True)
        self._live.append(h)
        h.thread.start()
        return h

    def cancel(self) -> None:
        """Stop every running trial (their process trees) and wait for them to be gone."""
        for h in self._live:
            c = getattr(h.runner, "cancel", None)
            if c is not None and not h.done.is_set():
                c()
        for h in self._live:
            h.done.wait(60)

    def wait(self, handles: list[_Local]) -> list[TrialResult]:
        try:
            for h in handles:
                while not h.done.wait(0.2):
                    pass
        except BaseException:
            self.cancel()
            raise
        out = []
        for h in handles:
            self._live.remove(h)
            if h.error is not None:
                raise h.error
            assert h.result is not None
            out.append(h.result)
        return out

    def close(self) -> None:
        if self._live:
            self.cancel()
            self._live.clear()


__all__ = ["Slot", "SlotError", "plan_slots", "probe_gpus", "Executor", "LocalExecutor"]
