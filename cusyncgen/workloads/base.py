"""What every workload provides (the Workload protocol) and what their benchmarks share."""
from __future__ import annotations

import math
from typing import ClassVar, Protocol, runtime_checkable

from cusyncgen.cuda import build
from cusyncgen.cuda.configs import Config, Ordering

# Rows of a configuration re-timed on the workload's split-K chain are named config + SPLIT_K
# (Conv2D today); the stream-ordered baseline of a point is the fastest of "StreamSync" and
# "StreamSync" + SPLIT_K.
SPLIT_K = "/split-K"
# Rows of the sm90 MLP's decode kernel (workloads.mlp_decode) are named config + DECODE.
DECODE = "/decode"
# Rows of the sm90 MLP's swapped GeMM (workloads.mlp_swap) are named config + SWAP.
SWAP = "/swap"


def family(config: str) -> str:
    """A configuration's policy ("RowSync+PDL+R" -> "RowSync", "PDL/split-K" -> "PDL"); StreamSync
    and PDL are their own."""
    return config.partition("/")[0].split("+")[0]


# The vendor library's rows and the roofline floor: not configurations of our kernels.
VENDOR = ("cuBLAS", "cuBLAS+graph", "cuDNN", "cuDNN+graph", "vendor", "vendor+graph", "floor")
# Stream-ordered rows of a bench: the chain's kernels, and (Conv2D) the same chain with split-K
# (workloads.base.SPLIT_K): the baseline is the fastest of them.
STREAM_ORDER = ("StreamSync", "StreamSync" + SPLIT_K)

# The bench options a workload may accept (`cusyncgen bench --sync-warp/--spread/--tiles`).
BENCH_OPTIONS = ("sync_warp", "spread", "tiles")


@runtime_checkable
class Workload(Protocol):
    """A workload of the GPU path: a class registered in cusyncgen.workloads.REGISTRY.

    Class level (no GPU needed), what bench, tune, prebuild and timeline use:
      name, vendor (the library its rows compare with), kernel (the kernel family: "sm80", or
      "sm90" for the Hopper MLP; cusyncgen.workloads.default_kernel picks one per device),
      orderings (those its kernel family supports), models, sizes (the default sweep),
      bench_options (a subset of BENCH_OPTIONS), tune_mode ("measure": `cusyncgen tune` calls the
      class's tune(models, sizes, iters, cache_path, progress, device); "bench": it chooses among
      bench results; "": nothing to tune),
      sources(sizes, tune) -> the build.Sources of every module prebuild compiles,
      bench(models, sizes, iters, **options) -> a result dict ({"device", "workload", "rows", ...},
      every row with "kernel").
    Instance level (on a GPU, one shape): configs() -> [Config], run(stream, cfg, *buffers) with
      the buffers its buffers()/outputs() made, reference(...), check_stages()."""

    name: ClassVar[str]
    vendor: ClassVar[str]
    kernel: ClassVar[str]
    orderings: ClassVar[frozenset]
    models: ClassVar[tuple]
    sizes: ClassVar[tuple]
    bench_options: ClassVar[tuple]
    tune_mode: ClassVar[str]

    @classmethod
    def sources(cls, sizes=None, tune: bool = False) -> list[build.Source]: ...

    @classmethod
    def bench(cls, models=None, sizes=None, iters: int = 30, **options) -> dict: ...

    def configs(self) -> list[Config]: ...

    def check_stages(self) -> None: ...


def offers(workload, cfg: Config) -> bool:
    """Does the workload's kernel family support cfg's ordering?"""
    return Ordering(cfg.ordering) in workload.orderings


def is_policy(config: str, vendor: str) -> bool:
    """A generated policy's row: not StreamSync or PDL alone (on any kernels), the floor, the vendor
    library, nor a configuration re-timed on the split-K chain."""
    base = config.partition("/")[0]
    return base not in ("StreamSync", "PDL", "floor", vendor, vendor + "+graph") and not config.endswith(SPLIT_K)


def rel_err(z, ref) -> float:
    """Relative Frobenius error of a CuPy array against a float32 reference; inf on a NaN/inf."""
    from cusyncgen.cuda.lazy import cupy
    z32 = z.astype(cupy.float32)
    if not bool(cupy.isfinite(z32).all()):
        return math.inf
    return float(cupy.linalg.norm(z32 - ref) / cupy.linalg.norm(ref))
