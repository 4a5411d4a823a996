"""GPU side of cusyncgen: build modules from generated headers and run synchronized kernels.

Needs CuPy and cuda.bindings (the `cuda` extra) and a CUDA GPU; everything else in cusyncgen works
without them. The workloads themselves are cusyncgen.workloads (one module each, importable without
CuPy); this package holds what they share: building modules (build), loading and launching them
(driver), the checked kernel ABI (abi), the launch orderings (configs, chain), stages, timing, the
timeline records, and the Hopper library (sm90). The commands that loop over the workloads (bench,
tune, prebuild, timeline) sit above them, in cusyncgen.commands; nothing here imports a workload.
`available()` says whether this machine can run kernels, and why not.
"""
from __future__ import annotations


def available() -> tuple[bool, str]:
    try:
        import cupy
    except ImportError:
        return False, "CuPy is not installed (pip install -e .[cuda])"
    try:
        from cuda.bindings import driver  # noqa: F401
    except ImportError:
        try:
            from cuda import cuda  # noqa: F401
        except ImportError:
            return False, "cuda.bindings (cuda-python) is not installed"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return False, "no CUDA GPU is visible"
    except Exception as exc:  # CuPy raises CUDARuntimeError without a driver
        return False, f"no usable CUDA GPU ({exc.__class__.__name__}: {exc})"
    return True, ""
