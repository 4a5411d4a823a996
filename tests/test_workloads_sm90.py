"""The sm90 MLP workload without a GPU: the registry holds both kernel families of the MLP, the
device's compute capability picks the default one, the sm90 configurations and their names, every
configuration launched through the sm90 chain onto a recording stand-in for the library's plans
(the launches chain.steps decodes, their flags, GeMMs, policies and buffers), and the bench / tune
rows, report and dispatch table of the family."""
import json
import sys
import types

import pytest

from cusyncgen.cuda import sm90
from cusyncgen.cuda.configs import SM90_ORDERINGS, Config, Ordering
from cusyncgen.errors import CusyncError
from cusyncgen.workloads import FAMILIES, MLP, MLPSm90, Workload, default_kernel, get, kernels
from cusyncgen.workloads import mlp_sm90 as W
from test_workloads_fake_gpu import FakeArray, FakeStream, fake_gpu  # noqa: F401  (the fixture)


def test_the_registry_holds_both_mlp_families():
    assert FAMILIES["mlp"] == {"sm80": MLP, "sm90": MLPSm90} and kernels() == ["sm80", "sm90"]
    cls = get("mlp", "sm90")
    assert isinstance(cls, Workload) and cls.name == "mlp" and cls.kernel == "sm90" and cls.tune_mode == "measure"
    assert cls.orderings == SM90_ORDERINGS and Ordering.PERSISTENT in cls.orderings
    assert Ordering.WAITKERNEL not in cls.orderings and Ordering.NONE not in cls.orderings
    assert cls.models == ("gpt3", "llama-ep") and cls.sources() == []   # one prebuilt library, no modules
    with pytest.raises(KeyError, match="no sm90 kernels for conv2d"):
        get("conv2d", "sm90")


@pytest.mark.parametrize("arch,mlp,conv", [("sm_90a", "sm90", "sm80"), ("sm_90", "sm90", "sm80"),
                                           ("sm_80", "sm80", "sm80"), ("sm_86", "sm80", "sm80"),
                                           ("sm_100a", "sm80", "sm80"), (None, "sm80", "sm80")])
def test_the_default_family_follows_the_compute_capability(arch, mlp, conv):
    assert default_kernel("mlp", arch) == mlp and default_kernel("conv2d", arch) == conv
    assert default_kernel("attention", arch) == mlp   # the Hopper attention block on sm_90


def test_configs_and_their_names():
    names = [c.name for c in W.configs_for(W.SPLITS)]
    assert names[:6] == ["StreamSync", "PDL", "TileSync+PDL", "TileSync+Chain", "RowSync+PDL", "RowSync+Chain"]
    assert names[6:] == [n + "/split-K" for n in names[:6]]
    for c in W.configs_for(W.SPLITS):
        assert W.Sm90Config.parse(c.name) == c and c.ordering in SM90_ORDERINGS
        assert ("Chain" in c.name) == (c.ordering == Ordering.PERSISTENT)
    assert Config.parse("RowSync+Chain").ordering == Ordering.PERSISTENT
    with pytest.raises(CusyncError, match="no waitkernel ordering"):
        W.Sm90Config(Config("RowSync"))
    with pytest.raises(CusyncError, match="no policy StridedSync"):
        W.Sm90Config(Config("StridedSync", Ordering.PDL))
    with pytest.raises(CusyncError, match="splits"):
        W.Sm90Config(Config("RowSync", Ordering.PDL), "4")


def test_llama_is_refused_with_a_reason_and_tiles_fit_the_models():
    with pytest.raises(CusyncError, match="llama .*no sm90 kernel.*use llama-ep .*--kernel sm80"):
        W.check_model("llama")
    with pytest.raises(CusyncError, match="no model 'bert'"):
        W.tile_candidates("bert", 1)
    assert W.tile_candidates("llama-ep", 1) == ["128x128x64", "64x128x64", "64x128x64pp", "128x128x64pp"]  # BN = 128
    assert "256x128x64" in W.tile_candidates("gpt3", 512) and "256x128x64" not in W.tile_candidates("gpt3", 128)
    # 64-row tiles up to SMALL_TILE_MAX_M only
    assert "64x128x64" in W.tile_candidates("gpt3", 256) and "64x128x64pp" not in W.tile_candidates("gpt3", 512)
    # the TMA-store epilogue from TMA_STORE_MIN_M on
    assert "128x192x64tma" in W.tile_candidates("gpt3", W.TMA_STORE_MIN_M)
    assert not any(c.endswith("tma") for c in W.tile_candidates("gpt3", W.TMA_STORE_MIN_M - 1))
    # every config fits GPT-3's MLP but 128x144 (the prompt attention's QKV GeMM: 4608 = 32 x 144 columns)
    assert all(W.fits("gpt3", c) for c in W.CONFIGS if c != "128x144x64") and not W.fits("gpt3", "128x144x64")
    assert "128x144x64" not in W.tile_candidates("gpt3", 512) and not W.fits("llama-ep", "128x192x64")
    assert W.default_tile("gpt3", 1) == "64x128x64" and W.default_tile("gpt3", 128) == "128x192x64"
    assert W.default_tile("gpt3", 512) == "128x192x64tma" and W.default_tile("llama-ep", 4096) == "128x128x64tma"


