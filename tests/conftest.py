"""Shared test helpers: paths and the fixture-folder table."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def fixture_dirs() -> list[Path]:
    return sorted(p.parent for p in FIXTURES.glob("*/expected.yaml"))


def load_expected(d: Path) -> dict:
    return yaml.safe_load((d / "expected.yaml").read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT
