"""verify's trials on a Ray cluster: each trial a Ray actor that requests its slot's GPUs (or CPUs).

Contract (the `Executor` interface of diagnose.verify.executor; `name` "ray"):
- `RayExecutor.connect(address, slots, job, probe=True) -> RayExecutor` checks everything before any trial,
  each failure one line and exit 3 (`EnvironmentMissing`): Ray not installed (the `ray` extra); an address
  that does not answer (a TCP connect to host:port within 3 s, before `ray.init`); a cluster without the
  resources of one slot (its GPUs, else its cores); workers without ms-swift (a probe task looks for the
  `swift` module and CLI there).  `address`: "local" starts a Ray on this machine for this run (stopped at
  `close()`), "auto" joins the running one, "host:port" a cluster's GCS.  Ray's connection timeouts are set to
  5 s (unless set) before `ray` is imported, and where a Ray auth token exists (RAY_AUTH_TOKEN or
  ~/.ray/auth_token) RAY_AUTH_MODE=token is set unless the user set a mode.
- `submit(spec, on_step)`: one actor per trial with `num_gpus`/`num_cpus` of its slot and the trial's
  environment in the spec (a GPU slot's CUDA_VISIBLE_DEVICES is Ray's to set: dropped; a CPU slot keeps its
  cores on a Ray of this machine only).  On a remote cluster only the files the job names (`verify.shipping`: the
  script, its datasets and configs under the current folder, never hidden files; size-checked, said in one line)
  travel as the runtime env's working_dir, and this package as a py_module; the trial runs with the real `SwiftTrialRunner` on the worker, writing
  its log in a temporary folder there.  The log streams back: the driver polls the actor for new bytes,
  appends them to `spec.log_path` and reports logged steps to `on_step`.  The `TrialResult` comes back as a
  dict and is validated here.
- `wait(handles)`: until the trials end; Ctrl-C cancels every running trial on its worker (the runner
  kills the trial's whole process tree), then kills the actors, then re-raises.  `close()` does the same
  for what is left, and stops a Ray it started.  Nothing is imported from Ray until `connect`.
"""
from __future__ import annotations

import os
import re
import socket
import sys
import time
from pathlib import Path
from typing import Any

from diagnose.errors import EnvironmentMissing
from diagnose.verify.models import TrialResult
from diagnose.verify.trial import OnStep, TrialSpec

_STEP = re.compile(rb"'global_step/max_steps': '(\d+)/(\d+)'|\"global_step/max_steps\": \"(\d+)/(\d+)\"")
_PKG = Path(__file__).resolve().parent.parent  # the diagnose package, shipped to remote workers


class RayUnavailable(EnvironmentMissing):
    """Ray cannot run the trials (exit 3, before any trial)."""


def _answers(address: str, timeout: float = 3.0) -> bool:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise RayUnavailable(f"--ray {address!r}: expected host:port, auto or local")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except OSError:
        return False


def _actor_class(ray: Any) -> Any:
    @ray.remote(max_concurrency=4)
    class TrialActor:  # noqa: D401 - a Ray actor
        def __init__(self) -> None:
            self.runner: Any = None
            self.log: str | None = None

        def run(self, spec: dict[str, Any], remote: bool) -> dict[str, Any]:
            import tempfile

            from diagnose.verify.trial import SwiftTrialRunner, TrialSpec

            s = TrialSpec(**spec)
            if remote:  # paths of the driver's machine mean nothing here: a temporary folder of the worker
                d = tempfile.mkdtemp(prefix=f"swiftdoc-trial{s.index}-")
                s.log_path, s.output_dir, s.cwd = f"{d}/trial.log", f"{d}/out", os.getcwd()
            self.log = s.log_path
            self.runner = SwiftTrialRunner()
            try:
                return self.runner.run(s).model_dump(mode="json")
            except KeyboardInterrupt:  # cancel(): the runner killed the trial's tree
                return {"cancelled": True}

        def read(self, offset: int) -> bytes:
            if not self.log:
                return b""
            try:
                with open(self.log, "rb") as fh:
                    fh.seek(offset)
                    return fh.read(1 << 20)
            except OSError:
                return b""

        def cancel(self) -> bool:
            if self.runner is not None:
                self.runner.cancel()
            return True

    return TrialActor


class _Handle:
    __slots__ = ("spec", "actor", "ref", "offset", "on_step", "last_step", "log")

    def __init__(self, spec: TrialSpec, actor: Any, ref: Any, on_step: OnStep | None):
        self.spec, self.actor, self.ref, self.on_step = spec, actor, ref, on_step
        self.offset = 0
        self.last_step = 0
        Path(spec.log_path).parent.mkdir(parents=True, exist_ok=True)
        self.log = open(spec.log_path, "wb")  # noqa: SIM115 - closed when the trial ends


