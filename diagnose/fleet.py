"""Many runs at once: find every run under some roots, analyse each, one row per run.

Contract:
- `find_runs(roots, skipped=None, unreadable=None) -> list[Path]`: every ms-swift run folder below the roots (a folder
  holding `logging.jsonl` or `args.json`: the `v<N>-<date>` folders ms-swift writes), every saved record
  (`*.json` of kind swiftdoc.record), plus every capture file (`*.log`, `*.out`, `*.txt`) that is not
  inside such a folder and holds training output (`holds_training_output`: its head shows a step row, a
  trainer's line, a progress bar, a traceback or an error signature; `notes.txt` and `requirements.txt`
  do not); the files passed over are appended to `skipped`, the folders that cannot be listed and the
  capture-named entries that are not regular files (FIFOs, devices: never opened) to `unreadable`.  A root
  that is itself a run folder or a file counts as one run.  Sorted, no duplicates.
- `group_jobs(paths) -> list[Path | tuple[Path, ...]]`: the captures of one multi-node job, one per node in
  one folder (their `run sh:` lines show `--nnodes` > 1 and agree apart from `--node_rank`:
  `parse.relate`), become one entry, analysed as one job (its row's path: `dir/node0.log+node1.log`).
- `row_of(path) -> dict`: analyse one run (a path, or a tuple of one job's captures) (`pipeline.analyze_paths`) and keep the row:
  path, swift_version, model, world_size, steps, max_steps, category, confidence, rule,
  samples_per_s, tokens_per_s, mfu_pct, memory_peak_gib, culprit_rank, data_wait_share and straggler_rank (measured
  by swiftdoc probe, when the run has its files), error.  A run
  that cannot be read (a half-written file, nothing in it yet) is a row with `error`
  set, never an exception.
- `analyse_runs(paths, jobs, progress)` yields rows in input order, in a process pool
  of `jobs` workers when jobs > 1 (the imports are paid once per worker, not per run);
  rows are streamed, so memory stays flat in the number of runs.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROW_KEYS = ("path", "swift_version", "model", "world_size", "steps", "max_steps", "category", "confidence", "rule",
            "samples_per_s", "tokens_per_s", "mfu_pct", "memory_peak_gib", "culprit_rank", "data_wait_share",
            "straggler_rank", "error")
_CAPTURE = {".log", ".out", ".txt"}


def _is_run_dir(d: Path) -> bool:
    return (d / "logging.jsonl").is_file() or (d / "args.json").is_file()


_MARKERS = ("[INFO:", "[WARNING:", "[ERROR:", "'loss'", '"loss"', "loss", "Traceback (most recent call last)",
            "%|", "global_step", "iteration", "Epoch", "epoch", "rank", "torchrun", "swift ", "NCCL", "Error", "Killed",
            "step", "iter")
_SNIFF_BYTES = 65536


def holds_training_output(path: Path) -> bool:
    """Does the head of a capture show anything a trainer or launcher prints (not prose, not a requirements list)?"""
    try:
        with path.open("rb") as fh:
            head = fh.read(_SNIFF_BYTES).decode("utf-8", "replace")
    except OSError:
        return False
    if not head.strip():
        return True  # an empty capture is a run that has written nothing yet: a row that says so
    if any(m in head for m in _MARKERS):
        return True
    from diagnose.parse.events import _PREFILTER

    return bool(_PREFILTER.search(head.lower()))  # the prefilter reads lower-cased text


def _is_record(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return b'"swiftdoc.record"' in head


def find_runs(roots: list[str], skipped: list[Path] | None = None,
              unreadable: list[tuple[Path, str]] | None = None) -> list[Path]:
    """The runs under the roots (module contract).  `unreadable` collects (path, why) for each folder that cannot be
    listed and each capture-named entry that is not a regular file (a FIFO would block the reader, a link to
    /dev/zero never ends): never opened, and said."""
    from diagnose.parse.bounded import is_regular

    out: set[Path] = set()

    def said(path: Path, why: str) -> None:
        if unreadable is not None:
            unreadable.append((path, why))

    for r in roots:
        root = Path(r)
        if root.is_file():
            out.add(root)
            continue
        if not root.is_dir():
            continue
        if _is_run_dir(root):
            out.add(root)
            continue
        for dirpath, dirnames, filenames in os.walk(root, onerror=lambda e: said(Path(e.filename or "?"),
                                                                                 f"cannot list ({e.strerror})")):
            d = Path(dirpath)
            if _is_run_dir(d):
                out.add(d)
                dirnames[:] = []  # a run folder's checkpoints and images are not runs
                continue
            for f in filenames:
                suffix = Path(f).suffix.lower()
                if suffix not in _CAPTURE and suffix != ".json":
                    continue
                if not is_regular(d / f):
                    said(d / f, "not a regular file (a FIFO, a socket, a device or a broken link)")
                elif suffix in _CAPTURE:
                    if holds_training_output(d / f):
                        out.add(d / f)
                    elif skipped is not None:
                        skipped.append(d / f)
                elif _is_record(d / f):
                    out.add(d / f)
    return sorted(out)


def _multinode(h: Any) -> bool:
    toks = list(h.launcher or ())
    for i, t in enumerate(toks):
        v = toks[i + 1] if t == "--nnodes" and i + 1 < len(toks) else (t.split("=", 1)[1] if t.startswith("--nnodes=") else None)
        if v is not None:
            return v.split(":")[-1] not in ("1", "")
    return False


def group_jobs(paths: list[Path]) -> list[Path | tuple[Path, ...]]:
    from diagnose.parse.relate import group_inputs, read_header

    by_dir: dict[Path, list[Path]] = {}
    for p in paths:
        if p.is_file():
            by_dir.setdefault(p.parent, []).append(p)
    joined: dict[Path, tuple[Path, ...]] = {}
    for files in by_dir.values():
        if len(files) < 2:  # one capture in its folder: nothing to join (and nothing to read here)
            continue
        multi = [f for f in files if _multinode(read_header(str(f)))]
        if len(multi) < 2:
            continue
        for g in group_inputs([str(f) for f in multi]).groups:
            if len(g) > 1:
                job = tuple(Path(x) for x in g)
                for x in job:
                    joined[x] = job
    out: list[Path | tuple[Path, ...]] = []
    seen: set[tuple[Path, ...]] = set()
    for p in paths:
        job = joined.get(p)
        if job is None:
            out.append(p)
        elif job not in seen:
            seen.add(job)
            out.append(job)
    return out


def _label(path: Path | tuple[Path, ...]) -> str:
    if isinstance(path, tuple):
        return str(path[0].parent / "+".join(p.name for p in path))
    return str(path)


def _model_of(run: Any) -> str | None:
    m = run.launch.flags.get("model") or run.launch.flags.get("model_id_or_path") or run.launch.flags.get("model_type")
    return str(m) if m is not None else None


def row_of(path: Path | str | tuple[Path, ...]) -> dict[str, Any]:
    from diagnose.errors import SwiftdocError
    from diagnose.pipeline import analyze_paths

    row: dict[str, Any] = {k: None for k in ROW_KEYS}
    row["path"] = _label(path) if isinstance(path, tuple) else str(path)
    try:
        if not isinstance(path, tuple) and str(path).endswith(".json") and _is_record(Path(path)):
            from diagnose.record import load_record

            run, diag = load_record(str(path))  # a saved analysis: its row without the log
        else:
            run, diag = analyze_paths([str(x) for x in path] if isinstance(path, tuple) else [str(path)])
    except SwiftdocError as e:  # an empty or half-written run: a row that says so
        row["error"] = e.message
        row["category"] = "unreadable"
        return row
    except Exception as e:  # noqa: BLE001 - one odd run must not end the fleet
        row["error"] = f"{type(e).__name__}: {e}"
        row["category"] = "unreadable"
        return row
    f = diag.features
    last = run.steps.last() or {}
    row.update(swift_version=run.swift_version, model=_model_of(run), world_size=run.world_size,
               steps=last.get("step") if last.get("step") is not None else len(run.steps), max_steps=run.max_steps,
               category=diag.primary.category, confidence=diag.primary.confidence, rule=diag.primary.rule,
               samples_per_s=f.get("samples_per_s"), tokens_per_s=f.get("tokens_per_s"), mfu_pct=f.get("mfu_pct"),
               memory_peak_gib=f.get("memory_peak_gib"),
               culprit_rank=diag.culprit.get("rank") if diag.culprit else None,
               data_wait_share=f.get("probe_data_wait_share"), straggler_rank=f.get("probe_straggler_rank"))
    return row


def _init_worker() -> None:
    os.environ.setdefault("SWIFTDOC_JOBS", "1")  # a pool worker does not fork a scan helper of its own


def analyse_runs(paths: list[Path | tuple[Path, ...]], jobs: int = 1, progress: Callable[[int], None] | None = None) -> Iterator[dict[str, Any]]:
    if jobs <= 1 or len(paths) < 2:
        for i, p in enumerate(paths, 1):
            yield row_of(p)
            if progress:
                progress(i)
        return
    import multiprocessing as mp

    ctx = mp.get_context("fork" if hasattr(os, "fork") else "spawn")
    with ctx.Pool(jobs, initializer=_init_worker) as pool:
        for i, row in enumerate(pool.imap(row_of, paths, chunksize=max(1, min(32, len(paths) // (jobs * 8) or 1))), 1):
            yield row
            if progress:
                progress(i)


__all__ = ["ROW_KEYS", "find_runs", "group_jobs", "row_of", "analyse_runs"]
