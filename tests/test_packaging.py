"""The wheel a user installs works outside the checkout (issue: install and trust).

Builds the wheel from this checkout, installs it non-editable into a fresh venv in
a temporary folder (dependencies from the package index, as a user gets them),
and runs the installed `swiftdoc` from a folder that is not the checkout: it
must find its rules (shipped inside the package), diagnose a bundled fixture and
list its rules.  The extras must not pin the user's torch or ms-swift.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib

from tests.conftest import FIXTURES, ROOT

pytestmark = pytest.mark.slow


_LEFTOVERS = ("build", "swiftdoc.egg-info", "dist")
_WROTE: list[str] = []  # what building the wheel left in the checkout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    before = {n for n in _LEFTOVERS if (ROOT / n).exists()}
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(ROOT)],
                   check=True, capture_output=True, timeout=300)
    (whl,) = out.glob("swiftdoc-*.whl")
    after = {n for n in _LEFTOVERS if (ROOT / n).exists()}
    _WROTE[:] = sorted(after - before)
    return whl


def test_building_the_wheel_leaves_the_checkout_clean(wheel):
    assert not _WROTE, f"the build wrote {_WROTE} into the checkout"


def test_wheel_carries_rules_and_flag_tables(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    rules = [n for n in names if n.startswith("diagnose/rules_data/") and n.endswith(".yaml")]
    on_disk = sorted(p.name for p in (ROOT / "diagnose" / "rules_data").glob("*.yaml"))
    assert sorted(Path(n).name for n in rules) == on_disk
    assert any(n.startswith("diagnose/flags/data/") for n in names)
    assert "diagnose/parse/signatures.yaml" in names  # the signature table is data too


def test_installed_wheel_diagnoses_outside_checkout(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", str(wheel)], capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    exe = venv / "bin" / "swiftdoc"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SWIFTDOC_RULES")}
    work = tmp_path / "elsewhere"
    work.mkdir()
    p = subprocess.run([str(exe), "analyze", str(FIXTURES / "nan_4x"), "--format", "json"], cwd=work, env=env,
                       capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    out = json.loads(p.stdout)
    assert out["primary"]["category"] == "nan"
    where = subprocess.run([str(py), "-c", "import diagnose, sys; print(diagnose.__file__)"], cwd=work, env=env,
                           capture_output=True, text=True, timeout=60).stdout
    assert str(venv) in where and str(ROOT) not in where  # the installed copy, not the checkout
    p = subprocess.run([str(exe), "rules"], cwd=work, env=env, capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    assert b"OOM001" in p.stdout and b"NAN001" in p.stdout


def test_extras_do_not_pin_the_users_stack():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for extra, reqs in meta["project"]["optional-dependencies"].items():
        for req in reqs:
            assert "==" not in req, f"extra {extra!r} pins {req!r}: exact versions belong in constraints.txt"
    pins = (ROOT / "constraints.txt").read_text()
    assert "torch==" in pins and "ms-swift==" in pins
