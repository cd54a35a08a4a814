"""Event features: what errors the logs show, where, and where the run stopped.

Units: `_count` are occurrences (rank repeats folded), `_line` a 1-based line.
"""
from __future__ import annotations

import re

from diagnose.features.registry import Ctx, feature
from diagnose.parse.events import KINDS as SIGNATURE_KINDS
from diagnose.parse.events import ORDINARY_KINDS

FAMILY = "events"
KINDS = tuple(SIGNATURE_KINDS) + ("traceback", "traceback_cut", "nan")
# kinds that say something stopped the run (the others are warnings, consequences or context)
_NOT_STOPPING = {"nan", "allocator_flush", "cache_emptied", "traceback", "traceback_cut", "ddp_inactive", "closing_signal", "index_build",
                 "shards_one", "dataloader_oversubscribed", "nccl_native_frame", "dns_fail", "argv_backslash", "nccl_info", "dataset_error",
                 "video_decode_fallback", "video_torchvision", "labels_masked", "gpu_unusable",
                 "logged_error", "samples_too_long", *ORDINARY_KINDS}  # broken_media stops a run: not in this set


def _ref(e) -> tuple[str | None, int]:
    """Evidence is (file, line): with several captures, an event's line is in its own file."""
    return e.file, e.line


def _events(ctx: Ctx, kind: str):
    return [e for e in ctx.run.events if e.kind == kind]


def _make(kind: str):
    def fn(ctx: Ctx):
        evs = _events(ctx, kind)
        n = sum(int(e.detail.get("repeats", 1)) for e in evs) if kind != "nan" else len(evs)
        return n, [_ref(e) for e in evs[:5]]

    return fn


for _k in KINDS:
    feature(f"{_k}_count", "count", f"Number of `{_k}` events found in the logs (repeats from several ranks folded).", FAMILY)(_make(_k))


@feature("error_event_count", "count", "Events that stop a run (not warnings, consequences such as the launcher's closing signals, or tracebacks).", FAMILY)
def _errors(ctx: Ctx):
    return sum(1 for e in ctx.run.events if e.kind not in _NOT_STOPPING)


@feature("cause_event_count", "count",
         "Stopping events that name a cause (OOM, NCCL, signal, ...): not the launcher's report that a worker failed.", FAMILY)
def _causes(ctx: Ctx):
    return sum(1 for e in ctx.run.events if e.kind not in _NOT_STOPPING and e.kind not in ("worker_failed", "child_failed"))


@feature("fatal_traceback", "text",
         "Exception that ended the run: the last traceback matching no specific signature, with its chained causes "
         "('The above exception was the direct cause ...'), innermost last.", FAMILY)
def _tb(ctx: Ctx):
    evs = _events(ctx, "traceback")
    if not evs:
        return None
    last = evs[-1]
    causes = last.detail.get("causes") or []
    text = last.text
    if causes:  # the chain, root first: 'JSON parse error ... in row 50' is what to fix, not the wrapper
        text += " <- caused by: " + " <- ".join(c["text"] for c in reversed(causes))
    return text, [(last.file, c["line"]) for c in causes][-2:] + [_ref(last)]


def _watchdog(ctx: Ctx):
    evs = [e for e in _events(ctx, "nccl_timeout") if e.detail]
    return evs[0] if evs else None


@feature("collective_timeout_s", "s", "The timeout the NCCL watchdog reports for the collective it caught (Timeout(ms)).",
         FAMILY)
def _coll_timeout(ctx: Ctx):
    e = _watchdog(ctx)
    return (e.detail["timeout_s"], [_ref(e)]) if e is not None and e.detail.get("timeout_s") else None


@feature("watchdog_op", "text", "The collective the NCCL watchdog caught: op, sequence number and the rank that reported it.",
         FAMILY)
def _watchdog_op(ctx: Ctx):
    e = _watchdog(ctx)
    if e is None:
        return None
    d = e.detail
    parts = [d["op"]] if d.get("op") else []
    if d.get("seq") is not None:
        parts.append(f"#{d['seq']}")
    if d.get("numel_in") is not None:
        parts.append(f"{d['numel_in']} elements")
    if d.get("rank") is not None:
        parts.append(f"on rank {d['rank']}")
    if d.get("ran_s"):
        parts.append(f"after {d['ran_s']:.0f} s")
    return (" ".join(parts), [_ref(e)]) if parts else None


