"""`swiftdoc attach PID | OUTPUT_DIR | LOG`: follow a running ms-swift job and diagnose it live.

Finds the job (processes, output dir, logs, GPUs), follows its logs, samples its
GPUs (samples saved as swiftdoc-samples.jsonl in the run folder, where `analyze`
finds them), watches the host, and shows a live view; an ALERT line is printed
the moment a rule fires.  `--once` prints one snapshot and exits.  `--format json`
prints analyze's JSON plus `target`, `gpus`, `host` and `attach`: one document
with --once, else one JSON line per update and a last one with attach.ended=true.
Read-only: never signals, pauses or slows the job.
Exit codes: 0 followed to the end (or Ctrl-C, or --once); 1 with --fail-on when
the final diagnosis reaches that severity; 2 bad target (no such PID, not an
ms-swift job, no permission, log deleted under us); 3 never for a missing GPU
(that is log-only mode, announced in one line).
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from diagnose.errors import UsageError
from diagnose.redact import redact

HELP = "follow a running job (PID, output dir or log) and diagnose it live"
from diagnose.engine import SEVERITY_RANK as _SEV  # noqa: E402


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", metavar="PID|OUTPUT_DIR|LOG", help="the job's PID, its --output_dir, or its log file")
    parser.add_argument("--once", action="store_true", help="print one snapshot and exit")
    parser.add_argument("--format", choices=["text", "json"], default="text")
    parser.add_argument("--interval", type=float, default=1.0, metavar="S", help="GPU sampling period (default 1 s)")
    parser.add_argument("--poll", type=float, default=0.2, metavar="S", help="log polling period (default 0.2 s)")
    parser.add_argument("--samples-out", metavar="FILE",
                        help="where to append GPU samples (default: swiftdoc-samples.jsonl in the run folder)")
    parser.add_argument("--no-samples-file", action="store_true", help="keep GPU samples in memory only")
    parser.add_argument("--no-gpu", action="store_true", help="do not use NVML (log-only mode)")
    parser.add_argument("--gpus", metavar="LIST", help="the job's GPUs as NVML indices, e.g. 0,1 (default: found "
                        "from the NVML process list or the job's CUDA_VISIBLE_DEVICES)")
    parser.add_argument("--gpu", help="GPU model for capacity and MFU when NVML cannot tell, e.g. A100-80GB")
    parser.add_argument("--param", action="append", default=[], metavar="RULE.param=VALUE",
                        help="override a rule threshold (repeatable)")
    parser.add_argument("--hang-after", type=float, default=None, metavar="S",
                        help="no new log line for S seconds while the ranks live: dump every rank's Python stack "
                             "(py-spy) and name the rank not waiting where the others wait (default: ten step "
                             "times, at least 60 s; 0: never)")
    parser.add_argument("--rank-stacks", type=float, default=None, metavar="S",
                        help="while the job trains with two or more local ranks, take every rank's Python stack "
                             "(py-spy) every S seconds; the rank outside the collective the others wait in is "
                             "named the straggler (default 30; 0: never)")
    parser.add_argument("--timeout", type=float, metavar="S", help="stop following after S seconds")
    parser.add_argument("--fail-on", choices=["info", "warning", "error"],
                        help="exit 1 when the final diagnosis has a finding of this severity")
    parser.add_argument("--all-users", action="store_true",
                        help="follow and dump the job's processes of every user (default: the job's user only)")
    parser.add_argument("--fake-nvml", metavar="TRACE", help=argparse.SUPPRESS)  # tests / benches / demos


def _write_json(obj: dict) -> None:
    sys.stdout.write(json.dumps(redact(obj), ensure_ascii=False) + "\n")  # shareable: no tokens, keys or passwords
    sys.stdout.flush()


def _exit_code(snap, fail_on: str | None) -> int:
    if not fail_on or not snap.diagnosis:
        return 0
    worst = max((_SEV.get(f.severity, 0) for f in snap.diagnosis.findings), default=0)
    return 1 if worst >= _SEV[fail_on] else 0


def run(args: argparse.Namespace) -> int:
    from diagnose.attach.session import AttachOptions, AttachSession
    from diagnose.attach.target import resolve_target

    if args.interval <= 0 or args.poll <= 0:
        raise UsageError("--interval and --poll must be > 0")
    if args.hang_after is not None and args.hang_after < 0:
        raise UsageError("--hang-after must be >= 0 (0: never)")
    if args.rank_stacks is not None and args.rank_stacks < 0:
        raise UsageError("--rank-stacks must be >= 0 (0: never)")
    gpus = None
    if args.gpus is not None:
        try:
            gpus = [int(x) for x in args.gpus.split(",") if x.strip()]
        except ValueError:
            raise UsageError(f"--gpus: expected indices like 0,1, got '{args.gpus}'") from None
    target = resolve_target(args.target, all_users=args.all_users)
    # one snapshot is too short a window to leave a samples file behind for analyze
    samples_out = None if (args.no_samples_file or args.once) else (args.samples_out or "auto")
    opts = AttachOptions(interval_s=args.interval, poll_s=args.poll, samples_out=samples_out, nvml=not args.no_gpu,
                         fake_nvml=args.fake_nvml, gpu=args.gpu, params=args.param, gpus=gpus,
                         hang_after_s="auto" if args.hang_after is None else (args.hang_after or None),
                         rank_stacks_every_s=30.0 if args.rank_stacks is None else (args.rank_stacks or None))
    session = AttachSession(target, opts)
    session.start()
    if session.nvml_notice and not args.no_gpu and args.format == "json":  # the text view's GPU line says it
        sys.stderr.write(f"notice: {session.nvml_notice}\n")
    try:
        if args.once:
            snap = session.once()
            _emit_final(snap, args)
            return _exit_code(snap, args.fail_on)
        if args.format == "json":
            return _follow_json(session, args)
        return _follow_text(session, args)
    finally:
        session.close()


def _emit_final(snap, args: argparse.Namespace) -> None:
    if args.format == "json":
        _write_json(snap.as_json())
        return
    from rich.console import Console

    from diagnose.attach.view import render_snapshot

    Console(highlight=False).print(render_snapshot(redact(snap)))


def _loop(session, args: argparse.Namespace):
    """Yield snapshots until the job ends (then the final one), --timeout, or Ctrl-C."""
    deadline = time.monotonic() + args.timeout if args.timeout else None
    first = True
    while True:
        snap = session.update(force=first)
        first = False
        if snap is not None:
            yield snap
        if session.ended:
            yield session.final()
            return
        if deadline is not None and time.monotonic() >= deadline:
            return
        time.sleep(args.poll)


def _follow_json(session, args: argparse.Namespace) -> int:
    last = None
    try:
        for snap in _loop(session, args):
            _write_json(snap.as_json())
            last = snap
    except KeyboardInterrupt:
        pass
    return _exit_code(last, args.fail_on) if last is not None and last.ended else 0


def _follow_text(session, args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.live import Live

    from diagnose.attach.view import alert_text, render_snapshot

    console = Console(highlight=False)
    last = None
    if not console.is_terminal:
        # a pipe or file: alerts as lines, one progress line per update, the full view at the end
        try:
            for snap in _loop(session, args):
                for a in snap.alerts:
                    console.print(alert_text(redact(a)))
                if snap.ended:
                    console.print(render_snapshot(redact(snap)))
                elif snap.progress:
                    p = snap.progress
                    console.print(f"step {p.get('step')}/{p.get('max_steps') or '?'}"
                                  + (f"  {p['s_per_it']:.3g} s/it" if p.get("s_per_it") else "")
                                  + (f"  loss {p['loss']:.4g}" if p.get("loss") is not None else ""))
                last = snap
        except KeyboardInterrupt:
            pass
        return _exit_code(last, args.fail_on) if last is not None and last.ended else 0
    try:
        with Live(console=console, refresh_per_second=4, transient=False) as live:
            for snap in _loop(session, args):
                for a in snap.alerts:
                    live.console.print(alert_text(redact(a)))
                    live.console.bell()
                live.update(render_snapshot(redact(snap)))
                last = snap
    except KeyboardInterrupt:
        pass
    return _exit_code(last, args.fail_on) if last is not None and last.ended else 0
