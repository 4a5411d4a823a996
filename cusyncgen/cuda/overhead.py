"""The paper's maximum-overhead microbenchmark (section VI-E): two dependent copy kernels of
exactly one full wave at maximum occupancy, synchronized with TileSync, against stream order.
Nothing can overlap there, so the difference is what the semaphores cost."""
from __future__ import annotations

from dataclasses import dataclass

import cupy

from cusyncgen.cuda import build, driver, timing
from cusyncgen.cuda.modules import THREADS, copy_module_source as module_source
from cusyncgen.cuda.chain import PDL_ALONE, STREAM_SYNC, Chain, Config
from cusyncgen.cuda.stages import Stage



@dataclass
class CopyChain:
    """mid = in + 1 (producer), out = 2 * mid (consumer), `tiles` tiles of `tile_vec4` float4s."""

    tiles: int
    tile_vec4: int = 4096
    debug: bool = False

    def __post_init__(self):
        src = module_source(self.tiles, self.debug)
        self.module = driver.Module(build.build(src, driver.arch()))
        k = lambda name: self.module.kernel(name, THREADS)
        self.kernels = {"plain": (k("copy1_plain"), k("copy2_plain")), "TileSync": (k("copy1_TileSync"), k("copy2_TileSync"))}
        self.chain = Chain(self.module.kernel("cusync_wait_kernel", 1))
        n = self.tiles * self.tile_vec4 * 4
        self.x = cupy.random.standard_normal(n, dtype=cupy.float32)
        self.mid = cupy.full(n, cupy.nan, dtype=cupy.float32)
        self.out = cupy.full(n, cupy.nan, dtype=cupy.float32)
        self.stages = {"TileSync": (Stage("copy1", 0, self.tiles), Stage("copy2", 1, 0))}
        self.stages["TileSync"][1].depends_on(self.stages["TileSync"][0], 0, "copy1")
        self.plain = (Stage("copy1", 0, 0), Stage("copy2", 1, 0))

    def run(self, stream, cfg: Config) -> None:
        k1, k2 = self.kernels[cfg.policy or "plain"]
        p, c = self.stages[cfg.policy] if cfg.policy else self.plain
        grid = (self.tiles, 1, 1)
        self.chain.run(stream, cfg, p, c,
                       lambda s, a, pdl: k1.launch(grid, [self.x, self.mid, self.tile_vec4, a], s, pdl),
                       lambda s, a, pdl: k2.launch(grid, [self.mid, self.out, self.tile_vec4, a], s, pdl),
                       self.tiles, self.tiles)

    def reference(self):
        return (self.x + 1) * 2

    def check_stages(self):
        for p, c in list(self.stages.values()) + [self.plain]:
            p.raise_if_timed_out()
            c.raise_if_timed_out()


CONFIGS = [STREAM_SYNC, PDL_ALONE, Config("TileSync", "waitkernel", False), Config("TileSync", "pdl", False)]


def measure(iters: int = 50) -> dict:
    """Overhead of each configuration over StreamSync, one wave at maximum occupancy."""
    sms = driver.sm_count()
    blocks_per_sm = 2048 // THREADS
    cc = CopyChain(tiles=sms * blocks_per_sm)
    stream = cupy.cuda.Stream()
    rows = []
    base = None
    for cfg in CONFIGS:
        cc.mid.fill(cupy.nan)
        cc.out.fill(cupy.nan)
        g = timing.capture(lambda s: cc.run(s, cfg), stream)
        t = timing.median(timing.time_graphs([g], stream, iters=iters))
        correct = bool(cupy.allclose(cc.out, cc.reference()))
        base = base or t
        rows.append({"config": cfg.name, "time_us": t, "overhead_vs_streamsync": t / base - 1.0, "correct": correct})
    cc.check_stages()
    return {"device": driver.device_name(), "workload": "overhead", "blocks": cc.tiles, "threads": THREADS,
            "tile_bytes": cc.tile_vec4 * 16, "rows": rows}
