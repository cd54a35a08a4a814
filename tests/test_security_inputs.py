"""Issue #20, what swiftdoc reads: flight recorder dumps that expand (1), backtracking signature patterns (4), endless
and blocking inputs (5), YAML aliases (10), malformed dumps, samples files and folders as one-line errors (12)."""
from __future__ import annotations

import json
import os
import pickle
import re
import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.secutil import OOM_LINE, nested_dump, sd, sd_child


def _one_line_error(p, code: int = 2) -> None:
    err = p.stderr.decode() if isinstance(p.stderr, bytes) else p.stderr
    assert p.returncode == code, err[-2000:]
    assert err.startswith("error: ") and "internal error" not in err and "Traceback" not in err, err[-2000:]


# ---- item 1: dumps that expand -----------------------------------------------------------------------------------

def test_a_dump_that_expands_by_reference_is_read_in_bounded_time_and_memory(tmp_path):
    r0, r1 = tmp_path / "nccl_trace_rank_0", tmp_path / "nccl_trace_rank_1"
    r0.write_bytes(nested_dump(7, 10))  # 10^8 leaves when expanded, a few hundred bytes on disk
    r1.write_bytes(nested_dump(8, 10))
    assert r0.stat().st_size < 2000
    t = time.monotonic()
    p = sd_child("analyze", str(r0), str(r1), "--format", "json", timeout=60, mem_mb=1500)
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    assert time.monotonic() - t < 30
    json.loads(p.stdout)


def test_dump_fields_are_type_checked_and_bounded(tmp_path):
    from diagnose.parse.flight_recorder import read_dump

    huge = 10 ** 5000  # past Python's int-to-text digit limit
    shared: list = [7] * 10
    for _ in range(6):
        shared = [shared] * 10
    entries = [
        {"pg_id": [[1]] * 3, "collective_seq_id": 3, "profiling_name": "nccl:all_reduce"},  # unhashable pg id
        {"pg_id": 0, "collective_seq_id": huge, "profiling_name": "nccl:all_reduce"},
        {"pg_id": 0, "collective_seq_id": "7", "profiling_name": "nccl:all_reduce"},
        {"pg_id": 0, "collective_seq_id": 4, "profiling_name": shared, "input_sizes": shared, "state": shared,
         "frames": [shared, {"name": shared, "filename": "train.py", "line": huge}]},
        "not an entry",
    ]
    doc = {"version": shared, "pg_config": {}, "pg_status": {(0, 1): {"last_enqueued_collective": huge},
                                                            "1": "x", "0": {"last_enqueued_collective": 4}},
           "entries": entries}
    path = tmp_path / "nccl_trace_rank_3"
    path.write_bytes(pickle.dumps(doc, protocol=4))
    d = read_dump(path)
    assert d["rank"] == 3 and list(d["last"]) == ["0"]
    last = d["last"]["0"]
    assert last["seq"] == 4 and last["op"] is None and last["state"] is None
    assert isinstance(last["sizes"], str) and len(last["sizes"]) <= 200 and "…" in last["sizes"]
    assert d["pgs"] == {"0": {"last_enqueued": 4, "last_started": None, "last_completed": None}}
    assert len(json.dumps(d, default=str)) < 5000


_HEAD = b"\x80\x04\x8c\x07entries\x8c\tpg_config00"  # the marks that make a file a dump, popped off the stack
_CRAFTED = {
    "reduce-misuse": _HEAD + b"])R.",  # call a list
    "build-misuse": _HEAD + b"]}b.",  # set state on a list
    "memo-index": _HEAD + b"j\xff\xff\xff\xff.",  # LONG_BINGET of an index never stored
    "binbytes8-length": _HEAD + b"\x8e" + struct.pack("<Q", 1 << 62) + b"x.",
    "long-digits": _HEAD + b"L" + b"7" * 5000 + b"L\n.",  # an int past the digit limit
    "global": _HEAD + b"\x8c\x02os\x8c\x06system\x93.",  # STACK_GLOBAL: refused, never imported
    "truncated": _HEAD + b"}\x94(",
}


@pytest.mark.parametrize("name", sorted(_CRAFTED))
def test_crafted_pickles_are_one_line_errors(tmp_path, name):
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(_CRAFTED[name])
    p = sd("analyze", str(path))
    _one_line_error(p)
    assert "flight recorder dump" in p.stderr


