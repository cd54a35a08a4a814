"""Which flags load swiftdoc's probe into a given ms-swift, and how to add them to a command.

Contract:
- `PLUGIN`: the probe file (`diagnose/probe_plugin/swiftdoc_probe.py`, stdlib-only, loaded by ms-swift by path);
  `CALLBACK`: the name it registers.
- `mechanism(version) -> Mechanism | None`: how that ms-swift takes a trainer callback from a plugin file, read from
  each release's source (docs/probe.md cites the files):
  4.0+: `--external_plugins FILE` (BaseArguments._import_external_plugins) + `--callbacks NAME`
  (swift/callbacks/mapping.py `callbacks_map`, instantiated in swift/trainers/mixin.py); 3.2 - 3.12:
  `--external_plugins FILE`, the file appends an instance to `swift.plugin.extra_callbacks`
  (swift/plugin/callback.py; swift/llm/train/sft.py `SwiftSft._prepare_callbacks` adds them); 3.0 - 3.1: the same
  list, the file given as `--custom_register_path`; 2.x and older: none (None).
- `probe_args(version) -> list[str]`: the flags to paste into a launch command; raises `EnvironmentMissing` (exit 3)
  with one line for a version without a mechanism.
- `add_probe(argv, version) -> list[str]`: `argv` (the flags after `swift sft`, or a whole command) with the probe
  added: merged into an existing `--external_plugins` / `--callbacks` list (`--flag a b`, `--flag=a`), never a
  second occurrence (argparse keeps only the last one); already present: unchanged.
- `probe_requests(argv, version)`: the same as `swiftdoc patch` requests (`--probe`).
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from diagnose.errors import EnvironmentMissing

PLUGIN = Path(__file__).resolve().parent.parent / "probe_plugin" / "swiftdoc_probe.py"
CALLBACK = "swiftdoc_probe"
ENV = {"SWIFTDOC_PROBE_DIR": "where rank<N>.jsonl are written (default: <output_dir>/swiftdoc-probe)",
       "SWIFTDOC_PROBE_FLUSH_S": "seconds between writes (default 2)"}


@dataclass(frozen=True)
class Mechanism:
    plugin_flag: str  # external_plugins | custom_register_path
    callbacks_flag: bool  # --callbacks names the registered callback (4.x)
    registry: str  # what the plugin registers into
    source: str  # where the release reads it


def _vt(version: str) -> tuple[int, int] | None:
    m = re.match(r"^\s*v?(\d+)\.(\d+)", str(version or ""))
    return (int(m.group(1)), int(m.group(2))) if m else None


def mechanism(version: str) -> Mechanism | None:
    v = _vt(version)
    if v is None:
        return None
    if v >= (4, 0):
        return Mechanism("external_plugins", True, "swift.callbacks.callbacks_map",
                         "swift/callbacks/mapping.py callbacks_map; swift/trainers/mixin.py SwiftMixin._get_callbacks "
                         "(4.3+; __init__ in 4.0-4.2); swift/arguments/base_args/base_args.py "
                         "BaseArguments._import_external_plugins")
    if v >= (3, 2):
        return Mechanism("external_plugins", False, "swift.plugin.extra_callbacks",
                         "swift/plugin/callback.py extra_callbacks; swift/llm/train/sft.py SwiftSft._prepare_callbacks; "
                         "swift/llm/argument/base_args/base_args.py BaseArguments._import_external_plugins")
    if v >= (3, 0):
        return Mechanism("custom_register_path", False, "swift.plugin.extra_callbacks",
                         "swift/plugin/callback.py extra_callbacks; swift/llm/train/sft.py SwiftSft._prepare_callbacks; "
                         "swift/llm/argument/base_args/base_args.py BaseArguments._init_custom_register")
    return None


def require(version: str) -> Mechanism:
    m = mechanism(version)
    if m is None:
        raise EnvironmentMissing(
            f"ms-swift {version} has no trainer-callback mechanism the probe can load into (plugin callbacks "
            "arrived in 3.0: swift.plugin.extra_callbacks; --callbacks in 4.0)",
            hint="upgrade ms-swift to 3.x or 4.x, or give --swift-version for the ms-swift the job really runs")
    return m


def probe_args(version: str) -> list[str]:
    m = require(version)
    out = ["--" + m.plugin_flag, str(PLUGIN)]
    if m.callbacks_flag:
        out += ["--callbacks", CALLBACK]
    return out


def _flag_of(tok: str) -> str | None:
    if not tok.startswith("--") or len(tok) < 3:
        return None
    return tok[2:].split("=", 1)[0].replace("-", "_")


def _merge(argv: list[str], flag: str, value: str, same: Callable[[str], bool]) -> list[str]:
    """Add `value` to the last `--flag` list in argv (or append `--flag value`); unchanged when already there."""
    last = None
    for i, tok in enumerate(argv):
        if _flag_of(tok) == flag:
            last = i
    if last is None:
        return [*argv, "--" + flag, value]
    tok = argv[last]
    if "=" in tok:
        cur = tok.split("=", 1)[1]
        if same(cur):
            return list(argv)
        return [*argv[:last], "--" + flag, cur, value, *argv[last + 1:]]
    j = last + 1
    while j < len(argv) and not argv[j].startswith("--"):
        if same(argv[j]):
            return list(argv)
        j += 1
    return [*argv[:j], value, *argv[j:]]


def probe_requests(argv: list[str], version: str) -> list:
    """`swiftdoc patch --probe`: explicit requests that set the plugin (and callbacks) lists to argv's own values plus
    the probe's, so the planner edits the script's existing occurrence or appends one."""
    from diagnose.engine import RemedyOp
    from diagnose.patch.plan import Request

    m = require(version)
    merged = add_probe(argv, version)
    out = []
    for flag in [m.plugin_flag] + (["callbacks"] if m.callbacks_flag else []):
        vals: list[str] = []
        for i, tok in enumerate(merged):
            if _flag_of(tok) == flag:
                vals = [tok.split("=", 1)[1]] if "=" in tok else []
                j = i + 1
                while j < len(merged) and not merged[j].startswith("--"):
                    vals.append(merged[j])
                    j += 1
        out.append(Request(op=RemedyOp(op="set", flag=flag, value=" ".join(vals)), effect="safe", rule="probe",
                           title="load swiftdoc's probe (observes only: per-rank step time and data wait, "
                                 "written to <output_dir>/swiftdoc-probe)" if flag != "callbacks" else
                           "name the probe's callback"))
    return out


def add_probe(argv: list[str], version: str) -> list[str]:
    m = require(version)
    out = _merge(list(argv), m.plugin_flag, str(PLUGIN), lambda v: Path(v).name == PLUGIN.name)
    if m.callbacks_flag:
        out = _merge(out, "callbacks", CALLBACK, lambda v: v == CALLBACK)
    return out


__all__ = ["CALLBACK", "ENV", "PLUGIN", "Mechanism", "add_probe", "mechanism", "probe_args", "probe_requests", "require"]
