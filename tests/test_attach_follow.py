"""LogFollower: growth, partial lines, truncation, rotation, deletion, appearance; the urgent-line scan."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from diagnose.attach.follow import URGENT, LogFollower

ROOT = Path(__file__).resolve().parent.parent


def test_growth_and_partial_lines(tmp_path):
    p = tmp_path / "train.log"
    p.write_text("start\n")
    f = LogFollower([p])
    assert not f.poll().changed
    with p.open("a") as fh:
        fh.write("[INFO:swift] step line\ntorch.OutOfMemoryError: CUDA out of mem")  # OOM line not finished
    ch = f.poll()
    assert ch.grown == [p] and ch.urgent == []
    with p.open("a") as fh:
        fh.write("ory. Tried to allocate 2.00 GiB\n")
    ch = f.poll()
    assert ch.grown == [p] and len(ch.urgent) == 1 and "CUDA out of memory" in ch.urgent[0]


def test_truncation_rotation_deletion_appearance(tmp_path):
    p = tmp_path / "train.log"
    later = tmp_path / "logging.jsonl"
    p.write_text("a\nb\nc\n")
    f = LogFollower([p, later])
    # copytruncate-style rotation: the file shrinks
    p.write_text("x\n")
    assert f.poll().truncated == [p]
    # rename-style rotation: a new inode at the same path
    os.rename(p, tmp_path / "train.log.1")
    p.write_text("fresh\n")
    assert f.poll().rotated == [p]
    # a file the job creates later
    later.write_text('{"loss": 1.0}\n')
    assert f.poll().appeared == [later]
    # deletion under us
    p.unlink()
    assert f.poll().deleted == [p]
    assert f.poll().deleted == []  # reported once


def test_big_burst_scans_its_tail_only(tmp_path):
    p = tmp_path / "train.log"
    p.write_text("")
    f = LogFollower([p], scan_limit=1000)
    with p.open("a") as fh:
        fh.write("Traceback (most recent call last)\n" + "x" * 5000 + "\n" + "RuntimeError: NCCL error in: x\n")
    ch = f.poll()
    assert ch.new_bytes <= 1000 and any("NCCL error" in u for u in ch.urgent)


@pytest.mark.parametrize("line", [
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB",
    "[rank0]:[E ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(...)",
    "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).",
    "{'loss': nan, 'grad_norm': nan, 'learning_rate': 1e-05, 'global_step/max_steps': '5/100'}",
    "{'loss': '5.1', 'grad_norm': 'nan', 'global_step/max_steps': '5/100'}",
    '{"loss": NaN, "grad_norm": Infinity, "global_step/max_steps": "5/100"}',
    "Traceback (most recent call last):",
    "[INFO:swift] End time of running main: 2026-11-21 01:24:50.629",
])
def test_urgent_lines(line):
    assert URGENT.search(line)


@pytest.mark.parametrize("fixture", ["healthy_4x", "synthetic_4x_gpu_healthy"])
def test_healthy_logs_have_no_urgent_step_lines(fixture):
    text = (ROOT / "fixtures" / fixture / "train.log").read_text(errors="replace")
    hits = [m.group(0) for m in URGENT.finditer(text)]
    # only the end-of-run markers: ordinary steps never trigger an immediate re-parse
    assert all(h in ("train_runtime", "End time of running main") for h in hits), hits
