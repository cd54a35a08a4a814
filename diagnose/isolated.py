"""Helper interpreters that import nothing from where the user happens to be: the one home of running `python -c`.

Contract (stdlib only): `run_python(python, code, **kw) -> subprocess.CompletedProcess` runs `python -c code`
in a fresh empty temporary working directory (mode 0700, removed afterwards) with `PYTHONSAFEPATH=1`, so the
script's folder or the current directory is never first on `sys.path`: a `json.py` planted beside a launch
script is never imported.  `PYTHONPATH` and the interpreter's own site-packages are kept (that is how ms-swift
is found).  Keyword arguments go to `subprocess.run` (`cwd` is refused: the point is not to have one).
"""
from __future__ import annotations

import os
import subprocess
import tempfile
from typing import Any


def run_python(python: str, code: str, **kw: Any) -> subprocess.CompletedProcess:
    if "cwd" in kw:
        raise ValueError("run_python runs in an empty folder of its own")
    env = dict(kw.pop("env", None) or os.environ)
    env["PYTHONSAFEPATH"] = "1"  # 3.11+: no script or current folder on sys.path (older: the empty folder below)
    with tempfile.TemporaryDirectory(prefix="swiftdoc-py-") as empty:
        return subprocess.run([python, "-c", code], cwd=empty, env=env, **kw)


__all__ = ["run_python"]
