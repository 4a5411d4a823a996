"""The synchronized Conv2D chains (ResNet-38: 2, VGG-19: 4 Conv2Ds) on the GPU: every generated
policy under every ordering and optimization computes the float32 reference (torch conv2d) for
every Conv2D of the chain, on fresh random inputs with outputs poisoned (NaN) before each run,
in CUSYNC_DEBUG builds (a deadlocked wait raises instead of hanging); and a chain whose waits are
dropped is caught as wrong, so a race on the halo cannot pass unnoticed."""
import pytest

from cusyncgen.cuda import available
from cusyncgen.workloads.conv2d import TEST_POINTS

ok, why = available()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not ok, reason=why or "GPU available")]

if ok:
    import cupy

    from cusyncgen.cuda.configs import Config
    from cusyncgen.workloads.conv2d import TOL, ConvChain, rel_err

_chains = {}


def _chain(model, layer, batch, sync_warp=None, spread=None, splits=None):
    """sync_warp=True implies splits=1 (a split-K Conv2D waits in its compute threads)."""
    splits = 1 if sync_warp else splits
    key = (model, layer, batch, sync_warp, spread, splits)
    if key not in _chains:
        _chains[key] = ConvChain(model, layer, batch, debug=True, sync_warp=sync_warp, spread=spread, splits=splits)
    return _chains[key]


# (sync warp, splits): the compute threads wait with split-K where the layer gets it
# (conv2d.splits) and without; the sync warp waits without.
VARIANTS = [(False, None), (False, 1), (True, 1)]
VARIANT_IDS = ["thread0-splitk", "thread0", "syncwarp"]


def _wrong_configs(chain):
    """Every configuration of the chain on fresh inputs with poisoned outputs: (name, error) of
    those that miss the float32 reference."""
    stream = cupy.cuda.Stream(non_blocking=True)
    failures = []
    for seed, cfg in enumerate(chain.configs()):
        x, ws, bs = chain.buffers(seed=seed)
        ys = chain.outputs()
        chain.run(stream, cfg, x, ws, bs, ys)
        stream.synchronize()
        chain.check_stages()
        err = rel_err(ys, chain.reference(x, ws, bs))
        if not err < TOL:
            failures.append((cfg.name, err))
    return failures


@pytest.mark.parametrize("model,layer,batch", TEST_POINTS)
@pytest.mark.parametrize("sync_warp,splits", VARIANTS, ids=VARIANT_IDS)
def test_every_policy_and_option_matches_the_reference(model, layer, batch, sync_warp, splits):
    chain = _chain(model, layer, batch, sync_warp, splits=splits)
    assert chain.sync_warp_used == sync_warp
    if splits is None:  # every test point has fewer tiles than two per SM: split-K
        assert chain.splits > 1 and chain.grid[2] == chain.splits
    # with one channel tile (64 channels) RowSync is the same map as Conv2DTileSync: one policy
    assert set(chain.policy_names) == ({"Conv2DTileSync"} if chain.grid[0] == 1 else {"Conv2DTileSync", "RowSync"})
    failures = _wrong_configs(chain)
    assert not failures, failures


@pytest.mark.parametrize("sync_warp,splits", VARIANTS, ids=VARIANT_IDS)
def test_dropping_the_waits_is_caught(sync_warp, splits):
    """The same kernels with their waits off read the poisoned producer outputs: the check must
    fail, else it could not catch a race either. 512 channels (a long reduction per tile) in one
    wave, PDL-launched: the consumers start while every producer tile is still being computed."""
    from cusyncgen.cuda import timing
    chain = _chain("vgg19", "L4", 8, sync_warp, splits=splits)
    stream = cupy.cuda.Stream(non_blocking=True)
    errs = []
    for seed in range(3):
        x, ws, bs = chain.buffers(seed=100 + seed)
        ys = chain.outputs()
        # one CUDA-graph launch: no host gap between the kernels (a slow host would launch the
        # consumers after the producers end, and the race would not show)
        graph = timing.capture(lambda s: chain.run(s, Config("RowSync", "pdl"), x, ws, bs, ys, wait_input=False), stream)
        chain.poison(ys)
        graph.launch(stream)
        stream.synchronize()
        errs.append(rel_err(ys, chain.reference(x, ws, bs)))
    assert any(not e < TOL for e in errs), errs


def test_repeated_launches_and_graph_replays_stay_correct():
    """Split-K included (VGG-19 L4 batch 8 splits): its arrival counters reset themselves."""
    from cusyncgen.cuda import timing
    chain = _chain("vgg19", "L4", 8)
    assert chain.splits > 1
    stream = cupy.cuda.Stream(non_blocking=True)
    for cfg in (Config("Conv2DTileSync", "pdl", True, True), Config("RowSync", "waitkernel", True, False)):
        x, ws, bs = chain.buffers(seed=7)
        ys = chain.outputs()
        graph = timing.capture(lambda s: chain.run(s, cfg, x, ws, bs, ys), stream)
        for _ in range(5):
            chain.poison(ys)
            graph.launch(stream)
            stream.synchronize()
            chain.check_stages()
            assert rel_err(ys, chain.reference(x, ws, bs)) < TOL, cfg.name


def test_spread_consumers_match_the_reference_one_block_per_sm():
    """Consumers padded to one block per SM (ConvChain(spread=True)): still correct under every
    configuration, and the padding does keep two of their blocks off one SM."""
    from cusyncgen.cuda import driver
    point = next(p for p in TEST_POINTS if p[0] == "vgg19")
    chain = _chain(*point, sync_warp=True, spread=True)
    if chain.num_tiles > driver.sm_count():
        pytest.skip("the test point's grid is larger than one wave")
    assert chain.spread_smem
    for name, pad in chain.spread_smem.items():
        kern = chain.plain_kernel if name == chain.plain_kernel.name else next(
            k for ks in chain.kernels.values() for k in ks if k.name == name)
        padded = driver.Kernel(kern.function, kern.name, kern.threads, pad)
        assert driver.max_active_blocks(padded) == 1, name
    failures = _wrong_configs(chain)
    assert not failures, failures


def test_the_cost_diagnostic_runs_the_policy_kernels_correctly():
    """conv_costs times the policy's kernels in plain stream order (posting, waiting on tiles that
    are all posted) and overlapped: every variant that is not a deliberate race must compute the
    reference, in a CUSYNC_DEBUG build (a wait that could not finish would raise)."""
    from cusyncgen.commands import conv_costs
    point = TEST_POINTS[0]
    stream = cupy.cuda.Stream(non_blocking=True)
    chain = _chain(*point, splits=1)
    policy = chain.policy_names[0]
    x, ws, bs = chain.buffers(seed=11)
    ys = chain.outputs()
    refs = chain.reference(x, ws, bs)
    checked = [(name, run) for name, run, ok in conv_costs.variants(chain, policy, x, ws, bs, ys) if ok]
    assert len(checked) == 7
    for name, run in checked:
        chain.poison(ys)
        run(stream)
        stream.synchronize()
        chain.check_stages()
        assert rel_err(ys, refs) < TOL, name
