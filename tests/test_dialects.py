"""Other trainers' step rows (issue #17): the dialect table's own line cases, the generic fallback, tqdm bars as
rows, and features that do not care which dialect the rows came from."""
from __future__ import annotations

import json
import math

import pytest

from diagnose.parse.dialects import CANONICAL, GenericRows, convert, dialects, row_values
from diagnose.parse.run import parse_text
from diagnose.pipeline import analyze_run

TABLE = dialects()


def _entries() -> list[dict]:
    from pathlib import Path

    import yaml

    from diagnose.parse import dialects as mod

    p = Path(mod.__file__).with_name("dialects.yaml")
    return (yaml.safe_load(p.read_text(encoding="utf-8")) or []) if p.is_file() else []


def _cases():
    for e in _entries():
        for c in (e.get("cases") or {}).get("match", []):
            yield pytest.param(e["name"], c["line"], c.get("expect") or {}, id=f"{e['name']}-match")


def _no_match():
    for e in _entries():
        for line in (e.get("cases") or {}).get("no_match", []):
            yield pytest.param(e["name"], line, id=f"{e['name']}-no_match")


def test_the_table_covers_the_trainers_of_the_issue():
    names = " ".join(f"{d.name} {d.trainer}".lower() for d in TABLE)
    for who in ("metriclogger", "mmengine", "detectron2", "megatron", "deepspeed", "nanogpt", "torchtitan", "verl"):
        assert who in names.replace("_", "").replace(" ", "") or who in names, who
    for d in TABLE:
        assert d.source and d.needles and d.fields
        assert set(d.fields) <= set(CANONICAL)


@pytest.mark.parametrize("name,line,expect", list(_cases()))
def test_dialect_line_cases(name, line, expect):
    from diagnose.parse.prefix import strip_paste

    body = strip_paste(line)[0]
    d = next(x for x in TABLE if x.name == name)
    m = d.pattern.search(body)
    assert m, f"{name} does not match its own case"
    got = row_values(d, m)
    for k, v in expect.items():
        assert k in got, (name, k, got)
        if isinstance(v, float) and math.isnan(v):
            assert math.isnan(got[k])
        else:
            assert got[k] == pytest.approx(v, rel=1e-3, abs=1e-9), (name, k, got[k], v)


@pytest.mark.parametrize("name,line", list(_no_match()))
def test_dialect_no_match_cases(name, line):
    d = next(x for x in TABLE if x.name == name)
    assert not (all(n in line for n in d.needles) and d.pattern.search(line)), f"{name} matched {line!r}"


def test_patterns_stay_linear_on_long_lines():
    import time

    for d in TABLE:
        junk = (" ".join(d.needles) + " ") * 4000 + "x" * 50_000
        t0 = time.perf_counter()
        d.pattern.search(junk)
        assert time.perf_counter() - t0 < 0.5, d.name


def test_units_convert_to_canonical():
    assert convert("20480", "MiB") == pytest.approx(20.0)
    assert convert("1:02:10", "hms") == 3730
    assert convert("1 day, 2:03:04", "hms") == 86400 + 7384
    assert convert("5,123", "count") == 5123
    assert convert("123.45", "ms") == pytest.approx(0.12345)
    assert math.isnan(convert("nan", None))


def test_generic_rows_need_repeating_keys_with_changing_numbers():
    g = GenericRows()
    for i in range(5):
        g.feed(i + 1, f"iter {i}: loss={2.0 - i * 0.1:.2f}, lr=1e-4, time={0.5 + i * 0.01:.2f}s, data_time=0.40s")
    rows = g.rows()
    assert len(rows) == 5 and rows[0][1].values["step_time_s"] == pytest.approx(0.5)
    assert rows[0][1].values["data_time_s"] == pytest.approx(0.4)
    h = GenericRows()
    for i in range(5):  # the same numbers on every line: a config print, not steps
        h.feed(i + 1, "batch_size: 8, lr: 0.0001, epochs: 3, workers: 4")
    assert h.rows() == []


