"""The rank that failed first, and what happened to the others because of it (one capture, several ranks).

Contract: `find_culprit(run, category=None) -> (culprit | None, consequences)`.
When one rank dies, every other rank then reports a collective timeout or a lost
peer, and torchrun sends SIGTERM to the rest: only one of those errors is the
cause.  Causes are ordered the way they happen:
1. torchrun's own verdict, the "Root Cause (first observed failure)" entry of its
   failure table (rank, host, time, exit code, signal);
2. else the earliest failure of a rank's own making found on a rank-tagged line
   (`[rankN]:` or a watchdog's `[Rank N]`): an OOM, a bus error, a nan report, a
   configuration or dataset error, an exception;
3. the ranks that then failed in a collective (NCCL/gloo errors, watchdog
   timeouts, store timeouts) or were stopped by the launcher (its closing
   signals, the other entries of its table) are the consequences.
A run where every rank reports the same collective timeout has no culprit in the
text (the stuck rank is the one whose own error is missing): None.
`culprit`: {rank, node, host, kind, category, file, line, time, summary};
`consequences`: [{rank, node, kind, file, line}].  `node` is not known from one
capture (None); several files, one per node, are issue #9's next step.
"""
from __future__ import annotations

from typing import Any

from diagnose.models import Event, Run

OWN = {"cuda_oom": "oom", "host_oom": "oom", "bus_error": "bus_error", "nan_signature": "nan", "config_error": "config",
       "bad_args": "config", "dataset_error": "unknown", "remote_media": "data_loading", "traceback": "unknown"}
COLLECTIVE = {"nccl_timeout", "nccl_error", "nccl_stuck", "dist_init_timeout"}
_SIGNALS = {-6: "SIGABRT", -7: "SIGBUS", -9: "SIGKILL", -11: "SIGSEGV", -15: "SIGTERM", -1: "SIGHUP", -2: "SIGINT"}


def _exit_kind(entry: dict[str, Any]) -> tuple[str, str]:
    code = entry.get("exitcode")
    sig = _SIGNALS.get(code) if isinstance(code, int) else None
    if sig == "SIGBUS":
        return "SIGBUS (exit -7)", "bus_error"
    if sig == "SIGKILL":
        return "SIGKILL (exit -9: usually the kernel's OOM killer)", "oom"
    if sig in ("SIGTERM", "SIGHUP", "SIGINT"):
        return f"{sig} (exit {code})", "interrupted"
    if sig:
        return f"{sig} (exit {code})", "unknown"
    return (f"exit code {code}" if code is not None else "failed"), "unknown"


def _ranks_of(e: Event) -> list[int]:
    out = list(e.detail.get("ranks") or [])
    if not out and "rank" in e.detail:
        out = [e.detail["rank"]]
    return out


def find_culprit(run: Run, category: str | None = None) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    culprit: dict[str, Any] | None = None
    root = next((f for f in run.failures if f.get("root_cause") and "rank" in f), None)
    own = [e for e in run.events if e.kind in OWN and _ranks_of(e)]
    if root is not None:
        kind, cat = _exit_kind(root)
        first_own = next((e for e in own if root["rank"] in _ranks_of(e)), None)
        if first_own is not None:  # the rank's own message says more than its exit code
            kind, cat = first_own.text[:160], OWN[first_own.kind]
        culprit = {"rank": root["rank"], "node": None, "host": root.get("host"), "kind": kind,
                   "category": category if category and category not in ("healthy", "unknown") else cat,
                   "file": root.get("file"), "line": root.get("line"), "time": root.get("time"),
                   "summary": f"rank {root['rank']}" + (f" on {root['host']}" if root.get("host") else "")
                              + f" failed first (torchrun's root cause): {kind}"}
    elif own:
        e = min(own, key=lambda e: e.line)
        rank = _ranks_of(e)[0]
        culprit = {"rank": rank, "node": None, "host": None, "kind": e.text[:160],
                   "category": OWN[e.kind] if e.kind != "traceback" or not category else category,
                   "file": e.file, "line": e.line, "time": None,
                   "summary": f"rank {rank} failed first: {e.text[:120]}"}
    if culprit is None:
        return None, []
    cons: list[dict[str, Any]] = []
    for e in run.events:
        if e.kind in COLLECTIVE:
            for r in _ranks_of(e):
                if r != culprit["rank"]:
                    cons.append({"rank": r, "node": None, "kind": f"{e.kind}: {e.text[:100]}", "file": e.file, "line": e.line})
        elif e.kind == "closing_signal":
            n = int(e.detail.get("repeats", 1))
            cons.append({"rank": None, "node": None, "kind": f"{n} process(es) sent {e.detail.get('name', 'a signal')} "
                                                             "by torchrun", "file": e.file, "line": e.line})
    for f in run.failures:
        if not f.get("root_cause") and "rank" in f and f["rank"] != culprit["rank"]:
            kind, _ = _exit_kind(f)
            cons.append({"rank": f["rank"], "node": None, "kind": f"also failed: {kind}", "file": f.get("file"),
                         "line": f.get("line")})
    return culprit, cons


__all__ = ["find_culprit"]
