"""The rank that failed first in one capture of several ranks (issue #9's first part), and its consequences."""
from __future__ import annotations

from pathlib import Path

import pytest

from diagnose.parse import parse_run, parse_text
from diagnose.pipeline import analyze_run
from tests.conftest import FIXTURES

RW = FIXTURES / "realworld" / "cases"

INTERLEAVED = """\
{'loss': 1.21, 'grad_norm': 0.8, 'learning_rate': 1e-05, 'token_acc': 0.7, 'epoch': 0.3, 'global_step/max_steps': '120/400', 'elapsed_time': '20m', 'remaining_time': '47m', 'memory(GiB)': 78.9, 'train_speed(s/it)': 10.0}
[rank2]: Traceback (most recent call last):
[rank2]:   File "/x/swift/trainers/mixin.py", line 500, in training_step
[rank2]:     loss.backward()
[rank2]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 2 has a total capacity of 79.14 GiB of which 1.23 GiB is free.
[rank0]:[E1121 10:41:14.1 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5521, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800087 milliseconds before timing out.
[rank1]:[E1121 10:41:14.1 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5521, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800091 milliseconds before timing out.
[rank3]:[E1121 10:41:14.1 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5521, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800095 milliseconds before timing out.
W1121 10:41:15.0 1234 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 41 closing signal SIGTERM
W1121 10:41:15.0 1234 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 42 closing signal SIGTERM
"""


def test_the_rank_with_its_own_error_is_the_culprit_the_timeouts_are_consequences():
    run = parse_text(INTERLEAVED)
    d = analyze_run(run)
    assert d.primary.category == "oom"  # the cause, not the NCCL noise after it
    assert d.culprit["rank"] == 2 and d.culprit["category"] == "oom" and d.culprit["line"] == 5
    ranks = sorted(c["rank"] for c in d.consequences if c["rank"] is not None)
    assert ranks == [0, 1, 3]
    assert any("SIGTERM" in c["kind"] and "2 process(es)" in c["kind"] for c in d.consequences)


def test_torchruns_root_cause_names_the_rank_and_host():
    d = analyze_run(parse_run([str(RW / "014_bus_error.log")]))
    assert d.culprit["rank"] == 0 and d.culprit["host"] == "32a68c302449" and "SIGBUS" in d.culprit["kind"]
    assert d.culprit["time"] == "2023-04-14_06:35:35"
    assert [c["rank"] for c in d.consequences if c["rank"] is not None] == [1]


def test_rank_tagged_oom_before_the_launchers_sigterm():
    d = analyze_run(parse_run([str(RW / "009_oom.log")]))
    assert d.culprit["rank"] == 1 and d.culprit["category"] == "oom"
    assert any("SIGTERM" in c["kind"] for c in d.consequences)


def test_no_culprit_when_every_rank_only_times_out():
    d = analyze_run(parse_run([str(RW / "050_nccl.log")]))
    assert d.culprit is None and d.primary.category == "nccl"


def test_a_single_process_run_has_no_culprit():
    d = analyze_run(parse_run([str(FIXTURES / "nan_4x")]))
    assert d.culprit is None and d.consequences == []


def test_real_two_node_job_names_the_killed_node_and_the_consequence():
    """fixtures/multinode_kill_4x: a real NNODES=2 gloo job, node 1's worker SIGKILLed after step 12."""
    run = parse_run([str(FIXTURES / "multinode_kill_4x")])
    assert run.nodes == {str(FIXTURES / "multinode_kill_4x" / "node0.log"): 0,
                         str(FIXTURES / "multinode_kill_4x" / "node1.log"): 1}
    d = analyze_run(run)
    cu = d.culprit
    assert (cu["rank"], cu["node"]) == (1, 1) and "SIGKILL" in cu["kind"] and cu["file"].endswith("node1.log")
    assert [(c["rank"], c["node"]) for c in d.consequences if c["rank"] is not None] == [(0, 0)]
    assert d.primary.category == "oom" and d.primary.confidence == "probable"
    oom = next(f for f in d.findings if f.rule == "OOM002")
    assert {r["file"].rsplit("/", 1)[-1] for r in oom.refs} >= {"node1.log"}  # evidence cites its own file
    # the per-rank view: rank 0 logged up to step 13 and then lost its peer; rank 1 was killed, per torchrun's table
    rows = {r["rank"]: r for r in d.ranks}
    assert sorted(rows) == [0, 1]
    assert (rows[0]["node"], rows[0]["last_step"]) == (0, 13) and rows[0]["first_error"].startswith("nccl_error")
    assert rows[0]["file"].endswith("node0.log") and rows[1]["file"].endswith("node1.log")
    assert rows[1]["last_step"] is None and "SIGKILL" in rows[1]["first_error"] and rows[1]["last_time"]


def test_rank_table_lists_every_rank_the_text_names_with_its_first_error():
    d = analyze_run(parse_text(INTERLEAVED))
    rows = {r["rank"]: r for r in d.ranks}
    assert sorted(rows) == [0, 1, 2, 3]
    assert rows[2]["first_error"].startswith("cuda_oom") and rows[2]["line"] == 5
    assert rows[0]["first_error"].startswith("nccl_timeout") and rows[0]["last_step"] == 120


def test_a_single_rank_has_no_rank_table():
    assert analyze_run(parse_run([str(FIXTURES / "nan_4x")])).ranks == []


def _watchdog(rank: int, seq: int, op: str = "ALLREDUCE", numel: int = 1, pg: int = 0) -> str:
    return (f"[rank{rank}]:[E1121 10:41:14.1 ProcessGroupNCCL.cpp:632] [PG ID {pg} PG GUID {pg}(default_pg) Rank {rank}] "
            f"Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={numel}, "
            f"NumelOut={numel}, Timeout(ms)=1800000) ran for 1800087 milliseconds before timing out.")


def test_the_rank_behind_in_the_collective_sequence_is_named():
    text = "\n".join([_watchdog(0, 5521), _watchdog(1, 5521), _watchdog(2, 5520), _watchdog(3, 5521)]) + "\n"
    d = analyze_run(parse_text(text))
    assert d.culprit["rank"] == 2 and d.culprit["confidence"] == "probable" and "5520" in d.culprit["summary"]
    assert sorted(c["rank"] for c in d.consequences if c["rank"] is not None) == [0, 1, 3]


def test_a_desync_at_the_same_seqnum_is_said_so():
    text = "\n".join([_watchdog(0, 77, "ALLREDUCE", 1024), _watchdog(1, 77, "BROADCAST", 8)]) + "\n"
    d = analyze_run(parse_text(text))
    assert d.culprit["rank"] is None and "desynchronised at SeqNum 77" in d.culprit["kind"]


def test_several_process_groups_without_names_are_not_compared():
    d = analyze_run(parse_run([str(RW / "044_nccl.log")]))  # rank 0 reports three SeqNums: other process groups
    assert d.culprit is None


def test_real_two_node_job_whose_node_launcher_got_sigterm_names_that_node():
    """fixtures/multinode_sigterm_4x: two nodes in their own network namespaces (node-a, node-b); node 1's torchrun
    got SIGTERM after step 12 and printed no failure table - only its "Received 15 death signal"."""
    run = parse_run([str(FIXTURES / "multinode_sigterm_4x")])
    d = analyze_run(run)
    cu = d.culprit
    assert (cu["rank"], cu["node"], cu["category"]) == (1, 1, "interrupted") and cu["file"].endswith("node1.log")
    assert "SIGTERM" in cu["kind"] and cu["time"].startswith("11-23 ")
    # node 0's torchrun table (rank 0 failed in gloo, host node-a) is the consequence, not the cause
    assert [(c["rank"], c["node"]) for c in d.consequences] == [(0, 0)]
    assert d.primary.category == "interrupted" and d.primary.rule == "INT001"
    rows = {r["rank"]: r for r in d.ranks}
    assert sorted(rows) == [0, 1] and rows[1]["first_error"].startswith("interrupted") and rows[0]["last_step"] == 12


