"""Modules imported on first use: the workload modules name cupy, torch and the driver at their
top, yet `cusyncgen prebuild`, the tests and the CPU-only commands import them on machines
without a GPU stack (only their source and metadata parts run there)."""
from __future__ import annotations

import importlib

from cusyncgen.errors import MissingDependencyError


class LazyModule:
    """Stands for the module `name`; the first attribute read imports it."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        try:
            module = importlib.import_module(self._name)
        except ModuleNotFoundError as e:  # CuPy, PyTorch or the driver bindings: say what to install
            from cusyncgen.cuda import missing
            raise missing((e.name or self._name).split(".")[0]) from None
        except MissingDependencyError as e:  # cusyncgen.cuda.driver without CuPy: its frames say nothing more
            raise e.with_traceback(None) from None
        return getattr(module, attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name}>"


cupy = LazyModule("cupy")
torch = LazyModule("torch")
driver = LazyModule("cusyncgen.cuda.driver")
