"""The synchronized MLPs on the GPU: every generated policy under every ordering and
optimization computes the float32 reference's result, on fresh random inputs with poisoned
outputs, for an M that is a multiple of no tile size and for M = 1."""
import pytest

from cusyncgen.cuda import available

ok, why = available()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not ok, reason=why or "GPU available")]

if ok:
    import cupy

    from cusyncgen.workloads.base import rel_err
    from cusyncgen.workloads.mlp import MLP, gemm_args, kernel_symbol

_mlps = {}


def _mlp(model, M, sync_warp=None):
    if (model, M, sync_warp) not in _mlps:
        _mlps[(model, M, sync_warp)] = MLP(model, M, debug=True, sync_warp=sync_warp)
    return _mlps[(model, M, sync_warp)]


def _wrong_configs(mlp):
    """Every configuration on fresh inputs with poisoned outputs: (name, error) of those that
    miss the float32 reference."""
    stream = cupy.cuda.Stream()
    failures = []
    with stream:  # inputs, poisoned outputs and runs in one stream order
        for seed, cfg in enumerate(mlp.configs()):
            x, w1, w2 = mlp.buffers(seed=seed)
            y, z = mlp.outputs()
            mlp.run(stream, cfg, x, w1, w2, y, z)
            stream.synchronize()
            mlp.check_stages()
            err = rel_err(z, mlp.reference(x, w1, w2))
            if not err < 2e-2:
                failures.append((cfg.name, err))
    return failures


@pytest.mark.parametrize("model", ["gpt3", "llama", "llama-ep"])
@pytest.mark.parametrize("M", [1, 300])
@pytest.mark.parametrize("sync_warp", [None, True], ids=["auto", "syncwarp"])
def test_every_policy_and_option_matches_the_reference(model, M, sync_warp):
    mlp = _mlp(model, M, sync_warp)
    if sync_warp:  # forced wherever the module has a sync-warp consumer (<= 4 compute warps)
        assert mlp.sync_warp_used == (mlp.tiles.g2.threads <= 128)
    assert {"TileSync", "RowSync"} <= set(mlp.policy_names)
    if model == "llama":
        assert "StridedSync" in mlp.policy_names
    failures = _wrong_configs(mlp)
    assert not failures, failures


def test_spread_consumer_matches_the_reference():
    """MLP(spread=True): the consumer's padded launches (one block per SM) stay correct."""
    from cusyncgen.cuda import driver
    mlp = MLP("gpt3", 128, debug=True, sync_warp=False, spread=True)  # 96 consumer blocks, 2 per SM unpadded
    assert mlp.spread_smem
    k2 = mlp.kernels[mlp.policy_names[0]][1]
    assert driver.max_active_blocks(driver.Kernel(k2.function, k2.name, k2.threads, mlp.spread_smem)) == 1
    failures = _wrong_configs(mlp)
    assert not failures, failures


def test_repeated_launches_and_graph_replays_stay_correct():
    from cusyncgen.cuda import timing
    from cusyncgen.cuda.chain import Config
    mlp = _mlp("llama", 300)
    stream = cupy.cuda.Stream()
    stream.use()
    x, w1, w2 = mlp.buffers(seed=7)
    ref = mlp.reference(x, w1, w2)
    y, z = mlp.outputs()
    cfgs = [Config(p, o, c) for p in mlp.policy_names for o in ("waitkernel", "pdl") for c in (True, False)]
    for i in range(200):
        mlp.run(stream, cfgs[i % len(cfgs)], x, w1, w2, y, z)
    stream.synchronize()
    mlp.check_stages()
    assert rel_err(z, ref) < 2e-2
    graph = timing.capture(lambda s: mlp.run(s, Config("StridedSync", "pdl", True, True), x, w1, w2, y, z), stream)
    for _ in range(100):
        z.fill(cupy.nan)
        graph.launch(stream)
    stream.synchronize()
    mlp.check_stages()
    assert rel_err(z, ref) < 2e-2
    cupy.cuda.Stream.null.use()