def test_generic_rows_read_name_value_segments_split_by_pipes():
    g = GenericRows()
    for i in range(4):
        g.feed(i + 1, f"Epoch 0/1 | Batch {i * 100}/15582 | Train Loss {2.5 - i * 0.1:.4f} | Learning Rate {i * 2e-8}")
    rows = g.rows()
    assert len(rows) == 4 and rows[1][1].values["step"] == 100 and rows[1][1].values["loss"] == pytest.approx(2.4)
    assert rows[3][1].values["lr"] == pytest.approx(6e-8)
    h = GenericRows()
    for i in range(4):  # a markdown table row is not a step row
        assert not h.feed(i + 1, f"| model | {i} | ok |")
    assert h.rows() == []


def test_generic_rows_read_name_value_lists_split_by_commas():
    g = GenericRows()
    for i in range(4):  # 'Epoch 1, Step 100, Loss 2.3, LR 1e-4' and 'epoch 1 iter 300: loss nan, lr 1e-4'
        assert g.feed(i + 1, f"Epoch 1, Step {i * 100}, Loss {2.5 - i * 0.1:.4f}, LR 0.0001")
        assert g.feed(10 + i, f"epoch 1 iter {i * 50}: loss nan, lr 0.0001")
    rows = g.rows()
    by_line = {ln: r.values for ln, r in rows}
    assert by_line[2]["step"] == 100 and by_line[2]["loss"] == pytest.approx(2.4)
    assert by_line[12]["step"] == 100 and math.isnan(by_line[12]["loss"])
    h = GenericRows()
    for i in range(4):  # prose with numbers in it is not a step row
        assert not h.feed(i + 1, f"Loaded {i} shards, using 8 workers, done")
    assert h.rows() == []


def test_generic_rows_read_name_value_pairs_set_apart_by_spaces_or_tabs():
    g = GenericRows()
    for i in range(4):  # a custom loop's print(f"epoch {e} step {s} loss {l} lr {lr}") and tab-separated columns
        assert g.feed(i + 1, f"epoch 1 step {i * 100} loss {2.5 - i * 0.1:.4f} lr 0.0001")
        assert g.feed(10 + i, f"Train [{i * 50}/464]\tTime {0.73 + i * 0.01:.3f} ( 0.738)\tData  0.000 ( 0.014)\t"
                              f"Loss {1.5 + i:.4e} (1.5406e+00)")
    by_line = {ln: r.values for ln, r in g.rows()}
    assert by_line[2]["step"] == 100 and by_line[2]["loss"] == pytest.approx(2.4)
    assert by_line[11]["step_time_s"] == pytest.approx(0.74) and by_line[11]["loss"] == pytest.approx(2.5)
    h = GenericRows()
    for i in range(4):  # a sentence with numbers in it is not a step row
        assert not h.feed(i + 1, f"Loaded {i} shards from 8 files in 3 seconds")
    assert h.rows() == []


def test_a_step_printed_as_a_block_under_its_header_is_one_row():
    # coqui-ai Trainer ConsoleLogger.print_train_step: a header naming the step, then one 'key: value (avg)' a line
    block = ["", "   --> STEP: {s}/352 -- GLOBAL_STEP: {g}", "     | > loss_0: {l:.5f}  (15.96176)",
             "     | > grad_norm_0: 22.85464  (28.87626)", "     | > current_lr_0: 0.00010 ",
             "     | > step_time: {t:.5f}  (0.29190)", "     | > loader_time: 0.00150  (0.00135)"]
    text = ""
    for i in range(4):
        text += "\n".join(block).format(s=24 + i, g=1000 + i, l=16.5 - i * 0.1, t=0.29 + i * 0.01) + "\n"
    text += " --> EVAL PERFORMANCE\n     | > avg_loader_time: 0.00034 (-0.00003)\n     | > avg_loss_0: 16.02957 (+0.00000)\n"
    run = parse_text(text)
    t = run.steps
    assert len(t) == 4 and list(t["step"]) == [1000, 1001, 1002, 1003]
    assert t["loss"][1] == pytest.approx(16.4) and t["learning_rate"][0] == pytest.approx(1e-4)
    assert t["data_time_s"][0] == pytest.approx(0.0015)
    # the same value lines under no step header (the eval block, a config print) are no row
    g = GenericRows()
    for i, line in enumerate(["Config:", " | > lr: 0.001", " | > batch_size: 8", " | > loss_weight: 1.0"]):
        g.feed(i + 1, line)
    assert g.rows() == []


