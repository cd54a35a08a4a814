"""Secrets out of everything swiftdoc writes for someone else to read: the one home of redaction.

Contract (pure, stdlib + pydantic; applied where a report or record is WRITTEN, never to the parsed data
that patch and verify work from):
- `is_secret_name(name)`: a flag, key or environment variable that holds a credential: `hub_token`,
  `HF_TOKEN`, `wandb_api_key`, `OPENAI_API_KEY`, `*SECRET*`, `*PASSWORD*`, `aws_secret_access_key`...
  (a tokenizer's `pad_token`/`eos_token` or `max_new_tokens` are not);
- `redact_text(s)`: the values of such flags (`--hub_token X`, `--hub_token=X`), assignments (`HF_TOKEN=X`,
  `hub_token='X'`), mapping entries (`'hub_token': 'X'`, `password: X`), the password of a URL
  (`https://user:X@host`) and values in a known token format anywhere (`hf_...`, `sk-...`, `ghp_...`,
  `github_pat_...`, `glpat-...`, `xox?-...`, `AKIA...`, `AIza...`) become `REDACTED`;
- `redact_argv(argv)`: an argv list: the item after a secret `--flag` too;
- `redact(obj)`: a copy of any JSON-like value, pydantic model, dataclass or tuple with every string redacted, the value
  of every secret-named key replaced and argv-like lists handled; numpy arrays and other objects as they are.
Idempotent: redacting redacted output changes nothing.
"""
from __future__ import annotations

import copy
import dataclasses
import re
from functools import lru_cache
from typing import Any

REDACTED = "REDACTED"

# words that make `<word>_token` a tokenizer's token or a count, not a credential
_TOKENIZER_WORDS = frozenset(
    "pad eos bos unk sep cls mask special additional image video audio vision start end new split placeholder eot eom "
    "think tool response prompt ignore loss sample per max min num first last next total each input output label "
    "default system user assistant im fim box ref quad object".split())
_KEY_WORDS = frozenset("api access secret private auth encryption signing master account client license".split())
_SEG = re.compile(r"[_.\-]+")


@lru_cache(maxsize=4096)
def is_secret_name(name: str) -> bool:
    n = name.strip().lstrip("-").lower()
    if not n:
        return False
    if any(w in n for w in ("password", "passwd", "secret", "passphrase")):
        return True
    segs = [s for s in _SEG.split(n) if s]
    if not segs:
        return False
    last, prev = segs[-1], (segs[-2] if len(segs) > 1 else "")
    if last in ("apikey", "accesskey", "privatekey", "authtoken", "accesstoken", "apitoken"):
        return True
    if last == "token":
        return prev not in _TOKENIZER_WORDS
    return last == "key" and prev in _KEY_WORDS


# a value: a quoted string or a run of characters that cannot end a shell word, a repr or a JSON value
_VAL = r"""(?:"(?:[^"\\\n]|\\.){0,4096}"|'[^'\n]{0,4096}'|[^\s'"`,;)\]}]{1,4096})"""
_NAME = r"[A-Za-z_][A-Za-z0-9_.\-]{0,127}"
# --name value | --name=value | NAME=value | name='value' | 'name': 'value' | "name": "value" | name: value
_FLAG_SPACE = re.compile(rf"(?<![\w-])(--?)({_NAME})([ \t]+)(?![-\s])({_VAL})")
_ASSIGN = re.compile(rf"(?<![\w.\-])((?:--?)?)({_NAME})(=)(?![\s,)])({_VAL})")
_MAPPING = re.compile(rf"""(["']?)({_NAME})\1([ \t]*:[ \t]*)(?![\s,}}])({_VAL})""")
_URL_PASSWORD = re.compile(r"(://[^/\s:@'\"`]{1,256}:)([^/\s@'\"`]{1,256})(@)")
_KNOWN = re.compile(
    r"(?<![A-Za-z0-9_\-])(?:hf_[A-Za-z0-9]{20,}|sk-(?:proj-|ant-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}"
    r"|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}|glpat-[A-Za-z0-9_\-]{20,}|xox[abposr]-[A-Za-z0-9\-]{10,}"
    r"|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_\-]{35})(?![A-Za-z0-9])")
_PLAIN = (int, float, bool, type(None))
_KEEP = frozenset(("none", "null", "true", "false", "", REDACTED.lower()))
_HINT = re.compile(r"(?i)token|key|secret|passw|passphrase|://|hf_|sk-|gh[pousr]_|github_pat|glpat|xox|AKIA|AIza")


def _value(v: str) -> str:
    """The replacement for one matched value: quotes kept, None/true/false/empty left alone."""
    q = v[0] if v[:1] in ("'", '"') and len(v) > 1 and v[-1] == v[0] else ""
    inner = v[1:-1] if q else v
    if inner.strip().lower() in _KEEP:
        return v
    return f"{q}{REDACTED}{q}"


def _named(m: re.Match) -> str:
    return m.group(0) if not is_secret_name(m.group(2)) else m.group(0)[:m.start(4) - m.start(0)] + _value(m.group(4))


def redact_text(s: str) -> str:
    if not s or not _HINT.search(s):
        return s
    s = _KNOWN.sub(REDACTED, s)
    s = _URL_PASSWORD.sub(lambda m: m.group(1) + REDACTED + m.group(3), s)
    for pat in (_ASSIGN, _FLAG_SPACE, _MAPPING):
        s = pat.sub(_named, s)
    return s


def redact_argv(argv: list[str]) -> list[str]:
    out: list[str] = []
    secret_next = False
    for a in argv:
        if not isinstance(a, str):
            out.append(a)
            secret_next = False
            continue
        if secret_next and not a.startswith("-") and a.strip().lower() not in _KEEP:
            out.append(REDACTED)
        else:
            out.append(redact_text(a))
        secret_next = a.startswith("-") and "=" not in a and is_secret_name(a)
    return out


def redact(obj: Any, key: str | None = None) -> Any:
    if isinstance(obj, str):
        if key is not None and is_secret_name(key) and obj.strip().lower() not in _KEEP:
            return REDACTED
        return redact_text(obj)
    if isinstance(obj, dict):
        return {k: v if type(v) in _PLAIN and not (isinstance(k, str) and is_secret_name(k))
                else redact(v, k if isinstance(k, str) else None) for k, v in obj.items()}
    if isinstance(obj, list):
        if any(isinstance(a, str) and a.startswith("-") for a in obj):
            obj = redact_argv(obj)
        return [redact(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(redact(v) for v in obj)
    if key is not None and is_secret_name(key) and isinstance(obj, (int, float)) and not isinstance(obj, bool):
        return REDACTED
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = copy.copy(obj)
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name, None)
            r = redact(v, f.name)
            if r is not v:
                object.__setattr__(out, f.name, r)
        return out
    fields = getattr(type(obj), "model_fields", None)
    if fields is not None and hasattr(obj, "model_copy"):
        update = {}
        for name in fields:
            v = getattr(obj, name, None)
            r = redact(v, name)
            if r is not v:
                update[name] = r
        return obj.model_copy(update=update) if update else obj
    return obj


__all__ = ["REDACTED", "is_secret_name", "redact", "redact_argv", "redact_text"]
