"""Property tests for the script editor: byte preservation, read-back and idempotence.

GIVEN a generated launch script (indentation, `\\` spacing, LF or CRLF, comments, exports,
inline env, quoted values with spaces/JSON, multi-value flags, a trailing redirection)
AND random flag/env changes
WHEN the plan is applied
THEN every line the change does not touch is still there, byte for byte and in order,
     the edited script reads back to the planned argv and env,
     and planning the same changes again finds nothing to do.
"""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diagnose.engine import RemedyOp
from diagnose.patch.edit import apply_to_script
from diagnose.patch.launch import read_launch
from diagnose.patch.models import Request
from diagnose.patch.plan import plan_patch
from diagnose.patch.shell import lex_script, shell_quote
from diagnose.patch.source import effective_from_argv, plan_for_launch

FLAGS = {
    "--model": st.sampled_from(["Qwen/Qwen2.5-7B-Instruct", "/models/qwen 7b", "$MODEL"]),
    "--tuner_type": st.sampled_from(["lora", "full"]),
    "--dataset": st.lists(st.sampled_from(["a.jsonl", "AI-ModelScope/alpaca-gpt4-data-zh#500", "data dir/b.jsonl"]),
                          min_size=1, max_size=3),
    "--per_device_train_batch_size": st.integers(1, 16).map(str),
    "--gradient_accumulation_steps": st.integers(1, 16).map(str),
    "--dataloader_num_workers": st.integers(0, 8).map(str),
    "--model_kwargs": st.just('{"fps_max_frames": 12}'),
    "--system": st.just("You are a helpful assistant."),
    "--max_length": st.sampled_from(["1024", "2048", "4096"]),
    "--torch_dtype": st.sampled_from(["bfloat16", "float16"]),
}


@st.composite
def scripts(draw):
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    indent = draw(st.sampled_from(["  ", "    ", "\t"]))
    sp = draw(st.sampled_from([" ", "  "]))
    multiline = draw(st.booleans())
    names = draw(st.lists(st.sampled_from(sorted(FLAGS)), min_size=1, max_size=7, unique=True))
    quote = draw(st.sampled_from(["'", '"']))
    lines = ["#!/bin/bash", "# generated launch script  ", "MODEL=Qwen/Qwen2.5-1.5B"]
    if draw(st.booleans()):
        lines.append("export NCCL_IB_DISABLE=1")
    if draw(st.booleans()):
        lines.append("")
    prefix = draw(st.sampled_from(["", "CUDA_VISIBLE_DEVICES=0 ", "NPROC_PER_NODE=2 CUDA_VISIBLE_DEVICES=0,1 "]))
    head = prefix + "swift sft"
    parts = []
    for n in names:
        v = draw(FLAGS[n])
        vals = v if isinstance(v, list) else [v]
        parts.append(" ".join([n, *(shell_quote(x, quote) if "$" not in x else f'"{x}"' for x in vals)]))
    tail = draw(st.sampled_from(["", " 2>&1 | tee train.log", " > train.log 2>&1"]))
    if multiline:
        body = [head + sp + "\\"]
        for k, p in enumerate(parts):
            last = k == len(parts) - 1
            body.append(indent + p + ("" if last else sp + "\\"))
        body[-1] += tail
        lines += body
    else:
        lines.append(" ".join([head, *parts]) + tail)
    lines.append("echo done  # trailing comment")
    return eol.join(lines) + eol


CHANGES = st.lists(st.one_of(
    st.tuples(st.just("set"), st.sampled_from(["dataloader_num_workers", "max_length", "torch_dtype", "packing",
                                               "attn_impl", "gradient_checkpointing"]),
              st.sampled_from(["4", "2048", "bfloat16", "true", "flash_attn", "false"])),
    st.tuples(st.just("set_env"), st.sampled_from(["NCCL_P2P_DISABLE", "PYTORCH_CUDA_ALLOC_CONF", "NCCL_IB_DISABLE"]),
              st.sampled_from(["1", "expandable_segments:True"])),
    st.tuples(st.just("remove"), st.sampled_from(["max_length", "system", "model_kwargs", "dataloader_num_workers"]),
              st.just("")),
    st.tuples(st.just("halve_batch_keep_global"), st.just(""), st.just("")),
), max_size=5)