def test_a_run_shown_only_by_a_progress_bar_is_read_as_steps():
    text = "\n".join(f"Train:  40%|████      | {400 + i}/1000 [1:02:{10 + i:02d}<1:33:15,  9.3{i}s/it]" for i in range(4))
    run = parse_text(text + "\n")
    assert len(run.steps) == 4 and run.steps["interval_s"][0] == pytest.approx(9.30)
    diag = analyze_run(run)
    assert diag.primary.category == "healthy" and "steps 400-403" in diag.primary.summary


def test_data_wait_from_any_trainer_s_rows_decides_data_loading():
    lines = [f"[{t}] iter: {i}/1000, loss: 1.{i}, lr: 1e-4, iter_time: 1.2{i}s, data_time: 0.9{i}s, mem: 5000Mb"
             for i, t in enumerate(["10:00:01", "10:00:02", "10:00:03", "10:00:04", "10:00:05"])]
    diag = analyze_run(parse_text("\n".join(lines) + "\n"))
    assert diag.primary.category == "data_loading"
    assert diag.features["data_time_frac"] > 0.6


def test_one_line_of_a_steps_loss_terms_is_a_row():
    # a VITS/GAN trainer prints its loss terms each interval: one line of them is the run at work
    one = "INFO:xx:loss_disc=3.598, loss_gen=3.174, loss_fm=8.765,loss_mel=19.367, loss_kl=1.520\n"
    assert len(parse_text(one).steps) == 1
    assert analyze_run(parse_text(one)).primary.category == "healthy"
    # two loss terms, or the same terms of an evaluation, are not
    assert len(parse_text("loss_disc=3.598, loss_gen=3.174\n").steps) == 0
    assert len(parse_text("validation: " + one).steps) == 0
    # a grad norm printed nan beside rows that log only losses: the rows cannot speak for it
    nan = "(trainer:581) WARNING: The grad norm is nan. Skipping updating the model.\n"
    row = "(trainer:636) INFO: 2epoch:train:12009-12640batch: iter_time=3.163e-04, loss=65.129, loss_att=124.079, loss_ctc=144.685, train_time=0.624\n"
    diag = analyze_run(parse_text(nan * 3 + row + nan * 2))
    assert diag.primary.category == "nan"
    # rows that log the grad norm themselves, finite, decide otherwise
    logged = row.replace("train_time=0.624", "grad_norm=1.25, train_time=0.624")
    assert analyze_run(parse_text(nan + logged)).primary.category != "nan"


def test_deit_and_maes_per_epoch_json_lines_are_rows():
    rows = "".join(json.dumps({"train_lr": 5e-4 - i * 1e-6, "train_loss": 3.59 - i * 0.01, "epoch": 147 + i,
                               "n_parameters": 11590840}) + "\n" for i in range(4))
    t = parse_text(rows).steps
    assert len(t) == 4 and t["loss"][1] == pytest.approx(3.58) and t["learning_rate"][0] == pytest.approx(5e-4)
    # the trainer's run summary (train_loss beside train_runtime) stays a summary, not a row
    summary = json.dumps({"train_runtime": 4744.9, "train_loss": 0.7364, "epoch": 3.0}) + "\n"
    assert len(parse_text(summary).steps) == 0


def test_a_numeric_csv_tables_column_that_ends_nan_is_nan():
    good = "".join(f"{200 + i},{4.4 - i * 0.01:.4f},{4.13 + i * 0.01:.4f},7.7,24.4\n" for i in range(6))
    bad = good + "206,nan,4.16,7.72,24.01\n207,nan,nan,1.0,5.0\n208,nan,nan,1.0,5.0\n"
    assert analyze_run(parse_text(bad)).primary.category == "nan"
    assert analyze_run(parse_text(good)).primary.category != "nan"
    # a data file with a missing value here and there is no metric gone nan
    data = "".join(f"{i},{'nan' if i % 3 == 0 else '5.1'},3.5,1.4,0.2\n" for i in range(1, 9))
    assert analyze_run(parse_text(data)).primary.category != "nan"


