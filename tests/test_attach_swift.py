"""attach against a real `swift sft` on CPU, from start to finish, by PID and by output dir.

The log must be followed live (several different steps seen while the job runs)
and the final diagnosis must equal `swiftdoc analyze` on the finished files.
Skipped with the reason when no ms-swift CLI is found: set SWIFTDOC_SWIFT to a
`swift` executable, install `.[swift]`, or provide /work/venvs/swift46.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _find_swift() -> str | None:
    for c in (os.environ.get("SWIFTDOC_SWIFT"), shutil.which("swift", path=str(Path(sys.executable).parent)),
              "/work/venvs/swift46/bin/swift"):
        if c and os.path.exists(c):
            return c
    return None


SWIFT = _find_swift()
pytestmark = [pytest.mark.swift, pytest.mark.slow,
              pytest.mark.skipif(SWIFT is None, reason="ms-swift CLI not found (set SWIFTDOC_SWIFT or pip install -e '.[swift]')"),
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="attach reads /proc (Linux)")]
OFFLINE = {"HF_HUB_OFFLINE": "1", "MODELSCOPE_OFFLINE": "1", "USE_HF": "1", "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Model + data built with the swift venv's interpreter (it has torch and transformers)."""
    d = tmp_path_factory.mktemp("attach_swift")
    py = str(Path(SWIFT).parent / "python")
    code = ("import sys, json; sys.path.insert(0, %r); import tinyjob\n"
            "m = tinyjob.build_tiny_model(%r); data = tinyjob.build_dataset(%r, n=200)\n"
            "print(json.dumps([str(m), str(data)]))" % (str(ROOT / "fixtures"), str(d / "model"), str(d / "data.jsonl")))
    p = subprocess.run([py, "-c", code], capture_output=True, text=True, timeout=600, env={**os.environ, **OFFLINE})
    assert p.returncode == 0, p.stderr[-3000:]
    model, data = json.loads(p.stdout.strip().splitlines()[-1])
    sys.path.insert(0, str(ROOT / "fixtures"))
    import tinyjob

    return tinyjob, d, model, data


def _start(tiny, name: str, steps: int = 150):
    tinyjob, d, model, data = tiny
    out = d / name / "out"
    out.mkdir(parents=True)
    log = d / name / "train.log"
    argv = tinyjob.sft_argv(model, data, out, swift=SWIFT, max_steps=steps)
    fh = log.open("wb")
    p = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=tinyjob.swift_env(OFFLINE),
                         start_new_session=True)
    fh.close()
    return p, out, log


def _attach(target: str, timeout: float = 900) -> list[dict]:
    r = subprocess.run([sys.executable, "-m", "diagnose", "attach", target, "--format", "json", "--poll", "0.1",
                        "--timeout", str(timeout)], capture_output=True, text=True, timeout=timeout + 60)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "log-only mode" in r.stderr or "notice" not in r.stderr  # no NVML here: one-line notice at most
    return [json.loads(x) for x in r.stdout.splitlines() if x.strip()]


def _analyze(paths: list[str]) -> dict:
    r = subprocess.run([sys.executable, "-m", "diagnose", "analyze", *paths, "--format", "json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _check(lines: list[dict], p: subprocess.Popen, steps: int) -> None:
    live_steps = [x["attach"]["progress"]["step"] for x in lines
                  if x["attach"]["alive"] and x["attach"]["progress"]]
    # followed live: several distinct steps were seen while the job ran, in order
    assert len(set(live_steps)) >= 3, live_steps
    assert live_steps == sorted(live_steps)
    final = lines[-1]
    assert final["attach"]["ended"] is True and final["attach"]["alive"] is False
    assert final["run"]["last_step"]["step"] == steps
    assert final["target"]["pid"] == p.pid
    keys = ("schema_version", "primary", "findings", "skipped", "dropped", "notes", "run")
    want = _analyze(final["target"]["logs"])
    assert {k: final[k] for k in keys} == {k: want[k] for k in keys}
    assert final["primary"]["category"] == "healthy", final["findings"]


def test_attach_by_pid_start_to_finish(tiny):
    p, out, log = _start(tiny, "by_pid")
    try:
        lines = _attach(str(p.pid))
        assert p.wait(timeout=60) == 0
    finally:
        if p.poll() is None:
            os.killpg(p.pid, 9)
            p.wait()
    _check(lines, p, 150)
    assert lines[-1]["target"]["log"] == str(log)


def test_attach_by_output_dir_start_to_finish(tiny):
    p, out, log = _start(tiny, "by_dir")
    try:
        time.sleep(0.5)  # the process exists; its run folder does not yet
        lines = _attach(str(out))
        assert p.wait(timeout=60) == 0
    finally:
        if p.poll() is None:
            os.killpg(p.pid, 9)
            p.wait()
    _check(lines, p, 150)
    assert Path(lines[-1]["target"]["run_dir"]).parent == out