class _Plan:
    """Stands for sm90.Plan: records what one launch would be (the real one is tests/test_sm90_lib.py's)."""

    made = []

    def __init__(self, config, gemms, ticket=0, grid=0, flags=sm90.LaunchFlag.NONE, timeout_ns=0, debug=0):
        self.config, self.flags, self.ticket, self.timeout_ns = config, flags, ticket, timeout_ns
        self.gemms = [sm90.Gemm.from_buffer_copy(g) for g in gemms]
        self.launched = []
        _Plan.made.append(self)

    def launch(self, stream=0):
        self.launched.append(stream)


class _Tensor(FakeArray):
    def __init__(self, n, failed=0):
        super().__init__((n,))
        self.failed = failed

    def cpu(self):
        return self

    def tolist(self):
        return [self.failed] + [0] * (self.size - 1)


@pytest.fixture()
def fake_sm90(fake_gpu, monkeypatch):  # noqa: F811
    fake_cupy = sys.modules["cupy"]
    fake_cupy.cuda.runtime = types.SimpleNamespace(deviceSynchronize=lambda: None)
    monkeypatch.setattr(sm90, "library", lambda: types.SimpleNamespace(configs=W.CONFIGS))
    monkeypatch.setattr(sm90.launch, "Plan", _Plan)
    monkeypatch.setattr(sm90.launch, "torch", types.SimpleNamespace(
        device=lambda name: name, int32="int32", int64="int64", zeros=lambda n, dtype=None, device=None: _Tensor(n)))
    _Plan.made.clear()
    yield _Plan.made


@pytest.mark.parametrize("model,M,tile", [("gpt3", 1, "64x128x64"), ("llama-ep", 200, "128x128x64")])
def test_every_configuration_runs_through_the_sm90_chain(fake_sm90, model, M, tile):
    mlp = MLPSm90(model, M, tile)
    names = [c.name for c in mlp.configs()]
    assert ("RowSync+Chain/split-K" in names) == sm90.has_split(mlp.splits_of("auto"))
    x, w1, w2 = (FakeArray((1,)) for _ in range(3))
    y, z = FakeArray((1,)), FakeArray((1,))
    stream = FakeStream()
    stream.ptr = 77
    L = sm90.LaunchFlag
    for cfg in mlp.configs():
        before = len(fake_sm90)
        mlp.run(stream, cfg, x, w1, w2, y, z)
        plans = fake_sm90[before:]
        assert all(p.launched == [77] and p.config == tile for p in plans)
        gemms = [g for p in plans for g in p.gemms]
        assert [(g.A, g.B, g.C) for g in gemms] == [(x.data.ptr, w1.data.ptr, y.data.ptr),
                                                    (y.data.ptr, w2.data.ptr, z.data.ptr)]
        assert [(g.splits, g.split_from) for g in gemms] == [tuple(s) for s in mlp.splits_of(cfg.splits)]
        assert bool(gemms[1].in_sems) == (cfg.policy is not None) and gemms[1].in_sems == gemms[0].out_sems
        flags = {Ordering.STREAM: [L.NONE, L.NONE], Ordering.PDL_ALONE: [L.PDL_TRIGGER, L.PDL_LAUNCH | L.PDL_WAIT],
                 Ordering.PDL: [L.PDL_TRIGGER, L.PDL_LAUNCH], Ordering.PERSISTENT: [L.NONE]}[cfg.ordering]
        assert [p.flags for p in plans] == flags
        assert [bool(p.ticket) for p in plans] == [cfg.policy is not None and p is plans[-1] for p in plans]
    made = len(fake_sm90)
    chain = next(r for (cfg, *_), r in mlp._runners.items() if cfg.name == "RowSync+Chain")
    mlp.run(stream, Config("RowSync", Ordering.PERSISTENT, True), x, w1, w2, y, z)   # a plain Config: no split-K
    assert len(fake_sm90) == made and chain.plans[0].launched == [77, 77]   # the same buffers: the chain is reused
    other = FakeArray((1,))
    mlp.run(stream, Config("RowSync", Ordering.PERSISTENT, True), other, w1, w2, y, z)   # new buffers: a new chain
    assert len(fake_sm90) == made + 1
    mlp.check_stages()
    assert mlp.timed_out() == {}
    chain.debug.failed = 1   # the device's record of a wait that gave up
    with pytest.raises(sm90.Sm90Error, match=f"sm90 {tile} RowSync\\+Chain: a wait timed out: block 0"):
        mlp.check_stages()
    assert list(mlp.timed_out()) == ["RowSync+Chain"]


