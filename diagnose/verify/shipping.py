"""What `verify --ray` ships to remote workers: the files the trial names, never the folder it happens to run in.

Contract:
- `needed_files(job, script=None) -> list[str]`: paths relative to `job.cwd` of the regular files the trial needs:
  the launch script, and every argv token or env value (a `--flag=value`'s value, a dataset's `path#rows`, comma or
  colon lists) that names a file or a folder under `job.cwd` (a folder: its files).  Hidden entries (`.ssh`, `.aws`,
  `.env`, `.git`...), anything outside `job.cwd` (absolute paths are the workers' own: shared storage) and anything
  that is not a regular file are never shipped.
- `stage(job, script=None, limit=SHIP_LIMIT) -> Shipment`: those files copied, at their relative paths, into a fresh
  temporary folder (the runtime env's `working_dir`), after a size check: more than `limit` bytes is a
  `UsageError` (exit 2) naming the largest files.  `Shipment.line` says what is shipped, in one line;
  `Shipment.close()` removes the folder.
"""
from __future__ import annotations

import os
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from diagnose.errors import UsageError

SHIP_LIMIT = 256 << 20  # Ray uploads a working_dir through its GCS: keep it to what a trial reads
_MAX_FILES = 10_000


def _candidates(value: str) -> list[str]:
    out = [value]
    if "=" in value and value.startswith("-"):
        out.append(value.split("=", 1)[1])
    for v in list(out):
        out += [v.split("#", 1)[0]]  # a dataset subset: path#rows
        out += [x for sep in (",", ":") for x in v.split(sep) if sep in v]
    return [x for x in dict.fromkeys(out) if x and not x.startswith("-")]


def _hidden(rel: Path) -> bool:
    return any(part.startswith(".") and part not in (".", "..") for part in rel.parts)


def _files_under(root: Path, base: Path) -> list[Path]:
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
        for f in sorted(filenames):
            if not f.startswith("."):
                out.append(Path(dirpath, f).relative_to(base))
            if len(out) > _MAX_FILES:
                return out
    return out


def needed_files(job: Any, script: str | None = None) -> list[str]:
    base = Path(job.cwd).resolve()
    values = [*job.argv, *job.env.values(), *([script] if script else [])]
    found: dict[str, None] = {}
    for v in values:
        for c in _candidates(str(v)):
            p = Path(c)
            full = (base / p).resolve() if not p.is_absolute() else p.resolve()
            try:
                rel = full.relative_to(base)
            except ValueError:
                continue  # outside the job's folder: the workers' own path (shared storage), never shipped
            if not rel.parts or _hidden(rel):
                continue
            try:
                st = full.stat()
            except (OSError, ValueError):
                continue
            if stat.S_ISREG(st.st_mode):
                found[str(rel)] = None
            elif stat.S_ISDIR(st.st_mode):
                for f in _files_under(full, base):
                    found[str(f)] = None
    return [f for f in found if Path(base, f).is_file()]


def _size(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n / 1024:.1f} KiB"


@dataclass
class Shipment:
    dir: str
    files: list[str] = field(default_factory=list)
    bytes: int = 0

    @property
    def line(self) -> str:
        names = ", ".join(self.files[:6]) + (f" and {len(self.files) - 6} more" if len(self.files) > 6 else "")
        return (f"--ray ships {len(self.files)} file(s), {_size(self.bytes)}, to the workers: {names or 'nothing'} "
                "(the files the job names; any other path must exist on the workers)")

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def stage(job: Any, script: str | None = None, limit: int = SHIP_LIMIT) -> Shipment:
    base = Path(job.cwd).resolve()
    files = needed_files(job, script)
    sizes = {f: (base / f).stat().st_size for f in files}
    total = sum(sizes.values())
    if total > limit or len(files) > _MAX_FILES:
        big = ", ".join(f"{f} ({_size(n)})" for f, n in sorted(sizes.items(), key=lambda kv: -kv[1])[:3])
        raise UsageError(f"--ray would ship {_size(total)} in {len(files)} file(s) to every worker (largest: {big}); "
                         f"the limit is {_size(limit)}",
                         hint="put big files (models, datasets) on storage the workers share and name them by "
                              "absolute path, or use a smaller --subset")
    d = tempfile.mkdtemp(prefix="swiftdoc-ray-ship-")
    try:
        for f in files:
            dst = Path(d, f)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(base / f, dst)
    except OSError as e:
        shutil.rmtree(d, ignore_errors=True)
        raise UsageError(f"--ray: cannot stage {e.filename} for the workers ({e.strerror})") from None
    return Shipment(d, files, total)


__all__ = ["SHIP_LIMIT", "Shipment", "needed_files", "stage"]
