"""Bad input of every kind is a clear CusyncError with an exit code, never a traceback or a silent
wrong answer: one test per defect class, then a hypothesis property over input texts and argument
lists of every compiler command (cusyncgen, check, plan, reorder)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import cusyncgen
from cusyncgen import dsl
from cusyncgen.errors import (ArityError, CusyncError, CusyncWarning, InvalidNameError, KindError,
                              ParamValueError, ValueRangeError)
from support import run_cli as run  # cli.main in-process: (exit status, stdout, stderr)

ROOT = Path(__file__).resolve().parent.parent
EX = ROOT / "examples"
SMALL = """Dim x, y;
Grid p(x, y, 2, 2);
Grid c(x, y, 2, 2);
Dep d({c, Tile(x, y)}, {p, ForAll(Tile(x, y), y, Range(2))});
"""
COMMANDS = [[], ["check"], ["plan"]]  # the ones that compile a .dep program


def run_process(argv, cwd=None, stdout=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "cusyncgen", *argv], cwd=cwd, env=env, text=True,
                          stdout=stdout if stdout is not None else subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=120)


@pytest.fixture
def small(tmp_path) -> Path:
    f = tmp_path / "small.dep"
    f.write_text(SMALL)
    return f


# ---- bad input that must not end in a traceback ------------------------------------------------

@pytest.mark.parametrize("cmd", COMMANDS)
def test_an_integer_literal_of_5000_digits_is_an_error_with_a_caret(cmd, tmp_path):
    f = tmp_path / "big.dep"
    f.write_text("Param H = " + "7" * 5000 + ";\n")
    rc, out, err = run(cmd + [str(f)])
    assert rc == 1 and out == ""
    lines = err.splitlines()
    assert lines[0].startswith(f"{f}:1:11: error: the integer literal 7777777777...7777777777 "
                               "(5000 digits) does not fit in 64 bits")
    assert lines[2].startswith(" " * 10 + "^~~~")
    with pytest.raises(ValueRangeError):
        cusyncgen.compile("Param H = " + "1" * 5000 + ";")
    assert cusyncgen.compile(f"Param H = {2**63 - 1};").program.params == (("H", 2**63 - 1),)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
@pytest.mark.parametrize("cmd", [[str(EX / "mlp_llama_ep.dep")], ["check", str(EX / "mlp_llama_ep.dep")],
                                 ["plan", "--paper"], ["--help"]])
def test_a_full_stdout_is_an_error_not_a_traceback(cmd):
    with open("/dev/full", "w") as full:
        r = run_process(cmd, stdout=full)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr
    assert r.stderr.strip().endswith("error: cannot write to stdout: No space left on device")


def test_a_closed_stdout_is_an_error_reported_once():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "cusyncgen", str(EX / "mlp_llama_ep.dep")], env=env,
                       stderr=subprocess.PIPE, text=True, preexec_fn=lambda: os.close(1), timeout=120)
    assert r.returncode == 1 and r.stderr == "cusyncgen: error: cannot write to stdout: it is closed\n"


def test_nested_floor_divisions_are_an_error_in_bounded_time():
    """A form's sort key grows exponentially with nested divisions: 30 levels took minutes."""
    def program(n):
        idx = "x"
        for _ in range(n):
            idx = f"({idx} + 1)/2"
        return f"Dim x;\nGrid p(x, 4);\nGrid c(x, 4);\nDep d({{c, Tile(x)}}, {{p, Tile({idx})}});\n"
    from cusyncgen.analysis.affine import MAX_NESTING
    assert cusyncgen.compile(program(MAX_NESTING)).program.deps
    t = time.perf_counter()
    with pytest.raises(CusyncError, match=f"nests more than {MAX_NESTING} floor divisions") as info:
        cusyncgen.compile(program(200))
    assert time.perf_counter() - t < 5 and info.value.span.line == 4


def test_plan_on_an_empty_program_is_a_clear_error_and_the_header_a_warning(tmp_path):
    f = tmp_path / "empty.dep"
    f.write_text("// nothing yet\n")
    rc, out, err = run(["plan", str(f)])
    assert rc == 1 and out == ""
    assert err == f"cusyncgen plan: error: {f} declares no Dep: there is no dependent kernel to plan\n"
    rc, out, err = run([str(f)])
    assert rc == 0 and "namespace empty {" in out
    assert err == f"cusyncgen: warning: {f} declares no Dep: the header has no policies and nothing waits\n"
    assert [w.message for w in cusyncgen.compile("").warnings] == [
        "<string> declares no Dep: the header has no policies and nothing waits"]


