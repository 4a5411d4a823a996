"""The synchronized MLPs on the GPU: every generated policy under every ordering and
optimization computes the float32 reference's result, on fresh random inputs with poisoned
outputs, for an M that is a multiple of no tile size and for M = 1."""
import pytest

from cusyncgen.cuda import available

ok, why = available()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not ok, reason=why or "GPU available")]

if ok:
    import cupy

    from cusyncgen.cuda.bench import configs_for, rel_err
    from cusyncgen.cuda.mlp import MLP

_mlps = {}


def _mlp(model, M):
    if (model, M) not in _mlps:
        _mlps[(model, M)] = MLP(model, M, debug=True)
    return _mlps[(model, M)]


@pytest.mark.parametrize("model", ["gpt3", "llama"])
@pytest.mark.parametrize("M", [1, 300])
def test_every_policy_and_option_matches_the_reference(model, M):
    mlp = _mlp(model, M)
    assert {"TileSync", "RowSync"} <= set(mlp.policy_names)
    if model == "llama":
        assert "StridedSync" in mlp.policy_names
    stream = cupy.cuda.Stream()
    failures = []
    with stream:  # inputs, poisoned outputs and runs in one stream order
        for seed, cfg in enumerate(configs_for(mlp)):
            x, w1, w2 = mlp.buffers(seed=seed)
            y, z = mlp.outputs()
            mlp.run(stream, cfg, x, w1, w2, y, z)
            stream.synchronize()
            mlp.check_stages()
            err = rel_err(z, mlp.reference(x, w1, w2))
            if not err < 2e-2:
                failures.append((cfg.name, err))
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
