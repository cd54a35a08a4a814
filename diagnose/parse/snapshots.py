"""Host and GPU snapshots pasted beside a log: nvidia-smi, gpustat, `free -h`, `df -h /dev/shm`.

Contract: `Snapshots.feed(lineno, text) -> bool` reads one (prefix-stripped) line
and returns True when it was a snapshot row; `Snapshots.result()` is the dict kept
as `Run.snapshot`: `gpus` [{index, name, mem_used_gib, mem_total_gib, util_pct,
line}], `shm` {size_gib, used_gib, use_pct, line}, `host_mem` {total_gib,
available_gib, line}, `swap` {used_gib, total_gib, line} (the largest use seen), `host_used` {used_gib, used_pct,
line} (the fullest DeepSpeed's see_memory_usage printed).  Only what the text shows; nothing is measured here.
Formats: nvidia-smi's table (a name row `|   0  NVIDIA A100-SXM4-80GB  On | ...`
followed by a usage row `| N/A 34C P0 63W / 400W | 81000MiB / 81920MiB | 100% Default |`),
gpustat (`[0] NVIDIA A100 | 65°C, 100 % | 79000 / 81920 MB | user(78000M)`),
procps `free` (`Mem:  251Gi  34Gi  2.1Gi  1.0Gi  215Gi  214Gi`) and coreutils `df`
(`tmpfs  64M  64M  0  100% /dev/shm`), DeepSpeed's see_memory_usage (`CPU Virtual Memory:  used = 29.71 GB, percent
= 95.3%`).
"""
from __future__ import annotations

import re
from typing import Any

_SMI_NAME = re.compile(r"^\|\s+(\d+)\s+(.+?)\s+(?:On|Off)\s+\|")
_SMI_USE = re.compile(r"(\d+)MiB\s*/\s*(\d+)MiB\s*\|\s*(\d+|N/A)\s*%?")
# the '[0] ' index may already be gone: the paste-prefix stripper reads it as a log viewer's line number
_GPUSTAT = re.compile(r"^(?:\[(\d+)\]\s+)?([^|]+?)\s*\|\s*(\d+)\s*'?°?C?,\s*(\d+)\s*%\s*\|\s*(\d+)\s*/\s*(\d+)\s*MB")
_SIZE = r"([\d.]+)\s*([KMGTP]i?B?|B)?"
_FREE = re.compile(r"^Mem:\s+" + r"\s+".join([_SIZE] * 6))
_FREE_SWAP = re.compile(r"^Swap:\s+" + r"\s+".join([_SIZE] * 3))
_TOP_SWAP = re.compile(r"^([KMG])iB Swap:\s*([\d.]+) total,\s*([\d.]+) free,\s*([\d.]+) used")
_KV_SWAP = re.compile(r"\b[Ss]wap(?: used)?\s*[:=]\s*([\d.]+)\s*(GB|GiB|G|MB|MiB|M)\b")
# deepspeed runtime/utils.py see_memory_usage: logger.info(f'CPU Virtual Memory:  used = {used_GB} GB, percent =
# {vm_stats.percent}%') - psutil's (total - available) in GiB and its percent (DeepSpeed 0.16.4)
_DS_VM = re.compile(r"CPU Virtual Memory:\s+used = ([\d.]+) GB, percent = ([\d.]+)%")
_DF = re.compile(r"^\S+\s+" + _SIZE + r"\s+" + _SIZE + r"\s+" + _SIZE + r"\s+(\d+)%\s+(/dev/shm)\s*$")
_UNIT_GIB = {"": 1 / 1024**3, "B": 1 / 1024**3, "K": 1 / 1024**2, "M": 1 / 1024, "G": 1.0, "T": 1024.0, "P": 1024.0**2}


def _gib(num: str, unit: str | None, bare: str = "B") -> float:
    u = (unit or bare).rstrip("B").rstrip("i") or bare
    return float(num) * _UNIT_GIB.get(u[:1], 1.0)


