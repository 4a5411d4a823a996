"""Modules imported on first use: the workload modules name cupy, torch and the driver at their
top, yet `cusyncgen prebuild`, the tests and the CPU-only commands import them on machines
without a GPU stack (only their source and metadata parts run there)."""
from __future__ import annotations

import importlib


class LazyModule:
    """Stands for the module `name`; the first attribute read imports it."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        return getattr(importlib.import_module(self._name), attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name}>"


cupy = LazyModule("cupy")
torch = LazyModule("torch")
driver = LazyModule("cusyncgen.cuda.driver")
