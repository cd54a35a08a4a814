"""Writing the user's own files (`patch --write`, `lint --fix`): all or none, in place, owner and mode kept.

Contract: `write_files(writes, suffix=".bak", force=False) -> list[Path]`, `writes` = [(path, text, encoding)],
returns the backup of each file, in order.  Every edit is planned before the first byte is written:
- a symlink is followed: its target is edited (and backed up beside the target), the link stays a link;
- a file that is not a regular file, or a read-only one (no write bit) without `force`, is refused;
- each new text is staged in a temporary file beside its target (fsync'd, the target's mode, owner and group
  given to it: root fixing another user's script leaves it theirs) and a backup copy is made (same mode, owner);
- only when every file is staged are they renamed over their targets; a rename that fails puts back the files
  already replaced.
Any failure (an unwritable folder, a full disk, an owner that cannot be kept) is an `InputError` (exit 2) that
says nothing was changed, and leaves no temporary file and no backup behind.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from pathlib import Path

from diagnose.errors import InputError


def _free(path: Path, suffix: str, taken: set[Path]) -> Path:
    cand = path.with_name(path.name + suffix)
    n = 1
    while cand.exists() or cand in taken:
        cand = path.with_name(f"{path.name}{suffix}.{n}")
        n += 1
    return cand


def _keep_owner(path: str, st: os.stat_result) -> None:
    if (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()):
        os.chown(path, st.st_uid, st.st_gid)


def _unlink(path: str | Path | None) -> None:
    if path is not None:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _stage(target: Path, data: bytes, st: os.stat_result) -> str:
    fd, tmp = tempfile.mkstemp(dir=str(target.parent), prefix=f".{target.name}.", suffix=".swiftdoc-tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, stat.S_IMODE(st.st_mode))
        _keep_owner(tmp, st)
    except BaseException:
        _unlink(tmp)
        raise
    return tmp


def _backup(target: Path, backup: Path, st: os.stat_result) -> None:
    shutil.copy2(target, backup)
    try:
        _keep_owner(str(backup), st)
    except BaseException:
        _unlink(backup)
        raise


def write_files(writes: list[tuple[Path, str, str]], suffix: str = ".bak", force: bool = False) -> list[Path]:
    planned: list[tuple[Path, Path, os.stat_result, bytes]] = []
    seen: set[Path] = set()
    for path, text, encoding in writes:
        target = Path(os.path.realpath(path))  # a link's target is what gets fixed
        try:
            st = os.stat(target)
        except OSError as e:
            raise InputError(f"{path}: cannot write ({e.strerror}); nothing was changed") from None
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{path}: not a regular file; nothing was changed")
        if not force and not st.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
            raise InputError(f"{path}: read-only (mode {stat.S_IMODE(st.st_mode):o}); nothing was changed",
                             hint="--force writes read-only files too (their mode is kept)")
        if target in seen:
            raise InputError(f"{path}: two edits of one file; nothing was changed")
        seen.add(target)
        try:
            data = text.encode(encoding)
        except (UnicodeEncodeError, LookupError) as e:
            raise InputError(f"{path}: the new text cannot be written as {encoding} ({e}); nothing was changed") from None
        planned.append((Path(path), target, st, data))
    staged: list[tuple[Path, Path, str, Path]] = []  # (as named, target, temp file, backup)
    taken: set[Path] = set()
    current = None
    try:
        for path, target, st, data in planned:
            current = path
            backup = _free(target, suffix, taken)
            taken.add(backup)
            _backup(target, backup, st)
            try:
                tmp = _stage(target, data, st)
            except BaseException:
                _unlink(backup)
                raise
            staged.append((path, target, tmp, backup))
    except OSError as e:
        for _p, _t, tmp, backup in staged:
            _unlink(tmp)
            _unlink(backup)
        raise InputError(f"{current}: cannot write ({e.strerror or e}); nothing was changed",
                         hint="check the folder's permissions and free space") from None
    done: list[tuple[Path, Path, str, Path]] = []
    try:
        for item in staged:
            os.replace(item[2], item[1])
            done.append(item)
    except OSError as e:
        for _p, target, _tmp, backup in done:  # put back what was already replaced
            with contextlib.suppress(OSError):
                back = _stage(target, backup.read_bytes(), os.stat(backup))
                os.replace(back, target)
        for _p, _t, tmp, backup in staged:
            _unlink(tmp)
            _unlink(backup)
        raise InputError(f"cannot replace {e.filename or 'a file'} ({e.strerror}); nothing was changed") from None
    return [b for *_x, b in staged]


__all__ = ["write_files"]