def test_a_flat_sum_of_500_terms_is_accepted_by_every_command(tmp_path):
    f = tmp_path / "flat.dep"
    f.write_text(SMALL.replace("Grid p(x, y, 2, 2)", "Grid p(x, y, " + "+".join(["1"] * 500) + " - 498, 2)"))
    for cmd in COMMANDS:
        rc, out, err = run(cmd + [str(f)])
        assert rc == 0, err


def test_positions_show_the_path_as_given(tmp_path):
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "bad.dep").write_text("Dim x;\nGrid g(x, 4);\nGrid h(x, 4);\nDep d({h, Tile(x)}, {g, Tile(x + 1)});\n")
    r = run_process([os.path.join("sub", "bad.dep")], cwd=tmp_path)
    assert r.returncode == 1
    assert r.stderr.startswith(os.path.join("sub", "bad.dep") + ":4:30: error: producer tile index")
    (sub / "ok.dep").write_text(SMALL)
    r = run_process([os.path.join("sub", "ok.dep")], cwd=tmp_path)
    assert r.returncode == 0 and "// generated by cusyncgen from ok.dep; do not edit" in r.stdout  # no directory


@pytest.mark.parametrize("cmd", COMMANDS + [["reorder"]])
def test_a_directory_is_not_a_file(cmd, tmp_path):
    rc, out, err = run(cmd + [str(tmp_path)])
    assert rc == 1 and out == ""
    assert "it is a directory" in err and "no such file" not in err and "Traceback" not in err


@pytest.mark.parametrize("cmd", COMMANDS)
@pytest.mark.parametrize("bad", ["B", "B=eight", "B=1.5", "=3", "B=" + "9" * 30])
def test_a_bad_define_exits_2_in_every_command(cmd, bad, small):
    rc, out, err = run(cmd + [str(small), "-D", bad])
    assert rc == 2 and out == ""
    assert "usage:" in err and err.splitlines()[-1].startswith(f"cusyncgen{' ' + cmd[0] if cmd else ''}: error: ")


@pytest.mark.parametrize("argv,rc", [
    ([], 2), (["--bogus"], 2), (["check"], 2), (["check", "--bogus", "x.dep"], 2), (["plan"], 2),
    (["plan", "--gpu", "p100", "--paper"], 2), (["reorder"], 2), (["reorder", "a.cu", "--nope"], 2),
    (["no_such.dep"], 1), (["check", "no_such.dep"], 1), (["plan", "no_such.dep"], 1),
    (["reorder", "no_such.cu"], 1), (["--version"], 0), (["plan", "--paper"], 0),
])
def test_exit_codes_are_the_same_in_every_command(argv, rc):
    got, out, err = run(argv)
    assert got == rc, err
    if rc:
        assert out == "" and "error: " in err and "Traceback" not in err


@pytest.mark.parametrize("cmd", [[], ["check"], ["plan"], ["reorder"]])
def test_every_help_documents_the_exit_codes(cmd):
    rc, out, _ = run(cmd + ["--help"])
    assert rc == 0
    assert "exit status: 0 success; 1 error" in out and "2 usage error" in " ".join(out.split())


# ---- the Python API ------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["8", 8.0, None, True, False, [8], 2**64])
def test_param_values_must_be_ints(value):
    with pytest.raises(ParamValueError) as info:
        cusyncgen.compile(EX / "mlp_gpt3.dep", params={"B": value, "S": 128})
    assert isinstance(info.value, ValueError) and not isinstance(info.value, TypeError)
    assert "Param 'B'" in str(info.value)
    with pytest.raises(ParamValueError):
        cusyncgen.compile(EX / "mlp_gpt3.dep", params=[("B", 1)])


def test_compile_refuses_what_it_cannot_compile():
    with pytest.raises(CusyncError, match="not int"):
        cusyncgen.compile(42)
    with pytest.raises(CusyncError, match="directory"):
        cusyncgen.compile(Path(ROOT / "examples"))


# ---- bad input that must not pass silently --------------------------------------------------------

def test_a_producer_tile_must_index_every_dim_of_its_grid():
    text = SMALL.replace("{p, ForAll(Tile(x, y), y, Range(2))}", "{p, Tile(x)}")
    with pytest.raises(ArityError) as info:
        cusyncgen.compile(text, name="t.dep")
    assert str(info.value) == (
        "t.dep:4:28: error: this tile of grid 'p' has 1 index but the grid has 2 dims: give each an "
        "index, like Tile(x, y)\nDep d({c, Tile(x, y)}, {p, Tile(x)});\n" + " " * 27 + "^~~~~~~")
    assert cusyncgen.compile(text.replace("Tile(x)}", "Tile(x, 0)}")).program  # row 0, said so


