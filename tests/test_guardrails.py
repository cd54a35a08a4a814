"""Guard rails that run with the tests (so CI runs them): ruff (lint, import order) and the import-layer contracts.

The contracts live in pyproject.toml ([tool.importlinter]): the pipeline's layers (parse -> features -> rules
-> engine -> diagnosis -> pipeline/outputs -> patch/render -> verify/attach -> commands -> cli; nothing imports
upward, no domain package imports the commands) and no torch/ms-swift/pynvml in the diagnosis pipeline.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _tool(name: str) -> str:
    exe = Path(sys.executable).with_name(name)
    return str(exe) if exe.exists() else (shutil.which(name) or name)


def test_ruff_is_clean():
    p = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-1000:]


def test_import_layers_hold():
    p = subprocess.run([_tool("lint-imports"), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-1000:]
    assert "0 broken" in p.stdout
