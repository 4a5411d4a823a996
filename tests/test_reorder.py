"""cusyncgen reorder: golden rewrites, errors with file:line:col and caret, nvcc compile check.

Regenerate the golden outputs with ``CUSYNC_REGEN_GOLDEN=1 pytest tests/test_reorder.py`` (or
``pytest --regen-golden`` where tests/conftest.py defines that option)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from cusyncgen.errors import CusyncError
from cusyncgen.reorder import main as reorder_main, rewrite

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "reorder"
INPUTS = sorted(GOLDEN.glob("*.in.cu"))


def _regen(request) -> bool:
    try:
        opt = request.config.getoption("--regen-golden", default=False)
    except ValueError:
        opt = False
    return bool(opt) or os.environ.get("CUSYNC_REGEN_GOLDEN") == "1"


def _read(p: Path) -> str:
    with open(p, encoding="utf-8", newline="") as f:
        return f.read()


def test_there_are_golden_inputs():
    assert len(INPUTS) >= 4


@pytest.mark.parametrize("inp", INPUTS, ids=[p.name for p in INPUTS])
def test_golden(inp, request):
    out_path = inp.with_name(inp.name.replace(".in.cu", ".out.cu"))
    src = _read(inp)
    out, moves = rewrite(src, str(inp))
    if _regen(request):
        with open(out_path, "w", encoding="utf-8", newline="") as f:
            f.write(out)
    assert out_path.exists(), f"missing golden {out_path.name}: run with CUSYNC_REGEN_GOLDEN=1"
    assert out == _read(out_path)
    # only whole lines move: same lines, same bytes
    assert sorted(out.splitlines(keepends=True)) == sorted(src.splitlines(keepends=True))
    # idempotent
    assert rewrite(out, str(inp)) == (out, [])
    expected_moves = {"already_reordered": 0, "two_waits_b_dependent": 2}.get(inp.name[:-6], 1)
    assert len(moves) == expected_moves


def test_example_kernel_is_the_golden_input():
    assert _read(ROOT / "examples" / "kernels" / "gemm_tiled.cu") == _read(GOLDEN / "gemm_tiled.in.cu")


def test_moved_load_precedes_the_wait():
    src = _read(GOLDEN / "gemm_tiled.in.cu")
    out, _ = rewrite(src)
    w = "    stage.wait(cusync::Tile"
    assert out.index("    load_tile(Bs") < out.index(w) < out.index("    load_tile(As")
    assert src.index(w) < src.index("    load_tile(As") < src.index("    load_tile(Bs")


def test_crlf_kept():
    out, _ = rewrite(_read(GOLDEN / "crlf.in.cu"))
    assert "\r\n" in out and "\n" not in out.replace("\r\n", "")


# ---- errors ----------------------------------------------------------------------------------------

def _k(body: str) -> str:
    return "__global__ void k(Stage s) {\n  for (int i = 0; i < 4; ++i) {\n" + body + "  }\n}\n"


GOOD = "    s.wait(i);\n#pragma cusync tile(A)\n    la(i);\n#pragma cusync tile(B)\n    lb(i);\n"

P22 = "^" + "~" * 21  # under '#pragma cusync tile(X)'

ERRORS = [
    ("unknown operand", _k("    s.wait(i);\n#pragma cusync tile(C)\n    la(i);\n#pragma cusync tile(B)\n    lb(i);\n"),
     "f.cu:4:21: error: unknown operand 'C' in tile(...): expected A or B", "                    ^"),
    ("unknown directive", _k("#pragma cusync tiles(A)\n    la(i);\n"),
     "f.cu:3:1: error: unknown cusync pragma 'tiles'", "^" + "~" * 22),
    ("no statement", _k("    s.wait(i);\n#pragma cusync tile(A)\n    la(i);\n#pragma cusync tile(B)\n"),
     "f.cu:6:1: error: #pragma cusync tile(B) is not followed by a statement", P22),
    ("pragma then pragma", _k("#pragma cusync tile(B)\n#pragma cusync tile(A)\n    la(i);\n"),
     "f.cu:3:1: error: #pragma cusync tile(B) is not followed by a statement", P22),
    ("two of A", _k(GOOD + "#pragma cusync tile(A)\n    la(i);\n"),
     "f.cu:8:1: error: second tile(A) in this block (the first is on line 4)", P22),
    ("no wait", _k("#pragma cusync tile(A)\n    la(i);\n#pragma cusync tile(B)\n    lb(i);\n"),
     "f.cu:3:1: error: no wait found for the dependent operand", P22),
    ("wait in if only", _k("    if (i) s.wait(i);\n#pragma cusync tile(A)\n    la(i);\n#pragma cusync tile(B)\n    lb(i);\n"),
     "f.cu:4:1: error: no wait found for the dependent operand", P22),
    ("both waited", _k("    s.wait(i);\n#pragma cusync tile(A)\n    la(i);\n    s.wait(i);\n#pragma cusync tile(B)\n    lb(i);\n"),
     "f.cu:7:1: error: both tile(A) and tile(B) are preceded by a wait", P22),
    ("only one operand", _k("    s.wait(i);\n#pragma cusync tile(A)\n    la(i);\n"),
     "f.cu:4:1: error: tile(A) has no tile(B) in the same block", P22),
    ("statement between", _k("    s.wait(i);\n#pragma cusync tile(A)\n    la(i);\n    __syncthreads();\n#pragma cusync tile(B)\n    lb(i);\n"),
     "f.cu:6:5: error: cannot move tile(B) before the wait of tile(A): this statement lies between them",
     "    ^~~~~~~~~~~~~~~~"),
    ("same line", _k("    s.wait(i);\n#pragma cusync tile(A)\n    la(i);\n#pragma cusync tile(B)\n    lb(i); x();\n"),
     "f.cu:7:12: error: code after the tile(B) load on the same line", "           ^"),
    ("outside a block", "#pragma cusync tile(A)\nint x;\n",
     "f.cu:1:1: error: #pragma cusync tile(...) outside any block", P22),
    ("unbalanced", "void f() {\n  for (;;) {\n}\n",
     "f.cu:1:10: error: '{' is never closed", "         ^"),
]


@pytest.mark.parametrize("name,src,head,caret", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors(name, src, head, caret):
    with pytest.raises(CusyncError) as ei:
        rewrite(src, "f.cu")
    text = str(ei.value)
    first, line, car = text.split("\n")
    assert first.startswith(head), text
    lineno = int(first.split(":")[1])
    assert line == src.splitlines()[lineno - 1]
    assert car == caret, text


def test_good_snippet_rewrites():
    out, moves = rewrite(_k(GOOD))
    assert out == _k("#pragma cusync tile(B)\n    lb(i);\n    s.wait(i);\n#pragma cusync tile(A)\n    la(i);\n")
    assert [m.operand for m in moves] == ["B"]


# ---- property: random layouts --------------------------------------------------------------------

@settings(max_examples=80, deadline=None)
@given(st.lists(st.sampled_from(["    f();\n", "    // c\n", "\n", "    if (i) { g(); }\n"]), max_size=3),
       st.integers(1, 3), st.booleans(), st.sampled_from(["", "    // note\n", "\n"]))
def test_rewrite_moves_only_the_independent_group(prefix, nwaits, a_dep, gap):
    dep, ind = ("A", "B") if a_dep else ("B", "A")
    waits = "".join(f"    s.wait(i + {j});\n" for j in range(nwaits))
    body = ("".join(prefix) + waits + f"#pragma cusync tile({dep})\n    l{dep}(i);\n" + gap
            + f"#pragma cusync tile({ind})\n    l{ind}(i);\n    h();\n")
    src = _k(body)
    out, moves = rewrite(src)
    assert len(moves) == 1 and moves[0].operand == ind
    assert sorted(out.splitlines(True)) == sorted(src.splitlines(True))
    assert out.index(f"l{ind}(i)") < out.index("s.wait(i + 0)") < out.index(f"l{dep}(i)") < out.index("h();")
    # the prefix stays in front, except comment-only lines directly above the waits (they belong to the group)
    kept = list(prefix)
    while kept and kept[-1] == "    // c\n":
        kept.pop()
    assert out.startswith(_k("".join(kept))[: len(_k("")) - len("  }\n}\n")])
    assert rewrite(out) == (out, [])


# ---- CLI ----------------------------------------------------------------------------------------

def test_cli_writes_output(tmp_path, capsys):
    out = tmp_path / "o.cu"
    assert reorder_main([str(GOLDEN / "gemm_tiled.in.cu"), "-o", str(out)]) == 0
    assert _read(out) == _read(GOLDEN / "gemm_tiled.out.cu")
    assert "moved the tile(B) load" in capsys.readouterr().err


def test_cli_error_exit_1(tmp_path, capsys):
    bad = tmp_path / "bad.cu"
    bad.write_text(_k("#pragma cusync tile(Q)\n    la(i);\n"))
    assert reorder_main([str(bad), "-o", str(tmp_path / "o.cu")]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:3:21: error: unknown operand 'Q'" in err and "Traceback" not in err
    assert not (tmp_path / "o.cu").exists()
    assert reorder_main([str(tmp_path / "missing.cu")]) == 1
    assert "cannot read" in capsys.readouterr().err
    assert reorder_main([]) == 2


# ---- nvcc ----------------------------------------------------------------------------------------

@pytest.mark.nvcc
@pytest.mark.parametrize("inp", INPUTS, ids=[p.name for p in INPUTS])
def test_rewritten_output_compiles(inp, tmp_path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not on PATH: the compile check of the rewritten kernels needs the CUDA toolkit")
    out, _ = rewrite(_read(inp), str(inp))
    f = tmp_path / inp.name.replace(".in.cu", ".cu")
    with open(f, "w", encoding="utf-8", newline="") as fh:
        fh.write(out)
    r = subprocess.run([nvcc, "-arch=sm_80", "-std=c++17", "-I", str(ROOT / "runtime_cuda"), "-c", str(f),
                        "-o", str(tmp_path / "k.o")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