def test_real_two_node_job_whose_rank_raised_names_it_and_diagnoses_its_own_error():
    """fixtures/multinode_raise_4x: rank 1 (node-b) raised a RuntimeError in its training step at step 12."""
    d = analyze_run(parse_run([str(FIXTURES / "multinode_raise_4x")]))
    cu = d.culprit
    assert (cu["rank"], cu["node"], cu["host"]) == (1, 1, "node-b") and "RuntimeError: shard 7" in cu["kind"]
    assert cu["category"] == "unknown"  # an exception of the job's own, not the gloo error that followed on rank 0
    assert [(c["rank"], c["node"]) for c in d.consequences] == [(0, 0)]
    assert "Connection closed by peer" in d.consequences[0]["kind"]
    # the primary finding is the culprit's own failure (the exception), ranked above rank 0's NCCL/gloo error
    assert d.primary.rule == "GEN001" and d.findings[0].rule == "GEN001"


def test_a_launcher_signal_in_a_single_capture_makes_no_culprit():
    # one capture (one node) interrupted by Ctrl-C: nothing to order across nodes
    d = analyze_run(parse_run([str(FIXTURES / "multinode_sigterm_4x" / "node1.log")]))
    assert d.culprit is None


def test_the_real_flight_recorder_dumps_name_the_rank_behind():
    """fixtures/hang_2rank_4x: rank 1 stopped at step 3; each rank's flight recorder (torch's own pickle)."""
    d = analyze_run(parse_run([str(FIXTURES / "hang_2rank_4x")]))
    cu = d.culprit
    assert cu["rank"] == 1 and cu["confidence"] == "certain" and cu["file"].endswith("nccl_trace_rank_1")
    assert "#42 gloo:broadcast" in cu["summary"] and "#41" in cu["kind"]
    assert [(c["rank"], c["kind"].split(" (")[0]) for c in d.consequences] == [(0, "waits in collective #42 gloo:broadcast")]
    # the dumps alone say the same
    alone = analyze_run(parse_run([str(FIXTURES / "hang_2rank_4x" / f"nccl_trace_rank_{r}") for r in (0, 1)]))
    assert alone.culprit["rank"] == 1


def _fr_json(tmp_path, rank: int, seq: int, op: str, sizes) -> str:
    import json

    p = tmp_path / f"nccl_trace_rank_{rank}"
    p.write_text(json.dumps({"version": "2.10", "pg_config": {}, "pg_status": {"0": {"last_enqueued_collective": seq}},
                             "entries": [{"collective_seq_id": seq, "pg_id": 0, "profiling_name": op,
                                          "input_sizes": sizes, "state": "scheduled", "is_p2p": False}]}))
    return str(p)


def test_flight_recorder_dumps_at_the_same_collective_with_different_ops_are_a_desync(tmp_path):
    paths = [_fr_json(tmp_path, 0, 77, "nccl:all_reduce", [[1024]]), _fr_json(tmp_path, 1, 77, "nccl:broadcast", [[8]])]
    cu = analyze_run(parse_run(paths)).culprit
    assert cu["rank"] is None and "desynchronised at collective #77" in cu["kind"]
    assert "rank 0: nccl:all_reduce" in cu["summary"] and "rank 1: nccl:broadcast" in cu["summary"]


def test_a_pickle_that_names_a_class_is_refused_not_run(tmp_path):
    import pickle

    from diagnose.errors import InputError
    from diagnose.parse.flight_recorder import read_dump

    class Boom:
        def __reduce__(self):
            return (print, ("ran",))

    p = tmp_path / "nccl_trace_rank_0"
    p.write_bytes(pickle.dumps({"entries": [Boom()], "pg_config": {}}))
    with pytest.raises(InputError, match="holds no objects"):
        read_dump(p)


