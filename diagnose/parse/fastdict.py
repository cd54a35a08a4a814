"""Vectorised extraction of per-step training dicts from a block of log bytes.

Contract: `scan_block(block, quote)` finds every training dict that starts with
`{'loss': ` (stdout; `quote=b"'"`) or `{"loss": ` (logging.jsonl; `quote=b'"'`) in
`block` (bytes holding whole lines) and returns a `BlockScan`:
- `groups`: for rows whose dicts share one key layout (same keys, same order,
  all numeric or "N/M" values), a list of (keys, {key: float64 array}, line_idx);
  values are parsed in C by numpy (nan/inf/quoted numbers included);
- `odd_lines`: 0-based line indices (within the block) of dict lines that did not
  fit a layout (wrapped, truncated, None values, string values...): the caller
  reads those with the slow `dicts.parse_dict`;
- `dict_line_mask`: which lines of the block hold a training dict, so the caller
  scans only the other lines for INFO lines and errors.
With `line_start_only` (logging.jsonl) a dict counts only when it starts its line.
No Python loop runs per row: a 1M-step log is a few numpy passes per 4 MiB block.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field

import numpy as np

_COLON, _SPACE, _COMMA, _LBRACE, _RBRACE, _NL, _SLASH = 58, 32, 44, 123, 125, 10, 47
# keys whose values are never numeric; skipped by the vectorised path
_TEXT_KEYS = {"percentage", "elapsed_time", "remaining_time"}
_PAIR_KEYS = {"global_step/max_steps", "iteration"}
_MAX_LAYOUTS = 8


@dataclass
class BlockScan:
    n_lines: int
    groups: list[tuple[list[str], dict[str, np.ndarray], np.ndarray]] = field(default_factory=list)
    odd_lines: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    dict_line_mask: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    newlines: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


def scan_block(block: bytes, quote: bytes = b"'", line_start_only: bool = False) -> BlockScan:
    a = np.frombuffer(block, dtype=np.uint8)
    q = quote[0]
    nl = np.flatnonzero(a == _NL)
    n_lines = len(nl) + (1 if len(a) and (not len(nl) or nl[-1] != len(a) - 1) else 0)
    line_end = np.append(nl, len(a))
    res = BlockScan(n_lines=n_lines, newlines=nl, dict_line_mask=np.zeros(n_lines, bool))
    # candidate dict starts: '{' followed by <q>loss<q>: <space>
    head = b"{" + quote + b"loss" + quote + b": "
    line_start = np.concatenate(([0], nl + 1))[:n_lines]
    fast = len(line_start) > 0 and line_start[-1] + len(head) <= len(a)
    if fast:  # the common case: every '{' of the block opens its line (no tqdm or rank prefix before dicts)
        at_start = line_start[a[line_start] == _LBRACE]
        fast = len(at_start) == int(np.count_nonzero(a == _LBRACE))
    if fast:
        br = at_start
    else:
        br = np.flatnonzero(a == _LBRACE)
        br = br[br + len(head) <= len(a)]
    if len(br) == 0:
        return res
    ok = np.ones(len(br), bool)
    for k in range(1, len(head)):
        ok &= a[br + k] == head[k]
    starts = br[ok]
    if len(starts) == 0:
        return res
    line_of = np.searchsorted(nl, starts)  # 0-based line index within block
    if line_start_only and not fast:  # logging.jsonl: a row is a whole line (the summary nests log_history dicts)
        keep = starts == line_start[line_of]
        starts, line_of = starts[keep], line_of[keep]
        if len(starts) == 0:
            return res
    glued = np.zeros(0, np.int64)
    if not fast:  # one dict per line: keep the first start on each line
        first = np.ones(len(starts), bool)
        first[1:] = line_of[1:] != line_of[:-1]
        if not first.all():  # several dicts glued on one line (a terminal copy): the slow path reads them all
            glued = np.unique(line_of[~first])
            res.dict_line_mask[glued] = True
            keep = first & ~np.isin(line_of, glued)
        else:
            keep = first
        starts, line_of = starts[keep], line_of[keep]
        if len(starts) == 0:
            res.odd_lines = glued
            return res
    res.dict_line_mask[line_of] = True
    lend = line_end[line_of]
    # the closing brace: the line's last byte (before an optional \r) when every row ends so;
    # else the first '}' after the start
    last = lend - 1 - (a[np.maximum(lend - 1, 0)] == 13)
    close = np.maximum(last, starts)
    if not (a[close] == _RBRACE).all():
        closers = np.flatnonzero(a == _RBRACE)
        ci = np.searchsorted(closers, starts)
        if len(closers):
            close = np.where(ci < len(closers), closers[np.minimum(ci, len(closers) - 1)], len(a))
        else:
            close = np.full(len(starts), len(a), np.int64)
    closed = close < lend
    # key separators: every comma (a comma inside a value changes the row's key count or fails
    # the layout check below, and that row takes the slow path)
    kpos = np.flatnonzero(a == _COMMA)
    k0 = np.searchsorted(kpos, starts)
    nkeys = np.searchsorted(kpos, close) - k0 + 1
    odd = [line_of[~closed], glued]
    pending = np.flatnonzero(closed)
    layouts = 0
    while len(pending):
        if layouts >= _MAX_LAYOUTS:
            odd.append(line_of[pending])
            break
        layouts += 1
        K = int(nkeys[pending[0]])
        same_k = pending[nkeys[pending] == K]
        rest_k = pending[nkeys[pending] != K]
        # key j starts at kb_j; its length comes from the first row of the group (the template)
        kb = np.empty((len(same_k), K), np.int64)
        kb[:, 0] = starts[same_k] + 2
        if K > 1:
            kb[:, 1:] = kpos[k0[same_k][:, None] + np.arange(K - 1)[None, :]] + 3
        r0 = int(same_k[0])
        row0 = bytes(a[starts[r0] : close[r0] + 1])
        koff = [int(kb[0, j] - starts[r0]) for j in range(K)]  # key offsets within the template row
        klen = []
        for off in koff:
            e = row0.find(quote + b": ", off)
            klen.append(e - off if e >= 0 else -1)
        # every key after the first must follow `, <q>` (kb assumed it; commas inside values fail here)
        if min(klen) < 1 or any(row0[off - 3 : off] != b", " + quote for off in koff[1:]):
            odd.append(line_of[same_k[:1]])
            pending = np.concatenate((rest_k, same_k[1:]))
            continue
        ke = kb + np.asarray(klen, np.int64)[None, :]
        # same key layout as the template: `': ` right after each key of the template's
        # length, and the same first and last key byte (a cheap signature of the name)
        good = (a[ke] == q) & (a[ke + 1] == _COLON)
        good &= a[kb] == a[kb[0]][None, :]
        good &= a[ke - 1] == a[ke[0] - 1][None, :]
        match = good.all(axis=1)
        if match.all():  # the common case: no boolean-index copies of the (rows x keys) arrays
            rows, pending = same_k, rest_k
        else:
            rows = same_k[match]
            pending = np.concatenate((rest_k, same_k[~match]))
            kb, ke = kb[match], ke[match]
        keys = [row0[int(kb[0, j] - starts[r0]) : int(kb[0, j] - starts[r0]) + klen[j]].decode("utf-8", "replace") for j in range(K)]
        vb = ke + 3
        ve = np.empty_like(vb)
        if K > 1:
            ve[:, :-1] = kb[:, 1:] - 3
        ve[:, -1] = close[rows]
        want = [j for j, k in enumerate(keys) if k not in _TEXT_KEYS]
        vals = _parse_values(a, vb[:, want], ve[:, want], [keys[j] in _PAIR_KEYS for j in want], q)
        if vals is None:  # something non-numeric: let the slow path read these rows
            odd.append(line_of[rows])
            continue
        cols: dict[str, np.ndarray] = {}
        c = 0
        vals = np.asfortranarray(vals)  # column copies below are then plain memcpy
        for j in want:
            if keys[j] in _PAIR_KEYS:
                cols[keys[j] + "#0"] = vals[:, c].copy()  # own buffer: freed column by column later
                cols[keys[j] + "#1"] = vals[:, c + 1].copy()
                c += 2
            else:
                cols[keys[j]] = vals[:, c].copy()
                c += 1
        res.groups.append((keys, cols, line_of[rows]))
    res.odd_lines = np.sort(np.concatenate(odd)) if odd else np.zeros(0, np.int64)
    return res


def _parse_values(a: np.ndarray, vb: np.ndarray, ve: np.ndarray, pair: list[bool], q: int) -> np.ndarray | None:
    """Parse the byte spans [vb, ve) (rows x cols) as floats; None if any is not numeric."""
    if vb.size == 0:
        return np.zeros((vb.shape[0], 0))
    # strip the quotes of columns the template row quotes (transformers-5 strings, "N/M" pairs);
    # a quote elsewhere is left in place and makes the float parse fail (slow path)
    quoted = np.flatnonzero(a[vb[0]] == q)
    if len(quoted):
        vb, ve = vb.copy(), ve.copy()
        for j in quoted.tolist():
            if not ((a[vb[:, j]] == q).all() and (a[ve[:, j] - 1] == q).all()):
                return None
            vb[:, j] += 1
            ve[:, j] -= 1
    lens = (ve - vb).ravel() + 1  # the value and the byte after it, which becomes the separator
    if (lens <= 1).any():
        return None
    # gather bytes [vb, ve] of every value: an index that steps by 1 inside a value and
    # jumps to the next value's start (one cumsum instead of arange - repeat)
    starts = vb.ravel()
    offs = np.cumsum(lens) - lens
    idx = np.ones(int(offs[-1] + lens[-1]), np.int64)
    idx[offs[1:]] = starts[1:] - starts[:-1] - lens[:-1] + 1
    idx[0] = starts[0]
    np.cumsum(idx, out=idx)
    buf = a[idx]
    del idx
    ends = (offs + lens - 1).reshape(vb.shape)
    buf[ends.ravel()] = _SPACE
    buf[ends[:, -1]] = _NL  # one text row per log row
    n_pairs = sum(pair)
    value_at = offs.reshape(vb.shape)  # where each value starts in buf
    for j, is_pair in enumerate(pair):
        if not is_pair:
            continue
        if n_pairs == 1:  # the usual case: the row's only '/' lies inside its pair value
            sl = np.flatnonzero(buf == _SLASH)
            if len(sl) == len(value_at) and ((sl > value_at[:, j]) & (sl < ends[:, j])).all():
                buf[sl] = _SPACE
                continue
        width = int((ve[:, j] - vb[:, j]).max())
        win = value_at[:, j][:, None] + np.arange(width)[None, :]
        hit = buf[np.minimum(win, len(buf) - 1)] == _SLASH
        if not hit.any(axis=1).all():
            return None
        buf[win[np.arange(len(win)), hit.argmax(axis=1)]] = _SPACE
    return _floats(buf.tobytes(), vb.shape[0], vb.shape[1] + n_pairs)


_PANDAS_MIN_VALUES = 200_000  # above this the pandas C parser (4x faster) repays its import
_PANDAS_LOADED_MIN_VALUES = 4_096  # once pandas is imported it wins from here on


def prefer_pandas() -> None:
    """Import the pandas C parser now: a big file will need it anyway (blockscan calls this)."""
    import pandas  # noqa: F401


def _floats(text: bytes, nrows: int, ncols: int) -> np.ndarray | None:
    """Parse `nrows` lines of `ncols` space-separated numbers; None if anything is off."""
    n = nrows * ncols
    if n >= _PANDAS_MIN_VALUES or (n >= _PANDAS_LOADED_MIN_VALUES and "pandas" in sys.modules):
        import io

        import pandas as pd

        common = dict(sep=" ", header=None, dtype=np.float64, engine="c", quoting=3)
        try:  # no NA filter: ~25% faster; a block holding nan fails it and takes the NA-aware parse
            df = pd.read_csv(io.BytesIO(text), na_filter=False, **common)
        except (ValueError, pd.errors.ParserError):
            try:
                df = pd.read_csv(io.BytesIO(text), keep_default_na=False, na_values=["nan", "NaN", "-nan"], **common)
            except (ValueError, pd.errors.ParserError):
                return None
        out = df.to_numpy()
        return out if out.shape == (nrows, ncols) else None
    try:
        flat = np.fromstring(text.replace(b"\n", b" "), dtype=np.float64, sep=" ")  # text mode is supported
    except ValueError:
        return None
    if flat.size != nrows * ncols:
        return None
    return flat.reshape(nrows, ncols)
