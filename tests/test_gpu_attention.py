"""The synchronized Attention on the GPU (CUSYNC_DEBUG builds: a deadlock raises instead of
hanging): every kernel of the chain, under every generated policy combination, ordering and
option, matches float32 math on fresh random inputs with poisoned outputs, in prompt processing
(S not a multiple of the tile) and token generation (B > 1, S' not a multiple of the key tile)."""
import pytest

from cusyncgen.cuda import available
from cusyncgen.cuda.modules_attention import Shape, TEST_SHAPES

ok, why = available()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not ok, reason=why or "GPU available")]

if ok:
    import cupy
    import torch

    from cusyncgen.cuda.attention import Attention

_atts = {}


def _att(shape):
    if shape not in _atts:
        _atts[shape] = Attention(Shape(*shape), debug=True)
    return _atts[shape]


@pytest.mark.parametrize("shape", TEST_SHAPES, ids=lambda s: f"{s[0]}-B{s[1]}-S{s[2]}-Sp{s[3]}")
def test_every_kernel_under_every_policy_matches_float32(shape):
    att = _att(shape)
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


def test_repeated_launches_and_graph_replays_stay_correct():
    from cusyncgen.cuda import timing
    from cusyncgen.cuda.chain import Config
    att = _att(TEST_SHAPES[2])
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


def test_a_consumer_without_its_producer_raises_instead_of_hanging():
    from cusyncgen.cuda.stages import CusyncTimeoutError, Stage
    from cusyncgen.cuda.modules_attention import num_sems
    att = _att(TEST_SHAPES[0])
    sems = num_sems(att.compiled, "TileSync")
    g1, gP = Stage("g1", 0, sems["g1"], timeout_ms=20), Stage("gP", 1, sems["gP"], timeout_ms=20)
    gP.depends_on(g1, 0, "g1 (QKV GeMM)")
    b = att.buffers(seed=1)
    from cusyncgen.cuda import driver
    from cusyncgen.cuda.attention import AttnGeo, _ptr
    sh = att.shape
    geo = AttnGeo(_ptr(b["cache"]), _ptr(b["P"]), _ptr(b["R"]), _ptr(b["T"]), sh.B, sh.S, sh.Sp, sh.NH, 128,
                  3 * sh.D, sh.Npad, sh.D)
    a_p = driver.GemmArgs(A=0, B=0, C=0, M=sh.S, N=sh.Npad, K=128, lda=3 * sh.D, ldb=3 * sh.D, ldc=sh.Npad,
                          swiglu_offset=0)
    stream = cupy.cuda.Stream(non_blocking=True)
    att.k["pgemm"].launch(att.grids["gP"], [a_p, gP.args(True), att.index["TileSync"]["pgemm"], geo], stream)
    stream.synchronize()
    with pytest.raises(CusyncTimeoutError, match="gP.*g1"):
        gP.raise_if_timed_out()
    torch.cuda.synchronize()
