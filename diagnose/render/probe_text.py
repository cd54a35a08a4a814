"""How the probe section reads in text and Markdown (analyze, attach, verify).

Contract: `probe_lines(summary, verbose=False) -> list[str]` (plain lines: a headline, one line per rank up to
8 (all with `verbose`), the straggler, the stall pattern, the notes) and `probe_markdown(summary) -> list[str]`
(a table, one row per rank); `summary` is `features.probe_stats.summary(run.probe)`.  Missing numbers print as
"N/A", never as 0.
"""
from __future__ import annotations

from typing import Any

from diagnose.render.md import md_text


def _pct(v: float | None) -> str:
    return "N/A" if v is None else f"{v:.0%}"


def _s(v: float | None) -> str:
    return "N/A" if v is None else f"{v:.3g} s"


def _rate(v: float | None, unit: str) -> str:
    return "N/A" if v is None else f"{v:,.0f} {unit}/s"


def _mem(r: dict[str, Any]) -> str:
    v = r.get("mem_peak_gib")
    return "N/A" if v is None else f"{v:.2f} GiB ({r.get('mem_kind') or '?'})"


def headline(s: dict[str, Any]) -> str:
    ws = f" of {s['world_size']}" if s.get("world_size") else ""
    return (f"probe: {s['ranks_read']}{ws} rank(s), {s['steps_used']} steps used ({s['warmup_steps']} warm-up "
            f"step(s) per rank dropped): data wait {_pct(s.get('data_wait_share'))} of the time "
            f"(median step {_pct(s.get('data_wait_frac'))})")


def rank_line(r: dict[str, Any]) -> str:
    node = f" ({r['node']})" if r.get("node") else ""
    end = "" if r.get("ended") else ", no end line (stopped or still running)"
    return (f"rank {r['rank']}{node}: step {_s(r.get('step_time_s_median'))} (p90 {_s(r.get('step_time_s_p90'))}), "
            f"data wait {_pct(r.get('data_wait_share'))}, {_rate(r.get('tokens_per_s'), 'tokens')}, "
            f"memory {_mem(r)}{end}")


def probe_lines(s: dict[str, Any], verbose: bool = False) -> list[str]:
    out = [headline(s)]
    rows = s.get("ranks") or []
    for r in rows if verbose else rows[:8]:
        out.append("  " + rank_line(r))
    if len(rows) > 8 and not verbose:
        out.append(f"  ... {len(rows) - 8} more rank(s); -v lists them")
    st = s.get("straggler")
    if st:
        out.append(f"  straggler rank {st['rank']} ({st['slowdown']:.2f}x, {st['cause']}): {st['evidence']}")
    sl = s.get("stalls")
    if sl and sl.get("pattern") not in (None, "none"):
        out.append(f"  stalls: {sl['pattern']}: {sl.get('evidence') or ''}")
    for n in s.get("notes") or []:
        out.append(f"  note: {n}")
    return out


def probe_markdown(s: dict[str, Any]) -> list[str]:
    out = [f"**Probe** ({md_text(headline(s).removeprefix('probe: '))}):", "",
           "| rank | node | steps | step (median) | step (p90) | data wait | tokens/s | samples/s | peak memory |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in s.get("ranks") or []:
        out.append(f"| {r['rank']} | {md_text(r.get('node') or '')} | {r['steps']} | {_s(r.get('step_time_s_median'))} | "
                   f"{_s(r.get('step_time_s_p90'))} | {_pct(r.get('data_wait_share'))} | "
                   f"{_rate(r.get('tokens_per_s'), 'tok')} | {_rate(r.get('samples_per_s'), 'smp')} | {_mem(r)} |")
    out.append("")
    st = s.get("straggler")
    if st:
        out += [f"Straggler: rank {st['rank']} ({st['slowdown']:.2f}×, {st['cause']}): {md_text(st['evidence'])}", ""]
    sl = s.get("stalls")
    if sl and sl.get("pattern") not in (None, "none"):
        out += [f"Stalls: {sl['pattern']}: {md_text(sl.get('evidence') or '')}", ""]
    for n in s.get("notes") or []:
        out += [f"_Note: {md_text(n)}_", ""]
    return out
