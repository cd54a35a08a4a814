"""`swiftdoc probe` without training: the flags per ms-swift version, merging them into a command, usage errors,
`patch --probe`, and the in-trainer callback driven through a trainer's hook order by a tiny torch loop.

The real trainer runs in tests/test_probe_swift.py.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from diagnose.patch.probe_flags import CALLBACK, PLUGIN, add_probe, mechanism, probe_args

ROOT = Path(__file__).resolve().parent.parent


def swiftdoc(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "diagnose", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd or ROOT)


# ----------------------------------------------------------------------------- versions and flags


@pytest.mark.parametrize("version,flag,callbacks", [
    ("4.6.0", "external_plugins", True), ("4.0.0", "external_plugins", True), ("3.12.6", "external_plugins", False),
    ("3.2.0", "external_plugins", False), ("3.1.1", "custom_register_path", False),
    ("3.0.0", "custom_register_path", False)])
def test_each_version_loads_the_probe_its_own_way(version, flag, callbacks):
    m = mechanism(version)
    assert m.plugin_flag == flag and m.callbacks_flag == callbacks
    args = probe_args(version)
    assert args[:2] == ["--" + flag, str(PLUGIN)] and (("--callbacks" in args) == callbacks)


@pytest.mark.parametrize("version", ["2.6.1", "1.7.3", "nonsense"])
def test_a_version_without_a_callback_mechanism_is_exit_3(version):
    p = swiftdoc("probe", "--print-args", "--swift-version", version)
    assert p.returncode == 3 and "Traceback" not in p.stderr
    assert p.stderr.startswith("error: ms-swift " + version + " has no trainer-callback mechanism")


def test_print_args_text_and_json():
    p = swiftdoc("probe", "--print-args", "--swift-version", "4.6.0")
    assert p.returncode == 0
    lines = p.stdout.splitlines()
    assert lines[1] == f"--external_plugins {PLUGIN} --callbacks {CALLBACK}" and "SWIFTDOC_PROBE_DIR" in p.stdout
    doc = json.loads(swiftdoc("probe", "--print-args", "--swift-version", "3.5.0", "--format", "json").stdout)
    assert doc["args"] == ["--external_plugins", str(PLUGIN)] and doc["mechanism"]["registry"] == "swift.plugin.extra_callbacks"
    assert "swift/llm/train/sft.py" in doc["mechanism"]["source"]


@pytest.mark.parametrize("argv,needle", [
    ([], "nothing to run"), (["--", "bash", "train.sh"], "not an ms-swift training command"),
    (["--", "megatron", "sft", "--model", "m"], "Megatron"), (["--", "swift", "infer"], "not a training command")])
def test_usage_errors_are_one_line_exit_2(argv, needle):
    p = swiftdoc("probe", *argv)
    assert p.returncode == 2 and needle in p.stderr and "Traceback" not in p.stderr


def test_the_flags_merge_into_the_commands_own_lists():
    v = "4.6.0"
    assert add_probe(["--model", "m"], v) == ["--model", "m", "--external_plugins", str(PLUGIN), "--callbacks", CALLBACK]
    merged = add_probe(["--external_plugins", "a.py", "b.py", "--callbacks", "lisa", "--model", "m"], v)
    assert merged == ["--external_plugins", "a.py", "b.py", str(PLUGIN), "--callbacks", "lisa", CALLBACK, "--model", "m"]
    assert add_probe(["--external_plugins=a.py"], v) == ["--external_plugins", "a.py", str(PLUGIN), "--callbacks",
                                                         CALLBACK]
    assert add_probe(merged, v) == merged  # already there: unchanged
    assert add_probe(["--custom_register_path", "x.py"], "3.1.0") == ["--custom_register_path", "x.py", str(PLUGIN)]


def test_patch_probe_adds_the_flags_to_the_script(tmp_path):
    (tmp_path / "train.sh").write_text("#!/bin/bash\nswift sft \\\n    --model m --dataset d.jsonl \\\n"
                                       "    --external_plugins mine.py \\\n    --output_dir out\n")
    p = swiftdoc("patch", "train.sh", "--probe", "--swift-version", "4.6.0", "--no-swift-check", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert f"+    --external_plugins mine.py {PLUGIN} \\" in p.stdout and "+    --callbacks swiftdoc_probe" in p.stdout
    # the probe observes: its flags are safe to add, and --only-safe keeps them; no empty "default:" line
    assert "[changes-training]" not in p.stdout and p.stdout.count("[safe] probe:") == 2, p.stdout
    assert "default: \n" not in p.stdout
    q = swiftdoc("patch", "train.sh", "--probe", "--only-safe", "--swift-version", "4.6.0", "--no-swift-check",
                 cwd=tmp_path)
    assert q.returncode == 0 and "+    --callbacks swiftdoc_probe" in q.stdout, q.stdout + q.stderr


# ----------------------------------------------------------------------------- the callback itself


def _load_plugin():
    os.environ["SWIFTDOC_PROBE_NO_REGISTER"] = "1"
    try:
        spec = importlib.util.spec_from_file_location("swiftdoc_probe_under_test", PLUGIN)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        os.environ.pop("SWIFTDOC_PROBE_NO_REGISTER", None)
    return mod


def test_the_plugin_imports_nothing_but_the_standard_library():
    src = PLUGIN.read_text()
    top = [ln for ln in src.splitlines() if ln.startswith(("import ", "from "))]
    assert all(ln.split()[1].split(".")[0] in {"__future__", "atexit", "json", "os", "socket", "sys", "threading",
                                              "time"} for ln in top), top
    assert "diagnose" not in src.replace("diagnose/probe_plugin", "")


def test_the_callback_records_steps_through_the_trainer_hook_order(tmp_path):
    torch = pytest.importorskip("torch")
    mod = _load_plugin()

    class Slow(torch.utils.data.Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            time.sleep(0.01)  # the data pipeline: 20 ms per batch of two
            return {"input_ids": torch.ones(6, dtype=torch.long), "attention_mask": torch.tensor([1, 1, 1, 1, 0, 0])}

    dl = torch.utils.data.DataLoader(Slow(), batch_size=2)
    model = torch.nn.Embedding(4, 3)
    cb = mod._Probe()
    args = SimpleNamespace(output_dir=str(tmp_path), gradient_accumulation_steps=2, per_device_train_batch_size=2)
    state = SimpleNamespace(global_step=0)
    cb.on_train_begin(args, state, None, train_dataloader=dl, model=model)
    it = iter(dl)
    for _ in range(6):  # transformers 5's order: fetch the step's micro-batches, then step begin ... step end
        batches = [next(it), next(it)]
        cb.on_step_begin(args, state, None)
        for i, b in enumerate(batches):
            model(b["input_ids"]).sum().backward()
            if i == 0:
                cb.on_substep_end(args, state, None)
        cb.on_pre_optimizer_step(args, state, None)
        cb.on_optimizer_step(args, state, None)
        state.global_step += 1
        cb.on_step_end(args, state, None)
    model(torch.ones(2, dtype=torch.long))  # an evaluation forward outside any step: not counted
    cb.on_train_end(args, state, None)
    lines = [json.loads(x) for x in (tmp_path / "swiftdoc-probe" / "rank0.jsonl").read_text().splitlines()]
    assert [x["kind"] for x in lines] == ["header"] + ["step"] * 6 + ["end"]
    head, steps = lines[0], lines[1:-1]
    assert head["format"] == mod.FORMAT and head["world_size"] == 1 and head["loader"] == "loader"
    for s in steps[1:]:
        assert s["micro"] == 2 and s["samples"] == 4 and s["tokens"] == 16
        assert 0.03 <= s["data_s"] <= s["wall_s"] and s["fwd_s"] > 0 and s["bwd_s"] >= 0 and s["opt_s"] >= 0
        assert s["rss_gib"] > 0
    assert [s["step"] for s in steps] == [1, 2, 3, 4, 5, 6]
    assert model._forward_hooks == {} and model._forward_pre_hooks == {}  # hooks removed at train end


def test_an_error_inside_the_probe_switches_it_off_not_training(tmp_path, capsys):
    mod = _load_plugin()
    cb = mod._Probe()
    cb.on_train_begin(SimpleNamespace(output_dir=str(tmp_path / "ro" / "\0bad")), None, None)  # cannot open its file
    assert not cb.on
    assert "switched off" in capsys.readouterr().err
    cb.on_step_begin(None, None, None)
    cb.on_step_end(None, SimpleNamespace(global_step=1), None)  # nothing raised, nothing written
    cb.on_train_end(None, None, None)


def test_count_batch_shapes():
    torch = pytest.importorskip("torch")
    mod = _load_plugin()
    assert mod.count_batch({"input_ids": torch.ones(1, 10), "position_ids": torch.tensor([[0, 1, 2, 0, 1, 0, 1, 2, 3, 4]])}) == (3, 10)
    assert mod.count_batch({"input_ids": torch.ones(1, 9), "cu_seq_lens_q": torch.tensor([0, 4, 9])}) == (2, 9)
    assert mod.count_batch({"input_ids": torch.ones(3, 5)}) == (3, 15)
    assert mod.count_batch([1, 2]) == (None, None)
