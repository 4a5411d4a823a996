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

import importlib
from pathlib import Path

# the top-level module -> (what it is called, how to install it: a pip command, or None for this
# package's `cuda` extra, install_hint())
_PACKAGES = {"cupy": ("CuPy", None), "cuda": ("cuda-bindings (cuda-python)", None),
             "torch": ("PyTorch", "pip install torch")}


def install_hint(extra: str = "cuda") -> str:
    """The pip command that adds ``extra`` to this installation, quoted for the shell: from the
    source tree where cusyncgen is imported from one (an editable install, or PYTHONPATH), else
    by name (pip keeps the installed cusyncgen and adds the extra's packages)."""
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file() and not (root / "cusyncgen" / "_data").is_dir():
        return f"pip install -e '.[{extra}]' in {root}"
    return f"pip install 'cusyncgen[{extra}]'"


def missing(module: str):
    """The MissingDependencyError for top-level module ``module`` (cupy, cuda, torch)."""
    from cusyncgen.errors import MissingDependencyError

    what, how = _PACKAGES.get(module, (module, f"pip install {module}"))
    return MissingDependencyError(f"{what} is not installed: the GPU path needs it ({how or install_hint()})")


def require(module: str):
    """``import module``, or a MissingDependencyError that names the package to install."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        top = (e.name or module).split(".")[0]
        if top not in _PACKAGES and top != module.split(".")[0]:
            raise
        raise missing(top) from None


def available() -> tuple[bool, str]:
    from cusyncgen.errors import MissingDependencyError
    try:
        cupy = require("cupy")
        try:
            require("cuda.bindings.driver")
        except MissingDependencyError:
            require("cuda.cuda")  # older cuda-python layout
    except MissingDependencyError as e:
        return False, e.message
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return False, "no CUDA GPU is visible"
    except Exception as exc:  # CuPy raises CUDARuntimeError without a driver
        return False, f"no usable CUDA GPU ({exc.__class__.__name__}: {exc})"
    return True, ""