def test_per_gemm_tile_configs_run_without_the_chain(fake_sm90):
    """A second GeMM on its own tile config: two launches (no Chain ordering), the runner told both
    configs, split counts per GeMM on its own tile, and its label and dispatch fields say so."""
    mlp = MLPSm90("gpt3", 128, "64x128x64", tile2="128x128x64")
    names = [c.name for c in mlp.configs()]
    assert names[:4] == ["StreamSync", "PDL", "TileSync+PDL", "RowSync+PDL"] and not any("Chain" in n for n in names)
    assert mlp.tiles.label == "64x128x64+128x128x64" and mlp.tiles.tile2 == "128x128x64"
    d = mlp.tiles.as_dict()
    assert d["config2"] == "128x128x64" and d["g1"] == {"BM": 64, "BN": 128} and d["g2"] == {"BM": 128, "BN": 128}
    assert mlp.splits_of("auto") == W.mlp_splits("gpt3", 128, "64x128x64", "auto", "128x128x64")
    x, w1, w2, y, z = (FakeArray((1,)) for _ in range(5))
    stream = FakeStream()
    stream.ptr = 5
    for cfg in mlp.configs():
        mlp.run(stream, cfg, x, w1, w2, y, z)
    # two launches each: the first GeMM on its tile, the second on its own
    assert [p.config for p in fake_sm90] == ["64x128x64", "128x128x64"] * len(mlp.configs())
    # the same config twice is no pair; one that does not fit the second GeMM is refused
    same = MLPSm90("gpt3", 128, "128x128x64", tile2="128x128x64")
    assert same.tile2 is None and same.tiles.label == "128x128x64" and "RowSync+Chain" in [c.name for c in same.configs()]
    with pytest.raises(CusyncError, match="128x192x64.*second GeMM"):
        MLPSm90("llama-ep", 128, "128x128x64", tile2="128x192x64")
    assert W.fits_gemm("llama-ep", "128x256x64", 2) and not W.fits_gemm("llama-ep", "128x256x64", 1)
    assert "128x256x64" in W.tile_candidates("llama-ep", 512, gemm=2)
    assert "128x256x64" not in W.tile_candidates("llama-ep", 512, gemm=1)


def test_orders_group_both_gemms_once_the_tiles_span_two_row_blocks():
    none, g1g2 = (False, False, False, False), (True, False, False, True)
    assert W.orders_for(1) == W.orders_for(64) == [none]
    assert W.orders_for(128) == W.orders_for(200) == [none, g1g2]
    assert W.orders_for(256) == [(True, False, False, False), g1g2]
    assert W.orders_for(1024) == [(True, True, False, False), (False, True, True, False), g1g2]
    assert W.orders_for(4096) == [(True, True, False, False), (False, True, True, False)]   # rows complete early
    assert W.Sm90Tiles("128x128x64", *g1g2).label == "128x128x64 G1 G2"
    assert MLPSm90.__dataclass_fields__["grouped1"].default is None   # an instance takes orders_for(M)[0]


def test_candidates_add_the_pair_the_gemms_alone_chose():
    base = W.candidates("gpt3", 512)
    assert W.candidates("gpt3", 512, per_gemm=("128x192x64", "128x192x64")) == base   # same tile: nothing new
    assert W.candidates("gpt3", 512, per_gemm=(None, "128x192x64")) == base
    pair = W.candidates("gpt3", 512, per_gemm=("256x128x64", "128x256x64"))
    extra = pair[len(base):]
    assert pair[:len(base)] == base and len(extra) == len(W.orders_for(512))
    assert {(t.config, t.config2) for t in extra} == {("256x128x64", "128x256x64")}
    assert [(t.grouped2, t.banded1, t.banded2, t.grouped1) for t in extra] == W.orders_for(512)
    grows = [{"gemm": 1, "tile": "64x128x64", "correct": True}, {"gemm": 2, "tile": "128x128x64", "correct": True}]
    assert W.per_gemm_tiles(grows) == ("64x128x64", "128x128x64")
    assert W.per_gemm_tiles([dict(grows[0]), dict(grows[1], correct=False)]) == ("64x128x64", None)


def test_a_tile_config_that_does_not_fit_is_an_error(fake_sm90):
    with pytest.raises(CusyncError, match="128x192x64.*does not fit"):
        MLPSm90("llama-ep", 64, "128x192x64")
    with pytest.raises(CusyncError, match="llama"):
        MLPSm90("llama", 64)


def _rows(model, M, tile, times, correct=None, kernel="sm90", tiles=None):
    names = [c.name for c in W.configs_for()]
    return [{"model": model, "M": M, "config": n, "kernel": kernel, "time_us": t, "correct": (correct or {}).get(n, True),
             "rel_err": 1e-3, "tiles": tile, "splits": "1/1",
             "tile_cfg": (tiles or W.Sm90Tiles(tile)).as_dict()} for n, t in zip(names, times)]


