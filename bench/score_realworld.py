"""Score swiftdoc's primary verdict on a labelled corpus of real log excerpts.

Usage: python bench/score_realworld.py [DIR ...] [--json] [--misses-only] [--batches]

Each DIR holds `labels.jsonl` and `cases/` (default: fixtures/realworld, a copy of
shared/realworld, and every harvested batch under fixtures/realworld/batches/, each
scored apart and then together).  `--batches` lists the batch folders only.  A case is right when the primary category equals its label;
a label `other` is right when the verdict is `config`, `interrupted` or
`unknown`.  The headline is over the core cases of high and medium confidence;
low-confidence and foreign-scope cases are reported apart.  Prints accuracy per
category, the confusion table and each miss with its top finding; the last three
lines are the summary.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

OTHER_OK = {"config", "interrupted", "unknown"}


def is_right(label: str, verdict: str) -> bool:
    return verdict == label or (label == "other" and verdict in OTHER_OK)


def corpora(dirs: list[str]) -> list[Path]:
    """The folders to score: the given ones, or the base corpus and every finished batch (one with a README.md)."""
    if dirs:
        return [Path(d).resolve() for d in dirs]
    base = ROOT / "fixtures" / "realworld"
    batches = sorted(p for p in (base / "batches").glob("*") if (p / "labels.jsonl").is_file() and
                     (p / "README.md").is_file())
    return [base, *batches]


def score(corpus: Path) -> list[dict]:
    from diagnose.errors import SwiftdocError
    from diagnose.parse import parse_run
    from diagnose.pipeline import analyze_run

    out = []
    for line in (corpus / "labels.jsonl").read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        lab = json.loads(line)
        path = corpus / "cases" / lab["file"]
        t0 = time.perf_counter()
        try:
            run = parse_run([str(path)])
            diag = analyze_run(run)
            verdict = diag.primary.category
            conf = getattr(diag.primary, "confidence", None)
            top = diag.findings[0] if diag.findings else None
            top_s = f"{top.rule} {top.slug}: {top.evidence[:110]}" if top else diag.primary.summary[:120]
            trainer = getattr(run, "trainer", None)
        except SwiftdocError as e:  # an excerpt we refuse to read is a miss, not a crash
            verdict, conf, top_s, trainer = "error", None, f"exit {e.exit_code}: {e}", None
        except Exception as e:  # noqa: BLE001 - a traceback is the worst miss; count it
            verdict, conf, top_s, trainer = "traceback", None, f"{type(e).__name__}: {e}", None
        out.append({
            "corpus": corpus.name, "source": lab.get("source"),
            "file": lab["file"], "label": lab["category"], "confidence_label": lab["confidence"],
            "scope": lab.get("scope", "core"), "verdict": verdict, "confidence": conf, "trainer": trainer,
            "right": is_right(lab["category"], verdict), "top": top_s,
            "ms": round(1000 * (time.perf_counter() - t0), 1),
        })
    return out


def report(rows: list[dict], misses_only: bool = False) -> str:
    lines: list[str] = []
    main = [r for r in rows if r["scope"] == "core" and r["confidence_label"] in ("high", "medium")]
    low = [r for r in rows if r["scope"] == "core" and r["confidence_label"] == "low"]
    foreign = [r for r in rows if r["scope"] != "core"]
    if not misses_only and main:
        lines.append("Per category (core, high+medium):")
        by: dict[str, list[dict]] = defaultdict(list)
        for r in main:
            by[r["label"]].append(r)
        for cat in sorted(by):
            n = len(by[cat])
            k = sum(r["right"] for r in by[cat])
            lines.append(f"  {cat:<17} {k:>2}/{n:<2}  {100 * k / n:5.1f}%")
        verdicts = sorted({r["verdict"] for r in main})
        lines.append("")
        lines.append("Confusion (rows: label, columns: verdict):")
        w = max(len(v) for v in verdicts) + 1
        lines.append(" " * 18 + "".join(f"{v[:w - 1]:>{w}}" for v in verdicts))
        conf = Counter((r["label"], r["verdict"]) for r in main)
        for cat in sorted(by):
            lines.append(f"  {cat:<16}" + "".join(f"{(conf[(cat, v)] or '.'):>{w}}" for v in verdicts))
        lines.append("")
    for title, group in (("Misses (core, high+medium)", main), ("Low-confidence cases", low), ("Foreign-scope cases", foreign)):
        bad = [r for r in group if not r["right"]] if title.startswith("Misses") else group
        if not bad:
            continue
        lines.append(title + ":")
        for r in bad:
            mark = "ok  " if r["right"] else "MISS"
            lines.append(f"  {mark} {r['file']:<28} label={r['label']:<16} verdict={r['verdict']:<16} "
                         f"[{r['confidence'] or '-'}] {r['top']}")
        lines.append("")
    tb = sum(r["verdict"] == "traceback" for r in rows)
    k = sum(r["right"] for r in main)
    per_cat: dict[str, list[bool]] = defaultdict(list)
    for r in main:
        per_cat[r["label"]].append(r["right"])
    worst = min(per_cat.items(), key=lambda kv: sum(kv[1]) / len(kv[1])) if per_cat else ("-", [True])
    lines.append(f"low-confidence: {sum(r['right'] for r in low)}/{len(low)} right; foreign: "
                 f"{sum(r['right'] for r in foreign)}/{len(foreign)}; tracebacks: {tb}; "
                 f"slowest case {max((r['ms'] for r in rows), default=0):.0f} ms")
    lines.append(f"worst category: {worst[0]} {sum(worst[1])}/{len(worst[1])} "
                 f"({100 * sum(worst[1]) / len(worst[1]):.0f}%)")
    lines.append("")
    lines += calibration(rows)
    lines.append(f"core high+medium: {k}/{len(main)} right ({100 * k / max(1, len(main)):.1f}%)")
    return "\n".join(lines)


def calibration(rows: list[dict]) -> list[str]:
    """Each confidence level against right/wrong: is `certain` earned?"""
    main = [r for r in rows if r["scope"] == "core" and r["confidence_label"] in ("high", "medium")]
    out = ["Calibration (core, high+medium): confidence -> right / wrong"]
    for level in ("certain", "probable", "weak", None):
        grp = [r for r in main if r["confidence"] == level]
        if not grp:
            continue
        k = sum(r["right"] for r in grp)
        out.append(f"  {str(level or '-'):<9} {k:>3} right {len(grp) - k:>3} wrong  ({100 * k / len(grp):5.1f}% of "
                   f"{len(grp)})")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="*", metavar="DIR")
    ap.add_argument("--json", action="store_true", help="one JSON object per case")
    ap.add_argument("--misses-only", action="store_true")
    ap.add_argument("--batches", action="store_true", help="list the corpus folders that would be scored")
    ap.add_argument("--first-look", action="store_true",
                    help="record each given batch's score as its first look (FIRST_LOOK.md in the batch folder, with "
                         "the commit it was scored at); refuses a batch that already has one")
    a = ap.parse_args(argv)
    dirs = corpora(a.dirs)
    if a.batches:
        print("\n".join(str(d) for d in dirs))
        return 0
    if a.first_look:
        return _first_look(dirs)
    every: list[dict] = []
    per: list[tuple[Path, list[dict]]] = []
    for d in dirs:
        rows = score(d)
        every += rows
        per.append((d, rows))
    if a.json:
        for r in every:
            print(json.dumps(r, ensure_ascii=False))
        return 0
    for d, rows in per:
        if len(per) > 1:
            print(f"===== {d.relative_to(ROOT) if d.is_relative_to(ROOT) else d} ({len(rows)} cases) =====")
        print(report(rows, a.misses_only))
        print()
    if len(per) > 1:
        print("===== all corpora =====")
        summary = []
        for d, rows in per:
            main = [r for r in rows if r["scope"] == "core" and r["confidence_label"] in ("high", "medium")]
            k = sum(r["right"] for r in main)
            summary.append(f"  {d.name:<20} core high+medium {k:>3}/{len(main):<3} ({100 * k / max(1, len(main)):5.1f}%)")
        print("\n".join(summary))
        print(report(every, misses_only=True).splitlines()[-1] if every else "")
        print("\n".join(calibration(every)))
    return 0


def _first_look(dirs: list[Path]) -> int:
    """Score a batch before anyone tunes on it, and keep that figure with the batch: the honest measure."""
    import subprocess

    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "diagnose"], capture_output=True,
                           text=True).stdout.strip()
    for d in dirs:
        out = d / "FIRST_LOOK.md"
        if out.exists():
            print(f"{d.name}: already has its first look ({out}); not overwritten")
            continue
        rows = score(d)
        main = [r for r in rows if r["scope"] == "core" and r["confidence_label"] in ("high", "medium")]
        k = sum(r["right"] for r in main)
        head = (f"# First look: {d.name}\n\nScored by `python bench/score_realworld.py {d.relative_to(ROOT)}` at commit "
                f"{commit}{' (with uncommitted changes under diagnose/)' if dirty else ''}, before any tuning on these "
                f"cases.\n\n**core high+medium: {k}/{len(main)} right ({100 * k / max(1, len(main)):.1f}%)**\n\n```text\n")
        out.write_text(head + report(rows) + "\n```\n", encoding="utf-8")
        print(f"{d.name}: core high+medium {k}/{len(main)} ({100 * k / max(1, len(main)):.1f}%) -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
