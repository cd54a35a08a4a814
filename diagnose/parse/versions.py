"""Which ms-swift produced this output: the clues of reference section 7, in order.

Contract: `detect_version(clues) -> (version, clue)` where version is as precise as
the clues allow ("4.6.0", "4.x", "3.12.5-3.12.6", "3.8-3.12.4", "3.0-3.7", "2.x",
Megatron "3.3-3.7" / "3.8-3.12" / "4.x") or None, and clue is a short sentence
naming the evidence.  `clues` is a plain dict filled by the parser:
version_line, args_json_version, layouts (key lists of training dicts), quoted,
megatron ("pipe", "pipe_mem", "dict"), args_shape, args_keys, rank_line_prefixed,
device_count_line, files (names), argv_flags.
"""
from __future__ import annotations

from typing import Any


def _layout_version(keys: list[str]) -> tuple[str, str] | None:
    ks = set(keys)
    if "train_speed(s/it)" in ks:
        if "percentage" in ks:
            return "3.12.5-3.12.6", "train_speed(s/it) with a percentage key"
        return "4.x", "train_speed(s/it) without a percentage key"
    if "train_speed(iter/s)" in ks:
        if "acc" in ks and keys[:2] == ["loss", "acc"]:
            return "2.x", "training accuracy key 'acc' right after loss"
        if "memory(GiB)" in ks:
            mi = keys.index("memory(GiB)")
            if "epoch" in ks and mi < keys.index("epoch"):
                if "token_acc" in ks:
                    return "3.0-3.7", "memory(GiB) before epoch, with token_acc"
                return "2.x", "memory(GiB) before epoch, without token_acc"
            return "3.8-3.12.4", "memory(GiB) at the end of the dict, train_speed(iter/s)"
        if "token_acc" in ks:
            if keys.index("token_acc") == 1:
                return "3.0-3.7", "token_acc right after loss"
            return "3.8-3.12.4", "token_acc after learning_rate, train_speed(iter/s)"
        return "2.x-3.12.4", "train_speed(iter/s)"
    if "global_step" in ks and "acc" in ks:
        return "2.x", "2.x printer-callback keys (acc, global_step)"
    return None


def detect_version(clues: dict[str, Any]) -> tuple[str | None, str | None]:
    if clues.get("version_line"):
        return clues["version_line"], f"log line `swift.__version__: {clues['version_line']}`"
    if clues.get("args_json_version"):
        return str(clues["args_json_version"]), "args.json swift_version"
    meg = clues.get("megatron")
    if meg == "dict":
        return "4.x", "Megatron dict with an 'iteration' key"
    if meg == "pipe_mem":
        return "3.8-3.12", "Megatron pipe line with memory(GiB) and remaining time"
    if meg == "pipe":
        return "3.3-3.7", "Megatron pipe line without memory/time segments"
    for keys in clues.get("layouts", []):
        got = _layout_version(keys)
        if got:
            v, why = got
            if v == "4.x" or not clues.get("quoted"):
                return got
    if clues.get("quoted"):
        return "4.x", "quoted numbers in the step dict (transformers >= 5, only with ms-swift 4.x)"
    args_keys = clues.get("args_keys") or set()
    shape = clues.get("args_shape")
    if "sft_type" in args_keys or "model_id_or_path" in args_keys:
        return "2.x", "args dump with sft_type / model_id_or_path"
    if shape and "multi-line" in shape:
        if "tuner_type" in args_keys:
            return "4.x", "multi-line args dump with tuner_type"
        if "train_type" in args_keys:
            return "3.x", "multi-line args dump with train_type"
        return "3.x-4.x", "multi-line sorted args dump"
    if clues.get("device_count_line") and clues.get("rank_line_prefixed") is False:
        return "2.x", "rank line without logger prefix after device_count"
    files = set(clues.get("files") or [])
    if "sft_args.json" in files:
        return "2.x", "sft_args.json in the output dir"
    if "last-checkpoint" in files:
        return "4.6+", "last-checkpoint symlink in the output dir"
    flags = set(clues.get("argv_flags") or [])
    if flags & {"sft_type", "model_id_or_path"}:
        return "2.x", "run sh argv with --sft_type / --model_id_or_path"
    if "tuner_type" in flags:
        return "4.x", "run sh argv with --tuner_type"
    if "train_type" in flags:
        return "3.x", "run sh argv with --train_type"
    if "args.json" in files:
        return "3.x-4.x", "args.json in the output dir"
    return None, None


_EXACT_CLUES = ("log line `swift.__version__", "args.json swift_version")


def version_words(spec: str | None, clue: str | None, table: str | None = None, short: bool = False) -> str:
    """The one wording of a detected ms-swift version, for every command: exact when ms-swift printed it (its
    version line, args.json), else the range the log's format allows, hedged with the clue; `table` adds the flag
    table patch/lint/verify use for it when that differs ("ms-swift 3.8-3.12.4 (by the log's format: ...; flags of
    3.12.4)")."""
    if not spec:
        base = "ms-swift (version not shown)"
    elif clue and clue.startswith(_EXACT_CLUES):
        base = f"ms-swift {spec}"
    else:
        base = f"ms-swift {spec} (by the log's format" + (f": {clue}" if clue and not short else "") + ")"
    if table and table != spec:
        base += f", flags of {table}"
    return base
