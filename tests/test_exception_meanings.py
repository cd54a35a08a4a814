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
        run = parse_text(case + "\n")  # never as another specific category - and the exception line was READ
        assert not [e for e in run.events if e.kind == "traceback_cut"], f"{entry}: the exception line was not read"
        diag = analyze_run(run)
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


def test_an_exception_class_with_a_digit_is_not_a_host_tag():
    """`cv2.error: ...` once lost its class to the pdsh host-tag stripper (a name with a digit, then ': ')."""
    tb = """Traceback (most recent call last):
  File "/home/me/proj/data/loader.py", line 52, in load_frame
    img = cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
cv2.error: OpenCV(4.8.0) /io/opencv/modules/imgproc/src/color.cpp:182: error: (-215:Assertion failed) !_src.empty() in function 'cvtColor'
"""
    exc = _typed(tb)
    assert exc is not None and exc.cls == "error"
    assert analyze_run(parse_text(tb)).primary.category == "data_loading"


def _chain(*links: tuple[str, str, str]) -> str:
    out = []
    for i, (path, func, line) in enumerate(links):
        if i:
            out.append("\nThe above exception was the direct cause of the following exception:\n")
        out += ["Traceback (most recent call last):", f'  File "{path}", line 10, in {func}', "    x = f()", line]
    return "\n".join(out) + "\n"


def test_message_shape_is_read_only_when_nothing_else_explains_the_crash():
    # alone, a check worded as one leans config (weak)
    alone = _chain(("/opt/proj/train.py", "main", "ValueError: lora_alpha must be a power of two"))
    got = ex.classify(_typed(alone))
    assert got and got[0].shape and got[0].category == "config" and got[0].confidence == "weak"
    diag = analyze_run(parse_text(alone))
    assert (diag.primary.category, diag.primary.confidence) == ("config", "weak")
    # a module fallback on another link of the chain (torch's DataLoader) decides before the cause's wording does
    chained = _chain(("/opt/proj/train.py", "main", "ValueError: batch must be a dict"),
                     ("/usr/lib/python3.10/site-packages/torch/utils/data/_utils/worker.py", "_worker_loop",
                      "RuntimeError: worker 3 died"))
    got = ex.classify(_typed(chained))
    assert got and not got[0].shape and got[0].category == "data_loading"
    # wording with no check in it stays unexplained
    plain = _chain(("/opt/proj/train.py", "main", "ZeroDivisionError: float division"))
    assert ex.classify(_typed(plain)) is None


@pytest.mark.parametrize("line,want", [
    ("ValueError: Input contains NaN.", "nan"),
    ("RuntimeError: Failed to allocate 64 KV blocks: out of memory", "oom"),
    ("FileNotFoundError: [Errno 2] No such file or directory: '/data/clips/v_0042.mp4'", "data_loading"),
    ("NotImplementedError: packing is not supported for multimodal models yet", "config"),
    ("ValueError: sequence_parallel_size > 1 is not allowed with packing=False", "config"),
    ("ValueError: Could not find a template named qwen9", "config"),
    ("KeyError: 'Invalid train_type lorra'", "config"),
])
def test_message_shapes_name_their_category(line, want):
    got = ex.classify(_typed(_chain(("/opt/proj/engine.py", "run", line))))
    assert got and got[0].shape and got[0].category == want, (line, got and got[0].id)


def test_a_cut_traceback_in_a_users_dataset_getitem_leans_data_loading():
    cut = """Traceback (most recent call last):
  File "/opt/proj/train.py", line 88, in <module>
    for batch in loader:
  File "/opt/proj/data/my_dataset.py", line 140, in __getitem__
    frames = self.decode(rec["path"])
"""
    diag = analyze_run(parse_text(cut))
    assert diag.primary.category == "data_loading" and diag.primary.confidence == "weak"


@pytest.mark.parametrize("last,name", [
    ("Segmentation fault (core dumped)", "SIGSEGV"),
    ("train.sh: line 12: 40211 Aborted                 (core dumped) python train.py", "SIGABRT"),
    ("  what():  CUDA error: an illegal memory access was encountered", "a CUDA illegal memory access"),
    ("[2024-01-01 10:00:00,000] [ERROR] [launch.py:321:sigkill_handler] ['python', 'train.py'] exits with return code = -11",
     "SIGSEGV"),
])
def test_rows_then_a_native_crash_are_a_crash_not_a_healthy_run(last, name):
    rows = "".join(f"{{'loss': {2.0 - i * 0.1:.4f}, 'grad_norm': 0.5, 'learning_rate': 1e-05, 'epoch': {0.1 * i:.1f}}}\n"
                   for i in range(1, 5))
    diag = analyze_run(parse_text(rows + last + "\n"))
    assert diag.primary.category == "unknown" and diag.primary.rule == "GEN008", diag.primary
    assert name in diag.findings[0].evidence
    quiet = analyze_run(parse_text(rows))  # the same rows alone are a healthy excerpt
    assert quiet.primary.category == "healthy"


