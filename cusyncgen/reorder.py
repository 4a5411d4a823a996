"""``cusyncgen reorder``: the paper's optimization R as a source-to-source rewrite of a CUDA kernel.

    cusyncgen reorder kernel.cu [-o out.cu]        (stdout without -o)

A tile kernel loads one tile of each input per main-loop iteration.  When one input (the
*dependent* operand) is produced by another kernel, the loop waits on its semaphore before loading
it; the other input (the *independent* operand, e.g. the weights) needs no wait.  Loading the
independent tile before waiting lets that load overlap the wait (paper Sec. V-C, Figure 3 lines
5-8).  The user marks the two loads; this tool moves the independent one.

Rules
-----
Annotations.  ``#pragma cusync tile(A)`` / ``#pragma cusync tile(B)`` on its own line, directly
before the statement that loads the tile of operand A / B (the *load*).  The operand is ``A`` or
``B``; nothing else may follow on the pragma line but a comment.  Any other ``#pragma cusync ...``
is an error.  The load is the next statement in the same block (comments and blank lines may
come between; another preprocessor line or the end of the block may not).  A statement is a
simple statement up to its ``;``, a ``{...}`` block, or an ``if``/``for``/``while``/``switch``/
``do`` statement with its body (``if`` with its ``else``).

Blocks.  The two pragmas of one rewrite are direct children of the same brace block (a loop
body, typically): exactly one ``tile(A)`` and one ``tile(B)`` per block.  Pragmas in nested
blocks belong to those blocks.  A block with only one of them, or two of the same, is an error.

Waits.  A *wait* is a statement consisting of one call ``S.wait(...)``, ``S->wait(...)``,
``S.template wait<...>(...)`` where ``S`` is a (possibly dotted) name, e.g. ``stage.wait(t);``.
The waits that *guard* an operand are the consecutive wait statements directly before its pragma
(comments between them are allowed).  A wait anywhere else (inside an ``if``, after the load, in
another block) does not guard anything and is left alone.

The rewrite.  A *group* is an operand's guarding waits, its pragma and its load.  Exactly one
operand must be guarded (the dependent one); the other is the independent one.  If the independent
group already comes first, nothing changes (the rewrite is idempotent).  Otherwise the independent
group must follow the dependent group directly (only comments and blank lines between) and is
moved, as whole lines, to just before the first line of the dependent group.  Every group must
start on its own line and its load must end its line (a trailing comment is kept with it);
comment-only lines (``// ...`` or a one-line ``/* ... */``) directly above a group, with no blank
line between, belong to the group.  Only
those lines move; every other byte of the file, comments, blank lines between the groups and line
endings included, is kept.

What is not checked: that the independent load does not read what the dependent load writes (the
annotation is the user's promise), and anything the C preprocessor would change (macros are not
expanded; ``#if`` branches are all read as code; raw string literals ``R"(...)"`` are not
recognized).

Errors print ``file:line:col: error: message``, the line and a caret (CusyncError) and exit 1;
usage errors exit 2.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field

from cusyncgen.errors import CusyncError


@dataclass(frozen=True)
class _Span:
    file: str
    line: int
    col: int
    end_line: int
    end_col: int
    line_text: str | None = field(default=None, compare=False)


class ReorderError(CusyncError):
    """A bad ``#pragma cusync tile(...)`` annotation, or a layout the rewrite cannot move."""


# ---- tokens -------------------------------------------------------------------------------------

@dataclass
class Tok:
    kind: str      # ident, punct, str, num, comment, pp
    text: str
    start: int
    end: int


_PUNCT2 = ("->", "::")


