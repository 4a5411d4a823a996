"""Compile the CuTe GeMM kernel instantiations (tests/cuda_src/gemm_instances.cu) with nvcc for
sm_80 and sm_90. Needs nvcc and the CUTLASS headers of the nvidia-cutlass wheel; skips otherwise."""

import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "tests" / "cuda_src" / "gemm_instances.cu"


def cutlass_include():
    """<nvidia-cutlass wheel>/cutlass_library/source/include, found without importing the package."""
    try:
        spec = importlib.util.find_spec("cutlass_library")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    inc = Path(spec.origin).parent / "source" / "include"
    return inc if (inc / "cute" / "tensor.hpp").is_file() else None


pytestmark = pytest.mark.nvcc


@pytest.fixture(scope="module")
def toolchain():
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH")
    inc = cutlass_include()
    if inc is None:
        pytest.skip("CUTLASS/CuTe headers not found (pip install nvidia-cutlass)")
    return nvcc, inc


@pytest.mark.parametrize("arch", ["80", "90"])
def test_gemm_kernels_compile(toolchain, arch, tmp_path):
    nvcc, inc = toolchain
    out = tmp_path / f"gemm_sm{arch}.cubin"
    cmd = [
        nvcc, "-std=c++17", "-cubin", f"-gencode=arch=compute_{arch},code=sm_{arch}", "-Xptxas", "-v",
        "-I", str(ROOT / "runtime_cuda"), "-I", str(inc), str(SRC), "-o", str(out),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    assert out.stat().st_size > 0
    report = res.stdout + res.stderr
    kernels = re.findall(r"Compiling entry function '(\w+)'", report)
    assert len(kernels) >= 6, report
    # Spills cost a few bytes at most on the 128x128 4-warp tiles (255 registers); a large spill
    # means a register array went to local memory.
    for spill in re.findall(r"(\d+) bytes spill stores", report):
        assert int(spill) <= 64, report
