"""Apply a PatchPlan to the launch script's text (and its 4.x config file), touching only the changed tokens.

Contract:
- `edits_for(launch, plan) -> list[FileEdit]`: the new text of the script (and
  of the YAML/JSON config it passes to swift, when a changed flag lives there).
  Raises `UnsafeEdit` (an `InputError`) naming the lines when the launcher
  reader marked the command unsafe to edit.
- `apply_to_script(text, plan, base_dir=None, select_line=None) -> str`: the
  script part only (flags held in a config file are then overridden on the
  command line, which ms-swift's argparse reads last).
Edits: a changed flag's tokens are replaced in place (quote style kept); a
removed flag takes its whole line when it sits alone on a `\\`-continued line
(the previous line's `\\` goes too when it was the last line); new flags go on new
continuation lines in the script's own indentation and `\\` spacing (or inline
for a one-line command, or before the last line when a redirection or comment
follows the last argument); env vars are edited where they are set, else added
as an inline `VAR=x` prefix when the command uses that style, a torchrun option
under torchrun, or an `export VAR=x` line just before the command.  Line endings
follow the line edited (CRLF kept).  Every other byte is preserved, and
re-planning the result finds nothing to change.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from diagnose.errors import InputError
from diagnose.patch.argv import split_argv
from diagnose.patch.launch import TORCHRUN_ENV, Launch, read_launch
from diagnose.patch.models import Change, PatchPlan
from diagnose.patch.shell import Word, shell_quote

_ENV_TO_TORCHRUN = {v: k for k, v in TORCHRUN_ENV.items()}


class UnsafeEdit(InputError):
    """The command sits where an automatic edit is not safe (loop, heredoc, several commands ...)."""


@dataclass
class FileEdit:
    path: Path | None  # None: the script given as text
    old: str
    new: str
    label: str  # display name


@dataclass
class _Edit:
    start: int
    end: int
    text: str


def _apply(text: str, edits: list[_Edit]) -> str:
    edits = sorted(edits, key=lambda e: (e.start, e.end))
    out = []
    pos = 0
    for e in edits:
        if e.start < pos:
            if e.text == "":  # overlapping removals merge
                pos = max(pos, e.end)
                continue
            raise ValueError(f"overlapping edits at offset {e.start}")
        out.append(text[pos:e.start])
        out.append(e.text)
        pos = e.end
    out.append(text[pos:])
    return "".join(out)


class _ScriptEditor:
    def __init__(self, launch: Launch):
        self.L = launch
        self.t = launch.script.text
        self.edits: list[_Edit] = []
        self.appends: list[list[str]] = []  # new flags, in order
        self.env_new: list[tuple[str, str]] = []
        self.torchrun_new: list[tuple[str, str]] = []
        self.removed: set[int] = set()  # id() of the words a removal takes out

    # ------------------------------------------------------------------ layout helpers
    def line_bounds(self, off: int) -> tuple[int, int, str]:
        """(line start, line end before the line break, the line break)."""
        s = self.t.rfind("\n", 0, off) + 1
        e = self.t.find("\n", off)
        if e == -1:
            return s, len(self.t), ""
        if e > s and self.t[e - 1] == "\r":
            return s, e - 1, "\r\n"
        return s, e, "\n"

    def eol(self, off: int) -> str:
        _, _, br = self.line_bounds(off)
        if br:
            return br
        return "\r\n" if self.L.script.crlf else "\n"

    def indent_of(self, off: int) -> str:
        s, _, _ = self.line_bounds(off)
        m = re.match(r"[ \t]*", self.t[s:])
        return m.group(0) if m else ""

    def cont_spacing(self) -> str:
        """The blanks the script puts before its continuation backslashes (most common)."""
        c = self.L.command
        lo, hi = c.start, self.last_word().end
        counts: Counter[str] = Counter()
        for off in self.L.script.continuations:
            if lo <= off <= hi + 2:
                j = off
                while j > 0 and self.t[j - 1] in " \t":
                    j -= 1
                counts[self.t[j:off]] += 1
        if not counts:
            return " "
        sp = counts.most_common(1)[0][0]
        return sp if sp in (" ", "\t", "") else " "

    def is_multiline(self) -> bool:
        c = self.L.command
        return any(c.start <= off <= self.last_word().end for off in self.L.script.continuations)

    def last_word(self) -> Word:
        """The last word of the command that survives the removals (new flags go after it)."""
        for w in reversed(self.L.argv_words):
            if id(w) not in self.removed:
                return w
        return self.L.launcher_words[-1]

    def surviving(self, start: int, end: int) -> str:
        """text[start:end] without the ranges removed by earlier edits."""
        cut = [(e.start, e.end) for e in self.edits if e.text == "" and e.end > start and e.start < end]
        if not cut:
            return self.t[start:end]
        return "".join(ch for i, ch in enumerate(self.t[start:end], start) if not any(a <= i < b for a, b in cut))

    def flag_indent(self) -> str:
        """Indentation of the lines that start with a flag (the last such line wins)."""
        ind = None
        for w in self.L.argv_words:
            s, _, _ = self.line_bounds(w.start)
            if self.t[s:w.start].strip() == "" and w.value.startswith("-"):
                ind = self.t[s:w.start]
        if ind is None:
            ind = self.indent_of(self.L.command.start) + "    "
        return ind

    # ------------------------------------------------------------------ flag occurrences
    def occurrence_words(self, at: int) -> list[Word] | None:
        srcs = self.L.sources
        if at >= len(srcs) or srcs[at].where != "script":
            return None
        _, occs = split_argv(self.L.argv)
        for o in occs:
            if o.index == at:
                return [srcs[i].word for i in [o.index, *o.value_indexes] if srcs[i].word is not None]  # type: ignore
        return None

    def replace(self, words: list[Word], tokens: list[str], ch: Change | None = None) -> None:
        flag_w, vals = words[0], words[1:]
        if ch is not None and self._rename_only(flag_w, vals, tokens, ch):
            return
        dyn = [w for w in vals if w.dynamic] or ([flag_w] if flag_w.dynamic and "=" in flag_w.value else [])
        if dyn and [w.value for w in vals] != tokens[1:]:
            # the value is an expression ($VAR, "${X}", $(...)): a literal in its place would fix one branch of the
            # script and silently change the others
            raise UnsafeEdit(f"line {dyn[0].line}: the value of {flag_w.value.split('=')[0]} is {dyn[0].text}, an expression; "
                             f"a fix would replace it with one literal value",
                             hint=f"change it by hand to: {' '.join(tokens)}")
        like = next((w.quoted for w in vals if w.quoted in ("'", '"')), "")
        new_flag = tokens[0]
        if "=" in flag_w.value and flag_w.value.startswith("--"):  # --k=v form
            if len(tokens) == 1:
                self.edits.append(_Edit(flag_w.start, flag_w.end, self._quote_eq(tokens[0], flag_w)))
            else:
                self.edits.append(_Edit(flag_w.start, flag_w.end, " ".join([tokens[0], *(shell_quote(v, like) for v in tokens[1:])])))
            return
        new_vals = [shell_quote(v, like) for v in tokens[1:]]
        if new_flag == flag_w.value and vals:
            if [w.value for w in vals] == tokens[1:]:
                return
            self.edits.append(_Edit(vals[0].start, vals[-1].end, " ".join(new_vals)))
        elif new_flag == flag_w.value:
            if new_vals:
                self.edits.append(_Edit(flag_w.end, flag_w.end, " " + " ".join(new_vals)))
        elif vals and [w.value for w in vals] == tokens[1:]:
            self.edits.append(_Edit(flag_w.start, flag_w.end, new_flag))
        else:
            end = vals[-1].end if vals else flag_w.end
            self.edits.append(_Edit(flag_w.start, end, " ".join([new_flag, *new_vals])))

    def _rename_only(self, flag_w: Word, vals: list[Word], tokens: list[str], ch: Change) -> bool:
        """A renamed flag with its value unchanged: edit the flag's name and keep every value byte as written."""
        if not ch.old_flag or ch.old != ch.new or not tokens or not tokens[0].startswith("--"):
            return False
        new_name = tokens[0].split("=", 1)[0]
        if flag_w.value.startswith("--") and "=" in flag_w.value:  # --old=$X: the name part only
            name_end = flag_w.text.find("=")
            if name_end < 0:
                return False
            self.edits.append(_Edit(flag_w.start, flag_w.start + name_end, new_name))
            return True
        if flag_w.quoted or flag_w.dynamic:
            return False
        self.edits.append(_Edit(flag_w.start, flag_w.end, new_name))
        return True

    @staticmethod
    def _quote_eq(tok: str, like_word: Word) -> str:
        name, _, val = tok.partition("=")
        q = "'" if "'" in like_word.text else '"' if '"' in like_word.text else ""
        return f"{name}={shell_quote(val, q)}"

    def remove(self, words: list[Word]) -> None:
        self.removed.update(id(w) for w in words)
        s, e = words[0].start, words[-1].end
        ls, _, _ = self.line_bounds(s)
        _, le, br = self.line_bounds(e)
        before = self.t[ls:s]
        after = self.t[e:le]
        rest = after.strip()
        if rest.startswith("#"):  # a comment about the removed flag goes with it
            rest = ""
        if before.strip() == "" and rest in ("", "\\"):
            self.edits.append(_Edit(ls, le + len(br), ""))  # the whole line (fix_tail mends a dangling `\`)
            return
        j = s
        while j > ls and self.t[j - 1] in " \t":
            j -= 1
        if j == ls:  # first thing on its line, something follows: take the blanks after it
            k = e
            while k < le and self.t[k] in " \t":
                k += 1
            self.edits.append(_Edit(s, k, ""))
        else:
            self.edits.append(_Edit(j, e, ""))

    def fix_tail(self) -> None:
        """When the command's last lines were removed, the `\\` before them must go too."""
        if not self.L.argv_words or id(self.L.argv_words[-1]) not in self.removed:
            return
        lw = self.last_word()
        _, le, br = self.line_bounds(lw.end)
        _, end_le, end_br = self.line_bounds(self.L.argv_words[-1].end)
        if self.surviving(le + len(br), end_le).strip():
            return  # something of the command is left on a later line
        m = re.fullmatch(r"([ \t]*)\\", self.surviving(lw.end, le))
        if m and (le - 1) in self.L.script.continuations:
            self.edits.append(_Edit(le - 1 - len(m.group(1)), le, ""))

    def flush_appends(self) -> None:
        if not self.appends:
            return
        lw = self.last_word()
        ls, le, br = self.line_bounds(lw.end)
        after = self.surviving(lw.end, le)
        lines = [" ".join(_quote_tokens(toks)) for toks in self.appends]
        if self.is_multiline():
            ind = self.flag_indent()
            sp = self.cont_spacing()
            eol = self.eol(lw.end)
            if after.strip() == "":
                self.edits.append(_Edit(lw.end, lw.end, "".join(f"{sp}\\{eol}{ind}{ln}" for ln in lines)))
                return
            first_on_line = next((w for w in self.L.argv_words if ls <= w.start and id(w) not in self.removed), None)
            prev = ls - 1 - (1 if ls >= 2 and self.t[ls - 2] == "\r" else 0)
            if first_on_line is not None and self.t[ls:first_on_line.start].strip() == "" and prev > 0 \
                    and (prev - 1) in self.L.script.continuations:
                self.edits.append(_Edit(ls, ls, "".join(f"{ind}{ln}{sp}\\{eol}" for ln in lines)))
                return
        self.edits.append(_Edit(lw.end, lw.end, "".join(" " + ln for ln in lines)))

    # ------------------------------------------------------------------ env
    def set_env(self, ch: Change) -> None:
        name, value = ch.env or "", ch.new or ""
        d = self.L.env.get(name)
        if d is not None and d.kind == "torchrun":
            if d.value_word is not None:
                self.edits.append(_Edit(d.value_word.start, d.value_word.end, shell_quote(value, d.value_word.quoted)))
            elif d.word is not None:
                opt = d.word.value.partition("=")[0]
                self.edits.append(_Edit(d.word.start, d.word.end, f"{opt}={shell_quote(value)}"))
            return
        if d is not None and d.word is not None and d.kind in ("export", "assign", "inline"):
            raw = d.word.text
            q = raw.partition("=")[2][:1]
            like = q if q in ("'", '"') else ""
            self.edits.append(_Edit(d.word.start, d.word.end, f"{name}={shell_quote(value, like)}"))
            return
        if self.L.kind == "torchrun" and name in _ENV_TO_TORCHRUN:
            self.torchrun_new.append((_ENV_TO_TORCHRUN[name], value))
            return
        self.env_new.append((name, value))

    def flush_env(self) -> None:
        if self.torchrun_new:
            anchor = self._torchrun_anchor()
            txt = "".join(f" --{k} {shell_quote(v)}" for k, v in self.torchrun_new)
            self.edits.append(_Edit(anchor.end, anchor.end, txt))
        if not self.env_new:
            return
        launcher0 = self.L.launcher_words[0]
        if self.L.prefix_env:
            lastp = self.L.prefix_env[-1]
            if self.line_bounds(lastp.start)[0] != self.line_bounds(launcher0.start)[0]:
                sp = self.cont_spacing()
                eol = self.eol(launcher0.start)
                ind = self.t[self.line_bounds(launcher0.start)[0]:launcher0.start]
                ind = ind if ind.strip() == "" else ""
                txt = "".join(f"{n}={shell_quote(v)}{sp}\\{eol}{ind}" for n, v in self.env_new)
            else:
                txt = "".join(f"{n}={shell_quote(v)} " for n, v in self.env_new)
            self.edits.append(_Edit(launcher0.start, launcher0.start, txt))
            return
        start = self.L.command.start
        ls, _, _ = self.line_bounds(start)
        ind = self.indent_of(start)
        eol = self.eol(start)
        txt = "".join(f"{ind}export {n}={shell_quote(v)}{eol}" for n, v in self.env_new)
        self.edits.append(_Edit(ls, ls, txt))

    def _torchrun_anchor(self) -> Word:
        ws = self.L.launcher_words
        for i, w in enumerate(ws):
            if w.value.rsplit("/", 1)[-1] == "torchrun":
                return w
            if w.value.startswith("torch.distributed.") and i > 0 and ws[i - 1].value == "-m":
                return w
        return ws[0]