def tokenize(src: str, fname: str = "<input>") -> list[Tok]:
    toks: list[Tok] = []
    i, n = 0, len(src)
    line_start = True  # only whitespace since the last newline
    while i < n:
        c = src[i]
        if c == "\n":
            line_start = True
            i += 1
            continue
        if c in " \t\r\f\v":
            i += 1
            continue
        if c == "#" and line_start:
            j = i
            while j < n:
                k = src.find("\n", j)
                if k < 0:
                    j = n
                    break
                # line continuation (backslash before the newline, maybe before \r)
                seg = src[j:k].rstrip("\r")
                if seg.endswith("\\"):
                    j = k + 1
                    continue
                j = k
                break
            toks.append(Tok("pp", src[i:j], i, j))
            i = j
            continue
        line_start = False
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            toks.append(Tok("comment", src[i:j], i, j))
            i = j
            continue
        if src.startswith("/*", i):
            j = src.find("*/", i + 2)
            if j < 0:
                raise _error(src, fname, i, i + 2, "unterminated /* comment")
            toks.append(Tok("comment", src[i:j + 2], i, j + 2))
            i = j + 2
            continue
        if c in "\"'":
            j = i + 1
            while j < n and src[j] != c:
                if src[j] == "\\":
                    j += 1
                elif src[j] == "\n":
                    raise _error(src, fname, i, i + 1, "unterminated string or character literal")
                j += 1
            if j >= n:
                raise _error(src, fname, i, i + 1, "unterminated string or character literal")
            toks.append(Tok("str", src[i:j + 1], i, j + 1))
            i = j + 1
            continue
        if c.isalpha() or c == "_":
            j = i + 1
            while j < n and (src[j].isalnum() or src[j] == "_"):
                j += 1
            toks.append(Tok("ident", src[i:j], i, j))
            i = j
            continue
        if c.isdigit():
            j = i + 1
            while j < n and (src[j].isalnum() or src[j] in "._'"):
                j += 1
            toks.append(Tok("num", src[i:j], i, j))
            i = j
            continue
        if src[i:i + 2] in _PUNCT2:
            toks.append(Tok("punct", src[i:i + 2], i, i + 2))
            i += 2
            continue
        toks.append(Tok("punct", c, i, i + 1))
        i += 1
    return toks


# ---- errors -------------------------------------------------------------------------------------

def _linecol(src: str, pos: int) -> tuple[int, int, str]:
    line = src.count("\n", 0, pos) + 1
    ls = src.rfind("\n", 0, pos) + 1
    le = src.find("\n", pos)
    le = len(src) if le < 0 else le
    return line, pos - ls + 1, src[ls:le].rstrip("\r")


def _error(src: str, fname: str, start: int, end: int, msg: str) -> ReorderError:
    line, col, text = _linecol(src, start)
    eline, ecol, _ = _linecol(src, max(end, start + 1))
    if eline != line:
        eline, ecol = line, len(text) + 1
    return ReorderError(msg, _Span(fname, line, col, eline, ecol, text))


# ---- structure ----------------------------------------------------------------------------------

_PRAGMA_RE = re.compile(r"^#\s*pragma\s+cusync\b(.*)$", re.S)
_TILE_RE = re.compile(r"^\s*tile\s*\(\s*([^)]*?)\s*\)\s*(//.*|/\*.*\*/\s*)?$", re.S)
_WAIT_RE = re.compile(
    r"^[A-Za-z_]\w*(?:\s*(?:\.|->)\s*[A-Za-z_]\w*)*\s*(?:\.|->)\s*(?:template\s+)?wait\s*(?:<[^;]*>)?\s*\(.*\)\s*;$",
    re.S)
_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = {")", "]", "}"}


@dataclass
class Item:
    kind: str          # "pragma" (a cusync tile pragma), "pp" (other directive), "stmt"
    first: int         # token index range [first, last]
    last: int
    operand: str = ""  # for "pragma"
    is_wait: bool = False


