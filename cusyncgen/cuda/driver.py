"""Load cubins with CuPy and launch their kernels, with programmatic dependent launch on sm_90.

CuPy cannot pass launch attributes, so kernels are launched through cuda.bindings'
cuLaunchKernelEx with the CUfunction handle of the CuPy module. Every driver call is checked.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

from cusyncgen.cuda import abi, require
from cusyncgen.cuda.build import BuildError
from cusyncgen.errors import MissingDependencyError

cupy = require("cupy")
try:
    _cu = require("cuda.bindings.driver")
except MissingDependencyError:  # older cuda-python layout
    _cu = require("cuda.cuda")

_initialized = False


class CudaError(RuntimeError):
    """A CUDA driver call failed."""


def check(result):
    err = result[0] if isinstance(result, tuple) else result
    if int(err) != 0:
        _, name = _cu.cuGetErrorName(err)
        _, text = _cu.cuGetErrorString(err)
        raise CudaError(f"{name.decode() if name else err}: {text.decode() if text else ''}")
    if isinstance(result, tuple) and len(result) == 2:
        return result[1]
    return None


def _init() -> None:
    global _initialized
    if not _initialized:
        cupy.cuda.runtime.free(0)  # make CuPy's (primary) context current
        check(_cu.cuInit(0))
        _initialized = True


@dataclass
class Kernel:
    function: object  # cupy.cuda.function.Function
    name: str
    threads: int
    smem: int

    def launch(self, grid, args, stream, pdl: bool = False, smem: int | None = None) -> None:
        """smem: dynamic shared memory for this launch, at least the kernel's own (padding limits
        how many blocks share an SM; the function's opt-in limit must allow it). A padded launch
        asks for the largest shared-memory carveout (this launch only: the same kernel launched
        unpadded keeps its L1)."""
        launch(self.function, grid, (self.threads, 1, 1), self.smem if smem is None else max(smem, self.smem),
               stream, args, pdl, carveout=None if smem is None else 100)


class Module:
    """A loaded cubin."""

    def __init__(self, cubin: Path):
        _init()
        self.path = Path(cubin)
        self._module = cupy.RawModule(path=str(cubin))

    def constant_int(self, name: str) -> int:
        """The value of an `extern "C" __device__ const int NAME` of the module."""
        return int(self.global_array(name, (1,), cupy.int32).get()[0])

    def constant_int64s(self, name: str, n: int) -> list[int]:
        """The first n values of an `extern "C" __device__ const long long NAME[]` of the module."""
        return [int(v) for v in self.global_array(name, (n,), cupy.int64).get()]

    def global_array(self, name: str, shape: tuple, dtype) -> "cupy.ndarray":
        """An `extern "C" __device__` array of the module, as a CuPy array (a view: writes go to the GPU's)."""
        try:
            ptr = self._module.get_global(name)
        except Exception as exc:  # CuPy raises its own CUDADriverError
            raise BuildError(f"{name!r} is not in {self.path.name}: {exc}") from None
        return cupy.ndarray(shape, dtype=dtype, memptr=ptr)

    def check_abi(self, *structs) -> None:
        """Compare each ctypes Structure with the layout the module exports (cusyncgen.cuda.abi):
        an AbiError names the struct and field that differ."""
        for struct in structs:
            try:
                abi.check(self, struct)
            except abi.AbiError as exc:
                raise abi.AbiError(f"{self.path.name}: {exc}") from None

    def kernel(self, name: str, threads: int, smem: int = 0) -> Kernel:
        try:
            fn = self._module.get_function(name)
        except Exception as exc:  # CuPy raises its own CUDADriverError
            raise BuildError(f"kernel {name!r} is not in {self.path.name}: {exc}") from None
        if smem > 0:
            # Always raise the opt-in limit: the kernel's static shared memory (the stage's ticket
            # slot) counts against the same 48 KB default as the dynamic part.
            fn.max_dynamic_shared_size_bytes = smem
        return Kernel(fn, name, threads, smem)


def _pack(arg):
    if isinstance(arg, ctypes._SimpleCData) or isinstance(arg, ctypes.Structure):
        return arg
    if isinstance(arg, cupy.ndarray):
        return ctypes.c_void_p(arg.data.ptr)
    if isinstance(arg, bool):
        return ctypes.c_int(int(arg))
    if isinstance(arg, int):
        return ctypes.c_int(arg)
    if isinstance(arg, float):
        return ctypes.c_float(arg)
    raise TypeError(f"cannot pass {type(arg).__name__} to a kernel")


def _function_ptr(function) -> int:
    """The CUfunction handle of a cupy.cuda.function.Function (.ptr) or of the cupy.RawKernel that
    RawModule.get_function returns in recent CuPy (its compiled Function is .kernel)."""
    ptr = getattr(function, "ptr", None)
    return int(ptr if ptr is not None else function.kernel.ptr)


def launch(function, grid, block, smem: int, stream, args, pdl: bool = False, carveout: int | None = None) -> None:
    """cuLaunchKernelEx; with pdl=True the launch may overlap the previous kernel of the stream
    (programmatic stream serialization), which then must order itself (tile semaphores or
    griddepcontrol.wait). carveout: this launch's preferred shared-memory carveout (percent)."""
    _init()
    cfg = _cu.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = (int(g) for g in grid)
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = (int(b) for b in block)
    cfg.sharedMemBytes = int(smem)
    cfg.hStream = _cu.CUstream(stream.ptr)
    attrs = []
    if pdl:
        attr = _cu.CUlaunchAttribute()
        attr.id = _cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attr.value.programmaticStreamSerializationAllowed = 1
        attrs.append(attr)
    if carveout is not None:
        attr = _cu.CUlaunchAttribute()
        attr.id = _cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
        attr.value.sharedMemCarveout = int(carveout)
        attrs.append(attr)
    cfg.attrs = attrs
    cfg.numAttrs = len(attrs)
    packed = [_pack(a) for a in args]
    params = (ctypes.c_void_p * len(packed))(*[ctypes.addressof(p) for p in packed])
    check(_cu.cuLaunchKernelEx(cfg, _cu.CUfunction(_function_ptr(function)), ctypes.addressof(params), 0))


def stream_priority_range() -> tuple[int, int]:
    """(least, greatest) stream priority of the current context (CuPy 14 has no wrapper)."""
    _init()
    err, least, greatest = _cu.cuCtxGetStreamPriorityRange()
    check(err)
    return int(least), int(greatest)


def device_name() -> str:
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def sm_count() -> int:
    return int(cupy.cuda.Device().attributes["MultiProcessorCount"])


def l2_bytes() -> int:
    return int(cupy.cuda.Device().attributes["L2CacheSize"])


def arch() -> str:
    cc = cupy.cuda.Device().compute_capability  # e.g. "90"
    return "sm_90a" if cc == "90" else f"sm_{cc}"


def sync_warp_pays(blocks: int, with_sync_warp: Kernel, without: Kernel) -> bool:
    """The hosts' rule for a waiting kernel's sync warp (gemm.cuh, conv2d.cuh): use it where it
    costs no occupancy, or where the grid of `blocks` still fits one wave with it."""
    occ = max_active_blocks(with_sync_warp)
    return occ >= max_active_blocks(without) or blocks <= occ * sm_count()


def resident_at_once(grids) -> bool:
    """Do grids of (blocks, blocks per SM) fit on the GPU together? Each block takes 1/occupancy
    of an SM (kernels of one chain may have different occupancies, e.g. with a sync warp)."""
    return sum(blocks / occupancy for blocks, occupancy in grids) <= sm_count()


def max_shared_carveout(kernels) -> None:
    """Ask for the largest shared-memory carveout for every kernel. Kernels launched with no
    ordering (W) must all be resident at once, and an SM whose first resident block chose a
    smaller carveout has no room for another kernel's blocks: a 4-Conv2D chain with sync warps hung
    that way on the H200 under graph replay, and ran with this set (docs/design.md, 'No ordering (W)')."""
    _init()
    attr = _cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
    for k in kernels:
        check(_cu.cuFuncSetAttribute(_cu.CUfunction(_function_ptr(k.function)), attr, 100))


def static_smem(kernel: Kernel) -> int:
    """The kernel's static __shared__ bytes."""
    _init()
    attr = _cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES
    return int(check(_cu.cuFuncGetAttribute(attr, _cu.CUfunction(_function_ptr(kernel.function)))))


def block_smem(kernel: Kernel) -> int:
    """Shared memory one block of `kernel` takes on an SM: static + dynamic + the runtime's reservation."""
    reserved = int(cupy.cuda.Device().attributes.get("ReservedSharedMemoryPerBlock", 1024))
    return static_smem(kernel) + kernel.smem + reserved


def spread_smem(kernel: Kernel, beside: int, per_sm_blocks: int = 1) -> int:
    """Dynamic shared memory for launches of `kernel` that keep more than `per_sm_blocks` of its
    blocks off one SM while an SM still takes that many beside a block of another kernel that uses
    `beside` bytes (block_smem); 0 when no such size exists.  For a kernel launched before its
    producer ends (PDL, the wait-kernel): the block scheduler otherwise packs its blocks onto the
    few SMs with room at launch time (seen on the H200: 64 softmax blocks on 19 SMs, 4 per SM,
    1.5x slower each), where stream order spreads them evenly."""
    from cusyncgen.plan.gpus import spread_pad
    attrs = cupy.cuda.Device().attributes
    return spread_pad(int(attrs["MaxSharedMemoryPerMultiprocessor"]), int(attrs["MaxSharedMemoryPerBlockOptin"]),
                      int(attrs.get("ReservedSharedMemoryPerBlock", 1024)), static_smem(kernel), kernel.smem,
                      beside, per_sm_blocks)


def apply_spread(kernels, beside: int, per_sm_blocks: int = 1) -> dict[str, int]:
    """spread_smem for each kernel (a name once), raising its opt-in limit where a padding exists:
    {kernel name: padded dynamic shared memory}, for Kernel.launch(smem=...)."""
    pads = {}
    for kern in kernels:
        if kern.name in pads:
            continue
        pad = spread_smem(kern, beside, per_sm_blocks)
        if pad:
            kern.function.max_dynamic_shared_size_bytes = pad
            pads[kern.name] = pad
    return pads


def max_active_blocks(kernel: Kernel) -> int:
    """Blocks of `kernel` that fit on one SM at once (cuOccupancyMaxActiveBlocksPerMultiprocessor)."""
    _init()
    return int(check(_cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(
        _cu.CUfunction(_function_ptr(kernel.function)), kernel.threads, kernel.smem)))