def test_a_message_the_terminal_wrapped_is_read_whole():
    # rich's traceback box ends with the exception line wrapped at the console width
    wrapped = """│ /opt/conda/lib/python3.10/site-packages/deepspeed/runtime/config.py:891 in _batch_assertion │
╰──────────────────────────────────────────────────────────────────────────────╯
AssertionError: Check batch related parameters. train_batch_size is not
equal to micro_batch_per_gpu * gradient_acc_step * world_size 32 != 2 *
4 * 2
ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0 (pid: 11) of binary: /usr/bin/python
"""
    exc = _typed(wrapped)
    assert exc is not None and exc.message.endswith("32 != 2 * 4 * 2")  # the launcher's line is not part of it
    assert analyze_run(parse_text(wrapped)).primary.category == "config"
    # a short exception line is not taken as wrapped: the prose after it stays out of the message
    short = "ValueError: bad value\nthen I restarted the job and it worked\n"
    assert _typed(short).message == "bad value"


def test_a_qualified_exception_class_printed_alone_is_read():
    line = "pkg_resources.DistributionNotFound: The 'peft<0.14,>=0.11' distribution was not found and is required by ms-swift\n"
    exc = _typed(line)
    assert exc is not None and exc.cls == "DistributionNotFound"
    diag = analyze_run(parse_text(line))
    assert (diag.primary.category, diag.primary.confidence) == ("config", "certain")
    # prose that merely names a module attribute is not an exception line
    assert _typed("see torch.Tensor for details\n") is None


def test_a_cut_traceback_leans_on_the_call_its_last_frame_was_making():
    # indentation lost in the paste, the excerpt ends mid-word: the last frame was calling the dataset loader
    cut = """Traceback (most recent call last):
File "/opt/app/src/mytrainer/train/workflow.py", line 51, in run_sft
dataset_module = get_dataset(template, model_args, data_args)
^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
Fi"""
    run = parse_text(cut + "\n")
    assert [e.kind for e in run.events] == ["traceback_cut"]  # 'Fi' is no exception class
    assert run.events[0].detail["frames"][-1]["code"].startswith("dataset_module = get_dataset(")
    diag = analyze_run(run)
    assert (diag.primary.category, diag.primary.confidence) == ("data_loading", "weak")
    # a call that says nothing leaves it unexplained
    other = cut.replace("get_dataset(template, model_args, data_args)", "build_trainer(model_args)")
    assert analyze_run(parse_text(other + "\n")).primary.category == "unknown"


def test_the_dataloader_anywhere_in_the_stack_means_the_data_pipeline():
    tb = """Traceback (most recent call last):
  File "/opt/proj/train.py", line 200, in main
    for batch in loader:
  File "/usr/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line 631, in __next__
    data = self._next_data()
  File "/usr/lib/python3.10/site-packages/torch/utils/data/_utils/fetch.py", line 52, in fetch
    data = [self.dataset[idx] for idx in possibly_batched_index]
  File "/opt/proj/scripts/finetune.py", line 30, in __getitem__
    return self.rows[i]["dialogue"]
KeyError: 'dialogue'
"""
    exc = _typed(tb)
    assert any("torch/utils/data/_utils/fetch.py" in f for f in exc.stack)
    got = ex.classify(exc)
    assert got and got[0].id == "shape_dataloader_in_stack" and got[0].category == "data_loading"
    # the same exception raised in the model's forward is not the data pipeline
    fwd = tb.replace("torch/utils/data/dataloader.py", "torch/nn/modules/module.py").replace(
        "torch/utils/data/_utils/fetch.py", "torch/nn/modules/container.py")
    got = ex.classify(_typed(fwd))  # only the class's own lean (weak config), not the data pipeline
    assert got and got[0].tier == "lean" and got[0].category == "config" and got[0].confidence == "weak"


