"""Render an attach `Snapshot` with rich: header, progress, GPUs, host, current diagnosis.

Contract: `render_snapshot(snap) -> rich renderable` (no I/O; with swiftdoc probe files, a per-rank block of live
step time and data wait; the command puts it
in a `rich.live.Live` or prints it once); `alert_text(alert) -> Text` for the
line printed above the live view the moment a rule fires; `sparkline(values)`.
Missing numbers print as "N/A", never as 0.
"""
from __future__ import annotations

import math
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from diagnose.attach.session import Snapshot

_BARS = "▁▂▃▄▅▆▇█"
_SEV = {"error": "bold red", "warning": "bold yellow", "info": "cyan"}
_EFFECT = {"safe": "green", "changes-training": "yellow", "advice": "dim"}


def sparkline(values: list[float | None], lo: float | None = None, hi: float | None = None, width: int = 30) -> str:
    vals = values[-width:]
    nums = [v for v in vals if v is not None and math.isfinite(v)]
    if not nums:
        return ""
    lo = min(nums) if lo is None else lo
    hi = max(nums) if hi is None else hi
    span = hi - lo
    out = []
    for v in vals:
        if v is None or not math.isfinite(v):
            out.append(" ")
        elif span <= 0:
            out.append(_BARS[len(_BARS) // 2])
        else:
            k = int((min(max(v, lo), hi) - lo) / span * (len(_BARS) - 1) + 0.5)
            out.append(_BARS[k])
    return "".join(out)


def _na(v: Any, fmt: str = "{}", unit: str = "") -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "N/A"
    return fmt.format(v) + unit


def _dur(s: float | None) -> str:
    if s is None or not math.isfinite(s):
        return "N/A"
    s = int(round(s))
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}d {h}h {m:02d}m"
    if h:
        return f"{h}h {m:02d}m"
    if m:
        return f"{m}m {s:02d}s"
    return f"{s}s"


def _header(snap: Snapshot) -> Text:
    t = snap.target
    h = Text()
    h.append("swiftdoc attach", style="bold")
    if t.get("pid"):
        h.append(f"  PID {t['pid']}")
        if t.get("command"):
            h.append(f" ({t['command']})", style="dim")
    finished = bool(snap.run is not None and snap.run.ended)
    if snap.ended:
        state = "ended"
    elif snap.alive:
        state = "running"
    elif t.get("pid"):
        state = "exited"
    else:
        state = "ended (files only)" if finished else "following files"
    h.append(f"  [{state}]", style="green" if state == "running" else "yellow")
    h.append(f"\nlog: {t.get('log') or 'waiting for the job to create its log…'}", style="dim")
    gpus = t.get("gpus")
    if gpus or t.get("pid") or t.get("gpu_source"):  # files only, no PID: which GPUs the job had is unknown
        h.append("\nGPUs: " + (",".join(str(g) for g in gpus) if gpus else "all visible" if gpus is None else "none")
                 + (f" (from {t['gpu_source']})" if t.get("gpu_source") else ""), style="dim")
    return h


def _progress(p: dict[str, Any] | None, live: bool = True) -> Text:
    if not p:
        return Text("no training step logged yet", style="dim")
    out = Text()
    step, ms = p.get("step"), p.get("max_steps")
    out.append("step ", style="dim")
    out.append(f"{_na(step)}" + (f"/{ms}" if ms else ""), style="bold")
    if p.get("frac") is not None:
        out.append(f" ({100 * p['frac']:.0f}%)")
    out.append("   speed ", style="dim")
    out.append(_na(p.get("s_per_it"), "{:.3g}", " s/it"))
    out.append("   ")
    out.append(_na(p.get("samples_per_s"), "{:.3g}", " samples/s"))
    if live:
        out.append("   ETA ", style="dim")
        out.append(_dur(p.get("eta_s")))
    elif ms and step is not None and step < ms:
        out.append(f"   stopped {ms - step} step(s) short", style="yellow")
    out.append("\nloss ", style="dim")
    out.append(_na(p.get("loss"), "{:.4g}"))
    out.append(f" {sparkline(p.get('loss_series') or [])}", style="cyan")
    out.append("   grad_norm ", style="dim")
    out.append(_na(p.get("grad_norm"), "{:.4g}"))
    out.append(f" {sparkline(p.get('grad_norm_series') or [])}", style="magenta")
    if p.get("memory_gib") is not None:
        out.append("   memory(GiB) ", style="dim")
        out.append(f"{p['memory_gib']:.2f}")
    return out


def _gpus(g: dict[str, Any]) -> Any:
    if g.get("nvml") != "ok":
        return Text(f"GPU: {g.get('nvml')}", style="dim")
    tab = Table(box=None, pad_edge=False, show_edge=False, header_style="dim")
    for col in ("GPU", "util history", "util", "memory used/total", "power", "temp", "throttle"):
        tab.add_column(col)
    series = g.get("util_series") or {}
    for r in g.get("latest") or []:
        used, total = r.get("mem_used_mib"), r.get("mem_total_mib")
        mem = "N/A"
        if used is not None and total:
            mem = f"{used / 1024:.1f}/{total / 1024:.1f} GiB ({100 * used / total:.0f}%)"
        elif used is not None:
            mem = f"{used / 1024:.1f} GiB"
        power = _na(r.get("power_w"), "{:.0f}") + ("/" + _na(r.get("power_limit_w"), "{:.0f}") if r.get("power_limit_w") else "") + " W"
        thr = r.get("throttle")
        thr_s = "N/A" if thr is None else (", ".join(x for x in thr if x != "gpu_idle") or "-")
        tab.add_row(str(r["index"]), sparkline(series.get(str(r["index"])) or [], 0, 100, 30),
                    _na(r.get("util_gpu_pct"), "{:.0f}", "%"), mem, power, _na(r.get("temp_c"), "{:.0f}", "°C"), thr_s)
    s = g.get("summary") or {}
    foot = Text()
    if s.get("n_samples"):
        foot.append(f"{s['n_samples']} samples", style="dim")
        foot.append(f" · util mean {_na(s.get('gpu_util_mean_pct'), '{:.0f}', '%')}"
                    f" · p10 {_na(s.get('gpu_util_p10_pct'), '{:.0f}', '%')}"
                    f" · memory headroom {_na(None if s.get('mem_headroom_frac') is None else 100 * s['mem_headroom_frac'], '{:.0f}', '%')}"
                    f" · PCIe rx {_na(s.get('pcie_rx_mean_mbps'), '{:.0f}', ' MB/s')}", style="dim")
        if s.get("xid_errors"):
            foot.append(f" · XID {s.get('xid_codes')}", style="bold red")
    return Group(tab, foot)


def _host(h: dict[str, Any] | None) -> Text:
    if not h:
        return Text("host: not on the job's machine (no local PID)", style="dim")
    t = Text("host: ", style="dim")
    t.append(f"{_na(h.get('cpu_cores'))} cores")
    w = h.get("dataloader_workers_running")
    if w:
        t.append(f" · {w} data-loader workers ({_na(h.get('worker_cpu_pct'), '{:.0f}', '% CPU')})")
    elif w == 0:
        t.append(" · no data-loader worker processes")
    if h.get("rank_cpu_pct") is not None:
        t.append(f" · ranks {h['rank_cpu_pct']:.0f}% CPU")
    t.append(f" · RAM {_na(h.get('host_mem_available_gib'), '{:.1f}')}/{_na(h.get('host_mem_total_gib'), '{:.1f}')} GiB free")
    if h.get("shm_total_gib") is not None:
        style = "bold red" if (h.get("shm_total_gib") or 0) < 1 or (h.get("shm_used_frac") or 0) > 0.8 else ""
        t.append(f" · /dev/shm {_na(h.get('shm_used_gib'), '{:.2f}')}/{h['shm_total_gib']:.2f} GiB", style=style)
    return t


def _diagnosis(d: Any) -> Any:
    """The typed analyze document (`outputs.AnalyzeOut`) as text: verdict, top findings, their remedies."""
    if d is None or d.primary is None:
        return Text("diagnosis: waiting for the log", style="dim")
    from diagnose.render.ops_text import op_lines

    p = d.primary
    out = Text()
    style = "bold green" if p.category == "healthy" else _SEV.get(p.severity, "bold")
    out.append(f"{p.category.upper()}", style=style)
    out.append(f" {p.confidence}", style="italic")
    if p.rule:
        out.append(f" [{p.rule}]", style="dim")
    out.append(f"  {p.summary}")
    shown = [f for f in d.findings if f.severity != "info"]
    for f in shown[:4]:
        out.append(f"\n{f.severity:<7} ", style=_SEV.get(f.severity, ""))
        out.append(f"{f.rule} ", style="bold")
        out.append(f"{f.evidence or f.summary}")
        for r in f.remedies[:2]:
            out.append("\n   → ")
            out.append(f"[{r.effect}] ", style=_EFFECT.get(r.effect, ""))
            out.append(r.title)
            for op in r.ops[:3]:
                for ln in op_lines(op):
                    out.append(f"\n       {ln}", style="green" if ln.startswith("+") else "")
            if len(r.ops) > 3:
                out.append(f"\n       … {len(r.ops) - 3} more change(s)", style="dim")
        if len(f.remedies) > 2:
            out.append(f"\n   … {len(f.remedies) - 2} more remedy(ies): swiftdoc analyze shows them", style="dim")
    if len(shown) > 4:
        out.append(f"\n… {len(shown) - 4} more finding(s)", style="dim")
    return out


def render_snapshot(snap: Snapshot) -> Group:
    live = snap.alive and not snap.ended
    parts: list[Any] = [_header(snap), Text(""), _progress(snap.progress, live), Text(""), _gpus(snap.gpus),
                        _host(snap.host), Text(""), _diagnosis(snap.diagnosis)]
    for st in (snap.diagnosis.stragglers if snap.diagnosis is not None else []):
        who = f"GPU {st.gpu}" if st.gpu is not None else f"rank {st.rank}"
        parts.append(Text.assemble(("straggler ", "bold yellow"), f"{who} runs {st.slowdown:.2f}× slower: {st.evidence}"))
    if snap.diagnosis is not None and getattr(snap.diagnosis, "probe", None) is not None:
        parts.append(_probe(snap.diagnosis.probe, getattr(snap.run, "probe", None)))
    if snap.hang is not None:
        parts.append(_hang(snap.hang))
    gpu_line = str((snap.gpus or {}).get("nvml") or "")
    for n in [n for n in snap.notes if not (gpu_line and n in gpu_line)][:3]:  # the GPU line already says it
        parts.append(Text(f"note: {n}", style="dim"))
    return Group(*parts)


def _probe(p: Any, probe: Any) -> Text:
    """Live per-rank step time and data wait from the probe's growing files (the last 10 steps, a sparkline of 30)."""
    t = Text()
    t.append("probe", style="bold")
    t.append(f"  data wait {_na(p.data_wait_share, '{:.0%}')} of the time, {p.ranks_read} rank(s)")
    series = {r.rank: r.cols["wall_s"] for r in getattr(probe, "ranks", [])}
    for r in p.ranks[:8]:
        t.append(f"\n   rank {r.rank}" + (f" ({r.node})" if r.node else "") + f"  step {_na(r.last_step)}: "
                 f"{_na(r.recent_step_time_s, '{:.3g}', ' s')}/step, data wait {_na(r.recent_data_wait_share, '{:.0%}')}  ",
                 style="" if r.ended is False else "dim")
        if r.rank in series:
            t.append(sparkline([float(x) for x in series[r.rank][-30:]]), style="cyan")
    if len(p.ranks) > 8:
        t.append(f"\n   … {len(p.ranks) - 8} more rank(s)", style="dim")
    if p.straggler is not None:
        t.append(f"\n   straggler rank {p.straggler.rank} ({p.straggler.slowdown:.2f}×, {p.straggler.cause})",
                 style="yellow")
    return t


def _hang(h: dict[str, Any]) -> Text:
    t = Text()
    t.append(f"no new log line for {h.get('stalled_s', 0):.0f} s", style="bold yellow")
    odd = h.get("odd")
    if odd:
        who = f"rank {odd['rank']}" if odd.get("rank") is not None else f"pid {odd['pid']}"
        t.append(f": {who} waits in {odd['where']}; the others in {odd['others_wait_in']}")
    for g in h.get("groups") or []:
        ranks = ",".join(map(str, g["ranks"])) if g.get("ranks") else ",".join(map(str, g["pids"]))
        t.append(f"\n   {ranks}: {g['where']}", style="dim")
    for e in h.get("errors") or []:
        t.append(f"\n   stacks: {e}", style="dim")
    return t


def alert_text(a: dict[str, Any]) -> Text:
    t = Text()
    t.append("ALERT ", style="bold white on red" if a.get("severity") == "error" else "bold black on yellow")
    t.append(f"{a['rule']} ", style="bold")
    t.append(f"{a.get('summary', '')}")
    if a.get("evidence"):
        t.append(f"  ({a['evidence']})", style="dim")
    return t
