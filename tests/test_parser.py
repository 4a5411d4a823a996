"""The .dep grammar: the issue's normative core, the paper's Figure 5 forms, spans, and that
random input only ever raises CusyncError."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cusyncgen
from cusyncgen import syntax as S
from cusyncgen.errors import CusyncError, ParseError
from cusyncgen.parser import parse

import pytest

NORMATIVE = """\
// GPT-3 MLP: every tile of the 2nd GeMM needs the whole row of the 1st GeMM's output
Param H = 12288;                  // default value, overridable with -D H=...
Param B, S;                       // no default: must be given with -D
Param TileM = 128, TileN = 128;
Dim x, y;
Grid g1(x, y, H/(2*TileN), B*S/TileM);
Grid g2(x, y, H/TileN, B*S/TileM);
Tile prod(x, y), cons(x, y);
ForAll prodCols(prod, x, Range(g1.x));
Dep dep({g2, cons}, {g1, prodCols});
"""


def test_normative_core_parses_to_the_expected_tree():
    p = parse(NORMATIVE, "mlp.dep")
    kinds = [type(s).__name__ for s in p.stmts]
    assert kinds == ["ParamDecl"] * 5 + ["DimDecl"] * 2 + ["GridDecl"] * 2 + ["TileDecl"] * 2 + \
        ["ForAllDecl", "DepDecl"]
    assert p.stmts[0] == S.ParamDecl("H", S.Num(12288))
    assert p.stmts[1] == S.ParamDecl("B", None)
    g1 = p.stmts[7]
    assert g1.dims == (S.Name("x"), S.Name("y"))
    assert g1.extents[0] == S.BinOp("/", S.Name("H"), S.BinOp("*", S.Num(2), S.Name("TileN")))
    fa = p.stmts[11].forall
    assert fa == S.ForAllExpr(S.TileRef("prod"), S.Name("x"),
                              S.RangeExpr(None, S.Extent(S.Name("g1"), S.Name("x"))))
    dep = p.stmts[12]
    assert dep.consumer == S.DepGroup(S.Name("g2"), (S.TileRef("cons"),))
    assert dep.producers == (S.DepGroup(S.Name("g1"), (S.TileRef("prodCols"),)),)


def test_normative_core_compiles_to_design_md_numbers():
    prog = cusyncgen.compile(NORMATIVE, params={"B": 8, "S": 256}).program
    assert prog.grid("g1").extent == (48, 16, 1) and prog.grid("g1").num_tiles == 768
    assert [p.name for p in prog.policies] == ["TileSync", "RowSync"]
    assert prog.policies[1].num_sems == 16


def test_spans_point_at_the_source():
    p = parse(NORMATIVE, "mlp.dep")
    g1 = p.stmts[7]
    assert (g1.span.file, g1.span.line, g1.span.col) == ("mlp.dep", 6, 1)
    ext = g1.extents[0]
    assert (ext.span.line, ext.span.col, ext.span.end_col) == (6, 15, 26)
    assert ext.span.line_text == "Grid g1(x, y, H/(2*TileN), B*S/TileM);"


def test_paper_figure5c_inline_form_and_other_forms():
    text = """
    /* block comment
       over lines */
    Param R = 3, S = 3, C = 256, TileM = 64;
    Dim x, y, z;
    Grid g1(x, y, C/TileM, 4); Grid g2(x, y, C/TileM, 4);
    Grid g3(x, y, z, cdiv(10, 3), 4 % 3, 2);
    Dep dep({g2, Tile(x,y)}, {g1, Tile(x/(R*S), y)});
    Dep d2({g3, Tile(x, y, z)}, {g1, ForAll(ForAll(Tile(i, -(-y)), i, Range(1, 4)), y, Range(4))},
           {g2, Tile(+x, (y + 1) % 1)});
    """
    p = parse(text)
    dep = p.stmts[-2]
    assert dep.producers[0].tiles[0].indices[0] == S.BinOp(
        "/", S.Name("x"), S.BinOp("*", S.Name("R"), S.Name("S")))
    # `i` is not a Dim: the analysis rejects it, the parser does not care
    with pytest.raises(CusyncError, match="unknown name 'i'"):
        cusyncgen.compile(text)
    prog = cusyncgen.compile(text.replace("Tile(i, -(-y)), i,", "Tile(x, -(-y)), x,"))
    assert prog.program.grid("g3").extent == (4, 1, 2)
    assert len(prog.program.producer_tiles("d2", (0, 0, 1))) == 3 * 4 + 1


def test_unparse_round_trip():
    for e in ["a+b*c", "(a+b)*c", "a-(b-c)", "a/(b*c)", "-a%4", "cdiv(a, 2*b)", "g.x/2"]:
        tree = parse(f"Param v = {e};").stmts[0].default
        again = parse(f"Param v = {S.unparse_expr(tree)};").stmts[0].default
        assert again == tree


def test_program_round_trip():
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    texts = [NORMATIVE] + [p.read_text() for p in sorted((root / "examples").glob("*.dep"))]
    for text in texts:
        tree = parse(text)
        assert parse(S.unparse(tree)) == tree


def test_missing_file_is_a_user_error():
    with pytest.raises(CusyncError, match="cannot read"):
        cusyncgen.compile("no/such/file.dep")


@pytest.mark.parametrize("depth", [100, 999, 3000, 20000])
def test_deep_nesting_compiles_or_is_an_error_at_the_expression(depth):
    text = "Param v = " + "(" * depth + "1" + ")" * depth + ";\nParam w = " + "-" * depth + "1;"
    if depth + 1 > S.MAX_DEPTH:
        with pytest.raises(CusyncError) as info:
            cusyncgen.compile(text)
        assert info.value.span.line == 2 and info.value.span.col == 11  # the '-' chain, not line 1
        assert f"nested {depth + 1} levels deep; at most {S.MAX_DEPTH}" in str(info.value)
    else:
        prog = cusyncgen.compile(text).program
        assert dict(prog.params) == {"v": 1, "w": 1 if depth % 2 == 0 else -1}


@pytest.mark.parametrize("terms", [500, S.MAX_DEPTH])
def test_a_flat_sum_of_many_terms_compiles(terms):
    """A sum of N terms nests N levels (left-associative); up to syntax.MAX_DEPTH it is accepted
    in a Param, an extent and a tile index, through every command's analysis."""
    s = "+".join(["1"] * terms)
    idx = "+".join(["x"] + ["0"] * (terms - 1))
    text = (f"Param P = {s};\nDim x;\nGrid a(x, {s});\nGrid b(x, P);\n"
            f"Dep d({{b, Tile(x)}}, {{a, Tile({idx})}});\n")
    prog = cusyncgen.compile(text).program
    assert dict(prog.params) == {"P": terms} and prog.grid("a").extent == (terms, 1, 1)
    too_long = text.replace(f"Param P = {s};", "Param P = " + "+".join(["1"] * (S.MAX_DEPTH + 1)) + ";")
    with pytest.raises(ParseError) as info:
        cusyncgen.compile(too_long)
    assert (info.value.span.line, info.value.span.col) == (1, 11)


