"""Issue #20: the readers fuzzed with hypothesis (log text, flight recorder dumps, records, samples files, launch
scripts and their configs).  Whatever the bytes, a command exits 0, 1, 2 or 3 (never 70, never a traceback), in
bounded time and memory.  Runs in this process (no interpreter start-up per example); the whole file stays under
a minute."""
from __future__ import annotations

import json
import pickle
import resource
import shutil
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import FIXTURES
from tests.secutil import OOM_LINE, SECRETS, sd, secret_log

FUZZ = settings(max_examples=100, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.data_too_large])
EXAMPLE_S = 30.0  # one example, every command of it
GROWTH_MB = 600  # how far one example may raise this process's peak memory


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _ok(p, what) -> None:
    assert p.returncode in (0, 1, 2, 3), (what, p.returncode, p.stderr[-1500:])
    assert "internal error" not in p.stderr and "Traceback" not in p.stderr, (what, p.stderr[-1500:])
    if p.returncode in (2, 3):
        assert p.stderr.startswith("error: ") and len(p.stderr.strip().splitlines()) <= 2, (what, p.stderr[-1500:])


class _Bounded:
    """Time and peak-memory bounds around one example."""

    def __enter__(self):
        self.t, self.mb = time.monotonic(), _peak_mb()
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            assert time.monotonic() - self.t < EXAMPLE_S, "an example took too long"
            assert _peak_mb() - self.mb < GROWTH_MB, "an example raised the peak memory too far"


# ---- log text ---------------------------------------------------------------------------------------------------

_PIECES = [
    OOM_LINE, "Traceback (most recent call last):\n", '  File "train.py", line 3, in <module>\n',
    "RuntimeError: boom\n", "{'loss': 1.5, 'grad_norm': nan, 'learning_rate': 1e-4, 'epoch': 0.1, "
    "'global_step/max_steps': '3/10', 'memory(GiB)': 70.1, 'train_speed(iter/s)': 0.5}\n",
    '{"loss": Infinity, "global_step/max_steps": "4/10"}\n', "[INFO:swift] swift.__version__: 3.12.4\n",
    "run sh: `python sft.py --model m --hub_token hf_AbCdEfGhIjKlMnOpQrStUvWxYz012 \\ --x`\n",
    "Train:  15%|█▌        | 3/20 [00:02<00:15,  1.13it/s]\r", "NET/IB : " * 50 + "\n", "NCCL WARN " * 30 + "plugin\n",
    "[rank1]:[E ProcessGroupNCCL.cpp:1] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, "
    "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600001 milliseconds before timing out.\n",
    "\x1b]0;title\x07\x1b[2J\x1b]52;c;aGk=\x07\n", "> [1743] 2024-01-14T17:41:37Z [rank3]: Killed\n", "\x00\x01\x02",
    "ENV HF_TOKEN=hf_ZZZZZZZZZZZZZZZZZZZZZZZZZZ\n", "exitcode  : -9 (pid: 12)\n", "用户 数据 🙂\n", "\r\n", "\\",
    "[/b] [bold red] [link=file:///etc/passwd]x[/link]\n", "x" * 3000 + "\n", "{'loss': \n", "Epoch 1: 50%|",
]


@FUZZ
@given(parts=st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=80)), max_size=40),
       enc=st.sampled_from(["utf-8", "utf-16", "latin-1"]), fmt=st.sampled_from(["text", "json", "markdown"]))
def test_log_text(tmp_path_factory, parts, enc, fmt):
    d = tmp_path_factory.mktemp("log")
    log = d / "train.log"
    log.write_bytes("".join(parts).encode(enc, "replace"))
    with _Bounded():
        for args in (["analyze", str(log), "--format", fmt, "--save", str(d / "rec.json")], ["parse", str(log)],
                     ["analyze", "-", "--format", fmt]):
            p = sd(*args, stdin=log.read_bytes())
            _ok(p, args)
            for s in (*SECRETS[:3], "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012", "hf_ZZZZZZZZZZZZZZZZZZZZZZZZZZ"):
                assert s not in p.stdout and s not in p.stderr
            if (d / "rec.json").exists():
                assert "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012" not in (d / "rec.json").read_text()