_VALID = {("dataloader_num_workers", "4"), ("max_length", "2048"), ("torch_dtype", "bfloat16"), ("packing", "true"),
          ("packing", "false"), ("attn_impl", "flash_attn"), ("gradient_checkpointing", "true"),
          ("gradient_checkpointing", "false")}


def _requests(changes) -> list[Request]:
    out = []
    for op, name, value in changes:
        if op == "set":
            if (name, value) not in _VALID:
                continue
            out.append(Request(op=RemedyOp(op="set", flag=name, value=value), effect="safe", rule="T001", title="t"))
        elif op == "set_env":
            out.append(Request(op=RemedyOp(op="set_env", env=name, value=value), effect="safe", rule="T002", title="t"))
        elif op == "remove":
            out.append(Request(op=RemedyOp(op="remove", flag=name), effect="safe", rule="T003", title="t"))
        else:
            out.append(Request(op=RemedyOp(op="halve_batch_keep_global"), effect="changes-training", rule="T004",
                               title="t"))
    return out


def _touched_lines(text: str, plan) -> set[int]:
    """1-based lines an edit may rewrite: those holding a changed occurrence or env var, the command's first and
    last lines (env prefix / appended flags), and the line before the command (export lines)."""
    launch = read_launch(text)
    touched = {launch.line, launch.end_line, max(1, launch.line - 1)}
    at = {c.at for c in plan.changes if c.at is not None}
    from diagnose.patch.argv import split_argv

    _, occs = split_argv(launch.argv)
    for o in occs:
        if o.index in at:
            for i in [o.index, *o.value_indexes]:
                ln = launch.sources[i].line
                touched |= {ln, ln - 1} if ln else set()
    for c in plan.changes:
        if c.env and c.env in launch.env:
            touched.add(launch.env[c.env].line)
    touched.add(launch.end_line - 1)
    return touched


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scripts(), CHANGES)
def test_edit_preserves_bytes_reads_back_and_is_idempotent(text, changes):
    reqs = _requests(changes)
    launch = read_launch(text)
    base = effective_from_argv(launch.argv, "4.6.0", "sft")
    plan = plan_for_launch(launch, reqs, "4.6.0", effective=base)
    new = apply_to_script(text, plan)
    # byte preservation: untouched lines survive verbatim and in order
    old_lines = text.splitlines(keepends=True)
    new_lines = new.splitlines(keepends=True)
    touched = _touched_lines(text, plan)
    it = iter(new_lines)
    for n, line in enumerate(old_lines, 1):
        if n in touched:
            continue
        assert any(line == cand for cand in it), (n, line)
    # line endings are the script's own
    if "\r\n" in text:
        assert new.count("\n") == new.count("\r\n")
    # read back: the edited script is the planned command
    back = read_launch(new)
    assert sorted(back.argv) == sorted(plan.argv)
    for c in plan.changes:
        if c.env:
            assert back.env[c.env].value == c.new
    # idempotence: the same requests against the same diagnosed run change nothing more
    plan2 = plan_for_launch(back, reqs, "4.6.0", effective=base)
    assert [c for c in plan2.changes] == [], [c.model_dump() for c in plan2.changes]
    assert apply_to_script(new, plan2) == new


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=12),
                min_size=1, max_size=6),
       st.sampled_from(["", "'", '"']))
def test_shell_quote_round_trips_through_the_lexer(words, like):
    line = "swift sft " + " ".join(shell_quote(w, like) for w in words) + "\n"
    cmd = lex_script(line).commands[0]
    assert [w.value for w in cmd.words[2:]] == words


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(sorted(FLAGS)), min_size=1, max_size=6, unique=True))
def test_plan_without_requests_is_the_identity(names):
    argv: list[str] = []
    for n in names:
        argv += [n, "x"] if n not in ("--per_device_train_batch_size", "--gradient_accumulation_steps",
                                      "--dataloader_num_workers", "--max_length", "--torch_dtype", "--tuner_type") else \
            [n, {"--torch_dtype": "bfloat16", "--tuner_type": "lora"}.get(n, "2")]
    plan = plan_patch(argv, {}, None, "4.6.0")
    assert plan.changes == [] and plan.argv == argv
