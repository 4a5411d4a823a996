"""The host/device ABI: every struct passed to a kernel, as a ctypes Structure, checked against
the layout the module itself exports.

Each struct's device header exports `extern "C" __device__ const long long cusync_abi_<Struct>[]`
= {sizeof, offsetof of each field in declaration order} and `cusync_abi_<Struct>_len`, its length
(runtime_cuda/kernels/abi.cuh); `check(module, struct)` reads them when a module loads and raises
AbiError naming the struct and the first field whose size or offset differs. CPU only (no CuPy): the
comparison is a pure function of two layouts.
"""
from __future__ import annotations

import ctypes

from cusyncgen.errors import CusyncError


class AbiError(CusyncError):
    """A ctypes Structure does not match the struct the kernels were compiled with."""

    def __init__(self, message: str):
        super().__init__(message, None)


# ---- kernel parameter structs ----------------------------------------------------------------

class StageArgs(ctypes.Structure):
    """cusync::StageArgs (runtime_cuda/cusync/stage.h)."""

    _fields_ = [
        ("ticket", ctypes.c_void_p),
        ("out_sems", ctypes.c_void_p),
        ("in_sems0", ctypes.c_void_p),
        ("in_sems1", ctypes.c_void_p),
        ("debug", ctypes.c_void_p),
        ("timeout_ns", ctypes.c_longlong),
        ("stage_id", ctypes.c_int),
        ("flags", ctypes.c_int),
        ("splits", ctypes.c_int),   # blocks per tile (split-K; 0 or 1: one)
    ]


class TimelineStageArgs(StageArgs):
    """cusync::StageArgs of a CUSYNC_TIMELINE build: two more fields, the per-block records
    (4 globaltimer words per block, slot = ticket % timeline_capacity)."""

    _fields_ = [("timeline", ctypes.c_void_p), ("timeline_capacity", ctypes.c_longlong)]


class GemmArgs(ctypes.Structure):
    """cusync_kernels::GemmArgs (runtime_cuda/kernels/gemm.cuh)."""

    _fields_ = [("A", ctypes.c_void_p), ("B", ctypes.c_void_p), ("C", ctypes.c_void_p)] + [
        (n, ctypes.c_int) for n in ("M", "N", "K", "lda", "ldb", "ldc", "swiglu_offset")] + [
        ("ws", ctypes.c_void_p), ("counters", ctypes.c_void_p)]  # split-K (kernels/splitk.cuh)


class ConvArgs(ctypes.Structure):
    """cusync_kernels::ConvArgs (runtime_cuda/kernels/conv2d.cuh)."""

    _fields_ = [("X", ctypes.c_void_p), ("W", ctypes.c_void_p), ("bias", ctypes.c_void_p), ("Y", ctypes.c_void_p)] + [
        (n, ctypes.c_int) for n in ("B", "P", "Q", "C", "K", "flags")] + [
        ("ws", ctypes.c_void_p), ("counters", ctypes.c_void_p)]


class AttnGeo(ctypes.Structure):
    """cusync_kernels::AttnGeo (runtime_cuda/kernels/attention.cuh)."""

    _fields_ = [("cache", ctypes.c_void_p), ("P", ctypes.c_void_p), ("R", ctypes.c_void_p), ("T", ctypes.c_void_p)] + [
        (n, ctypes.c_int) for n in ("B", "S", "Sp", "NH", "Dh", "ld3", "Npad", "ldT", "causal")] + [
        ("rv_ws", ctypes.c_void_p), ("rv_counters", ctypes.c_void_p)]


class SoftmaxArgs(ctypes.Structure):
    """cusync_kernels::SoftmaxArgs (runtime_cuda/kernels/softmax.cuh)."""

    _fields_ = [("P", ctypes.c_void_p), ("R", ctypes.c_void_p), ("M", ctypes.c_int), ("Npad", ctypes.c_int),
                ("L", ctypes.c_int), ("scale", ctypes.c_float), ("drop_threshold", ctypes.c_uint32),
                ("keep_scale", ctypes.c_float), ("seed", ctypes.c_uint32), ("causal", ctypes.c_int)]


# The C++ name of each struct (what the export is named after) and the header that exports it.
CXX_NAME = {StageArgs: "StageArgs", TimelineStageArgs: "StageArgs", GemmArgs: "GemmArgs", ConvArgs: "ConvArgs",
            AttnGeo: "AttnGeo", SoftmaxArgs: "SoftmaxArgs"}


def symbol(struct: type) -> str:
    """The module global that holds `struct`'s layout."""
    return f"cusync_abi_{CXX_NAME[struct]}"


def layout(struct: type) -> list[tuple[str, int, int]]:
    """[(field, offset, size)] of a ctypes Structure, base classes' fields first (C's order)."""
    out = []
    for cls in reversed([c for c in struct.__mro__ if isinstance(c, type) and issubclass(c, ctypes.Structure)
                         and "_fields_" in c.__dict__]):
        for name, _ in cls.__dict__["_fields_"]:
            f = getattr(struct, name)
            out.append((name, f.offset, f.size))
    return out


def compare(struct: type, exported: list[int], name: str | None = None) -> None:
    """Raise AbiError unless `exported` ([sizeof, offsetof field 0, ...] as the device compiled it)
    is `struct`'s layout. A field's size is checked as the distance to the next offset (or to
    sizeof), so a field that grew, shrank or moved is named. name: the C struct's name (default:
    CXX_NAME's, for the SM80 kernels' structs)."""
    fields = layout(struct)
    name = name or CXX_NAME[struct]
    if not exported:
        raise AbiError(f"{name}: the module exports no layout (cusync_abi_{name} is empty)")
    size, offsets = exported[0], list(exported[1:])
    if len(offsets) != len(fields):
        raise AbiError(f"{name}: the kernels' struct has {len(offsets)} fields, the host's {len(fields)} "
                       f"({', '.join(f for f, _, _ in fields)})")
    ends = offsets[1:] + [size]
    for (field, off, fsize), dev_off, dev_end in zip(fields, offsets, ends):
        if off != dev_off:
            raise AbiError(f"{name}.{field}: at offset {off} on the host, {dev_off} in the kernels")
        if off + fsize > dev_end:
            raise AbiError(f"{name}.{field}: {fsize} bytes on the host, at most {dev_end - dev_off} in the kernels")
    if ctypes.sizeof(struct) != size:
        raise AbiError(f"{name}: {ctypes.sizeof(struct)} bytes on the host, {size} in the kernels")


def check(module, struct: type) -> None:
    """Compare `struct` with the layout that the loaded `module` (driver.Module) exports."""
    name = symbol(struct)
    compare(struct, module.constant_int64s(name, module.constant_int(f"{name}_len")))
