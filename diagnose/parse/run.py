"""The parser's spine: sources -> blocks -> (vectorised steps, text lines) -> Run.

Contract: `parse_run(inputs, stdin=None) -> Run` and `parse_text(data) -> Run`
(see `diagnose.parse`).  Steps come from the stdout capture when it has them
(their line numbers point into it) and are refined with logging.jsonl's
8-decimal values for the same steps; without a capture they come from
logging.jsonl.  Version detection, world size, trainer kind and the `nan` event
are settled here, once all sources are read.  Captures are read one at a time and
only what the run needs of each is kept (its events, clues and trainer hints; the
whole scan of the capture with the most step rows): a folder of 20,000 small files
is streamed, never held.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from diagnose.models import DatasetStats, Event, ModelInfo, Run, StepsTable
from diagnose.parse.args import load_args_json
from diagnose.parse.blockscan import scan_blocks
from diagnose.parse.dicts import find_dict, is_train_row, iter_dicts, parse_dict
from diagnose.parse.events import EventScanner
from diagnose.parse.fastdict import BlockScan
from diagnose.parse.lines import DATASET, PARAMS, InfoScanner
from diagnose.parse.prefix import is_fence, strip_paste
from diagnose.parse.sources import check_not_binary, rank_of_file, resolve_inputs
from diagnose.parse.steps import StepRows
from diagnose.parse.torchrun import FailureTable
from diagnose.parse.versions import detect_version

_MAX_TEXT_LINE = 200_000  # longer physical lines are scanned on their head and tail only
_SWIFT_KEYS = ("global_step/max_steps", "train_speed(iter/s)", "train_speed(s/it)", "iteration")


class _StdoutResult:
    def __init__(self, name: str, run: Run):
        self.name = name
        self.rows = StepRows()
        self.info = InfoScanner(run)
        self.events = EventScanner(name)
        self.failures = FailureTable()
        self.lines = 0
        self.quoted: bool | None = None
        self.first_dict_text: str | None = None


def _scan_stdout(name: str, source: bytes | Path, run: Run) -> _StdoutResult:
    res = _StdoutResult(name, run)
    base = 0
    total = len(source) if isinstance(source, bytes) else _size(source)
    for blk in scan_blocks(source):
        scan = blk.scan
        if base == 0:
            check_not_binary(blk.data[:65536], name)
            _reserve(res.rows, scan, blk.size, total)
        for keys, cols, lines in scan.groups:
            res.rows.add_group(keys, cols, lines + base + 1)
        first_dicts = res.quoted is None and (scan.groups or len(scan.odd_lines))
        if not first_dicts and not len(scan.odd_lines) and scan.dict_line_mask.all():
            base += scan.n_lines  # every line was a training dict read above: the bytes are not needed
            continue
        block = blk.data
        nl = scan.newlines
        starts = np.concatenate(([0], nl + 1))
        ends = np.append(nl, len(block))
        if first_dicts:
            i = int(np.flatnonzero(scan.dict_line_mask)[0])
            text = block[starts[i] : ends[i]].decode("utf-8", "replace")
            res.quoted = "'loss': '" in text
            res.first_dict_text = text
        odd = set(scan.odd_lines.tolist())
        other = np.flatnonzero(~scan.dict_line_mask)
        for i in sorted(odd | set(other.tolist())) if odd else other.tolist():
            raw = block[starts[i] : ends[i]]
            lineno = base + i + 1
            if len(raw) > _MAX_TEXT_LINE:
                _long_line(res, run, name, lineno, raw)
                continue
            text = _decode(raw).rstrip("\r")
            if i in odd:
                _odd_dict(res, text, block, starts, ends, i, lineno)
                continue
            body, _rank = strip_paste(text)
            if is_fence(body):
                continue
            res.info.feed(lineno, text)
            res.events.feed(lineno, body, _rank)
            res.failures.feed(lineno, body)
        base += scan.n_lines
    res.lines = base
    res.info.finish()
    res.events.finish()
    run.failures.extend(dict(e, file=name) for e in res.failures.finish())
    if res.info.node_rank is not None:
        run.nodes[name] = res.info.node_rank
    for lineno, d in res.info.step_dicts:
        res.rows.add_dict(d, lineno)
    return res


def _long_line(res: _StdoutResult, run: Run, name: str, lineno: int, raw: bytes) -> None:
    """A physical line over _MAX_TEXT_LINE bytes: `\r`-joined records (tqdm, or dicts a terminal overwrote) are split
    and each read whole; a single record that is still too long is read at its head and tail, and a note says so."""
    frags = [f for f in raw.split(b"\r") if f.strip()] if b"\r" in raw else [raw]
    cut = 0
    for frag in frags:
        if len(frag) > _MAX_TEXT_LINE:
            cut += 1
            frag = frag[: _MAX_TEXT_LINE // 2] + b" ... " + frag[-_MAX_TEXT_LINE // 2 :]
        text = _decode(frag)
        body, rank = strip_paste(text)
        if is_fence(body):
            continue
        res.info.feed(lineno, text)
        res.events.feed(lineno, body, rank)
        res.failures.feed(lineno, body)
    if cut:
        run.notes.append(f"{name}:{lineno}: a line of {len(raw) / 1e6:.1f} MB with no record separator: only its "
                         f"first and last {_MAX_TEXT_LINE // 2000} kB were read")


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _reserve(rows: StepRows, first: BlockScan, first_size: int, total: int) -> None:
    """Size the step buffers from the first block's density (5% spare; more rows grow them)."""
    n = sum(len(lines) for _keys, _cols, lines in first.groups) + len(first.odd_lines)
    if n and first_size and total > first_size:
        rows.reserve(int(n * total / first_size * 1.05) + 1024)


