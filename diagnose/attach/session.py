"""The attach loop's data side: follow the logs, sample the GPUs, watch the host, diagnose.

Contract: `AttachSession(target, options)`; `start()` opens NVML (on failure:
log-only mode and `nvml_notice` says why in one line) and the samples file;
`update(force=False) -> Snapshot | None` polls once and returns a snapshot when
something changed (new log lines parsed, new findings, the job ended, or a GPU
heartbeat is due); `final() -> Snapshot` is the last word once the job ended;
`close()` stops the sampler.  A snapshot's `alerts` are findings whose rule had
not fired before in this session (warnings and errors, and any finding in a
failure category: nan, oom, nccl, bus_error, interrupted).

When the logs stay silent for `hang_after_s` (auto: `hang_threshold`) while the job's ranks live, every rank's
Python stack is dumped once (py-spy, `attach.stacks`) and the snapshot's `hang` says where
each rank waits and which one is not where the others are; it clears when the log moves.

Costs stay small and bounded (attach runs next to the job): files are stat'ed
every `poll_s`; only appended bytes are read for the urgent scan; the full
re-parse (`parse_run`, ~0.1 s per 10k steps) runs at most once per
`parse_every_s` and never more than `max_parse_share` of one core, except when
an urgent line (error signature, traceback, NaN) arrived: then at once.

While the job runs the diagnosis is `analyze_run(..., live=True)` with the host
features; after it ended it is computed exactly as `swiftdoc analyze` would on the
same inputs (the samples file this session wrote, no host features), so the two
agree.
"""
from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from diagnose.attach.follow import LogFollower
from diagnose.attach.target import Target
from diagnose.errors import InputError
from diagnose.models import Run

# a finding in these categories is an alert whatever its severity (an isolated nan step is
# "info" once the run is over, but the moment it appears nobody knows yet whether it recovers)
_FAILURE_CATEGORIES = {"nan", "oom", "nccl", "bus_error", "interrupted"}


@dataclass
class AttachOptions:
    interval_s: float = 1.0  # NVML sampling period
    poll_s: float = 0.2  # stat period for the log files
    parse_every_s: float = 1.0  # re-parse period while lines arrive (urgent lines: at once)
    max_parse_share: float = 0.2  # re-parsing may use at most this share of one core
    heartbeat_s: float = 5.0  # a snapshot at least this often (GPU view, JSON stream)
    samples_out: str | None = "auto"  # "auto": swiftdoc-samples.jsonl in the run dir; None: do not write
    nvml: bool = True
    fake_nvml: str | None = None
    gpu: str | None = None
    params: list[str] = field(default_factory=list)
    gpus: list[int] | None = None  # the job's GPUs as NVML indices, when the user names them
    end_grace_s: float = 1.0  # after the job's last process exits, wait this long for final writes
    # no new log line this long while the ranks live: dump their stacks.  "auto": ten step times, at least 60 s
    # (300 s before a step time is known); None: never
    hang_after_s: float | str | None = "auto"
    # while the job trains with two or more local ranks, one round of every rank's stack this often (py-spy, a
    # dump's pause): the rank outside the collective the others wait in is the straggler; None: never
    rank_stacks_every_s: float | None = 30.0


@dataclass
class Snapshot:
    t: float
    target: dict[str, Any]
    progress: dict[str, Any] | None
    gpus: dict[str, Any]
    host: dict[str, Any] | None
    diagnosis: Any  # diagnose.outputs.AnalyzeOut (the typed analyze document), None before the log says anything
    alerts: list[dict[str, Any]]
    ended: bool
    alive: bool
    seq: int
    notes: list[str]
    run: Run | None = None
    hang: dict[str, Any] | None = None  # stacks.localise() of the ranks when the log went silent, plus stalled_s

    def as_json(self) -> dict[str, Any]:
        """analyze's document (when there is a log) plus target, gpus, host and attach state (`outputs.AttachOut`)."""
        from diagnose.outputs import AttachOut
        from diagnose.render.run_json import jsonable

        out: dict[str, Any] = self.diagnosis.model_dump(mode="json") if self.diagnosis is not None else {}
        out["target"] = self.target
        out["gpus"] = self.gpus
        out["host"] = self.host
        out["attach"] = {"seq": self.seq, "t": round(self.t, 3), "ended": self.ended, "alive": self.alive,
                         "alerts": self.alerts, "progress": self.progress, "notes": self.notes, "hang": self.hang}
        return AttachOut.model_validate(jsonable(out)).model_dump(mode="json")


