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
from cusyncgen.workloads.attention_sm90 import AttentionGen
from cusyncgen.workloads.base import Workload
from cusyncgen.workloads.conv2d import ConvChain
from cusyncgen.workloads.mlp import MLP
from cusyncgen.workloads.mlp_sm90 import MLPSm90
from cusyncgen.workloads.overhead import CopyChain
from cusyncgen.workloads.overhead_sm90 import OverheadSm90

# name -> kernel family -> class. A second kernel family of a workload (Hopper's "sm90": the MLP)
# is a class with the same name and its own `kernel`, sources and orderings, registered here.
FAMILIES: dict[str, dict[str, type]] = {}


def register(cls: type) -> type:
    FAMILIES.setdefault(cls.name, {})[cls.kernel] = cls
    return cls


for _cls in (MLP, ConvChain, Attention, CopyChain, MLPSm90, OverheadSm90, AttentionGen):
    register(_cls)

DEFAULT_KERNEL = "sm80"
# the workloads on the family every GPU runs: what bench, tune, prebuild and timeline loop over
# (a device picks its own family per workload: default_kernel)
REGISTRY: dict[str, type] = {name: fams[DEFAULT_KERNEL] for name, fams in FAMILIES.items()}


def kernels() -> list[str]:
    """Every registered kernel family."""
    return sorted({k for fams in FAMILIES.values() for k in fams})


def default_kernel(name: str, arch: str | None) -> str:
    """The kernel family workload `name` runs on by default on a device of compute capability
    `arch` (driver.arch(): "sm_90a", "sm_80", ...; None: no device): "sm90" on an sm_90 device
    where the workload has sm90 kernels that cover it (they are built for sm_90a, which no other
    arch runs; a family that covers part of a workload -- the attention's generation phase -- says
    so with default_on_device = False and is asked for by --kernel), else "sm80"."""
    fams = FAMILIES.get(name, {})
    if (arch is not None and arch.removesuffix("a") == "sm_90" and "sm90" in fams
            and getattr(fams["sm90"], "default_on_device", True)):
        return "sm90"
    return DEFAULT_KERNEL


def device_kernel(name: str) -> str:
    """default_kernel for this machine's current CUDA device (sm80 where none is usable)."""
    from cusyncgen.cuda import available
    ok, _ = available()
    if not ok:
        return DEFAULT_KERNEL
    from cusyncgen.cuda import driver
    return default_kernel(name, driver.arch())


def for_device(name: str, kernel: str | None = None) -> type:
    """The workload class `name` on `kernel`, or on this device's default family (device_kernel):
    the Python API's entry, e.g. for_device("mlp")("gpt3", 512)."""
    return get(name, kernel or device_kernel(name))


def get(name: str, kernel: str = DEFAULT_KERNEL) -> type:
    """The workload class named `name` on kernel family `kernel` (a KeyError names the known ones)."""
    if name not in FAMILIES:
        raise KeyError(f"no workload {name!r} (known: {', '.join(FAMILIES)})")
    if kernel not in FAMILIES[name]:
        raise KeyError(f"no {kernel} kernels for {name} (it has: {', '.join(FAMILIES[name])})")
    return FAMILIES[name][kernel]


__all__ = ["FAMILIES", "REGISTRY", "Workload", "default_kernel", "device_kernel", "for_device", "get", "kernels",
           "register", "MLP", "MLPSm90", "ConvChain", "Attention", "AttentionGen", "CopyChain"]
