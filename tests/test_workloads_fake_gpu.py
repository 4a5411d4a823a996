"""Every workload's GPU path run against a recording stand-in for CuPy, PyTorch and the driver
(no GPU): each instance builds from its real generated module source, asks the module only for
kernels that source defines, checks its ABI, and under every configuration it offers launches
each kernel of its chain once, with the StageArgs flags the chain's decoding gives, the wait-kernel
exactly where the ordering has one. What the kernels compute is the GPU tests' job."""
import math
import re
import sys
import types

import numpy as np
import pytest

from cusyncgen.cuda import abi, build
from cusyncgen.cuda.chain import steps
from cusyncgen.cuda.configs import Ordering

LAUNCHES = []


class FakeArray:
    _next = [0x10000]

    def __init__(self, shape=(1,), dtype=None):
        self.shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
        self.size = math.prod(self.shape)
        self.data = types.SimpleNamespace(ptr=FakeArray._next[0])
        FakeArray._next[0] += 0x10000

    def fill(self, value):
        pass

    def get(self):
        return np.zeros(self.size, dtype=np.int64)

    def data_ptr(self):
        return self.data.ptr

    def element_size(self):
        return 2


class FakeStream:
    def __init__(self, non_blocking=False, priority=0):
        self.ptr = 0

    def wait_event(self, event):
        pass


class FakeEvent:
    def __init__(self, disable_timing=False):
        pass

    def record(self, stream=None):
        pass


def _fake_cupy():
    m = types.ModuleType("cupy")
    m.zeros = m.empty = lambda shape, dtype=None: FakeArray(shape, dtype)
    m.full = lambda shape, value, dtype=None: FakeArray(shape, dtype)
    for name in ("uint64", "uint32", "int32", "float32", "float16"):
        setattr(m, name, name)
    m.nan = float("nan")
    m.cuda = types.SimpleNamespace(Stream=FakeStream, Event=FakeEvent)
    m.random = types.SimpleNamespace(standard_normal=lambda n, dtype=None: FakeArray(n, dtype))
    return m


def _fake_torch():
    m = types.ModuleType("torch")
    m.empty = m.zeros = lambda *shape, device=None, dtype=None: FakeArray(shape, dtype)
    m.float32, m.int32, m.float16 = "float32", "int32", "float16"
    m.cuda = types.SimpleNamespace(is_available=lambda: False)
    return m


class FakeKernel:
    def __init__(self, name, threads, smem):
        self.name, self.threads, self.smem = name, threads, smem
        self.function = types.SimpleNamespace(max_dynamic_shared_size_bytes=0)

    def launch(self, grid, args, stream, pdl=False, smem=None):
        LAUNCHES.append((self.name, tuple(grid), list(args), pdl, smem))


class FakeModule:
    def __init__(self, source):
        self.text = source.text
        self.checked = []

    def constant_int(self, name):
        assert re.search(rf"\b{name.removesuffix('_threads').removesuffix('_smem')}\b", self.text), name
        if name == "has_sync_warp":
            return int(re.search(r"has_sync_warp = (\d)", self.text).group(1))
        return 128 if name.endswith("_threads") else 1024

    def check_abi(self, *structs):
        self.checked += structs

    def kernel(self, name, threads, smem=0):
        assert re.search(rf"\b{name}\b", self.text), f"{name} is not defined by the module"
        return FakeKernel(name, threads, smem)


def _fake_driver():
    m = types.ModuleType("cusyncgen.cuda.driver")
    m.Module = FakeModule
    m.arch = lambda: "sm_90a"
    m.sm_count = lambda: 132
    m.device_name = lambda: "Fake GPU"
    m.stream_priority_range = lambda: (0, -5)
    m.sync_warp_pays = lambda blocks, with_sw, without: True
    m.resident_at_once = lambda grids: True
    m.max_active_blocks = lambda kernel: 2
    m.max_shared_carveout = lambda kernels: list(kernels)
    m.apply_spread = lambda kernels, beside, per_sm_blocks=1: {k.name: 50000 for k in kernels}
    m.block_smem = lambda kernel: 2048
    m.spread_smem = lambda kernel, beside, per_sm_blocks=1: 50000
    return m


