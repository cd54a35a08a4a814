"""`swiftdoc sample [--interval S] [--out FILE]`: run the NVML sampler alone.

Writes the samples file (JSON lines, docs/attach.md) that `swiftdoc analyze
--samples FILE` reads, or finds by itself when it lies next to the log as
`swiftdoc-samples.jsonl`.  Runs until Ctrl-C, `--duration` or `--count`; prints
a one-line summary on stderr at the end.
Exit codes: 0 done (also after Ctrl-C), 2 bad arguments, 3 no NVML (no driver, no GPU).
"""
from __future__ import annotations

import argparse
import sys
import threading
import time

from diagnose.errors import UsageError

HELP = "sample GPU metrics with NVML into a samples file"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--interval", type=float, default=1.0, metavar="S", help="seconds between samples (default 1)")
    parser.add_argument("--out", default="swiftdoc-samples.jsonl", metavar="FILE",
                        help="samples file to append to, or - for stdout (default ./swiftdoc-samples.jsonl)")
    parser.add_argument("--duration", type=float, metavar="S", help="stop after S seconds")
    parser.add_argument("--count", type=int, metavar="N", help="stop after N samples")
    parser.add_argument("--gpus", metavar="LIST", help="NVML indices to sample, e.g. 0,1 (default: all)")
    parser.add_argument("--no-procs", action="store_true", help="do not list the compute processes on each GPU")
    parser.add_argument("--fake-nvml", metavar="TRACE", help=argparse.SUPPRESS)  # tests / benches / demos


def _gpus(spec: str | None) -> list[int] | None:
    if not spec:
        return None
    try:
        return [int(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--gpus: expected indices like 0,1, got '{spec}'") from None


def run(args: argparse.Namespace) -> int:
    from diagnose.nvml.backend import open_backend
    from diagnose.nvml.sampler import Sampler, run_sampler
    from diagnose.nvml.samples import SampleSet, SampleWriter

    if args.interval <= 0:
        raise UsageError("--interval must be > 0")
    nv = open_backend(args.fake_nvml)
    nv.nvmlShutdown()  # the sampler initialises NVML itself
    sampler = Sampler(nv, _gpus(args.gpus), procs=not args.no_procs)
    header = sampler.open()
    if not sampler.gpus:
        sampler.close()
        raise UsageError(f"--gpus {args.gpus}: no such GPU (this machine has {header['device_count']})")
    writer = SampleWriter(sys.stdout if args.out == "-" else args.out)
    writer.write(header)
    kept = SampleSet(header)

    def emit(rec: dict) -> None:
        writer.write(rec)
        kept.add(rec)

    stop = threading.Event()
    names = ", ".join(dict.fromkeys(g["name"] or "?" for g in header["gpus"]))
    sys.stderr.write(f"sampling {len(sampler.gpus)} GPU(s) ({names}) every {args.interval:g} s into "
                     f"{'stdout' if args.out == '-' else args.out}; Ctrl-C stops\n")
    t0 = time.monotonic()
    try:
        run_sampler(sampler, emit, args.interval, stop, duration_s=args.duration, count=args.count)
    except KeyboardInterrupt:
        pass
    finally:
        sampler.close()
        try:
            writer.write({"kind": "end", "t": round(time.time(), 3)})
        finally:
            writer.close()
    s = kept.summary()
    util = "N/A" if s["gpu_util_mean_pct"] is None else f"{s['gpu_util_mean_pct']:.0f}%"
    mem = "N/A" if s["mem_used_max_gib"] is None else f"{s['mem_used_max_gib']:.1f} GiB"
    unsup = sorted({u for g in header["gpus"] for u in g.get("unsupported", [])})
    sys.stderr.write(f"{len(kept)} samples in {time.monotonic() - t0:.1f} s; util mean {util}; max memory used {mem}"
                     + (f"; N/A on this GPU/driver: {', '.join(unsup)}" if unsup else "") + "\n")
    return 0
