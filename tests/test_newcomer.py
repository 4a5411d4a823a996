"""What a new user meets first, tried with odd input: every case is a clear message (``file:line:col:
error:`` for a program, one ``cusyncgen <command>: error:`` line otherwise), exit 1 (2 for usage),
never a traceback, and nothing written or changed on error. CPU only, a few seconds."""

from __future__ import annotations

import errno
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import cusyncgen
from cusyncgen import files
from cusyncgen.commands import tune
from cusyncgen.errors import CusyncError
from support import run_cli as run  # cli.main in-process: (exit status, stdout, stderr)

ROOT = Path(__file__).resolve().parent.parent
EX = ROOT / "examples"
RESULTS = ROOT / "benchmarks" / "results"
LLAMA_EP = EX / "mlp_llama_ep.dep"
SIZES = ["-D", "B=1", "-D", "S=128"]


def one_error_line(err: str, prog: str) -> str:
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), err
    return lines[0]


def tree(path: Path) -> dict:
    """Every file under ``path`` and its bytes: what a failed command must leave alone."""
    return {p.relative_to(path): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


# ---- closed stdin, `reorder -`, a byte-order mark ----------------------------------------------

@pytest.mark.parametrize("cmd", [[], ["check"], ["plan"], ["reorder"]])
def test_a_closed_stdin_is_an_error_not_a_traceback(cmd):
    rc, out, err = run(cmd + ["-"], stdin=None)
    assert rc == 1 and out == ""
    assert one_error_line(err, "cusyncgen" + (f" {cmd[0]}" if cmd else "")).endswith(
        "cannot read <stdin>: it is closed")


def test_a_closed_stdin_in_a_process():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run(["sh", "-c", f'exec "{sys.executable}" -m cusyncgen - <&-'], env=env, text=True,
                       capture_output=True, timeout=120)
    assert r.returncode == 1 and r.stderr == "cusyncgen: error: cannot read <stdin>: it is closed\n"


def test_reorder_reads_stdin_like_every_command():
    src = (EX / "kernels" / "gemm_tiled.cu").read_text()
    rc_file, from_file, _ = run(["reorder", str(EX / "kernels" / "gemm_tiled.cu")])
    rc, out, err = run(["reorder", "-"], stdin=src)
    assert rc == rc_file == 0 and out == from_file != src
    assert err.startswith("<stdin>:") and "moved the tile(B) load" in err


def test_a_byte_order_mark_is_not_part_of_the_program(tmp_path):
    text = LLAMA_EP.read_text()
    bom = tmp_path / "bom.dep"
    bom.write_bytes(b"\xef\xbb\xbf" + text.encode())
    rc, header, err = run([str(bom), *SIZES])
    assert rc == 0 and err == "" and header.startswith("#pragma once")
    rc, from_stdin, err = run(["-", *SIZES], stdin="\ufeff" + text)
    assert rc == 0 and err == "" and "namespace stdin" in from_stdin
    assert cusyncgen.compile(bom, params={"B": 1, "S": 128}).header == header
    # positions stay those of the text after the mark
    bad = tmp_path / "bad.dep"
    bad.write_bytes(b"\xef\xbb\xbfDim x;\nGrid g(x, 0);\n")
    rc, _, err = run(["check", str(bad)])
    assert rc == 1 and err.startswith(f"{bad}:2:") and "\ufeff" not in err


# ---- -o equal to an input, and writes that fail part-way ----------------------------------------

def test_an_output_that_is_the_input_is_refused(tmp_path):
    prog = tmp_path / "a.dep"
    prog.write_text(LLAMA_EP.read_text())
    (tmp_path / "link.dep").symlink_to(prog)
    kernel = tmp_path / "k.cu"
    kernel.write_text((EX / "kernels" / "gemm_tiled.cu").read_text())
    before = tree(tmp_path)
    for argv in ([str(prog), *SIZES, "-o", str(prog)],
                 [str(prog), *SIZES, "-o", str(tmp_path / "." / "a.dep")],
                 [str(tmp_path / "link.dep"), *SIZES, "-o", str(prog)],
                 ["reorder", str(kernel), "-o", str(kernel)]):
        rc, out, err = run(argv)
        prog_name = "cusyncgen reorder" if argv[0] == "reorder" else "cusyncgen"
        assert rc == 1 and out == ""
        assert "would replace the input" in one_error_line(err, prog_name)
    assert tree(tmp_path) == before


class _FullDisk(io.RawIOBase):
    """A file that takes ``room`` bytes, then fails as a full disk does."""

    def __init__(self, f, room: int):
        self.f, self.room = f, room

    def writable(self):
        return True

    def write(self, b):
        if self.room <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = self.f.write(bytes(b[: self.room]))
        self.room -= n
        return n

    def fileno(self):
        return self.f.fileno()

    def close(self):
        self.f.close()
        super().close()


@pytest.fixture
def full_disk(monkeypatch):
    """Every file files.py opens takes 100 bytes, then the disk is full."""
    real = os.fdopen

    def fdopen(fd, mode="r", *args, **kwargs):
        return io.BufferedWriter(_FullDisk(real(fd, mode, buffering=0), 100), buffer_size=16)
    monkeypatch.setattr(files.os, "fdopen", fdopen)


def test_a_write_that_fails_part_way_leaves_the_previous_output(tmp_path, full_disk):
    out = tmp_path / "out.h"
    out.write_text("the previous header\n")
    rc, stdout, err = run([str(LLAMA_EP), *SIZES, "-o", str(out)])
    assert rc == 1 and stdout == ""
    assert one_error_line(err, "cusyncgen") == f"cusyncgen: error: cannot write {out}: No space left on device"
    assert out.read_text() == "the previous header\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.h"]  # no temporary file left behind