def _crash(ctx: Ctx):
    """The fatal exception as a typed object and what it means (parse.exceptions), once per run."""
    key = "crash_meaning"
    if key not in ctx.cache:
        from diagnose.parse.exceptions import classify, reports_worker, typed_exception

        evs = _events(ctx, "traceback")
        if evs:
            # a launcher's report of a failed worker (torchrun's ChildFailedError, torch.distributed.launch's
            # CalledProcessError) comes last; the worker's own exception before it says why
            workers = [e for e in evs if not reports_worker(typed_exception(e))]
            ev = workers[-1] if workers else evs[-1]
            exc = typed_exception(ev)
            got = classify(exc)
            if got is None and exc.module is None:
                # an exception line pasted without its frames (several ranks interleaved): the frames of a cut copy of
                # the traceback beside it say where it was raised
                lean = _cut_lean(ctx)
                if lean is not None:
                    m = lean[1]
                    m.confidence, m.explain = "probable", "raised where the other rank's copy of the traceback shows"
                    got = (m, exc)
            elif got is not None and got[0].reports_worker:
                # a launcher that prints the worker's traceback after its own (mp.spawn's ProcessRaisedException):
                # the worker's copy, when cut, still says where it was raised
                cuts = _events(ctx, "traceback_cut")
                lean = _cut_lean(ctx) if cuts and cuts[-1].line > ev.line else None
                if lean is not None:
                    ctx.cache[key] = lean
                    return lean
            ctx.cache[key] = (exc, got[0] if got else None, got[1] if got else None, ev)
        else:
            ctx.cache[key] = _logged_meaning(ctx) or _cut_lean(ctx)
    return ctx.cache[key]


def _logged_meaning(ctx: Ctx):
    """No traceback: the last error a logger printed whose message the table of exception meanings explains (as if
    it were an exception's message: message entries and shapes), no surer than probable - a logged error need not
    have stopped the run."""
    import dataclasses

    from diagnose.parse.exceptions import TypedException, classify

    for ev in reversed(_events(ctx, "logged_error")):
        level = ev.detail.get("level", "ERROR")
        exc = TypedException(level, ev.detail.get("message", ""), line=ev.line, qualified=f"logged {level}",
                             logged=True)
        got = classify(exc)
        if got is not None:
            m = got[0]
            if m.confidence == "certain":
                m = dataclasses.replace(m, confidence="probable")
            return exc, m, exc, ev
    return None


