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

REGISTRY: dict[str, type] = {w.name: w for w in (MLP, ConvChain, Attention, CopyChain)}


def get(name: str) -> type:
    """The workload class named `name` (a KeyError names the known ones)."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"no workload {name!r} (known: {', '.join(REGISTRY)})") from None


__all__ = ["REGISTRY", "Workload", "get", "MLP", "ConvChain", "Attention", "CopyChain"]