def _decode(raw: bytes) -> str:
    """UTF-8, else GB18030 (Chinese Windows/Linux consoles), else latin-1: never fails."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        pass
    try:
        return raw.decode("gb18030")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def _odd_dict(res: _StdoutResult, text: str, block: bytes, starts, ends, i: int, lineno: int) -> None:
    span = find_dict(text)
    if span and not text[: span[1]].rstrip().endswith("}"):
        # wrapped (pasted) dict: join the following lines until the brace closes
        joined = text
        for j in range(i + 1, min(i + 5, len(starts))):
            nxt = block[starts[j] : ends[j]].decode("utf-8", "replace")
            joined += strip_paste(nxt)[0].strip()
            if "}" in nxt:
                break
        text = joined
        if "}" not in text[span[0] :]:
            res.info.run.notes.append(f"line {lineno}: training dict cut off (truncated line?), values kept as far as read")
    for d in iter_dicts(text):  # several dicts glued on one line (a terminal copy without newlines)
        if is_train_row(d):
            res.rows.add_dict(d, lineno)
        else:
            res.info.other_dict(lineno, d)


def _apply_jsonl(path: Path, run: Run, clues: dict[str, Any]) -> StepRows:
    rows = StepRows()
    evals: list[dict[str, Any]] = []
    base = 0
    total = _size(path)
    for blk in scan_blocks(path, quote=b'"', line_start_only=True):
        scan = blk.scan
        if base == 0:
            check_not_binary(blk.data[:65536], str(path))
            _reserve(rows, scan, blk.size, total)
        for keys, cols, lines in scan.groups:
            rows.add_group(keys, cols, lines + base + 1)
        if not len(scan.odd_lines) and scan.dict_line_mask.all():
            base += scan.n_lines
            continue
        block = blk.data
        nl = scan.newlines
        starts = np.concatenate(([0], nl + 1))
        ends = np.append(nl, len(block))
        odd = set(scan.odd_lines.tolist())
        for i in np.flatnonzero(~scan.dict_line_mask).tolist() + sorted(odd):
            raw = block[starts[i] : ends[i]].strip()
            if not raw:
                continue
            try:
                d = json.loads(raw)
            except ValueError:
                d = parse_dict(raw.decode("utf-8", "replace"))
            if not isinstance(d, dict):
                continue
            if i in odd or ("loss" in d and ("global_step/max_steps" in d or "iteration" in d)):
                rows.add_dict(d, base + i + 1)
            elif "train_runtime" in d:
                run.summary = run.summary or d
            elif any(k.startswith("eval_") for k in d):
                d["_line"] = base + i + 1
                evals.append(d)
            elif "model_parameter_info" in d or "last_model_checkpoint" in d or "log_history" in d:
                _run_summary(d, run, clues)
        base += scan.n_lines
    if not run.evals:  # the capture's eval lines (with their line numbers) win; else logging.jsonl's
        run.evals.extend(evals)
    return rows


def _run_summary(d: dict[str, Any], run: Run, clues: dict[str, Any]) -> None:
    run.ended = True
    if run.dataset is None and isinstance(d.get("train_dataset"), str):
        m = DATASET.search("Dataset Token Length: " + d["train_dataset"]) or DATASET.search(d["train_dataset"])
        if m:
            run.dataset = DatasetStats(mean=float(m.group(1)), std=float(m.group(2)), min=float(m.group(3)),
                                       max=float(m.group(4)), size=int(m.group(5)))
    if (run.model is None or run.model.params_m is None) and isinstance(d.get("model_parameter_info"), str):
        m = PARAMS.search(d["model_parameter_info"])
        if m:
            info = run.model or ModelInfo()
            info.cls, info.params_m, info.trainable_m = m.group(1), float(m.group(2)), float(m.group(3))
            info.trainable_pct, info.buffers_m = float(m.group(4)), float(m.group(5))
            run.model = info
    if d.get("last_model_checkpoint") not in (None, "", "None"):
        run.checkpoints.append({"path": d["last_model_checkpoint"], "step": d.get("global_step"), "line": None})
    mem = d.get("memory")
    if isinstance(mem, (int, float)):
        clues["summary_memory_gib"] = float(mem)


def _merge_precise(table: StepsTable, precise: StepsTable) -> StepsTable:
    """Overwrite stdout values with logging.jsonl's (8 decimals) for the same steps."""
    if not len(table) or not len(precise):
        return table
    ps = precise["step"]
    if np.isnan(ps).any() or (np.diff(ps) <= 0).any():
        return table
    if (np.diff(table["step"]) <= 0).any():  # several ranks printing, or a restart: steps are ambiguous
        return table
    pos = np.searchsorted(ps, table["step"])
    pos = np.clip(pos, 0, len(ps) - 1)
    hit = ps[pos] == table["step"]
    if not hit.any():
        return table
    for c in ("loss", "grad_norm", "learning_rate", "token_acc", "memory_gib", "epoch", "train_speed_s_per_it",
              "elapsed_s", "interval_s"):
        src = precise[c][pos]
        use = hit & precise.present(c)[pos] if c in ("loss", "grad_norm") else hit & ~np.isnan(src)
        table.cols[c] = np.where(use, src, table.cols[c])
    return table


