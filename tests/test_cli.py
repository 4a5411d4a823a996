"""The command line: outputs, JSON formats, exit codes 0/1/2, stdin, subcommands, speed."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

import cusyncgen
from cusyncgen import cli

ROOT = Path(__file__).resolve().parent.parent
MLP = str(ROOT / "examples" / "mlp_gpt3.dep")
SMALL = """Dim x, y;
Grid p(x, y, 2, 2);
Grid c(x, 2);
Dep d({c, Tile(x)}, {p, ForAll(Tile(x, y), y, Range(2))});
"""


def run(argv, capsys, stdin=None, monkeypatch=None):
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    rc = cli.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_header_to_stdout_and_file(capsys, tmp_path):
    rc, out, err = run([MLP, "-D", "B=8", "-D", "S=256"], capsys)
    assert rc == 0 and err == ""
    assert out == cusyncgen.compile(MLP, params={"B": 8, "S": 256}).header
    rc, out2, _ = run([MLP, "-D", "B=8", "-D", "S=256", "-o", str(tmp_path / "h.h")], capsys)
    assert rc == 0 and out2 == "" and (tmp_path / "h.h").read_text() == out


def test_stdin(capsys, monkeypatch):
    rc, out, err = run(["-", "--emit", "deps"], capsys, SMALL, monkeypatch)
    assert rc == 0, err
    assert json.loads(out)["grids"] == {"p": [2, 2, 1], "c": [2, 1, 1]}
    rc, out, err = run(["-"], capsys, SMALL, monkeypatch)
    assert "namespace stdin {" in out and "from <stdin>;" in out


def test_emit_deps_exact_format(capsys, tmp_path):
    f = tmp_path / "small.dep"
    f.write_text(SMALL)
    rc, out, _ = run([str(f), "--emit", "deps"], capsys)
    assert rc == 0
    assert out == ('{"grids": {"p": [2, 2, 1], "c": [2, 1, 1]}, "edges": ['
                   '["c", [0, 0, 0], "p", [0, 0, 0]], ["c", [0, 0, 0], "p", [0, 1, 0]], '
                   '["c", [1, 0, 0], "p", [1, 0, 0]], ["c", [1, 0, 0], "p", [1, 1, 0]]]}\n')


def test_emit_policies_and_order(capsys, tmp_path):
    f = tmp_path / "small.dep"
    f.write_text(SMALL)
    rc, out, _ = run([str(f), "--emit", "policies"], capsys)
    pol = json.loads(out)["policies"]
    assert [p["name"] for p in pol] == ["TileSync", "ColSync", "RowSync"]
    col = pol[1]
    assert set(col) == {"dep", "consumer", "producer", "name", "num_sems", "tiles"}
    assert (col["dep"], col["consumer"], col["producer"], col["num_sems"]) == ("d", "c", "p", 2)
    assert col["tiles"] == [[[0, 0, 0], 0, 2], [[0, 1, 0], 0, 2], [[1, 0, 0], 1, 2], [[1, 1, 0], 1, 2]]
    rc, out, _ = run([str(f), "--emit", "order"], capsys)
    assert json.loads(out) == {"orders": {"p": [[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0]],
                                          "c": [[0, 0, 0], [1, 0, 0]]}}


def test_user_error_exit_1_message_only(capsys):
    rc, out, err = run([MLP], capsys)
    assert rc == 1 and out == ""
    assert err.startswith(f"{MLP}:3:7: error: Param 'B' has no value")  # the path as given
    assert "Traceback" not in err and len(err.splitlines()) == 3
    rc, _, err = run([str(ROOT / "no_such.dep")], capsys)
    assert rc == 1 and err.startswith("cusyncgen: error: cannot read")
    rc, _, err = run([MLP, "-D", "B=8", "-D", "S=256", "-D", "Q=1"], capsys)
    assert rc == 1 and "no Param 'Q'" in err


@pytest.mark.parametrize("argv", [[], ["--emit", "nope", MLP], ["-D", "B", MLP],
                                  ["-D", "B=eight", MLP], ["--bogus", MLP],
                                  ["--namespace", "no-way", MLP]])
def test_usage_errors_exit_2(argv, capsys):
    rc, out, err = run(argv, capsys)
    assert rc == 2 and out == "" and "usage" in err


def test_version_and_includes(capsys):
    rc, out, _ = run(["--version"], capsys)
    assert rc == 0 and out.strip() == f"cusyncgen {cusyncgen.__version__}"
    rc, out, _ = run(["--includes"], capsys)
    flags = out.split()
    assert rc == 0 and flags[0] == f"-I{ROOT / 'runtime_cuda'}"
    import importlib.util
    if importlib.util.find_spec("cutlass_library") is not None:
        # CUTLASS/CuTe and its util headers (packed strides), as the CUTLASS example needs them
        assert len(flags) == 3 and Path(flags[1][2:], "cute").is_dir()
        assert Path(flags[2][2:], "cutlass", "util", "packed_stride.hpp").is_file()


def test_check_subcommand(capsys, tmp_path):
    rc, out, err = run(["check", MLP, "-D", "B=2", "-D", "S=128"], capsys)
    assert rc == 0 and out.startswith("ok: 2 orders, 2 policies") and err == ""
    rc, out, err = run(["check", MLP], capsys)
    assert rc == 1 and "has no value" in err
    rc, out, err = run(["check"], capsys)
    assert rc == 2


def test_missing_subcommand_module_is_a_clear_error(capsys, monkeypatch):
    monkeypatch.setitem(cli.SUBCOMMANDS, "tune", ("cusyncgen.cuda.no_such_module", "main"))
    rc, out, err = run(["tune", "x"], capsys)
    assert rc == 1 and "not available" in err


def test_subcommand_dispatch(capsys, monkeypatch):
    import types
    seen = []
    mod = types.ModuleType("fake_plan")
    mod.main = lambda argv: seen.append(argv) or 3
    monkeypatch.setitem(sys.modules, "fake_plan", mod)
    monkeypatch.setitem(cli.SUBCOMMANDS, "plan", ("fake_plan", "main"))
    assert cli.main(["plan", "a.dep", "-D", "B=1"]) == 3 and seen == [["a.dep", "-D", "B=1"]]


def test_real_process_exit_codes(tmp_path):
    code = "import sys; from cusyncgen.cli import main; sys.exit(main())"
    env_path = {"PYTHONPATH": str(ROOT)}
    import os
    env = {**os.environ, **env_path}
    bad = tmp_path / "bad.dep"
    bad.write_text("Dim x;\nGrid g(x, 4);\nGrid h(x, 4);\nDep d({h, Tile(x)}, {g, Tile(x + 4)});\n")
    r = subprocess.run([sys.executable, "-c", code, str(bad)], capture_output=True, text=True, env=env)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith(f"{bad}:4:30: error: producer tile index 'x+4' is 7 for consumer tile h(3)")
    assert "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 2


def test_deps_with_1e5_edges_is_fast(capsys, tmp_path):
    f = tmp_path / "big.dep"
    f.write_text("Dim x, y;\nGrid p(x, y, 100, 10);\nGrid c(x, y, 100, 10);\n"
                 "Dep d({c, Tile(x, y)}, {p, ForAll(Tile(x, y), x, Range(p.x))});\n")
    t = time.perf_counter()
    rc, out, _ = run([str(f), "--emit", "deps"], capsys)
    elapsed = time.perf_counter() - t
    assert rc == 0 and len(json.loads(out)["edges"]) == 10**5
    assert elapsed < 5.0, elapsed