@pytest.mark.parametrize("bad", ["my grid", "2g", "g-1", "é", ""])
def test_dsl_names_must_be_identifiers(bad):
    x, y = dsl.Dim("x"), dsl.Dim("y")
    g1 = dsl.Grid(bad, [x, y], [2, 2])
    g2 = dsl.Grid("g2", [x, y], [2, 2])
    dep = dsl.Dep("d", (g2, dsl.Tile(x, y)), (g1, dsl.Tile(x, y)))
    with pytest.raises(InvalidNameError) as info:
        dsl.Program("p", dep).compile()
    assert info.value.span.file == __file__  # the Python line that built the Grid
    with pytest.raises(InvalidNameError):
        dsl.Program("p", dsl.Dep(bad, (g2, dsl.Tile(x, y)), (dsl.Grid("g1", [x, y], [2, 2]), dsl.Tile(x, y)))).compile()


def test_cxx_keywords_cannot_name_grids_or_namespaces(small):
    x, y = dsl.Dim("x"), dsl.Dim("y")
    g1, g2 = dsl.Grid("int", [x, y], [2, 2]), dsl.Grid("g2", [x, y], [2, 2])
    with pytest.raises(KindError, match="reserved"):
        dsl.Program("p", dsl.Dep("d", (g2, dsl.Tile(x, y)), (g1, dsl.Tile(x, y)))).compile()
    for ns in ("int", "my ns", "ns::inner", ""):
        with pytest.raises(InvalidNameError):
            cusyncgen.compile(small, namespace=ns)
        rc, out, err = run([str(small), "--namespace", ns])
        assert rc == 2 and out == "" and "--namespace" in err
    rc, out, _ = run([str(small), "--namespace", "ok_ns"])
    assert rc == 0 and "namespace ok_ns {" in out


def test_a_forall_over_a_dim_the_tile_does_not_use_is_a_warning(small):
    text = SMALL.replace("ForAll(Tile(x, y), y, Range(2))", "ForAll(Tile(x, 0), y, Range(2))")
    compiled = cusyncgen.compile(text, name="t.dep")
    assert [str(w) for w in compiled.warnings] == [
        "t.dep:4:28: warning: ForAll over 'y' repeats the same tile 2 times: its tile does not use 'y'\n"
        "Dep d({c, Tile(x, y)}, {p, ForAll(Tile(x, 0), y, Range(2))});\n"
        + " " * 27 + "^" + "~" * 30]
    assert all(isinstance(w, CusyncWarning) for w in compiled.warnings)
    assert cusyncgen.compile(SMALL).warnings == ()
    small.write_text(text)
    for cmd in COMMANDS:
        rc, out, err = run(cmd + [str(small)])
        assert rc == 0 and f"{small}:4:28: warning: ForAll over 'y'" in err


def test_a_dsl_grid_needs_one_extent_per_dim():
    x, y = dsl.Dim("x"), dsl.Dim("y")
    g1, g2 = dsl.Grid("g1", [x, y], [2]), dsl.Grid("g2", [x, y], [2, 2])
    with pytest.raises(ArityError, match="one extent per dim"):
        dsl.Program("p", dsl.Dep("d", (g2, dsl.Tile(x, y)), (g1, dsl.Tile(x, 0)))).compile()
    with pytest.raises(CusyncError, match="must be a list or tuple"):
        dsl.Grid("g", x, [2])


# ---- plan --paper --------------------------------------------------------------------------------

def test_plan_paper_uses_the_papers_v100_by_default():
    rc, default, _ = run(["plan", "--paper"])
    rc2, v100, _ = run(["plan", "--paper", "--gpu", "v100"])
    assert rc == rc2 == 0 and default == v100
    assert default.startswith("Table I (V100, 80 SMs)") and default.count("paper prints") == 6
    rc, h100, _ = run(["plan", "--paper", "--gpu", "h100"])
    assert rc == 0 and h100.startswith("note: the paper's numbers are for a V100 (80 SMs); on H100")
    assert "Table I (H100, 132 SMs)" in h100


# ---- structure -----------------------------------------------------------------------------------

def test_check_and_cli_do_not_import_each_other():
    code = ("import sys, cusyncgen.check, cusyncgen.plan.cli, cusyncgen.reorder; "
            "print('cusyncgen.cli' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)},
                       capture_output=True, text=True)
    assert r.stdout.strip() == "False", r.stderr
    import ast
    for mod in ("cli.py", "check.py", "cliutil.py"):
        tree = ast.parse((ROOT / "cusyncgen" / mod).read_text())
        names = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        if mod != "cli.py":
            assert "cusyncgen.cli" not in names, mod
        if mod == "cliutil.py":
            assert "cusyncgen.check" not in names