class _Parser:
    def __init__(self, src: str, fname: str):
        self.src, self.fname = src, fname
        self.toks = tokenize(src, fname)
        self.code = [i for i, t in enumerate(self.toks) if t.kind != "comment"]
        self.match: dict[int, int] = {}
        stack: list[int] = []
        for i in self.code:
            t = self.toks[i]
            if t.kind != "punct":
                continue
            if t.text in _OPEN:
                stack.append(i)
            elif t.text in _CLOSE:
                if not stack or _OPEN[self.toks[stack[-1]].text] != t.text:
                    raise self.err(i, f"unbalanced '{t.text}'")
                j = stack.pop()
                self.match[j], self.match[i] = i, j
        if stack:
            raise self.err(stack[-1], f"'{self.toks[stack[-1]].text}' is never closed")

    def err(self, ti: int, msg: str, end_ti: int | None = None) -> ReorderError:
        t = self.toks[ti]
        end = self.toks[end_ti].end if end_ti is not None else t.end
        return _error(self.src, self.fname, t.start, end, msg)

    # next code token index after token index i (skipping comments), or None
    def next_code(self, i: int, limit: int) -> int | None:
        j = i + 1
        while j < limit and self.toks[j].kind == "comment":
            j += 1
        return j if j < limit else None

    def parse_stmt(self, i: int, limit: int) -> int:
        """Index of the last token of the statement starting at code token i (< limit)."""
        t = self.toks[i]
        if t.kind == "punct" and t.text == "{":
            return self.match[i]
        if t.kind == "ident" and t.text in ("for", "while", "switch", "if"):
            j = self.next_code(i, limit)
            if j is not None and t.text == "if" and self.toks[j].text == "constexpr":
                j = self.next_code(j, limit)
            if j is None or self.toks[j].text != "(":
                raise self.err(i, f"expected '(' after '{t.text}'")
            body = self.next_code(self.match[j], limit)
            if body is None:
                raise self.err(i, f"'{t.text}' statement has no body")
            end = self.skip_pp_and_parse(body, limit)
            if t.text == "if":
                k = self.next_code(end, limit)
                if k is not None and self.toks[k].text == "else":
                    b2 = self.next_code(k, limit)
                    if b2 is None:
                        raise self.err(k, "'else' has no body")
                    end = self.skip_pp_and_parse(b2, limit)
            return end
        if t.kind == "ident" and t.text == "do":
            body = self.next_code(i, limit)
            if body is None:
                raise self.err(i, "'do' has no body")
            end = self.skip_pp_and_parse(body, limit)
            w = self.next_code(end, limit)
            if w is None or self.toks[w].text != "while":
                raise self.err(i, "'do' without 'while'")
            return self.parse_simple(w, limit)
        return self.parse_simple(i, limit)

    def skip_pp_and_parse(self, i: int, limit: int) -> int:
        while self.toks[i].kind == "pp":  # e.g. a directive between 'for (...)' and its body
            nxt = self.next_code(i, limit)
            if nxt is None:
                raise self.err(i, "statement body missing")
            i = nxt
        return self.parse_stmt(i, limit)

    def parse_simple(self, i: int, limit: int) -> int:
        j = i
        while j < limit:
            t = self.toks[j]
            if t.kind == "punct":
                if t.text in _OPEN:
                    j = self.match[j] + 1
                    continue
                if t.text == ";":
                    return j
            if t.kind == "pp":
                raise self.err(i, "statement is interrupted by a preprocessor line", j)
            j += 1
        raise self.err(i, "statement does not end with ';' before the end of its block")

    def items(self, lo: int, hi: int) -> list[Item]:
        """The direct children of the token range (lo, hi) (exclusive): a block's contents."""
        out: list[Item] = []
        i = self.next_code(lo, hi)
        while i is not None:
            t = self.toks[i]
            if t.kind == "pp":
                m = _PRAGMA_RE.match(t.text)
                if m:
                    out.append(self.pragma_item(i, m.group(1)))
                else:
                    out.append(Item("pp", i, i))
                i = self.next_code(i, hi)
                continue
            if t.kind == "punct" and t.text == ";":  # empty statement
                out.append(Item("stmt", i, i))
                i = self.next_code(i, hi)
                continue
            end = self.parse_stmt(i, hi)
            text = " ".join(self.toks[k].text for k in range(i, end + 1) if self.toks[k].kind != "comment")
            out.append(Item("stmt", i, end, is_wait=bool(_WAIT_RE.match(text))))
            i = self.next_code(end, hi)
        return out

    def pragma_item(self, i: int, rest: str) -> Item:
        m = _TILE_RE.match(rest)
        if not m:
            word = rest.strip().split("(")[0].split()[0] if rest.strip() else ""
            if word and word != "tile":
                raise self.err(i, f"unknown cusync pragma '{word}': expected tile(A) or tile(B)")
            raise self.err(i, "malformed cusync pragma: expected '#pragma cusync tile(A)' or '#pragma cusync tile(B)'")
        op = m.group(1)
        if op not in ("A", "B"):
            t = self.toks[i]
            k = t.text.find("(", t.text.find("tile"))
            start = t.start + k + 1 + (len(t.text[k + 1:]) - len(t.text[k + 1:].lstrip()))
            raise _error(self.src, self.fname, start, start + max(len(op), 1),
                         f"unknown operand '{op}' in tile(...): expected A or B")
        return Item("pragma", i, i, operand=op)