def test_deep_json_dump_is_a_one_line_error(tmp_path):
    path = tmp_path / "fr_trace_0"
    path.write_text('{"entries": [], "pg_config": {}, "x": ' + "[" * 200_000 + "]" * 200_000 + "}")
    _one_line_error(sd("analyze", str(path)))


# ---- item 4: backtracking patterns ---------------------------------------------------------------------------------

def _fragments(sig) -> list[str]:
    """What an adversary repeats: the signature's needles and the literal pieces of its pattern."""
    lits = re.findall(r"[A-Za-z_/:.'`\[\] -]{3,}", sig.pattern.pattern.replace("\\", ""))
    return sorted(set(sig.needles) | set(lits))


def _adversarial(frag: str, tail: str, n: int) -> list[str]:
    k = max(1, n // (len(frag) + 1))
    return [frag * k + tail, (frag + " ") * k + tail, frag + " " * n + tail, frag + "a" * n + tail]


def _sigs():
    from diagnose.parse.events import SIGNATURE_TABLE

    return SIGNATURE_TABLE


def test_every_signature_is_linear_on_long_adversarial_lines():
    """A 100 kB line built from a signature's own pieces (repeated, spaced, with another piece at the end) is
    searched in milliseconds; quadratic patterns took seconds to minutes (26 s for 100 kB of `NET/IB:`)."""
    n = 100_000
    worst = (0.0, "")
    for sig in _sigs():
        frags = _fragments(sig)
        for frag in frags:
            for tail in ("", frags[0] if frags[0] != frag else frags[-1]):
                for line in _adversarial(frag, tail, n):
                    t = time.perf_counter()
                    sig.pattern.search(line)
                    dt = time.perf_counter() - t
                    if dt > worst[0]:
                        worst = (dt, f"{sig.kind}: {line[:60]!r}")
    assert worst[0] < 0.1, worst


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_signatures_stay_fast_on_mixed_pieces(data):
    sigs = _sigs()
    sig = data.draw(st.sampled_from(sigs))
    pieces = _fragments(sig) + [" ", "'", "\\", "a", "0", ":", "[1]"]
    unit = "".join(data.draw(st.lists(st.sampled_from(pieces), min_size=1, max_size=6)))
    line = (unit * (100_000 // len(unit) + 1))[:100_000] + data.draw(st.sampled_from(pieces))
    t = time.perf_counter()
    for s in sigs:  # every signature, as the scanner runs them
        s.pattern.search(line)
    assert time.perf_counter() - t < 1.0, (sig.kind, unit)


def test_the_rewritten_patterns_still_match_what_they_matched():
    from diagnose.parse.events import EventScanner

    cases = {
        "ib_error": "node1:1:2 [0] NCCL INFO NET/IB : Got async event : port error",
        "nccl_error": "node1:123:456 [0] NCCL WARN Call to connect returned Connection refused; NCCL WARN again",
        "remote_media": "ProxyError('x') while fetching https://h/a/b/c.jpg",
        "argv_backslash": "run sh: `python sft.py \\ --model m`",
        "dataset_load_error": "[ERROR:swift] Dataset /d/x.jsonl load failed: boom",
        "dns_fail": "getaddrinfo failed for node-1",
        "dist_init_timeout": "[c10d] waitForInput: socket SocketImpl(fd=11) timed out after 900000ms",
    }
    for kind, line in cases.items():
        sc = EventScanner()
        sc.feed(1, line)
        assert [e.kind for e in sc.events][:1] == [kind], (kind, sc.events)
    sc = EventScanner()
    sc.feed(1, "node1:1:2 [0] NCCL WARN NET/Plugin : Plugin load returned 2")
    assert not [e for e in sc.events if e.kind == "nccl_error"]
    from diagnose.attach.follow import URGENT  # every pattern joined in one: its groups must not clash

    for line in cases.values():
        assert URGENT.search("earlier line\n" + line + "\nlater line\n"), line
    assert not URGENT.search("NET/IB : fine\nok error\n")


# ---- item 5: endless and blocking inputs ---------------------------------------------------------------------------

@pytest.mark.parametrize("args, stdin", [
    (["analyze", "/dev/zero"], None), (["analyze", "/dev/urandom"], None), (["parse", "/dev/zero"], None),
    (["analyze", "-"], "/dev/zero"), (["analyze", "-"], "/dev/urandom"),
])
def test_devices_fail_at_once(args, stdin):
    if stdin:
        with open(stdin, "rb") as f:
            p = sd_child(*args, stdin=f, timeout=60, mem_mb=1500)
    else:
        p = sd_child(*args, timeout=60, mem_mb=1500)
    _one_line_error(p)


def test_stdin_and_a_single_input_are_bounded_with_an_option_to_raise_it(tmp_path):
    text = (OOM_LINE * 20_000).encode()  # ~3 MB
    p = sd("analyze", "--max-input", "1M", "-", stdin=text)
    _one_line_error(p)
    assert "--max-input" in p.stderr
    assert sd("analyze", "--max-input", "8M", "-", stdin=text).returncode == 0
    log = tmp_path / "big.log"
    log.write_bytes(text)
    _one_line_error(sd("parse", "--max-input", "1M", str(log)))
    assert sd("parse", str(log), "--max-input", "16M").returncode == 0
    _one_line_error(sd("analyze", "--max-input", "lots", str(log)))


def test_an_endless_text_stream_stops_at_the_bound():
    import subprocess
    import sys

    yes = subprocess.Popen([sys.executable, "-c", "import sys\nwhile True: sys.stdout.write('hello world\\n' * 1000)"],
                           stdout=subprocess.PIPE)
    try:
        p = sd_child("analyze", "-", stdin=yes.stdout, timeout=60, mem_mb=1500, env={"SWIFTDOC_MAX_INPUT": "20M"})
    finally:
        yes.kill()
        yes.wait()
    _one_line_error(p)
    assert "more than 20 MiB" in p.stderr.decode()


def test_a_folder_reads_only_regular_files_and_says_which_it_could_not_read(tmp_path, monkeypatch):
    import builtins
    import io

    os.mkfifo(tmp_path / "pipe.log")
    (tmp_path / "zero.log").symlink_to("/dev/zero")
    (tmp_path / "train.log").write_text(OOM_LINE)
    (tmp_path / "locked.log").write_text(OOM_LINE)
    real = builtins.open

    def fake_open(file, *a, **kw):  # a file this user may not read (root reads them all, so it is simulated)
        if str(file).endswith("locked.log"):
            raise PermissionError(13, "Permission denied", str(file))
        return real(file, *a, **kw)

    monkeypatch.setattr(builtins, "open", fake_open)
    monkeypatch.setattr(io, "open", fake_open)
    p = sd("analyze", str(tmp_path), "--format", "json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["primary"]["category"] == "oom"
    assert any("locked.log" in n and "cannot read" in n for n in doc["run"]["notes"])
    (tmp_path / "train.log").unlink()
    _one_line_error(sd("analyze", str(tmp_path)))


# ---- item 12: a malformed samples file next to a log -------------------------------------------------------------

@pytest.mark.parametrize("line", [
    {"kind": "sample", "t": 1, "gpus": [{"index": [1]}]},
    {"kind": "sample", "t": 1, "gpus": [{"index": 0, "procs": 5}], "xid": [1]},
    {"kind": "mark", "event": "gpus", "gpus": [[0]]},
    {"kind": "sample", "t": 1, "gpus": [{"index": 0, "util_gpu_pct": {"a": 1}}]},
    {"kind": ["sample"], "t": 1, "gpus": []},
])
def test_a_malformed_samples_file_found_next_to_a_log_is_a_one_line_error(tmp_path, line):
    (tmp_path / "train.log").write_text(OOM_LINE)
    head = {"kind": "header", "schema": "swiftdoc-samples/1", "gpus": [{"index": 0, "name": "A100"}]}
    (tmp_path / "swiftdoc-samples.jsonl").write_text("\n".join(json.dumps(x) for x in (head, line)) + "\n")
    p = sd("analyze", str(tmp_path / "train.log"))
    _one_line_error(p)
    assert "samples" in p.stderr


# ---- item 10: YAML aliases ---------------------------------------------------------------------------------------

_BOMB = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{b}: &{b} [{', '.join(['*' + a] * 10)}]\n" for a, b in zip("abcdefgh", "bcdefghi")) + "model: m\ndataset: [*i]\n"


@pytest.mark.parametrize("args", [["lint", "train.sh"], ["lint", "bomb.yaml"],
                                  ["patch", "train.sh", "--set", "learning_rate=1e-5"]])
def test_a_yaml_alias_bomb_is_refused_in_bounded_time_and_memory(tmp_path, args):
    (tmp_path / "bomb.yaml").write_text(_BOMB)  # 10 lines, 10^10 values written out
    (tmp_path / "train.sh").write_text("swift sft bomb.yaml\n")
    p = sd_child(*args, "--swift-version", "4.6.0", "--no-swift-check", cwd=tmp_path, timeout=60, mem_mb=1500)
    _one_line_error(p)
    assert "expands to more than" in p.stderr.decode()


def test_a_script_that_is_a_device_or_endless_is_refused():
    _one_line_error(sd_child("lint", "/dev/zero", timeout=60, mem_mb=1500))
    with open("/dev/zero", "rb") as f:
        _one_line_error(sd_child("lint", "-", stdin=f, timeout=60, mem_mb=1500))


def test_a_signature_matches_only_lines_holding_one_of_its_own_needles():
    """The scan runs a signature's pattern only where one of its own needles is in the line (the per-line cost of
    the event scan, bench/bench_events.py): every case a signature matches must hold one of them."""
    from diagnose.parse.events import _PREFILTER, SIGNATURE_TABLE

    lines = [ln for s in SIGNATURE_TABLE for ln in s.cases.get("match", []) + s.cases.get("no_match", [])]
    for sig in SIGNATURE_TABLE:
        for line in lines:
            if sig.pattern.search(line):
                assert any(n.lower() in line.lower() for n in sig.needles), (sig.kind, line)
                assert _PREFILTER.search(line.lower()), line


def _literal_paths(items, limit: int = 400) -> list[str]:
    """Every way through a parsed pattern as its literal text (`\\0` where something unknown stands: a class, a
    repeat that may be empty), branches and optional parts expanded."""
    try:
        from re import _constants as C  # noqa: N812
    except ImportError:  # Python 3.10
        import sre_constants as C  # noqa: N812
    outs = [""]
    for op, av in items:
        if op == C.LITERAL:
            alts = [chr(av)]
        elif op == C.BRANCH:
            alts = [p for b in av[1] for p in _literal_paths(b)]
        elif op == C.SUBPATTERN:
            alts = _literal_paths(av[-1])
        elif op == C.ASSERT:
            alts = _literal_paths(av[1])
        elif op == C.IN and all(o == C.LITERAL for o, _ in av) and len(av) <= 4:
            alts = [chr(v) for _, v in av]
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT) and av[0] >= 1:
            alts = [p + "\0" for p in _literal_paths(av[2])]
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT) and av[1] == 1:
            alts = ["", *_literal_paths(av[2])]
        else:
            alts = ["\0"]
        outs = [o + a for o in outs for a in alts][:limit]
    return outs


def test_every_way_through_a_signature_holds_one_of_its_needles():
    """What the gate above relies on, for every pattern and not only its cases: each literal path through the
    pattern (branches and optional parts expanded) holds one of the signature's own needles."""
    try:
        from re import _parser as sp
    except ImportError:  # Python 3.10
        import sre_parse as sp
    from diagnose.parse.events import SIGNATURE_TABLE

    missing = []
    for sig in SIGNATURE_TABLE:
        for path in _literal_paths(list(sp.parse(sig.pattern.pattern, sig.pattern.flags))):
            if not any(n.lower() in path.lower() for n in sig.needles):
                missing.append((sig.kind, path.replace("\0", "·")[:80]))
    assert not missing, missing


def test_the_line_readers_own_patterns_stay_linear_on_long_lines():
    # the patterns the scanners run outside the signature and dialect tables, on 100 kB lines built to make a
    # backtracking pattern quadratic (runs of digits, spaces, word characters, separators)
    from diagnose.parse.dialects import _VLINE
    from diagnose.parse.events import _GLUED, _RAY_TOP, _VSCODE_TOP
    from diagnose.parse.exceptions import _TWICE
    from diagnose.parse.lines import _CSV_ROW, _NB_HEADER, _NB_SPLIT

    lines = ["0" * 100_000 + " x", "1," * 50_000, " " * 100_000 + "x", ")" + "a" * 100_000, ")a." * 33_000,
             "| > " * 25_000, "Step" + " " * 100_000 + "Training", "a" * 100_000 + "Error"]
    for pat in (_VLINE, _GLUED, _RAY_TOP, _VSCODE_TOP, _TWICE, _CSV_ROW, _NB_HEADER, _NB_SPLIT):
        for line in lines:
            t = time.perf_counter()
            pat.search(line)
            assert time.perf_counter() - t < 0.5, (pat.pattern[:60], line[:12])
