"""Per-GPU limits the wave model needs (CUDA occupancy tables, per SM).

Only what decides how many thread blocks of one kernel fit on one SM at a time: SM count, the
per-SM caps on threads, blocks, 32-bit registers and shared memory.  Allocation granularities
(registers are allocated per warp in units of 256, shared memory in 128 B units, and 1 KiB per
block is reserved by the driver on sm_80+) are applied by :func:`occupancy`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GPU:
    name: str
    sm: str                  # compute capability, e.g. "sm_80"
    num_sms: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    regs_per_sm: int
    smem_per_sm: int         # bytes usable by blocks (the configurable carve-out maximum)
    smem_reserved_per_block: int  # bytes the driver reserves per block

    @property
    def cc(self) -> int:
        """Compute capability as an int (sm_90 -> 90)."""
        return int(self.sm.split("_")[-1]) if self.sm.split("_")[-1].isdigit() else 0

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // 32


GPUS: dict[str, GPU] = {
    # Tesla V100 (SXM2): the paper's GPU, 80 SMs, 96 KiB shared memory per SM.
    "v100": GPU("v100", "sm_70", 80, 2048, 32, 65536, 96 * 1024, 0),
    # A100 (SXM4): 108 SMs, 164 KiB shared memory per SM.
    "a100": GPU("a100", "sm_80", 108, 2048, 32, 65536, 164 * 1024, 1024),
    # H100 (SXM5): 132 SMs, 228 KiB shared memory per SM.
    "h100": GPU("h100", "sm_90", 132, 2048, 32, 65536, 228 * 1024, 1024),
    # H200: the H100 chip (GH100, 132 SMs) with more and faster HBM; identical SM limits.
    "h200": GPU("h200", "sm_90", 132, 2048, 32, 65536, 228 * 1024, 1024),
}


@dataclass(frozen=True)
class Timing:
    """The simulator's timing terms for one GPU (cusyncgen/plan/calibrate.py says how each is
    measured).  All 0: the lockstep wave model (equal block times, no launch cost), which is what
    the paper's tables need and what an uncalibrated GPU gets."""
    tile_tflops: float = 0.0     # GeMM work one SM does, TFLOP/s: a block's time in µs is
    #                              occupancy * 2*BM*BN*K / (tile_tflops * 1e6)
    launch_gap_us: float = 0.0   # StreamSync's kernel boundary; PDL alone and every policy skip it
    tail_skew: float = 0.0       # block times within a kernel spread over (1 +- tail_skew) x the mean
    wait_cost_us: float = 0.0    # time each wait on a new semaphore adds to a consumer block

    def tile_time_us(self, flops_per_block: float, occupancy: int) -> float:
        """µs one block takes when ``occupancy`` blocks share its SM (1 TFLOP/s if uncalibrated)."""
        return occupancy * flops_per_block / ((self.tile_tflops or 1.0) * 1e6)

    def as_dict(self) -> dict:
        return {"tile_tflops": self.tile_tflops, "launch_gap_us": self.launch_gap_us,
                "tail_skew": self.tail_skew, "wait_cost_us": self.wait_cost_us}


TIMINGS: dict[str, Timing] = {
    # H200: `cusyncgen tune mlp` on one NVIDIA H200 (benchmarks/results/nvidia-h200/tune-cache-nvidia-h200.json,
    # runtime 62a8ce3e9bbc), the default tiles of M = 1, 64, 256, 1024, 4096 of GPT-3, LLaMA and
    # LLaMA-ep (every other size of the sweep; 16, 128, 512, 2048 held out), fitted by
    # `cusyncgen tune mlp --from-cache ... --calibrate` (cusyncgen.plan.calibrate.calibrate):
    # tile rate = median simulated work / measured StreamSync time; launch gap = median StreamSync
    # minus PDL alone where both kernels fit one wave (0.1-1.2 us); skew and wait cost by the
    # least mean absolute speed-up error on a grid.
    "h200": Timing(tile_tflops=2.58, launch_gap_us=0.95, tail_skew=0.1, wait_cost_us=0.4),
    # H100, A100, V100: not measured here; the lockstep model.
}


