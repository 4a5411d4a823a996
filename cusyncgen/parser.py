"""Parse .dep text into the syntax tree (syntax.py) with the Lark grammar in grammar/cusync.lark."""

from __future__ import annotations

import functools

import lark
from lark import Token, Transformer_NonRecursive, v_args

from cusyncgen import syntax as S
from cusyncgen.errors import CusyncError, ParseError


@functools.lru_cache(maxsize=1)
def _lark() -> lark.Lark:
    from cusyncgen.paths import data_path

    grammar = data_path("grammar") / "cusync.lark"
    return lark.Lark(grammar.read_text(), parser="lalr", propagate_positions=True,
                     maybe_placeholders=False)


#: digits of the longest integer literal: Param values and extents are 64-bit at most
MAX_LITERAL_DIGITS = 19


class _Builder(Transformer_NonRecursive):
    """Lark tree -> syntax dataclasses. Every node gets a Span with the offending source line.
    Non-recursive: a sum of a thousand terms is a thousand levels deep."""

    def __init__(self, file: str, lines: list[str]):
        super().__init__(visit_tokens=False)
        self.file = file
        self.lines = lines

    # ---- spans ----
    def _mk(self, line, col, end_line, end_col) -> S.Span:
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else None
        return S.Span(self.file, line, col, end_line, end_col, text)

    def _meta(self, meta) -> S.Span:
        if getattr(meta, "empty", True):
            return S.NOSPAN
        return self._mk(meta.line, meta.column, meta.end_line, meta.end_column)

    def _tok(self, tok: Token) -> S.Span:
        return self._mk(tok.line, tok.column, tok.end_line, tok.end_column)

    def _name(self, tok: Token) -> S.Name:
        return S.Name(str(tok), self._tok(tok))

    # ---- statements ----
    @v_args(meta=True)
    def start(self, meta, stmts):
        out = []
        for s in stmts:
            out.extend(s if isinstance(s, list) else [s])
        return S.Program(self.file, tuple(out), self._meta(meta))

    @v_args(meta=True)
    def param_stmt(self, meta, items):
        return list(items)

    @v_args(meta=True)
    def param_item(self, meta, children):
        default = children[1] if len(children) > 1 else None
        return S.ParamDecl(str(children[0]), default, self._meta(meta))

    @v_args(meta=True)
    def dim_stmt(self, meta, names):
        return [S.DimDecl(str(n), self._tok(n)) for n in names]

    @v_args(meta=True)
    def grid_stmt(self, meta, children):
        name, args = children[0], children[1:]
        span = self._meta(meta)
        if len(args) % 2:
            from cusyncgen.errors import ArityError
            raise ArityError(f"Grid {name} needs one extent per dim: Grid {name}(dims..., "
                             f"extents...), got {len(args)} arguments", span)
        half = len(args) // 2
        dims = []
        for d in args[:half]:
            if not isinstance(d, S.Name):
                from cusyncgen.errors import KindError
                raise KindError(f"Grid {name}: the first {half} arguments must be dims, "
                                f"not '{S.unparse_expr(d)}'", d.span)
            dims.append(d)
        return S.GridDecl(str(name), tuple(dims), tuple(args[half:]), span)

    @v_args(meta=True)
    def tile_stmt(self, meta, items):
        return list(items)

    @v_args(meta=True)
    def tile_item(self, meta, children):
        span = self._meta(meta)
        return S.TileDecl(str(children[0]), S.TileExpr(tuple(children[1:]), span), span)

    @v_args(meta=True)
    def forall_stmt(self, meta, children):
        name, tiles, dim, rng = children
        span = self._meta(meta)
        return S.ForAllDecl(str(name), S.ForAllExpr(tiles, self._name(dim), rng, span), span)

    @v_args(meta=True)
    def dep_stmt(self, meta, children):
        name, groups = children[0], children[1:]
        return S.DepDecl(str(name), groups[0], tuple(groups[1:]), self._meta(meta))

    @v_args(meta=True)
    def group(self, meta, children):
        return S.DepGroup(self._name(children[0]), tuple(children[1:]), self._meta(meta))

    # ---- tiles ----
    @v_args(meta=True)
    def tile_lit(self, meta, children):
        return S.TileExpr(tuple(children), self._meta(meta))

    @v_args(meta=True)
    def forall_lit(self, meta, children):
        tiles, dim, rng = children
        return S.ForAllExpr(tiles, self._name(dim), rng, self._meta(meta))

    @v_args(meta=True)
    def tile_ref(self, meta, children):
        return S.TileRef(str(children[0]), self._tok(children[0]))

    @v_args(meta=True)
    def range(self, meta, children):
        span = self._meta(meta)
        if len(children) == 1:
            return S.RangeExpr(None, children[0], span)
        return S.RangeExpr(children[0], children[1], span)

    # ---- expressions ----
    def _bin(op):
        @v_args(meta=True)
        def f(self, meta, children):
            return S.BinOp(op, children[0], children[1], self._meta(meta))
        return f

    add, sub, mul, div, mod = _bin("+"), _bin("-"), _bin("*"), _bin("/"), _bin("%")

    @v_args(meta=True)
    def neg(self, meta, children):
        return S.Neg(children[0], self._meta(meta))

    @v_args(meta=True)
    def num(self, meta, children):
        text, span = str(children[0]), self._tok(children[0])
        digits = text.lstrip("0") or "0"
        if len(digits) > MAX_LITERAL_DIGITS or int(digits) > 2**63 - 1:
            from cusyncgen.errors import ValueRangeError
            raise ValueRangeError(f"the integer literal {_shorten(digits)} ({len(digits)} digits) "
                                  f"does not fit in 64 bits", span)
        return S.Num(int(digits), span)

    @v_args(meta=True)
    def name(self, meta, children):
        return self._name(children[0])

    @v_args(meta=True)
    def extent(self, meta, children):
        return S.Extent(self._name(children[0]), self._name(children[1]), self._meta(meta))

    @v_args(meta=True)
    def cdiv(self, meta, children):
        return S.CDiv(children[0], children[1], self._meta(meta))


