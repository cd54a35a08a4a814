"""Issue #20, what swiftdoc runs and writes for the user: helper interpreters isolated from the current folder (7),
`verify --ray` ships only what the trial names (8), edits planned first then written all or none (9), the safe-write
helper (11: link targets, owner and mode kept, read-only refused, failures cleaned up with exit 2)."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
import types
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.secutil import sd

CLEAN = "swift sft --model m --dataset d.jsonl --per_device_train_batch_size 2 --tuner_type lora\n"
FIXABLE = "swift sft --model m --dataset d.jsonl --per_device_train_batch_size 2 --train_type lora\n"
FIXED = FIXABLE.replace("--train_type", "--tuner_type")
LINT = ("lint", "--swift-version", "4.6.0", "--no-swift-check", "--fix")


def _leftovers(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if ".bak" in p.name or p.name.endswith(".swiftdoc-tmp"))


# ---- item 7: imports from the current directory ------------------------------------------------------------------

def test_the_parser_check_never_imports_from_the_scripts_folder(tmp_path):
    """A json.py planted beside a launch script ran during a plain `swiftdoc lint train.sh`."""
    marker = tmp_path / "PLANTED-RAN"
    (tmp_path / "json.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('x')\n")
    (tmp_path / "train.sh").write_text(CLEAN)
    fake = tmp_path.parent / (tmp_path.name + "-site")  # a stand-in ms-swift that imports in no time
    (fake / "swift").mkdir(parents=True)
    (fake / "swift" / "__init__.py").write_text("__version__ = '4.6.0'\n")
    (fake / "transformers").mkdir()
    (fake / "transformers" / "__init__.py").write_text("class HfArgumentParser:\n    pass\n")
    # swiftdoc itself started as its console script does (its own folder, not the cwd, first on sys.path)
    boot = f"import sys; sys.path[0] = {str(ROOT)!r}; from diagnose.cli import main; sys.exit(main(sys.argv[1:]))"
    env = {**os.environ, "SWIFTDOC_SWIFT_PYTHON": sys.executable, "PYTHONPATH": str(fake)}
    p = subprocess.run([sys.executable, "-c", boot, "lint", "train.sh", "--swift-version", "4.6.0"], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=120)
    assert "ms-swift check" in p.stdout, p.stdout + p.stderr  # the helper interpreter did run
    assert not marker.exists()


def test_helper_interpreters_run_in_an_empty_folder(tmp_path, monkeypatch):
    from diagnose.isolated import run_python

    monkeypatch.chdir(tmp_path)
    (tmp_path / "json.py").write_text("raise SystemExit('planted')\n")
    p = run_python(sys.executable, "import json, os, sys; print(os.listdir('.'), json.dumps(1))",
                   capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "[] 1", p.stderr


# ---- item 8: verify --ray ships only what the trial names ----------------------------------------------------------

def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    for rel, data in {".ssh/id_rsa": "PRIVATE KEY", ".aws/credentials": "aws_secret", ".env": "HF_TOKEN=x",
                      "Documents/taxes.pdf": "private", "proj/data/train.jsonl": '{"messages": []}\n',
                      "proj/ds.json": "{}", "proj/plugin.py": "x = 1\n", "proj/.git/config": "[core]"}.items():
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text(data)
    (home / "proj" / "train.sh").write_text(
        "swift sft --model /models/qwen --dataset proj/data/train.jsonl#500 --deepspeed=proj/ds.json "
        "--external_plugins proj/plugin.py --output_dir out\n")
    (home / "link.jsonl").symlink_to(home / ".ssh" / "id_rsa")
    return home


def _job(home: Path):
    from diagnose.verify.job import job_from_script

    return job_from_script(str(home / "proj" / "train.sh"), swift="swift", version="4.6.0", cwd=str(home))


def test_only_the_files_the_job_names_are_shipped(tmp_path):
    from diagnose.verify.shipping import needed_files, stage

    home = _home(tmp_path)
    job = _job(home)
    job.argv += ["--dataset", "link.jsonl", "--val_dataset", "../outside.jsonl", "--x", ".ssh/id_rsa"]
    files = needed_files(job, str(home / "proj" / "train.sh"))
    assert sorted(files) == ["proj/data/train.jsonl", "proj/ds.json", "proj/plugin.py", "proj/train.sh"]
    ship = stage(job, str(home / "proj" / "train.sh"))
    try:
        staged = sorted(str(p.relative_to(ship.dir)) for p in Path(ship.dir).rglob("*") if p.is_file())
        assert staged == sorted(files)
        assert "4 file(s)" in ship.line and "proj/ds.json" in ship.line
    finally:
        ship.close()
    assert not Path(ship.dir).exists()


def test_shipping_is_size_checked(tmp_path):
    from diagnose.errors import UsageError
    from diagnose.verify.shipping import stage

    home = _home(tmp_path)
    (home / "proj" / "data" / "train.jsonl").write_bytes(b"x" * 3000)
    with pytest.raises(UsageError) as e:
        stage(_job(home), limit=1000)
    assert "train.jsonl" in e.value.message


def test_ray_on_a_remote_cluster_gets_the_staged_folder_not_the_cwd(tmp_path, monkeypatch):
    from diagnose.verify import ray_executor as rx

    home = _home(tmp_path)
    job = _job(home)
    fake = types.SimpleNamespace(init=lambda **kw: None, shutdown=lambda: None,
                                 cluster_resources=lambda: {"CPU": 64.0},
                                 remote=lambda *a, **k: (lambda cls: cls))
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.setattr(rx, "_answers", lambda address, timeout=3.0: True)
    monkeypatch.setattr(rx, "_same_machine", lambda ray: False)
    slot = types.SimpleNamespace(name="s0", gpus=None, cpus=[0])
    ex = rx.RayExecutor.connect("head:6379", [slot], job, probe=False)
    try:
        wd = Path(ex.runtime_env["working_dir"])
        assert wd != home and not (wd / ".ssh").exists() and not (wd / "Documents").exists()
        assert (wd / "proj" / "data" / "train.jsonl").is_file()
        assert any("--ray ships" in n for n in job.notes)
    finally:
        ex.close()
    assert not wd.exists()


# ---- item 9: plan every edit, then write all or none ---------------------------------------------------------------

def test_lint_fix_writes_nothing_when_one_command_cannot_be_fixed(tmp_path):
    cfg = "model: Qwen/Qwen2.5-7B\ndataset: d.jsonl\ntrain_type: lora\n"
    (tmp_path / "a.yaml").write_text(cfg)
    script = ("for lr in 1e-4 2e-4; do\n"
              "  swift sft --model m --dataset d.jsonl --per_device_train_batch_size 2 --train_type lora "
              "--learning_rate $lr\ndone\nswift sft a.yaml\n")
    (tmp_path / "train.sh").write_text(script)
    p = sd(*LINT, str(tmp_path / "train.sh"))
    assert p.returncode == 2 and "not fixed" in p.stderr
    assert (tmp_path / "a.yaml").read_text() == cfg and (tmp_path / "train.sh").read_text() == script
    assert _leftovers(tmp_path) == []


def test_lint_fix_over_several_files_is_all_or_none(tmp_path):
    (tmp_path / "a.sh").write_text(FIXABLE)
    (tmp_path / "b.sh").write_text("for x in 1 2; do\n  " + FIXABLE + "done\n")
    assert sd(*LINT, str(tmp_path)).returncode == 2
    assert (tmp_path / "a.sh").read_text() == FIXABLE and _leftovers(tmp_path) == []


def test_a_failed_rename_puts_back_every_file_already_written(tmp_path, monkeypatch):
    from diagnose.errors import InputError
    from diagnose.patch.safewrite import write_files

    a, b = tmp_path / "a.sh", tmp_path / "b.yaml"
    a.write_text("old a\n")
    b.write_text("old b\n")
    real, calls = os.replace, []

    def flaky(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(28, "No space left on device", str(dst))
        return real(src, dst)

    monkeypatch.setattr(os, "replace", flaky)
    with pytest.raises(InputError) as e:
        write_files([(a, "new a\n", "utf-8"), (b, "new b\n", "utf-8")])
    assert "nothing was changed" in e.value.message
    assert a.read_text() == "old a\n" and b.read_text() == "old b\n" and _leftovers(tmp_path) == []


# ---- item 11: the safe-write helper --------------------------------------------------------------------------------

def test_a_symlinked_script_has_its_target_fixed_and_stays_a_link(tmp_path):
    real_dir = tmp_path / "real"
    real_dir.mkdir()
    target = real_dir / "train.sh"
    target.write_text(FIXABLE)
    link = tmp_path / "train.sh"
    link.symlink_to(target)
    p = sd(*LINT, str(link))
    assert p.returncode == 0, p.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == FIXED
    assert (real_dir / "train.sh.bak").read_text() == FIXABLE


def test_mode_is_kept_and_a_read_only_script_needs_force(tmp_path):
    s = tmp_path / "train.sh"
    s.write_text(FIXABLE)
    s.chmod(0o750)
    assert sd(*LINT, str(s)).returncode == 0
    assert stat.S_IMODE(s.stat().st_mode) == 0o750 and s.read_text() == FIXED
    (tmp_path / "train.sh.bak").unlink()
    s.write_text(FIXABLE)
    s.chmod(0o444)
    p = sd(*LINT, str(s))
    assert p.returncode == 2 and "read-only" in p.stderr and "--force" in p.stderr
    assert s.read_text() == FIXABLE and _leftovers(tmp_path) == []
    assert sd(*LINT, "--force", str(s)).returncode == 0
    assert s.read_text() == FIXED and stat.S_IMODE(s.stat().st_mode) == 0o444


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
def test_root_fixing_another_users_script_leaves_it_theirs(tmp_path):
    s = tmp_path / "train.sh"
    s.write_text(FIXABLE)
    os.chown(s, 4242, 4343)
    assert sd(*LINT, str(s)).returncode == 0
    st, bak = s.stat(), (tmp_path / "train.sh.bak").stat()
    assert (st.st_uid, st.st_gid) == (4242, 4343) == (bak.st_uid, bak.st_gid) and s.read_text() == FIXED


@pytest.mark.parametrize("failure", ["folder", "disk"])
def test_an_unwritable_folder_or_a_full_disk_is_exit_2_and_leaves_nothing(tmp_path, monkeypatch, failure):
    import tempfile

    s = tmp_path / "train.sh"
    s.write_text(FIXABLE)
    if failure == "folder":  # as a user without write permission on the folder sees it (root may write anywhere)
        def no_temp(*a, **k):
            raise PermissionError(13, "Permission denied", str(tmp_path))

        monkeypatch.setattr(tempfile, "mkstemp", no_temp)
    else:
        def full(fd):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(os, "fsync", full)
    for args in (LINT, ("patch", "--swift-version", "4.6.0", "--no-swift-check", "--set", "learning_rate=2e-5",
                        "--write")):
        p = sd(*args, str(s))
        assert p.returncode == 2 and "nothing was changed" in p.stderr, p.stderr
        assert "internal error" not in p.stderr
        assert s.read_text() == FIXABLE and _leftovers(tmp_path) == []
