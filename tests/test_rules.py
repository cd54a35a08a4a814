"""Rules: every rule fires on one case and stays quiet on another; loading and validation errors."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from diagnose.engine import evaluate_rules
from diagnose.features.registry import REGISTRY, Features
from diagnose.rules import RuleError, load_rules

CASES = yaml.safe_load((Path(__file__).parent / "rule_cases.yaml").read_text(encoding="utf-8"))
RULES = {r.id: r for r in load_rules()}
PARAMS = [(rid, c) for rid, cases in CASES.items() for c in cases]


def _features(values: dict) -> Features:
    base = {name: None for name in REGISTRY}
    base.update(values)
    return Features(base, {})


@pytest.mark.parametrize("rid,case", PARAMS, ids=[f"{r}-{c['name']}" for r, c in PARAMS])
def test_rule_case(rid, case):
    findings, skipped = evaluate_rules([RULES[rid]], _features(case["features"]))
    fired = [f.rule for f in findings]
    assert (rid in fired) == case["fires"], (findings, skipped)


def test_every_rule_has_a_firing_and_a_quiet_case():
    for rid in RULES:
        cases = CASES.get(rid, [])
        assert any(c["fires"] for c in cases), f"{rid} has no case where it fires"
        assert any(not c["fires"] for c in cases), f"{rid} has no case where it stays quiet"


def test_missing_required_feature_is_skipped_not_fired():
    findings, skipped = evaluate_rules([RULES["DL001"]], _features({"memory_frac": 0.1}))
    assert not findings
    assert skipped[0].missing == ["gpu_util_mean_pct"]


def test_evidence_is_filled_and_remedy_values_resolved():
    f, _ = evaluate_rules([RULES["DL002"]], _features(
        {"lazy_tokenize": True, "dataloader_num_workers": 1, "suggested_num_workers": 6, "cpu_cores": 12}))
    assert "dataloader_num_workers=1" in f[0].evidence and "12 cores" in f[0].evidence
    op = f[0].remedies[0].ops[0]
    assert (op.op, op.flag, op.value) == ("at_least", "dataloader_num_workers", 6)


def test_param_override_changes_threshold():
    rules = load_rules(overrides=["DL001.max_util=20"])
    dl = [r for r in rules if r.id == "DL001"]
    f, _ = evaluate_rules(dl, _features({"gpu_util_mean_pct": 35, "memory_frac": 0.4}))
    assert not f


@pytest.mark.parametrize("bad,needle", [
    ("id: X1\nslug: x\ncategory: nope\nseverity: info\nsummary: s\nwhen: {all: []}\nevidence: e\n", "X.yaml: field 'category'"),
    ("id: X1\nslug: x\ncategory: config\nseverity: info\nsummary: s\nwhen: {all: [{feature: no_such, op: gt, value: 1}]}\nevidence: e\n", "unknown feature 'no_such'"),
    ("id: X1\nslug: x\ncategory: config\nseverity: info\nsummary: s\nwhen: {all: []}\nevidence: e\nremedies: [{title: t, effect: safe, ops: [{op: set, flag: not_a_flag, value: 1}]}]\n", "unknown flag concept 'not_a_flag'"),
    ("id: X1\nslug: x\ncategory: config\nseverity: info\nsummary: s\nwhen: {all: [{feature: steps_logged, op: gt, value: $thr}]}\nevidence: e\n", "'$thr' is not declared"),
    ("id: [unclosed\n", "X.yaml: not valid YAML"),
])
def test_broken_rule_file_names_file_and_field(tmp_path, bad, needle):
    (tmp_path / "X.yaml").write_text(bad)
    with pytest.raises(RuleError) as e:
        load_rules(tmp_path)
    assert needle in e.value.message


def test_bad_override_is_a_clear_error():
    with pytest.raises(RuleError, match="no parameter"):
        load_rules(overrides=["DL001.nope=3"])
    with pytest.raises(RuleError, match="no rule"):
        load_rules(overrides=["ZZ999.max=3"])


def test_generated_docs_are_current():
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    p = subprocess.run([sys.executable, str(root / "tools" / "gen_docs.py"), "--check"], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout


def test_only_a_rule_that_names_no_category_defers():
    deferring = [r.id for r in RULES.values() if r.defers]
    assert "GEN004" in deferring
    assert all(RULES[rid].category == "unknown" for rid in deferring)
