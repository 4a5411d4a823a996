"""Every module the GPU tests and benchmarks load compiles with nvcc for sm_80 and sm_90a: the
generated headers, the runtime and the CuTe kernels together (no GPU needed)."""
import shutil

import pytest

from cusyncgen.cuda import build
from cusyncgen.workloads import mlp as modules, overhead

pytestmark = pytest.mark.nvcc
needs = pytest.mark.skipif(shutil.which("nvcc") is None or build.cutlass_include_dir() is None,
                           reason="needs nvcc and the CUTLASS headers (pip install nvidia-cutlass)")


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUSYNCGEN_CACHE", str(tmp_path))
    return tmp_path


@needs
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_workload_modules_compile(cache, arch):
    srcs = [modules.module_source(modules.MODELS[m], M, modules.default_tiles(m, M), debug=(arch == "sm_80"))[0]
            for m, M in (("gpt3", 300), ("llama", 1), ("llama-ep", 300))]
    srcs.append(overhead.module_source(100, debug=True))
    paths = build.build_many(srcs, arch=arch, jobs=2)
    assert all(p.is_file() and p.stat().st_size > 0 for p in paths)
    # cached: a second build returns the same files without compiling
    assert build.build_many(srcs, arch=arch, jobs=2) == paths


def test_build_error_is_a_cusync_error_with_the_compiler_message(cache):
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc")
    from cusyncgen.errors import CusyncError
    with pytest.raises(CusyncError, match="(?s)nvcc failed.*not_a_type"):
        build.build(build.Source("broken", "__global__ void k() { not_a_type x; }\n"), arch="sm_80")