def _cut_lean(ctx: Ctx):
    """A traceback cut before its exception line: the category its innermost frames lean to (a module-only entry of
    parse/exceptions.yaml), weak; None when no frame says anything."""
    from diagnose.parse.exceptions import Meaning, TypedException, classify, classify_one

    cuts = _events(ctx, "traceback_cut")
    if not cuts:
        return None
    ev = cuts[-1]
    stack = tuple(ev.detail.get("stack") or ())
    frames = ev.detail.get("frames") or []
    last_code = str(frames[-1].get("code") or "") if frames else ""
    raised = _RAISE_STMT.match(last_code)
    if raised:
        # cut at the raise statement itself ('raise RuntimeError(f" > Detected NaN'): the statement names the class
        # and begins the message - read as that exception, one step less sure than the exception line would be
        cls, msg = raised.group(1).rsplit(".", 1)[-1], raised.group(2) or ""
        msg = re.sub(r"[\"']\s*(?:[,%].*)?\)?\s*$", "", msg)  # the literal's closing quote and the call's tail
        exc = TypedException(cls, msg.strip(), frames[-1].get("file"), frames[-1].get("func"), ev.line, stack=stack)
        got = classify(exc)
        if got is not None and not got[0].generic:
            m = got[0]
            lean = Meaning(id=m.id, category=m.category, confidence="weak" if m.confidence == "weak" else "probable",
                           explain="the traceback is cut at the raise statement, which names what was raised: "
                                   + m.explain)
            return exc, lean, exc, ev
    if frames and _IMPORT_STMT.match(last_code):
        # the last frame was running an import: what follows is an ImportError/ModuleNotFoundError, or an error the
        # imported module raised at import time - a package missing or of another version
        probe = TypedException("", "", frames[-1].get("file"), frames[-1].get("func"), ev.line, stack=stack)
        lean = Meaning(id="cut_in_import", category="config", confidence="weak",
                       explain="the traceback is cut while a module was being imported: most often a package that "
                               "is missing or of another version")
        return probe, lean, probe, ev
    for fr in reversed(frames):
        # the frame itself, then the function its source line was calling ('dataset = get_dataset(...)')
        funcs = [fr.get("func")] + _callees(fr.get("code") or "")
        for func in funcs:
            probe = TypedException("", "", fr.get("file"), func, ev.line, stack=stack)
            m = classify_one(probe) or classify_one(probe, shape=True)
            if m is not None and m.generic:
                lean = Meaning(id=m.id, category=m.category, confidence="weak",
                               explain="the traceback is cut before its exception line: only where it was raised is known")
                return probe, lean, probe, ev
    if frames and _NEXT_BATCH.search(last_code):
        # cut while the training loop fetched its next batch ('for batch in train_dataloader:', 'next(self._iterator)')
        probe = TypedException("", "", frames[-1].get("file"), frames[-1].get("func"), ev.line, stack=stack)
        lean = Meaning(id="cut_fetching_batch", category="data_loading", confidence="weak",
                       explain="the traceback is cut while the loop was fetching its next batch from the data loader")
        return probe, lean, probe, ev
    # the DataLoader anywhere in the stack (a worker's exception re-raised by _process_data, a dataset being built):
    # the stack-wide shapes of the table, as for a whole traceback, weak
    if stack:
        probe = TypedException("", "", None, None, ev.line, stack=stack)
        m = classify_one(probe, shape=True)
        if m is not None and m.via is not None:
            lean = Meaning(id=m.id, category=m.category, confidence="weak",
                           explain="the traceback is cut before its exception line; its stack runs through the data "
                                   "pipeline (" + m.explain + ")")
            return probe, lean, probe, ev
    if frames:
        last = frames[-1]
        names = [str(last.get("func") or "")] + _callees(last_code)
        if any(_COLLECTIVE_FN.match(n) for n in names if n):
            # cut inside a collective (DeepSpeed's _broadcast_model, DDP's _sync_params_and_buffers, a barrier)
            probe = TypedException("", "", last.get("file"), last.get("func"), ev.line, stack=stack)
            lean = Meaning(id="cut_in_collective", category="nccl", confidence="weak",
                           explain="the traceback is cut inside a collective (broadcast, all-reduce, barrier) between "
                                   "the ranks")
            return probe, lean, probe, ev
    steps_before = len(ctx.run.steps) and bool((ctx.run.steps["line"] < ev.line).any())
    # a row error the preprocessor reported and handled ('There are errors in the dataset, the data will be deleted':
    # ms-swift logs the row's traceback and drops the row) is not a crash of the pass
    handled = any(e.line <= ev.line for e in _events(ctx, "dataset_error"))
    prep = "" if steps_before or handled else ctx.run.unfinished_preprocess(before=ev.line, started=True)
    if prep:
        # nothing in the frames, but the text was in the middle of a preprocessing pass when the traceback began
        probe = TypedException("", "", None, None, ev.line, stack=stack)
        lean = Meaning(id="cut_in_preprocessing", category="data_loading", confidence="weak",
                       explain=f"the traceback is cut, and it began while the dataset was being preprocessed ({prep})")
        return probe, lean, probe, ev
    return None


# a frame's source line that is a raise statement: the class and the start of its message literal
_RAISE_STMT = re.compile(r"^raise\s+([A-Za-z_][\w.]{0,80})\s*\(\s*(?:[rfbu]{0,2}[\"'](.{0,300}))?")
# a frame's source line that takes the next batch from a data loader (iterating it, or next() on its iterator)
_NEXT_BATCH = re.compile(r"^for\s+[^\n]{1,80}?\s+in\s+[^\n]{0,60}?(?:data_?loader|data_?iter|loader\b|batch(?:es)?_iter)"
                         r"|^\w[\w.]{0,40}\s*=\s*next\(\s*[\w.]{0,40}(?:loader|iter)\w*\s*\)"
                         r"|^return\s+next\(\s*self\._(?:iterator|data_iter|loader_iter)\s*\)", re.I)
