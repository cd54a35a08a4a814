"""One exception family for everything the user should see as a one-line error.

Contract: `SwiftdocError(message, hint=None, exit_code=2)`.  The CLI catches it,
prints `error: <message>` (+ `hint: <hint>`) on stderr and returns `exit_code`;
a traceback is printed only with `-v`.  Exit codes: 2 bad input or usage,
3 missing environment (ms-swift / NVML / GPU not available).
"""
from __future__ import annotations


class SwiftdocError(Exception):
    exit_code = 2

    def __init__(self, message: str, hint: str | None = None, exit_code: int | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        if exit_code is not None:
            self.exit_code = exit_code


class InputError(SwiftdocError):
    """Unreadable or unusable input (file missing, binary, empty dir)."""

    exit_code = 2


class UsageError(SwiftdocError):
    exit_code = 2


class EnvironmentMissing(SwiftdocError):
    """Something the command needs is not installed or not present (ms-swift, NVML)."""

    exit_code = 3