def test_every_file_of_a_tune_report_is_written_or_none(tmp_path, full_disk, capsys):
    bench = {"device": "Test GPU", "workload": "conv2d",
             "rows": [{"model": "L1", "M": 1, "config": c, "time_us": t, "correct": True}
                      for c, t in (("StreamSync", 10.0), ("TileSync", 9.0))]}
    (tmp_path / "b.json").write_text(json.dumps(bench))
    out = tmp_path / "out"
    out.mkdir()
    for ext in ("json", "md", "h"):
        (out / f"tune-conv2d-test-gpu.{ext}").write_text(f"old {ext}\n")
    before = tree(out)
    rc = tune.main(["conv2d", "--from-json", str(tmp_path / "b.json"), "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 1 and "No space left on device" in one_error_line(err, "cusyncgen tune")
    assert tree(out) == before


def test_write_files_follows_links_and_keeps_modes(tmp_path):
    target = tmp_path / "target.h"
    target.write_text("old")
    target.chmod(0o640)
    (tmp_path / "link.h").symlink_to(target)
    files.write_file(tmp_path / "link.h", "new")
    assert (tmp_path / "link.h").is_symlink() and target.read_text() == "new"
    assert target.stat().st_mode & 0o777 == 0o640
    files.write_file(os.devnull, "into /dev/null, not over it")
    assert Path(os.devnull).exists() and not Path(os.devnull).is_file()
    with pytest.raises(CusyncError, match="it is a directory"):
        files.write_file(tmp_path, "x")


# ---- tune: rows, caches and -o of every shape ---------------------------------------------------

def _bench(rows, workload="conv2d"):
    return {"device": "Test GPU", "workload": workload, "rows": rows}


GOOD_ROW = {"model": "L1", "M": 1, "config": "StreamSync", "time_us": 10.0, "correct": True}


@pytest.mark.parametrize("workload", ["conv2d", "attention"])
@pytest.mark.parametrize("rows, message", [
    ([1, 2], "rows[0] is a number, not an object"),
    ([GOOD_ROW, {"M": 1}], "rows[1] has no field 'model'"),
    ([dict(GOOD_ROW, time_us="fast")], "rows[0]: 'time_us' is \"fast\", not a positive number"),
    ([dict(GOOD_ROW, correct=1)], "rows[0]: 'correct' is 1, not true or false"),
    ({"a": 1}, "not `cusyncgen bench` results (a JSON object with device, workload and rows)"),
    ([], "no rows (an empty bench run): nothing to choose from"),
    ([dict(GOOD_ROW, config="cuBLAS")], "no rows of our kernels"),
    ([dict(GOOD_ROW, config="TileSync")], "L1 M=1: no StreamSync row to compare with"),
    ([dict(GOOD_ROW, correct=False)], "L1 M=1: no configuration computed the reference's result"),
])
def test_tune_from_json_names_what_is_wrong_with_a_row(tmp_path, capsys, workload, rows, message):
    path = tmp_path / "b.json"
    path.write_text(json.dumps(_bench(rows, workload)))
    rc = tune.main([workload, "--from-json", str(path), "-o", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 1 and message in one_error_line(err, "cusyncgen tune"), err
    assert not (tmp_path / "out").exists()


# tune caches as `tune mlp` writes them: the H200's (sm80) and a trimmed sm90 one (GPT-3, M = 1)
CACHES = {"tune-cache-nvidia-h200.json": RESULTS / "nvidia-h200" / "tune-cache-nvidia-h200.json",
          "tune-cache-nvidia-h100-80gb-hbm3-sm90.json": ROOT / "tests" / "data" / "tune-cache-sm90-gpt3-m1.json"}


def _cache(name: str, edit) -> dict:
    cache = json.loads(CACHES[name].read_text())
    for entries in cache.values():
        for entry in entries.values():
            edit(entry)
    return cache


@pytest.mark.parametrize("name, edit, message", [
    ("tune-cache-nvidia-h200.json", lambda e: e.update(rows="x"), "rows is a string, not a list of rows"),
    ("tune-cache-nvidia-h200.json", lambda e: e.pop("tiles"), "has no field 'tiles'"),
    ("tune-cache-nvidia-h200.json", lambda e: e["rows"][0].pop("time_us"), "rows[0] has no field 'time_us'"),
    ("tune-cache-nvidia-h100-80gb-hbm3-sm90.json", lambda e: "rows" in e and e.update(rows=[{"x": 1}]),
     "rows[0] has no field 'config'"),
    ("tune-cache-nvidia-h100-80gb-hbm3-sm90.json", lambda e: "gemm" in e and e.update(gemm=[[]]),
     "gemm[0] is a list, not an object"),
    ("tune-cache-nvidia-h100-80gb-hbm3-sm90.json", lambda e: "confirm" in e and e["confirm"].pop("ours_us"),
     "confirm has no field 'ours_us'"),
])
def test_tune_from_cache_names_the_file_and_the_field(tmp_path, capsys, name, edit, message):
    path = tmp_path / "cache.json"
    path.write_text(json.dumps(_cache(name, edit)))
    rc = tune.main(["mlp", "--from-cache", str(path), "-o", str(tmp_path / "out")])
    line = one_error_line(capsys.readouterr().err, "cusyncgen tune")
    assert rc == 1 and line.startswith(f"cusyncgen tune: error: {path}: ") and message in line, line
    assert not (tmp_path / "out").exists()


def test_tune_out_dir_must_be_a_directory_one_can_write(tmp_path, capsys):
    bench = tmp_path / "b.json"
    bench.write_text(json.dumps(_bench([GOOD_ROW, dict(GOOD_ROW, config="TileSync", time_us=9.0)])))
    (tmp_path / "afile").write_text("keep")
    cases = [(tmp_path / "afile", "it is a file, not a directory"),
             (tmp_path / "afile" / "sub", "afile is a file, not a directory")]
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        cases.append((locked / "out", "permission denied"))
    for out, message in cases:
        rc = tune.main(["conv2d", "--from-json", str(bench), "-o", str(out)])
        assert rc == 1 and message in one_error_line(capsys.readouterr().err, "cusyncgen tune")
    assert (tmp_path / "afile").read_text() == "keep"


def test_tune_never_writes_over_its_input(tmp_path, capsys):
    cache = tmp_path / "tune-mlp-nvidia-h200.json"   # a cache named like the report it would write
    cache.write_bytes(CACHES["tune-cache-nvidia-h200.json"].read_bytes())
    before = tree(tmp_path)
    rc = tune.main(["mlp", "--from-cache", str(cache), "-o", str(tmp_path)])
    assert rc == 1 and "would replace the input" in one_error_line(capsys.readouterr().err, "cusyncgen tune")
    assert tree(tmp_path) == before


# ---- results --------------------------------------------------------------------------------------

@pytest.mark.parametrize("content", [{}, {"notes.txt": "x", "other.json": "{\"a\": 1}"}])
def test_results_of_a_directory_without_results_is_an_error(tmp_path, capsys, content):
    for name, text in content.items():
        (tmp_path / name).write_text(text)
    rc, out, err = run(["results", str(tmp_path), "-o", str(tmp_path / "page.md")])
    assert rc == 1 and out == ""
    assert "holds no bench or tune results" in one_error_line(err, "cusyncgen results")
    assert not (tmp_path / "page.md").exists()


def test_results_is_a_subcommand_and_a_module(tmp_path):
    rc, out, err = run(["results", str(RESULTS)])
    assert rc == 0 and out.startswith("# Results") and err == ""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "cusyncgen.results", str(RESULTS)], env=env, text=True,
                       capture_output=True, timeout=120)
    assert r.returncode == 0 and r.stdout == out
    rc, out, err = run(["results", str(RESULTS), "-o", str(RESULTS / "nvidia-h200" / "mlp-nvidia-h200.json")])
    assert rc == 1 and "would replace the input" in one_error_line(err, "cusyncgen results")


def test_examples_prints_the_examples_directory():
    rc, out, err = run(["--examples"])
    assert rc == 0 and err == "" and Path(out.strip()) == cusyncgen.data_path("examples")
    assert (Path(out.strip()) / "mlp_gpt3.dep").is_file()


# ---- messages in the user's words -------------------------------------------------------------------

def test_a_reserved_namespace_says_why_it_is_reserved(tmp_path):
    rc, out, err = run([str(LLAMA_EP), *SIZES, "--namespace", "cusync"])
    assert rc == 2 and out == ""
    assert err.splitlines()[-1] == ("cusyncgen: error: argument --namespace: namespace 'cusync' is reserved: it is "
                                    "the CuSync runtime's namespace (cusync::CuStage, cusync::Tile...)")
    rc, _, err = run([str(LLAMA_EP), *SIZES, "--namespace", "int"])
    assert rc == 2 and err.splitlines()[-1].endswith("namespace 'int' is a C++ keyword")


def test_reorder_without_pragmas_says_so(tmp_path):
    plain = tmp_path / "plain.cu"
    plain.write_text("__global__ void k() {}\n")
    rc, out, err = run(["reorder", str(plain)])
    assert rc == 0 and out == plain.read_text()
    assert err == (f"cusyncgen reorder: warning: {plain} has no '#pragma cusync tile(A)' / 'tile(B)' annotations: "
                   "nothing to move (mark the two loads, see `cusyncgen reorder -h`)\n")
    done = tmp_path / "done.cu"
    done.write_text(run(["reorder", str(EX / "kernels" / "gemm_tiled.cu")])[1])
    rc, out, err = run(["reorder", str(done)])
    assert rc == 0 and err == f"{done}: nothing to move (already reordered)\n"


def test_an_unknown_param_is_named_as_it_was_given():
    its = "its Params: H, B, S, TileM, TileN"
    with pytest.raises(CusyncError) as e:
        cusyncgen.compile(EX / "mlp_gpt3.dep", params={"B": 1, "S": 128, "Q": 1})
    assert e.value.message == f"params={{'Q': ...}}: the program declares no Param 'Q' ({its})"
    from cusyncgen import dsl
    x = dsl.Dim("x")
    prog = dsl.Program("p", x, dsl.Grid("g", [x], [2]))
    with pytest.raises(CusyncError, match=r"params=\{'Q': \.\.\.\}: the program declares no Param 'Q' "
                                          r"\(it declares none\)"):
        prog.compile({"Q": 1})
    for cmd in ([], ["check"], ["plan"]):
        rc, out, err = run(cmd + [str(EX / "mlp_gpt3.dep"), *SIZES, "-D", "Q=1"])
        assert rc == 1 and out == ""
        assert one_error_line(err, " ".join(["cusyncgen", *cmd])).endswith(
            f"error: -D Q: the program declares no Param 'Q' ({its})")


def test_plan_calibrated_names_the_gpus_measured():
    from cusyncgen.plan import gpus
    measured = sorted(k for k, t in gpus.TIMINGS.items() if t != gpus.Timing())
    assert measured  # the README's `plan --calibrated` needs one
    rc, out, err = run(["plan", str(EX / "mlp_gpt3.dep"), *SIZES, "--calibrated", "--gpu", "v100"])
    assert rc == 1 and out == ""
    assert one_error_line(err, "cusyncgen plan") == (
        f"cusyncgen plan: error: --calibrated: timing terms were measured on {', '.join(measured)} only "
        "(cusyncgen/plan/gpus.py TIMINGS), not on v100: choose one with --gpu, or give --launch-gap, "
        "--wait-cost and --skew")
    rc, out, _ = run(["plan", str(EX / "mlp_gpt3.dep"), *SIZES, "--calibrated", "--gpu", measured[0]])
    assert rc == 0 and out
    rc, out, _ = run(["plan", "-h"])
    assert f"measured on {', '.join(measured)}" in " ".join(out.split())


# ---- the GPU path without its packages, and the sm90 library's build -----------------------------

def test_the_readme_gpu_snippet_without_cupy_is_one_clear_error(monkeypatch):
    import traceback

    from cusyncgen.cuda import install_hint
    from cusyncgen.errors import MissingDependencyError
    from cusyncgen.workloads import for_device
    monkeypatch.setitem(sys.modules, "cupy", None)   # as if not installed: `import cupy` fails
    monkeypatch.delitem(sys.modules, "cusyncgen.cuda.driver", raising=False)
    with pytest.raises(MissingDependencyError) as e:
        for_device("mlp")("gpt3", 512)
    assert isinstance(e.value, ImportError)  # `except ImportError` still catches it
    assert e.value.message == f"CuPy is not installed: the GPU path needs it ({install_hint()})"
    assert e.value.__cause__ is None and e.value.__suppress_context__
    frames = traceback.extract_tb(e.value.__traceback__)
    assert len(frames) <= 5 and not any("importlib" in f.filename for f in frames)
    with pytest.raises(MissingDependencyError, match="CuPy is not installed"):
        import cusyncgen.cuda.driver  # noqa: F401
    from cusyncgen.cuda import available
    assert available() == (False, e.value.message)


def test_the_install_hint_fits_the_installation(tmp_path):
    from cusyncgen.cuda import install_hint
    assert install_hint() == f"pip install -e '.[cuda]' in {ROOT}"
    site = tmp_path / "site"   # the wheel's layout: the package with its _data, no source tree around it
    import shutil
    shutil.copytree(ROOT / "cusyncgen", site / "cusyncgen", ignore=shutil.ignore_patterns("__pycache__"))
    (site / "cusyncgen" / "_data").mkdir(exist_ok=True)
    r = subprocess.run([sys.executable, "-c", "from cusyncgen.cuda import install_hint; print(install_hint())"],
                       env={**os.environ, "PYTHONPATH": str(site)}, cwd=tmp_path, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout == "pip install 'cusyncgen[cuda]'\n", r.stderr


@pytest.fixture
def sm90_offline(tmp_path, monkeypatch):
    """The sm90 build with nvcc faked: each compile writes its object and is recorded."""
    from cusyncgen.cuda.sm90 import lib
    try:
        lib.cutlass_dirs()
    except CusyncError:
        pytest.skip("the CUTLASS headers are not installed (pip install nvidia-cutlass)")
    monkeypatch.setenv("CUSYNCGEN_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("CUSYNC_SM90_LIB", raising=False)
    monkeypatch.setattr(lib, "_nvcc_version", lambda nvcc: "fake nvcc")
    calls = []

    def fake_run(cmd, **kwargs):
        calls.append(cmd)
        Path(cmd[cmd.index("-o") + 1]).write_bytes(b"")
        return subprocess.CompletedProcess(cmd, 0, "", "")
    monkeypatch.setattr(lib.subprocess, "run", fake_run)
    return lib, calls


def test_sm90_path_prints_the_library_path_and_builds_nothing(sm90_offline, capsys):
    from cusyncgen.commands import sm90 as command
    lib, calls = sm90_offline
    assert command.main(["path"]) == 0
    path = Path(capsys.readouterr().out.strip())
    assert path.name == lib.LIB_NAME and path.parent.name.startswith("lib-") and not path.exists()
    assert calls == []


def test_the_sm90_build_reports_each_translation_unit(sm90_offline, capsys):
    from cusyncgen.commands import sm90 as command
    lib, calls = sm90_offline
    units = [name for name, _, _ in lib.units()]
    path = lib.build(jobs=2)
    assert path.is_file() and len(calls) == len(units) + 1   # each unit, then the link
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"building {lib.LIB_NAME}: {len(units)} of {len(units)} translation units")
    done = err[1:-1]   # [i/N] name, in the order the units finish
    assert sorted(int(line[1:line.index("/")]) for line in done) == list(range(1, len(units) + 1))
    assert sorted(line.split("] ")[1] for line in done) == sorted(units)
    assert all(line.startswith("[") and f"/{len(units)}] " in line for line in done)
    assert err[-1] == f"linking {lib.LIB_NAME}"
    assert command.main(["path"]) == 0 and capsys.readouterr().out.strip() == str(path)
