"""`swiftdoc probe -- swift sft ...`: run a training command with swiftdoc's in-trainer probe added.

Contract: the command after `--` (`swift sft|pt|rlhf ...`, `torchrun ... swift/cli/sft.py ...`, `python -m
swift.cli.sft ...`; NPROC_PER_NODE and the rest of the environment pass through) is run with the probe's flags
merged in (`patch.probe_flags.add_probe`: ms-swift's `--external_plugins` list, and `--callbacks` on 4.x); its
output is the job's own, and the command's exit status is returned (128 + N when a signal N ended it).  After
it, one line on stderr says where the per-rank records are and how to analyse them.
`--print-args` prints the flags (and the optional environment) to paste into a launch script instead
(`--format json` for tools).  The flags depend on the ms-swift the job runs: `--swift-version`, else the
version installed beside the command's interpreter (importlib.metadata in a helper interpreter, swift never
imported here).  Exit codes: 2 bad usage (nothing after --, not an ms-swift training command, Megatron);
3 no ms-swift found, or a version without a trainer-callback mechanism (one line saying so).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from diagnose.errors import EnvironmentMissing, UsageError

HELP = "run a training command with swiftdoc's in-trainer probe (per-rank step time, data wait)"
_TRAIN = {"sft", "pt", "rlhf"}
_SCRIPT = re.compile(r"(?:^|/)swift/cli/(_megatron/)?(\w+)\.py$")
_MODULE = re.compile(r"^swift\.cli\.(_megatron\.)?(\w+)$")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- swift sft ...",
                        help="the training command to run with the probe")
    parser.add_argument("--print-args", action="store_true",
                        help="print the flags and environment to add to a launch script, run nothing")
    parser.add_argument("--swift-version", metavar="V", help="ms-swift version the job runs (default: the installed one)")
    parser.add_argument("--swift", metavar="PATH", help="with --print-args: the ms-swift CLI whose version decides "
                        "the flags (default: next to swiftdoc, else on PATH)")
    parser.add_argument("--format", choices=["text", "json"], default="text", help="--print-args output format")


def _kind(tokens: list[str]) -> str:
    """'swift' when the command trains through ms-swift's HF-trainer path; raises UsageError otherwise."""
    names = [Path(t).name for t in tokens[:3]]
    scripts = [m for t in tokens if (m := _SCRIPT.search(t) or _MODULE.match(t))]
    if names[0] == "megatron" or any(m.group(1) for m in scripts):
        raise UsageError("a Megatron-SWIFT command: it trains in its own loop (megatron_callbacks_map), which the "
                         "probe does not hook; it records the HF-trainer path (swift sft/pt/rlhf)")
    if names and names[0] == "swift":
        if len(tokens) > 1 and tokens[1] in _TRAIN:
            return "swift"
        raise UsageError(f"`swift {tokens[1] if len(tokens) > 1 else ''}` is not a training command",
                         hint="swiftdoc probe -- swift sft --model ... --dataset ...")
    if any(m.group(2) in _TRAIN for m in scripts):
        return "swift"
    raise UsageError(f"`{' '.join(tokens[:3])}` is not an ms-swift training command the probe can add flags to",
                     hint="for a launch script: swiftdoc probe --print-args, and paste the flags into its swift command")


def _interpreter(exe: str) -> str | None:
    from diagnose.verify.job import swift_python

    if Path(exe).name.startswith("python"):
        return exe
    return swift_python(exe)


