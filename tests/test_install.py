"""A non-editable install carries what the GPU path reads (the .dep examples, the templates, the
grammar, the runtime and kernel headers) and finds it from any directory: the package as the
wheel lays it out (pyproject's force-include), and, where hatchling is importable, the wheel
itself built with `pip wheel`. CPU only; a few seconds (the wheel build: about 10 s)."""
import importlib.util
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parent.parent

CHECK = r'''
import sys
from pathlib import Path
import cusyncgen
from cusyncgen import data_path
from cusyncgen.cuda import build
site = sys.argv[1]
assert str(Path(cusyncgen.__file__).resolve()).startswith(site), cusyncgen.__file__
for name in ("examples", "templates", "grammar", "runtime_cuda"):
    assert str(data_path(name).resolve()).startswith(site) and data_path(name).is_dir(), name
assert (build.runtime_include_dir() / "kernels" / "abi.cuh").is_file()
from cusyncgen.workloads import REGISTRY, mlp
src, _ = mlp.module_source(mlp.MODELS["gpt3"], 1, mlp.default_tiles("gpt3", 1))
assert "CUSYNC_MLP_GEMM(gemm2_RowSync_R, Cfg2R, Cons_RowSync)" in src.text, src.text
print(len(list(data_path("examples").glob("*.dep"))), len(REGISTRY))
'''


def _run_check(site: Path, cwd: Path) -> str:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site), "HOME": str(cwd)}
    proc = subprocess.run([sys.executable, "-c", CHECK, str(site.resolve())], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_the_wheel_layout_finds_its_data_from_another_directory(tmp_path):
    """pyproject's force-include mapping applied by hand: the package and its _data/ only."""
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    site = tmp_path / "site"
    for pkg in conf["packages"]:
        shutil.copytree(ROOT / pkg, site / pkg, ignore=shutil.ignore_patterns("__pycache__", "_data"))
    for src, dst in conf["force-include"].items():
        shutil.copytree(ROOT / src, site / dst)
    assert set(conf["force-include"]) == {"grammar", "templates", "runtime_cuda", "examples"}
    work = tmp_path / "elsewhere"
    work.mkdir()
    n_examples, n_workloads = _run_check(site, work)
    assert int(n_examples) == len(list((ROOT / "examples").glob("*.dep"))) and int(n_workloads) == 4


@pytest.mark.skipif(importlib.util.find_spec("hatchling") is None, reason="needs hatchling (the build backend)")
def test_a_built_wheel_installs_and_finds_its_data(tmp_path):
    out = tmp_path / "dist"
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                           str(out), str(ROOT)], cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    (wheel,) = out.glob("cusyncgen-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for path in ("cusyncgen/_data/examples/mlp_gpt3.dep", "cusyncgen/_data/templates/modules/mlp.cu.j2",
                 "cusyncgen/_data/runtime_cuda/kernels/abi.cuh", "cusyncgen/workloads/mlp.py"):
        assert path in names, path
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    work = tmp_path / "elsewhere"
    work.mkdir()
    _run_check(site, work)
