"""A byte-exact reader for the bash that launch scripts are written in.

Contract: `lex_script(text) -> Script`.  Nothing is evaluated.  Every `Word`
keeps its exact source span (`start`, `end` offsets into `text`), so an editor
can replace one flag's tokens and leave every other byte alone.  `Word.value`
is the word after quote removal (what the program receives), with `$VAR`,
`$(...)` and backticks left as written and `Word.dynamic` set.

What the reader understands, the way bash does:
- quotes ('...', "...", $'...'), backslash escapes, `\\<newline>` continuations
  (also `\\<CR><LF>`: CRLF files are read as the user meant them; `Script.crlf`
  says so and the linter reports it);
- `#` comments (only at the start of a word), `;`, `&&`, `||`, `|`, `&`,
  newlines as command separators; redirections (`> f`, `2>&1`, `&>f`, `<f`) are
  kept apart from the words;
- heredocs (`<<EOF`, `<<-'EOF'`): their bodies are recorded, never read as commands;
- array assignments (`ARGS=( ... )`, `ARGS+=( ... )`, over several lines, with comments): recorded in
  `Script.arrays` with each element's word and span, never read as a subshell;
- compound commands (for/while/until/select loops, if, case, functions,
  `{ }` groups, `( )` subshells): every simple command records the constructs
  it sits in (`SimpleCommand.context`).
A comment that follows a `\\` continuation ends the command in bash; the
command after it starts with `--flag`.  `SimpleCommand.after_comment_break`
marks that case so the launcher reader can report (and rejoin) it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

_OPS = ("&&", "||", ";;", "|&", ";", "|", "&")
_KEYWORDS_OPEN = {"for": "loop", "while": "loop", "until": "loop", "select": "loop", "if": "if", "case": "case"}
_KEYWORDS_CLOSE = {"done": "loop", "fi": "if", "esac": "case"}
_KEYWORDS_MID = {"do", "then", "else", "elif", "in", "!", "time"}
_ARRAY_HEAD = __import__("re").compile(r"^(?:declare\s+-a\s+)?([A-Za-z_]\w*)(\+?)=$")


@dataclass
class Word:
    text: str  # exact source slice
    value: str  # after quote removal ($VAR etc. kept as written)
    start: int
    end: int
    line: int  # 1-based line of `start`
    quoted: str = ""  # "'" / '"' when the whole word is one quoted string, "mixed" when partly quoted
    dynamic: bool = False  # contains $VAR, $(...), `...` outside single quotes
    escaped_space_only: bool = False  # the word is just `\ ` (an escaped blank, e.g. "\  # comment")


@dataclass
class Redirect:
    op: str
    target: str
    start: int
    end: int


@dataclass
class SimpleCommand:
    words: list[Word] = field(default_factory=list)
    redirects: list[Redirect] = field(default_factory=list)
    context: list[str] = field(default_factory=list)  # enclosing constructs, outermost first
    separator: str = "\n"  # what ended it: newline, ';', '&&', '|', '&', 'eof', 'comment'
    heredocs: list[tuple[int, int]] = field(default_factory=list)  # (first line, last line) of bodies it reads
    ended_by_comment: bool = False  # a comment right after a `\` continuation ended it
    after_comment_break: bool = False  # the previous command was ended that way

    @property
    def start(self) -> int:
        return self.words[0].start if self.words else (self.redirects[0].start if self.redirects else 0)

    @property
    def end(self) -> int:
        ends = [w.end for w in self.words] + [r.end for r in self.redirects]
        return max(ends) if ends else 0

    @property
    def first_line(self) -> int:
        return self.words[0].line if self.words else 0


@dataclass
class ArrayAssign:
    """`NAME=( ... )` / `NAME+=( ... )`: a bash array, its element words with their exact spans."""

    name: str
    words: list[Word]
    line: int
    start: int  # offset of `NAME=`
    end: int  # offset just after the closing `)`
    append: bool = False
    context: list[str] = field(default_factory=list)


@dataclass
class Comment:
    start: int
    end: int
    line: int
    after_continuation: bool  # a `\`-continued line leads into it


@dataclass
class Script:
    text: str
    commands: list[SimpleCommand]
    comments: list[Comment]
    heredocs: list[tuple[int, int, str]]  # (first body line, last body line, delimiter)
    line_starts: list[int]
    crlf: bool
    continuations: list[int]  # offsets of every `\` that continues a line
    problems: list[tuple[int, str]] = field(default_factory=list)  # (line, message) reader-level issues
    arrays: list[ArrayAssign] = field(default_factory=list)  # array assignments, in script order

    def line_of(self, offset: int) -> int:
        import bisect

        return bisect.bisect_right(self.line_starts, offset)

    def line_span(self, line: int) -> tuple[int, int]:
        """(start, end) offsets of a 1-based line, the end including its line break."""
        s = self.line_starts[line - 1]
        e = self.line_starts[line] if line < len(self.line_starts) else len(self.text)
        return s, e


def _line_starts(text: str) -> list[int]:
    starts = [0]
    i = text.find("\n")
    while i != -1:
        starts.append(i + 1)
        i = text.find("\n", i + 1)
    if starts[-1] == len(text) and len(starts) > 1:
        starts.pop()
    return starts


def _is_assignment(value: str) -> bool:
    name, eq, _ = value.partition("=")
    return bool(eq) and bool(name) and (name[0].isalpha() or name[0] == "_") and all(c.isalnum() or c == "_" for c in name)


class _Lexer:
    def __init__(self, text: str):
        self.t = text
        self.n = len(text)
        self.i = 0
        self.line_starts = _line_starts(text)
        self.commands: list[SimpleCommand] = []
        self.comments: list[Comment] = []
        self.heredocs: list[tuple[int, int, str]] = []
        self.continuations: list[int] = []
        self.problems: list[tuple[int, str]] = []
        self.arrays: list[ArrayAssign] = []
        self.stack: list[str] = []
        self.cur = SimpleCommand()
        self.pending_heredocs: list[tuple[str, bool]] = []  # (delimiter, strip tabs)
        self.last_was_continuation = False
        self.break_next = False

    def line(self, off: int) -> int:
        import bisect

        return bisect.bisect_right(self.line_starts, off)

    # ------------------------------------------------------------------ commands
    def _finish(self, sep: str) -> None:
        c = self.cur
        if c.words or c.redirects:
            c.separator = sep
            self._classify(c)
            if c.words or c.redirects:
                self.commands.append(c)
        self.cur = SimpleCommand()

    def _classify(self, c: SimpleCommand) -> None:
        """Track compound-command nesting from the words at command position."""
        words = c.words
        k = 0
        c.context = list(self.stack)
        while k < len(words):
            w = words[k].value if not words[k].quoted else None
            if w in _KEYWORDS_OPEN:
                self.stack.append(_KEYWORDS_OPEN[w])
                c.context = list(self.stack)
                if w in ("for", "select", "case"):
                    return  # `for x in a b c` / `case $x in`: the rest are not a command
                k += 1
                continue
            if w in _KEYWORDS_CLOSE:
                if self.stack and self.stack[-1] == _KEYWORDS_CLOSE[w]:
                    self.stack.pop()
                k += 1
                continue
            if w in _KEYWORDS_MID or w == "{":
                if w == "{":
                    self.stack.append("group")
                    c.context = list(self.stack)
                k += 1
                continue
            if w == "}":
                if self.stack and self.stack[-1] in ("group", "function"):
                    self.stack.pop()
                k += 1
                continue
            if w == "function" or (w and w.endswith("()")) or (k + 1 < len(words) and words[k + 1].value == "()"):
                self.stack.append("function")
                c.context = list(self.stack)
                return
            break
        if k:
            c.words = words[k:]

    # ------------------------------------------------------------------ lexing
    def run(self) -> None:
        t, n = self.t, self.n
        while self.i < n:
            ch = t[self.i]
            if ch in " \t":
                self.i += 1
                continue
            if ch == "\r" and self.i + 1 < n and t[self.i + 1] == "\n":
                self.i += 1
                continue
            if ch == "\n":
                self._newline()
                continue
            if ch == "\\" and self._continuation_at(self.i):
                self._eat_continuation()
                continue
            if ch == "#":
                self._comment()
                continue
            self.last_was_continuation = False
            op = self._operator()
            if op:
                continue
            if ch in "()":
                self._paren(ch)
                continue
            if ch in "<>" or (ch.isdigit() and self._redirect_ahead()) or (ch == "&" and t.startswith("&>", self.i)):
                self._redirect()
                continue
            self._word()
        self._finish("eof")

    def _continuation_at(self, i: int) -> bool:
        t = self.t
        return t.startswith("\\\n", i) or t.startswith("\\\r\n", i)

    def _eat_continuation(self) -> None:
        self.continuations.append(self.i)
        self.i += 3 if self.t.startswith("\\\r\n", self.i) else 2
        self.last_was_continuation = True

    def _newline(self) -> None:
        self.i += 1
        self.last_was_continuation = False
        self._finish("\n")
        if self.pending_heredocs:
            self._read_heredocs()

    def _comment(self) -> None:
        s = self.i
        e = self.t.find("\n", s)
        e = self.n if e == -1 else e
        end = e - 1 if e > s and self.t[e - 1] == "\r" else e
        after = self.last_was_continuation
        self.comments.append(Comment(s, end, self.line(s), after))
        self.i = e
        if after and self.cur.words:
            # bash: the comment runs to the end of the line and the newline ends the command
            self.cur.ended_by_comment = True
            self.break_next = True
            self.i = e + 1 if e < self.n else e
            self.last_was_continuation = False
            self._finish("comment")
            if self.pending_heredocs:
                self._read_heredocs()

    def _operator(self) -> bool:
        t = self.t
        for op in _OPS:
            if t.startswith(op, self.i):
                if op == "&" and t.startswith("&>", self.i):
                    return False
                self.i += len(op)
                self._finish(op)
                return True
        return False

    def _paren(self, ch: str) -> None:
        self.i += 1
        if ch == "(" and self.cur.words and self.cur.words[-1].end == self.i - 1:
            w = self.cur.words[-1]
            m = _ARRAY_HEAD.match(w.text)
            if m:  # `ARGS=(` : an array assignment, not a subshell
                self._array(w, m.group(1), bool(m.group(2)))
                return
        if ch == "(":
            if self.cur.words and self.t.startswith(")", self.i):  # `name()` function definition
                self.cur.words[-1].value += "()"
                self.cur.words[-1].text += "()"
                self.cur.words[-1].end = self.i + 1
                self.i += 1
                return
            self._finish("(")
            self.stack.append("subshell")
        else:
            self._finish(")")
            if self.stack and self.stack[-1] == "subshell":
                self.stack.pop()

    def _array(self, head: Word, name: str, append: bool) -> None:
        """Read the elements up to the closing `)`: newlines and comments inside do not end the command."""
        t, n = self.t, self.n
        words: list[Word] = []
        while self.i < n:
            ch = t[self.i]
            if ch in " \t\n" or (ch == "\r" and t.startswith("\r\n", self.i)):
                self.i += 1
                continue
            if ch == "\\" and self._continuation_at(self.i):
                self._eat_continuation()
                continue
            if ch == "#":
                e = t.find("\n", self.i)
                self.i = n if e == -1 else e
                continue
            if ch == ")":
                self.i += 1
                break
            w = self._word(collect=False)
            if w is None:  # an operator character inside: not an array we can read
                self.problems.append((head.line, f"array {name} holds something that is not a plain word"))
                self.i += 1
                continue
            words.append(w)
        head.text = t[head.start:self.i]
        head.end = self.i
        self.arrays.append(ArrayAssign(name, words, head.line, head.start, self.i, append, list(self.stack)))

    def _redirect_ahead(self) -> bool:
        j = self.i
        while j < self.n and self.t[j].isdigit():
            j += 1
        return j < self.n and self.t[j] in "<>"

    def _redirect(self) -> None:
        t = self.t
        s = self.i
        j = s
        while j < self.n and t[j].isdigit():
            j += 1
        for op in ("<<<", "<<-", "<<", "&>>", "&>", ">>", ">&", "<&", ">|", "<>", ">", "<"):
            if t.startswith(op, j):
                j += len(op)
                break
        op = t[s:j]
        # `2>&1`: the target directly follows
        while j < self.n and t[j] in " \t":
            j += 1
        self.i = j
        target = self._word(collect=False)
        tv = target.value if target else ""
        end = target.end if target else j
        self.cur.redirects.append(Redirect(op, tv, s, end))
        if op in ("<<", "<<-") and target is not None:
            self.pending_heredocs.append((tv, op == "<<-"))

    def _read_heredocs(self) -> None:
        t = self.t
        for delim, strip in self.pending_heredocs:
            first = self.line(self.i)
            last = first
            found = False
            while self.i < self.n:
                e = t.find("\n", self.i)
                e = self.n if e == -1 else e
                body_line = t[self.i : e].rstrip("\r")
                ln = self.line(self.i)
                self.i = e + 1 if e < self.n else e
                if (body_line.lstrip("\t") if strip else body_line) == delim:
                    found = True
                    last = ln
                    break
            if not found:
                self.problems.append((first, f"heredoc <<{delim} is never closed"))
                last = self.line(max(0, self.n - 1))
            self.heredocs.append((first, last, delim))
            if self.commands:
                self.commands[-1].heredocs.append((first, last))
        self.pending_heredocs = []

    def _word(self, collect: bool = True) -> Word | None:
        t, n = self.t, self.n
        s = self.i
        out: list[str] = []
        quoted_parts = 0
        plain_parts = 0
        dynamic = False
        only_escaped_space = True
        while self.i < n:
            ch = t[self.i]
            if ch in " \t\n" or (ch == "\r" and t.startswith("\r\n", self.i)):
                break
            if ch in ";&|()<>":
                break
            if ch == "\\":
                if self._continuation_at(self.i):
                    self._eat_continuation()
                    continue
                if self.i + 1 < n:
                    out.append(t[self.i + 1])
                    if t[self.i + 1] not in " \t":
                        only_escaped_space = False
                    self.i += 2
                else:
                    out.append("\\")
                    self.i += 1
                plain_parts += 1
                continue
            only_escaped_space = False
            if ch == "'":
                e = t.find("'", self.i + 1)
                e = n if e == -1 else e
                out.append(t[self.i + 1 : e])
                self.i = min(n, e + 1)
                quoted_parts += 1
                continue
            if ch == '"':
                self.i += 1
                buf: list[str] = []
                while self.i < n and t[self.i] != '"':
                    c = t[self.i]
                    if c == "\\" and self.i + 1 < n:
                        nx = t[self.i + 1]
                        if nx == "\n":
                            self.i += 2
                            continue
                        if nx in '$`"\\':
                            buf.append(nx)
                            self.i += 2
                            continue
                    if c == "$" or c == "`":
                        dynamic = True
                        buf.append(self._expansion())
                        continue
                    buf.append(c)
                    self.i += 1
                self.i = min(n, self.i + 1)
                out.append("".join(buf))
                quoted_parts += 1
                continue
            if ch == "$" and t.startswith("$'", self.i):
                e = self.i + 2
                while e < n and t[e] != "'":
                    e += 2 if t[e] == "\\" else 1
                raw = t[self.i + 2 : min(e, n)]
                try:
                    out.append(raw.encode("latin-1", "backslashreplace").decode("unicode_escape"))
                except (UnicodeDecodeError, UnicodeEncodeError):
                    out.append(raw)
                self.i = min(n, e + 1)
                quoted_parts += 1
                continue
            if ch == "$" or ch == "`":
                dynamic = True
                out.append(self._expansion())
                plain_parts += 1
                continue
            out.append(ch)
            plain_parts += 1
            self.i += 1
        if self.i == s:
            return None
        raw = t[s : self.i]
        quoted = ""
        if quoted_parts == 1 and plain_parts == 0:
            quoted = raw[0] if raw[0] in "'\"" else "'"
        elif quoted_parts:
            quoted = "mixed"
        w = Word(raw, "".join(out), s, self.i, self.line(s), quoted, dynamic,
                 escaped_space_only=only_escaped_space and raw.startswith("\\"))
        if collect:
            if self.break_next:
                self.cur.after_comment_break = True
                self.break_next = False
            self.cur.words.append(w)
        return w

    def _expansion(self) -> str:
        """Consume $VAR, ${...}, $(...), $((...)) or `...` and return it as written."""
        t, n = self.t, self.n
        s = self.i
        if t[s] == "`":
            e = s + 1
            while e < n and t[e] != "`":
                e += 2 if t[e] == "\\" else 1
            self.i = min(n, e + 1)
            return t[s : self.i]
        if t.startswith("${", s):
            e = t.find("}", s)
            self.i = n if e == -1 else e + 1
            return t[s : self.i]
        if t.startswith("$(", s):
            depth = 0
            e = s + 1
            quote = ""
            while e < n:
                c = t[e]
                if quote:
                    if c == quote:
                        quote = ""
                    elif c == "\\" and quote == '"':
                        e += 1
                elif c in "'\"":
                    quote = c
                elif c == "(":
                    depth += 1
                elif c == ")":
                    depth -= 1
                    if depth == 0:
                        break
                e += 1
            self.i = min(n, e + 1)
            return t[s : self.i]
        e = s + 1
        if e < n and (t[e].isalpha() or t[e] == "_"):
            while e < n and (t[e].isalnum() or t[e] == "_"):
                e += 1
        elif e < n and (t[e].isdigit() or t[e] in "@*#?$!-"):
            e += 1
        self.i = e
        return t[s:e]


def lex_script(text: str) -> Script:
    lx = _Lexer(text)
    lx.run()
    crlf = "\r\n" in text and text.count("\r\n") >= text.count("\n") / 2
    return Script(text=text, commands=lx.commands, comments=lx.comments, heredocs=lx.heredocs,
                  line_starts=lx.line_starts, crlf=crlf, continuations=lx.continuations, problems=lx.problems,
                  arrays=lx.arrays)


def is_assignment(word: Word) -> bool:
    return not word.text.startswith(("'", '"')) and _is_assignment(word.value)


def shell_quote(value: str, like: str = "") -> str:
    """Quote `value` for bash; keep the user's quote style (`like` = "'" or '"') when it needs quoting."""
    if value and all(c.isalnum() or c in "@%+=:,./-_#" for c in value) and not value.startswith("#"):
        return value
    if like == '"' and not any(c in value for c in '"$`\\!'):
        return f'"{value}"'
    return "'" + value.replace("'", "'\"'\"'") + "'"
