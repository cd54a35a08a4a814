"""A traceback the paste cut before its exception line still says something: where it stopped (features/events.py
`_cut_lean`), and a text that ends inside preprocessing leans data_loading (diagnosis `_preprocessing_unfinished`).

Each case is a text shaped like what users paste, built here; each has a twin that must NOT lean the same way.
"""
from __future__ import annotations

from diagnose.parse import parse_text
from diagnose.pipeline import analyze_run


def _primary(text: str):
    d = analyze_run(parse_text(text)).primary
    return d.category, d.confidence


HEAD = "Traceback (most recent call last):\n  File \"/work/train.py\", line 10, in <module>\n    main()\n"


def test_cut_at_a_raise_statement_reads_the_statement():
    text = HEAD + ("  File \"/work/trainer.py\", line 466, in _optimize\n"
                   "    raise RuntimeError(f\" > Detected NaN in the loss\")\n")
    assert _primary(text) == ("nan", "probable")
    # a raise whose message says nothing the table knows: no lean from it
    other = HEAD + "  File \"/work/trainer.py\", line 466, in _optimize\n    raise RuntimeError(f\" > something odd\")\n"
    assert _primary(other)[0] != "nan"


def test_cut_while_fetching_the_next_batch_leans_data_loading():
    text = HEAD + ("  File \"/work/loop.py\", line 265, in fit\n"
                   "    for batch in train_dataloader:\n"
                   "  File \"/home")
    assert _primary(text) == ("data_loading", "weak")
    other = HEAD + "  File \"/work/loop.py\", line 265, in fit\n    for name in layer_names:\n  File \"/home"
    assert _primary(other)[0] != "data_loading"


def test_cut_inside_a_collective_leans_nccl():
    text = HEAD + ("  File \"/env/deepspeed/runtime/engine.py\", line 1077, in _broadcast_model\n"
                   "    dist.b")
    assert _primary(text) == ("nccl", "weak")


def test_cut_after_an_unfinished_preprocessing_bar_leans_data_loading():
    bar = "Running tokenizer on dataset (num_proc=64):  98%|█████████▊| 81273/82730 [01:36<00:01, 843.85 examples/s]\n"
    assert _primary(bar + HEAD + "  File \"/work/tuner.py\", line 64, in run\n    run_pt(model_args, data_args, trainin")\
        == ("data_loading", "weak")
    # a pass that finished before the crash is no lead
    done = "Running tokenizer on dataset (num_proc=64): 100%|██████████| 82730/82730 [01:38<00:00, 843.85 examples/s]\n"
    assert _primary(done + HEAD + "  File \"/work/tuner.py\", line 64, in run\n    run_pt(model_args, data_args, trainin")\
        != ("data_loading", "weak")


def test_text_that_ends_inside_preprocessing_leans_data_loading():
    cut_bars = "".join(f"Running tokenizer on dataset (num_proc=64):  {p}%|█████████████\n" for p in (69, 70, 72, 73))
    cat, conf = _primary(cut_bars)
    assert (cat, conf) == ("data_loading", "weak")
    run = parse_text(cut_bars)
    assert run.preprocess_cut == {"what": "Running tokenizer on dataset", "pct": 73, "line": 4}
    finished = "Map (num_proc=8): 100%|██████████| 2000/2000 [00:03<00:00, 600.00 examples/s]\n"
    assert _primary(finished)[0] != "data_loading"


def test_spawn_report_then_the_workers_cut_traceback():
    text = ("Traceback (most recent call last):\n"
            "  File \"/env/torch/multiprocessing/spawn.py\", line 150, in join\n"
            "    raise ProcessRaisedException(msg, error_index, failed_process.pid)\n"
            "torch.multiprocessing.spawn.ProcessRaisedException:\n\n"
            "-- Process 5 terminated with the following error:\n"
            "Traceback (most recent call last):\n"
            "  File \"/env/torch/utils/data/dataloader.py\", line 990, in _try_get_data\n"
            "    data = self._data_queue.get(timeout=timeout)\n")
    assert _primary(text)[0] == "data_loading"


def test_a_weak_lean_never_leads_over_a_surer_finding_of_its_category():
    bar = ("Running tokenizer on dataset:  38%|███▊      | 32066/85249 [32:12<53:25, 16.59ba/s]\n"
           "Running tokenizer on dataset:  38%|███▊      | 32068/85249 [32:13<53:59, 16.42ba/s]")
    d = analyze_run(parse_text(bar + "Traceback (most recent call last):\n  File \""))
    weak = [f for f in d.findings if f.category == "data_loading" and f.confidence == "weak"]
    assert weak, [f.rule for f in d.findings]  # the cut traceback's lean is there ...
    assert d.primary.category == "data_loading" and d.primary.confidence != "weak"  # ... but the surer finding leads