class Snapshots:
    def __init__(self) -> None:
        self.gpus: list[dict[str, Any]] = []
        self.shm: dict[str, Any] | None = None
        self.host_mem: dict[str, Any] | None = None
        self.swap: dict[str, Any] | None = None
        self.host_used: dict[str, Any] | None = None
        self._smi_gpu: tuple[int, str] | None = None
        self._free_bare = "K"  # the unit of `free`'s bare numbers: KiB by default, -m/-g print MiB/GiB

    def feed(self, lineno: int, s: str) -> bool:
        t = s.strip()
        if "wap" in t and self._swap(lineno, t):
            return True
        if "CPU Virtual Memory" in t:
            m = _DS_VM.search(t)
            if m:
                pct = float(m.group(2))
                if self.host_used is None or pct > self.host_used["used_pct"]:
                    self.host_used = {"used_gib": float(m.group(1)), "used_pct": pct, "line": lineno}
                return True
        if t.startswith("|"):
            m = _SMI_NAME.match(t)
            if m:
                self._smi_gpu = (int(m.group(1)), m.group(2).strip())
                return True
            if self._smi_gpu is not None and "MiB" in t:
                m = _SMI_USE.search(t)
                if m:
                    idx, name = self._smi_gpu
                    self.gpus.append({"index": idx, "name": name, "mem_used_gib": int(m.group(1)) / 1024,
                                      "mem_total_gib": int(m.group(2)) / 1024,
                                      "util_pct": None if m.group(3) == "N/A" else int(m.group(3)), "line": lineno})
                    self._smi_gpu = None
                    return True
            return False
        if "MB" in t and "%" in t and "|" in t:
            m = _GPUSTAT.match(t)
            if m:
                idx = int(m.group(1)) if m.group(1) else len(self.gpus)
                self.gpus.append({"index": idx, "name": m.group(2).strip(), "util_pct": int(m.group(4)),
                                  "mem_used_gib": int(m.group(5)) / 1024, "mem_total_gib": int(m.group(6)) / 1024,
                                  "line": lineno})
                return True
            return False
        if t.startswith("Mem:"):
            m = _FREE.match(t)
            if m:
                g = m.groups()
                if not g[1]:  # bare numbers: `free` (KiB), `free -m` or `free -g`; no host has < 10 GB in KiB terms
                    total = float(g[0])
                    self._free_bare = "G" if total < 10_000 else "M" if total < 10_000_000 else "K"
                bare = self._free_bare
                self.host_mem = {"total_gib": _gib(g[0], g[1], bare), "available_gib": _gib(g[10], g[11], bare),
                                 "line": lineno}
                return True
            return False
        if t.endswith("/dev/shm"):
            m = _DF.match(t)
            if m:
                g = m.groups()
                self.shm = {"size_gib": _gib(g[0], g[1], "K"), "used_gib": _gib(g[2], g[3], "K"), "use_pct": int(g[6]),
                            "line": lineno}
                return True
        return False

    def _swap(self, lineno: int, t: str) -> bool:
        """Swap in use: procps `free` (`Swap:  31Gi  23Gi  8.0Gi`, consumed), top's `MiB Swap: T total, F free, U
        used.` (consumed), or a `swap= 23.78 GB` a monitoring print or a progress line carries (recorded, the line
        left to the other readers).  The largest use seen is kept."""
        used = total = None
        consumed = False
        if t.startswith("Swap:"):
            m = _FREE_SWAP.match(t)
            if m:
                g = m.groups()
                total, used, consumed = _gib(g[0], g[1], self._free_bare), _gib(g[2], g[3], self._free_bare), True
        elif "iB Swap:" in t:
            m = _TOP_SWAP.match(t)
            if m:
                unit = m.group(1)
                total, used, consumed = _gib(m.group(2), unit), _gib(m.group(4), unit), True
        else:
            m = _KV_SWAP.search(t)
            if m:
                used = _gib(m.group(1), m.group(2))
        if used is not None and (self.swap is None or used > self.swap["used_gib"]):
            self.swap = {"used_gib": used, "total_gib": total, "line": lineno}
        return consumed

    def result(self) -> dict[str, Any] | None:
        if not (self.gpus or self.shm or self.host_mem or self.swap or self.host_used):
            return None
        return {"gpus": self.gpus, "shm": self.shm, "host_mem": self.host_mem, "swap": self.swap,
                "host_used": self.host_used}


__all__ = ["Snapshots"]