def parse_run(inputs: list[str], stdin: bytes | None = None) -> Run:
    src = resolve_inputs(inputs, stdin)
    run = Run(sources=[n for n, _ in src.stdout] + [str(p) for p in src.jsonl] + [str(p) for p in src.args]
              + [str(p) for p in src.fr])
    run.notes.extend(src.notes)
    clues: dict[str, Any] = {"files": sorted(src.file_names)}
    best: _StdoutResult | None = None
    events: list[Event] = []
    hints: dict[str, int] = {}
    total = 0
    for name, source in src.stdout:  # streamed: of each capture only its events, clues and hints are kept (and the best)
        res = _scan_stdout(name, source, run)
        local = rank_of_file(name)
        if local is not None:  # torchrun's per-rank file: its lines are that rank's, tagged or not
            for e in res.events.events:
                if "rank" not in e.detail and not e.detail.get("ranks"):
                    e.detail["rank"] = local
        for k, v in res.info.trainer_hints.items():
            hints[k] = hints.get(k, 0) + v
        total += res.lines
        events.extend(res.events.events)
        clues.update(res.info.clues)
        if best is None or len(res.rows) + len(res.info.megatron_rows) > len(best.rows) + len(best.info.megatron_rows):
            best = res
    for p in src.args:
        data = load_args_json(p)
        if data:
            run.recognized = True
            if data.get("swift_version"):
                clues["args_json_version"] = data["swift_version"]
            clues.setdefault("args_keys", set(data))
            for k, v in data.items():
                if run.launch.flag_sources.get(k) != "argv":
                    run.launch.flags[k] = v
                    run.launch.flag_sources[k] = p.name
    if src.fr:
        from diagnose.parse.flight_recorder import read_dump

        run.flight_recorder = sorted((read_dump(p) for p in src.fr), key=lambda d: (d["rank"] is None, d["rank"] or 0))
    jsonl_rows = [_apply_jsonl(p, run, clues) for p in src.jsonl]
    run.total_lines = total
    start_step = _start_step(run)
    table = StepsTable()
    layouts: list[list[str]] = []
    if best is not None:
        for r in best.info.megatron_rows:
            best.rows.add_megatron(r)
        if best.info.megatron_rows:
            clues["megatron"] = "pipe_mem" if any("memory(GiB)" in r for r in best.info.megatron_rows) else "pipe"
        table = best.rows.build(start_step)
        layouts = best.rows.layouts
        run.nonfinite.update(best.rows.nonfinite)
        run.metric_ranges.update(best.rows.ranges)
        run.line_file = best.name
        clues["quoted"] = bool(best.quoted)
        _finish_info(run, best.info, clues)
    if jsonl_rows:
        jr = max(jsonl_rows, key=len)
        for k, v in jr.nonfinite.items():
            run.nonfinite.setdefault(k, v)
        for k, v in jr.ranges.items():
            run.metric_ranges.setdefault(k, v)
        jt = jr.build(start_step)
        if len(table):
            table = _merge_precise(table, jt)
        elif len(jt):
            table = jt
            run.line_file = str(src.jsonl[jsonl_rows.index(jr)])
        layouts = layouts or jr.layouts
    if not len(table) and best is not None:
        table = _other_trainers_rows(run, best.info)
    run.steps = table
    clues["layouts"] = layouts
    if any("iteration" in k for k in layouts):
        clues["megatron"] = "dict"
    clues["argv_flags"] = list(run.launch.flags) if run.launch.argv else []
    if layouts and any(any(k in keys for k in _SWIFT_KEYS) for keys in layouts):
        run.recognized = True
    if hints.get("ms-swift"):
        run.recognized = True
    run.swift_version, run.version_clue = detect_version(clues) if run.recognized else (None, None)
    run.trainer = _trainer(run, clues, hints, table)
    if run.trainer == "hf-trainer" and len(table) and not table.has("step"):
        run.notes.append("not an ms-swift log: HF Trainer-style dicts read (no step numbers or speed keys)")
    events.extend(_nan_event(run))
    run.events = sorted(events, key=lambda e: (e.file != run.line_file, e.line))
    _world_size(run)
    if isinstance(run.launch.flags.get("output_dir"), str) and not run.output_dir:
        run.output_dir = run.launch.flags["output_dir"]
    return run


