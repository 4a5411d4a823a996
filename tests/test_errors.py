"""Error goldens: every bad .dep in tests/golden/errors/ gives exactly the text in its .err file
(file:line:col, message, source line, caret), as a CusyncError of the expected kind."""

from __future__ import annotations

from pathlib import Path

import pytest

import cusyncgen
from cusyncgen import errors as E

DIR = Path(__file__).parent / "golden" / "errors"

KINDS = {
    "parse_token": E.ParseError, "parse_char": E.ParseError, "parse_eof": E.ParseError,
    "missing_semicolon": E.ParseError, "unterminated_comment": E.ParseError,
    "unknown_name": E.UnknownNameError, "duplicate_name": E.DuplicateNameError,
    "missing_param": E.MissingParamError, "inexact_division": E.InexactDivisionError,
    "not_affine_product": E.NotAffineError, "not_affine_div_by_dim": E.NotAffineError,
    "not_affine_zero_divisor": E.NotAffineError, "dim_not_in_grid": E.DimNotInGridError,
    "producer_lacks_dim": E.DimNotInGridError, "out_of_bounds": E.OutOfBoundsError,
    "out_of_bounds_forall": E.OutOfBoundsError, "out_of_bounds_quasi_affine": E.OutOfBoundsError,
    "out_of_bounds_params": E.OutOfBoundsError,
    "cyclic": E.CyclicDependencyError, "self_dependency": E.CyclicDependencyError,
    "kind_error": E.KindError, "empty_range": E.ValueRangeError, "zero_extent": E.ValueRangeError,
    "division_by_zero": E.ValueRangeError, "grid_arity": E.ArityError,
    "too_many_dims": E.ArityError, "consumer_not_identity": E.KindError,
}


def test_every_case_has_a_kind():
    assert sorted(p.stem for p in DIR.glob("*.dep")) == sorted(KINDS)
    assert len({k for k in KINDS.values()}) >= 12


@pytest.mark.parametrize("case", sorted(KINDS))
def test_error_golden(case, golden):
    src = DIR / f"{case}.dep"
    with pytest.raises(E.CusyncError) as info:
        cusyncgen.compile(src.read_text(), name=src.name)
    err = info.value
    assert type(err) is KINDS[case]
    text = str(err)
    assert text.startswith(f"{src.name}:{err.span.line}:{err.span.col}: error: ")
    lines = text.split("\n")
    assert len(lines) == 3 and lines[2].lstrip().startswith("^")
    golden(DIR / f"{case}.err", text + "\n")


def test_error_without_span():
    err = E.CusyncError("bad -D")
    assert str(err) == "cusyncgen: error: bad -D"


def test_unknown_override_is_an_error():
    with pytest.raises(E.UnknownNameError, match="no Param 'Q'"):
        cusyncgen.compile("Param H = 1;", params={"Q": 3})


def test_caret_spans_multichar_expression():
    with pytest.raises(E.NotAffineError) as info:
        cusyncgen.compile("Dim x, y;\nGrid a(x, y, 4, 4);\nGrid b(x, y, 4, 4);\n"
                          "Dep d({b, Tile(x, y)}, {a, Tile(x*y, 0)});\n", name="t.dep")
    assert str(info.value).splitlines()[-1] == " " * 32 + "^~~"
