"""Parsing: ms-swift outputs -> one canonical `Run`.

Contract: `parse_run(inputs)` takes paths (files, output dirs) or `-` and returns
a `Run`; it raises `InputError` only for unreadable input (missing, binary,
directory without logs).  Readable text that matches nothing yields a Run with
`recognized=False`.  Nothing here imports torch, swift, pynvml or pandas.
"""
from __future__ import annotations

from diagnose.parse.run import parse_run, parse_text

__all__ = ["parse_run", "parse_text"]
