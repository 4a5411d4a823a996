"""Kernel modules of the workloads: one CUDA translation unit per shape, rendered from a template
of templates/modules/ (through cusyncgen.emit.render_template, the project's one Jinja2
environment: StrictUndefined, every value computed here).

A KernelVariant names one extern "C" kernel entry once: the workload's template writes it and the
workload's loader asks the module for the same `symbol`, so no kernel name is rebuilt from a
string protocol on either side. Pure text (no CuPy): modules can be prebuilt without a GPU.
"""
from __future__ import annotations

from dataclasses import dataclass

from cusyncgen.paths import data_path
from cusyncgen.cuda import build

KERNEL_FAMILY = "sm80"   # every workload's kernels today (runtime_cuda/kernels/*.cuh, CuTe SM80 atoms)
WAIT_KERNEL = "cusync_wait_kernel"  # the wait-kernel every module defines (CUSYNC_DEFINE_WAIT_KERNEL)


@dataclass(frozen=True)
class KernelVariant:
    """One kernel entry of a module: the name the loader asks for, the kernel-defining macro of
    its runtime header and the macro's other arguments (a type alias or literal, or a StageType)."""

    symbol: str
    macro: str
    args: tuple["str | StageType", ...]


@dataclass(frozen=True)
class StageType:
    """A stage type (templates/modules/types.j2 spells it): cusync::CuStage over the grid `order`
    with the policy structs (the IR's struct_name; None: cusync::NoSync) of its output and inputs,
    or, with policies None, cusync::PlainStage."""

    order: str
    policies: tuple[str | None, ...] | None = None


@dataclass(frozen=True)
class GemmConfig:
    """gemm.cuh's GemmConfig: the tile (BM, BN, BK, stages, warps_m, warps_n), the epilogue type,
    SwiGLU mode, reordered loads, the producer's tile width, a sync warp, and split-K (None: the
    template's default)."""

    tile: tuple[int, int, int, int, int, int]
    epilogue: str
    swiglu: int
    reorder: bool
    prod_bn: int
    sync_warp: bool
    split: bool | None = None


@dataclass(frozen=True)
class ConvConfig:
    """conv2d.cuh's ConvConfig: the tile (BM, BN, BK, stages, warps_m, warps_n); with a sync warp
    (then no split-K) or without (split-K honoured)."""

    tile: tuple[int, int, int, int, int, int]
    sync_warp: bool


def examples_dir():
    """The shipped .dep examples (package data in a wheel, examples/ in a checkout)."""
    return data_path("examples")


def source(template: str, name: str, ns: str, header: str, debug: bool = False, timeline: bool = False,
           **context) -> build.Source:
    """The build.Source of a module: `template` rendered with `context`, the generated header
    `ns`.h beside it, CUSYNC_DEBUG / CUSYNC_TIMELINE defined as asked."""
    from cusyncgen.emit import render_template
    text = render_template(f"modules/{template}", ns=ns, wait_kernel=WAIT_KERNEL, **context)
    return build.Source(name, text, headers=((f"{ns}.h", header),),
                        defines=(("CUSYNC_DEBUG",) if debug else ()) + (("CUSYNC_TIMELINE",) if timeline else ()))
