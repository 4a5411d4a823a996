"""The synchronized Attention on the GPU (CUSYNC_DEBUG builds: a deadlock raises instead of
hanging): every kernel of the chain, under every generated policy combination, ordering and
option, matches float32 math on fresh random inputs with poisoned outputs, in prompt processing
(S not a multiple of the tile) and token generation (B > 1, S' not a multiple of the key tile)."""
import math

import pytest

from cusyncgen.cuda import available
from cusyncgen.workloads.attention import TEST_SHAPES, Shape

ok, why = available()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not ok, reason=why or "GPU available")]

if ok:
    import cupy
    import torch

    from cusyncgen.workloads.attention import Attention

_atts = {}


def _att(shape, sync_warp=False):
    if (shape, sync_warp) not in _atts:
        _atts[(shape, sync_warp)] = Attention(Shape(*shape), debug=True, sync_warp=sync_warp)
    return _atts[(shape, sync_warp)]


@pytest.mark.parametrize("sync_warp", [False, True], ids=["thread0", "syncwarp"])
@pytest.mark.parametrize("shape", TEST_SHAPES, ids=lambda s: f"{s[0]}-B{s[1]}-S{s[2]}-Sp{s[3]}" + ("-causal" if len(s) > 4 and s[4] else ""))
def test_every_kernel_under_every_policy_matches_float32(shape, sync_warp):
    att = _att(shape, sync_warp)
    # token generation splits the output GeMM over K (kernels/splitk.cuh), which has no sync warp
    assert att.sync_warp_used == {"pgemm": sync_warp, "out": sync_warp and att.splits["g2"] == 1}
    assert (min(att.splits.values()) > 1) == (not att.shape.prompt), att.splits
    # early-launched kernels of at most two waves run padded to ceil(blocks / SMs) blocks per SM (spread)
    from cusyncgen.cuda import driver
    grid_of = {"attn_pgemm": "gP", "attn_softmax": "gR", "attn_rv": "gT", "attn_out": "g2"}
    for name, pad in att.spread_smem.items():
        blocks = math.prod(att.grids[grid_of[name.removesuffix("_RS").removesuffix("_S").removesuffix("_R")]])
        per_sm = -(-blocks // driver.sm_count())
        assert per_sm <= 2
        kern = next(k for k in [*att.k.values(), *att.k_sync.values()] if k.name == name)
        assert driver.max_active_blocks(driver.Kernel(kern.function, kern.name, kern.threads, pad)) <= per_sm, name
    assert {"TileSync", "RowSync", "StridedSync+RowSync+TileSync"} <= set(att.policy_names)
    stream = cupy.cuda.Stream(non_blocking=True)
    failures = []
    for seed, cfg in enumerate(att.configs()):
        b = att.buffers(seed=seed)
        att.poison(b)
        att.run(stream, cfg, b)
        stream.synchronize()
        att.check_stages()
        errs = att.check(b)
        if not att.ok(errs):
            failures.append((cfg.name, errs))
    assert not failures, failures


@pytest.mark.parametrize("sync_warp", [False, True], ids=["thread0", "syncwarp"])
def test_repeated_launches_and_graph_replays_stay_correct(sync_warp):
    from cusyncgen.cuda import timing
    from cusyncgen.cuda.chain import Config
    att = _att(TEST_SHAPES[2], sync_warp)
    stream = cupy.cuda.Stream(non_blocking=True)
    b = att.buffers(seed=7)
    cfgs = [c for c in att.configs() if c.policy]
    for i in range(60):
        att.run(stream, cfgs[i % len(cfgs)], b)
    stream.synchronize()
    att.check_stages()
    assert att.ok(att.check(b))
    graph = timing.capture(lambda s: att.run(s, Config("StridedSync+RowSync+TileSync", "pdl", True, True), b), stream)
    for _ in range(30):
        att.poison(b)
        graph.launch(stream)
        stream.synchronize()
    att.check_stages()
    assert att.ok(att.check(b))


def _launch_alone(att, role, kernel, producer, gemm_args, match):
    """Launch one waiting GeMM of the chain (a CUSYNC_DEBUG build) without its producer: the wait
    must time out and name the tile and semaphore instead of hanging."""
    from cusyncgen.cuda.chain import StageFlag
    from cusyncgen.cuda.stages import CusyncTimeoutError, Stage
    from cusyncgen.workloads.attention import num_sems
    sems = num_sems(att.compiled, "TileSync")
    order = ("g1", "gP", "gR", "gT", "g2")
    grid = order[order.index(producer) + 1]  # the consumer: the kernel after its producer
    prod = Stage(producer, order.index(producer), sems[producer], timeout_ms=20)
    cons = Stage(grid, order.index(grid), sems[grid], timeout_ms=20)
    cons.depends_on(prod, 0, producer)
    b = att.buffers(seed=1)
    stream = cupy.cuda.Stream(non_blocking=True)
    # one block per tile (the fresh stage does not split)
    kernel.launch(att.shape.grids()[grid], [gemm_args(b), cons.args(StageFlag.CUSTOM_ORDER), att.index["TileSync"][role], att.geometry(b)],
                  stream)
    stream.synchronize()
    with pytest.raises(CusyncTimeoutError, match=match):
        cons.raise_if_timed_out()
    torch.cuda.synchronize()


def test_a_consumer_without_its_producer_raises_instead_of_hanging():
    from cusyncgen.cuda.abi import GemmArgs
    att = _att(TEST_SHAPES[0])
    sh = att.shape
    a_p = lambda b: GemmArgs(A=0, B=0, C=0, M=sh.S, N=sh.Npad, K=128, lda=3 * sh.D, ldb=3 * sh.D,
                                    ldc=sh.Npad, swiglu_offset=0)
    _launch_alone(att, "pgemm", att.k["pgemm"], "g1", a_p, "gP.*g1")


def test_a_sync_warp_consumer_without_its_producer_raises_instead_of_hanging():
    """The output GeMM's sync warp (OutStage::serve_k) reports the T tile it timed out on."""
    from cusyncgen.cuda.abi import GemmArgs
    from cusyncgen.workloads.attention import _ptr, kernel_symbol
    att = _att(TEST_SHAPES[3], True)
    sh = att.shape
    a_out = lambda b: GemmArgs(A=_ptr(b["T"]), B=_ptr(b["wo"]), C=_ptr(b["out"]), M=sh.M, N=sh.H, K=sh.D,
                                      lda=sh.D, ldb=sh.D, ldc=sh.H, swiglu_offset=0)
    # (the chain splits this GeMM over K in token generation and then runs it without a sync warp)
    kernel = att.module.kernel(kernel_symbol("out", sync_warp=True), sh.gemm_threads + 32, sh.gemm_smem)
    _launch_alone(att, "out", kernel, "gT", a_out, "g2.*gT")