# the collectives and the helpers around them that frames run in when ranks exchange tensors
_COLLECTIVE_FN = re.compile(r"^_?(?:broadcast\w*|all_?reduce\w*|all_?gather\w*|reduce_scatter\w*|barrier|monitored_barrier"
                            r"|_broadcast_model|_sync_params(?:_and_buffers)?|_sync_module_states|sync_module_states"
                            r"|_broadcast_coalesced|init_process_group|new_group)$")
_IMPORT_STMT = re.compile(r"^(?:from\s+\.*[\w.]*\s+import\b|import\s+[\w.]+)")


def _callees(code: str) -> list[str]:
    """The functions a frame's source line calls, outermost first ('x = get_dataset(a, f(b))' -> get_dataset, f)."""
    import re

    return [m.rsplit(".", 1)[-1] for m in re.findall(r"([A-Za-z_][\w.]*)\s*\(", code)][:3]


@feature("crash_category", "enum",
         "What the fatal exception means, from its class, message and raising module (parse/exceptions.yaml): config, "
         "data_loading, oom, nccl, nan, interrupted, bus_error; 'other' for a crash no entry explains.", FAMILY)
def _crash_category(ctx: Ctx):
    c = _crash(ctx)
    if c is None:
        return None
    exc, meaning, _link, ev = c
    return (meaning.category if meaning else "other"), [_ref(ev)]


@feature("crash_confidence", "enum", "How sure the meaning of the fatal exception is (the table entry's own).", FAMILY)
def _crash_conf(ctx: Ctx):
    c = _crash(ctx)
    if c is None or c[1] is None:
        return None
    return c[1].confidence


@feature("crash_exception", "text", "The fatal exception: class, message and where it was raised (the cause that decided "
                                    "its meaning, when a chained one did).", FAMILY)
def _crash_exc(ctx: Ctx):
    c = _crash(ctx)
    if c is None:
        return None
    exc, _m, link, ev = c
    text = (link or exc).describe()
    return (text[:300] + ("…" if len(text) > 300 else "")), [_ref(ev)]


@feature("crash_explain", "text", "What the fatal exception means, in one line (parse/exceptions.yaml).", FAMILY)
def _crash_explain(ctx: Ctx):
    c = _crash(ctx)
    return c[1].explain if c is not None and c[1] is not None and c[1].explain else None


@feature("nan_printed_after_rows", "bool",
         "A metric printed as nan (nan_printed) on a line after the last step row: the rows end before it, so they "
         "cannot show it (a cut row, a trainer's own message after the table).", FAMILY)
def _nan_after(ctx: Ctx):
    evs = _events(ctx, "nan_printed")
    last = _last_row_line(ctx)
    if not evs or last is None:
        return None
    later = [e for e in evs if e.file in (None, ctx.run.line_file) and e.line > last]
    return (True, [_ref(later[0])]) if later else False


def _last_row_line(ctx: Ctx) -> float | None:
    """The line of the last step row (in the run's main capture), None without rows."""
    t = ctx.run.steps
    return float(t["line"][-1]) if len(t) else None


_NAN_METRIC = (("grad_norm", ("grad norm", "grad_norm", "gradnorm", "gnorm")), ("kl", ("kl",)), ("reward", ("reward",)))


@feature("nan_printed_unlogged", "bool",
         "A metric printed as nan (nan_printed) that the step rows do not log (a grad norm printed nan beside rows of "
         "losses only, ESPnet's 'The grad norm is nan. Skipping updating the model.'): the rows cannot speak for it.",
         FAMILY)
def _nan_unlogged(ctx: Ctx):
    evs = _events(ctx, "nan_printed")
    t = ctx.run.steps
    if not evs or not len(t):
        return None
    for e in evs:
        low = e.text.lower()
        col = next((c for c, words in _NAN_METRIC if any(w in low for w in words)), "loss")
        # loss and grad norm are columns of the rows; kl and rewards are metrics the rows may carry by name
        logged = t.has(col) if col in ("loss", "grad_norm") else any(
            col in k.split("/")[-1] for k in ctx.run.metric_ranges)
        if not logged:
            return True, [_ref(e)]
    return False


