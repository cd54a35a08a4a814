"""Many runs at once: find every run under some roots, analyse each, one row per run.

Contract:
- `find_runs(roots) -> list[Path]`: every ms-swift run folder below the roots (a folder
  holding `logging.jsonl` or `args.json`: the `v<N>-<date>` folders ms-swift writes),
  plus every capture file (`*.log`, `*.out`, `*.txt`) that is not inside such a folder;
  a root that is itself a run folder or a file counts as one run.  Sorted, no duplicates.
- `row_of(path) -> dict`: analyse one run (`pipeline.analyze_paths`) and keep the row:
  path, swift_version, model, world_size, steps, max_steps, category, confidence, rule,
  samples_per_s, tokens_per_s, mfu_pct, memory_peak_gib, culprit_rank, error.  A run
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
            "samples_per_s", "tokens_per_s", "mfu_pct", "memory_peak_gib", "culprit_rank", "error")
_CAPTURE = {".log", ".out", ".txt"}


def _is_run_dir(d: Path) -> bool:
    return (d / "logging.jsonl").is_file() or (d / "args.json").is_file()


def find_runs(roots: list[str]) -> list[Path]:
    out: set[Path] = set()
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
        for dirpath, dirnames, filenames in os.walk(root):
            d = Path(dirpath)
            if _is_run_dir(d):
                out.add(d)
                dirnames[:] = []  # a run folder's checkpoints and images are not runs
                continue
            for f in filenames:
                if Path(f).suffix.lower() in _CAPTURE:
                    out.add(d / f)
    return sorted(out)


def _model_of(run: Any) -> str | None:
    m = run.launch.flags.get("model") or run.launch.flags.get("model_id_or_path") or run.launch.flags.get("model_type")
    return str(m) if m is not None else None


def row_of(path: Path | str) -> dict[str, Any]:
    from diagnose.errors import SwiftdocError
    from diagnose.pipeline import analyze_paths

    row: dict[str, Any] = {k: None for k in ROW_KEYS}
    row["path"] = str(path)
    try:
        run, diag = analyze_paths([str(path)])
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
               culprit_rank=diag.culprit.get("rank") if diag.culprit else None)
    return row


def _init_worker() -> None:
    os.environ.setdefault("SWIFTDOC_JOBS", "1")  # a pool worker does not fork a scan helper of its own


def analyse_runs(paths: list[Path], jobs: int = 1, progress: Callable[[int], None] | None = None) -> Iterator[dict[str, Any]]:
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


__all__ = ["ROW_KEYS", "find_runs", "row_of", "analyse_runs"]