def test_a_ray_task_traceback_cut_before_its_end_is_read_from_the_wrapper_line_above_it():
    # Ray replaces 'Traceback (most recent call last):' with the task's name under its wrapper's line
    # (ray python/ray/exceptions.py RayTaskError.__str__); the paste stops inside the remote frames
    text = """ray.exceptions.RayTaskError(OutOfMemoryError): ray::PolicyWorker.get_logprobs() (pid=2671, ip=10.0.0.9, repr=PolicyWorker[rank=0])
  File "/usr/lib/python3.12/concurrent/futures/_base.py", line 453, in result
    return self.__get_result()
  File "/opt/rl/models/policy/worker.py", line 653, in get_logprobs
    token_logprobs = forward_fn(
"""
    run = parse_text(text)
    assert [e.kind for e in run.events] == ["traceback"]
    exc = ex.typed_exception(run.events[0])
    assert exc.cls == "OutOfMemoryError" and exc.function == "get_logprobs"
    assert analyze_run(run).primary.category == "oom"
    # the same frames under an ordinary header whose end is lost stay a cut traceback
    cut = parse_text(text.replace(text.splitlines()[0], "Traceback (most recent call last):"))
    assert [e.kind for e in cut.events] == ["traceback_cut"]
    # and when the remote exception's own line is there, it is the exception
    full = parse_text(text + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    assert [e.kind for e in full.events] == ["cuda_oom"] and full.events[0].detail["frames"][-1]["func"] == "get_logprobs"


def test_one_exception_line_two_ranks_wrote_at_once_is_read_once():
    exc = _typed("Traceback (most recent call last):\n  File \"/opt/t/collate.py\", line 9, in __call__\n"
                 "    x = feature[\"input_ids_j\"]\nKeyErrorKeyError: : 'input_ids_j'\n")
    assert (exc.cls, exc.message) == ("KeyError", "'input_ids_j'")
    # a class whose name merely repeats a part is left alone
    assert ex.parse_exception_line("ErrorError: x")[0] == "ErrorError"


def test_vs_codes_exception_pane_is_read_class_message_and_innermost_frame():
    # debugpy's pane: the class on the first line, the message on the next, the frames innermost first
    pane = """Exception has occurred: AttributeError       (note: full exception trace is shown but execution is paused at: _run_module_as_main)
'OptimizerArgs' object has no attribute 'learning_rate'
  File "/venv/lib/python3.10/site-packages/torchrec/distributed/batched_embedding_kernel.py", line 385, in __init__
    "lr": emb_module.optimizer_args.learning_rate,
  File "/venv/lib/python3.10/site-packages/torchrec/distributed/embedding_lookup.py", line 201, in _create_lookup
    return BatchedFusedEmbedding(
  File "/proj/train.py", line 12, in <module>
    main()
"""
    run = parse_text(pane)
    assert [e.kind for e in run.events] == ["traceback"]
    exc = ex.typed_exception(run.events[0])
    assert (exc.cls, exc.message) == ("AttributeError", "'OptimizerArgs' object has no attribute 'learning_rate'")
    assert exc.module.endswith("batched_embedding_kernel.py") and exc.function == "__init__"
    assert analyze_run(run).primary.category == "config"


def test_an_exception_line_glued_into_a_traceback_by_another_stream_is_its_exception():
    text = """Traceback (most recent call last):
  File "TTS/bin/train_tacotron.py", line 721, in <module>
    main(args)RuntimeError:  [!] NaN loss with decoder_loss.

  File "TTS/bin/train_tacotron.py", line 623, in main
    scaler_st)
  File "/content/TTS/tts/layers/losses.py", line 398, in forward
    raise RuntimeError(f" [!] NaN loss with {key}.")
 ! Run is kept in /home/u/run-March-27-2022
"""
    run = parse_text(text)
    assert [e.kind for e in run.events] == ["traceback"]
    exc = ex.typed_exception(run.events[0])
    assert exc.cls == "RuntimeError" and "NaN loss" in exc.message and exc.function == "forward"
    assert analyze_run(run).primary.category == "nan"
    # a source line that merely handles an exception class is no exception line
    handled = text.replace("main(args)RuntimeError:  [!] NaN loss with decoder_loss.", "except (OSError): pass")
    assert [e.kind for e in parse_text(handled).events] == ["traceback_cut"]


def test_a_message_that_starts_on_the_next_line_keeps_its_indented_lines():
    # CPython's multiprocessing prints its bootstrapping error as 'RuntimeError: ' and then the indented text
    text = ("Traceback (most recent call last):\n"
            '  File "C:\\Python39\\lib\\multiprocessing\\spawn.py", line 134, in _check_not_importing_main\n'
            "    raise RuntimeError(\n"
            "RuntimeError: \n"
            "        An attempt has been made to start a new process before the\n"
            "        current process has finished its bootstrapping phase.\n")
    exc = _typed(text)
    assert exc.message.startswith("An attempt has been made") and "bootstrapping phase" in exc.message
    assert analyze_run(parse_text(text)).primary.category == "data_loading"
    # the indented lines after a message printed on the exception line itself are not its message
    other = text.replace("RuntimeError: \n", "RuntimeError: boom\n")
    assert _typed(other).message == "boom"