_HANDLED_MEDIA = re.compile(r"(?i)\b(?:ignor(?:e|ed|ing)|skip(?:s|ped|ping)?|handling \w+ error|continu(?:e|ing))\b")


@feature("broken_media_skipped", "bool",
         "Every media decoding error (broken_media) was on a line saying the pipeline handled it (webdataset's "
         "'Handling webdataset error (...). Ignoring.', a loader's 'skipping') and step rows go on after the last "
         "one: samples were dropped, the run did not stop.", FAMILY)
def _media_skipped(ctx: Ctx):
    evs = _events(ctx, "broken_media")
    if not evs:
        return None
    handled = all(_HANDLED_MEDIA.search(e.text) for e in evs)
    last = _last_row_line(ctx)
    later = last is not None and last > max(e.line for e in evs)
    return (handled and later), [_ref(evs[-1])]


@feature("oom_capacity_gib", "GiB", "GPU capacity quoted by a CUDA OOM message ('total capacity of X GiB').", FAMILY)
def _oom_cap(ctx: Ctx):
    for e in _events(ctx, "cuda_oom"):
        if "capacity_gib" in e.detail:
            return e.detail["capacity_gib"], [_ref(e)]
    return None


@feature("oom_other_procs_frac", "", "Share of the GPU that other processes held when a CUDA OOM struck (torch lists each "
         "'Process N has X GiB memory in use' beside this process's own).", FAMILY)
def _oom_others(ctx: Ctx):
    for e in _events(ctx, "cuda_oom"):
        cap, others = e.detail.get("capacity_gib"), e.detail.get("others_gib")
        if cap and others is not None:
            return round(others / cap, 4), [_ref(e)]
    return None


@feature("oom_other_procs_gib", "GiB", "Memory other processes held on the GPU when a CUDA OOM struck.", FAMILY)
def _oom_others_gib(ctx: Ctx):
    return _first_detail(ctx, "cuda_oom", "others_gib")


@feature("oom_self_gib", "GiB", "Memory the failing process itself held (torch's 'this process has X memory in use').",
         FAMILY)
def _oom_self(ctx: Ctx):
    return _first_detail(ctx, "cuda_oom", "self_gib")


@feature("oom_tried_gib", "GiB", "Allocation that failed in the first CUDA OOM ('Tried to allocate X').", FAMILY)
def _oom_tried(ctx: Ctx):
    for e in _events(ctx, "cuda_oom"):
        if "tried_gib" in e.detail:
            return e.detail["tried_gib"], [_ref(e)]
    return None


def _phase_at(ctx: Ctx, line: int) -> str:
    """Where in the run a line sits: before_step_1, first_step, eval, save, mid_run."""
    run = ctx.run
    t = run.steps
    before = t["line"][t["line"] < line] if len(t) else []
    if len(before) == 0:
        # an excerpt without steps does not show whether training had started
        return "before_step_1" if run.header_line is not None else "not_shown"
    last_step_line = float(before[-1])
    ev_lines = [e.get("_line") for e in run.evals if isinstance(e.get("_line"), int)]
    if any(last_step_line < el < line for el in ev_lines):
        return "eval"
    saves = [c for c in run.checkpoints if c.get("line") and last_step_line < c["line"] < line]
    if saves:
        return "save"
    steps_before = t["step"][t["line"] < line]
    last_step = float(steps_before[-1]) if len(steps_before) else float("nan")
    if last_step == last_step:  # the step counter decides: one row at step 500/1000 in an excerpt is mid-run
        return "first_step" if last_step <= 1 else "mid_run"
    return "first_step" if len(before) <= 1 else "mid_run"


def _step_before(ctx: Ctx, line: int) -> int | None:
    t = ctx.run.steps
    if not len(t):
        return None
    steps = t["step"][t["line"] < line]
    steps = steps[steps == steps]
    return int(steps[-1]) if len(steps) else None


