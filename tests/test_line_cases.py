"""The text recognisers, one table (diagnose/parse/lines.py RECOGNISERS), each with its line cases (tests/data/line_cases.yaml)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from diagnose.models import Run
from diagnose.parse.lines import RECOGNISERS, InfoScanner

CASES = yaml.safe_load((Path(__file__).parent / "data" / "line_cases.yaml").read_text(encoding="utf-8"))
PARAMS = [(name, c) for name, cases in CASES.items() for c in cases]


def _get(info: InfoScanner, path: str):
    head, _, rest = path.partition(".")
    if head == "progress":
        obj = info.progress
    elif head == "preprocess":
        obj = info.map_rates[-1] if info.map_rates else None
    elif head in ("step_dicts", "checkpoints", "megatron_rows", "dialect_rows"):
        return len(getattr(info, head))
    elif head in ("evals", "timers", "iter_times", "loss_scales", "profiler_actions", "lr_announced"):
        return len(getattr(info.run, head))
    else:
        obj = getattr(info.run, head)
    for part in rest.split(".") if rest else []:
        if obj is None:
            return None
        obj = obj.get(part) if isinstance(obj, dict) else getattr(obj, part)
    return obj


@pytest.mark.parametrize("name,case", PARAMS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(PARAMS)])
def test_line_case(name, case):
    info = InfoScanner(Run())
    info.feed(1, case["line"])
    info.finish()
    for path, want in case["expect"].items():
        got = _get(info, path)
        if isinstance(want, float):
            assert got == pytest.approx(want), (path, got)
        else:
            assert got == want, (path, got)


def test_every_recogniser_has_cases_and_every_case_a_recogniser():
    names = [n for n, _, _ in RECOGNISERS]
    assert len(set(names)) == len(names)
    assert set(CASES) == set(names)


def test_handlers_exist():
    for name, needles, handler in RECOGNISERS:
        assert needles and callable(getattr(InfoScanner, handler)), name