def test_choose_is_never_slower_than_the_fastest_stream_order():
    rows = _rows("gpt3", 512, "128x128x64", [100, 90, 95, 92, 93, 80]) + _rows("gpt3", 512, "128x192x64",
                                                                              [98, 85, 99, 99, 99, 70],
                                                                              {"RowSync+Chain": False})
    W.rebase(rows)
    c = W.choose("gpt3", 512, rows)
    assert (c["config"], c["tiles"], c["time_us"]) == ("RowSync+Chain", "128x128x64", 80)   # the faster one is wrong
    assert (c["fastest_stream_order"], c["fastest_stream_order_us"]) == ("PDL", 85)
    assert c["streamsync_us"] == 98 and c["speedup_vs_streamsync"] == round(98 / 80, 4) and c["kernel"] == "sm90"
    assert c["speedup_same_tiles"] == round(100 / 80, 4)
    # nothing beats PDL alone: it is chosen
    rows = _rows("gpt3", 1, "64x128x64", [30, 20, 25, 21, 26, 22])
    assert W.choose("gpt3", 1, rows)["config"] == "PDL"
    with pytest.raises(CusyncError, match="no configuration"):
        W.choose("gpt3", 1, _rows("gpt3", 1, "64x128x64", [1] * 6, {n: False for n in ("StreamSync", "PDL",
              "TileSync+PDL", "TileSync+Chain", "RowSync+PDL", "RowSync+Chain")}))


def test_a_choice_slower_than_the_stream_order_when_re_measured_falls_back_to_it():
    stream_tiles = W.Sm90Tiles("128x128x64", *W.orders_for(200)[1])
    choice = {"model": "gpt3", "M": 200, "config": "RowSync+Chain/split-K", "tiles": "64x128x64",
              "tile_cfg": W.Sm90Tiles("64x128x64").as_dict(), "time_us": 100.0, "streamsync_us": 110.0,
              "fastest_stream_order": "PDL", "fastest_stream_order_us": 104.0,
              "fastest_stream_order_tile_cfg": stream_tiles.as_dict(), "speedup_vs_stream_order": 1.04}
    slower = W.settle(choice, {"ours_us": 130.0, "stream_us": 120.0, "vendor_us": 118.0, "ours_chain_us": 125.0,
                               "stream_chain_us": 115.0})
    assert (slower["config"], slower["tiles"], slower["fallback"]) == ("PDL", stream_tiles.label,
                                                                       "RowSync+Chain/split-K")
    assert slower["confirm"]["ours_us"] == 120.0 and slower["speedup_vs_stream_order"] == 1.0
    assert slower["confirm"]["ours_chain_us"] == 115.0   # back to back too: the stream order's
    assert slower["time_us"] == 104.0 and slower["speedup_vs_streamsync"] == round(110 / 104, 4)
    kept = W.settle(choice, {"ours_us": 115.0, "stream_us": 120.0, "vendor_us": 118.0})
    assert kept["config"] == "RowSync+Chain/split-K" and "fallback" not in kept and kept["confirm"]["ours_us"] == 115.0


