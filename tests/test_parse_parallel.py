"""The two-core block scan: identical to the sequential scan, really parallel, and safe when the helper fails."""
from __future__ import annotations

import os

import numpy as np
import psutil
import pytest

from diagnose.parse import blockscan, parse_run
from diagnose.parse.fastdict import scan_block

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or (os.cpu_count() or 1) < 2, reason="needs fork and 2 cores")

_ROW = ("{{'loss': {l}, 'grad_norm': {g}, 'learning_rate': 1e-05, 'token_acc': 0.5, 'epoch': 0.1, "
        "'global_step/max_steps': '{i}/5000', 'percentage': '0.10%', 'elapsed_time': '1s', "
        "'remaining_time': '1m', 'memory(GiB)': 3.5, 'train_speed(iter/s)': {s}}}\n")


@pytest.fixture
def big_log(tmp_path, monkeypatch):
    lines = ["[INFO:swift] swift.__version__: 3.8.1\n"]
    for i in range(1, 3001):
        lines.append(_ROW.format(l=round(2 - i * 1e-4, 6), g="nan" if i == 1500 else 1.25, i=i, s=round(1.5 + (i % 7) * 0.01, 4)))
        if i % 400 == 0:
            lines.append(f"[INFO:swift] Saving model checkpoint to /out/checkpoint-{i}\n")
    p = tmp_path / "train.log"
    p.write_text("".join(lines))
    monkeypatch.setattr(blockscan, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.delenv("SWIFTDOC_JOBS", raising=False)
    # threads other tests leave behind (tqdm's monitor) would turn the helper off; that guard has its own test
    monkeypatch.setattr(blockscan, "_other_threads", lambda: False)
    return p


def _collect(path, **kw):
    out = []
    for blk in blockscan.scan_blocks(path, block_size=64 << 10, **kw):
        block, scan = blk.data, blk.scan
        groups = [(keys, {k: v.tobytes() for k, v in cols.items()}, lines.tolist()) for keys, cols, lines in scan.groups]  # bytes: nan == nan
        out.append((block, groups, scan.odd_lines.tolist(), scan.dict_line_mask.tolist(), scan.newlines.tolist()))
    return out


def _count_parent_scans(monkeypatch):
    calls = []
    parent = os.getpid()

    def counting(block, *a, **k):
        if os.getpid() == parent:
            calls.append(len(block))
        return scan_block(block, *a, **k)

    monkeypatch.setattr(blockscan, "scan_block", counting)
    return calls


def test_parallel_scan_equals_sequential_and_the_helper_does_half(big_log, monkeypatch):
    calls = _count_parent_scans(monkeypatch)
    par = _collect(big_log)
    n_blocks = len(par)
    assert n_blocks >= 6
    assert len(calls) == (n_blocks + 1) // 2  # the odd blocks came from the helper
    monkeypatch.setenv("SWIFTDOC_JOBS", "1")
    calls.clear()
    seq = _collect(big_log)
    assert len(calls) == n_blocks
    assert par == seq
    assert not psutil.Process().children()  # the helper was reaped


def test_parse_run_is_the_same_on_one_or_two_cores(big_log, monkeypatch):
    calls = _count_parent_scans(monkeypatch)
    monkeypatch.setattr(blockscan.sources, "BLOCK", 64 << 10)
    two = parse_run([str(big_log)])
    assert 3 <= len(calls) < big_log.stat().st_size / (64 << 10)  # several blocks, some scanned by the helper
    monkeypatch.setenv("SWIFTDOC_JOBS", "1")
    one = parse_run([str(big_log)])
    assert len(two.steps) == len(one.steps) == 3000
    for c in ("step", "loss", "grad_norm", "interval_s", "line"):
        np.testing.assert_array_equal(two.steps[c], one.steps[c])
    assert [(e.kind, e.line) for e in two.events] == [(e.kind, e.line) for e in one.events]


def test_a_failing_helper_falls_back_to_this_process(big_log, monkeypatch):
    parent = os.getpid()

    def crash_in_helper(block, *a, **k):
        if os.getpid() != parent:
            raise MemoryError("simulated helper failure")
        return scan_block(block, *a, **k)

    monkeypatch.setenv("SWIFTDOC_JOBS", "1")
    seq = _collect(big_log)
    monkeypatch.delenv("SWIFTDOC_JOBS")
    monkeypatch.setattr(blockscan, "scan_block", crash_in_helper)
    assert _collect(big_log) == seq
    assert not psutil.Process().children()


def test_a_stuck_helper_is_killed_and_this_process_finishes(big_log, monkeypatch):
    import time

    parent = os.getpid()

    def hang_in_helper(block, *a, **k):
        if os.getpid() != parent:
            time.sleep(600)
        return scan_block(block, *a, **k)

    monkeypatch.setenv("SWIFTDOC_JOBS", "1")
    seq = _collect(big_log)
    monkeypatch.delenv("SWIFTDOC_JOBS")
    monkeypatch.setattr(blockscan, "HELPER_TIMEOUT_S", 0.5)
    monkeypatch.setattr(blockscan, "scan_block", hang_in_helper)
    t = time.monotonic()
    assert _collect(big_log) == seq
    assert time.monotonic() - t < 30
    assert not psutil.Process().children()


def test_no_fork_while_other_threads_run(big_log, monkeypatch):
    import threading

    monkeypatch.undo()  # the real thread check
    monkeypatch.setattr(blockscan, "PARALLEL_MIN_BYTES", 1)
    assert blockscan._parallel_ok(big_log) == (threading.active_count() == 1)
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert not blockscan._parallel_ok(big_log)
    finally:
        stop.set()
        t.join()


def test_abandoning_the_scan_reaps_the_helper(big_log):
    gen = blockscan.scan_blocks(big_log, block_size=64 << 10)
    next(gen)
    assert psutil.Process().children()
    gen.close()
    assert not psutil.Process().children()


def test_small_files_and_stdin_stay_in_one_process(tmp_path, monkeypatch):
    p = tmp_path / "small.log"
    p.write_text(_ROW.format(l=1.0, g=1.0, i=1, s=1.0))
    assert not blockscan._parallel_ok(p)  # below PARALLEL_MIN_BYTES
    monkeypatch.setattr(blockscan, "PARALLEL_MIN_BYTES", 1)
    for blk in blockscan.scan_blocks(p.read_bytes() * 400, block_size=4096):  # stdin: bytes, never forked
        assert not psutil.Process().children()