@feature("oom_phase", "enum", "Where the first CUDA OOM happened: before_step_1, first_step, mid_run, eval, save, or not_shown (an excerpt without the start or any step).", FAMILY)
def _oom_phase(ctx: Ctx):
    evs = _events(ctx, "cuda_oom")
    if not evs:
        return None
    return _phase_at(ctx, evs[0].line), [_ref(evs[0])]


@feature("oom_after_step", "step", "The last training step logged before the first CUDA OOM.", FAMILY)
def _oom_after(ctx: Ctx):
    evs = _events(ctx, "cuda_oom")
    if not evs:
        return None
    st = _step_before(ctx, evs[0].line)
    return (st, [_ref(evs[0])]) if st is not None else None


_NODE_LOST = "a node of the job lost (Ray marked it dead: missed heartbeats)"  # stop_signal's value for a lost node


@feature("stop_signal", "text", "Signal that ended the run (SIGTERM, SIGHUP, SIGINT, SIGKILL) when the logs say so.", FAMILY)
def _sig(ctx: Ctx):
    closing = {(e.file, e.line) for e in _events(ctx, "closing_signal")}
    run = ctx.run
    for e in _events(ctx, "signal"):
        if run.ended and run.end_line is not None and e.line > run.end_line and e.file in (None, run.line_file):
            continue  # after the run's own end (its summary, 'End time of running main'): the user closing the app
        if "received by PID" in e.text and any(f == e.file and ln < e.line for f, ln in closing):
            continue  # torchrun's table: a rank it stopped itself (its 'closing signal') after another rank failed
        name = e.detail.get("name") or {1: "SIGHUP", 2: "SIGINT", 9: "SIGKILL", 15: "SIGTERM"}.get(e.detail.get("signal"))
        if name is None and "marked dead" in e.text:
            name = _NODE_LOST
        return (name or "signal"), [_ref(e)]
    # torchrun's agent stops its workers with SIGTERM after one failed (LocalElasticAgent._shutdown's default); it
    # sends any other signal only when it received that one itself (agent/server/api.py: 'Received %s death signal',
    # then self._shutdown(e.sigval)): 'closing signal SIGHUP' is the hang-up the launching shell got
    for e in _events(ctx, "closing_signal"):
        name = e.detail.get("name")
        if name in ("SIGHUP", "SIGINT", "SIGQUIT", "SIGUSR1", "SIGUSR2"):
            return f"{name} (torchrun forwarded it to its workers)", [_ref(e)]
    return None


@feature("stop_node_lost", "bool", "The stop was a node of the job going away (Ray's 'has been marked dead because the "
         "detector has missed too many heartbeats'), not a signal to this process.", FAMILY)
def _node_lost(ctx: Ctx):
    sig = _sig(ctx)
    if sig is None:
        return None
    return sig[0] == _NODE_LOST, sig[1]


@feature("run_ended", "bool", "The run finished: the final summary dict or 'End time of running main' was printed.", FAMILY)
def _ended(ctx: Ctx):
    return bool(ctx.run.ended)


@feature("stop_phase", "enum", "Where an unfinished run stopped: before_step_1, first_100_steps, mid_run, at_save, or not_shown (an excerpt).", FAMILY)
def _stop_phase(ctx: Ctx):
    run = ctx.run
    t = run.steps
    last_step = (t.last() or {}).get("step") if len(t) else None
    if run.ended and (run.max_steps is None or last_step is None or last_step >= run.max_steps):
        return None  # it ran to its end (a run stopped by a signal also prints its end: it stopped short)
    if not len(t):
        return "before_step_1" if run.header_line is not None else "not_shown"
    last_line = int(t["line"][-1])
    if any(c.get("line") and c["line"] > last_line for c in run.checkpoints):
        return "at_save", [last_line]
    last = t.last() or {}
    step = last.get("step")
    if step is not None and step <= 100:
        return "first_100_steps", [last_line]
    return "mid_run", [last_line]


@feature("last_checkpoint", "path", "Newest checkpoint the logs show was saved (resume point).", FAMILY)
def _ckpt(ctx: Ctx):
    cps = [c for c in ctx.run.checkpoints if c.get("path")]
    if not cps:
        return None
    best = max(cps, key=lambda c: (c.get("step") or -1))
    return best["path"], [best["line"]] if best.get("line") else []