def _other_trainers_rows(run: Run, info: InfoScanner) -> StepsTable:
    """No ms-swift/HF dict rows: step rows of another trainer's dialect (the most frequent one), else the lines that
    repeat `key: number` pairs (a dialect the table does not know), else the training bar's updates."""
    from diagnose.parse.steps import table_from_bars, table_from_rows

    train = [(ln, r) for ln, r in info.dialect_rows if r.kind == "train"]
    if train:
        # a '<name>_cut' entry reads the same trainer's rows the paste cut short: one family with '<name>'
        def family(name: str) -> str:
            return name[:-4] if name.endswith("_cut") else name

        counts: dict[str, int] = {}
        for _, r in train:
            counts[family(r.dialect)] = counts.get(family(r.dialect), 0) + 1
        best = max(counts, key=lambda k: counts[k])
        rows = [(ln, r) for ln, r in train if family(r.dialect) == best]
        run.step_dialect = f"{rows[0][1].trainer} ({best})"
        return table_from_rows(rows)
    generic = info.generic.rows()
    for ln, bad in info.generic.nonfinite:
        info.note_nonfinite(ln, bad)
    if generic:
        run.step_dialect = "repeated key: value lines (a dialect swiftdoc has no entry for)"
        return table_from_rows(generic)
    if info.bar_rows:
        run.step_dialect = "the training progress bar (tqdm)"
        return table_from_bars(info.bar_rows)
    return StepsTable()


