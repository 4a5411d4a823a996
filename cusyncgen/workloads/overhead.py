"""The paper's maximum-overhead microbenchmark (section VI-E): two dependent copy kernels of
exactly one full wave at maximum occupancy, synchronized with TileSync (examples/copy_chain.dep),
against stream order. Nothing can overlap there, so the difference is what the semaphores cost."""
from __future__ import annotations

from dataclasses import dataclass

import cusyncgen
from cusyncgen.cuda import build
from cusyncgen.cuda.abi import StageArgs
from cusyncgen.cuda.chain import Chain, Link
from cusyncgen.cuda.configs import PDL_ALONE, SM80_ORDERINGS, STREAM_SYNC, Config, Ordering
from cusyncgen.cuda.lazy import cupy, driver
from cusyncgen.workloads.kernels import KERNEL_FAMILY, WAIT_KERNEL, KernelVariant, StageType, examples_dir, source

THREADS = 256  # 8 blocks per SM: one full wave at maximum occupancy
MACRO = "CUSYNC_COPY_KERNEL"  # runtime_cuda/kernels/copy.cuh
POLICY = "TileSync"
# tiles of the modules the GPU tests load: 3 waves + 17 tiles, and 40
TEST_TILES = (3 * 132 + 17, 40)


def kernel_symbol(copy: int, policy: str | None) -> str:
    return f"copy{copy}_{policy or 'plain'}"


def module_source(tiles: int, debug: bool) -> build.Source:
    ns = "copy_chain"
    compiled = cusyncgen.compile(examples_dir() / "copy_chain.dep", params={"Tiles": tiles}, name=ns)
    policy = next(p for p in compiled.policies if p.name == POLICY)
    k = lambda i, policy, stage: KernelVariant(kernel_symbol(i, policy), MACRO, (stage, "true" if i == 2 else "false"))
    plain = [k(1, None, StageType("g1")), k(2, None, StageType("g2"))]
    prod, cons = f"Prod{POLICY}", f"Cons{POLICY}"
    policies = [{"stages": [(prod, StageType("g1", (policy.struct_name,))),
                            (cons, StageType("g2", (None, policy.struct_name)))],
                 "kernels": [k(1, POLICY, prod), k(2, POLICY, cons)]}]
    return source("copy.cu.j2", f"copy_chain_{tiles}{'_debug' if debug else ''}", ns, compiled.header, debug,
                  plain=plain, policies=policies)


CONFIGS = [STREAM_SYNC, PDL_ALONE, Config(POLICY, Ordering.WAITKERNEL, False), Config(POLICY, Ordering.PDL, False)]


@dataclass
class CopyChain:
    """mid = in + 1 (producer), out = 2 * mid (consumer), `tiles` tiles of `tile_vec4` float4s."""

    name = "overhead"
    vendor = ""
    kernel = KERNEL_FAMILY
    orderings = SM80_ORDERINGS
    models = ()
    sizes = ()
    bench_options = ()
    tune_mode = ""   # nothing to tune

    tiles: int
    tile_vec4: int = 4096
    debug: bool = False

    @classmethod
    def sources(cls, sizes=None, tune: bool = False) -> list[build.Source]:
        """The benchmark's module (one wave of 8 blocks on each of 132 SMs) and the tests'."""
        return [module_source(132 * 8, debug=False)] + [module_source(t, debug=True) for t in TEST_TILES]

    @classmethod
    def bench(cls, models=None, sizes=None, iters: int = 50) -> dict:
        return measure(max(iters, 50))

    def __post_init__(self):
        src = module_source(self.tiles, self.debug)
        self.module = driver.Module(build.build(src, driver.arch()))
        self.module.check_abi(StageArgs)
        k = lambda name: self.module.kernel(name, THREADS)
        self.kernels = {p: (k(kernel_symbol(1, p)), k(kernel_symbol(2, p))) for p in (None, POLICY)}
        self.chain = Chain(2, self.module.kernel(WAIT_KERNEL, 1))
        n = self.tiles * self.tile_vec4 * 4
        self.x = cupy.random.standard_normal(n, dtype=cupy.float32)
        self.mid = cupy.full(n, cupy.nan, dtype=cupy.float32)
        self.out = cupy.full(n, cupy.nan, dtype=cupy.float32)
        from cusyncgen.cuda.stages import Stage
        self.stages = {POLICY: (Stage("copy1", 0, self.tiles), Stage("copy2", 1, 0))}
        self.stages[POLICY][1].depends_on(self.stages[POLICY][0], 0, "copy1")
        self.plain = (Stage("copy1", 0, 0), Stage("copy2", 1, 0))

    def configs(self) -> list[Config]:
        return [c for c in CONFIGS if c.ordering in self.orderings]

    def run(self, stream, cfg: Config) -> None:
        k1, k2 = self.kernels[cfg.policy]
        p, c = self.stages[cfg.policy] if cfg.policy else self.plain
        grid = (self.tiles, 1, 1)
        self.chain.run(stream, cfg, [
            Link(p, lambda s, a, step: k1.launch(grid, [self.x, self.mid, self.tile_vec4, a], s, step.pdl), self.tiles),
            Link(c, lambda s, a, step: k2.launch(grid, [self.mid, self.out, self.tile_vec4, a], s, step.pdl), self.tiles)])

    def reference(self):
        return (self.x + 1) * 2

    def check_stages(self):
        for p, c in list(self.stages.values()) + [self.plain]:
            p.raise_if_timed_out()
            c.raise_if_timed_out()


def measure(iters: int = 50) -> dict:
    """Overhead of each configuration over StreamSync, one wave at maximum occupancy."""
    from cusyncgen.cuda import timing
    sms = driver.sm_count()
    blocks_per_sm = 2048 // THREADS
    cc = CopyChain(tiles=sms * blocks_per_sm)
    stream = cupy.cuda.Stream()
    rows = []
    base = None
    for cfg in cc.configs():
        cc.mid.fill(cupy.nan)
        cc.out.fill(cupy.nan)
        g = timing.capture(lambda s: cc.run(s, cfg), stream)
        t = timing.median(timing.time_graphs([g], stream, iters=iters))
        correct = bool(cupy.allclose(cc.out, cc.reference()))
        base = base or t
        rows.append({"config": cfg.name, "kernel": cc.kernel, "time_us": t, "overhead_vs_streamsync": t / base - 1.0,
                     "correct": correct})
    cc.check_stages()
    return {"device": driver.device_name(), "workload": "overhead", "blocks": cc.tiles, "threads": THREADS,
            "tile_bytes": cc.tile_vec4 * 16, "rows": rows}
