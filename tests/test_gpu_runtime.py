"""The CuSync runtime on the GPU, through the copy-kernel chain: every ordering is correct, the
semaphores survive 1000 launches and 100 graph replays without a reset, and a wait that can never
be satisfied becomes a CusyncTimeoutError in a CUSYNC_DEBUG build instead of a hang."""
import pytest

from cusyncgen.cuda import available

ok, why = available()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not ok, reason=why or "GPU available")]

if ok:
    import cupy
    import cupy.testing

    from cusyncgen.cuda import timing
    from cusyncgen.cuda.chain import PDL_ALONE, STREAM_SYNC, Config
    from cusyncgen.workloads.overhead import CopyChain
    from cusyncgen.cuda.stages import CusyncTimeoutError

CONFIG_ARGS = [(None, "stream", False), (None, "pdl_alone", False), ("TileSync", "waitkernel", True),
               ("TileSync", "waitkernel", False), ("TileSync", "pdl", True), ("TileSync", "pdl", False)]


@pytest.fixture(scope="module")
def chain():
    return CopyChain(tiles=3 * 132 + 17, tile_vec4=512, debug=True)


@pytest.fixture(autouse=True)
def _one_stream():
    """Every test runs its fills, inputs and launches on one stream that also orders itself after
    the legacy default stream (CuPy allocations of module fixtures), so nothing races a poison fill."""
    stream = cupy.cuda.Stream()
    with stream:
        yield


def _fresh(cc):
    cc.x[...] = cupy.random.standard_normal(cc.x.size, dtype=cupy.float32)
    cc.mid.fill(cupy.nan)
    cc.out.fill(cupy.nan)


@pytest.mark.parametrize("policy,ordering,custom", CONFIG_ARGS)
def test_every_ordering_is_correct(chain, policy, ordering, custom):
    stream = cupy.cuda.get_current_stream()
    cfg = Config(policy, ordering, custom)
    for _ in range(3):
        _fresh(chain)
        chain.run(stream, cfg)
        stream.synchronize()
        chain.check_stages()
        cupy.testing.assert_array_equal(chain.out, chain.reference())


def test_thousand_launches_without_reset(chain):
    stream = cupy.cuda.get_current_stream()
    cfgs = [Config("TileSync", "waitkernel", True), Config("TileSync", "pdl", False), STREAM_SYNC, PDL_ALONE]
    for i in range(1000):
        if i % 100 == 0:
            _fresh(chain)
        chain.run(stream, cfgs[i % len(cfgs)])
        if i % 100 == 99:
            stream.synchronize()
            chain.check_stages()
            cupy.testing.assert_array_equal(chain.out, chain.reference())


def test_hundred_graph_replays(chain):
    stream = cupy.cuda.get_current_stream()
    for cfg in (Config("TileSync", "waitkernel", True), Config("TileSync", "pdl", True)):
        graph = timing.capture(lambda s: chain.run(s, cfg), stream)
        for i in range(100):
            _fresh(chain)
            graph.launch(stream)
            stream.synchronize()
            if i % 10 == 0 or i == 99:
                chain.check_stages()
                cupy.testing.assert_array_equal(chain.out, chain.reference())


def test_wait_that_cannot_complete_times_out_with_its_tile_and_semaphore():
    cc = CopyChain(tiles=40, tile_vec4=64, debug=True)
    prod, cons = cc.stages["TileSync"]
    cons.timeout_ns = 20_000_000
    stream = cupy.cuda.get_current_stream()
    k2 = cc.kernels["TileSync"][1]
    # The consumer alone: its producer never posts, so every wait must time out, not hang.
    k2.launch((cc.tiles, 1, 1), [cc.mid, cc.out, cc.tile_vec4, cons.args()], stream)
    stream.synchronize()
    with pytest.raises(CusyncTimeoutError) as err:
        cons.raise_if_timed_out()
    msg = str(err.value)
    assert "stage 'copy2'" in msg and "of 'copy1'" in msg
    assert "semaphore" in msg and "was 0, expected 1" in msg


def test_semaphores_and_epochs_wrap_past_32_bits():
    """Start as if 2^32 - 2 launches had already run: the 32-bit semaphores wrap to 0 during the
    next launches and the waits must still hold (two's-complement distance compare)."""
    cc = CopyChain(tiles=40, tile_vec4=64, debug=True)
    prod, cons = cc.stages["TileSync"]
    done = 2**32 - 2
    prod.ticket[...] = done * cc.tiles
    cons.ticket[...] = done * cc.tiles
    prod.sems[...] = cupy.uint32(done)  # TileSync: one post per launch per semaphore
    stream = cupy.cuda.get_current_stream()
    for cfg in [Config("TileSync", "waitkernel", True), Config("TileSync", "pdl", False)] * 2:
        _fresh(cc)
        cc.run(stream, cfg)
        stream.synchronize()
        cc.check_stages()
        cupy.testing.assert_array_equal(cc.out, cc.reference())
    assert int(prod.sems[0]) == 2  # wrapped: 2^32 - 2 + 4 posts


def test_a_loaded_module_exports_the_host_layout_and_refuses_another(chain):
    """CopyChain checked StageArgs when it loaded its module; the timeline build's layout (two
    more fields) is refused by a module built without them, naming the struct."""
    from cusyncgen.cuda import abi
    n = chain.module.constant_int(f"{abi.symbol(abi.StageArgs)}_len")
    abi.compare(abi.StageArgs, chain.module.constant_int64s(abi.symbol(abi.StageArgs), n))
    with pytest.raises(abi.AbiError, match="StageArgs: the kernels' struct has 9 fields, the host's 11"):
        chain.module.check_abi(abi.TimelineStageArgs)