def test_tune_from_a_cache_writes_report_and_dispatch(tmp_path, capsys):
    from cusyncgen.commands import tune
    fast = {(1, "128x192x64"): [11, 10, 10, 4, 10, 10], (512, "128x256x64 B1 G2"): [11, 10, 10, 3, 10, 10]}
    # the GeMMs alone: the same tile at M = 1, a pair of their own at M = 512 (measured with it)
    alone = {1: ("128x192x64", "128x192x64"), 512: ("256x128x64", "128x256x64")}
    cache = {"NVIDIA H100 80GB HBM3": {
        f"gpt3|{M}|{t.label}|lib-abc": {"rows": _rows("gpt3", M, t.label, fast.get((M, t.label), [20, 19, 18, 17, 16, 15]),
                                                     tiles=t), "tiles": t.label}
        for M in (1, 512) for t in W.candidates("gpt3", M, per_gemm=alone[M])}}
    for M in (1, 512):
        cache["NVIDIA H100 80GB HBM3"][f"gpt3|{M}|gemm|lib-abc"] = {
            "gemm": [{"gemm": g + 1, "tile": alone[M][g], "correct": True} for g in range(2)]}
    # the choices re-measured against the fastest stream order and cuBLAS + graph (confirm)
    confirmed = {1: ("TileSync+Chain", "128x192x64", 50.0, 55.0, 60.0),
                 512: ("TileSync+Chain", "128x256x64 B1 G2", 200.0, 210.0, 190.0)}
    for M, (cfg, tl, ours, strm, vend) in confirmed.items():
        cache["NVIDIA H100 80GB HBM3"][f"gpt3|{M}|confirm:{cfg}:{tl}|lib-abc"] = {"confirm": {
            "ours_us": ours, "stream_us": strm, "vendor_us": vend, "rounds": 5, "correct": True, "rel_err": 1e-4}}
    # M = 1 re-measured again with every vendor form (its own key, preferred); M = 512 has only the
    # re-measurement from before the forms, which a report from the cache still reads (unnamed)
    cache["NVIDIA H100 80GB HBM3"]["gpt3|1|confirm:TileSync+Chain:128x192x64:vendor-forms|lib-abc"] = {"confirm": {
        "ours_us": 50.0, "stream_us": 55.0, "vendor_us": 58.0, "rounds": 6, "correct": True, "rel_err": 1e-4,
        "vendor_form": "cublaslt-gelu", "vendor_forms": {"cublaslt-gelu": 58.0, "torch-unfused": 60.0}}}
    # M = 1: no 256-row tile and no TMA-store epilogue; M = 512: no 64-row tile, every tile config (the
    # five with the register epilogue, the four "tma") with the first GeMM banded and the second
    # grouped or banded with the first's bands, and the GeMMs' own pair in both orders
    assert len(cache["NVIDIA H100 80GB HBM3"]) == 6 + 3 * (5 + 4) + 3 + 2 + 2 + 1
    assert sum("256x128x64+128x256x64" in k for k in cache["NVIDIA H100 80GB HBM3"]) == 3
    labels = [k.split("|")[2] for k in cache["NVIDIA H100 80GB HBM3"] if k.startswith("gpt3|512|")
              and "confirm:" not in k]
    assert sum(x.endswith(" B1 G2") for x in labels) == 10 and sum(x.endswith(" B1 B2") for x in labels) == 10
    assert sum(x.endswith(" G1 G2") for x in labels) == 10
    path = tmp_path / "tune-cache-h100-sm90.json"
    path.write_text(json.dumps(cache))
    assert tune.main(["mlp", "--from-cache", str(path), "--models", "gpt3", "--M", "1,512", "-o", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "tune-mlp-nvidia-h100-80gb-hbm3-sm90.json").read_text())
    assert res["kernel"] == "sm90" and [(c["M"], c["config"], c["tiles"]) for c in res["choices"]] == [
        (1, "TileSync+Chain", "128x192x64"), (512, "TileSync+Chain", "128x256x64 B1 G2")]
    header = (tmp_path / "tune-mlp-nvidia-h100-80gb-hbm3-sm90.h").read_text()
    assert '{1, "TileSync+Chain", 128, 192, 128, 192, 2.75, ""}' in header
    table = tune.load_dispatch(tmp_path / "tune-mlp-nvidia-h100-80gb-hbm3-sm90.json")
    assert tune.select(table, "gpt3", 300) == ("TileSync+Chain", W.Sm90Tiles("128x256x64", True, True))
    assert tune.select(table, "gpt3", 1) == ("TileSync+Chain", W.Sm90Tiles("128x192x64"))
    md = (tmp_path / "tune-mlp-nvidia-h100-80gb-hbm3-sm90.md").read_text()
    assert "## gpt3" in md and "Re-measured on fresh inputs" in md
    assert "| 1 | 50.0 | 55.0 | 58.0 | 1.100x | 1.160x | yes | cublaslt-gelu |" in md
    assert "| 512 | 200.0 | 210.0 | 190.0 | 1.050x | 0.950x | yes | unnamed |" in md
    assert ("Geometric mean over M >= 128 against cuBLAS + graph: 0.950x; faster at 1 of 2 sizes; cuBLAS's fastest "
            "form: cublaslt-gelu 1, unnamed 1.") in md
    assert res["choices"][0]["confirm"]["vendor_forms"] == {"cublaslt-gelu": 58.0, "torch-unfused": 60.0}
    assert [c["confirm"]["ours_us"] for c in res["choices"]] == [50.0, 200.0]
    # the decode kernel measured at M = 1 (its rows named config + "/decode", tiles "decode", keyed by
    # its cubin): its PDL is the fastest there, and the dispatch entry names no GeMM tiles
    dec = [{"model": "gpt3", "M": 1, "config": c + "/decode", "kernel": "sm90", "time_us": t, "correct": True,
            "rel_err": 1e-3, "tiles": "decode", "splits": "1/1", "tile_cfg": {"kernel": "decode"}}
           for c, t in (("StreamSync", 3.5), ("PDL", 3.0), ("TileSync+Chain", 3.2), ("RowSync+Chain", 3.6))]
    cache["NVIDIA H100 80GB HBM3"]["gpt3|1|decode|decode_mlp-abc"] = {"rows": dec, "tiles": "decode"}
    cache["NVIDIA H100 80GB HBM3"]["gpt3|1|confirm:PDL/decode:decode:vendor-forms|lib-abc"] = {"confirm": {
        "ours_us": 3.0, "stream_us": 3.0, "vendor_us": 9.0, "rounds": 6, "correct": True, "rel_err": 1e-4,
        "vendor_form": "cublaslt-gelu", "vendor_forms": {"cublaslt-gelu": 9.0}}}
    path.write_text(json.dumps(cache))
    out = tmp_path / "with-decode"
    assert tune.main(["mlp", "--from-cache", str(path), "--models", "gpt3", "--M", "1,512", "-o", str(out)]) == 0
    res = json.loads((out / "tune-mlp-nvidia-h100-80gb-hbm3-sm90.json").read_text())
    first = res["choices"][0]
    assert (first["config"], first["tiles"], first["fastest_stream_order"]) == ("PDL/decode", "decode", "PDL/decode")
    assert first["streamsync_us"] == 3.5 and first["confirm"]["ours_us"] == 3.0
    assert '{1, "PDL/decode", 0, 0, 0, 0, ' in (out / "tune-mlp-nvidia-h100-80gb-hbm3-sm90.h").read_text()
    # the swapped GeMM at M = 1 (rows named config + "/swap", tiles "swap <config>", keyed by the
    # library): its PDL faster still; the dispatch entry names its tiles as tokens x weight rows
    tcfg = {"kernel": "swap", "config": "16x64x128sw1", "g1": {"BM": 16, "BN": 64}, "g2": {"BM": 16, "BN": 64}}
    sw = [{"model": "gpt3", "M": 1, "config": c + "/swap", "kernel": "sm90", "time_us": t, "correct": True,
           "rel_err": 1e-3, "tiles": "swap 16x64x128sw1", "splits": "1/1", "tile_cfg": tcfg}
          for c, t in (("StreamSync", 2.9), ("PDL", 2.5))]
    cache["NVIDIA H100 80GB HBM3"]["gpt3|1|swap 16x64x128sw1|lib-abc"] = {"rows": sw, "tiles": "swap 16x64x128sw1"}
    cache["NVIDIA H100 80GB HBM3"]["gpt3|1|confirm:PDL/swap:swap 16x64x128sw1:vendor-forms:chain|lib-abc"] = {
        "confirm": {"ours_us": 2.6, "stream_us": 2.6, "vendor_us": 9.0, "rounds": 6, "correct": True, "rel_err": 1e-4,
                    "vendor_form": "cublaslt-gelu", "vendor_forms": {"cublaslt-gelu": 9.0}, "floor_us": 2.0, "sets": 3,
                    "ours_chain_us": 2.2, "stream_chain_us": 2.2, "vendor_chain_us": 8.0,
                    "vendor_chain_form": "cublaslt-gelu", "chain": 10}}
    path.write_text(json.dumps(cache))
    out = tmp_path / "with-swap"
    assert tune.main(["mlp", "--from-cache", str(path), "--models", "gpt3", "--M", "1,512", "-o", str(out)]) == 0
    res = json.loads((out / "tune-mlp-nvidia-h100-80gb-hbm3-sm90.json").read_text())
    first = res["choices"][0]
    assert (first["config"], first["tiles"], first["fastest_stream_order"]) == (
        "PDL/swap", "swap 16x64x128sw1", "PDL/swap")
    assert first["streamsync_us"] == 2.9 and first["confirm"]["vendor_us"] == 9.0
    md = (out / "tune-mlp-nvidia-h100-80gb-hbm3-sm90.md").read_text()   # the floor where the run measured one
    assert "Re-measured on 1/3 sets of fresh inputs replayed in turn" in md   # the M = 512 entry predates the sets
    assert "| 1 | 2.6 | 2.6 | 9.0 | 1.000x | 3.462x | yes | cublaslt-gelu | 2.0 | 1.300x |" in md
    assert "| 512 | 200.0 | 210.0 | 190.0 | 1.050x | 0.950x | yes | unnamed | - | - |" in md
    # back to back (10 MLPs a graph), where the re-measurement timed it: M = 1 only
    assert "The same, back to back: 10 MLPs in one CUDA graph" in md
    assert "| 1 | 2.2 | 8.0 | 3.636x | cublaslt-gelu | 2.0 | 1.100x |" in md and "| 512 | 200.0 | 190.0 |" not in md
    assert '{1, "PDL/swap", 16, 64, 16, 64, ' in (out / "tune-mlp-nvidia-h100-80gb-hbm3-sm90.h").read_text()
    table = tune.load_dispatch(out / "tune-mlp-nvidia-h100-80gb-hbm3-sm90.json")
    assert tune.select(table, "gpt3", 1) == ("PDL/swap", tcfg)
    # llama (sm80 only) asked of the sm90 cache: a usage error naming the other family
    with pytest.raises(SystemExit):
        tune.main(["mlp", "--from-cache", str(path), "--models", "llama", "-o", str(tmp_path)])
    assert "--kernel sm80" in capsys.readouterr().err