def _version_at(python: str | None) -> str | None:
    from diagnose.isolated import run_python

    if python is None:
        return None
    try:
        r = run_python(python, "import importlib.metadata as m; print(m.version('ms-swift'))",
                       capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    v = r.stdout.strip()
    return v if r.returncode == 0 and v else None


def _version(args: argparse.Namespace, exe: str | None) -> tuple[str, str]:
    if args.swift_version:
        return args.swift_version, "--swift-version"
    if exe is None:
        raise EnvironmentMissing("ms-swift is not installed here (no `swift` CLI found), so the flags for its "
                                 "version cannot be chosen", hint="give --swift-version for the ms-swift the job runs")
    v = _version_at(_interpreter(exe))
    if v is None:
        raise EnvironmentMissing(f"no ms-swift installed beside {exe}",
                                 hint="pip install ms-swift there, or give --swift-version")
    return v, f"installed beside {exe}"


def _default_swift(explicit: str | None) -> str | None:
    if explicit:
        p = shutil.which(explicit) or (explicit if os.access(explicit, os.X_OK) else None)
        if not p:
            raise EnvironmentMissing(f"--swift {explicit}: not an executable")
        return p
    return shutil.which("swift", path=str(Path(sys.executable).parent)) or shutil.which("swift")


def _print_args(args: argparse.Namespace) -> int:
    from diagnose.patch.probe_flags import ENV, PLUGIN, probe_args, require

    exe = None if args.swift_version else _default_swift(args.swift)
    version, how = _version(args, exe)
    flags = probe_args(version)
    m = require(version)
    if args.format == "json":
        json.dump({"version": version, "version_source": how, "args": flags, "plugin": str(PLUGIN),
                   "mechanism": {"plugin_flag": m.plugin_flag, "callbacks_flag": m.callbacks_flag,
                                 "registry": m.registry, "source": m.source},
                   "env": ENV}, sys.stdout)
        sys.stdout.write("\n")
        return 0
    import shlex

    print(f"# swiftdoc probe for ms-swift {version} ({how}): add to the swift sft/pt/rlhf command")
    print(shlex.join(flags))
    print("# optional environment:")
    for k, what in ENV.items():
        print(f"#   export {k}=...   {what}")
    print("# the job already passes --" + m.plugin_flag + (" or --callbacks" if m.callbacks_flag else "")
          + "? add these values to its list (argparse keeps only the last occurrence of a flag)")
    return 0


def _probe_dir(tokens: list[str], since: float) -> Path | None:
    """The newest swiftdoc-probe folder the run wrote (SWIFTDOC_PROBE_DIR, else below its --output_dir)."""
    env = os.environ.get("SWIFTDOC_PROBE_DIR")
    if env:
        return Path(env) if Path(env).is_dir() else None
    out = "output"
    for i, t in enumerate(tokens):
        if t == "--output_dir" and i + 1 < len(tokens):
            out = tokens[i + 1]
        elif t.startswith("--output_dir="):
            out = t.split("=", 1)[1]
    found = []
    base = Path(out)
    for pattern in ("swiftdoc-probe", "*/swiftdoc-probe", "*/*/swiftdoc-probe"):
        for p in base.glob(pattern):
            try:
                if p.is_dir() and p.stat().st_mtime >= since - 5:
                    found.append((p.stat().st_mtime, p))
            except OSError:
                continue
    return max(found)[1] if found else None


def run(args: argparse.Namespace) -> int:
    if args.print_args:
        if args.command and args.command != ["--"]:
            raise UsageError("--print-args runs nothing: give no command with it")
        return _print_args(args)
    tokens = list(args.command)
    if tokens[:1] == ["--"]:
        tokens = tokens[1:]
    if not tokens:
        raise UsageError("nothing to run", hint="swiftdoc probe -- swift sft --model ... --dataset ... "
                         "(or swiftdoc probe --print-args)")
    _kind(tokens)
    from diagnose.patch.probe_flags import add_probe

    exe = shutil.which(tokens[0])
    if exe is None:
        raise EnvironmentMissing(f"{tokens[0]}: command not found")
    version, _ = _version(args, exe)
    cmd = add_probe(tokens, version)
    t0 = time.time()
    sys.stderr.write(f"swiftdoc probe: ms-swift {version}; running with {' '.join(cmd[len(tokens):]) or 'the probe'}\n")
    sys.stderr.flush()
    proc = subprocess.Popen(cmd)
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the job (same process group); wait for it
    try:
        rc = proc.wait()
    finally:
        signal.signal(signal.SIGINT, old)
    d = _probe_dir(cmd, t0)
    if d is not None:
        sys.stderr.write(f"swiftdoc probe: per-rank records in {d}; analyse with: swiftdoc analyze {d.parent}\n")
    else:
        sys.stderr.write("swiftdoc probe: no probe records found (the job stopped before training began?)\n")
    return 128 - rc if rc < 0 else rc