@feature("live", "bool", "The job is still running (attach): an unfinished log is not an interruption.", FAMILY)
def _live(ctx: Ctx):
    return bool(ctx.options.live)


_CONFIG_ERRORS = [
    ("deepspeed_device_map", ("DeepSpeed is not compatible with `device_map`", "DeepSpeed is not compatible with device_map",
                              "DeepSpeed is not compatible with MP", "DeepSpeed Zero-3 is not compatible with `low_cpu_mem_usage")),
    ("device_map_distributed", ("loaded with `device_map='auto'` in any distributed mode",)),
    ("invalid_flag_value", ("is not a valid",)),
    ("packing_needs_flash", ('"packing" feature requires a flash attention', "packing\" needs to be used in conjunction",
                             "You are using packing, but the attention implementation is not set to")),
    ("padding_free_needs_flash", ('"padding_free" feature requires a flash attention', "padding_free\" needs to be used in conjunction")),
    ("packing_lazy_tokenize", ("Packing and lazy_tokenize are incompatible",)),
    ("streaming_lazy_tokenize", ("Streaming and lazy_tokenize are incompatible",)),
    ("liger_device_map", ("liger_kernel does not support device_map",)),
    ("max_steps_required", ("max_steps", "streaming")),
]


@feature("config_error", "enum", "A known configuration error message ms-swift raised (deepspeed_device_map, packing_needs_flash, ...).", FAMILY)
def _cfg_err(ctx: Ctx):
    for e in ctx.run.events:
        if e.kind not in ("traceback", "bad_args", "config_error"):
            continue
        for name, needles in _CONFIG_ERRORS:
            if name == "max_steps_required":
                if "max_steps" in e.text and "streaming" in e.text.lower():
                    return name, [_ref(e)]
                continue
            if any(n in e.text for n in needles):
                return name, [_ref(e)]
    return None


@feature("config_error_message", "text", "The configuration error's own message (the event `config_error` names).", FAMILY)
def _cfg_msg(ctx: Ctx):
    for e in ctx.run.events:
        if e.kind in ("traceback", "bad_args", "config_error"):
            for _name, needles in _CONFIG_ERRORS:
                if any(n in e.text for n in needles):
                    return e.text[:300], [_ref(e)]
    return None


@feature("rejected_flags", "list", "Flags the argument parser refused (ms-swift's `remaining_argv: [...]`, argparse's "
         "'error: argument --x: ...'; the error itself when it names no flag).", FAMILY)
def _rejected(ctx: Ctx):
    import re

    out: list[str] = []
    lines: list[int] = []
    for e in ctx.run.events:
        if e.kind == "bad_args":
            flags = re.findall(r"'(--[\w.-]+)'", e.text)  # ms-swift's remaining_argv: ['--x', ...]
            if not flags and "error:" in e.text:  # argparse's 'PROG: error: argument --x: expected one argument'
                msg = e.text.split("error:", 1)[1]
                flags = re.findall(r"(?<![\w-])(--?[A-Za-z][\w.-]*)", msg) or [msg.strip()[:200]]
            out += [f for f in flags if f not in out]
            lines.append(_ref(e))
    return (out, lines) if out else ([] if ctx.run.recognized else None)


@feature("recognized", "bool", "Something ms-swift-specific (or a known error signature) was found in the input.", FAMILY)
def _recog(ctx: Ctx):
    return bool(ctx.run.recognized)


_WHERE = (
    # (name, substrings of a frame's file or function): where a traceback whose exception line is missing was
    ("swift_args", ("parse_args", "x_main", "_parse_args", "/argument", "arguments/", "hf_argparser",
                    # SwiftPipeline.__init__ parses the arguments before anything else (4.x pipelines/base.py, 3.x
                    # llm/base.py); a cut paste may end mid-name
                    "swift/pipelines/base.py __init", "swift/llm/base.py __init")),
    ("elastic_launcher", ("torch/distributed/run.py", "distributed/elastic/agent", "launcher/api.py", "rendezvous")),
    ("checkpoint_save", ("save_checkpoint", "_save_checkpoint", "checkpoint_and_decide_exit", "save_model")),
    ("dataloader", ("torch/utils/data/", "_next_data", "dataloader")),
    ("model_load", ("from_pretrained", "load_state_dict", "safe_open")),
)


