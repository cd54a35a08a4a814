"""tools/mine_raises.py: a package's raise statements read with ast and classified by the exception table."""
import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parents[1] / "tools" / "mine_raises.py"


def _run(*args):
    return subprocess.run([sys.executable, str(TOOL), *map(str, args)], capture_output=True, text=True, timeout=120)


def _pkg(tmp_path):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "args.py").write_text(
        "def check(n):\n"
        "    if n < 1:\n"
        "        raise ValueError(f'gradient_accumulation_steps must be positive, got {n}')\n"
        "def alloc():\n"
        "    raise RuntimeError('CUDA out of memory. Tried to allocate 2.00 GiB')\n"
        "def odd():\n"
        "    raise errors.Zqxj('zqxj wobble')\n"
        "x = (\n")  # a file that does not parse is skipped, not fatal
    (pkg / "ok.py").write_text("def f():\n    raise ValueError(some_variable)\n")  # no literal message: not listed
    return pkg


def test_each_raise_is_classified_and_the_unexplained_are_listed(tmp_path):
    pkg = _pkg(tmp_path)
    (pkg / "args.py").write_text((pkg / "args.py").read_text().replace("x = (\n", ""))
    out = _run(pkg)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 3
    by_cls = {ln.split(" | ")[1]: ln.split(" | ")[0] for ln in lines}
    assert by_cls["ValueError"].startswith("config:")
    assert by_cls["RuntimeError"].startswith("oom:")
    assert by_cls["Zqxj"] == "NONE"
    assert "must be positive, got X" in out.stdout  # the f-string's field is X
    only = _run(pkg, "--unexplained").stdout.splitlines()
    assert len(only) == 1 and "zqxj wobble" in only[0]
    summary = _run(pkg, "--summary").stdout
    assert "NONE" in summary and "oom:" in summary


def test_a_file_that_does_not_parse_is_skipped_and_a_missing_folder_is_an_error(tmp_path):
    pkg = _pkg(tmp_path)
    out = _run(pkg)
    assert out.returncode == 0 and out.stdout == ""  # args.py does not parse; ok.py has no literal message
    bad = _run(tmp_path / "nope")
    assert bad.returncode == 2 and "not a folder" in bad.stderr and "Traceback" not in bad.stderr