def _finite(a: np.ndarray) -> np.ndarray:
    return a[np.isfinite(a)]


def progress_of(run: Run) -> dict[str, Any] | None:
    """Parse-level numbers for the live view: step, speed over the last intervals, ETA, loss, grad_norm."""
    t = run.steps
    if not len(t):
        return None
    last = t.last() or {}
    step = last.get("step")
    ms = run.max_steps
    iv = _finite(t["interval_s"][-5:])
    s_per_it = float(np.median(iv)) if iv.size else None
    from diagnose.batch import global_batch_of_run

    gbs = global_batch_of_run(run)
    sps = gbs / s_per_it if (s_per_it and gbs) else None
    eta = (ms - step) * s_per_it if (ms and step is not None and s_per_it) else None

    def tail(col: str, n: int = 40) -> list[float | None]:
        v = t[col][-n:]
        pres = t.present(col)[-n:]
        return [float(x) if p and math.isfinite(x) else None for x, p in zip(v, pres)]

    return {
        "step": step,
        "max_steps": ms,
        "frac": (step / ms) if (ms and step is not None) else None,
        "s_per_it": s_per_it,
        "samples_per_s": sps,
        "eta_s": eta,
        "loss": last.get("loss"),
        "grad_norm": last.get("grad_norm"),
        "memory_gib": last.get("memory_gib"),
        "epoch": last.get("epoch"),
        "rows": len(t),
        "loss_series": tail("loss"),
        "grad_norm_series": tail("grad_norm"),
    }


_HANG_FLOOR_S = 60.0  # the shortest silence "auto" calls a hang


def hang_threshold(setting: float | str | None, run: Run | None) -> float | None:
    """Seconds of silence that make a hang: the setting, or for "auto" ten step times (at least 60 s; 300 s
    while no step time is known)."""
    if setting != "auto":
        return setting  # type: ignore[return-value]
    spi = (progress_of(run) or {}).get("s_per_it") if run is not None else None
    return max(_HANG_FLOOR_S, 10.0 * spi) if isinstance(spi, (int, float)) and math.isfinite(spi) and spi > 0 else 300.0


