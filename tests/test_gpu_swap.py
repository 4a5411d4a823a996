"""The swapped GeMM of token generation (runtime_cuda/sm90/swap.cu, workloads.mlp_swap) on a Hopper
GPU: a GeMM alone on its packed weight equals the float32 product (with GeLU, into a wider row stride,
at M not a multiple of its token tile), and with SwiGLU in its epilogue equals silu(X gate^T) * X up^T;
at the sizes of the models' GeMMs, 20 launches in turn on each config are all correct; every configuration of
both models on each tile computes the float32 reference's result on fresh random inputs with poisoned
outputs; PDL and the one-launch chain stay correct over 1000 back-to-back launches and 100 graph
replays; a chain wait that times out is reported with its tile; bad shapes are refused with the
library's error. Needs CuPy, an sm_90 GPU and the sm90 library (built with nvcc, or
CUSYNC_SM90_LIB)."""
import math

import pytest

from support import sm90_cuda

ok, why = sm90_cuda()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not ok, reason=why or "GPU available")]

if ok:
    import cupy

    from cusyncgen.cuda import sm90, timing
    from cusyncgen.errors import CusyncError
    from cusyncgen.workloads import mlp_swap as S
    from cusyncgen.workloads.base import rel_err
    from cusyncgen.workloads.mlp import TOL

MODELS = ("gpt3", "llama-ep")
CONFIGS = ("16x64x128sw1", "16x64x64sw1s10", "32x64x64sw1", "64x64x64sw1", "64x64x128sw1", "64x96x64xa",
           "16x64x64sw1s10k2", "16x64x64sw1s10k3", "64x64x64sw1s6k2", "64x64x64sw1s6k3")