# ---- flight recorder dumps --------------------------------------------------------------------------------------

_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(min_value=10**30, max_value=10**40),
                  st.floats(), st.text(max_size=20), st.binary(max_size=20))
_value = st.recursive(_leaf, lambda kids: st.one_of(st.lists(kids, max_size=5), st.tuples(kids, kids),
                                                     st.dictionaries(st.text(max_size=8), kids, max_size=4)),
                      max_leaves=30)
_entry = st.fixed_dictionaries({}, optional={
    "pg_id": st.one_of(st.integers(), st.text(max_size=5), _value), "collective_seq_id": st.one_of(st.integers(), _value),
    "profiling_name": st.one_of(st.text(max_size=30), _value), "input_sizes": _value, "state": _value,
    "frames": st.one_of(st.lists(st.dictionaries(st.sampled_from(["name", "filename", "line"]), _value), max_size=3),
                        _value), "is_p2p": _value})


@FUZZ
@given(entries=st.lists(st.one_of(_entry, _value), max_size=6), status=_value, version=_value,
       cut=st.integers(min_value=0, max_value=400), flip=st.binary(max_size=8), as_json=st.booleans())
def test_flight_recorder_dumps(tmp_path_factory, entries, status, version, cut, flip, as_json):
    d = tmp_path_factory.mktemp("fr")
    doc = {"version": version, "pg_config": {}, "pg_status": status, "entries": entries}
    if as_json:
        raw = json.dumps(doc, default=repr).encode()
    else:
        raw = pickle.dumps(doc, protocol=4)
        if flip and cut < len(raw):  # damage it: bytes replaced past the head
            raw = raw[:max(cut, 40)] + flip + raw[max(cut, 40) + len(flip):]
    (d / "nccl_trace_rank_0").write_bytes(raw)
    (d / "nccl_trace_rank_1").write_bytes(pickle.dumps({"version": "2.4", "pg_config": {}, "entries": entries[:1]}))
    with _Bounded():
        _ok(sd("analyze", str(d / "nccl_trace_rank_0"), str(d / "nccl_trace_rank_1"), "--format", "json"), "dump")


# ---- records ------------------------------------------------------------------------------------------------------

_RECORD: dict = {}


def _record() -> dict:
    if not _RECORD:
        import tempfile
        from pathlib import Path

        with tempfile.TemporaryDirectory() as t:
            src = Path(t) / "run"
            shutil.copytree(FIXTURES / "multinode_kill_4x", src)
            assert sd("analyze", str(src), "--save", str(Path(t) / "r.json")).returncode == 0
            _RECORD.update(json.loads((Path(t) / "r.json").read_text()))
    return json.loads(json.dumps(_RECORD))


def _paths(doc, prefix=()):
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield prefix + (k,)
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:3]):
            yield prefix + (i,)
            yield from _paths(v, prefix + (i,))


@FUZZ
@given(data=st.data(), fmt=st.sampled_from(["text", "json", "markdown"]))
def test_records(tmp_path_factory, data, fmt):
    doc = _record()
    paths = list(_paths(doc))
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        path = data.draw(st.sampled_from(paths))
        parent = doc
        try:
            for k in path[:-1]:
                parent = parent[k]
            if data.draw(st.booleans()):
                del parent[path[-1]]
            else:
                parent[path[-1]] = data.draw(_value)
        except (KeyError, IndexError, TypeError):
            continue
    rec = tmp_path_factory.mktemp("rec") / "r.json"
    rec.write_text(json.dumps(doc, default=repr))
    with _Bounded():
        _ok(sd("analyze", "--load", str(rec), "--format", fmt), "record")
        _ok(sd("fleet", str(rec), "--format", "json", "--jobs", "1", "--no-progress"), "fleet record")


