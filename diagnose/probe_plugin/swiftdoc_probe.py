"""swiftdoc's in-trainer probe: an ms-swift trainer callback that records where every optimizer step's time went.

Contract (this file is loaded BY ms-swift inside every training process; swiftdoc itself never imports it):
- Loading: `--external_plugins <this file>` (ms-swift 3.2+; `--custom_register_path` on 3.0/3.1).  Importing it
  registers the callback and does nothing else (no thread, no file, no torch import), because ms-swift 4.x
  replays plugin imports in spawned dataloader workers: on 4.x it adds `swiftdoc_probe` to
  `swift.callbacks.callbacks_map` (named by `--callbacks swiftdoc_probe`), on 3.x it appends one instance to
  `swift.plugin.extra_callbacks` (3.x has no `--callbacks`).  Without either, one line on stderr, nothing else.
- Output: `<args.output_dir>/swiftdoc-probe/rank<RANK>.jsonl` (`SWIFTDOC_PROBE_DIR` overrides the folder),
  opened for append: a header line (`"kind": "header"`, FORMAT, versions, world size, rank, node, pid, start
  time), one `"kind": "step"` line per optimizer step, an `"kind": "end"` line when training ends.  Lines are
  buffered and written by a daemon thread every FLUSH_S seconds (`SWIFTDOC_PROBE_FLUSH_S`), at train end and at
  exit, so a killed run keeps all but its last seconds.
- A step line: `step` (global step), `mono` (this rank's monotonic seconds since its header: durations and
  order within one rank, never compared across nodes), `wall_s` (step end to step end), `data_s` (time in the
  torch DataLoader iterator's `_next_data`: the host waiting for the next batch, every micro-batch of the step),
  `dispatch_s` (ms-swift's streaming dispatcher: time in its scatter of batches from rank 0; on rank 0 a wait for
  the peers, on the others a wait for rank 0's data), `host_s` (step begin to each forward, data excluded),
  `sync_s` (the data-parallel wrapper's forward to the model's: DDP broadcasting buffers from rank 0, a
  collective), `fwd_s` (the model's forward), `bwd_s` (forward end to the micro-step's end: backward, its DDP all-reduce
  waits, gradient clipping), `opt_s` (optimizer step), `micro`, `samples`, `tokens` (from the host-side batch:
  attention mask, else packed lengths), `rss_gib`; on CUDA `alloc_gib`, `reserved_gib`, `peak_gib` (allocator
  counters, no synchronisation; the peak is the running one: resetting it would change ms-swift's own
  `memory(GiB)`), and `gpu_fb_s`, `gpu_opt_s` from CUDA events read one step later only if already complete
  (`Event.query()`, never `synchronize`); `marks` lists `save` / `eval` when those ran inside the interval.
- Changes nothing in training: no RNG draw, no collective, no device synchronisation, no write to a tensor;
  any error inside the probe switches it off with one line on stderr and training goes on.
Standard library only at module level; torch is imported lazily (it is already loaded in the trainer).
"""
from __future__ import annotations

import atexit
import json
import os
import socket
import sys
import threading
import time

NAME = "swiftdoc_probe"
FORMAT = 1
PROBE_VERSION = "1.0"
FLUSH_S = float(os.environ.get("SWIFTDOC_PROBE_FLUSH_S", "2") or 2)
_GIB = float(1 << 30)
_perf = time.perf_counter


def _say(msg: str) -> None:
    sys.stderr.write(f"[swiftdoc probe] {msg}\n")


def _rank_env() -> tuple[int, int, int]:
    def num(*names: str, default: int) -> int:
        for n in names:
            v = os.environ.get(n)
            if v not in (None, ""):
                try:
                    return int(v)
                except ValueError:
                    pass
        return default

    return (num("RANK", default=0), num("WORLD_SIZE", default=1), num("LOCAL_RANK", default=0))


def _version_of(module: str, dist: str | None = None) -> str | None:
    m = sys.modules.get(module)
    v = getattr(m, "__version__", None) if m is not None else None
    if v is None and dist:
        try:
            from importlib.metadata import version

            v = version(dist)
        except Exception:  # noqa: BLE001 - metadata missing: the header says null
            v = None
    return str(v) if v is not None else None


