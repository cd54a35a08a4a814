"""The patch stage's data: requests in, a PatchPlan out.

Contract:
- `Request`: one flag/env operation to plan (a rule remedy op, an explicit
  `--set`/`--env`, or a lint fix), with its label (`safe` | `changes-training` |
  `advice`) and the rule behind it.
- `Change`: one resolved edit, spelled for the target ms-swift version: a flag
  (`flag`, `old` -> `new`; `new` None = removed; `old_flag` when the spelling
  changes) or an env var (`env`).  `tokens` are the argv tokens that replace the
  old occurrence (or are appended).  `effect` is the honest label, `note` says
  what changes in training.
- `Problem`: something ms-swift rejects or ignores, or that the editor cannot do
  safely, with the line it is on.
- `PatchPlan`: changes, the new argv and env, problems, dropped (conflicting)
  remedies, advice that is shown but never applied, and the assumptions made.
"""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, Field

from diagnose.diagnosis import Dropped
from diagnose.engine import RemedyOp

Effect = Literal["safe", "changes-training", "advice"]
_RANK = {"safe": 0, "changes-training": 1, "advice": 2}


def stricter(a: str, b: str) -> str:
    """The more consequential of two labels (advice stays advice)."""
    return a if _RANK.get(a, 1) >= _RANK.get(b, 1) else b


class Request(BaseModel):
    op: RemedyOp
    effect: Effect = "changes-training"
    rule: str = "explicit"
    title: str = ""
    note: Optional[str] = None


class Change(BaseModel):
    flag: Optional[str] = None  # spelling in the target version, without '--'
    env: Optional[str] = None
    old: Optional[str] = None  # value as written before (None: absent); bare bool flags read 'true'
    new: Optional[str] = None  # value after (None: the flag is removed)
    old_flag: Optional[str] = None  # the flag as written before, when its spelling changes
    effect: Effect = "changes-training"
    rule: str = "explicit"
    rules: list[str] = Field(default_factory=list)  # every rule asking for this same change
    title: str = ""
    note: Optional[str] = None
    line: Optional[int] = None
    file: Optional[str] = None  # config file holding the flag, when not the script
    tokens: Optional[list[str]] = None  # argv tokens that replace the occurrence ([] = removed)
    at: Optional[int] = Field(default=None, exclude=True)  # argv index of the occurrence replaced
    concept: Optional[str] = None
    via: Optional[str] = None  # env var set through a launcher option (torchrun --nproc_per_node)

    def _env_text(self, value: str) -> str:
        if self.via == "torchrun" and self.env:
            return f"torchrun --{self.env.lower()} {value}"
        return f"export {self.env}={value}"

    def minus(self) -> Optional[str]:
        if self.env:
            return None if self.old is None else self._env_text(self.old)
        if self.old is None and self.old_flag is None:
            return None
        name = self.old_flag or f"--{self.flag}"
        return name if self.old in (None, "") else f"{name} {self.old}"

    def plus(self) -> Optional[str]:
        if self.env:
            return None if self.new is None else self._env_text(self.new)
        if self.tokens is not None:
            return " ".join(self.tokens) if self.tokens else None
        if self.new is None:
            return None
        return f"--{self.flag} {self.new}"


class Problem(BaseModel):
    line: Optional[int] = None
    flag: Optional[str] = None
    message: str
    severity: Literal["error", "warning", "info"] = "error"
    code: str = "flag"
    fix: Optional[str] = None  # what --fix / patch does about it
    fixed: bool = False  # the plan applies that fix
    fix_effect: Optional[str] = None  # label of the fix (safe | changes-training)
    file: Optional[str] = None


class Advice(BaseModel):
    rule: str
    title: str
    note: Optional[str] = None


class PatchPlan(BaseModel):
    version: str  # flag table used
    version_source: str = ""  # how the version was chosen
    command: str = "sft"
    changes: list[Change] = Field(default_factory=list)
    argv: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    problems: list[Problem] = Field(default_factory=list)
    dropped: list[Dropped] = Field(default_factory=list)
    advice: list[Advice] = Field(default_factory=list)
    unchanged: list[str] = Field(default_factory=list)  # requests already satisfied
    assumptions: list[str] = Field(default_factory=list)
    old_argv: list[str] = Field(default_factory=list, exclude=True)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"version": self.version, "version_source": self.version_source, "command": self.command}
        changes = []
        for c in self.changes:
            d: dict[str, Any] = {"env": c.env} if c.env else {"flag": c.flag}
            d.update(old=c.old, new=c.new, effect=c.effect, rule=c.rule)
            if c.via:
                d["via"] = c.via
            if c.old_flag:
                d["old_flag"] = c.old_flag
            if len(c.rules) > 1:
                d["rules"] = c.rules
            d.update(title=c.title, note=c.note, line=c.line)
            if c.file:
                d["file"] = c.file
            if c.tokens is not None and not c.env:
                d["tokens"] = c.tokens
            changes.append(d)
        out["changes"] = changes
        out["argv"] = list(self.argv)
        out["env"] = dict(self.env)
        out["problems"] = [p.model_dump(exclude_none=True) for p in self.problems]
        out["dropped"] = [{"rule": d.rule, "op": d.op.model_dump(exclude_none=True), "reason": d.reason}
                          for d in self.dropped]
        out["advice"] = [a.model_dump(exclude_none=True) for a in self.advice]
        out["unchanged"] = list(self.unchanged)
        out["assumptions"] = list(self.assumptions)
        return out