# ---- the rewrite --------------------------------------------------------------------------------

@dataclass
class Move:
    operand: str          # the independent operand that moves
    cut: tuple[int, int]  # byte range of its lines
    insert: int           # byte offset it moves to
    from_line: int
    to_line: int


def _line_start(src: str, pos: int) -> int:
    return src.rfind("\n", 0, pos) + 1


def _own_line_start(p: _Parser, ti: int, what: str) -> int:
    t = p.toks[ti]
    ls = _line_start(p.src, t.start)
    if p.src[ls:t.start].strip():
        raise p.err(ti, f"{what} must start its own line for the rewrite to move whole lines")
    return ls


def _line_end_after(p: _Parser, ti: int, what: str) -> int:
    """Offset just past the newline ending the line of token ti; only a comment may follow ti."""
    src = p.src
    end = p.toks[ti].end
    nl = src.find("\n", end)
    nl = len(src) if nl < 0 else nl
    j = ti + 1
    while j < len(p.toks) and p.toks[j].start < nl:
        if p.toks[j].kind != "comment":
            raise p.err(j, f"code after {what} on the same line: the rewrite moves whole lines")
        nl2 = src.find("\n", p.toks[j].end)
        nl = max(nl, len(src) if nl2 < 0 else nl2)
        j += 1
    return nl + 1 if nl < len(src) else nl


def _with_leading_comments(p: _Parser, ls: int, bound: int) -> int:
    """Extend a line start upwards over comment-only lines (``//`` or one-line ``/* */``) directly above it (no blank line
    between) that come after offset ``bound`` (the end of the previous statement)."""
    src = p.src
    while ls > 0:
        pls = _line_start(src, ls - 1)
        text = src[pls:ls].strip()
        if pls <= bound or not (text.startswith("//") or (text.startswith("/*") and text.endswith("*/"))):
            break
        ls = pls
    return ls


def plan_moves(src: str, fname: str = "<input>") -> list[Move]:
    p = _Parser(src, fname)
    # every cusync pragma, with its innermost enclosing brace block
    blocks: dict[int, list[int]] = {}
    stack: list[int] = []
    for i in p.code:
        t = p.toks[i]
        if t.kind == "punct" and t.text == "{":
            stack.append(i)
        elif t.kind == "punct" and t.text == "}":
            stack.pop()
        elif t.kind == "pp" and _PRAGMA_RE.match(t.text):
            if not stack:
                p.pragma_item(i, _PRAGMA_RE.match(t.text).group(1))  # report a bad pragma first
                raise p.err(i, "#pragma cusync tile(...) outside any block: it must annotate a load inside a kernel")
            blocks.setdefault(stack[-1], []).append(i)
    moves: list[Move] = []
    for open_i in sorted(blocks):
        items = p.items(open_i, p.match[open_i])
        groups: dict[str, tuple[int, int]] = {}   # operand -> (first item index of the group, load item index)
        first_pragma: dict[str, int] = {}
        for k, it in enumerate(items):
            if it.kind != "pragma":
                continue
            if it.operand in first_pragma:
                line = _linecol(src, p.toks[first_pragma[it.operand]].start)[0]
                raise p.err(it.first, f"second tile({it.operand}) in this block (the first is on line {line})")
            first_pragma[it.operand] = it.first
            if k + 1 >= len(items) or items[k + 1].kind != "stmt":
                raise p.err(it.first, f"#pragma cusync tile({it.operand}) is not followed by a statement")
            g = k
            while g > 0 and items[g - 1].kind == "stmt" and items[g - 1].is_wait:
                g -= 1
            groups[it.operand] = (g, k + 1)
        if len(groups) == 1:
            (op,) = groups
            other = "B" if op == "A" else "A"
            raise p.err(first_pragma[op], f"tile({op}) has no tile({other}) in the same block")
        (ga, la), (gb, lb) = groups["A"], groups["B"]
        pa, pb = la - 1, lb - 1   # pragma item indices
        guarded = {op for op, (g, ld) in groups.items() if g < ld - 1}
        if not guarded:
            raise p.err(first_pragma["A"], "no wait found for the dependent operand: neither tile(A) nor tile(B) "
                        "is directly preceded by a wait such as 'stage.wait(...);'")
        if len(guarded) == 2:
            raise p.err(first_pragma["B"], "both tile(A) and tile(B) are preceded by a wait: the rewrite needs "
                        "exactly one dependent operand")
        (dep,) = guarded
        ind = "B" if dep == "A" else "A"
        gd, ld = groups[dep]
        gi, li = groups[ind]
        if gi < gd:
            continue  # already reordered: the independent load comes before the wait
        if gi != ld + 1:
            between = items[ld + 1]
            raise p.err(between.first, f"cannot move tile({ind}) before the wait of tile({dep}): "
                        "this statement lies between them", between.last if p.toks[between.last].start - p.toks[between.first].start < 200 else None)
        first_tok = items[gi].first
        cut_lo = _own_line_start(p, first_tok, f"tile({ind})'s pragma")
        cut_lo = _with_leading_comments(p, cut_lo, p.toks[items[ld].last].end)
        cut_hi = _line_end_after(p, items[li].last, f"the tile({ind}) load")
        _line_end_after(p, items[ld].last, f"the tile({dep}) load")
        ins = _own_line_start(p, items[gd].first, f"the wait guarding tile({dep})")
        ins = _with_leading_comments(p, ins, p.toks[items[gd - 1].last].end if gd > 0 else p.toks[open_i].end)
        moves.append(Move(ind, (cut_lo, cut_hi), ins, _linecol(src, cut_lo)[0], _linecol(src, ins)[0]))
    return moves