def test_torchruns_per_rank_log_folders_give_each_file_its_rank():
    """fixtures/torchrun_logdir_4x: torchrun --log-dir --redirects 3 --tee 3; rank 1 raised at step 12."""
    logs = FIXTURES / "torchrun_logdir_4x" / "torchrun_logs"
    run = parse_run([str(logs)])  # the log dir alone: <run id>/attempt_0/<local rank>/std{out,err}.log
    assert sorted(Path(s).parent.name + "/" + Path(s).name for s in run.sources) == [
        "0/stderr.log", "0/stdout.log", "1/stderr.log"]  # rank 1's stdout.log is empty
    d = analyze_run(run)
    cu = d.culprit
    assert cu["rank"] == 1 and cu["file"].endswith("attempt_0/1/stderr.log") and "shard 7" in cu["kind"]
    assert [c["rank"] for c in d.consequences] == [0] and d.primary.rule == "GEN001"
    rows = {r["rank"]: r for r in d.ranks}
    assert rows[0]["file"].endswith("0/stderr.log") and rows[0]["last_step"] == 12
    # the console copy: torchrun's `[default1]:` tag is the rank
    tee = analyze_run(parse_run([str(FIXTURES / "torchrun_logdir_4x" / "train.log")]))
    assert tee.culprit["rank"] == 1 and {r["rank"] for r in tee.ranks} == {0, 1}


@pytest.mark.parametrize("line,text,rank", [
    ("[default3]:[rank3]: RuntimeError: boom", "RuntimeError: boom", 3),
    ("[default1]:Train:  30%|███       | 12/40", "Train:  30%|███       | 12/40", 1),
    ("[default0]:", "", 0),
    ("[rank2]:[default2]:x", "x", 2),
    ("default0: not a tag", "default0: not a tag", None),
    ("(head, rank=0, pid=4773) AssertionError", "AssertionError", 0),  # SkyPilot's node prefix
    ("(worker1, rank=1, pid=2769, ip=10.100.10.12) [rank9]: x", "x", 9),  # the process's own tag is finer
    ("(see rank=1 below) x", "(see rank=1 below) x", None),
])
def test_torchrun_tee_tags_are_the_local_rank(line, text, rank):
    from diagnose.parse.prefix import strip_paste

    assert strip_paste(line) == (text, rank)


@pytest.mark.parametrize("line,text", [
    ("0: Traceback (most recent call last):", "Traceback (most recent call last):"),
    ('0:   File "/opt/train.py", line 595, in train', '  File "/opt/train.py", line 595, in train'),
    ("12: RuntimeError: DataLoader worker exited", "RuntimeError: DataLoader worker exited"),
    ("100: loss 0.2", "100: loss 0.2"),  # a custom print of a step, not srun's task number
    ("12:30:45 started", "12:30:45 started"),
])
def test_sruns_task_number_goes_before_a_tracebacks_lines(line, text):
    from diagnose.parse.prefix import strip_paste

    assert strip_paste(line)[0] == text


def test_a_cut_traceback_whose_stack_runs_through_the_dataloader_leans_data_loading():
    from diagnose.parse.run import parse_text

    text = """0: Traceback (most recent call last):
0:   File "/proj/weathergen/train/trainer.py", line 595, in train
0:     for bidx, batch in enumerate(dataset_iter):
0:   File "/proj/.venv/lib/python3.12/site-packages/torch/utils/data/dataloader.py", line 708, in __next__
0:     data = self._next_data()
0:   File "/proj/.venv/lib/python3.12/site-packages/torch/utils/data/dataloader.py", line 1505, in _process_data
0:     data.reraise()
0:   File "/p/proj
"""
    d = analyze_run(parse_text(text))
    assert (d.primary.category, d.primary.confidence) == ("data_loading", "weak")
    # the same cut stack in the model's forward says nothing
    fwd = (text.replace("torch/utils/data/dataloader.py", "torch/nn/modules/module.py").replace("__next__", "_call_impl")
           .replace("_process_data", "forward").replace("data.reraise()", "out = self.block(x)"))
    assert analyze_run(parse_text(fwd)).primary.category == "unknown"
