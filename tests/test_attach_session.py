"""The attach loop over a replayed job: live progress, alerts, GPU samples, the end, bad input, the CLI.

The replayed job is a real process under a `swift/cli/` path writing a real ms-swift
4.6.0 capture (fixtures/healthy_4x) line by line; the fake NVML backend stands in
for the GPUs.  The real `swift sft` runs are in test_attach_swift.py.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_attach_target import HEALTHY, start_replay, stop, wait_for

from diagnose.attach.session import AttachOptions, AttachSession, progress_of
from diagnose.attach.target import resolve_target
from diagnose.errors import InputError
from diagnose.nvml.samples import SAMPLES_FILENAME, load_samples

ROOT = Path(__file__).resolve().parent.parent
TR = ROOT / "fixtures" / "nvml"
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="attach reads /proc (Linux)")


def drive(session: AttachSession, until, timeout=20.0, poll=0.05):
    """Run the attach loop until `until(snapshots)` or the job ends; returns the snapshots."""
    snaps = []
    end = time.monotonic() + timeout
    first = True
    while time.monotonic() < end:
        s = session.update(force=first)
        first = False
        if s is not None:
            snaps.append(s)
        if session.ended:
            snaps.append(session.final())
            return snaps
        if until(snaps):
            return snaps
        time.sleep(poll)
    raise AssertionError(f"timed out; last snapshot: {snaps[-1].as_json() if snaps else None}")


def _comparable(d: dict) -> dict:
    return {k: d[k] for k in ("schema_version", "primary", "findings", "skipped", "dropped", "notes", "run")}


def _analyze(paths: list[str]) -> dict:
    p = subprocess.run([sys.executable, "-m", "diagnose", "analyze", *paths, "--format", "json"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_follows_live_to_the_end_and_agrees_with_analyze(tmp_path):
    # GIVEN a running job with GPUs 0,1 (fake NVML: 8x H100) WHEN attached by PID until it exits
    p, log = start_replay(tmp_path, pace=0.002, step_pace=0.15, hold=0.5, env={"CUDA_VISIBLE_DEVICES": "0,1"})
    try:
        s = AttachSession(resolve_target(str(p.pid)),
                          AttachOptions(fake_nvml=str(TR / "h100x8_training.json"), interval_s=0.1,
                                        parse_every_s=0.3, heartbeat_s=1.0))
        s.start()
        snaps = drive(s, until=lambda snaps: False, timeout=60)
        s.close()
    finally:
        stop(p)
    steps = [x.progress["step"] for x in snaps if x.progress]
    # THEN the steps were seen growing while the job ran ...
    assert len(set(steps)) >= 3 and steps == sorted(steps) and steps[-1] == 20
    live = [x for x in snaps if not x.ended]
    assert any(x.alive and x.gpus["nvml"] == "ok" and x.gpus["latest"] for x in live)
    assert {g["index"] for g in live[-1].gpus["latest"]} == {0, 1}
    # ... the samples went next to logging.jsonl with the job's GPUs marked
    final = snaps[-1]
    assert final.ended and not final.alive
    samples = Path(final.gpus["samples_file"])
    assert samples.name == SAMPLES_FILENAME and str(samples.parent) == final.target["run_dir"]
    ss = load_samples(samples)
    assert ss.job_gpus == [0, 1] and len(ss) >= 5 and ss.ended
    assert final.gpus["summary"]["gpu_count"] == 2
    # ... and the final diagnosis is exactly analyze's on the same files (samples discovered)
    j = final.as_json()
    assert j["target"]["pid"] == p.pid and j["target"]["log"] == str(log) and j["target"]["gpus"] == [0, 1]
    assert _comparable(j) == _comparable(_analyze(j["target"]["logs"]))


def test_alert_on_injected_oom_line(tmp_path):
    p, log = start_replay(tmp_path, pace=0.002, hold=30)
    try:
        s = AttachSession(resolve_target(str(p.pid)), AttachOptions(nvml=False))
        s.start()
        # let the replay reach its end and attach settle
        drive(s, until=lambda snaps: any(x.progress and x.progress["step"] == 20 for x in snaps))
        proc_args = " ".join(Path(f"/proc/{p.pid}/cmdline").read_text().split("\0"))
        assert "--hold" in proc_args
        # WHEN a CUDA OOM is written to the log
        with log.open("a") as f:
            f.write("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                    "capacity of 79.10 GiB of which 1.19 GiB is free.\n")
        t0 = time.monotonic()
        snaps = drive(s, until=lambda snaps: any(a["rule"].startswith("OOM") for x in snaps for a in x.alerts))
        dt = time.monotonic() - t0
        s.close()
    finally:
        stop(p)
    # THEN it is reported as an alert within a second
    alert = next(a for x in snaps for a in x.alerts if a["rule"].startswith("OOM"))
    assert alert["severity"] == "error" and dt < 1.5


def test_alert_on_nan_step(tmp_path):
    p, log = start_replay(tmp_path, pace=0.002, hold=30)
    try:
        s = AttachSession(resolve_target(str(p.pid)), AttachOptions(nvml=False))
        s.start()
        drive(s, until=lambda snaps: any(x.progress and x.progress["step"] == 20 for x in snaps))
        with log.open("a") as f:
            for k in range(21, 26):
                f.write(f"{{'loss': 'nan', 'grad_norm': 'nan', 'learning_rate': '1e-05', 'token_acc': '0', "
                        f"'epoch': '0.2', 'global_step/max_steps': '{k}/40', 'elapsed_time': '9s', "
                        f"'remaining_time': '5s', 'train_speed(s/it)': '0.4'}}\n")
        snaps = drive(s, until=lambda snaps: any(a["rule"].startswith("NAN") for x in snaps for a in x.alerts))
        s.close()
    finally:
        stop(p)
    assert any(a["rule"].startswith("NAN") for x in snaps for a in x.alerts)


def test_log_deleted_under_us(tmp_path):
    p, log = start_replay(tmp_path, pace=0.01, hold=30)
    try:
        s = AttachSession(resolve_target(str(p.pid)), AttachOptions(nvml=False))
        s.start()
        drive(s, until=lambda snaps: any(x.progress for x in snaps))
        log.unlink()
        with pytest.raises(InputError, match="deleted") as e:
            drive(s, until=lambda snaps: False, timeout=5)
        assert e.value.exit_code == 2
        s.close()
    finally:
        stop(p)


def test_no_nvml_is_log_only_with_a_notice(tmp_path):
    p, log = start_replay(tmp_path, pace=0.002, hold=30)
    try:
        s = AttachSession(resolve_target(str(p.pid)), AttachOptions(fake_nvml=str(TR / "no_driver.json")))
        s.start()
        assert s.nvml_notice and s.nvml_notice.startswith("log-only mode") and "\n" not in s.nvml_notice
        snap = drive(s, until=lambda snaps: any(x.progress for x in snaps))[-1]
        assert snap.gpus["nvml"].startswith("log-only") and snap.gpus["summary"] is None
        assert s.samples_path is None
        s.close()
    finally:
        stop(p)


def test_progress_numbers():
    from diagnose.parse import parse_run

    prog = progress_of(parse_run([str(HEALTHY / "train.log")]))
    assert prog["step"] == 20 and prog["max_steps"] == 20 and prog["eta_s"] == 0
    assert prog["s_per_it"] > 0 and prog["samples_per_s"] == pytest.approx(2 / prog["s_per_it"])
    assert len(prog["grad_norm_series"]) == 20


# ---------------------------------------------------------------------------- the CLI
def _cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "diagnose", *args], capture_output=True, text=True, timeout=timeout)


def test_cli_once_json(tmp_path):
    p, log = start_replay(tmp_path, pace=0.002, hold=30, env={"CUDA_VISIBLE_DEVICES": "1"})
    try:
        assert wait_for(lambda: "End time" in log.read_text(errors="replace"))
        r = _cli("attach", str(p.pid), "--once", "--format", "json", "--fake-nvml", str(TR / "a100x2_starved.json"))
    finally:
        stop(p)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["schema_version"] == 2 and d["primary"]["category"]
    import jsonschema

    jsonschema.validate(d, json.loads((ROOT / "docs" / "schemas" / "attach.schema.json").read_text()))
    assert d["target"]["pid"] == p.pid and d["target"]["log"] == str(log) and d["target"]["gpus"] == [1]
    assert d["gpus"]["summary"]["gpu_count"] == 1 and d["gpus"]["summary"]["gpu_name"] == "NVIDIA A100-SXM4-40GB"
    assert d["attach"]["progress"]["step"] == 20 and d["attach"]["alive"] is True


def test_cli_once_text(tmp_path):
    r = _cli("attach", str(HEALTHY), "--once", "--no-gpu")
    assert r.returncode == 0, r.stderr
    assert "step 20/20" in r.stdout and "HEALTHY" in r.stdout


def test_cli_stream_json_lines_until_the_end(tmp_path):
    p, log = start_replay(tmp_path, pace=0.002, step_pace=0.1, hold=0.2)
    try:
        # the fake job makes its output dir after its interpreter starts: on a loaded machine that takes a while
        assert wait_for(lambda: (tmp_path / "out").is_dir(), timeout=30)
        r = _cli("attach", str(tmp_path / "out"), "--format", "json", "--no-gpu", "--poll", "0.05", timeout=90)
    finally:
        stop(p)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert len(lines) >= 2 and lines[-1]["attach"]["ended"] is True
    assert all(not x["attach"]["ended"] for x in lines[:-1])
    assert lines[-1]["target"]["pid"] == p.pid
    assert _comparable(lines[-1]) == _comparable(_analyze(lines[-1]["target"]["logs"]))


@pytest.mark.parametrize("target,msg", [
    ("999999999", "no such process"),
    ("/nonexistent/run", "no such file"),
])
def test_cli_bad_targets_exit_2(target, msg):
    r = _cli("attach", target, "--once")
    assert r.returncode == 2 and msg in r.stderr and "Traceback" not in r.stderr


def test_cli_not_swift_exits_2():
    p = subprocess.Popen(["sleep", "30"])
    try:
        r = _cli("attach", str(p.pid), "--once")
    finally:
        p.kill()
        p.wait()
    assert r.returncode == 2 and "not an ms-swift job" in r.stderr


def _first_line(proc: subprocess.Popen, timeout: float) -> str:
    import select

    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "attach printed nothing"
    return proc.stdout.readline()


def test_attach_never_signals_the_job(tmp_path):
    # GIVEN a job WHEN attach follows it and is interrupted THEN the job keeps running untouched
    p, log = start_replay(tmp_path, pace=0.01, hold=30)
    try:
        a = subprocess.Popen([sys.executable, "-m", "diagnose", "attach", str(p.pid), "--format", "json", "--no-gpu"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as from a terminal
        first = _first_line(a, timeout=60)  # attach is up (a cold start can take seconds), not a fixed sleep
        a.send_signal(2)
        out, err = a.communicate(timeout=30)
        out = first + out
        assert a.returncode == 0, err
        assert p.poll() is None
        state = Path(f"/proc/{p.pid}/stat").read_text().split(")")[1].split()[0]
        assert state in ("S", "R")  # not stopped (T) or traced
        assert out.strip()
    finally:
        stop(p)