def test_bench_picks_the_sm90_family_on_an_sm90_device(fake_gpu, monkeypatch, tmp_path, capsys):  # noqa: F811
    import cusyncgen.cuda as cuda
    from cusyncgen.commands import bench
    monkeypatch.setattr(cuda, "available", lambda: (True, ""))
    asked = []

    def fake_bench(models=None, sizes=None, iters=30, progress=True):
        asked.append((models, sizes))
        rows = _rows("gpt3", 64, "64x128x64", [10, 9, 8, 7, 6, 5]) + _rows("gpt3", 64, "128x128x64", [9, 9, 9, 9, 9, 4])
        W.rebase(rows)
        rows += [{"model": "gpt3", "M": 64, "config": c, "time_us": t, "correct": True, "rel_err": 0.0, "kernel": "sm90",
                  "speedup_vs_streamsync": round(9 / t, 4)} for c, t in (("cuBLAS", 8), ("cuBLAS+graph", 6), ("floor", 2))]
        gemm = [{"model": "gpt3", "M": 64, "gemm": 1, "kernel": "sm90", "config": "64x128x64", "ours_us": 5.0,
                 "cublas_us": 4.0, "ours_tflops": 100.0, "cublas_tflops": 125.0}]
        return {"device": "Fake GPU", "workload": "mlp", "kernel": "sm90", "vendor": "cuBLAS", "rows": rows, "gemm": gemm}
    monkeypatch.setattr(MLPSm90, "bench", classmethod(lambda cls, **kw: fake_bench(**kw)))
    monkeypatch.setattr(MLP, "bench", classmethod(lambda cls, **kw: pytest.fail("the sm80 MLP ran on an sm_90 device")))
    assert bench.main(["mlp", "--models", "gpt3", "--M", "64", "-o", str(tmp_path)]) == 0
    assert asked == [("gpt3", [64])]
    res = json.loads((tmp_path / "mlp-fake-gpu-sm90.json").read_text())
    assert all(r["kernel"] == "sm90" for r in res["rows"]) and res["gemm"][0]["kernel"] == "sm90"
    md = (tmp_path / "mlp-fake-gpu-sm90.md").read_text()
    # the fastest row per configuration over the tile configs: RowSync+Chain at 4 us on 128x128x64
    assert "(sm90 kernels)" in md and "| 64 | 9.0 |" in md and "| RowSync+Chain | 4.0 |" in md
    assert "| gpt3 | 64 | 1 | 64x128x64 | 5.0 | 4.0 |" in md
    # --kernel sm80 keeps the Ampere path
    monkeypatch.setattr(MLP, "bench", classmethod(lambda cls, **kw: (_ for _ in ()).throw(CusyncError("sm80 ran", None))))
    assert bench.main(["mlp", "--kernel", "sm80", "-o", str(tmp_path)]) == 1
    assert "sm80 ran" in capsys.readouterr().err