def _shorten(digits: str) -> str:
    return digits if len(digits) <= 24 else f"{digits[:10]}...{digits[-10:]}"


_READABLE = {"NAME": "a name", "INT": "a number", "$END": "end of input"}


def _describe(term: str) -> str:
    if term in _READABLE:
        return _READABLE[term]
    try:
        pat = _lark().get_terminal(term).pattern
        if isinstance(pat, lark.lexer.PatternStr):
            return f"'{pat.value}'"
    except KeyError:
        pass
    return term


def _expected(names) -> str:
    items = sorted({_describe(n) for n in names})
    if not items:
        return ""
    if len(items) == 1:
        return f"; expected {items[0]}"
    return "; expected one of " + ", ".join(items)


def parse(text: str, file: str = "<string>") -> S.Program:
    """Parse .dep ``text``; ``file`` is the name used in spans and messages. A UTF-8 byte-order
    mark before the first line (an editor's, Windows Notepad's) is not part of the program."""
    text = text.removeprefix("\ufeff")
    lines = text.splitlines()

    def span_at(line: int, col: int, width: int = 1) -> S.Span:
        t = lines[line - 1] if 0 < line <= len(lines) else None
        return S.Span(file, line, col, line, col + width, t)

    try:
        tree = _lark().parse(text)
    except lark.exceptions.UnexpectedCharacters as e:
        ch = text[e.pos_in_stream] if 0 <= e.pos_in_stream < len(text) else "?"
        what = "unterminated comment: '/*' without '*/'" if text.startswith("/*", e.pos_in_stream) else \
            f"unexpected character {ch!r}"
        raise ParseError(what, span_at(e.line, e.column)) from None
    except lark.exceptions.UnexpectedEOF as e:
        line = len(lines) or 1
        col = len(lines[-1]) + 1 if lines else 1
        raise ParseError("unexpected end of input" + _expected(e.expected),
                         span_at(line, col)) from None
    except lark.exceptions.UnexpectedToken as e:
        tok = e.token
        if tok.type == "$END":
            line = len(lines) or 1
            col = len(lines[-1]) + 1 if lines else 1
            raise ParseError("unexpected end of input" + _expected(e.expected),
                             span_at(line, col)) from None
        if text.startswith("/*", tok.start_pos or 0):
            raise ParseError("unterminated comment: '/*' without '*/'",
                             span_at(tok.line, tok.column, 2)) from None
        raise ParseError(f"unexpected '{tok}'" + _expected(e.expected),
                         span_at(tok.line, tok.column, max(len(str(tok)), 1))) from None
    except lark.exceptions.UnexpectedInput as e:  # pragma: no cover - other lark input errors
        raise ParseError(f"syntax error: {e.__class__.__name__}",
                         span_at(getattr(e, "line", 1), getattr(e, "column", 1))) from None
    try:
        return _Builder(file, lines).transform(tree)
    except lark.exceptions.VisitError as e:
        if isinstance(e.orig_exc, CusyncError):  # raised by the builder
            raise e.orig_exc from None
        raise