class _RSS:
    """Resident set size of this process: /proc/self/statm (one pread of an open fd), else the peak from rusage."""

    def __init__(self) -> None:
        self.fd = None
        self.page = 4096
        try:
            self.fd = os.open("/proc/self/statm", os.O_RDONLY)
            self.page = os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, AttributeError):
            self.fd = None

    def gib(self) -> float | None:
        if self.fd is not None:
            try:
                return int(os.pread(self.fd, 128, 0).split()[1]) * self.page / _GIB
            except (OSError, ValueError, IndexError):
                return None
        try:
            import resource

            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / _GIB
        except Exception:  # noqa: BLE001
            return None

    def close(self) -> None:
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None


def count_batch(batch) -> tuple[int | None, int | None]:
    """(samples, tokens) of one collated host-side batch; (None, None) when it is not a dict of CPU tensors.

    tokens: the attention mask's ones, else every input id (a packed / padding-free batch has no padding);
    samples: the mask's rows, else the packed sequences (`cu_seq_lens_q`, or position ids restarting at 0).
    A tensor already on a device is never read (that would synchronise): only its shape is used."""
    if not isinstance(batch, dict):
        return None, None
    ids = batch.get("input_ids")
    mask = batch.get("attention_mask")
    shape_src = ids if ids is not None else mask
    if shape_src is None or not hasattr(shape_src, "shape"):
        return None, None
    on_cpu = getattr(getattr(shape_src, "device", None), "type", "cpu") == "cpu"
    samples = int(shape_src.shape[0]) if len(shape_src.shape) else None
    tokens = None
    if mask is not None and hasattr(mask, "dim") and mask.dim() == 2:
        tokens = int(mask.sum()) if on_cpu else int(mask.numel())
        samples = int(mask.shape[0])
    elif ids is not None:
        tokens = int(ids.numel())
        cu = batch.get("cu_seq_lens_q")
        pos = batch.get("position_ids")
        if cu is not None and hasattr(cu, "numel"):
            samples = max(int(cu.numel()) - 1, 0)
        elif pos is not None and on_cpu and hasattr(pos, "dim") and pos.dim() == 2 and pos.shape[0] == 1:
            samples = int((pos == 0).sum())
    return samples, tokens