def _trainer(run: Run, clues: dict[str, Any], hints: dict[str, int], table: StepsTable) -> str:
    """Which trainer printed the text: it decides the dialect of a fix, never whether to diagnose."""
    megatron = bool(clues.get("megatron")) or (run.launch.command or "").startswith("megatron") or bool(hints.get("megatron"))
    if run.recognized:
        return "ms-swift-megatron" if megatron else "ms-swift"
    if megatron:
        return "megatron-lm"
    for name in ("llama-factory", "trl"):
        if hints.get(name):
            return name
    if (len(table) and run.step_dialect is None) or hints.get("hf-trainer"):
        return "hf-trainer"
    if hints.get("deepspeed"):
        return "deepspeed"
    return "unknown"


def _start_step(run: Run) -> float:
    """The step training (re)started at: ms-swift 3.12.5+/4.x divide elapsed time by steps since then.

    A resumed run names its checkpoint (`--resume_from_checkpoint .../checkpoint-N`); otherwise 0.
    """
    ckpt = run.launch.flags.get("resume_from_checkpoint")
    if isinstance(ckpt, str):
        m = re.search(r"checkpoint-(\d+)", ckpt)
        if m:
            return float(m.group(1))
    return 0.0


def _finish_info(run: Run, info: InfoScanner, clues: dict[str, Any]) -> None:
    if info._args_lines is not None:  # dump ran to the end of the capture
        info._finish_args()
        clues.update(info.clues)
    run.preprocess = info.map_rates
    run.progress = info.progress
    run.snapshot = info.snapshots.result()
    run.checkpoints = info.checkpoints


def _nan_event(run: Run) -> list[Event]:
    t = run.steps
    if not len(t):
        return []
    bad = np.zeros(len(t), bool)
    for c in ("loss", "grad_norm"):
        bad |= t.present(c) & ~np.isfinite(t[c])
    if not bad.any():
        return []
    i = int(np.flatnonzero(bad)[0])
    r = t.row(i)
    text = "step {}: loss={}, grad_norm={}".format(r.get("step", "?"), _fmt(t["loss"][i]), _fmt(t["grad_norm"][i]))
    return [Event(kind="nan", line=int(t["line"][i]), text=text, file=run.line_file,
                  detail={"step": r.get("step"), "count": int(bad.sum()), "rows": len(t)})]


def _fmt(v: float) -> str:
    return "nan" if math.isnan(v) else repr(float(v))


def _world_size(run: Run) -> None:
    if run.world_size is None and run.launch.launcher == "torchrun" and run.launch.nproc_per_node:
        run.world_size = run.launch.nproc_per_node * (run.launch.nnodes or 1)
    if run.world_size is None and "world_size" in run.launch.flags and isinstance(run.launch.flags["world_size"], int):
        run.world_size = run.launch.flags["world_size"]


def parse_text(data: str | bytes) -> Run:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return parse_run(["-"], stdin=data)


__all__ = ["parse_run", "parse_text"]