def has_pragmas(src: str, fname: str = "<input>") -> bool:
    """Does ``src`` hold a ``#pragma cusync`` line (outside comments and strings)?"""
    return any(t.kind == "pp" and _PRAGMA_RE.match(t.text) for t in tokenize(src, fname))


def rewrite(src: str, fname: str = "<input>") -> tuple[str, list[Move]]:
    moves = plan_moves(src, fname)
    spans = sorted([(m.insert, m.cut[1]) for m in moves])
    for (a0, a1), (b0, b1) in zip(spans, spans[1:]):
        if b0 < a1:
            raise _error(src, fname, b0, b0 + 1, "annotated blocks overlap (a moved load contains another annotated block)")
    out = src
    for m in sorted(moves, key=lambda m: m.insert, reverse=True):
        lo, hi = m.cut
        # the load is inside a block whose '}' is on a later line, so the cut ends with its newline
        assert out[lo:hi].endswith("\n")
        out = out[:m.insert] + out[lo:hi] + out[m.insert:lo] + out[hi:]
    return out, moves


# ---- CLI ----------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    """Exit 0 done, 1 an error (unreadable input, a bad annotation, unwritable output), 2 usage."""
    from cusyncgen import cliutil, files

    prog = "cusyncgen reorder"
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = cliutil.ArgumentParser(prog=prog, description="Move the independent tile load before the "
                                                       "wait of the dependent one (optimization R)")
    ap.add_argument("file", help="CUDA source with #pragma cusync tile(A) / tile(B) annotations ('-' = stdin)")
    ap.add_argument("-o", "--output", help="output file (default: stdout)")
    ap.add_argument("-q", "--quiet", action="store_true", help="no summary on stderr")

    def body(args) -> int:
        if args.output not in (None, "-"):
            files.refuse_overwrite([args.output], [args.file])
        src, name = cliutil.read_source(args.file, keep_newlines=True)
        out, moves = rewrite(src, name)
        cliutil.write_output(out, args.output, prog)
        if not args.quiet:
            for m in moves:
                print(f"{name}:{m.from_line}: moved the tile({m.operand}) load to line {m.to_line}, "
                      f"before the wait of the dependent operand", file=sys.stderr)
            if not moves and has_pragmas(src, name):
                print(f"{name}: nothing to move (already reordered)", file=sys.stderr)
            elif not moves:
                print(f"{prog}: warning: {name} has no '#pragma cusync tile(A)' / 'tile(B)' annotations: "
                      "nothing to move (mark the two loads, see `cusyncgen reorder -h`)", file=sys.stderr)
        return 0

    return cliutil.run(prog, ap, body, argv)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