def _gelu(v):
    return 0.5 * v * (1 + cupy.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("M", [1, 13, 40])
def test_a_gemm_alone_is_the_product(config, M):
    N, K = 384, 1000   # K a multiple of 8 but of no tile
    rs = cupy.random.RandomState(M)
    x = rs.standard_normal((M, K), dtype=cupy.float32).astype(cupy.float16)
    w = (rs.standard_normal((N, K), dtype=cupy.float32) / K ** 0.5).astype(cupy.float16)
    ref = x.astype(cupy.float32) @ w.astype(cupy.float32).T
    stream = cupy.cuda.Stream()
    wp = sm90.swap_pack(w, sm90.swap_tile(config).group)   # the weight as the swapped GeMM reads it
    for epi, want in ((sm90.EPI_IDENTITY, ref), (sm90.EPI_GELU_TANH, _gelu(ref))):
        y = cupy.full((M, N + 64), cupy.nan, dtype=cupy.float16)   # a wider row stride: its last 64 untouched
        cupy.cuda.Device().synchronize()   # the inputs, made on the legacy stream, before the launch on `stream`
        with stream:
            sm90.swap_gemm(config, epi, wp.data.ptr, x.data.ptr, y.data.ptr, M, N, K, ldy=N + 64, stream=stream.ptr)
        stream.synchronize()
        assert rel_err(y[:, :N], want) < TOL
        assert bool(cupy.isnan(y[:, N:]).all())


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("M", [1, 13, 40])
def test_swiglu_in_the_epilogue(config, M):
    F, K = 384, 1000   # 2F = 768: 6 pairs of 64-row weight tiles; K a multiple of 8 but of no tile
    rs = cupy.random.RandomState(100 + M)
    x = rs.standard_normal((M, K), dtype=cupy.float32).astype(cupy.float16)
    gate, up = ((rs.standard_normal((F, K), dtype=cupy.float32) / K ** 0.5).astype(cupy.float16) for _ in range(2))
    w = sm90.swap_pack(sm90.swiglu_rows(gate, up), sm90.swap_tile(config).group)
    g, u = (x.astype(cupy.float32) @ a.astype(cupy.float32).T for a in (gate, up))
    y = cupy.full((M, F + 64), cupy.nan, dtype=cupy.float16)   # a wider row stride: its last 64 untouched
    stream = cupy.cuda.Stream()
    cupy.cuda.Device().synchronize()
    with stream:
        sm90.swap_gemm(config, sm90.EPI_SWIGLU_ROWS, w.data.ptr, x.data.ptr, y.data.ptr, M, 2 * F, K, ldy=F + 64,
                       stream=stream.ptr)
    stream.synchronize()
    assert rel_err(y[:, :F], g / (1 + cupy.exp(-g)) * u) < TOL
    assert bool(cupy.isnan(y[:, F:]).all())


@pytest.mark.parametrize("config", CONFIGS)
def test_the_models_gemms_are_correct_at_their_sizes(config):
    """Every weight shape of the decode MLPs and attention blocks (K up to 12288, ragged 2752), fresh
    inputs and a poisoned output at every one of 20 launches, 2 weights in turn."""
    tile = sm90.swap_tile(config)
    stream = cupy.cuda.Stream()
    for N, K in ((4608, 12288), (3072, 8192), (6144, 12288), (12288, 6144), (5504, 8192), (8192, 2752),
                 (12288, 1536), (8192, 1024)):
        if not tile.fits(N, K):   # the wide form's 96-row groups: not LLaMA-ep's weights
            continue
        M = max(1, tile.BT - 3)
        rs = cupy.random.RandomState(N + K)
        x = rs.standard_normal((M, K), dtype=cupy.float32).astype(cupy.float16)
        ws = [(rs.standard_normal((N, K), dtype=cupy.float32) / K ** 0.5).astype(cupy.float16) for _ in range(2)]
        refs = [x.astype(cupy.float32) @ w.astype(cupy.float32).T for w in ws]
        wps = [sm90.swap_pack(w, sm90.swap_tile(config).group) for w in ws]
        y = cupy.empty((M, N), dtype=cupy.float16)
        cupy.cuda.Device().synchronize()
        for i in range(20):
            with stream:
                y.fill(cupy.nan)
                sm90.swap_gemm(config, sm90.EPI_IDENTITY, wps[i % 2].data.ptr, x.data.ptr, y.data.ptr, M, N, K,
                               pdl=i % 3 == 0, stream=stream.ptr)
            stream.synchronize()
            assert rel_err(y, refs[i % 2]) < TOL, (N, K, i)


def test_bad_shapes_are_refused():
    x = cupy.zeros((4, 64), dtype=cupy.float16)
    w = cupy.zeros((96, 64), dtype=cupy.float16)   # 96 rows: not a multiple of the packed groups' 64
    y = cupy.zeros((4, 96), dtype=cupy.float16)
    with pytest.raises(sm90.Sm90Error, match="shape not supported"):
        sm90.swap_gemm("16x64x128sw1", sm90.EPI_IDENTITY, w.data.ptr, x.data.ptr, y.data.ptr, 4, 96, 64)
    with pytest.raises(sm90.Sm90Error, match="no swapped GeMM"):
        sm90.swap_gemm("16x64x64", sm90.EPI_IDENTITY, w.data.ptr, x.data.ptr, y.data.ptr, 4, 96, 64)
    with pytest.raises(sm90.Sm90Error, match="shape not supported"):   # 96 rows: not the wide form's 96-row groups
        sm90.swap_gemm("64x96x64xa", sm90.EPI_IDENTITY, w.data.ptr, x.data.ptr, y.data.ptr, 4, 64, 64)
    with pytest.raises(sm90.Sm90Error, match="shape not supported"):   # Y's stride under the SwiGLU output's width
        sm90.swap_gemm("16x64x128sw1", sm90.EPI_SWIGLU_ROWS, w.data.ptr, x.data.ptr, y.data.ptr, 4, 256, 64, ldy=64)
    w2 = cupy.zeros((128, 64), dtype=cupy.float16)
    y2 = cupy.zeros((4, 72), dtype=cupy.float16)
    with pytest.raises(sm90.Sm90Error, match="shape not supported"):   # Y's rows not 16-byte aligned
        sm90.swap_gemm("16x64x128sw1", sm90.EPI_SWIGLU_ROWS, w2.data.ptr, x.data.ptr, y2.data.ptr + 2, 4, 128, 64,
                       ldy=72)
    with pytest.raises(sm90.Sm90Error, match="shape not supported"):   # one k-block: none for a second split
        sm90.swap_gemm("16x64x64sw1s10k2", sm90.EPI_IDENTITY, w2.data.ptr, x.data.ptr, y.data.ptr, 4, 128, 64, ldy=128)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("M", [1, 5, 16, 24, 64])
def test_every_configuration_is_correct(model, M):
    stream = cupy.cuda.Stream()
    x, w1, w2 = S.MLPSwap(model, M).buffers(seed=M)
    ref = S.MLPSwap(model, M).reference(x, w1, w2)
    for config, config2 in S.tile_pairs(M, model=model):   # each GeMM on its own tile (LLaMA-ep's weight packed at the first run)
        mlp = S.MLPSwap(model, M, config, config2)
        for cfg in mlp.configs():
            y, z = mlp.outputs()
            with stream:
                z.fill(cupy.nan)
                mlp.run(stream, cfg, x, w1, w2, y, z)
            stream.synchronize()
            assert rel_err(z, ref) < TOL, (config, config2, cfg.name)


@pytest.mark.parametrize("model,M,tiles,cfg", [
    (model, M, (), cfg) for model, M in (("gpt3", 16), ("llama-ep", 64)) for cfg in ("PDL/swap", "RowSync+Chain/swap")
] + [("gpt3", 64, tiles, "PDL/swap") for tiles in (("64x96x64xa", "64x96x64xa"), ("64x96x64xa", "64x64x128sw1"))]
  + [("llama-ep", 16, ("16x64x64sw1s10k3", "16x64x64sw1s10k2"), "PDL/swap"),
     ("gpt3", 40, ("64x64x64sw1s6k2", "64x64x64sw1s6k3"), "StreamSync/swap")])
def test_pdl_and_the_chain_stay_correct_over_launches_and_replays(model, M, tiles, cfg):
    """The wide form (X as the A operand) on both GeMMs and beside a swapped second GeMM, in PDL: it
    has no one-launch chain; nor has the K split over a cluster (its clusters' barriers and DSMEM sums
    over 1000 launches and 100 replays)."""
    mlp = S.MLPSwap(model, M, *tiles)
    stream = cupy.cuda.Stream()
    x, w1, w2 = mlp.buffers(seed=11)
    ref = mlp.reference(x, w1, w2)
    y, z = mlp.outputs()
    with stream:
        z.fill(cupy.nan)
        for _ in range(1000):   # the chain's counters reset by each launch's last CTA
            mlp.run(stream, cfg, x, w1, w2, y, z)
        stream.synchronize()
        assert rel_err(z, ref) < TOL, "launches"
        g = timing.capture(lambda s: mlp.run(s, cfg, x, w1, w2, y, z), stream)
        z.fill(cupy.nan)
        for _ in range(100):
            g.launch(stream)
        stream.synchronize()
        assert rel_err(z, ref) < TOL, "replays"
    mlp.check_stages()


def test_a_chain_wait_that_times_out_is_reported_with_its_tile():
    mlp = S.MLPSwap("llama-ep", 1, timeout_ns=1)   # 1 ns: the CTAs that start on a second-GeMM tile give up
    stream = cupy.cuda.Stream()
    x, w1, w2 = mlp.buffers(seed=3)
    y, z = mlp.outputs()
    with stream:
        mlp.run(stream, "RowSync+Chain/swap", x, w1, w2, y, z)
    stream.synchronize()
    with pytest.raises(CusyncError, match=r"swapped MLP chain 16x64x128sw1: a wait timed out at tile \d+ .* "
                                          r"posts seen: \d+"):
        mlp.check_stages()
    assert mlp.timed_out() == {}   # reported once, then cleared


def test_a_bench_point_has_the_swapped_rows():
    stream = cupy.cuda.Stream()
    rows = S.measure_point("llama-ep", 16, 3, stream, seed=1)
    assert {(r["config"], r["tiles"]) for r in rows} == {
        (c, S.tiles_label(*p)) for c in ("StreamSync/swap", "PDL/swap") for p in S.tile_pairs(16, model="llama-ep")} | {
        ("RowSync+Chain/swap", S.tiles_label(c)) for c in S.tile_configs(16) if sm90.swap_tile(c).chains}
    assert all(r["correct"] and r["tile_cfg"]["kernel"] == "swap" for r in rows), rows