class _Probe:
    """The callback body.  A subclass with ms-swift's (or transformers') TrainerCallback as base is registered."""

    def __init__(self, *args, **kwargs) -> None:  # 4.0: (trainer); 4.1+: (args, trainer); 3.x: ()
        self.trainer = next((a for a in args if hasattr(a, "callback_handler")), None)
        self.args = next((a for a in args if hasattr(a, "output_dir")), None)
        self.on = False
        self._file = None
        self._buf: list = []
        self._held = None  # a CUDA step record waiting one step for its events
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None
        self._owner = os.getpid()
        self._hooks: list = []
        self._rss = None
        self._cuda = None
        self._t0 = 0.0
        self._reset_step(_perf())

    # ------------------------------------------------------------------ state of one step
    def _reset_step(self, now: float) -> None:
        self._prev_end = now
        self._data = self._dispatch = self._host = self._sync = self._fwd = self._bwd = 0.0
        self._opt = None
        self._micro = 0
        self._fwd_n = 0
        self._samples = self._tokens = 0
        self._counted = False
        self._seg = None  # start of the current micro-step segment (None outside a step)
        self._seg_data = 0.0  # data time inside the current segment
        self._fwd_t0 = None
        self._outer_t0 = None  # the data-parallel wrapper's forward began (DDP syncs buffers before the model's)
        self._pre = None
        self._marks: list = []
        self._events = None

    def _fail(self, where: str, e: BaseException) -> None:
        self.on = False
        _say(f"switched off after an error in {where}: {type(e).__name__}: {e} (training is not affected)")

    # ------------------------------------------------------------------ setup
    def on_train_begin(self, args, state, control, **kw):
        try:
            self._begin(args, kw)
        except Exception as e:  # noqa: BLE001 - the probe must never stop training
            self._fail("on_train_begin", e)

    def _begin(self, args, kw) -> None:
        if self.on:
            return
        rank, world, local = _rank_env()
        out = os.environ.get("SWIFTDOC_PROBE_DIR") or os.path.join(str(getattr(args, "output_dir", None) or "."),
                                                                    "swiftdoc-probe")
        os.makedirs(out, exist_ok=True)
        self.path = os.path.join(out, f"rank{rank}.jsonl")
        self._file = open(self.path, "a", encoding="utf-8")
        torch = sys.modules.get("torch")
        dev = "cpu"
        if torch is not None and getattr(torch, "cuda", None) is not None and torch.cuda.is_available() \
                and torch.cuda.is_initialized():
            self._cuda = torch.cuda
            dev = f"cuda:{torch.cuda.current_device()}"
        self._rss = _RSS()
        loader = self._hook_loader(kw.get("train_dataloader"))
        self._hook_model(kw.get("model"), getattr(self.trainer, "model_wrapped", None))
        self._t0 = _perf()
        header = {
            "kind": "header", "swiftdoc_probe": PROBE_VERSION, "format": FORMAT, "rank": rank,
            "local_rank": local, "world_size": world, "node": socket.gethostname(),
            "node_rank": os.environ.get("GROUP_RANK") or os.environ.get("NODE_RANK"), "pid": os.getpid(),
            "start_time": round(time.time(), 3), "device": dev, "loader": loader,
            "launch": {k: os.environ.get(k) for k in ("MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
                                                        "TORCHELASTIC_RESTART_COUNT")},
            "output_dir": str(getattr(args, "output_dir", "") or ""),
            "grad_accum": getattr(args, "gradient_accumulation_steps", None),
            "micro_batch": getattr(args, "per_device_train_batch_size", None),
            "versions": {"python": sys.version.split()[0], "torch": _version_of("torch"),
                         "transformers": _version_of("transformers"), "ms-swift": _version_of("swift", "ms-swift")},
        }
        self._file.write(json.dumps(header) + "\n")
        self._file.flush()
        self._reset_step(_perf())
        self.on = True
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._flusher, name="swiftdoc-probe-flush", daemon=True)
        self._thread.start()
        atexit.register(self._close, "exit")

    def _hook_loader(self, dl) -> str | None:
        """Time the host-side fetch of every batch; 'dispatcher' (streaming: rank 0 fetches and scatters), 'loader'."""
        if dl is None:
            return None
        base = getattr(dl, "base_dataloader", None)
        scatter = getattr(dl, "_scatter_object_list", None)
        if base is not None and callable(scatter):  # ms-swift's DataLoaderDispatcher (streaming datasets)
            self._wrap_loader(base, count=False)
            probe = self

            def _scatter_object_list(inputs):
                t0 = _perf()
                try:
                    data = scatter(inputs)
                finally:
                    probe._dispatch += _perf() - t0
                if probe.on and data is not None:
                    probe._count(data)
                return data

            dl._scatter_object_list = _scatter_object_list
            self._hooks.append(lambda: dl.__dict__.pop("_scatter_object_list", None))
            return "dispatcher"
        return "loader" if self._wrap_loader(dl, count=True) else None

    def _wrap_loader(self, dl, count: bool) -> bool:
        get = getattr(dl, "_get_iterator", None)
        if not callable(get):
            return False
        probe = self

        def _get_iterator():
            it = get()
            nxt = it._next_data

            def _next_data():
                t0 = _perf()
                try:
                    batch = nxt()
                finally:
                    dt = _perf() - t0
                    probe._data += dt
                    probe._seg_data += dt
                if count and probe.on:
                    probe._count(batch)
                return batch

            it._next_data = _next_data
            return it

        dl._get_iterator = _get_iterator
        self._hooks.append(lambda: dl.__dict__.pop("_get_iterator", None))
        return True

    def _hook_model(self, model, wrapped=None) -> None:
        """Forward hooks on the model and on its data-parallel wrapper (DDP broadcasts buffers from rank 0 before
        the model's forward: a collective, timed apart as `sync_s`)."""
        if model is None or not hasattr(model, "register_forward_pre_hook"):
            return
        if wrapped is None and self.trainer is None and _rank_env()[1] > 1:
            wrapped = _wrapper_of(model)  # 3.x: no trainer to ask; a one-time walk of the model's referrers
        probe = self

        def outer_pre(_m, _inp):
            if probe._seg is None:
                probe._outer_t0 = None
                return
            now = _perf()
            probe._host += now - probe._seg - probe._seg_data
            probe._seg_data = 0.0
            probe._outer_t0 = now

        def pre(_m, _inp):
            if probe._seg is None:  # a forward outside a training step (evaluation): not this step's time
                probe._fwd_t0 = None
                return
            now = _perf()
            if probe._outer_t0 is not None:
                probe._sync += now - probe._outer_t0
                probe._outer_t0 = None
            else:
                probe._host += now - probe._seg - probe._seg_data
            probe._fwd_t0 = now

        def post(_m, _inp, _out):
            if probe._fwd_t0 is None or probe._seg is None:
                return
            now = _perf()
            probe._fwd += now - probe._fwd_t0
            probe._fwd_n += 1
            probe._fwd_t0 = None
            probe._seg = now
            probe._seg_data = 0.0

        handles = [model.register_forward_pre_hook(pre), model.register_forward_hook(post)]
        if wrapped is not None and wrapped is not model and hasattr(wrapped, "register_forward_pre_hook"):
            handles.append(wrapped.register_forward_pre_hook(outer_pre))
        self._hooks += [h.remove for h in handles]

    def _count(self, batch) -> None:
        try:
            s, t = count_batch(batch)
        except Exception:  # noqa: BLE001 - an odd batch type: no counts for it
            s = t = None
        self._micro += 1
        if s is not None:
            self._samples += s
            self._counted = True
        if t is not None:
            self._tokens += t

    # ------------------------------------------------------------------ the hot path: a few clock reads per step
    def on_step_begin(self, args, state, control, **kw):
        if self.on:
            now = _perf()
            self._seg = now
            self._seg_data = 0.0
            if self._cuda is not None:
                self._events = [self._event()]

    def on_substep_end(self, args, state, control, **kw):
        if self.on and self._seg is not None:
            now = _perf()
            self._bwd += now - self._seg - self._seg_data
            self._seg = now
            self._seg_data = 0.0

    def on_pre_optimizer_step(self, args, state, control, **kw):
        if self.on:
            now = _perf()
            if self._seg is not None:
                self._bwd += now - self._seg - self._seg_data
            self._seg = None
            self._pre = now
            if self._events is not None:
                self._events.append(self._event())

    def on_optimizer_step(self, args, state, control, **kw):
        if self.on and self._pre is not None:
            self._opt = _perf() - self._pre
            if self._events is not None:
                self._events.append(self._event())

    def on_save(self, args, state, control, **kw):
        if self.on:
            self._marks.append("save")

    def on_evaluate(self, args, state, control, **kw):
        if self.on:
            self._marks.append("eval")

    def on_step_end(self, args, state, control, **kw):
        if not self.on:
            return
        try:
            self._step_end(state)
        except Exception as e:  # noqa: BLE001
            self._fail("on_step_end", e)

    def _step_end(self, state) -> None:
        now = _perf()
        if self._seg is not None:  # no on_pre_optimizer_step in this transformers: backward + optimizer together
            self._bwd += now - self._seg - self._seg_data
        rec = {"kind": "step", "step": getattr(state, "global_step", None), "mono": round(now - self._t0, 6),
               "wall_s": round(now - self._prev_end, 6),
               "data_s": round(self._data, 6) if self._micro or self._data else None,  # None: no hooked fetch
               "host_s": round(self._host, 6) if self._fwd_n else None, "sync_s": round(self._sync, 6),
               "fwd_s": round(self._fwd, 6) if self._fwd_n else None, "bwd_s": round(self._bwd, 6),
               "opt_s": round(self._opt, 6) if self._opt is not None else None, "micro": self._micro,
               "samples": self._samples if self._counted else None, "tokens": self._tokens if self._counted else None,
               "rss_gib": self._rss.gib() if self._rss is not None else None}
        if self._dispatch:
            rec["dispatch_s"] = round(self._dispatch, 6)
        if self._marks:
            rec["marks"] = self._marks
        if rec["rss_gib"] is not None:
            rec["rss_gib"] = round(rec["rss_gib"], 4)
        cuda = self._cuda
        if cuda is not None:
            rec["alloc_gib"] = round(cuda.memory_allocated() / _GIB, 4)
            rec["reserved_gib"] = round(cuda.memory_reserved() / _GIB, 4)
            rec["peak_gib"] = round(cuda.max_memory_allocated() / _GIB, 4)
        events = self._events
        with self._lock:
            if self._held is not None:  # the previous step's events: read now if done, else never
                self._buf.append(_resolve(*self._held))
                self._held = None
            if events is not None and len(events) == 3:
                self._held = (rec, events)
            else:
                self._buf.append(rec)
        self._reset_step(now)

    def _event(self):
        ev = self._cuda.Event(enable_timing=True)
        ev.record()
        return ev

    # ------------------------------------------------------------------ writing
    def _flusher(self) -> None:
        while not self._stop.wait(FLUSH_S):
            self._flush()

    def _flush(self) -> None:
        if os.getpid() != self._owner:  # a forked child (a dataloader worker) never writes the parent's lines
            return
        with self._lock:
            buf, self._buf = self._buf, []
            f = self._file
        if not buf or f is None:
            return
        try:
            f.write("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in buf))
            f.flush()
        except (OSError, ValueError) as e:
            self._fail("writing " + getattr(self, "path", "its file"), e)

    def on_train_end(self, args, state, control, **kw):
        self._close("train_end")

    def _close(self, reason: str) -> None:
        if self._file is None or os.getpid() != self._owner:
            return
        was_on = self.on
        self.on = False
        self._stop.set()
        with self._lock:
            if self._held is not None:
                self._buf.append(_resolve(*self._held))
                self._held = None
            self._buf.append({"kind": "end", "reason": reason, "mono": round(_perf() - self._t0, 6),
                              "enabled": was_on})
        self._flush()
        for undo in self._hooks:
            try:
                undo()
            except Exception:  # noqa: BLE001
                pass
        self._hooks = []
        with self._lock:
            f, self._file = self._file, None
        try:
            f.close()
        except OSError:
            pass
        if self._rss is not None:
            self._rss.close()


def _resolve(rec: dict, events: list) -> dict:
    """Fill the GPU times of a step from its CUDA events if the device has passed them, else leave them out."""
    try:
        if all(e.query() for e in events):
            rec["gpu_fb_s"] = round(events[0].elapsed_time(events[1]) / 1000.0, 6)
            rec["gpu_opt_s"] = round(events[1].elapsed_time(events[2]) / 1000.0, 6)
    except Exception:  # noqa: BLE001 - an event from another device or context: no GPU times
        pass
    return rec


def _wrapper_of(model):
    """The module whose `.module` is `model` (DDP, FSDP-style wrappers), found among its referrers; None without one."""
    import gc

    seen = 0
    for ref in gc.get_referrers(model):  # the wrapper's `_modules` dict holds the model
        if not isinstance(ref, dict):
            continue
        for owner in gc.get_referrers(ref):
            seen += 1
            cands = [owner] if not isinstance(owner, dict) else [o for o in gc.get_referrers(owner)
                                                                   if not isinstance(o, (dict, list))]
            for obj in cands:
                if getattr(obj, "module", None) is model and hasattr(obj, "register_forward_pre_hook"):
                    return obj
            if seen > 64:
                return None
    return None


def _in_loader_worker() -> bool:
    tud = sys.modules.get("torch.utils.data")
    try:
        return tud is not None and tud.get_worker_info() is not None
    except Exception:  # noqa: BLE001
        return False


def register() -> str | None:
    """Register the callback the way this ms-swift offers; the mechanism's name, or None (said on stderr)."""
    if _in_loader_worker():
        return None
    try:
        from swift.callbacks import TrainerCallback as Base
        from swift.callbacks import callbacks_map  # ms-swift 4.x: --callbacks names an entry of this map
    except ImportError:
        callbacks_map = None
    if callbacks_map is not None:
        callbacks_map[NAME] = type("SwiftdocProbe", (_Probe, Base), {})
        return "callbacks_map"
    try:
        from swift.plugin import callback as plugin_callback  # ms-swift 3.x: a list of callback instances
        from transformers import TrainerCallback
    except ImportError:
        _say("this ms-swift has no trainer-callback mechanism (swift.callbacks / swift.plugin.extra_callbacks); "
             "nothing is recorded")
        return None
    extra = plugin_callback.extra_callbacks
    if not any(type(c).__name__ == "SwiftdocProbe" for c in extra):
        extra.append(type("SwiftdocProbe", (_Probe, TrainerCallback), {})())
    return "extra_callbacks"


if os.environ.get("SWIFTDOC_PROBE_NO_REGISTER") != "1":
    register()