def test_transformers_notebook_table_pasted_from_colab_is_rows():
    tabbed = "Step\tTraining Loss\tValidation Loss\n" + "".join(
        f"{10 * i}\t{2.5 - i * 0.1:.6f}\tNo log\n" for i in range(1, 5))
    t = parse_text(tabbed).steps
    assert list(t["step"]) == [10, 20, 30, 40] and t["loss"][0] == pytest.approx(2.4)
    md = ("Step | Training Loss | reward | kl\n-- | -- | -- | --\n"
          + "".join(f"{i} | 0.{i}00000 | -17.25 | 0.00{i}\n" for i in range(1, 4)) + "4 | nan | -3.0 | nan\n")
    run = parse_text(md)
    assert len(run.steps) == 4 and math.isnan(run.steps["loss"][3])
    assert analyze_run(run).primary.category == "nan"
    # the same words in prose start no table
    assert len(parse_text("Step  Training Loss went down\n1  2\n").steps) == 0


def test_a_kl_printed_nan_beside_rows_that_log_no_kl_is_nan():
    rows = "".join("{'loss': %.2f, 'learning_rate': 1e-05, 'epoch': 0.%d}\n" % (2 - i * 0.1, i) for i in range(1, 5))
    d = analyze_run(parse_text("step 10 kl: nan\n" + rows))
    assert d.features["nan_printed_unlogged"] is True and d.primary.category == "nan"
    # rows that carry the kl themselves speak for it
    with_kl = rows.replace("'epoch'", "'kl': 0.01, 'epoch'")
    assert analyze_run(parse_text("step 10 kl: nan\n" + with_kl)).features["nan_printed_unlogged"] is False


def test_a_learning_rate_decayed_past_any_use_is_named_from_the_rows():
    rows = "".join(f"iter {i}: loss={2.0 - i * 0.1:.2f}, lr={lr}, time=0.5s\n"
                   for i, lr in enumerate(["1e-4", "1e-60", "7.05e-111", "3e-140"]))
    d = analyze_run(parse_text(rows))
    assert d.primary.rule == "CFG029" and d.features["lr_vanished"] == pytest.approx(3e-140)
    # a schedule ending at 0 (warm-up starts there, cosine ends there) is not this
    ended = rows.replace("1e-60", "1e-6").replace("7.05e-111", "1e-7").replace("3e-140", "0.0")
    assert analyze_run(parse_text(ended)).primary.rule != "CFG029"


def test_generic_rows_take_their_step_from_counters_beside_unnamed_loss_terms():
    # a GAN trainer's print: '[Epoch e/E] [Batch b/B] [G - gan1: x, rec: y] [D - real: z]' - no key names a loss
    g = GenericRows()
    for i in range(4):
        assert g.feed(i + 1, f"[Epoch 11/11] [Batch {3811 + 10 * i}/3880] [G - gan1: {6.83 + i / 1000:.3f}, "
                             f"rec: 0.151, kld: 0.0976] [D - real: 0.428, fake1: 0.016]")
    by_line = {ln: r.values for ln, r in g.rows()}
    assert by_line[2]["step"] == 3821
    h = GenericRows()
    for i in range(4):  # named numbers with no counter and no loss are not a step row
        assert not h.feed(i + 1, f"[G - gan1: {6.83 + i / 1000:.3f}, rec: 0.151, kld: 0.0976]")


def test_a_stable_baselines3_logger_dump_is_one_row():
    # stable-baselines3 common/logger.py HumanOutputFormat: a dashed rule, '| key | value |' under '| section/ |', a rule
    def dump(t, loss):
        return ["-" * 33, "| time/              |          |", f"|    total timesteps | {t:<8} |",
                "|    fps             | 71       |", "| train/             |          |",
                f"|    actor_loss      | {loss:<8} |", "|    critic_loss     | 2.08     |",
                "|    ent_coef_loss   | -0.0491  |", "|    learning_rate   | 0.0003   |", "-" * 33]
    g = GenericRows()
    lines = dump(200, 7.2) + dump(400, 6.9) + dump(600, "nan")
    for i, ln in enumerate(lines, 1):
        assert g.feed(i, ln)
    rows = [r.values for _, r in g.rows()]
    assert [r["step"] for r in rows] == [200, 400, 600] and rows[0]["lr"] == pytest.approx(3e-4)
    h = GenericRows()  # a Markdown table is not a dump
    for i, ln in enumerate(["| model | acc |", "|---|---|", "| a | 1 |"], 1):
        assert not h.feed(i, ln)
    assert h.rows() == []