def timing(gpu: GPU) -> Timing:
    """The calibrated timing terms of ``gpu`` (by name: "h200", or a device name such as
    "NVIDIA H200"); zeros where none were measured."""
    key = gpu_key(gpu.name)
    return TIMINGS.get(key, Timing()) if key else Timing()


def gpu_key(name: str) -> str | None:
    """The GPUS key a device name refers to ("NVIDIA H200" -> "h200"), or None."""
    low = name.lower()
    hits = [k for k in GPUS if k in low]
    return max(hits, key=len) if hits else None


class GPUError(ValueError):
    """No such GPU, or the GPU cannot be read."""


def get_gpu(name: str) -> GPU:
    key = name.lower()
    if key == "auto":
        return detect_gpu()
    if key not in GPUS:
        raise GPUError(f"unknown GPU '{name}' (known: {', '.join(sorted(GPUS))}, auto)")
    return GPUS[key]


def detect_gpu() -> GPU:
    """Read the SM count and limits of device 0 through CuPy."""
    try:
        import cupy  # type: ignore
    except Exception as exc:  # ImportError, or a broken CUDA install
        raise GPUError(f"--gpu auto needs CuPy and a CUDA GPU; CuPy cannot be imported ({exc.__class__.__name__}: {exc})") from None
    try:
        dev = cupy.cuda.Device(0)
        attrs = dev.attributes
        props = cupy.cuda.runtime.getDeviceProperties(0)
    except Exception as exc:
        raise GPUError(f"--gpu auto: no usable CUDA GPU ({exc})") from None
    name = props.get("name", b"gpu")
    name = name.decode() if isinstance(name, bytes) else str(name)
    major, minor = props.get("major", 0), props.get("minor", 0)
    return GPU(
        name=name,
        sm=f"sm_{major}{minor}",
        num_sms=int(attrs["MultiProcessorCount"]),
        max_threads_per_sm=int(attrs["MaxThreadsPerMultiProcessor"]),
        max_blocks_per_sm=int(attrs.get("MaxBlocksPerMultiprocessor", 32)),
        regs_per_sm=int(attrs["MaxRegistersPerMultiprocessor"]),
        smem_per_sm=int(attrs["MaxSharedMemoryPerMultiprocessor"]),
        smem_reserved_per_block=int(props.get("reservedSharedMemPerBlock", 0)),
    )


def _round_up(v: int, g: int) -> int:
    return -(-v // g) * g


def occupancy(gpu: GPU, threads_per_block: int, regs_per_thread: int = 0, smem_per_block: int = 0) -> int:
    """Thread blocks of one kernel resident per SM (what cudaOccupancyMaxActiveBlocksPerMultiprocessor
    returns, up to the allocation granularities above).  0 means the block does not fit at all."""
    if threads_per_block <= 0:
        raise ValueError("threads per block must be positive")
    warps = -(-threads_per_block // 32)
    limits = [gpu.max_blocks_per_sm, gpu.max_warps_per_sm // warps]
    if regs_per_thread > 0:
        regs_per_warp = _round_up(regs_per_thread * 32, 256)
        limits.append((gpu.regs_per_sm // regs_per_warp) // warps)
    if smem_per_block > 0 or gpu.smem_reserved_per_block:
        per_block = _round_up(smem_per_block, 128) + gpu.smem_reserved_per_block
        limits.append(gpu.smem_per_sm // per_block)
    return max(min(limits), 0)


def spread_pad(per_sm: int, optin: int, reserved: int, static: int, own: int, beside: int,
               per_sm_blocks: int = 1) -> int:
    """Dynamic shared memory (bytes, a multiple of 128) for launches of a kernel whose blocks use
    `static` bytes of static and at least `own` bytes of dynamic shared memory, such that an SM of
    `per_sm` bytes takes `per_sm_blocks` of them beside one block of another kernel using `beside`
    bytes (all its shared memory, the runtime's reservation included) but never `per_sm_blocks` + 1
    of them; `optin` is the per-block limit, `reserved` the runtime's reservation per block.
    0 when no such size exists."""
    k = per_sm_blocks
    pad = min(optin - static, (per_sm - beside) // k - static - reserved)
    pad -= pad % 128
    return pad if pad >= own and (k + 1) * (pad + static + reserved) > per_sm else 0