class AttachSession:
    def __init__(self, target: Target, options: AttachOptions | None = None):
        self.target = target
        self.opts = options or AttachOptions()
        # what the logs hold at attach time is parsed in full; only later lines need the urgent scan
        self.follower = LogFollower(start_at_end=True)
        self.run: Run | None = None
        self.seq = 0
        self.seen_rules: set[str] = set()
        self.nvml_notice: str | None = None
        self.samples = None  # SampleSet (in memory)
        self.samples_path: Path | None = None
        self._writer: Any = None
        self._want_file = False
        self._header: dict[str, Any] = {}
        self._sampler: Any = None
        self._thread: Any = None
        self._lock = threading.Lock()
        self._host: Any = None
        self._host_feats: dict[str, Any] | None = None
        self._host_t = 0.0
        self._last_parse = 0.0
        self._refresh_t = time.monotonic()
        self._parse_cost = 0.0
        self._pending = False  # lines arrived but not parsed yet
        self._urgent = False
        self._last_emit = 0.0
        self._last_sig: tuple[Any, ...] | None = None
        self._gone_at: float | None = None
        self._ended = False
        self._marked_step: int | None = None
        self._marked_gpus: list[int] | None = None
        self._summary: dict[str, Any] | None = None
        self._summary_t = 0.0
        self.notes: list[str] = list(target.notes)
        self._last_growth = time.monotonic()  # the logs last grew
        self._hang_checked: float | None = None
        self.hang: dict[str, Any] | None = None
        self._stack_rounds: list[dict[int, dict[str, Any]]] = []  # the last rounds of rank stacks (stragglers)
        self._stacks_t: float | None = None
        self.stack_stragglers: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ setup
    @property
    def gpus_linked(self) -> bool:
        """GPU samples describe this job: it runs here (PID known) or the user named its GPUs."""
        return self.target.pid is not None or self.target.gpus_pinned

    def start(self) -> None:
        if self.opts.gpus is not None:
            self.target.pin_gpus(self.opts.gpus)
        self._sync_paths()
        if self.target.pid is not None:
            from diagnose.host import HostMonitor

            self._host = HostMonitor(self.target.pid)
        if self.opts.nvml:
            self._start_nvml()
        else:
            self.nvml_notice = "GPU sampling off (--no-gpu): log-only mode"

    def _start_nvml(self) -> None:
        from diagnose.nvml.backend import NvmlUnavailable, open_backend
        from diagnose.nvml.sampler import Sampler, SamplerThread
        from diagnose.nvml.samples import SampleSet

        try:
            nv = open_backend(self.opts.fake_nvml)
            nv.nvmlShutdown()  # the sampler initialises it again and owns it from here
            sampler = Sampler(nv)
            header = sampler.open()
            if not sampler.gpus:
                sampler.close()
                raise NvmlUnavailable("NVML sees no GPU")
        except NvmlUnavailable as e:
            self.nvml_notice = f"log-only mode, no GPU metrics: {e.message}"
            return
        except Exception as e:  # NVMLError from a half-working driver
            self.nvml_notice = f"log-only mode, no GPU metrics: NVML failed ({type(e).__name__}: {e})"
            return
        header["target"] = {"pid": self.target.pid, "spec": self.target.spec}
        self.samples = SampleSet(header)
        self._header = header
        self._want_file = self.gpus_linked and self.opts.samples_out is not None
        if not self.gpus_linked:
            self.notes.append("no local process for this job: GPU samples are shown but not used in the diagnosis "
                              "(name its GPUs with --gpus to use them)")
        self._sampler = sampler
        self._thread = SamplerThread(sampler, self.opts.interval_s, [self._keep])
        self._thread.start()
        self._open_samples_file(final=False)

    def _samples_file(self, final: bool) -> Path | None:
        """Where analyze will look: the run folder (may appear only after start-up); at the end, next to the log."""
        o = self.opts.samples_out
        if o != "auto":
            return Path(o) if o else None
        from diagnose.nvml.samples import SAMPLES_FILENAME

        t = self.target
        dirs = [t.run_dir]
        if final or (t.output_dir is None and t.run_dir is None):
            dirs += [t.stdout_log.parent if t.stdout_log else None, t.output_dir]
        for d in dirs:
            if d is not None and d.is_dir() and os.access(d, os.W_OK):
                return d / SAMPLES_FILENAME
        return None

    def _open_samples_file(self, final: bool) -> None:
        """Open the samples file once its place is known and write what was sampled so far."""
        if self._writer is not None or not self._want_file:
            return
        out = self._samples_file(final)
        if out is None:
            if final:
                self._want_file = False
            return
        from diagnose.nvml.samples import SampleWriter

        with self._lock:
            try:
                w = SampleWriter(out)
                w.write(self._header)
                backlog = sorted(self.samples.records + self.samples.marks, key=lambda r: float(r.get("t", 0)))
                for rec in backlog:
                    w.write(rec)
            except OSError as e:
                self.notes.append(f"cannot write samples to {out} ({e.strerror}); keeping them in memory only")
                self._want_file = False
                return
            self._writer = w
            self.samples_path = out

    def _keep(self, rec: dict[str, Any]) -> None:
        with self._lock:
            self.samples.add(rec)
            self._write(rec)

    def _write(self, rec: dict[str, Any]) -> None:
        if self._writer is None:
            return  # kept in memory; written with the backlog once the file is opened
        try:
            self._writer.write(rec)
        except (OSError, ValueError):
            pass  # disk full / closed: keep sampling in memory

    def _mark(self, rec: dict[str, Any]) -> None:
        if self.samples is not None:
            self._keep(rec)

    def _sync_paths(self) -> None:
        for p in self.target.log_paths():
            if p.is_dir():
                for name in ("logging.jsonl", "args.json"):
                    self.follower.add(p / name)
            else:
                self.follower.add(p)

    # ------------------------------------------------------------------ the loop body
    def _nvml_pids(self) -> dict[int, set[int]] | None:
        if self.samples is None:
            return None
        with self._lock:
            latest = self.samples.latest()
        out = {}
        for i, g in latest.items():
            procs = g.get("procs")
            if isinstance(procs, list):
                out[i] = {int(p["pid"]) for p in procs if isinstance(p, dict) and "pid" in p}
        return out

    def _check_deleted(self, deleted: list[Path]) -> None:
        t = self.target
        for p in deleted:
            if t.stdout_log is not None and p == t.stdout_log:
                raise InputError(f"{p}: the log was deleted while attach was following it",
                                 hint="attach again to the PID or the output dir to follow its new files")
            if p.name == "logging.jsonl" and t.run_dir is not None and not t.run_dir.exists():
                raise InputError(f"{t.run_dir}: the run folder was deleted while attach was following it")
            if p.name == "logging.jsonl":
                raise InputError(f"{p}: the log was deleted while attach was following it",
                                 hint="attach again to the PID or the output dir to follow its new files")

    def _parse(self) -> None:
        from diagnose.parse import parse_run

        paths = [str(p) for p in self.target.log_paths()]
        if not paths:
            return
        t0 = time.process_time()
        w0 = time.monotonic()
        try:
            self.run = parse_run(paths)
            from diagnose.parse.probe import load_probe

            load_probe(self.run, paths)  # the growing swiftdoc probe files, when the job runs under swiftdoc probe
        except InputError:
            if not any(Path(p).exists() for p in paths):
                raise
            return  # a file caught mid-creation; try again next poll
        self._parse_cost = max(time.process_time() - t0, 0.0)
        self._last_parse = w0
        self._pending = False
        self._urgent = False
        step = (self.run.steps.last() or {}).get("step") if len(self.run.steps) else None
        if step is not None and step != self._marked_step:
            self._mark({"kind": "mark", "t": round(time.time(), 3), "event": "step", "step": step})
            self._marked_step = step

    def _gpu_summary(self, now: float, force: bool) -> dict[str, Any]:
        if self.samples is None:
            return {"nvml": self.nvml_notice or "off", "summary": None, "latest": [], "util_series": {}}
        # the summary walks every sample: refresh it every few seconds, not on every poll
        if force or self._summary is None or now - self._summary_t >= self.opts.heartbeat_s:
            with self._lock:
                self._summary = self.samples.summary(gpus=self.target.gpus)
            self._summary_t = now
        with self._lock:
            latest = self.samples.latest()
            idx = self.target.gpus if self.target.gpus is not None else sorted(latest)
            series = {str(i): self.samples.series("util_gpu_pct", i, last=60) for i in idx}
            info = {i: self.samples.gpu_info(i) for i in idx}
        rows = []
        for i in idx:
            g = latest.get(i, {})
            rows.append({"index": i, "name": info[i].get("name"), **{k: g.get(k) for k in (
                "util_gpu_pct", "util_mem_pct", "mem_used_mib", "mem_total_mib", "power_w", "power_limit_w",
                "temp_c", "throttle", "pcie_rx_mbps", "pcie_tx_mbps", "sm_clock_mhz")}})
        return {"nvml": "ok", "summary": self._summary, "latest": rows, "util_series": series,
                "samples_file": str(self.samples_path) if self.samples_path else None}

    def _host_features(self, now: float) -> dict[str, Any] | None:
        if self._host is None:
            return None
        if self._host_feats is None or now - self._host_t >= 2.0:
            self._host_feats = self._host.features()
            self._host_t = now
        return self._host_feats

    def _diagnose(self, live: bool, host: dict[str, Any] | None, gsum: dict[str, Any] | None) -> Any:
        if self.run is None:
            return None
        from diagnose.pipeline import AnalyzeOptions, analyze_run
        from diagnose.render.analysis_json import analyze_document

        diag = analyze_run(self.run, samples=gsum, host=host if live else None,
                           options=AnalyzeOptions(gpu=self.opts.gpu, params=self.opts.params, live=live))
        diag.stragglers = diag.stragglers + [{k: s[k] for k in ("gpu", "rank", "node", "slowdown", "evidence")}
                                             for s in self.stack_stragglers]
        return analyze_document(diag, self.run)

    def _alerts(self, diag: Any, now: float) -> list[dict[str, Any]]:
        if diag is None:
            return []
        out = []
        for f in diag.findings:
            if f.rule in self.seen_rules:
                continue
            if f.severity == "info" and f.category not in _FAILURE_CATEGORIES:
                continue  # informational config notes are shown, not alerted
            self.seen_rules.add(f.rule)
            out.append({"rule": f.rule, "slug": f.slug, "category": f.category, "severity": f.severity,
                        "confidence": f.confidence, "summary": f.summary, "evidence": f.evidence,
                        "t": round(time.time(), 3)})
        return out

    def update(self, force: bool = False) -> Snapshot | None:
        now = time.monotonic()
        t = self.target
        had = t.log_paths()
        if force or now - self._refresh_t >= 1.0:  # a /proc walk: once a second is plenty
            t.refresh(self._nvml_pids())
            self._refresh_t = now
            if t.log_paths() != had:
                self._sync_paths()
                self._pending = True
            self._open_samples_file(final=False)
        ch = self.follower.poll()
        self._check_deleted(ch.deleted)
        if ch.changed:
            self._pending = True
            self._last_growth = now
            self.hang, self._hang_checked = None, None  # it moves again
        if ch.urgent:
            self._urgent = True
        alive = t.alive()
        if t.pid is not None and not alive and self._gone_at is None:
            self._gone_at = now
        ended = self._gone_at is not None and now - self._gone_at >= self.opts.end_grace_s
        if t.pid is None and self.run is not None and self.run.ended and not self._pending:
            ended = True
        if ended:
            self._ended = True
            return None  # the caller asks for final()
        # re-parsing may take at most max_parse_share of a core; urgent lines skip the period, not the budget
        since = now - self._last_parse
        budget = self._parse_cost / max(self.opts.max_parse_share, 1e-3)
        due = since >= max(self.opts.parse_every_s, budget)
        urgent = self._urgent
        parsed = False
        if (self._pending and (due or force or (urgent and since >= budget))) or (self.run is None and had and due):
            self._parse()
            parsed = True
        if t.gpus is not None and t.gpus != self._marked_gpus:
            self._mark({"kind": "mark", "t": round(time.time(), 3), "event": "gpus", "gpus": t.gpus})
            self._marked_gpus = list(t.gpus)
        hung = self._check_hang(now, alive)
        if not hung and self._sample_rank_stacks(now, alive):
            parsed = True  # a straggler appeared or changed: show it
        beat = now - self._last_emit >= self.opts.heartbeat_s
        if not (parsed or beat or force or hung):
            return None
        return self._snapshot(now, live=True, force_summary=force or urgent or self.seq == 0, always=hung)

    def _check_hang(self, now: float, alive: bool) -> bool:
        """The log silent for `hang_after_s` while the ranks live: where is each rank waiting?  Once per silence
        period (again after another full period); True when a new localisation was made."""
        setting, t = self.opts.hang_after_s, self.target
        silent = now - self._last_growth
        # cheap tests first: this runs on every poll, the step-time median only once the log is silent a while
        if setting is None or not alive or not t.rank_pids or silent < (_HANG_FLOOR_S if setting == "auto" else setting):
            return False
        after = hang_threshold(setting, self.run)
        if after is None or silent < after:
            return False
        if self._hang_checked is not None and now - self._hang_checked < after:
            return False
        from diagnose.attach.stacks import dump_stacks, localise
        from diagnose.attach.target import rank_of

        self._hang_checked = now
        dumps = dump_stacks(t.verified(t.rank_pids), still_ours=lambda p: bool(t.verified([p])))
        res = localise(dumps, ranks={p: r for p in t.rank_pids if (r := rank_of(p)) is not None})
        res["stalled_s"] = round(now - self._last_growth, 1)
        errors = sorted({d["error"] for d in dumps.values() if d.get("error")})
        res["errors"] = errors
        self.hang = res
        return True

    def _sample_rank_stacks(self, now: float, alive: bool) -> bool:
        """One round of every local rank's stack while the job trains (its log grew within a poll period of
        the hang threshold's floor); True when the straggler verdict changed."""
        every, t = self.opts.rank_stacks_every_s, self.target
        if not every or not alive or len(t.rank_pids) < 2 or self.run is None or not len(self.run.steps):
            return False
        if now - self._last_growth >= _HANG_FLOOR_S or (self._stacks_t is not None and now - self._stacks_t < every):
            return False
        from diagnose.attach.stacks import dump_stacks, stragglers_from_stacks
        from diagnose.attach.target import rank_of

        self._stacks_t = now
        dumps = dump_stacks(t.verified(t.rank_pids), still_ours=lambda p: bool(t.verified([p])))
        errors = sorted({d["error"] for d in dumps.values() if d.get("error")})
        if errors and len(errors) == len(dumps):
            note = f"rank stacks: {errors[0]}"
            if note not in self.notes:
                self.notes.append(note)
            self.opts.rank_stacks_every_s = None  # py-spy missing or not permitted: do not retry every round
            return False
        self._stack_rounds = (self._stack_rounds + [dumps])[-60:]
        before = [(s["rank"], s["pid"]) for s in self.stack_stragglers]
        self.stack_stragglers = stragglers_from_stacks(
            self._stack_rounds, ranks={p: r for p in t.rank_pids if (r := rank_of(p)) is not None})
        return [(s["rank"], s["pid"]) for s in self.stack_stragglers] != before

    def _snapshot(self, now: float, live: bool, force_summary: bool = False, final: bool = False,
                  always: bool = False) -> Snapshot | None:
        host = self._host_features(now) if live else None
        g = self._gpu_summary(now, force_summary or final)
        gsum = g.get("summary")
        if final and self.samples_path is not None:
            from diagnose.nvml.samples import load_samples

            try:  # exactly what analyze will read
                gsum = load_samples(self.samples_path).summary()
                g["summary"] = gsum
            except InputError:
                pass
        diag = self._diagnose(live, host, gsum if self.gpus_linked else None)
        alerts = self._alerts(diag, now)
        prog = progress_of(self.run) if self.run is not None else None
        sig = (prog or {}).get("rows"), tuple(sorted(self.seen_rules)), self.run.total_lines if self.run else None
        if not (final or always or alerts) and sig == self._last_sig and now - self._last_emit < self.opts.heartbeat_s:
            return None
        self._last_sig = sig
        self._last_emit = now
        self.seq += 1
        return Snapshot(t=time.time(), target=self.target.as_json(), progress=prog, gpus=g, host=host,
                        diagnosis=diag, alerts=alerts, ended=final, alive=self.target.alive(), seq=self.seq,
                        notes=list(self.notes) + ([self.nvml_notice] if self.nvml_notice else []), run=self.run,
                        hang=self.hang if live else None)

    @property
    def ended(self) -> bool:
        return self._ended

    def final(self) -> Snapshot:
        """Stop sampling, read the logs one last time, diagnose as `analyze` would."""
        self._stop_sampler()
        self.follower.poll()
        self._parse()
        snap = self._snapshot(time.monotonic(), live=False, final=True)
        assert snap is not None
        return snap

    def once(self) -> Snapshot:
        """One snapshot now (for --once): parse, one GPU sample, host CPU use over a short window."""
        self.target.refresh(None)
        self._sync_paths()
        self._parse()
        if self._host is not None:
            self._host.features()
            time.sleep(0.3)
        if self.samples is not None:
            for _ in range(40):  # the sampler's first record comes right after start
                if len(self.samples):
                    break
                time.sleep(0.05)
            self.target.refresh(self._nvml_pids())
        live = self.target.alive() if self.target.pid is not None else not (self.run is not None and self.run.ended)
        snap = self._snapshot(time.monotonic(), live=live, force_summary=True, always=True)
        assert snap is not None
        return snap

    def _stop_sampler(self) -> None:
        if self._thread is not None:
            self._thread.stop()
            self._thread = None
        if self._sampler is not None:
            self._sampler.close()
            self._sampler = None
        self._open_samples_file(final=True)
        if self._writer is not None:
            try:
                self._writer.write({"kind": "end", "t": round(time.time(), 3)})
            except (OSError, ValueError):
                pass
            self._writer.close()
            self._writer = None

    def close(self) -> None:
        self._stop_sampler()