# ---- samples files ------------------------------------------------------------------------------------------------

_gpu = st.fixed_dictionaries({"index": st.one_of(st.integers(0, 3), _value)}, optional={
    k: st.one_of(st.floats(), st.integers(), _value) for k in ("util_gpu_pct", "mem_used_mib", "mem_total_mib",
                                                              "power_w", "sm_clock_mhz", "temp_c", "throttle_mask")})
_sample = st.fixed_dictionaries({"kind": st.sampled_from(["sample", "mark", "end", "header", "x"])}, optional={
    "t": st.one_of(st.floats(), st.integers(), _value), "gpus": st.one_of(st.lists(_gpu, max_size=3), _value),
    "event": st.sampled_from(["step", "gpus"]), "step": _value, "xid": _value,
    "schema": st.sampled_from(["swiftdoc-samples/1", "x"])})


@FUZZ
@given(records=st.lists(_sample, max_size=8), garbage=st.text(max_size=40))
def test_samples_files(tmp_path_factory, records, garbage):
    d = tmp_path_factory.mktemp("samples")
    (d / "train.log").write_text(secret_log())
    head = {"kind": "header", "schema": "swiftdoc-samples/1", "gpus": [{"index": 0, "name": "A100"}]}
    lines = [json.dumps(r, default=repr) for r in [head, *records]] + [garbage]
    (d / "swiftdoc-samples.jsonl").write_text("\n".join(lines) + "\n")
    with _Bounded():
        _ok(sd("analyze", str(d / "train.log"), "--format", "json"), "samples")


# ---- launch scripts and their configs ---------------------------------------------------------------------------

_TOKENS = ["swift", "sft", "rlhf", "megatron", "torchrun", "--nproc_per_node", "4", "--model", "m", "--dataset",
           "d.jsonl", "--train_type", "lora", "--per_device_train_batch_size", "$BS", "\\\n", "\n", "for x in 1 2; do",
           "done", "if", "then", "fi", "export", "BS=2", "'", '"', "${ARR[@]}", "ARGS=(", ")", "a.yaml", "&&", "|",
           "#", "--learning_rate=1e-4", "--deepspeed", "ds.json", "CUDA_VISIBLE_DEVICES=0,1", "\x00", "`", "$(", "; "]
_CONFIG = st.one_of(st.just("model: m\ndataset: d\ntrain_type: lora\n"), st.text(max_size=200),
                    st.just("a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\nmodel: m\n"),
                    st.just("[" * 5000 + "]" * 5000))


@FUZZ
@given(tokens=st.lists(st.sampled_from(_TOKENS), max_size=40), cfg=_CONFIG, fix=st.booleans())
def test_launch_scripts(tmp_path_factory, tokens, cfg, fix):
    d = tmp_path_factory.mktemp("script")
    script = d / "train.sh"
    script.write_text(" ".join(tokens) + "\n")
    (d / "a.yaml").write_text(cfg)
    with _Bounded():
        _ok(sd("lint", str(script), "--swift-version", "4.6.0", "--no-swift-check", *(["--fix"] if fix else [])),
            "lint")
        _ok(sd("patch", str(script), "--swift-version", "4.6.0", "--no-swift-check", "--set", "learning_rate=1e-5"),
            "patch")
        _ok(sd("lint", str(d / "a.yaml"), "--swift-version", "4.6.0", "--no-swift-check"), "lint config")
    assert [p.name for p in d.iterdir() if p.name.endswith(".swiftdoc-tmp")] == []


@pytest.mark.parametrize("name", ["nan_4x", "multinode_kill_4x"])
def test_fuzz_fixtures_still_analyse(name):
    """The bounds above are not so tight that real captures trip them."""
    p = sd("analyze", str(FIXTURES / name), "--format", "json")
    assert p.returncode == 0, p.stderr
