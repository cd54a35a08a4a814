"""`swiftdoc fleet`: one row per run under some roots, every format, filters, --fail-on, half-written runs."""
from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

from diagnose.fleet import ROW_KEYS, analyse_runs, find_runs, group_jobs
from tests.conftest import FIXTURES, ROOT


def fleet(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "diagnose", "fleet", "--no-progress", *args], capture_output=True,
                          cwd=ROOT, timeout=300, text=True)


def _sweep(tmp: Path) -> Path:
    root = tmp / "sweep"
    for name in ("healthy_4x", "nan_4x", "starved_4x"):
        shutil.copytree(FIXTURES / name, root / name)
    out = root / "lr1e-4" / "output" / "v0-20261121-012425"  # a run folder as ms-swift writes it
    out.mkdir(parents=True)
    for f in ("logging.jsonl", "args.json"):
        shutil.copy(FIXTURES / "healthy_4x" / f, out / f)
    (out / "checkpoint-10").mkdir()  # not a run of its own
    half = root / "still_running" / "v0-20261121-020000"
    half.mkdir(parents=True)
    data = (FIXTURES / "healthy_4x" / "logging.jsonl").read_bytes()
    (half / "logging.jsonl").write_bytes(data[: len(data) // 3] + b'{"loss": 1.2, "grad_no')  # cut mid-line
    (root / "empty.log").write_bytes(b"")
    return root


def test_finds_every_run_and_nothing_else(tmp_path):
    root = _sweep(tmp_path)
    names = sorted(str(p.relative_to(root)) for p in find_runs([str(root)]))
    # a fixture folder holds logging.jsonl + args.json beside its capture: it is one run folder
    assert names == ["empty.log", "healthy_4x", "lr1e-4/output/v0-20261121-012425", "nan_4x", "starved_4x",
                     "still_running/v0-20261121-020000"]


def test_rows_in_every_format_with_half_written_runs_as_rows(tmp_path):
    root = _sweep(tmp_path)
    doc = json.loads(fleet(str(root), "--format", "json").stdout)
    assert doc["schema_version"] == 1 and len(doc["runs"]) == 6
    by = {Path(r["path"]).relative_to(root).parts[0]: r for r in doc["runs"]}
    assert by["nan_4x"]["category"] == "nan" and by["healthy_4x"]["category"] == "healthy"
    assert by["healthy_4x"]["samples_per_s"] > 0 and by["healthy_4x"]["steps"] == 20
    assert by["still_running"]["category"] != "unreadable" and by["still_running"]["steps"] > 0
    assert by["empty.log"]["category"] == "unreadable" and "empty" in by["empty.log"]["error"]
    rows = list(csv.DictReader(io.StringIO(fleet(str(root), "--format", "csv").stdout)))
    assert len(rows) == 6 and list(rows[0]) == list(ROW_KEYS)
    md = fleet(str(root), "--format", "markdown").stdout
    assert md.startswith("| run | ms-swift |") and md.count("\n") == 8
    table = fleet(str(root)).stdout
    assert "verdict" in table and "6 run(s)" in table


def test_sort_filter_and_fail_on(tmp_path):
    root = _sweep(tmp_path)
    doc = json.loads(fleet(str(root), "--format", "json", "--where", "category=healthy", "--sort", "samples_per_s",
                           "--desc").stdout)
    sps = [r["samples_per_s"] for r in doc["runs"]]
    known = [x for x in sps if x is not None]
    assert len(known) >= 2 and sps[: len(known)] == sorted(known, reverse=True)  # unknown values last
    assert all(r["category"] == "healthy" for r in doc["runs"])
    assert fleet(str(root), "--where", "category=healthy", "--fail-on", "error").returncode == 0
    assert fleet(str(root), "--fail-on", "error").returncode == 1
    bad = fleet(str(root), "--sort", "nope")
    assert bad.returncode == 2 and bad.stderr.startswith("error: unknown --sort column")
    assert fleet(str(tmp_path / "nothing")).returncode == 2


def test_parallel_rows_equal_sequential_rows(tmp_path):
    paths = find_runs([str(_sweep(tmp_path))])
    assert list(analyse_runs(paths, jobs=2)) == list(analyse_runs(paths, jobs=1))


def test_the_captures_of_one_multi_node_job_are_one_row(tmp_path):
    import shutil

    from tests.conftest import FIXTURES

    # GIVEN a sweep folder with a real two-node job (one capture per node) and a single-process run beside it
    for name in ("multinode_raise_4x", "nan_4x"):
        shutil.copytree(FIXTURES / name, tmp_path / name)
    paths = group_jobs(find_runs([str(tmp_path)]))
    rows = {Path(r["path"]).parent.name if "+" in r["path"] else Path(r["path"]).name: r for r in analyse_runs(paths)}
    # THEN the two nodes' captures make one row, analysed as one job (its culprit is rank 1 on node 1)
    job = rows["multinode_raise_4x"]
    assert job["path"].endswith("multinode_raise_4x/node0.log+node1.log") and job["culprit_rank"] == 1
    assert job["world_size"] == 2 and job["category"] == "unknown"
    assert len([r for r in rows.values() if "multinode" in r["path"]]) == 1


def test_files_without_training_output_are_not_runs_and_are_said(tmp_path):
    root = _sweep(tmp_path)
    (root / "notes.txt").write_text("Tried lr 1e-4 and 2e-4 on Friday; the second looked better.\n")
    (root / "requirements.txt").write_text("torch==2.5.1\ntransformers>=4.46\nms-swift==3.12.4\n")
    skipped: list = []
    names = {p.name for p in find_runs([str(root)], skipped)}
    assert "notes.txt" not in names and "requirements.txt" not in names
    assert sorted(p.name for p in skipped) == ["notes.txt", "requirements.txt"]
    p = fleet(str(root), "--fail-on", "warning", "--where", "verdict=healthy")
    assert "2 file(s) hold no training output" in p.stderr and "notes.txt" in p.stderr
    assert "notes.txt" not in p.stdout  # neither a row nor a failure


def test_where_and_sort_take_the_table_s_headers(tmp_path):
    root = _sweep(tmp_path)
    by_key = fleet(str(root), "--format", "json", "--where", "category=nan")
    by_head = fleet(str(root), "--format", "json", "--where", "verdict=nan")
    assert by_key.returncode == by_head.returncode == 0, by_head.stderr
    assert json.loads(by_key.stdout)["runs"] == json.loads(by_head.stdout)["runs"] != []
    s = fleet(str(root), "--format", "json", "--sort=-samples/s")
    assert s.returncode == 0, s.stderr
    vals = [r["samples_per_s"] for r in json.loads(s.stdout)["runs"] if r["samples_per_s"] is not None]
    assert vals == sorted(vals, reverse=True)
    bad = fleet(str(root), "--where", "nosuch=1")
    assert bad.returncode == 2 and "headers" in bad.stderr


def test_text_table_has_the_model_column(tmp_path):
    root = _sweep(tmp_path)
    p = fleet(str(root))
    header = next(ln for ln in p.stdout.splitlines() if "verdict" in ln)
    assert "model" in header
