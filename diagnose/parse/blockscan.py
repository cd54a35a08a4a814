"""Scan the blocks of a log in order, on two cores when the file is big.

Contract: `scan_blocks(source, quote=b"'", line_start_only=False, block_size=None)`
yields one `Block` per block of `iter_blocks(source, block_size)`, in file order:
`block.scan` is exactly `scan_block(block.data, quote, line_start_only)`, and
`block.data` (the bytes) is read on first access.  Callers touch `data` only when
a block holds lines the vectorised scan did not read (text lines, odd dicts), so
the bytes of a block made only of training dicts need not be read by this process.

For a file of at least `PARALLEL_MIN_BYTES` on Linux with two or more cores
(and no other thread running in this process, so forking is safe), one forked
helper scans the odd blocks while this process scans the even ones and does
everything that must stay in order (text lines, events).  Both read blocks by
their byte ranges (`sources.block_bounds`, computed once before the fork); the
helper sends back only the scans (numpy arrays, pickled over a pipe), at most a
block or so ahead.  If the helper fails, dies, sends something unexpected, or
sends nothing for `HELPER_TIMEOUT_S`, this process kills it and scans that block
and the rest itself: the result is always the sequential scan's.  `SWIFTDOC_JOBS=1` turns the helper off.
"""
from __future__ import annotations

import os
import pickle
import select
import signal
import sys
import threading
from pathlib import Path
from typing import Iterator

from diagnose.parse import sources
from diagnose.parse.fastdict import BlockScan, prefer_pandas, scan_block

PARALLEL_MIN_BYTES = 48 << 20
PREFER_PANDAS_BYTES = 16 << 20  # from here the pandas float parser repays its import on every block


class Block:
    def __init__(self, scan: BlockScan, data: bytes | None = None, path: Path | None = None,
                 span: tuple[int, int] = (0, 0)):
        self.scan = scan
        self._data = data
        self._path = path
        self._span = span
        self.size = len(data) if data is not None else span[1] - span[0]

    @property
    def data(self) -> bytes:
        if self._data is None:
            assert self._path is not None
            self._data = sources.read_block(self._path, *self._span)
        return self._data


def scan_blocks(source: bytes | Path, quote: bytes = b"'", line_start_only: bool = False,
                block_size: int | None = None) -> Iterator[Block]:
    size = block_size or sources.BLOCK
    if isinstance(source, bytes):
        for data in sources.iter_blocks(source, size):
            yield Block(scan_block(data, quote, line_start_only), data)
        return
    bounds = [b for b in sources.block_bounds(source, size) if b[1] > b[0]]
    helper = _start_helper(source, bounds, quote, line_start_only) if _parallel_ok(source) and len(bounds) > 1 else None
    if bounds and bounds[-1][1] >= PREFER_PANDAS_BYTES:
        prefer_pandas()  # after the fork: both processes import it at once
    try:
        with source.open("rb") as f:
            for i, (start, end) in enumerate(bounds):
                scan = None
                if helper is not None and i % 2 == 1:
                    scan = helper.receive(i)
                    if scan is None:
                        helper.stop()
                        helper = None
                    else:
                        yield Block(scan, path=source, span=(start, end))
                        continue
                f.seek(start)
                data = f.read(end - start)
                yield Block(scan_block(data, quote, line_start_only), data)
    finally:
        if helper is not None:
            helper.stop()


def _parallel_ok(source: Path) -> bool:
    if not sys.platform.startswith("linux"):  # fork after numpy/pandas imports is unsafe on macOS; Windows has none
        return False
    if os.environ.get("SWIFTDOC_JOBS", "") == "1" or (os.cpu_count() or 1) < 2:
        return False
    if _other_threads():  # forking a threaded process can deadlock the child
        return False
    try:
        return source.stat().st_size >= PARALLEL_MIN_BYTES
    except OSError:
        return False


HELPER_TIMEOUT_S = 60.0  # no byte from the helper for this long: it is stuck (or starved); finish alone
_LEN = 8  # each message: 8-byte little-endian length, then the pickle


def _other_threads() -> bool:
    return threading.active_count() > 1


class _Helper:
    def __init__(self, pid: int, fd: int):
        self.pid = pid
        self.fd = fd

    def _read(self, n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            ready, _, _ = select.select([self.fd], [], [], HELPER_TIMEOUT_S)
            if not ready:
                return None
            chunk = os.read(self.fd, min(n - len(buf), 1 << 22))
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    def receive(self, index: int) -> BlockScan | None:
        """The helper's scan of block `index`, or None if it cannot give it."""
        try:
            head = self._read(_LEN)
            body = self._read(int.from_bytes(head, "little")) if head else None
            msg = pickle.loads(body) if body else None
        except Exception:  # a broken pipe, a truncated pickle: the helper is gone
            return None
        if not isinstance(msg, tuple) or len(msg) != 2 or msg[0] != index or not isinstance(msg[1], BlockScan):
            return None
        return msg[1]

    def stop(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass
        try:
            os.kill(self.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            os.waitpid(self.pid, 0)
        except OSError:
            pass


def _start_helper(path: Path, bounds: list[tuple[int, int]], quote: bytes, line_start_only: bool) -> _Helper | None:
    try:
        r, w = os.pipe()
        pid = os.fork()
    except OSError:
        return None
    if pid == 0:  # the helper: never returns into the caller's code
        code = 0
        try:
            os.close(r)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            prefer_pandas()
            with os.fdopen(w, "wb", buffering=1 << 20) as out, path.open("rb") as f:
                for i in range(1, len(bounds), 2):
                    start, end = bounds[i]
                    f.seek(start)
                    body = pickle.dumps((i, scan_block(f.read(end - start), quote, line_start_only)),
                                        protocol=pickle.HIGHEST_PROTOCOL)
                    out.write(len(body).to_bytes(_LEN, "little"))
                    out.write(body)
                    out.flush()
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    return _Helper(pid, r)