@pytest.fixture()
def fake_gpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy())
    monkeypatch.setitem(sys.modules, "torch", _fake_torch())
    monkeypatch.setitem(sys.modules, "cusyncgen.cuda.driver", _fake_driver())
    monkeypatch.setattr(build, "build", lambda source, arch=None: source)
    LAUNCHES.clear()
    yield LAUNCHES


def _check_run(instance, run, n_kernels, first_arg):
    """Every configuration: n kernel launches (+ n-1 wait-kernels with a wait-kernel ordering) with
    the decoded flags; returns the configurations' names."""
    names = []
    for cfg in instance.configs():
        LAUNCHES.clear()
        run(cfg)
        kernels = [ln for ln in LAUNCHES if ln[0] != "cusync_wait_kernel"]
        waits = [ln for ln in LAUNCHES if ln[0] == "cusync_wait_kernel"]
        assert len(kernels) == n_kernels, (cfg.name, [k[0] for k in kernels])
        assert len(waits) == (n_kernels - 1 if cfg.ordering == Ordering.WAITKERNEL else 0), cfg.name
        for (name, grid, args, pdl, smem), step in zip(kernels, steps(cfg, n_kernels)):
            sa = next(a for a in args if isinstance(a, abi.StageArgs))
            assert sa.flags == step.flags and pdl == step.pdl, (cfg.name, name)
            assert (cfg.policy is None) == name.endswith("plain") or instance.name == "attention", (cfg.name, name)
            assert all(g >= 1 for g in grid)
        assert isinstance(kernels[0][2][0], first_arg)
        names.append(cfg.name)
    return names


@pytest.mark.parametrize("model,M,sync_warp", [("gpt3", 1, None), ("llama", 300, True), ("llama-ep", 128, False)])
def test_mlp(fake_gpu, model, M, sync_warp):
    from cusyncgen.workloads.mlp import MLP
    mlp = MLP(model, M, sync_warp=sync_warp, spread=True)
    assert set(mlp.module.checked) == {abi.GemmArgs, abi.StageArgs}
    assert mlp.sync_warp_used == (sync_warp is not False and mlp.tiles.g2.threads <= 128)
    x, w1, w2 = FakeArray((M, mlp.model.K1)), FakeArray((mlp.model.N1, mlp.model.K1)), FakeArray((mlp.model.N2, mlp.model.K2))
    y, z = FakeArray((M, mlp.model.Y_cols)), FakeArray((M, mlp.model.N2))
    names = _check_run(mlp, lambda cfg: mlp.run(FakeStream(), cfg, x, w1, w2, y, z), 2, abi.GemmArgs)
    assert {"StreamSync", "PDL", "RowSync+PDL+R", "TileSync+WT"} <= set(names)
    LAUNCHES.clear()
    from cusyncgen.cuda.configs import Config
    mlp.run(FakeStream(), Config("RowSync", "pdl", True, True), x, w1, w2, y, z)
    consumer = LAUNCHES[1]
    assert consumer[0] == "gemm2_RowSync_R" + ("S" if mlp.sync_warp_used else "") and consumer[4] == (mlp.spread_smem or None)
    mlp.check_stages()
    timeline = MLP(model, M, timeline=True)
    assert abi.TimelineStageArgs in timeline.module.checked
    LAUNCHES.clear()
    timeline.run(FakeStream(), Config("RowSync", "pdl"), x, w1, w2, y, z)
    assert all(isinstance(ln[2][1], abi.TimelineStageArgs) and ln[2][1].timeline_capacity > 0 for ln in LAUNCHES)


