"""The signature table (diagnose/parse/signatures.yaml): every entry's own line cases, and the table's shape.

Each `match` line must produce an event of the entry's kind when fed to the real
EventScanner (so an earlier entry with another kind must not steal it); each
`no_match` line must not produce that kind.  Every entry names its source and has
cases of both sorts, so a signature cannot be added without proof it fires and
proof it does not fire on a neighbour.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from diagnose.parse.events import SIGNATURE_TABLE, EventScanner, load_signatures
from diagnose.parse.prefix import strip_paste

CASES = [(i, sig.kind, line, want) for i, sig in enumerate(SIGNATURE_TABLE)
         for want, lines in (("match", sig.cases.get("match", [])), ("no_match", sig.cases.get("no_match", [])))
         for line in lines]


def _kinds(line: str) -> set[str]:
    sc = EventScanner("t")
    sc.feed(1, strip_paste(line)[0])
    sc.finish()
    return {e.kind for e in sc.events}


@pytest.mark.parametrize("i,kind,line,want", CASES, ids=[f"{k}#{i}-{w}-{n}" for n, (i, k, _, w) in enumerate(CASES)])
def test_signature_line_cases(i, kind, line, want):
    got = _kinds(line)
    if want == "match":
        assert kind in got, f"entry {i} ({kind}) does not claim its own line: got {got}"
    else:
        assert kind not in got, f"entry {i} ({kind}) fires on a line it must not: {line!r}"


def test_every_entry_has_a_source_and_both_kinds_of_case():
    for i, sig in enumerate(SIGNATURE_TABLE):
        assert sig.source.strip(), f"entry {i} ({sig.kind}) cites no source"
        assert sig.cases.get("match"), f"entry {i} ({sig.kind}) has no line it must match"
        assert sig.cases.get("no_match"), f"entry {i} ({sig.kind}) has no line it must not match"


def test_needles_cover_every_match_case():
    """The cheap prefilter must let each entry's own lines through (else the pattern is never tried)."""
    for sig in SIGNATURE_TABLE:
        for line in sig.cases.get("match", []):
            assert any(n.lower() in line.lower() for n in sig.needles), (sig.kind, line)


def test_a_broken_table_is_refused(tmp_path: Path):
    bad = tmp_path / "sig.yaml"
    bad.write_text("- kind: x\n  needles: [a]\n  pattern: a\n  detail: nope\n  source: s\n")
    with pytest.raises(ValueError, match="unknown detail extractor"):
        load_signatures(bad)
    bad.write_text("- kind: x\n  needles: [a]\n  pattern: a\n")
    with pytest.raises(ValueError, match="needs needles and source"):
        load_signatures(bad)


def test_source_code_line_inside_a_traceback_is_not_the_event():
    """`raise ValueError('DeepSpeed is not compatible ...')` is code: the event is the exception line below it."""
    sc = EventScanner("t")
    lines = ["Traceback (most recent call last):",
             '  File "/x/swift/arguments/sft_args.py", line 247, in _init_deepspeed',
             "    raise ValueError('DeepSpeed is not compatible with `device_map`. '",
             "ValueError: DeepSpeed is not compatible with `device_map`. n_gpu: 4, local_world_size: 1"]
    for n, ln in enumerate(lines, 1):
        sc.feed(n, ln)
    sc.finish()
    assert [(e.kind, e.line) for e in sc.events] == [("config_error", 4)]


def test_cut_traceback_is_its_own_event_with_frames():
    sc = EventScanner("t")
    lines = ["[rank1]: Traceback (most recent call last):",
             '[rank1]:   File "/usr/lib/python3.11/site-packages/torch/distributed/run.py", line 892, in run',
             "[rank1]:     elastic_launch("]
    for n, ln in enumerate(lines, 1):
        sc.feed(n, strip_paste(ln)[0])
    sc.finish()
    (ev,) = sc.events
    assert ev.kind == "traceback_cut" and ev.detail["confidence"] == "probable"
    assert ev.detail["frames"][-1]["func"] == "run"


def test_bare_exception_line_is_a_traceback_event():
    sc = EventScanner("t")
    sc.feed(1, "AssertionError: The template does not support `system`, template_type: deepseek_ocr2")
    sc.feed(2, "Some prose: not an exception")
    sc.finish()
    assert [(e.kind, e.detail["exception"]) for e in sc.events] == [("traceback", "AssertionError")]


def test_chatty_kinds_fold_into_one_event():
    sc = EventScanner("t")
    for n in range(1, 200):
        sc.feed(n, f"g183:161264:161695 [7] NCCL INFO Channel {n:02d}/0 : 7[7] -> 6[6] via P2P/CUMEM")
    sc.finish()
    (ev,) = sc.events
    assert ev.kind == "nccl_info" and ev.detail["repeats"] == 199


def test_an_exception_the_interpreter_ignored_is_not_a_crash():
    lines = ["Exception in thread Thread-3 (producer):",
             "Traceback (most recent call last):",
             '  File "/x/site-packages/lhotse/dataset/sampling/dynamic_bucketing.py", line 744, in producer',
             "    cuts = next(self.cuts_iter)",
             "TypeError: 'NoneType' object is not an iterator",
             "Exception ignored in: <function DynamicBucketer.__del__ at 0x7fca87762ef0>",
             "Traceback (most recent call last):",
             '  File "/x/site-packages/lhotse/dataset/sampling/dynamic_bucketing.py", line 784, in __del__',
             "    self._producer_thread.join()",
             "RuntimeError: cannot join current thread",
             "Exception ignored in atexit callback: <function _MultiProcessingDataLoaderIter._clean_up_worker at 0x7f>",
             "Traceback (most recent call last):",
             '  File "/x/site-packages/torch/utils/data/dataloader.py", line 1703, in _clean_up_worker']
    sc = EventScanner("t")
    for n, ln in enumerate(lines, 1):
        sc.feed(n, ln)
    sc.finish()
    assert [(e.kind, e.line) for e in sc.events] == [("traceback", 5)]  # the destructor's and the exit handler's are not