def test_analysis_is_passes_and_only_the_bounds_pass_imports_sympy():
    from cusyncgen import analysis
    from cusyncgen.analysis import affine, bounds, derive, evaluate, graph, names
    assert analysis.PASSES == (names.resolve, evaluate.evaluate, affine.lower, bounds.prove,
                               graph.check, derive.derive)
    state = names.Input(cusyncgen.parser.parse(SMALL, "t.dep"), {}, "t")
    kinds = []
    for p in analysis.PASSES:
        state = p(state)
        kinds.append(type(state).__name__)
    assert kinds == ["Scope", "Values", "Lowered", "Proved", "Proved", "Analysis"]
    assert state.program == cusyncgen.compile(SMALL, name="t.dep", namespace="t").program
    importers = sorted(p.name for p in (ROOT / "cusyncgen").rglob("*.py")
                       if "import sympy" in p.read_text() and "cuda" not in p.parts)
    assert importers == ["bounds.py"]


# ---- the property: every input ends with 0, 1 or 2 and a message ----------------------------------

FLAGS = ["-D", "-o", "--emit", "--namespace", "--includes", "--version", "-h", "--gpu", "--paper",
         "--occupancy", "--tile-time", "--block", "--wait-cost", "--launch-gap", "--skew",
         "--calibrated", "--model", "--json", "-q", "-", "--"]
VALUES = ["B=1", "S=128", "B=0", "S=-4", "B=x", "H=8", "Q=1", "g1=2", "g2=1", "g1=0", "v100", "h100",
          "auto", "kstep", "block", "deps", "policies", "order", "header", "int", "ns", "1.5", "-1",
          "nan", "g1=128,32,0", "g1=2000", "", "=", "x=", "é", "0x10", "1e3"]
EXAMPLES = sorted(str(p) for p in EX.glob("*.dep"))
TOKENS = ["Param", "Dim", "Grid", "Tile", "ForAll", "Dep", "Range", "cdiv", "x", "y", "z", "k",
          "g1", "g2", "H", "B", "(", ")", "{", "}", ",", ";", "=", "+", "-", "*", "/", "%", ".",
          "0", "1", "2", "7", "128", "99999999999999999999", "1" * 4400, "//c\n", "/*", "*/", "\n", " ",
          "@"]


def _mutate(text: str, cuts) -> str:
    for pos, length, ins in cuts:
        pos %= max(len(text), 1)
        text = text[:pos] + ins + text[pos + length:]
    return text


programs = st.one_of(
    st.text(max_size=200),
    st.lists(st.sampled_from(TOKENS), max_size=60).map(" ".join),
    st.tuples(st.sampled_from(EXAMPLES), st.lists(st.tuples(st.integers(0, 4000), st.integers(0, 20),
                                                            st.sampled_from(TOKENS)), max_size=4))
    .map(lambda t: _mutate(Path(t[0]).read_text(), t[1])),
)


@settings(max_examples=int(os.environ.get("CUSYNC_PROP_EXAMPLES", "150")), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(cmd=st.sampled_from([[], ["check"], ["plan"], ["reorder"]]), text=programs,
       args=st.one_of(st.just([]), st.lists(st.one_of(st.sampled_from(FLAGS), st.sampled_from(VALUES),
                                                      st.text(max_size=8)), max_size=6)),
       where=st.sampled_from(["file", "example", "stdin", "dir", "missing", "none"]),
       example=st.sampled_from(EXAMPLES))
def test_no_input_and_no_argument_list_ends_without_a_status_and_a_message(
        cmd, text, args, where, example, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prop")
    f = tmp / "p.dep"
    f.write_text(text)
    target = {"file": [str(f)], "example": [example], "stdin": ["-"], "dir": [str(tmp)],
              "missing": [str(tmp / "missing.dep")], "none": []}[where]
    args = [x for a in args for x in ([a, str(tmp / "out.txt")] if a == "-o" else [a])]
    argv = cmd + target + args + ["-D", "B=1", "-D", "S=128"] * (where == "example" and cmd != ["reorder"])
    cwd = os.getcwd()
    os.chdir(tmp)  # an output path drawn from the junk lands here
    try:
        t = time.perf_counter()
        rc, out, err = run(argv, stdin=text)
        assert time.perf_counter() - t < 60, argv  # the slowest, plan on an example: 3 s unloaded
    finally:
        os.chdir(cwd)
    assert rc in (0, 1, 2), (argv, rc)
    event(f"{' '.join(cmd) or 'header'} exit {rc}")
    assert "Traceback" not in err
    if rc:
        assert "error: " in err, (argv, err)
