"""The job to verify, the variants to run, and the argv of one trial.

Contract:
- `Job`: an ms-swift training command as the trials will run it: `command`
  (sft | pt | rlhf), `argv` (the flags after it), `env` (what the launch sets:
  exports, inline `VAR=x`, NPROC_PER_NODE/NNODES from torchrun options), `swift`
  (the CLI executable), `version` (flag-table spec), `cwd`, `source`.
- `job_from_script(path)`, `job_from_argv(tokens)` (the command after `--`) and
  `job_from_run(run)` (the `run sh:` line of a log) read it with the patch
  stage's launch reader (`diagnose.patch.launch.read_launch`,
  `diagnose.patch.source.launch_from_run`).  Every launcher it understands
  (`swift`, torchrun / `python -m torch.distributed.run` on swift/cli/sft.py,
  `python swift/cli/sft.py`) is re-run through the `swift` CLI, with
  NPROC_PER_NODE/NNODES so that the CLI starts torchrun itself.  Megatron jobs
  are refused (their trial flags differ: train_iters, no logging_steps in 3.x).
- `Variant`: one arm's argv/env and the changes that made it.
  `build_variants(job, units, ablate)` plans the baseline (the job unchanged),
  the patched arm (every unit), and with `ablate` one arm per unit, with
  `plan_patch` (fix="none": only the requested changes differ).  A unit whose
  explicit value the flag table rejects is still applied verbatim (the point
  is to see what ms-swift does with it), and its message is kept as a
  pre-validation note.
- `trial_argv(variant, job, settings, output_dir)`: the argv + env of one
  trial: the variant plus `--max_steps N --logging_steps 1 --save_strategy no
  --eval_strategy no --report_to none --output_dir TMP --check_model false`
  (each spelled for the version, when it exists there), a dataset subset
  `path#K` on every `--dataset` (same seed, so both arms read the same rows),
  and no resume/hub/best-model flags.  Identical for every arm.
"""
from __future__ import annotations

import os
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from diagnose.errors import EnvironmentMissing, InputError, UsageError
from diagnose.verify.models import Change

# flags that would make a trial write into, read from or publish the user's run: dropped from every trial
DROP_FLAGS = ("resume_from_checkpoint", "resume_only_model", "push_to_hub", "hub_model_id", "hub_token",
              "hub_strategy", "load_best_model_at_end", "logging_dir", "save_steps", "eval_steps",
              "save_total_limit", "metric_for_best_model", "run_name", "ignore_data_skip")


@dataclass
class Job:
    command: str
    argv: list[str]
    env: dict[str, str]
    swift: str
    version: str
    version_source: str
    cwd: str
    source: str
    launcher: str = "swift"
    notes: list[str] = field(default_factory=list)
    effective: dict[str, Any] = field(default_factory=dict)  # values logged by ms-swift (from --log)
    world_size: int | None = None

    def command_line(self, argv: list[str] | None = None, env: dict[str, str] | None = None) -> str:
        e = self.env if env is None else env
        pre = " ".join(f"{k}={shlex.quote(v)}" for k, v in e.items())
        body = shlex.join([Path(self.swift).name, self.command, *(self.argv if argv is None else argv)])
        return (pre + " " + body) if pre else body


@dataclass
class Unit:
    """One change request as the user or a rule asked for it (planned alone for --ablate)."""

    label: str
    request: Any = None  # diagnose.patch.models.Request
    raw: Change | None = None  # applied verbatim (the flag table rejects it)
    message: str | None = None  # why it is applied raw


@dataclass
class Variant:
    label: str
    argv: list[str]
    env: dict[str, str | None]  # None = unset
    changes: list[Change] = field(default_factory=list)
    prevalidation: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def safe(self) -> bool:
        return bool(self.changes) and all(c.effect == "safe" for c in self.changes)


# ----------------------------------------------------------------------------- the swift CLI


def find_swift(explicit: str | None = None) -> str:
    """The swift CLI: --swift, else next to this interpreter, else on PATH."""
    if explicit:
        p = shutil.which(explicit) or (explicit if os.access(explicit, os.X_OK) else None)
        if not p:
            raise EnvironmentMissing(f"--swift {explicit}: not an executable")
        return p
    p = shutil.which("swift", path=str(Path(sys.executable).parent)) or shutil.which("swift")
    if not p:
        raise EnvironmentMissing("the ms-swift CLI (`swift`) is not installed here; verify runs real trials",
                                 hint="pip install 'swiftdoc[swift]' (or ms-swift), or pass --swift PATH")
    return p