def test_bench_of_llama_on_an_sm90_device_says_what_to_do(fake_gpu, monkeypatch, tmp_path, capsys):  # noqa: F811
    import cusyncgen.cuda as cuda
    from cusyncgen.commands import bench
    monkeypatch.setattr(cuda, "available", lambda: (True, ""))
    assert bench.main(["mlp", "--models", "llama", "-o", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "llama" in err and "use llama-ep" in err and "--kernel sm80" in err and "Traceback" not in err
    assert not list(tmp_path.iterdir())


def test_the_overhead_benchmark_has_an_sm90_family_on_one_producer_wave():
    from cusyncgen.workloads import OverheadSm90, default_kernel
    from cusyncgen.workloads import overhead_sm90 as O
    assert FAMILIES["overhead"]["sm90"] is OverheadSm90 and OverheadSm90.sources() == []
    assert default_kernel("overhead", "sm_90a") == "sm90" and default_kernel("overhead", "sm_80") == "sm80"
    m = W.model_of(O.WAVE)
    bm, bn, _ = sm90.tile_dims(O.TILE)
    M = bm * 66
    (N1, K1), (N2, K2) = W.gemm_shapes(m)
    assert (M // bm) * (N1 // bn) == 132 and K1 // 64 == 8 and K2 // 64 == 4   # one producer wave, light tiles
    pols, o1, o2 = W.compiled_mlp(O.WAVE, M, O.TILE)
    assert o1.num_tiles == 132 and o2.num_tiles == 264 and {"TileSync", "RowSync"} <= set(pols)
    assert O.MODEL not in W.MODELS   # not an MLP workload model: no descriptors beside the library
    with pytest.raises(CusyncError, match="no model 'bert'"):
        W.model_of("bert")


def test_the_swapped_gemm_points_and_their_names():
    from cusyncgen.workloads import mlp_swap
    # the K splits over a cluster are the attention's (fewer weight tiles than SMs), not the MLP's candidates
    assert sm90.swap_configs_for(1) == ["16x64x128sw1", "16x64x64sw1s10", "32x64x64sw1", "16x64x64sw1s10k2",
                                        "16x64x64sw1s10k3"]
    assert mlp_swap.tile_configs(1) == ["16x64x128sw1", "16x64x64sw1s10", "32x64x64sw1"]
    assert mlp_swap.tile_configs(17) == ["32x64x64sw1", "64x64x64sw1", "64x64x128sw1", "64x96x64xa"]
    assert mlp_swap.tile_configs(64) == ["64x64x64sw1", "64x64x128sw1", "64x96x64xa"]
    # the wide form's 96-row groups divide GPT-3's weights (6144 and 12288 rows), not LLaMA-ep's (5504, 8192)
    assert len(mlp_swap.tile_pairs(64)) == 9 and len(mlp_swap.tile_pairs(64, model="gpt3")) == 9
    assert mlp_swap.tile_pairs(64, model="llama-ep") == [(a, b) for a in mlp_swap.tile_configs(64)[:2]
                                                         for b in mlp_swap.tile_configs(64)[:2]]
    split = mlp_swap.MLPSwap("llama-ep", 64, "64x64x64sw1s6k2")   # runs where it is named: no one-launch chain
    assert [c.name for c in split.configs()] == ["StreamSync/swap", "PDL/swap"]
    wide = mlp_swap.MLPSwap("gpt3", 64, "64x96x64xa", "64x64x128sw1")
    assert [c.name for c in wide.configs()] == ["StreamSync/swap", "PDL/swap"]   # no one-launch chain
    assert [c.name for c in mlp_swap.MLPSwap("gpt3", 64, "64x96x64xa").configs()] == ["StreamSync/swap", "PDL/swap"]
    assert wide.tile_cfg["g1"] == {"BM": 64, "BN": 96}
    with pytest.raises(CusyncError, match=r"llama-ep: the first GeMM's weight \(5504 x 8192\) does not split into "
                                          "64x96x64xa's packed groups of 96 rows"):
        mlp_swap.MLPSwap("llama-ep", 64, "64x96x64xa", "64x64x64sw1")
    assert mlp_swap.fits("llama-ep", 64) and not mlp_swap.fits("llama-ep", 65) and not mlp_swap.fits("llama", 1)
    mlp = mlp_swap.MLPSwap("llama-ep", 20)
    assert (mlp.config, mlp.tiles.label) == ("32x64x64sw1", "swap 32x64x64sw1")
    assert [c.name for c in mlp.configs()] == ["StreamSync/swap", "PDL/swap", "RowSync+Chain/swap"]
    assert mlp.tile_cfg == {"kernel": "swap", "config": "32x64x64sw1", "g1": {"BM": 32, "BN": 64},
                            "g2": {"BM": 32, "BN": 64}}
    assert W._instance("llama-ep", 20, mlp.tile_cfg).config == "32x64x64sw1" and W._config("PDL/swap") == "PDL/swap"
    for bad, what in ((("gpt3", 65), "M = 1 to 64"), (("llama", 1), "no model 'llama'")):
        with pytest.raises(CusyncError, match=what):
            mlp_swap.MLPSwap(*bad)
    with pytest.raises(CusyncError, match="no configuration 'TileSync\\+Chain'"):
        mlp.run(None, "TileSync+Chain/swap", None, None, None, None, None)
    with pytest.raises(sm90.Sm90Error, match="no swapped GeMM '16x64x64sw1'"):
        mlp_swap.MLPSwap("gpt3", 1, "16x64x64sw1").tile_cfg
    # each GeMM on its own tile: every pair of the point's configs, named and rebuilt from the rows' tile_cfg
    assert len(mlp_swap.tile_pairs(1)) == 9 and ("16x64x64sw1s10", "16x64x128sw1") in mlp_swap.tile_pairs(1)
    two = mlp_swap.MLPSwap("llama-ep", 1, "16x64x64sw1s10", "16x64x128sw1")
    assert two.tiles.label == "swap 16x64x64sw1s10+16x64x128sw1"
    assert two.tile_cfg == {"kernel": "swap", "config": "16x64x64sw1s10", "config2": "16x64x128sw1",
                            "g1": {"BM": 16, "BN": 64}, "g2": {"BM": 16, "BN": 64}}
    again = W._instance("llama-ep", 1, two.tile_cfg)
    assert (again.config, again.config2, again.tiles.label) == ("16x64x64sw1s10", "16x64x128sw1", two.tiles.label)
    assert mlp_swap.MLPSwap("gpt3", 1, "16x64x128sw1", "16x64x128sw1").tiles.label == "swap 16x64x128sw1"
    # the one-launch chain runs both GeMMs on one config: not offered (and refused) on a pair
    assert [c.name for c in two.configs()] == ["StreamSync/swap", "PDL/swap"]
    with pytest.raises(CusyncError, match="RowSync\\+Chain/swap runs both GeMMs on one tile config"):
        two.run(None, "RowSync+Chain/swap", None, None, None, None, None)


def test_the_swiglu_epilogue_weight_pairs_each_gate_row_with_its_up_row():
    import numpy as np

    from cusyncgen.workloads import mlp
    from cusyncgen.workloads import mlp_swap
    F, K = 192, 8
    rng = np.random.default_rng(0)
    gate, up = rng.standard_normal((F, K)), rng.standard_normal((F, K))
    w = sm90.swiglu_rows(gate, up)
    # row 16b + i (i < 8): gate row 8b + i; row 16b + 8 + i: up row 8b + i -- what swap.cu's SwigluRows reads
    for r in range(2 * F):
        b, i = divmod(r, 16)
        assert (w[r] == (gate if i < 8 else up)[8 * b + i % 8]).all(), r
    blk = mlp.LLAMA_EP_BLOCK   # the sm90 kernels' first weight: [W1|V] interleaved by 64 rows
    w1 = np.stack([gate.reshape(F // blk, blk, K), up.reshape(F // blk, blk, K)], axis=1).reshape(2 * F, K)
    assert (mlp_swap.swiglu_rows_weight(w1, F) == w).all()
    with pytest.raises(sm90.Sm90Error, match="rows a multiple of 8"):
        sm90.swiglu_rows(gate[:12], up[:12])
    with pytest.raises(sm90.Sm90Error, match="gate and up of one shape"):
        sm90.swiglu_rows(gate, up[:8])


def test_the_swapped_gemm_packs_its_weight_by_groups_of_rows():
    import numpy as np
    w = np.arange(256 * 24, dtype=np.float16).reshape(256, 24)
    p = sm90.swap_pack(w, 64)
    assert p.shape == (4, 24, 64) and p.flags.c_contiguous
    g, k, r = np.meshgrid(np.arange(4), np.arange(24), np.arange(64), indexing="ij")
    assert (p == w[64 * g + r, k]).all()   # each group's K x 64 block contiguous, its rows fastest
    assert sm90.swap_tile("16x64x128sw1").group == 64
    with pytest.raises(sm90.Sm90Error, match="groups of 128 rows: 192 rows"):
        sm90.swap_pack(w[:192], 128)
