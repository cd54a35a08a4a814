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
With only watchdog timeouts, each rank's pending collective (NCCL's WorkNCCL
SeqNum, OpType, NumelIn, per process group) names the rank that fell behind
(lowest SeqNum) or says the ranks desynchronised (same SeqNum, different op or
size) - probable; a run where every rank reports the same collective has no
culprit in the text (the stuck rank is the one whose own error is missing): None.
Flight recorder dumps (one per rank: `parse.flight_recorder`) come before the watchdog lines: the rank
whose last enqueued collective is behind the others' is named (certain), or the desync at the same
collective.
With several captures, one per node (each with its `run sh:` line and its own
torchrun report), each report's root cause is classified - killed by a signal or
failed of its own making, unclear, or failed in a collective - and the earliest
of the first class (by the report's time) is the culprit; the other nodes'
failures are consequences.  `node` is the capture's `--node_rank`.  A node whose capture has no table
because its launcher was itself stopped by a signal from outside (torchrun's "Received N death signal",
as a scheduler's preemption or scancel sends it) is a candidate of the first class too: its ranks
(node x nproc_per_node, ...) were interrupted, and the other nodes then lost their peers.
`culprit`: {rank, node, host, kind, category, file, line, time, summary};
`consequences`: [{rank, node, kind, file, line}].

`rank_table(run) -> [{rank, node, file, last_step, last_time, first_error, line}]`: one row per
rank the text names (torchrun's table, rank-tagged lines), rank order.  `last_step` is known for
the rank whose capture holds the step rows (ms-swift logs them on global rank 0 only), `last_time`
where torchrun printed a failure time, `first_error` is the rank's first error line (its own
failure or a collective's), else its exit as torchrun reported it.  Empty with fewer than two ranks.
"""
from __future__ import annotations

import math
import re
from typing import Any

from diagnose.models import Event, Run

OWN = {"cuda_oom": "oom", "host_oom": "oom", "bus_error": "bus_error", "nan_signature": "nan", "config_error": "config",
       "bad_args": "config", "dataset_error": "unknown", "remote_media": "data_loading", "broken_media": "data_loading",
       "traceback": "unknown"}
COLLECTIVE = {"nccl_timeout", "nccl_error", "nccl_stuck", "nccl_failed", "dist_init_timeout"}
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


def _watchdog_culprit(run: Run) -> dict[str, Any] | None:
    """Only watchdog timeouts in the text: compare the collective each rank was waiting in (NCCL's WorkNCCL).

    Per process group, when every rank reports one SeqNum: the rank whose SeqNum is lower than the others' is
    behind - it left the collective sequence first (stuck in an earlier collective, or in code the others did
    not run); equal SeqNums with different OpType or NumelIn mean the ranks desynchronised (they called
    different collectives).  Probable either way: the stuck rank's own state is not in the text.
    """
    works: list[dict[str, Any]] = []
    for e in run.events:
        if e.kind == "nccl_timeout":
            works += e.detail.get("per_rank") or ([{**e.detail, "line": e.line, "file": e.file}] if "seq" in e.detail else [])
    groups: dict[Any, list[dict[str, Any]]] = {}
    for w in works:
        if w.get("rank") is not None and w.get("seq") is not None:
            groups.setdefault(w.get("pg"), []).append(w)
    for pg, ws in groups.items():
        by_rank: dict[int, list[dict[str, Any]]] = {}
        for w in ws:
            by_rank.setdefault(w["rank"], []).append(w)
        if len(by_rank) < 2 or any(len({x["seq"] for x in v}) > 1 for v in by_rank.values()):
            continue  # one rank reports several collectives: they belong to process groups the text does not name
        one = {r: v[0] for r, v in by_rank.items()}
        seqs = {w["seq"] for w in one.values()}
        where = f" in process group {pg}" if pg is not None else ""
        if len(seqs) > 1:
            low = min(seqs)
            lag = sorted(r for r, w in one.items() if w["seq"] == low)
            if len(lag) < len(one):
                w = one[lag[0]]
                others = sorted({x["seq"] for x in one.values() if x["seq"] != low})
                return {"rank": lag[0] if len(lag) == 1 else None, "node": None, "host": None, "category": "nccl",
                        "kind": f"behind in the collective sequence: SeqNum {low} while the others wait at "
                                f"{', '.join(map(str, others))}", "file": w.get("file") or _file_of(run, w),
                        "line": w.get("line"), "time": None, "confidence": "probable",
                        "summary": f"rank(s) {', '.join(map(str, lag))}{where} fell behind: their watchdog reports "
                                   f"SeqNum {low}, the other ranks' {', '.join(map(str, others))} - the lagging rank "
                                   "stopped issuing collectives first"}
        ops = {w["op"] for w in one.values() if w.get("op")}  # a report cut before its op says nothing about it
        sizes = {w["numel_in"] for w in one.values() if w.get("numel_in") is not None}
        if len(ops) > 1 or len(sizes) > 1:
            w = next(iter(one.values()))
            what = "; ".join(f"rank {r}: {x.get('op')} of {x.get('numel_in')} elements" for r, x in sorted(one.items()))
            return {"rank": None, "node": None, "host": None, "category": "nccl", "confidence": "probable",
                    "kind": f"desynchronised at SeqNum {w['seq']}", "file": w.get("file") or _file_of(run, w),
                    "line": w.get("line"), "time": None,
                    "summary": f"the ranks{where} desynchronised at SeqNum {w['seq']} ({what}): they called "
                               "different collectives (a rank-dependent branch, or ranks running different numbers "
                               "of steps)"}
    return None


def _fr_culprit(run: Run) -> dict[str, Any] | None:
    """Flight recorder dumps, one per rank: per process group, the last collective each rank enqueued.

    A rank whose last collective is behind the others' never called the collective they wait in: it is
    stuck elsewhere (certain: the dumps say which collectives each rank called).  The same last collective
    with a different op or size on some rank means the ranks desynchronised.
    """
    dumps = [d for d in run.flight_recorder if d.get("rank") is not None]
    if len(dumps) < 2:
        return None
    pgs = sorted({pg for d in dumps for pg in d["last"]})
    for pg in pgs:
        one = {d["rank"]: d for d in dumps if pg in d["last"]}
        if len(one) < 2:
            continue

        def seq(d: dict[str, Any]) -> int:
            st = d["pgs"].get(pg) or {}
            v = st.get("last_enqueued")
            return v if isinstance(v, int) and v >= 0 else d["last"][pg]["seq"]

        seqs = {r: seq(d) for r, d in one.items()}
        low, high = min(seqs.values()), max(seqs.values())
        name = f"process group {pg}"
        if low < high:
            lag = sorted(r for r, v in seqs.items() if v == low)
            ahead = next(d for r, d in one.items() if seqs[r] == high)
            pend = ahead["last"][pg]
            mine = one[lag[0]]["last"][pg]
            what = f"#{pend['seq']} {pend['op']}" + (f" from {pend['where']}" if pend.get("where") else "")
            waiting = [{"rank": r, "node": None, "kind": f"waits in collective #{seqs[r]} {d['last'][pg]['op']} "
                        f"(flight recorder, {d['last'][pg]['state']})", "file": d["file"], "line": None}
                       for r, d in sorted(one.items()) if seqs[r] > low]
            return {"rank": lag[0] if len(lag) == 1 else None, "node": None, "host": None, "category": "nccl",
                    "_waiting": waiting,
                    "confidence": "certain", "file": one[lag[0]]["file"], "line": None, "time": None,
                    "kind": f"behind in the collective sequence (flight recorder): its last collective is #{low} "
                            f"{mine['op']}, the others enqueued #{high}",
                    "summary": f"rank(s) {', '.join(map(str, lag))} never called collective {what} that the other "
                               f"rank(s) wait in ({name}; flight recorder: their last is #{low} {mine['op']}): "
                               "stuck outside the collectives, in their own code"}
        ops = {r: (d["last"][pg]["op"], str(d["last"][pg]["sizes"])) for r, d in one.items()}
        if len(set(ops.values())) > 1:
            what = "; ".join(f"rank {r}: {o} {sz}" for r, (o, sz) in sorted(ops.items()))
            d0 = next(iter(one.values()))
            return {"rank": None, "node": None, "host": None, "category": "nccl", "confidence": "certain",
                    "file": d0["file"], "line": None, "time": None,
                    "kind": f"desynchronised at collective #{low} (flight recorder)",
                    "summary": f"the ranks desynchronised at collective #{low} of {name} ({what}): they called "
                               "different collectives"}
    return None


def _file_of(run: Run, w: dict[str, Any]) -> str | None:
    return run.line_file


_GLOG = re.compile(r"^[IWEF](\d\d)(\d\d) (\d\d:\d\d:\d\d(?:\.\d+)?) ")
_TORCHRUN_TIME = re.compile(r"^\d{4}-(\d\d)-(\d\d)_(\d\d:\d\d:\d\d)")


def _sort_time(t: str | None) -> str:
    """torchrun's `2026-11-23_22:21:54` and a glog stamp's `11-23 22:21:53.173` as one sortable `MM-DD HH:MM:SS`."""
    m = _TORCHRUN_TIME.match(t or "")
    if m:
        return f"{m.group(1)}-{m.group(2)} {m.group(3)}"
    return t if t and re.match(r"\d\d-\d\d \d\d:", t) else "~"


def _launcher_signals(run: Run, roots: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Captures of a multi-node job without a failure table whose torchrun was stopped by a signal from outside."""
    if len(set(run.nodes.values())) < 2:
        return []
    with_table = {f.get("file") for f in roots}
    nproc = (run.launch.nproc_per_node if run.launch else None) or 1
    out = []
    for e in run.events:
        if e.kind != "signal" or e.file in with_table or "death signal" not in e.text or e.file not in run.nodes:
            continue
        node = run.nodes[e.file]
        m = _GLOG.match(e.text.lstrip())
        out.append({"rank": node * nproc if nproc == 1 else None, "ranks": [node * nproc + i for i in range(nproc)],
                    "file": e.file, "line": e.line, "host": None, "exitcode": -int(e.detail.get("signal") or 15),
                    "time": f"{m.group(1)}-{m.group(2)} {m.group(3)}" if m else None, "launcher_signal": True,
                    "root_cause": True})
        with_table.add(e.file)
    return out


def _classify(run: Run, entry: dict[str, Any]) -> tuple[int, str, str, Event | None]:
    """(order, kind, category, event): 0 = the rank's own failure, 1 = unclear, 2 = it failed in a collective."""
    rank, file = entry.get("rank"), entry.get("file")
    if entry.get("launcher_signal"):
        sig = _SIGNALS.get(entry.get("exitcode"), f"signal {-entry['exitcode']}")
        return 0, f"its launcher (torchrun) received {sig} from outside and stopped its workers", "interrupted", None
    same = [e for e in run.events if e.file == file and rank in _ranks_of(e)]
    own = next((e for e in same if e.kind in OWN), None)
    coll = next((e for e in same if e.kind in COLLECTIVE), None)
    kind, cat = _exit_kind(entry)
    if _SIGNALS.get(entry.get("exitcode")) in ("SIGBUS", "SIGKILL", "SIGSEGV", "SIGABRT"):
        return 0, kind, cat, None  # killed by a signal of its own: nothing else on that rank explains it
    if own is not None:
        return 0, own.text[:160], OWN[own.kind], own
    if coll is not None:
        return 2, f"{coll.kind}: {coll.text[:120]}", "nccl", coll
    return 1, kind, cat, None


def find_culprit(run: Run, category: str | None = None) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    culprit: dict[str, Any] | None = None
    roots = [f for f in run.failures if f.get("root_cause") and "rank" in f]
    roots += _launcher_signals(run, roots)
    own = [e for e in run.events if e.kind in OWN and _ranks_of(e)]
    used_roots: list[dict[str, Any]] = []
    if roots:
        # several nodes, one table each: the rank that failed of its own making, earliest first
        ranked = sorted(roots, key=lambda f: (_classify(run, f)[0], _sort_time(f.get("time")), f.get("line") or 0))
        root = ranked[0]
        order, kind, cat, _ev = _classify(run, root)
        node = run.nodes.get(root.get("file") or "")
        if cat in ("unknown",) and category and category not in ("healthy", "unknown", "nccl"):
            cat = category
        who = (f"rank {root['rank']}" if root["rank"] is not None else
               f"ranks {', '.join(map(str, root.get('ranks') or []))}")
        culprit = {"rank": root["rank"], "node": node, "host": root.get("host"), "kind": kind, "category": cat,
                   "file": root.get("file"), "line": root.get("line"), "time": root.get("time"),
                   "summary": who + (f" (node {node})" if node is not None else "")
                              + (f" on {root['host']}" if root.get("host") else "")
                              + f" failed first: {kind}" + (" (torchrun's root cause)" if len(roots) == 1 else
                                                             f" ({root.get('time') or 'earliest'}, of {len(roots)} nodes' reports)")}
        used_roots = ranked[1:]
    elif own:
        e = min(own, key=lambda e: e.line)
        rank = _ranks_of(e)[0]
        node = run.nodes.get(e.file or "")
        culprit = {"rank": rank, "node": node, "host": None, "kind": e.text[:160],
                   "category": OWN[e.kind] if e.kind != "traceback" or category in (None, "nccl") else category,
                   "file": e.file, "line": e.line, "time": None,
                   "summary": f"rank {rank}" + (f" (node {node})" if node is not None else "") + f" failed first: {e.text[:120]}"}
    if culprit is None:
        culprit = _fr_culprit(run) or _watchdog_culprit(run)
    if culprit is None:
        return None, []
    cons: list[dict[str, Any]] = list(culprit.pop("_waiting", None) or [])
    for f in used_roots:
        _o, kind, _c, _e = _classify(run, f)
        cons.append({"rank": f["rank"], "node": run.nodes.get(f.get("file") or ""), "kind": f"then failed: {kind}",
                     "file": f.get("file"), "line": f.get("line")})
    done = {(c["file"], c["rank"]) for c in cons}
    for e in run.events:
        if e.kind in COLLECTIVE:
            for r in _ranks_of(e):
                if r != culprit["rank"] and (e.file, r) not in done:
                    cons.append({"rank": r, "node": run.nodes.get(e.file or ""), "kind": f"{e.kind}: {e.text[:100]}",
                                 "file": e.file, "line": e.line})
        elif e.kind == "closing_signal":
            if e.file == culprit.get("file") and culprit.get("category") == "interrupted":
                continue  # the interrupted launcher passing its signal on to its own workers: part of the cause
            n = int(e.detail.get("repeats", 1))
            cons.append({"rank": None, "node": run.nodes.get(e.file or ""), "kind": f"{n} process(es) sent "
                         f"{e.detail.get('name', 'a signal')} by torchrun", "file": e.file, "line": e.line})
    for f in run.failures:
        if not f.get("root_cause") and "rank" in f and f["rank"] != culprit["rank"]:
            kind, _ = _exit_kind(f)
            cons.append({"rank": f["rank"], "node": run.nodes.get(f.get("file") or ""), "kind": f"also failed: {kind}",
                         "file": f.get("file"), "line": f.get("line")})
    seen: set[tuple[Any, ...]] = set()
    unique = []
    for c in cons:  # the same line in the console copy (--tee) and in the rank's own file is one consequence
        key = (c["rank"], c["node"], c["kind"].split(": ", 1)[-1])
        if key not in seen:
            seen.add(key)
            unique.append(c)
    return culprit, unique


def rank_table(run: Run) -> list[dict[str, Any]]:
    rows: dict[int, dict[str, Any]] = {}

    def row(rank: int, file: str | None) -> dict[str, Any]:
        r = rows.setdefault(rank, {"rank": rank, "node": None, "file": None, "last_step": None, "last_time": None,
                                   "first_error": None, "line": None})
        if r["file"] is None and file is not None:
            r["file"], r["node"] = file, run.nodes.get(file)
        return r

    for e in sorted(run.events, key=lambda e: e.line):
        if e.kind in OWN or e.kind in COLLECTIVE:
            for rk in _ranks_of(e):
                r = row(rk, e.file)
                if r["first_error"] is None:
                    r["first_error"], r["line"] = f"{e.kind}: {e.text[:120]}", e.line
    for f in run.failures:
        if "rank" not in f:
            continue
        r = row(f["rank"], f.get("file"))
        r["last_time"] = r["last_time"] or f.get("time")
        if r["first_error"] is None:
            r["first_error"], r["line"] = f"exit: {_exit_kind(f)[0]}", f.get("line")
    for sig in _launcher_signals(run, [f for f in run.failures if f.get("root_cause") and "rank" in f]):
        for rk in sig["ranks"]:
            r = row(rk, sig["file"])
            r["last_time"] = r["last_time"] or sig["time"]
            if r["first_error"] is None:
                r["first_error"], r["line"] = f"interrupted: {_classify(run, sig)[1]}", sig["line"]
    if len(rows) < 2:
        return []
    steps = run.steps["step"] if len(run.steps) else None
    if steps is not None and 0 in rows:
        done = [s for s in steps.tolist() if math.isfinite(s)]
        rows[0]["last_step"] = int(max(done)) if done else None
    return [rows[k] for k in sorted(rows)]


__all__ = ["find_culprit", "rank_table"]