def _quote_tokens(tokens: list[str]) -> list[str]:
    out = []
    for t in tokens:
        if t.startswith("--") and "=" in t:
            name, _, v = t.partition("=")
            out.append(f"{name}={shell_quote(v)}")
        elif t.startswith("--"):
            out.append(t)
        else:
            out.append(shell_quote(t))
    return out


# ----------------------------------------------------------------------------- config files
def _yaml_scalar(v: str) -> str:
    if v.lower() in ("true", "false") or re.fullmatch(r"-?\d+(\.\d+)?([eE][-+]?\d+)?", v):
        return v
    if re.fullmatch(r"[A-Za-z_./][\w./@+-]*", v) and v.lower() not in ("null", "yes", "no", "on", "off", "~"):
        return v
    return json.dumps(v, ensure_ascii=False)


def _config_edit(text: str, kind: str, key: str, ch: Change, new_key: str | None) -> str | None:
    """New config text with `key` changed (value / renamed / removed), or None if the layout is not simple."""
    lines = text.splitlines(keepends=True)
    if kind == "yaml":
        pat = re.compile(r"^(" + re.escape(key) + r")([ \t]*:[ \t]*)([^#\r\n]*?)([ \t]+#[^\r\n]*)?(\r?\n)?$")
    else:
        pat = re.compile(r'^([ \t]*"' + re.escape(key) + r'")([ \t]*:[ \t]*)("(?:[^"\\]|\\.)*"|[-\w.+]+)([ \t]*,?[ \t]*)(\r?\n)?$')
    for n, ln in enumerate(lines):
        m = pat.match(ln)
        if not m:
            continue
        value = m.group(3)
        if kind == "yaml" and value.strip() == "":
            return None  # block value (list / mapping on the next lines)
        if ch.tokens == []:  # remove
            if kind == "json" and "," not in (m.group(4) or ""):
                # last member: the previous member loses its trailing comma
                for k in range(n - 1, -1, -1):
                    if lines[k].strip():
                        if lines[k].rstrip("\r\n").rstrip().endswith(","):
                            body = lines[k].rstrip("\r\n")
                            idx = body.rstrip().rfind(",")
                            lines[k] = body[:idx] + body[idx + 1:] + lines[k][len(body):]
                            break
                        return None
            del lines[n]
            return "".join(lines)
        vals = ch.tokens[1:] if ch.tokens else ([] if ch.new is None else [ch.new])
        if kind == "yaml":
            newv = _yaml_scalar(vals[0]) if len(vals) == 1 else "[" + ", ".join(_yaml_scalar(v) for v in vals) + "]"
        else:
            if len(vals) != 1:
                return None
            v = vals[0]
            newv = v if (v in ("true", "false", "null") or re.fullmatch(r"-?\d+(\.\d+)?([eE][-+]?\d+)?", v)) \
                else json.dumps(v, ensure_ascii=False)
            if value.startswith('"') and not newv.startswith('"') and not re.fullmatch(r"-?\d+(\.\d+)?", v) \
                    and v not in ("true", "false"):
                newv = json.dumps(v)
        k = m.group(1) if not new_key else (new_key if kind == "yaml" else m.group(1).replace(f'"{key}"', f'"{new_key}"'))
        lines[n] = k + m.group(2) + newv + (m.group(4) or "") + (m.group(5) or "")
        return "".join(lines)
    return None


