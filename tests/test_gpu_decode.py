"""The decode MLP kernel on a Hopper GPU: every configuration of both models computes the float32
reference's result on fresh random inputs with poisoned outputs, at M = 1, a ragged M, 16, 24 and
64, on packed and on row-major weights, warp-K (GPT-3 at M <= 8) and stream-K; the one-launch chains and PDL stay correct over 1000
back-to-back launches and 100 graph replays without a reset; a wait that cannot be met gives up
within its timeout and names the tile and semaphore. Needs CuPy and an sm_90 GPU (nvcc builds the
kernel's cubin, or the cache holds it)."""
import pytest

from support import sm90_cuda

ok, why = sm90_cuda()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not ok, reason=why or "GPU available")]

if ok:
    import cupy

    from cusyncgen.cuda import decode, timing
    from cusyncgen.errors import CusyncError
    from cusyncgen.workloads import mlp_decode as D
    from cusyncgen.workloads.base import rel_err
    from cusyncgen.workloads.mlp import TOL

MODELS = ("gpt3", "llama-ep")


def errors(mlp, configs, seed, rounds=1):
    stream = cupy.cuda.Stream()
    x, w1, w2 = mlp.buffers(seed=seed)
    ref = mlp.reference(x, w1, w2)
    out = {}
    for cfg in configs:
        y, z = mlp.outputs()
        with stream:
            for _ in range(rounds):
                z.fill(cupy.nan)
                mlp.run(stream, cfg, x, w1, w2, y, z)
            stream.synchronize()
        out[cfg] = rel_err(z, ref)
    assert not mlp.timed_out(), mlp.timed_out()
    return out


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("M", [1, 5, 16, 24, 64])
def test_every_configuration_is_correct(model, M):
    mlp = D.MLPDecode(model, M)
    got = errors(mlp, decode.ORDERINGS, seed=M)
    assert all(e < TOL for e in got.values()), got
    # GPT-3's GeLU and identity GeMMs take warp-K at M <= 8 (384 and 768 groups of 16 rows on 384
    # blocks), LLaMA-ep's SwiGLU stream-K
    assert mlp.runner.warp_k == ([1, 2] if model == "gpt3" and M <= 8 else [0, 0])


@pytest.mark.parametrize("M", [1, 5])
def test_stream_k_is_correct_where_warp_k_is_the_default(M):
    mlp = D.MLPDecode("gpt3", M, split="stream-k")
    got = errors(mlp, decode.ORDERINGS, seed=M + 100)
    assert all(e < TOL for e in got.values()), got
    assert mlp.runner.warp_k == [0, 0]


@pytest.mark.parametrize("model", MODELS)
def test_row_major_weights_are_correct(model):
    got = errors(D.MLPDecode(model, 3, shape=decode.EXTRA[0]), decode.ORDERINGS, seed=3)
    assert all(e < TOL for e in got.values()), got


@pytest.mark.parametrize("model,M", [("gpt3", 1), ("gpt3", 8), ("llama-ep", 64)])
def test_chains_stay_correct_over_launches_and_replays(model, M):
    mlp = D.MLPDecode(model, M)
    stream = cupy.cuda.Stream()
    x, w1, w2 = mlp.buffers(seed=11)
    ref = mlp.reference(x, w1, w2)
    y, z = mlp.outputs()
    for cfg in ("TileSync+Chain", "RowSync+Chain", "PDL"):
        with stream:
            z.fill(cupy.nan)
            for _ in range(1000):
                mlp.run(stream, cfg, x, w1, w2, y, z)
            stream.synchronize()
            assert rel_err(z, ref) < TOL, (cfg, "launches")
            g = timing.capture(lambda s, cfg=cfg: mlp.run(s, cfg, x, w1, w2, y, z), stream)
            z.fill(cupy.nan)
            for _ in range(100):
                g.launch(stream)
            stream.synchronize()
            assert rel_err(z, ref) < TOL, (cfg, "replays")
    assert not mlp.timed_out()


def test_a_wait_that_cannot_be_met_times_out_and_names_the_tile():
    mlp = D.MLPDecode("llama-ep", 1, timeout_ns=20_000_000)
    stream = cupy.cuda.Stream()
    x, w1, w2 = mlp.buffers(seed=2)
    y, z = mlp.outputs()
    # semaphores half the counter range away from any target: never reached
    mlp.runner.sems["TileSync"].fill(0x80000000)
    with stream:
        mlp.run(stream, "TileSync+Chain", x, w1, w2, y, z)
        stream.synchronize()
    msg = mlp.timed_out()
    assert msg and "producer tile" in msg["*"] and "sem" in msg["*"]
    with pytest.raises(CusyncError, match="a wait timed out"):
        mlp.check_stages()
