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


def test_gemm_kernels_compile(toolchain, tmp_path):
    """One nvcc call builds sm_80 and sm_90 in parallel (--threads 2) into a fatbin."""
    nvcc, inc = toolchain
    out = tmp_path / "gemm.fatbin"
    cmd = [
        nvcc, "-std=c++17", "-fatbin", "--threads", "2",
        "-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=sm_90", "-Xptxas", "-v",
        "-I", str(ROOT / "runtime_cuda"), "-I", str(inc), str(SRC), "-o", str(out),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    assert out.stat().st_size > 0
    report = res.stdout + res.stderr
    for arch in ("sm_80", "sm_90"):
        kernels = re.findall(r"Compiling entry function '(\w+)' for '%s'" % arch, report)
        assert len(kernels) >= 6, report
    # Spills cost a few bytes at most on the 128x128 4-warp tiles (255 registers); a large spill
    # means a register array went to local memory.
    for spill in re.findall(r"(\d+) bytes spill stores", report):
        assert int(spill) <= 64, report


def _nvrtc_lib():
    """libnvrtc from the nvidia-cuda-nvrtc wheel (found without importing it) or the loader path."""
    import ctypes
    import ctypes.util

    cands = []
    for mod in ("nvidia.cu13", "nvidia.cuda_nvrtc"):
        try:
            spec = importlib.util.find_spec(mod)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.submodule_search_locations:
            for loc in spec.submodule_search_locations:
                cands += sorted(Path(loc).glob("lib/libnvrtc.so*"))
    found = ctypes.util.find_library("nvrtc")
    if found:
        cands.append(found)
    for c in cands:
        if "builtins" in str(c):
            continue
        try:
            return ctypes.CDLL(str(c))
        except OSError:
            continue
    return None


def _cuda_include():
    roots = [os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(str(Path(os.path.realpath(nvcc)).parent.parent))
    roots.append("/usr/local/cuda")
    for r in roots:
        if r and (Path(r) / "include" / "cuda_fp16.h").is_file():
            return Path(r) / "include"
    return None


def test_gemm_kernel_compiles_under_nvrtc():
    """The Python side compiles kernels with NVRTC (CuPy RawModule): the GeMM header must too."""
    import ctypes

    lib = _nvrtc_lib()
    if lib is None:
        pytest.skip("libnvrtc not found (pip install nvidia-cuda-nvrtc)")
    inc, cuda_inc = cutlass_include(), _cuda_include()
    if inc is None or cuda_inc is None:
        pytest.skip("CUTLASS headers or the CUDA include directory (cuda_fp16.h) not found")
    src = (
        b"#include <kernels/gemm.cuh>\n"
        b"CUSYNC_GEMM_KERNEL(k_gelu, 64, 64, 64, 5, 2, 2, cusync_kernels::EpiGeluTanh, 0, true, 64, "
        b"cusync_kernels::NoStage)\n"
    )
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), src, b"gemm_nvrtc.cu", 0, None, None) == 0
    opts = [b"-std=c++17", b"--gpu-architecture=sm_90", b"-default-device",
            b"-I" + str(ROOT / "runtime_cuda").encode(), b"-I" + str(inc).encode(),
            b"-I" + str(cuda_inc).encode()]
    if (cuda_inc / "cccl").is_dir():
        opts.append(b"-I" + str(cuda_inc / "cccl").encode())
    arr = (ctypes.c_char_p * len(opts))(*opts)
    rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
    n = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    log = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetProgramLog(prog, log)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    assert rc == 0, log.value.decode(errors="replace")
