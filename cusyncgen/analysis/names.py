"""Pass 1, names: the declaration table of a program.

Every declared name is a C++-safe identifier and declared once; every name a statement mentions
is declared before it, with the right kind; Param values given from outside are ints of Params
the program declares; no expression nests deeper than syntax.MAX_DEPTH. Output: a Scope.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from cusyncgen import syntax as S
from cusyncgen.errors import (ArityError, CusyncWarning, DuplicateNameError, InvalidNameError,
                              KindError, ParamValueError, ParseError, UnknownNameError,
                              UnknownParamError)

#: the largest magnitude of a Param value (-D or params=): the analysis works in 64-bit ints
PARAM_LIMIT = 2**63 - 1

_KEYWORDS = frozenset("""
alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t
char32_t class compl concept const consteval constexpr constinit const_cast continue co_await
co_return co_yield decltype default delete do double dynamic_cast else enum explicit export extern
false float for friend goto if inline int long mutable namespace new noexcept not not_eq nullptr
operator or or_eq private protected public register reinterpret_cast requires return short signed
sizeof static static_assert static_cast struct switch template this thread_local throw true try
typedef typeid typename union unsigned using virtual void volatile wchar_t while xor xor_eq
""".split())

#: not keywords, yet names the generated code cannot take, and why
RESERVED = {"cusync": "the CuSync runtime's namespace (cusync::CuStage, cusync::Tile...)",
            "std": "the C++ standard library's namespace", "main": "the program's entry point"}
#: every name the header cannot give a namespace, a Grid or a Dep: the C++ keywords and RESERVED
CXX_KEYWORDS = _KEYWORDS | frozenset(RESERVED)

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

KIND_WORD = {"param": "a Param", "dim": "a Dim", "grid": "a Grid", "tile": "a Tile",
             "forall": "a ForAll", "dep": "a Dep"}


def is_identifier(name) -> bool:
    """An ASCII identifier (the .dep language's NAME)."""
    return isinstance(name, str) and bool(_IDENT.match(name))


def check_namespace(ns) -> str:
    """The C++ namespace of the header: an identifier that is neither a C++ keyword nor RESERVED."""
    if isinstance(ns, str) and ns in RESERVED:
        raise InvalidNameError(f"namespace {ns!r} is reserved: it is {RESERVED[ns]}")
    if not is_identifier(ns) or ns in CXX_KEYWORDS:
        why = "a C++ keyword" if ns in _KEYWORDS else "not a C++ identifier"
        raise InvalidNameError(f"namespace {_short(repr(ns))} is {why}")
    return ns


def check_params(params) -> dict:
    """``params`` as a dict of int values: a value that is a str, float, None or bool is refused
    (True is not 1), and so is one beyond 64 bits."""
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise ParamValueError(f"params must be a dict of Param names to ints, not "
                              f"{type(params).__name__}")
    for k, v in params.items():
        if not is_identifier(k):
            raise ParamValueError(f"params: {_short(repr(k))} is not a Param name")
        if isinstance(v, bool) or not isinstance(v, int):
            raise ParamValueError(f"Param '{k}' must be an int, not {type(v).__name__} "
                                  f"({_short(repr(v))})")
        if abs(v) > PARAM_LIMIT:
            raise ParamValueError(f"Param '{k}' = {_short(str(v))} does not fit in 64 bits")
    return dict(params)


def _short(text: str, n: int = 40) -> str:
    return text if len(text) <= n else text[:n] + "..."


@dataclass(frozen=True)
class Input:
    """What the analysis starts from: the syntax tree, the Param values given from outside (-D,
    ``params=``) and the namespace of the header."""

    program: S.Program
    params: dict
    namespace: str


@dataclass(frozen=True)
class Sym:
    kind: str  # param, dim, grid, tile, forall, dep
    decl: object
    axis: int = -1  # a dim's position among the Dims (0, 1, 2 are x, y, z)


@dataclass
class Scope:
    """Pass 1's output: every declaration by name, in source order."""

    program: S.Program
    params: dict  # given from outside
    namespace: str
    syms: dict  # name -> Sym, in declaration order
    dims: list  # Dim names in declaration order
    warnings: list = field(default_factory=list)

    def lookup(self, name: S.Name, *kinds: str) -> Sym:
        sym = self.syms.get(name.name)
        if sym is None:
            raise UnknownNameError(f"unknown name '{name.name}'", name.span)
        if kinds and sym.kind not in kinds:
            want = " or ".join(KIND_WORD[k] for k in kinds)
            raise KindError(f"'{name.name}' is {KIND_WORD[sym.kind]}, expected {want}", name.span)
        return sym

    def kind_of(self, name: str) -> str:
        sym = self.syms.get(name)
        return sym.kind if sym else ""


def resolve(inp: Input) -> Scope:
    params = check_params(inp.params)
    namespace = check_namespace(inp.namespace)
    program = inp.program
    for e in S.expressions(program):
        d = S.depth(e)
        if d > S.MAX_DEPTH:
            raise ParseError(f"expression nested {d} levels deep; at most {S.MAX_DEPTH} are "
                             f"supported", e.span)
    scope = Scope(program, params, namespace, {}, [])
    for st in program.stmts:
        _STATEMENTS[type(st)](scope, st)
    declared = [n for n, s in scope.syms.items() if s.kind == "param"]
    unknown = sorted(set(params) - set(declared))
    if unknown:
        raise UnknownParamError(unknown[0], declared)
    if not any(s.kind == "dep" for s in scope.syms.values()):
        scope.warnings.append(CusyncWarning(
            f"{program.file} declares no Dep: the header has no policies and nothing waits"))
    return scope


def _declare(scope: Scope, name: str, kind: str, decl, span: S.Span, axis: int = -1) -> None:
    if not is_identifier(name):
        raise InvalidNameError(f"{_short(repr(name))} cannot name {KIND_WORD[kind]}: names are "
                               f"identifiers (letters, digits, '_', not starting with a digit)",
                               span)
    if name in scope.syms:
        prev = scope.syms[name]
        where = getattr(prev.decl, "span", None)
        at = f" (first declared at line {where.line})" if where and where.line else ""
        raise DuplicateNameError(f"'{name}' is already declared as {KIND_WORD[prev.kind]}{at}",
                                 span)
    if kind in ("grid", "dep") and (name in CXX_KEYWORDS or name.startswith("cusyncgen_")):
        raise KindError(f"'{name}' cannot name a {kind.capitalize()}: it is reserved in the "
                        f"generated C++", span)
    scope.syms[name] = Sym(kind, decl, axis)


def check_names(scope: Scope, node) -> None:
    """Declaration before use: every name an expression or tile set mentions is declared."""
    stack = [node]
    while stack:
        node = stack.pop()
        if isinstance(node, tuple):  # (Name, kind): a name that must be of that kind
            scope.lookup(node[0], node[1])
        elif isinstance(node, S.Name):
            scope.lookup(node)
        elif isinstance(node, S.Extent):
            scope.lookup(node.grid, "grid")
        elif isinstance(node, S.TileRef):
            scope.lookup(S.Name(node.name, node.span), "tile", "forall")
        elif isinstance(node, S.TileExpr):
            if len(node.indices) > 3:
                raise ArityError(f"a Tile has at most 3 indices, this one has "
                                 f"{len(node.indices)}", node.span)
            stack.extend(reversed(node.indices))
        elif isinstance(node, S.ForAllExpr):
            stack.extend([node.range, (node.dim, "dim"), node.tiles])
        else:
            stack.extend(reversed(S._children(node)))


def _param(scope: Scope, st: S.ParamDecl) -> None:
    if st.default is not None:
        check_names(scope, st.default)
    _declare(scope, st.name, "param", st, st.span)


def _dim(scope: Scope, st: S.DimDecl) -> None:
    # the first three Dims are the axes x, y, z of grids and tiles; more Dims can only be
    # ForAll variables (e.g. `Dim x, y, k;` ... ForAll(Tile(x + k*D, y), k, Range(2)))
    _declare(scope, st.name, "dim", st, st.span, len(scope.dims))
    scope.dims.append(st.name)


def _grid(scope: Scope, st: S.GridDecl) -> None:
    for d in st.dims:
        if not isinstance(d, S.Name):
            raise KindError(f"Grid {st.name}: the first {len(st.dims)} arguments must be dims, "
                            f"not '{S.unparse_expr(d)}'", d.span)
        scope.lookup(d, "dim")
    for e in st.extents:
        check_names(scope, e)
    _declare(scope, st.name, "grid", st, st.span)


def _tile(scope: Scope, st: S.TileDecl) -> None:
    check_names(scope, st.tile)
    _declare(scope, st.name, "tile", st, st.span)


def _forall(scope: Scope, st: S.ForAllDecl) -> None:
    check_names(scope, st.forall)
    _declare(scope, st.name, "forall", st, st.span)


def _dep(scope: Scope, st: S.DepDecl) -> None:
    _declare(scope, st.name, "dep", st, st.span)
    for group in (st.consumer,) + tuple(st.producers):
        scope.lookup(group.grid, "grid")
        for ts in group.tiles:
            check_names(scope, ts)


_STATEMENTS = {S.ParamDecl: _param, S.DimDecl: _dim, S.GridDecl: _grid, S.TileDecl: _tile,
               S.ForAllDecl: _forall, S.DepDecl: _dep}