def test_torch_tensors_in_and_out():
    torch = pytest.importorskip("torch")
    from cusyncgen.cuda.chain import Config
    mlp = _mlp("gpt3", 1)
    x, w1, w2 = mlp.buffers(seed=3)
    z = mlp(torch.from_dlpack(x), Config("RowSync", "pdl"), weights=(torch.from_dlpack(w1), torch.from_dlpack(w2)))
    cupy.cuda.get_current_stream().synchronize()
    assert rel_err(z, mlp.reference(x, w1, w2)) < 2e-2


def test_sync_warp_only_where_it_costs_no_occupancy_or_wave():
    from cusyncgen.cuda import driver
    for (model, M, sw), mlp in list(_mlps.items()) or [((m, 1, None), _mlp(m, 1)) for m in ("gpt3", "llama")]:
        if sw is None and mlp.sync_warp_used:
            name = mlp.policy_names[0]
            plain = driver.max_active_blocks(mlp._kernel(kernel_symbol(2, name)))
            occ = driver.max_active_blocks(mlp.kernels[name][1])
            assert occ >= plain or mlp.grid2[0] * mlp.grid2[1] <= occ * driver.sm_count(), (model, M)


def test_sync_warp_wait_that_cannot_complete_times_out():
    from cusyncgen.cuda.stages import CusyncTimeoutError
    mlp = MLP("llama", 1, debug=True, sync_warp=True)  # own stages: a consumer launched alone unpairs them
    assert mlp.sync_warp_used
    prod, cons = mlp._stages["TileSync"]
    cons.timeout_ns = 20_000_000
    stream = cupy.cuda.Stream()
    with stream:
        x, w1, w2 = mlp.buffers(seed=5)
        y, z = mlp.outputs()
        m = mlp.model
        k2 = mlp.kernels["TileSync"][1]
        # The consumer alone: its producer never posts, so the sync warp must give up, not hang.
        k2.launch(mlp.grid2, [gemm_args(y, w2, z, mlp.M, m.N2, m.K2, m.K2), cons.args()], stream)
        stream.synchronize()
    with pytest.raises(CusyncTimeoutError) as err:
        cons.raise_if_timed_out()
    msg = str(err.value)
    assert "stage 'gemm2'" in msg and "of 'gemm1'" in msg and "expected" in msg


def test_llama_ep_is_the_same_mlp_as_llama():
    """llama-ep (SwiGLU in the first GeMM's epilogue, interleaved [W1|V]) computes what llama
    computes once its weight's rows are de-interleaved: both against one float32 reference."""
    from cusyncgen.cuda.chain import Config
    from cusyncgen.workloads.mlp import LLAMA_EP_BLOCK as blk
    ep, plain = _mlp("llama-ep", 300), _mlp("llama", 300)
    x, w1, w2 = ep.buffers(seed=5)
    F = ep.model.K2
    # llama's [W1 | V] from llama-ep's interleaved rows
    w4 = w1.reshape(F // blk, 2, blk, -1)
    w1_plain = cupy.concatenate([w4[:, 0].reshape(F, -1), w4[:, 1].reshape(F, -1)])
    ref = plain.reference(x, w1_plain, w2)
    for mlp, w in ((ep, w1), (plain, w1_plain)):
        z = mlp(x, Config("RowSync", "pdl"), weights=(w, w2))
        assert rel_err(z, ref) < 2e-2, mlp.model_name


def test_timeline_build_records_every_block():
    """CUSYNC_TIMELINE: every block of both GeMMs writes its record to its stage's timeline field
    (TimelineStageArgs), with start <= end of its wait <= end, and the result stays correct."""
    from cusyncgen.cuda.configs import Config
    from cusyncgen.cuda.timeline import block_records
    mlp = MLP("llama", 1, timeline=True)
    stream = cupy.cuda.Stream()
    with stream:
        x, w1, w2 = mlp.buffers(seed=2)
        y, z = mlp.outputs()
        cfg = Config("RowSync", "pdl")
        mlp.run(stream, cfg, x, w1, w2, y, z)
        stream.synchronize()
    assert rel_err(z, mlp.reference(x, w1, w2)) < 2e-2
    p, c = mlp.stages_of(cfg)
    for stage, grid in ((p, mlp.grid1), (c, mlp.grid2)):
        recs = block_records(stage)
        assert len(recs) == grid[0] * grid[1], stage.name
        assert all(r["start"] <= r["end"] and (r["wait"] == 0 or r["start"] <= r["wait"] <= r["end"]) for r in recs)
