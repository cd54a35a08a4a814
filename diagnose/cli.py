"""The `swiftdoc` command line: dispatch to one module per subcommand.

Contract: `main(argv=None) -> int`.  Only the chosen subcommand's module is
imported (so `swiftdoc analyze` never pays for, or imports, what `verify` or
`attach` need).  A subcommand module exposes `HELP` (one line),
`add_arguments(parser)` and `run(args) -> int`.  `SwiftdocError` becomes one
red line (+ hint) on stderr and its exit code; any other exception is a bug and
is reported the same way with exit code 70; `-v` shows tracebacks.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from diagnose import __version__

# command -> (module, one-line help); modules are imported after dispatch only
COMMANDS: dict[str, tuple[str, str]] = {
    "analyze": ("analyze", "diagnose a run: what holds it back or what killed it, with evidence"),
    "parse": ("parse", "show what swiftdoc read from a log (version, steps, events)"),
    "rules": ("rules", "list the diagnosis rules"),
    "explain": ("explain", "explain one rule: what it checks, why, and what to change"),
    "patch": ("patch", "turn the diagnosis into a flag diff for the launch script"),
    "lint": ("lint", "check a launch script's flags against its ms-swift version"),
    "attach": ("attach", "follow a running job (PID, output dir or log) and diagnose it live"),
    "sample": ("sample", "sample GPU metrics with NVML into a samples file"),
    "verify": ("verify", "re-run baseline and patched trials through ms-swift and measure the gain"),
    "fleet": ("fleet", "analyse every run under some folders: one row per run (a sweep's state)"),
    "probe": ("probe", "run a training command with swiftdoc's in-trainer probe (per-rank step time, data wait)"),
}


def _top_help() -> str:
    lines = [f"swiftdoc {__version__} - diagnose ms-swift fine-tuning runs", "", "usage: swiftdoc COMMAND [options]", "", "commands:"]
    for name, (_, text) in COMMANDS.items():
        lines.append(f"  {name:<9} {text}")
    lines += ["", "Run `swiftdoc COMMAND -h` for a command's options; -v shows tracebacks."]
    return "\n".join(lines)


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and a hint (its usage block only with -h)."""

    def error(self, message: str):  # type: ignore[override]
        from diagnose.errors import UsageError

        raise UsageError(message, hint=f"{self.prog} -h lists the options")


def _plain(text: str) -> str:
    """An error names what the user gave (a path, a log line): its control characters never reach the terminal."""
    return "".join(c if c.isprintable() else "?" for c in text)


def _err(msg: str, hint: str | None = None) -> None:
    red = sys.stderr.isatty()
    sys.stderr.write(("\x1b[31m" if red else "") + f"error: {_plain(msg)}" + ("\x1b[0m" if red else "") + "\n")
    if hint:
        sys.stderr.write(f"hint: {_plain(hint)}\n")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = False
    end = argv.index("--") if "--" in argv else len(argv)  # after `--` a -v belongs to what follows
    for i in range(end - 1, -1, -1):
        if argv[i] in ("-v", "--verbose"):
            del argv[i]
            verbose = True
    if not argv:  # a usage error: the help goes to stderr, with exit 2
        sys.stderr.write(_top_help() + "\n")
        return 2
    if argv[0] == "help" and len(argv) > 1 and argv[1] in COMMANDS:
        argv = [argv[1], "--help"]  # `swiftdoc help analyze` = `swiftdoc analyze --help`
    elif argv[0] in ("-h", "--help", "help"):
        print(_top_help())
        return 0
    if argv[0] == "--version":
        print(f"swiftdoc {__version__}")
        return 0
    name = argv[0]
    if name not in COMMANDS:
        _err(f"unknown command '{name}'", hint="commands: " + ", ".join(COMMANDS))
        return 2
    from diagnose.errors import SwiftdocError

    try:
        mod = importlib.import_module(f"diagnose.commands.{COMMANDS[name][0]}")
        parser = _Parser(prog=f"swiftdoc {name}", description=COMMANDS[name][1])
        parser.add_argument("-v", "--verbose", action="store_true", help="show tracebacks on errors")
        mod.add_arguments(parser)
        args = parser.parse_args(argv[1:])
        args.verbose = verbose or args.verbose
        return int(mod.run(args) or 0)
    except SwiftdocError as e:
        if verbose:
            import traceback

            traceback.print_exc()
        _err(e.message, e.hint)
        return e.exit_code
    except KeyboardInterrupt:
        _err("interrupted")
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:  # a bug: still one line unless -v
        if verbose:
            raise
        _err(f"internal error: {type(e).__name__}: {e}", hint="re-run with -v for the traceback and report it")
        return 70


if __name__ == "__main__":
    sys.exit(main())