class RayExecutor:
    name = "ray"

    def __init__(self, ray: Any, slots: list[Any], started: bool, remote: bool, runtime_env: dict[str, Any] | None,
                 swift: str | None):
        self.ray = ray
        self.slots = {s.name: s for s in slots}
        self.started = started
        self.remote = remote
        self.runtime_env = runtime_env
        self.swift = swift
        self._actor = _actor_class(ray)
        self._live: list[_Handle] = []
        self._ship: Any = None  # the staged working_dir of a remote cluster (verify.shipping), removed at close

    # ------------------------------------------------------------------ connect and check
    @classmethod
    def connect(cls, address: str, slots: list[Any], job: Any, probe: bool = True) -> RayExecutor:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        # read when `ray` is imported: a port that answers but is not a reachable GCS fails in seconds, not after
        # Ray's default 20 retries (measured: 820 s by default, 4 s at 1 s each; a real cluster connects either way)
        for var in ("RAY_gcs_server_port_wait_time_s", "RAY_py_gcs_connect_timeout_s",
                    "RAY_gcs_rpc_server_connect_timeout_s"):
            os.environ.setdefault(var, "5")
        # Ray 2.60 turns token auth on where a token exists: joining a cluster by address needs the mode said too
        if "RAY_AUTH_MODE" not in os.environ and (os.environ.get("RAY_AUTH_TOKEN") or
                                                  (Path.home() / ".ray" / "auth_token").exists()):
            os.environ["RAY_AUTH_MODE"] = "token"
        if address not in ("local", "auto") and not _answers(address):
            raise RayUnavailable(f"the Ray address {address} does not answer (no TCP connection within 3 s)",
                                 hint="start the head with `ray start --head --port PORT`, or use --ray local")
        try:
            import ray
        except ImportError:
            raise RayUnavailable("--ray needs Ray: pip install 'swiftdoc[ray]' (or pip install ray)") from None
        started = address == "local"
        kw: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False, configure_logging=False)
        try:
            if started:
                ray.init(address="local", num_cpus=len(os.sched_getaffinity(0)), object_store_memory=80 * 2**20, **kw)
            else:
                ray.init(address=address, **kw)
        except Exception as e:  # noqa: BLE001 - Ray raises many kinds; the user needs one line
            raise RayUnavailable(f"cannot connect to Ray at {address}: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
        ship = None
        try:
            remote = not started and not _same_machine(ray)
            renv: dict[str, Any] | None = None
            if remote:  # only the files the job names travel, never the whole current folder (~/.ssh, ~/.aws...)
                from diagnose.verify.shipping import stage

                script = job.source.rsplit(" line ", 1)[0]
                ship = stage(job, script if os.path.isfile(script) else None)
                job.notes.append(ship.line)
                sys.stderr.write(f"verify: {ship.line}\n")
                renv = {"working_dir": ship.dir, "py_modules": [str(_PKG)]}
            ex = cls(ray, slots, started, remote, renv, None)
            ex._ship = ship
            ex._check_resources(slots)
            if probe:
                ex.swift = ex._probe_swift(job)
            return ex
        except BaseException:
            if ship is not None:
                ship.close()
            if started:
                ray.shutdown()
            raise

    def _check_resources(self, slots: list[Any]) -> None:
        have = self.ray.cluster_resources()
        for s in slots:
            need_gpu = len(s.gpus or [])
            need_cpu = len(s.cpus or []) or 1
            if need_gpu and have.get("GPU", 0) < need_gpu:
                raise RayUnavailable(f"the Ray cluster has {have.get('GPU', 0):g} GPU(s); a slot needs {need_gpu}")
            if have.get("CPU", 0) < need_cpu:
                raise RayUnavailable(f"the Ray cluster has {have.get('CPU', 0):g} CPU(s); a slot needs {need_cpu}")

    def _probe_swift(self, job: Any) -> str | None:
        ray = self.ray

        @ray.remote(num_cpus=0)
        def probe(swift: str) -> dict[str, Any]:
            import importlib.util
            import os as _os
            import shutil
            import socket as _s
            import sys

            here = swift if _os.path.exists(swift) else shutil.which("swift")
            return {"host": _s.gethostname(), "module": importlib.util.find_spec("swift") is not None,
                    "cli": here, "python": sys.executable}

        try:
            got = ray.get(probe.options(runtime_env=self.runtime_env).remote(job.swift), timeout=120)
        except Exception as e:  # noqa: BLE001
            raise RayUnavailable(f"a Ray worker could not run the ms-swift probe: {str(e).splitlines()[0]}") from None
        if not got["module"] or not got["cli"]:
            raise RayUnavailable(f"the Ray worker on {got['host']} has no ms-swift (python {got['python']}: "
                                 f"module {'found' if got['module'] else 'missing'}, `swift` CLI "
                                 f"{'found' if got['cli'] else 'missing'})",
                                 hint="install ms-swift on every worker (the same version as the job)")
        return got["cli"]

    # ------------------------------------------------------------------ trials
    def submit(self, spec: TrialSpec, on_step: OnStep | None = None) -> _Handle:
        slot = self.slots.get(spec.slot)
        env = dict(spec.env)
        if slot is not None and slot.gpus:
            env.pop("CUDA_VISIBLE_DEVICES", None)  # Ray gives the actor its GPUs
        d = dict(spec.__dict__)
        d.update(env=env, cpus=None if self.remote else spec.cpus)  # a slot's cores exist only on this machine
        if self.swift and self.remote and d["argv"] and not Path(d["argv"][0]).is_absolute():
            d["argv"] = [self.swift, *d["argv"][1:]]
        opts: dict[str, Any] = {"num_gpus": len(slot.gpus) if slot is not None and slot.gpus else 0,
                                "num_cpus": len(slot.cpus) if slot is not None and slot.cpus else 1}
        if self.runtime_env:
            opts["runtime_env"] = self.runtime_env
        actor = self._actor.options(**opts).remote()
        h = _Handle(spec, actor, actor.run.remote(d, self.remote), on_step)
        self._live.append(h)
        return h

    def _pump(self, h: _Handle) -> None:
        try:
            data = self.ray.get(h.actor.read.remote(h.offset), timeout=30)
        except Exception:  # noqa: BLE001 - a dead actor: its result says why
            return
        if not data:
            return
        h.offset += len(data)
        h.log.write(data)
        h.log.flush()
        if h.on_step is not None:
            for m in _STEP.finditer(data):
                cur, tot = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
                if int(cur) > h.last_step:
                    h.last_step = int(cur)
                    h.on_step(int(cur), int(tot))

    def wait(self, handles: list[_Handle]) -> list[TrialResult]:
        ray = self.ray
        try:
            pending = list(handles)
            while pending:
                ready, _ = ray.wait([h.ref for h in pending], num_returns=len(pending), timeout=0.5)
                for h in pending:
                    self._pump(h)
                pending = [h for h in pending if h.ref not in ready]
        except BaseException:
            self.cancel()
            raise
        out = []
        for h in handles:
            self._pump(h)
            h.log.close()
            try:
                res = TrialResult.model_validate(ray.get(h.ref))
            finally:
                self._kill(h)
                self._live.remove(h)
            res.slot = h.spec.slot
            out.append(res)
        return out

    def _kill(self, h: _Handle) -> None:
        try:
            self.ray.kill(h.actor)
        except Exception:  # noqa: BLE001
            pass

    def cancel(self) -> None:
        """Every running trial: its runner kills the trial's process tree on the worker; then the actors go."""
        ray = self.ray
        refs = []
        for h in self._live:
            try:
                refs.append(h.actor.cancel.remote())
            except Exception:  # noqa: BLE001
                pass
        deadline = time.monotonic() + 60
        try:
            ray.get(refs, timeout=30)
        except Exception:  # noqa: BLE001
            pass
        for h in self._live:
            try:  # the run() call returns once the tree is gone (KeyboardInterrupt inside the actor)
                ray.wait([h.ref], timeout=max(0.0, deadline - time.monotonic()))
            except Exception:  # noqa: BLE001
                pass
            self._kill(h)
            try:
                h.log.close()
            except Exception:  # noqa: BLE001
                pass
        self._live.clear()

    def close(self) -> None:
        if self._live:
            self.cancel()
        if self._ship is not None:
            self._ship.close()
            self._ship = None
        if self.started:
            try:
                self.ray.shutdown()
            except Exception:  # noqa: BLE001
                pass


def _same_machine(ray: Any) -> bool:
    """True when every node of the cluster is this machine (a local Ray, or `auto` on a one-node cluster)."""
    try:
        here = {socket.gethostname()}
        try:
            here.add(socket.gethostbyname(socket.gethostname()))
        except OSError:
            pass
        here |= {"127.0.0.1", "localhost"}
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        return all(n.get("NodeManagerAddress") in here or n.get("NodeManagerHostname") in here for n in nodes)
    except Exception:  # noqa: BLE001
        return False


__all__ = ["RayExecutor", "RayUnavailable"]