@pytest.mark.parametrize("model,layer,batch,sync_warp", [("resnet38", "L4", 1, None), ("vgg19", "L3", 2, True)])
def test_conv2d(fake_gpu, model, layer, batch, sync_warp):
    from cusyncgen.workloads.conv2d import REORDER, WAIT_INPUT, ConvChain
    chain = ConvChain(model, layer, batch, sync_warp=sync_warp)
    assert set(chain.module.checked) == {abi.ConvArgs, abi.StageArgs}
    L = chain.layer
    x = FakeArray((batch, L.P, L.Q, L.C))
    ws = [FakeArray((L.C, 3, 3, L.C)) for _ in range(chain.n)]
    bs = [FakeArray((L.C,)) for _ in range(chain.n)]
    ys = [FakeArray((batch, L.P, L.Q, L.C)) for _ in range(chain.n)]
    names = _check_run(chain, lambda cfg: chain.run(FakeStream(), cfg, x, ws, bs, ys), chain.n, abi.ConvArgs)
    assert "Conv2DTileSync+PDL+R" in names and ("Conv2DTileSync+WT" in names) == (chain.n == 2)
    from cusyncgen.cuda.configs import Config
    LAUNCHES.clear()
    chain.run(FakeStream(), Config("Conv2DTileSync", "pdl", True, True), x, ws, bs, ys)
    assert [ln[2][0].flags for ln in LAUNCHES] == [0] + [WAIT_INPUT | REORDER] * (chain.n - 1)
    assert all(ln[0].endswith("_S") == (i > 0 and chain.sync_warp_used) for i, ln in enumerate(LAUNCHES))
    chain.check_stages()


def test_conv2d_cost_variants(fake_gpu):
    from cusyncgen.commands import conv_costs
    from cusyncgen.workloads.conv2d import ConvChain
    chain = ConvChain("resnet38", "L2", 3, splits=1)
    L = chain.layer
    bufs = (FakeArray((3, L.P, L.Q, L.C)), [FakeArray((1,))] * 2, [FakeArray((1,))] * 2, [FakeArray((1,))] * 2)
    for name, run, _ in conv_costs.variants(chain, chain.policy_names[0], *bufs):
        LAUNCHES.clear()
        run(FakeStream())
        assert len(LAUNCHES) == 2 and not any(ln[0] == "cusync_wait_kernel" for ln in LAUNCHES), name


@pytest.mark.parametrize("shape", [("gpt3", 1, 320, 0), ("llama", 2, 1, 512), ("gpt3", 1, 320, 0, True)])
def test_attention(fake_gpu, shape):
    from cusyncgen.workloads.attention import Attention, Shape
    att = Attention(Shape(*shape), sync_warp=None)
    assert set(att.module.checked) == {abi.GemmArgs, abi.AttnGeo, abi.SoftmaxArgs, abi.StageArgs}
    sh = att.shape
    b = {k: FakeArray((1,)) for k in ("x", "wqkv", "wo", "cache", "P", "R", "T", "out")}
    b["seed"] = 1
    names = _check_run(att, lambda cfg: att.run(FakeStream(), cfg, b), 5, abi.GemmArgs)
    from cusyncgen.cuda.configs import Config
    assert not any(Config.parse(n).ordering == Ordering.NONE for n in names)  # W is not offered
    assert {"StreamSync", "PDL", "TileSync+PDL+RT"} <= set(names)
    att.check_stages()
    assert (min(att.splits.values()) > 1) == (not sh.prompt)   # split-K in token generation


def test_copy_chain_and_overhead_configs(fake_gpu):
    from cusyncgen.workloads.overhead import CopyChain
    cc = CopyChain(tiles=40)
    assert cc.module.checked == [abi.StageArgs]
    names = _check_run(cc, lambda cfg: cc.run(FakeStream(), cfg), 2, FakeArray)
    assert names == ["StreamSync", "PDL", "TileSync+T", "TileSync+PDL+T"]
