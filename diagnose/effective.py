"""What a run's flags really were: the one home for "which value did --X have, and how do we know?".

Contract: `EffectiveConfig.of(run, script=None, script_label=None) -> EffectiveConfig`;
`cfg.get(name) -> Known | None` for a flag or concept name (any spelling of the concept:
`batch_size` finds `per_device_train_batch_size`).  Precedence, first that has the value:
1. `script`: the values of the launch script being patched (what will run next);
2. ms-swift's own `Setting args.X: Y` lines (what it decided at run time);
3. the `run sh:` argv, then the args dump / args.json (`run.launch.flags` and its sources);
4. the default of the ms-swift version the text comes from, taken from the flag tables of *every*
   version the detected spec may be (a value they all agree on; `default_expr` fields and the
   few defaults ms-swift derives at run time are listed in `_DERIVED`), or transformers'
   `TrainingArguments` default for text printed by the HF Trainer, TRL or LLaMA-Factory.
`Known.source` says which ("script", "setting", "argv", "args", "default"), `Known.where` a short
human label ("the args dump", "script line 12", "ms-swift 4.x's default").
`cfg.shown` is False when the text shows none of the run's flags (an excerpt): a default is then
an assumption, and `Known.assumed` is True.  Pure: reads only the run and the checked-in tables.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from diagnose.models import Run

# transformers TrainingArguments defaults (src/transformers/training_args.py; the same in 4.46.3 and 5.19.0) for
# the fields remedies touch: the defaults of a run printed by the HF Trainer, TRL or LLaMA-Factory
HF_DEFAULTS: dict[str, Any] = {
    "ddp_timeout": 1800, "dataloader_num_workers": 0, "gradient_checkpointing": False, "logging_nan_inf_filter": True,
    "learning_rate": 5e-05, "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1,
    "dataloader_pin_memory": True, "max_grad_norm": 1.0, "dataloader_persistent_workers": False, "torch_compile": False,
    "bf16": False, "fp16": False, "max_steps": -1, "deepspeed": None,
}
_HF_FAMILY = ("hf-trainer", "trl", "llama-factory")
_SOURCE_WORDS = {"setting": "ms-swift's `Setting args` line", "argv": "the `run sh:` line", "args": "the args dump"}


@dataclass(frozen=True)
class Known:
    value: Any
    source: str  # script | setting | argv | args | default
    where: str  # human label of the source
    assumed: bool = False  # a default, and the text shows none of the run's flags: the user may have changed it

    @property
    def is_default(self) -> bool:
        return self.source == "default"


def _derived_default(name: str, versions: list[str], values: dict[str, Any]) -> tuple[bool, Any]:
    """Defaults ms-swift computes in `__post_init__` (the tables hold None for them): (known, value)."""
    if not versions:
        return False, None
    majors = {v.split(".")[0] for v in versions}
    if name == "dataloader_num_workers":
        # 3.3+ and 2.x: None -> 1 on Linux (swift/llm/argument/train_args.py __post_init__); 3.0-3.2: HF's 0
        old = {v for v in versions if v.startswith(("3.0.", "3.1.", "3.2."))}
        if old and len(old) != len(versions):
            return False, None
        return True, 0 if old else 1
    if name == "learning_rate" and majors <= {"3", "4"}:
        tuner = values.get("tuner_type") or values.get("train_type") or "lora"
        return True, 1e-05 if str(tuner) == "full" else 1e-04
    if name == "gradient_accumulation_steps" and majors <= {"3", "4"}:
        bs, world = values.get("per_device_train_batch_size"), values.get("_world")
        if isinstance(bs, (int, float)) and bs > 0 and world:
            return True, max(1, math.ceil(16 / bs / world))  # Setting args.gradient_accumulation_steps (3.x/4.x)
    return False, None


@dataclass
class EffectiveConfig:
    trainer: str = "unknown"
    version: str | None = None  # the detected spec ("4.x", "3.8-3.12.4", "4.6.0") or None
    values: dict[str, Known] = field(default_factory=dict)  # from the script, settings, argv, args
    versions: list[str] = field(default_factory=list)  # flag tables the spec covers
    command: str = "sft"
    world_size: int | None = None

    @property
    def shown(self) -> bool:
        return bool(self.values)

    @classmethod
    def of(cls, run: Run, script: dict[str, Any] | None = None, script_label: str | None = None,
           script_lines: dict[str, int] | None = None) -> "EffectiveConfig":
        from diagnose.parse.args import typed

        vals: dict[str, Known] = {}
        for k, v in run.launch.flags.items():  # None kept: `deepspeed=None` in an args dump is a known value
            src = run.launch.flag_sources.get(k, "args")
            kind = "argv" if src == "argv" else "args"
            vals[k] = Known(v, kind, _SOURCE_WORDS.get(src) or f"{src}" if kind == "args" else _SOURCE_WORDS["argv"])
        for k, v in run.settings.items():
            vals[k] = Known(typed(v) if isinstance(v, str) else v, "setting", _SOURCE_WORDS["setting"])
        for k, v in (script or {}).items():
            ln = (script_lines or {}).get(k)
            label = script_label or "the script"
            vals[k] = Known(v, "script", f"{label} line {ln}" if ln else label)
        versions: list[str] = []
        if run.trainer in ("ms-swift", "ms-swift-megatron") or run.recognized:
            versions = _tables_for(run.swift_version)
        cmd = (run.launch.command or "sft").strip().replace(" ", "_")
        if run.trainer == "ms-swift-megatron" and not cmd.startswith("megatron"):
            cmd = "megatron_" + cmd
        return cls(trainer=run.trainer, version=run.swift_version, values=vals, versions=versions, command=cmd,
                   world_size=run.world_size)

    # ------------------------------------------------------------------ lookups
    def spellings(self, name: str) -> list[str]:
        from diagnose.flags.concepts import CONCEPT_ALIASES, CONCEPTS

        concept = CONCEPT_ALIASES.get(name, name)
        return list(dict.fromkeys([name, concept, *CONCEPTS.get(concept, [])]))

    def given(self, name: str) -> Known | None:
        """The value the text (or the script) shows, without defaults."""
        names = self.spellings(name)
        for src in ("script", "setting", "argv", "args"):
            for n in names:
                k = self.values.get(n)
                if k is not None and k.source == src:
                    return k
        return None

    def get(self, name: str) -> Known | None:
        k = self.given(name)
        if k is not None:
            return k
        return self.default(name)

    def default(self, name: str) -> Known | None:
        assumed = not self.shown
        if self.trainer in _HF_FAMILY:
            for n in self.spellings(name):
                if n in HF_DEFAULTS:
                    return Known(HF_DEFAULTS[n], "default", "transformers' default", assumed)
            return None
        if not self.versions:
            return None
        label = f"ms-swift {self.version}'s default" if self.version else "ms-swift's default"
        from diagnose.flags import table_for

        for n in self.spellings(name):
            seen: list[Any] = []
            derived = False
            for v in self.versions:
                try:
                    specs = table_for(v).specs(self._command_in(v))
                except Exception:  # noqa: BLE001 - a table without this command says nothing
                    continue
                s = specs.get(n)
                if s is None:
                    continue
                if s.default_expr is not None or s.default is None:
                    derived = True
                    continue
                seen.append(s.default)
            if derived and not seen:
                plain = {k: kn.value for k, kn in self.values.items()}
                plain["_world"] = self.world_size or 1
                ok, val = _derived_default(n, self.versions, plain)
                if ok:
                    return Known(val, "default", label, assumed)
                return None
            if seen and not derived and all(x == seen[0] for x in seen):
                return Known(seen[0], "default", label, assumed)
        return None

    def _command_in(self, version: str) -> str:
        from diagnose.flags import table_for

        t = table_for(version)
        return self.command if t.has_command(self.command) else ("megatron_sft" if self.command.startswith("megatron")
                                                                  else "sft")

    def value(self, name: str) -> Any:
        k = self.get(name)
        return None if k is None else k.value


def _tables_for(spec: str | None) -> list[str]:
    from diagnose.flags.choice import nearest_table
    from diagnose.flags.versions import versions_in

    got = versions_in(spec)
    if got or not spec:
        return got
    near = nearest_table(spec)
    return [near] if near else []


__all__ = ["EffectiveConfig", "Known", "HF_DEFAULTS"]
