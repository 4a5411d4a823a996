"""The workloads of the GPU path, one module each, and their registry.

A workload is a class (cusyncgen.workloads.base.Workload): its name, kernel family, models and
sizes, the module sources prebuild compiles, its benchmark, and per instance (one shape on a GPU)
its configurations, buffers, run and reference. `cusyncgen bench`, `tune`, prebuild and the
timelines loop over REGISTRY; adding a workload is one module here, its .dep file under examples/
and its kernels (runtime_cuda/kernels/, a template under templates/modules/).

Importing this package needs no GPU stack: CuPy, PyTorch and the CUDA driver bindings are imported
when a workload first runs (cusyncgen.cuda.lazy).
"""
from __future__ import annotations

from cusyncgen.workloads.attention import Attention
from cusyncgen.workloads.base import Workload
from cusyncgen.workloads.conv2d import ConvChain
from cusyncgen.workloads.mlp import MLP
from cusyncgen.workloads.overhead import CopyChain

# name -> kernel family -> class. A second kernel family of a workload (e.g. Hopper's "sm90")
# is a class with the same name and its own `kernel`, sources and orderings, registered here.
FAMILIES: dict[str, dict[str, type]] = {}


def register(cls: type) -> type:
    FAMILIES.setdefault(cls.name, {})[cls.kernel] = cls
    return cls


for _cls in (MLP, ConvChain, Attention, CopyChain):
    register(_cls)

DEFAULT_KERNEL = "sm80"
# the workloads on their default kernel family: what bench, tune, prebuild and timeline loop over
REGISTRY: dict[str, type] = {name: fams[DEFAULT_KERNEL] for name, fams in FAMILIES.items()}


def kernels() -> list[str]:
    """Every registered kernel family."""
    return sorted({k for fams in FAMILIES.values() for k in fams})


def get(name: str, kernel: str = DEFAULT_KERNEL) -> type:
    """The workload class named `name` on kernel family `kernel` (a KeyError names the known ones)."""
    if name not in FAMILIES:
        raise KeyError(f"no workload {name!r} (known: {', '.join(FAMILIES)})")
    if kernel not in FAMILIES[name]:
        raise KeyError(f"no {kernel} kernels for {name} (it has: {', '.join(FAMILIES[name])})")
    return FAMILIES[name][kernel]


__all__ = ["FAMILIES", "REGISTRY", "Workload", "get", "kernels", "register", "MLP", "ConvChain", "Attention",
           "CopyChain"]