# ----------------------------------------------------------------------------- driver
def edits_for(launch: Launch, plan: PatchPlan, script_path: Path | None = None) -> list[FileEdit]:
    if launch.unsafe:
        where = "; ".join(f"line {ln}: {why}" for ln, why in launch.unsafe)
        raise UnsafeEdit(f"cannot edit the script safely ({where})",
                         hint="the flag diff above is the change to make by hand")
    ed = _ScriptEditor(launch)
    cfg = launch.config
    cfg_text = cfg.text if cfg is not None else None
    same_argv = launch.argv == plan.old_argv
    _, occs = split_argv(launch.argv)
    by_index = {o.index: o for o in occs}
    # removals first: where new flags go depends on what is left
    for ch in sorted(plan.changes, key=lambda c: 0 if (c.tokens == [] or (c.tokens is None and c.new is None)) else 1):
        if ch.env:
            ed.set_env(ch)
            continue
        at = ch.at if same_argv else _locate(occs, ch)
        tokens = ch.tokens if ch.tokens is not None else ([f"--{ch.flag}"] + ([] if ch.new is None else [ch.new]))
        if at is None:
            if tokens:
                ed.appends.append(tokens)
            continue
        src = launch.sources[at] if at < len(launch.sources) else None
        if src is not None and src.where == "config" and (cfg is None or cfg_text is None or not src.key):
            if tokens:
                ed.appends.append(tokens)
                continue
            raise UnsafeEdit(f"--{ch.flag} is set in the config file; it cannot be removed from the script alone",
                             hint="remove it from the config file by hand")
        if src is not None and src.where == "config" and cfg is not None and cfg_text is not None and src.key:
            new_key = tokens[0].lstrip("-").split("=", 1)[0] if tokens else None
            new_key = new_key if new_key and new_key != src.key else None
            edited = _config_edit(cfg_text, cfg.kind, src.key, ch, new_key)
            if edited is not None:
                cfg_text = edited
                continue
            if tokens:  # not a simple line: override on the command line (argparse keeps the last value)
                ed.appends.append(tokens)
                continue
            raise UnsafeEdit(f"{cfg.name}: cannot remove `{src.key}` automatically (not a one-line entry)",
                             hint="remove it by hand; the flag diff shows the change")
        words = ed.occurrence_words(at)
        if words is None:
            if tokens:
                ed.appends.append(tokens)
            continue
        o = by_index.get(at)
        if tokens:
            ed.replace(words, tokens, ch)
        elif o is not None:
            ed.remove(words)
    ed.fix_tail()
    ed.flush_appends()
    ed.flush_env()
    new_text = _apply(ed.t, ed.edits)
    out = [FileEdit(script_path, ed.t, new_text, str(script_path) if script_path else "script")]
    if cfg is not None and cfg.text is not None and cfg_text != cfg.text:
        out.append(FileEdit(cfg.path, cfg.text, cfg_text or "", str(cfg.path)))
    return out


def _locate(occs: list, ch: Change) -> int | None:
    names = {f"--{ch.flag}"} | ({ch.old_flag} if ch.old_flag else set())
    hit = None
    for o in occs:
        if o.flag in names:
            hit = o.index
    return hit


def apply_to_script(text: str, plan: PatchPlan, base_dir: Path | None = None, select_line: int | None = None) -> str:
    """The script with the plan applied (see the module docstring)."""
    launch = read_launch(text, base_dir=base_dir, select_line=select_line)
    if launch.config is not None:
        launch.config.text = None  # script-only: config-held flags are overridden on the command line
    return edits_for(launch, plan)[0].new