def swift_python(swift: str) -> str | None:
    """The interpreter of a console-script `swift` (its shebang), or None."""
    try:
        with open(swift, "rb") as fh:
            first = fh.readline(512).decode("utf-8", "replace").strip()
    except OSError:
        return None
    if not first.startswith("#!"):
        return None
    parts = first[2:].split()
    if not parts:
        return None
    if Path(parts[0]).name == "env" and len(parts) > 1:
        return shutil.which(parts[1])
    return parts[0] if os.path.exists(parts[0]) else None


def installed_version(swift: str) -> str | None:
    """ms-swift version of the environment the `swift` CLI runs in (importlib.metadata, no import of swift)."""
    import subprocess

    from diagnose.isolated import run_python

    py = swift_python(swift)
    if py is None:
        return None
    try:
        r = run_python(py, "import importlib.metadata as m; print(m.version('ms-swift'))",  # never the cwd's modules
                       capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    v = r.stdout.strip()
    return v if r.returncode == 0 and v else None


def choose_version(explicit: str | None, swift: str, run: Any = None) -> tuple[str, str]:
    """verify: --swift-version, else the ms-swift that runs the trials, else the log's (diagnose.flags.choice)."""
    from diagnose.flags.choice import choose_version as choose

    if explicit:
        return choose(explicit, [])
    logged = (run.swift_version, "detected in the log") if run is not None and run.swift_version else (None, "")
    return choose(None, [(installed_version(swift), f"the ms-swift that runs the trials ({swift})"), logged])


# ----------------------------------------------------------------------------- reading the job


def _check_command(sub: str, where: str) -> str:
    if sub.startswith("megatron"):
        raise UsageError(f"{where}: a Megatron job (`megatron {sub.split('_', 1)[-1]}`); verify runs the HF-trainer "
                         "path only (swift sft/pt/rlhf)",
                         hint="verify the change on an equivalent `swift sft` job, or compare two runs with analyze")
    if sub not in ("sft", "pt", "rlhf"):
        raise UsageError(f"{where}: `swift {sub}` is not a training command")
    return sub


def _from_launch(launch: Any, where: str, swift: str, version: str | None, cwd: str) -> Job:
    sub = _check_command(launch.subcommand.replace("pretrain", "pt"), where)
    env = {k: d.value for k, d in launch.env.items()}
    v, how = choose_version(version, swift)
    notes = []
    if launch.kind not in ("swift",):
        notes.append(f"the job is launched with {launch.kind}; trials run it through the swift CLI "
                     + ("(NPROC_PER_NODE/NNODES from its options)" if launch.kind == "torchrun" else ""))
    if launch.config is not None:
        notes.append(f"flags from the config file {launch.config.name} are passed on the command line")
    for ln, sev, msg, _code in launch.problems:
        if sev == "error":
            notes.append(f"{where.split(' line')[0]} line {ln}: {msg}")
    return Job(command=sub, argv=list(launch.argv), env=env, swift=swift, version=v, version_source=how, cwd=cwd,
               source=f"{where} line {launch.line}", launcher=launch.kind, notes=notes)


def job_from_script(path: str, *, swift: str, version: str | None = None, cwd: str | None = None,
                    line: int | None = None) -> Job:
    from diagnose.patch.launch import read_launch
    from diagnose.patch.source import read_script

    sf = read_script(path)
    launch = read_launch(sf.text, base_dir=sf.path.parent, select_line=line)
    if launch.config is not None and launch.config.data is None:
        raise InputError(f"{path}: config file {launch.config.name} not found", hint="run verify from the job's directory")
    return _from_launch(launch, str(path), swift, version, cwd or os.getcwd())


def job_from_argv(tokens: list[str], *, swift: str, version: str | None = None, cwd: str | None = None) -> Job:
    from diagnose.patch.launch import read_launch

    if not tokens:
        raise UsageError("nothing after --", hint="swiftdoc verify --set k=v -- swift sft --model ... --dataset ...")
    launch = read_launch(shlex.join(tokens))
    return _from_launch(launch, "the command after --", swift, version, cwd or os.getcwd())


def job_from_run(run: Any, *, swift: str, version: str | None = None, cwd: str | None = None,
                 log: str = "the log") -> Job:
    from diagnose.flags import table_for
    from diagnose.patch.source import effective_from_run, launch_from_run

    v, how = choose_version(version, swift, run)
    rc = launch_from_run(run, table_for(v))
    sub = _check_command(rc.command, log)
    notes = list(rc.assumptions)
    notes.append(f"environment variables of the original job are unknown from {log} (only NPROC_PER_NODE/NNODES "
                 "from its torchrun line); pass them with --env or verify the launch script")
    return Job(command=sub, argv=list(rc.argv), env=dict(rc.env), swift=swift, version=v, version_source=how,
               cwd=cwd or os.getcwd(), source=f"{rc.source} ({log})", launcher=rc.launcher, notes=notes,
               effective=effective_from_run(run), world_size=run.world_size)


# ----------------------------------------------------------------------------- argv editing


def _occurrences(argv: list[str], table: Any, command: str) -> list[Any]:
    from diagnose.patch.argv import resolve_occurrences, split_argv

    _, occs = split_argv(argv)
    resolve_occurrences(occs, table, command)
    return occs


def set_flag(argv: list[str], name: str, values: list[str] | None, table: Any, command: str) -> list[str]:
    """argv with every occurrence of field `name` replaced by `--name values` (None: removed), else appended."""
    occs = [o for o in _occurrences(argv, table, command)
            if o.field == name or (o.field is None and o.flag.lstrip("-").replace("-", "_") == name)]
    drop: set[int] = set()
    for o in occs:
        drop.add(o.index)
        drop.update(o.value_indexes)
    out: list[str] = []
    placed = False
    last = occs[-1].index if occs else None
    for i, tok in enumerate(argv):
        if i == last and values is not None:
            out.extend([f"--{name}", *values])
            placed = True
        if i in drop:
            continue
        out.append(tok)
    if values is not None and not placed:
        out.extend([f"--{name}", *values])
    return out


def get_flag(argv: list[str], name: str, table: Any, command: str) -> list[str] | None:
    hit = None
    for o in _occurrences(argv, table, command):
        if o.field == name:
            hit = list(o.values) if not o.negated else ["false"]
    return hit


# ----------------------------------------------------------------------------- variants


def _change_from_plan(ch: Any) -> Change:
    from diagnose.patch.plan import classify

    if ch.env:
        return Change(kind="env", name=ch.env, value=ch.new, remove=ch.new is None,
                      effect="safe" if classify(ch.env, True) == "safe" else "changes-training", source=ch.rule)
    toks = ch.tokens[1:] if ch.tokens and "=" not in ch.tokens[0] else None
    eff = ch.effect if ch.effect in ("safe", "changes-training") else "unknown"
    return Change(kind="flag", name=ch.flag or "?", value=ch.new, tokens=toks if toks and len(toks) > 1 else None,
                  remove=ch.new is None, effect=eff, source=ch.rule)


def _plan(job: Job, requests: list[Any], explicit: bool) -> Any:
    from diagnose.patch.plan import plan_patch

    kw: dict[str, Any] = dict(command=job.command, effective=job.effective or None, world_size=job.world_size,
                              fix="none", launcher="swift")
    if explicit:
        return plan_patch(job.argv, job.env, None, job.version, explicit=requests, **kw)
    return plan_patch(job.argv, job.env, requests, job.version, **kw)


def units_from_requests(job: Job, requests: list[Any], explicit: bool) -> list[Unit]:
    """One unit per request; an explicit value the flag table (or the planner) rejects becomes a raw unit."""
    units: list[Unit] = []
    for r in requests:
        op = r.op
        target = op.env if op.op == "set_env" else (op.flag or op.op)
        label = r.title or f"{op.op} {target}"
        if explicit:
            try:
                _plan(job, [r], True)
            except InputError as e:
                raw = Change(kind="env" if op.op == "set_env" else "flag", name=(target or "").lstrip("-"),
                             value=None if op.op == "remove" or op.value is None else str(op.value),
                             remove=op.op == "remove", effect="unknown", source="--set")
                units.append(Unit(label, raw=raw, message=e.message))
                continue
        units.append(Unit(label, request=r))
    return units


def _variant(job: Job, label: str, units: list[Unit], explicit: bool) -> Variant:
    from diagnose.flags import table_for

    table = table_for(job.version)
    reqs = [u.request for u in units if u.request is not None]
    argv, env = list(job.argv), dict(job.env)
    changes: list[Change] = []
    notes: list[str] = []
    if reqs:
        plan = _plan(job, reqs, explicit)
        argv = list(plan.argv)
        env = dict(plan.env)
        changes = [_change_from_plan(c) for c in plan.changes]
        notes += [p.message for p in plan.problems if p.severity in ("error", "warning")]
        notes += [f"unchanged: {u}" for u in plan.unchanged]
    env_out: dict[str, str | None] = dict(env)
    pre: list[str] = []
    for u in units:
        if u.raw is None:
            continue
        c = u.raw
        if c.kind == "env":
            env_out[c.name] = None if c.remove else c.value
        else:
            argv = set_flag(argv, c.name, None if c.remove else c.argv_tokens(), table, job.command)
        changes.append(c)
        pre.append(u.message or c.label())
    return Variant(label, argv, env_out, changes, pre, notes)


def build_variants(job: Job, units: list[Unit], ablate: bool = False, explicit: bool = True) -> list[Variant]:
    """[baseline, patched] (+ one variant per unit with `ablate`, when there are several units)."""
    base = Variant("baseline", list(job.argv), dict(job.env))
    patched = _variant(job, "patched", units, explicit)
    out = [base]
    if ablate and len(units) > 1:
        for u in units:
            out.append(_variant(job, f"only {u.label}", [u], explicit))
    out.append(patched)
    return out


def sweep_variants(job: Job, common: list[Unit], candidates: list[tuple[str, list[Unit]]]) -> list[Variant]:
    """[baseline, candidate 1, candidate 2, ...]: each candidate is the common units plus its own (--try / --candidate)."""
    out = [Variant("baseline", list(job.argv), dict(job.env))]
    for label, units in candidates:
        out.append(_variant(job, label, common + units, True))
    return out


# ----------------------------------------------------------------------------- one trial's argv


@dataclass
class TrialSettings:
    max_steps: int
    warmup: int
    subset: int | None  # rows per dataset (None: the whole dataset)
    seed: int | None = None  # only when the job sets none (both arms identical either way)


def global_batch_of(argv: list[str], env: dict[str, str | None], job: Job) -> int | None:
    """per_device_train_batch_size x gradient_accumulation_steps x processes, from the argv (ms-swift defaults)."""
    from diagnose.batch import default_accumulation, global_batch
    from diagnose.flags import table_for

    table = table_for(job.version)

    def num(name: str, default: float | None) -> float | None:
        v = get_flag(argv, name, table, job.command)
        if v:
            try:
                return float(v[0])
            except ValueError:
                return default
        eff = job.effective.get(name)
        return float(eff) if isinstance(eff, (int, float)) and not isinstance(eff, bool) else default

    bs_flag = "per_device_train_batch_size" if table.has(job.command, "per_device_train_batch_size") else "batch_size"
    bs = num(bs_flag, 1.0) or 1.0
    nproc = env.get("NPROC_PER_NODE") or "1"
    nnodes = env.get("NNODES") or "1"
    try:
        world = int(nproc) * int(nnodes)
    except ValueError:
        world = 1
    ga = num("gradient_accumulation_steps", None)
    if ga is None:
        ga = float(default_accumulation(bs, world))
    return global_batch(bs, ga, world)


def trial_argv(variant: Variant, job: Job, settings: TrialSettings, output_dir: str) -> tuple[list[str], dict[str, str | None]]:
    from diagnose.flags import table_for
    from diagnose.patch.checks import spell_for

    table = table_for(job.version)
    cmd = job.command
    argv = list(variant.argv)
    for name in DROP_FLAGS:
        if table.has(cmd, name):
            argv = set_flag(argv, name, None, table, cmd)

    def put(concept: str, values: list[str]) -> None:
        nonlocal argv
        name = spell_for(concept, table, cmd)
        if name:
            argv = set_flag(argv, name, values, table, cmd)

    put("max_steps", [str(settings.max_steps)])
    put("logging_steps", ["1"])
    put("save_strategy", ["no"])
    put("eval_strategy", ["no"])
    put("report_to", ["none"])
    put("output_dir", [output_dir])
    put("check_model", ["false"])  # no hub round trip at start-up (offline machines wait ~20 s for it)
    if settings.seed is not None and get_flag(argv, "seed", table, cmd) is None:
        put("seed", [str(settings.seed)])
    if settings.subset:
        ds = get_flag(argv, "dataset", table, cmd)
        if ds:
            argv = set_flag(argv, "dataset", [d if "#" in d else f"{d}#{settings.subset}" for d in ds], table, cmd)
    return [job.swift, cmd, *argv], dict(variant.env)