TOKENS = ["Param", "Dim", "Grid", "Tile", "ForAll", "Dep", "Range", "cdiv", "x", "y", "g1", "H",
          "(", ")", "{", "}", ",", ";", "=", "+", "-", "*", "/", "%", ".", "0", "7", "128",
          "//c\n", "/*", "*/", "\n", " ", "@", "é"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(TOKENS), max_size=40) | st.text(max_size=60))
def test_garbage_only_raises_cusync_error(parts):
    text = " ".join(parts) if isinstance(parts, list) else parts
    try:
        cusyncgen.compile(text, name="g.dep")
    except CusyncError as e:
        assert str(e).startswith(("g.dep:", "cusyncgen: error:"))


def test_parse_error_kind():
    with pytest.raises(ParseError):
        parse("Grid g1(x, y, 4, 4)")


_EXAMPLE_TEXTS = [p.read_text().replace("Param B, S;", "Param B = 2, S = 128;") for p in
                  sorted((__import__("pathlib").Path(__file__).resolve().parent.parent
                          / "examples").glob("*.dep"))]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(_EXAMPLE_TEXTS) if _EXAMPLE_TEXTS else st.just(NORMATIVE),
       st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 3), st.sampled_from(TOKENS)),
                min_size=1, max_size=4))
def test_mutated_examples_only_raise_cusync_error(text, edits):
    """Programs that are almost right reach the analysis with odd shapes."""
    import re

    toks = re.findall(r"\w+|\S", text)
    for pos, op, tok in edits:
        i = pos % (len(toks) + 1)
        if op == 0 and i < len(toks):
            del toks[i]
        elif op == 1:
            toks.insert(i, tok)
        elif op == 2 and i < len(toks):
            toks[i] = tok
        elif i < len(toks):
            toks.insert(i, toks[i])
    try:
        cusyncgen.compile(" ".join(toks), name="m.dep")
    except CusyncError:
        pass