_STDLIB_WAITS = ("/multiprocessing/", "/threading.py", "/queue.py", "/selectors.py", "/socket.py", "/subprocess.py",
                 "/concurrent/futures/")


@feature("traceback_cut_where", "enum",
         "Where a traceback whose exception line is missing from the text stopped: swift_args, elastic_launcher, "
         "checkpoint_save, dataloader, model_load or other (its last frames).", FAMILY)
def _cut_where(ctx: Ctx):
    evs = _events(ctx, "traceback_cut")
    if not evs:
        return None
    return _where(evs[-1])


@feature("signal_where", "enum",
         "Where the process was when a signal stopped it, from the frames of the traceback that ended in it "
         "(KeyboardInterrupt): swift_args, elastic_launcher, checkpoint_save, dataloader, model_load or other.", FAMILY)
def _signal_where(ctx: Ctx):
    evs = [e for e in _events(ctx, "signal") if e.detail.get("frames")]
    return _where(evs[-1]) if evs else None


def _where(e) -> tuple[str, list]:
    """The stage of a traceback's last frames (`_WHERE`), the standard library's waits skipped."""
    frames = list(e.detail.get("frames") or [])
    # a process waiting is deepest in the standard library's waits (a queue, a pipe, a lock): where it waits is
    # the last frame of the code that called them
    while len(frames) > 1 and any(w in str(frames[-1].get("file", "")) for w in _STDLIB_WAITS):
        frames.pop()
    for frame in reversed(frames[-3:]):
        hay = f"{frame.get('file', '')} {frame.get('func', '')}"
        for name, needles in _WHERE:
            if any(n in hay for n in needles):
                return name, [_ref(e)]
    return "other", [_ref(e)]


@feature("capture_whole", "bool",
         "The text holds the start of the run (the launch echo, the start marker, the version line or the args dump): "
         "a capture, not an excerpt, so a missing end means the run stopped.", FAMILY)
def _whole(ctx: Ctx):
    return ctx.run.header_line is not None


@feature("excerpt", "bool", "The text is a fragment: neither the start nor the end of the run is in it.", FAMILY)
def _excerpt(ctx: Ctx):
    return ctx.run.header_line is None and not ctx.run.ended


def _first_detail(ctx: Ctx, kind: str, key: str):
    for e in _events(ctx, kind):
        if key in e.detail:
            return e.detail[key], [_ref(e)]
    return None


@feature("dataloader_workers_created", "count", "DataLoader workers torch warned about as more than the CPUs allow "
         "('This DataLoader will create N worker processes in total').", FAMILY)
def _workers_created(ctx: Ctx):
    return _first_detail(ctx, "dataloader_oversubscribed", "workers")


@feature("dataloader_workers_suggested", "count", "The most DataLoader workers torch suggests for the CPUs this process "
         "may use ('Our suggested max number of worker in current system is M').", FAMILY)
def _workers_suggested(ctx: Ctx):
    return _first_detail(ctx, "dataloader_oversubscribed", "suggested")


@feature("streaming_shards", "count", "Shards of the streamed dataset, from datasets' 'Too many dataloader workers' warning.", FAMILY)
def _shards(ctx: Ctx):
    return _first_detail(ctx, "shards_one", "n_shards")


@feature("index_build_s", "s", "Longest time Megatron spent building one dataset index map at start-up, when printed.",
         FAMILY)
def _index_s(ctx: Ctx):
    evs = [e for e in _events(ctx, "index_build") if e.detail.get("seconds") is not None]
    if not evs:
        return None
    e = max(evs, key=lambda x: x.detail["seconds"])
    return e.detail["seconds"], [_ref(e)]


@feature("native_crash_name", "text", "What killed the process from native code: the signal (SIGSEGV, SIGABRT, SIGFPE, "
                                     "SIGILL) or the CUDA kernel fault.", FAMILY)
def _native_name(ctx: Ctx):
    return _first_detail(ctx, "native_crash", "name")


@feature("worker_exitcode", "code", "Exit code of the first worker torchrun reported as failed.", FAMILY)
def _wexit(ctx: Ctx):
    return _first_detail(ctx, "worker_failed", "exitcode")
