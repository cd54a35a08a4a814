"""Reading probe files (diagnose.parse.probe) and the numbers derived from them (diagnose.features.probe_stats).

Synthetic files in the probe's own format (tests/probeutil.py); the real files come from tests/test_probe_swift.py.
Bad input: a cut last line, a line that is not JSON, a rank file missing, files of two runs in one folder, clock
differences between nodes, a probe format this swiftdoc does not read, binary data: each is one note, never an
exception.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from diagnose.features.probe_stats import summary, time_split
from diagnose.outputs import ProbeOut
from diagnose.parse.probe import probe_folders, read_probe
from tests.probeutil import T0, end, header, lockstep, step, write_rank

ROOT = Path(__file__).resolve().parent.parent


def _steady(folder: Path, world: int = 2, n: int = 12, **kw) -> None:
    for r in range(world):
        write_rank(folder, r, [header(r, world, **kw), *[step(i, 0.2) for i in range(1, n + 1)], end()])


# ----------------------------------------------------------------------------- reading


def test_reads_every_rank_as_columns(tmp_path):
    _steady(tmp_path, world=2, n=12)
    ps = read_probe(tmp_path)
    assert [r.rank for r in ps.ranks] == [0, 1] and ps.world_size == 2 and not ps.notes
    r = ps.ranks[0]
    assert r.steps == 12 and r.ended and r.node == "node0" and r.loader == "loader"
    assert list(r.cols["step"][:3]) == [1, 2, 3] and r.cols["wall_s"][0] == pytest.approx(0.2)


def test_no_rank_files_is_no_probe(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    assert read_probe(tmp_path) is None and read_probe(tmp_path / "missing") is None


def test_a_cut_last_line_keeps_every_line_before(tmp_path):
    p = write_rank(tmp_path, 0, [header(0, 1), *[step(i, 0.2) for i in range(1, 9)]])
    p.write_bytes(p.read_bytes() + b'{"kind":"step","step":9,"mono":1.8,"wall_')  # killed while writing
    ps = read_probe(tmp_path)
    assert ps.ranks[0].steps == 8 and not ps.ranks[0].ended
    assert len(ps.notes) == 1 and "last line is cut" in ps.notes[0]


def test_lines_that_are_not_records_are_counted_and_left_out(tmp_path):
    p = write_rank(tmp_path, 0, [header(0, 1), step(1, 0.2)])
    with p.open("a") as f:
        f.write("garbage\n[1, 2]\n" + json.dumps({**step(2, 0.2), "wall_s": "x"}) + "\n")  # a value of the wrong type
    ps = read_probe(tmp_path)
    assert ps.ranks[0].steps == 2 and str(ps.ranks[0].cols["wall_s"][1]) == "nan"
    assert any("2 line(s) that are not probe records" in n for n in ps.notes)


def test_a_missing_rank_file_is_said(tmp_path):
    for r in (0, 2):
        write_rank(tmp_path, r, [header(r, 3), *[step(i, 0.2) for i in range(1, 9)]])
    ps = read_probe(tmp_path)
    assert [r.rank for r in ps.ranks] == [0, 2] and ps.world_size == 3
    assert any("1 of 3 ranks have no probe file (rank 1)" in n for n in ps.notes)


def test_files_of_two_runs_read_the_newest(tmp_path):
    # GIVEN an old 4-rank run's files and a new 2-rank run's in one folder (rank0/1 overwritten, rank2/3 left)
    for r in (2, 3):
        write_rank(tmp_path, r, [header(r, 4, start=T0 - 7200, port="29500"), step(1, 0.3)])
    for r in (0, 1):
        write_rank(tmp_path, r, [header(r, 2, start=T0, port="29511"), *[step(i, 0.2) for i in range(1, 6)]])
    ps = read_probe(tmp_path)
    assert [r.rank for r in ps.ranks] == [0, 1] and ps.world_size == 2
    assert any("files of 2 runs" in n and "rank2.jsonl" in n and "rank3.jsonl" in n for n in ps.notes)


def test_a_reused_folder_reads_the_last_segment_of_each_file(tmp_path):
    for r in (0, 1):
        write_rank(tmp_path, r, [header(r, 2, start=T0 - 3600), step(1, 9.0), end()])
        write_rank(tmp_path, r, [header(r, 2, start=T0), *[step(i, 0.2) for i in range(1, 7)]], append=True)
    ps = read_probe(tmp_path)
    assert [r.steps for r in ps.ranks] == [6, 6]
    assert any("2 earlier run(s) appended" in n for n in ps.notes)


def test_a_stale_file_of_the_same_node_is_left_out(tmp_path):
    # the same launch settings (default port), but rank 1's file is from a run two hours earlier on the same node
    write_rank(tmp_path, 0, [header(0, 2, start=T0), *[step(i, 0.2) for i in range(1, 7)]])
    write_rank(tmp_path, 1, [header(1, 2, start=T0 - 7200), step(1, 0.2)])
    ps = read_probe(tmp_path)
    assert [r.rank for r in ps.ranks] == [0]
    assert any("rank1.jsonl: started long before" in n for n in ps.notes)
    assert any("1 of 2 ranks have no probe file" in n for n in ps.notes)


def test_nodes_with_skewed_clocks_are_one_run_matched_by_step(tmp_path):
    # GIVEN two nodes whose clocks differ by 20 minutes (one launch: same master, port, world size)
    write_rank(tmp_path, 0, [header(0, 2, node="a", start=T0), *[step(i, 0.2) for i in range(1, 13)]])
    write_rank(tmp_path, 1, [header(1, 2, node="b", start=T0 + 1200), *[step(i, 0.2) for i in range(1, 13)]])
    ps = read_probe(tmp_path)
    assert [r.rank for r in ps.ranks] == [0, 1]
    assert any("start times differ by 1200 s" in n and "step number" in n for n in ps.notes)


@pytest.mark.parametrize("fmt,word", [(0, "older"), (2, "newer"), ("x", "unknown")])
def test_a_format_this_swiftdoc_does_not_read_is_one_line(tmp_path, fmt, word):
    write_rank(tmp_path, 0, [header(0, 1, fmt=fmt), step(1, 0.2), step(2, 0.2)])
    ps = read_probe(tmp_path)
    assert ps.ranks == [] and len(ps.notes) == 1
    assert f"an {word} probe (format {fmt})" in ps.notes[0] and "reads format 1" in ps.notes[0]
    s = summary(ps)
    ProbeOut.model_validate(s)
    assert s["ranks_read"] == 0 and s["straggler"] is None


def test_binary_data_and_steps_without_header(tmp_path):
    (tmp_path / "rank0.jsonl").write_bytes(os.urandom(2048).replace(b"\n", b"x") + b"\n")
    (tmp_path / "rank1.jsonl").write_text(json.dumps(step(1, 0.2)) + "\n")
    ps = read_probe(tmp_path)
    assert ps.ranks == [] and ps.notes


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_named_like_a_rank_file_is_never_opened(tmp_path):
    _steady(tmp_path, world=1)
    os.mkfifo(tmp_path / "rank1.jsonl")
    ps = read_probe(tmp_path)  # opening the FIFO would block
    assert [r.rank for r in ps.ranks] == [0] and any("not a regular file" in n for n in ps.notes)


def test_folders_beside_the_inputs_and_never_outside_the_log_folder(tmp_path):
    rd = tmp_path / "out" / "v0-20261124-120000"
    (rd / "swiftdoc-probe").mkdir(parents=True)
    log = tmp_path / "train.log"
    log.write_text("x\n")

    class R:
        output_dir = "out/v0-20261124-120000"

    assert rd / "swiftdoc-probe" in probe_folders([str(log)], R())
    assert probe_folders([str(tmp_path / "out")])[1] == rd / "swiftdoc-probe"  # the newest v<N>-<date> folder

    class Far:
        output_dir = "/etc"

    assert all("etc" not in str(p) for p in probe_folders([str(log)], Far()))


# ----------------------------------------------------------------------------- the numbers


def test_summary_matches_the_json_contract_and_drops_warmup(tmp_path):
    for r in range(2):
        recs = [header(r, 2), step(1, 5.0, data=4.9), step(2, 1.0, data=0.9)]  # warm-up: a slow first fetch
        recs += [step(i, 0.2, data=0.02) for i in range(3, 13)] + [end()]
        write_rank(tmp_path, r, recs)
    s = summary(read_probe(tmp_path))
    ProbeOut.model_validate(s)
    assert s["warmup_steps"] == 2 and s["steps_used"] == 20
    assert s["data_wait_frac"] == pytest.approx(0.1) and s["data_wait_share"] == pytest.approx(0.1)
    assert s["step_time_s"] == {"0": 0.2, "1": 0.2}
    row = s["ranks"][0]
    assert row["tokens_per_s"] == pytest.approx(512 / 0.2) and row["samples_per_s"] == pytest.approx(10)
    assert row["mem_peak_gib"] == 1.5 and row["mem_kind"] == "host" and row["last_step"] == 12
    assert s["straggler"] is None and s["stalls"]["pattern"] == "none"


def test_a_rank_busy_outside_the_collective_is_the_straggler(tmp_path):
    lockstep(tmp_path, world=4, slow_rank=2, extra_s=0.3, where="host")
    st = summary(read_probe(tmp_path))["straggler"]
    assert st["rank"] == 2 and st["cause"] == "compute" and st["lockstep"]
    assert st["slowdown"] == pytest.approx(0.5 / 0.2, rel=0.05)
    assert st["evidence"].startswith("rank 2 (node0) is busy") and "all-reduce" in st["evidence"]


def test_a_rank_waiting_for_its_own_data_is_a_data_straggler(tmp_path):
    lockstep(tmp_path, world=2, slow_rank=0, extra_s=0.4, where="data")
    st = summary(read_probe(tmp_path))["straggler"]
    assert st["rank"] == 0 and st["cause"] == "data_wait"


def test_ranks_waiting_in_ddp_buffer_sync_are_not_busy(tmp_path):
    # rank 1 sleeps before its forward; rank 0 waits in DDP's buffer broadcast (sync_s), as the real run shows
    for r in range(2):
        recs = [header(r, 2)]
        for n in range(1, 13):
            recs.append(step(n, 0.35, host=0.30 if r == 1 else 0.001, sync=0.30 if r == 0 else 0.0, fwd=0.01,
                             bwd=0.02, data=0.002))
        write_rank(tmp_path, r, recs)
    st = summary(read_probe(tmp_path))["straggler"]
    assert st["rank"] == 1 and st["cause"] == "compute" and st["slowdown"] > 5


def test_equal_ranks_have_no_straggler(tmp_path):
    lockstep(tmp_path, world=3, slow_rank=None)
    assert summary(read_probe(tmp_path))["straggler"] is None


def test_without_lockstep_the_slower_steps_name_the_rank(tmp_path):
    for r in range(2):
        write_rank(tmp_path, r, [header(r, 2), *[step(i, 0.5 if r == 1 else 0.2, bwd=0.1) for i in range(1, 13)]])
    st = summary(read_probe(tmp_path))["straggler"]
    assert st["rank"] == 1 and not st["lockstep"] and st["slowdown"] == pytest.approx(2.5)


def test_bursty_stalls_with_a_period_are_told_apart(tmp_path):
    recs = [header(0, 1)]
    for n in range(1, 33):
        stall = n % 5 == 0
        recs.append(step(n, 1.5 if stall else 0.1, data=1.41 if stall else 0.01))
    write_rank(tmp_path, 0, recs)
    s = summary(read_probe(tmp_path))
    sl = s["stalls"]
    assert sl["pattern"] == "bursty" and sl["every"] == 5 and sl["cause"] == "data_wait" and sl["steps"] == 6
    assert "every 5 steps" in sl["evidence"]
    assert s["data_wait_frac"] < 0.3 < s["data_wait_share"]  # the median step hides them; the time share does not


def test_a_steady_data_wait_and_a_slowdown(tmp_path):
    write_rank(tmp_path / "a", 0, [header(0, 1), *[step(i, 0.4, data=0.25) for i in range(1, 21)]])
    assert summary(read_probe(tmp_path / "a"))["stalls"]["pattern"] == "steady"
    write_rank(tmp_path / "b", 0, [header(0, 1), *[step(i, 0.1 + 0.02 * i) for i in range(1, 31)]])
    sl = summary(read_probe(tmp_path / "b"))["stalls"]
    assert sl["pattern"] == "slowing" and "slow down" in sl["evidence"]


def test_save_and_eval_steps_are_not_stalls(tmp_path):
    recs = [header(0, 1)] + [step(i, 0.1, **({"marks": ["save"]} if i % 6 == 0 else {})) if i % 6 else
                             step(i, 3.0, marks=["save"]) for i in range(1, 25)]
    write_rank(tmp_path, 0, recs)
    s = summary(read_probe(tmp_path))
    assert s["stalls"]["pattern"] == "none" and s["ranks"][0]["step_time_s_p90"] == pytest.approx(0.1)


def test_dispatcher_waits_count_as_data_on_the_receiving_ranks(tmp_path):
    # ms-swift's streaming dispatcher: rank 0 reads the stream for both ranks, rank 1 waits in its scatter
    write_rank(tmp_path, 0, [header(0, 2, loader="dispatcher"),
                             *[step(i, 0.5, data=0.4, bwd=0.04, dispatch_s=0.001) for i in range(1, 11)]])
    write_rank(tmp_path, 1, [header(1, 2, loader="dispatcher"),
                             *[step(i, 0.5, data=0.0, bwd=0.04, dispatch_s=0.4) for i in range(1, 11)]])
    s = summary(read_probe(tmp_path))
    assert [r["data_wait_frac"] for r in s["ranks"]] == [pytest.approx(0.8), pytest.approx(0.8)]
    assert s["straggler"] is None


def test_time_split_adds_up(tmp_path):
    lockstep(tmp_path, world=2, slow_rank=None, base=0.2)
    sp = time_split(read_probe(tmp_path))
    assert sp["step_s"] == pytest.approx(0.2) and sp["data_s"] == pytest.approx(0.01)
    assert sp["data_s"] + sp["compute_s"] + sp["other_s"] == pytest.approx(sp["step_s"])


# ----------------------------------------------------------------------------- through the CLI


def _analyze(path: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "diagnose", "analyze", str(path), *extra], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)


def _load(record: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "diagnose", "analyze", "--load", str(record), *extra],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_analyze_reads_probe_files_beside_a_run(tmp_path):
    import shutil

    shutil.copytree(ROOT / "fixtures" / "healthy_4x", tmp_path / "run")
    lockstep(tmp_path / "run" / "swiftdoc-probe", world=2, slow_rank=1, extra_s=0.3)
    p = _analyze(tmp_path / "run", "--format", "json")
    doc = json.loads(p.stdout)
    assert p.returncode == 0 and doc["probe"]["ranks_read"] == 2 and doc["probe"]["straggler"]["rank"] == 1
    assert any(f["rule"] == "NC011" and f["confidence"] == "certain" for f in doc["findings"])
    txt = _analyze(tmp_path / "run")
    assert "probe: 2 of 2 rank(s)" in txt.stdout and "straggler rank 1" in txt.stdout
    md = _analyze(tmp_path / "run", "--format", "markdown")
    assert "**Probe**" in md.stdout and "| 1 | node0 |" in md.stdout
    # a saved record carries the probe section: --load shows it with no probe file at hand
    _analyze(tmp_path / "run", "--save", str(tmp_path / "rec.json"))
    import shutil as _sh

    _sh.rmtree(tmp_path / "run")
    back = json.loads(_load(tmp_path / "rec.json", "--format", "json").stdout)
    assert back["probe"]["straggler"]["rank"] == 1 and back["probe"]["ranks_read"] == 2
    assert "straggler rank 1" in _load(tmp_path / "rec.json").stdout


def test_broken_probe_files_never_sink_the_analysis(tmp_path):
    import shutil

    shutil.copytree(ROOT / "fixtures" / "healthy_4x", tmp_path / "run")
    d = tmp_path / "run" / "swiftdoc-probe"
    d.mkdir()
    (d / "rank0.jsonl").write_bytes(b"\x00\x01\x02 not json\n{\"kind\": \"step\"")
    (d / "rank1.jsonl").write_text(json.dumps(header(1, 2, fmt=7)) + "\n")
    p = _analyze(tmp_path / "run", "--format", "json")
    assert p.returncode == 0 and "Traceback" not in p.stderr
    doc = json.loads(p.stdout)
    assert doc["probe"]["ranks_read"] == 0 and len(doc["probe"]["notes"]) >= 2
    assert doc["primary"]["category"] == "healthy"


def test_attach_shows_live_per_rank_step_time_and_data_wait_from_the_growing_files(tmp_path):
    import shutil

    shutil.copytree(ROOT / "fixtures" / "healthy_4x", tmp_path / "run")
    d = tmp_path / "run" / "swiftdoc-probe"
    for r in range(2):  # the job so far: 12 steps each, rank 1 waits for data on every step
        write_rank(d, r, [header(r, 2), *[step(i, 0.2, data=0.15 if r == 1 else 0.01) for i in range(1, 13)]])
    first = subprocess.run([sys.executable, "-m", "diagnose", "attach", str(tmp_path / "run"), "--once", "--no-gpu"],
                           capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    assert "probe" in first.stdout and "rank 0 (node0)  step 12: 0.2 s/step, data wait 5%" in first.stdout
    assert "rank 1 (node0)  step 12: 0.2 s/step, data wait 75%" in first.stdout
    for r in range(2):  # the files grow: rank 0's last steps are slower
        write_rank(d, r, [step(i, 0.5 if r == 0 else 0.2, data=0.01) for i in range(13, 25)], append=True)
    later = subprocess.run([sys.executable, "-m", "diagnose", "attach", str(tmp_path / "run"), "--once", "--no-gpu",
                            "--format", "json"], capture_output=True, text=True, timeout=120)
    doc = json.loads(later.stdout)
    import jsonschema

    jsonschema.validate(doc, json.loads((ROOT / "docs" / "schemas" / "attach.schema.json").read_text()))
    rows = {r["rank"]: r for r in doc["probe"]["ranks"]}
    assert rows[0]["last_step"] == 24 and rows[0]["recent_step_time_s"] == 0.5 and rows[1]["recent_data_wait_share"] == 0.05
