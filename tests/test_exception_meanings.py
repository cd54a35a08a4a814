"""What an exception means (issue #17): every entry of parse/exceptions.yaml is checked against its own cases
through the real parser (the traceback becomes an event, then a typed exception), and the diagnosis names the
category with the entry's confidence."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from diagnose.parse import exceptions as ex
from diagnose.parse.run import parse_text
from diagnose.pipeline import analyze_run

TABLE = Path(ex.__file__).with_name("exceptions.yaml")
ENTRIES = yaml.safe_load(TABLE.read_text(encoding="utf-8")) or [] if TABLE.is_file() else []
CATEGORIES = {"config", "data_loading", "oom", "nccl", "nan", "bus_error", "interrupted", "other"}


def _typed(text: str) -> ex.TypedException | None:
    run = parse_text(text if text.endswith("\n") else text + "\n")
    tbs = [e for e in run.events if e.kind == "traceback"]
    return ex.typed_exception(tbs[-1]) if tbs else None


def test_the_table_is_sourced_and_covers_the_categories():
    assert len(ENTRIES) >= 50
    assert {e["category"] for e in ENTRIES} >= {"config", "data_loading", "oom", "nccl", "interrupted"}
    for e in ENTRIES:
        assert e["category"] in CATEGORIES, e["id"]
        assert e.get("source") and e.get("explain"), e["id"]
        assert (e.get("cases") or {}).get("match"), e["id"]
    assert len({e["id"] for e in ENTRIES}) == len(ENTRIES)


@pytest.mark.parametrize("entry,case", [(e["id"], c) for e in ENTRIES for c in (e.get("cases") or {}).get("match", [])],
                         ids=lambda x: x if isinstance(x, str) and len(x) < 60 else "case")
def test_each_entry_classifies_its_own_cases(entry, case):
    exc = _typed(case)
    if exc is None:  # a signature claimed the line (an OOM, an NCCL message): the diagnosis reads it that way,
        diag = analyze_run(parse_text(case + "\n"))  # never as another specific category
        want = next(e["category"] for e in ENTRIES if e["id"] == entry)
        assert diag.primary.category in (want, "unknown"), (entry, diag.primary)
        return
    got = ex.classify(exc)
    assert got is not None, f"{entry}: nothing matched {exc.describe()}"
    want = next(e for e in ENTRIES if e["id"] == entry)
    # the first matching entry may be an earlier, more specific one of the same meaning
    assert got[0].category == want["category"], (entry, got[0].id)


def test_no_match_cases_are_not_claimed_by_their_entry():
    for e in ENTRIES:
        m = next(x for x in ex.meanings() if x.id == e["id"])
        for case in (e.get("cases") or {}).get("no_match", []):
            exc = _typed(case)
            if exc is not None:
                assert not ex._matches(m, exc), (e["id"], case[-120:])


def test_a_config_exception_is_a_config_verdict_with_its_confidence():
    tb = """Traceback (most recent call last):
  File "/usr/local/lib/python3.10/site-packages/swift/cli/sft.py", line 10, in <module>
    sft_main()
  File "/usr/local/lib/python3.10/site-packages/transformers/hf_argparser.py", line 347, in parse_args_into_dataclasses
    raise ValueError(f"Some specified arguments are not used by the HfArgumentParser: {remaining_args}")
ValueError: Some specified arguments are not used by the HfArgumentParser: ['--lora_rankk', '8']
"""
    diag = analyze_run(parse_text(tb))
    assert diag.primary.category == "config"


def test_a_crash_no_entry_explains_names_its_exception():
    tb = """Traceback (most recent call last):
  File "/home/me/myproject/train_utils.py", line 88, in collate
    return torch.stack(batch)
ZeroDivisionError: division by zero in my own collate
"""
    diag = analyze_run(parse_text(tb))
    assert diag.primary.category == "unknown" and diag.primary.rule == "GEN001"
    f = diag.findings[0]
    assert "ZeroDivisionError" in f.evidence


def test_a_real_config_crash_fixture_is_config():
    from tests.conftest import FIXTURES

    for name in ("crash_config_install_4x", "crash_config_packing_lazy_4x"):
        run = __import__("diagnose.parse", fromlist=["parse_run"]).parse_run([str(FIXTURES / name)])
        assert analyze_run(run).primary.category == "config", name
