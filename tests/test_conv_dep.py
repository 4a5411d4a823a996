"""The Conv2D .dep files cover every producer tile the implicit-GeMM kernel reads (the 3x3 halo
included), which the paper's Tile(x/(R*S), y) does not; their policies; the generated sources; and
(marked nvcc) that a ResNet-38 and a VGG-19 module compile for sm_80 and sm_90a."""
import shutil

import pytest

import cusyncgen
from cusyncgen.cuda import build
from cusyncgen.workloads import conv2d as mc


def kernel_reads(layer, batch, tiles, consumer):
    """The producer tiles (channel tile, pixel tile) that the kernel of runtime_cuda/kernels/conv2d.cuh
    reads for one consumer tile: a Python model of its im2col gather, pixel by pixel."""
    P = Q = layer.P
    M = batch * P * Q
    _, y = consumer
    out = set()
    for m in range(y * tiles.BM, min((y + 1) * tiles.BM, M)):
        b, p, q = m // (P * Q), (m // Q) % P, m % Q
        for dr in (-1, 0, 1):
            for ds in (-1, 0, 1):
                h, w = p + dr, q + ds
                if 0 <= h < P and 0 <= w < Q:
                    src = (b * P + h) * Q + w
                    for c in range(0, layer.C, tiles.BN):
                        out.add((c // tiles.BN, src // tiles.BM))
    return out


def kernel_waits(layer, batch, tiles, consumer):
    """The tiles the kernel's wait_a() waits on (per k-block, clamped pixel ranges), in Python."""
    P = Q = layer.P
    M = batch * P * Q
    _, y = consumer
    m0 = y * tiles.BM
    rows = min(tiles.BM, M - m0)
    out = set()
    for rs in range(9):
        shift = (rs // 3 - 1) * Q + (rs % 3 - 1)
        lo, hi = max(m0 + shift, 0), min(m0 + rows - 1 + shift, M - 1)
        for c in range(0, layer.C, tiles.BK):
            for py in range(lo // tiles.BM, hi // tiles.BM + 1):
                out.add((c // tiles.BN, py))
    return out


POINTS = [("resnet38", "L1", 1), ("resnet38", "L2", 3), ("resnet38", "L3", 8), ("resnet38", "L4", 1),
          ("resnet38", "L4", 5), ("vgg19", "L3", 2), ("vgg19", "L4", 32)]


@pytest.mark.parametrize("model,layer,batch", POINTS)
def test_dep_covers_every_tile_the_kernel_reads_and_waits_on(model, layer, batch):
    m, L = mc.MODELS[model], mc.LAYERS[layer]
    tiles = mc.default_tiles(L)
    compiled, _ = mc.compile_dep(m, L, batch, tiles)
    X, Y, _ = mc.grid(L, batch, tiles)
    prog = compiled.program
    for dep in prog.deps:
        for y in range(Y):
            for x in (0, X - 1):
                declared = {(t[0], t[1]) for g, t in prog.producer_tiles(dep.name, (x, y, 0))}
                reads = kernel_reads(L, batch, tiles, (x, y))
                waits = kernel_waits(L, batch, tiles, (x, y))
                assert reads <= waits, (dep.name, x, y, sorted(reads - waits))
                assert waits <= declared, (dep.name, x, y, sorted(waits - declared))


def test_the_papers_dependency_misses_the_halo():
    """Dep({g2, Tile(x, y)}, {g1, Tile(x/(R*S), y)}) (even widened to the whole row y) lets a tile
    start before row tiles y-1 and y+1 that its 3x3 window reads are written: a race."""
    L = mc.LAYERS["L3"]
    tiles = mc.default_tiles(L)
    X, Y, _ = mc.grid(L, 8, tiles)
    for y in range(Y):
        reads = kernel_reads(L, 8, tiles, (0, y))
        same_row = {(x, y) for x in range(X)}
        halo = reads - same_row
        assert halo, y
        assert {py for _, py in halo} <= {y - 1, y + 1}


@pytest.mark.parametrize("model", ["resnet38", "vgg19"])
def test_policies_are_conv2dtilesync_and_rowsync(model):
    m = mc.MODELS[model]
    L = mc.LAYERS["L3"]
    compiled, _ = mc.compile_dep(m, L, 8, mc.default_tiles(L))
    X, Y, _ = mc.grid(L, 8, mc.default_tiles(L))
    got = {(p.consumer, p.name): p.num_sems for p in compiled.policies}
    consumers = [f"g{i + 2}" for i in range(m.convs - 1)]
    assert got == {**{(c, "Conv2DTileSync"): X * Y for c in consumers}, **{(c, "RowSync"): Y for c in consumers}}


def test_one_row_tile_folds_the_clamps_and_keeps_one_policy_label():
    L = mc.LAYERS["L4"]  # 7x7: 49 pixels, one 64-pixel row tile at batch 1
    src, pols = mc.module_source(mc.MODELS["resnet38"], L, 1, mc.default_tiles(L))
    assert [p[0] for p in pols] == ["Conv2DTileSync", "RowSync"]
    assert "conv1_TileSync" in src.text and "conv2_RowSync" in src.text


def test_halo_needs_tilem_at_least_q_plus_one():
    with pytest.raises(ValueError, match="Q \\+ 1 = 57"):
        mc.compile_dep(mc.MODELS["resnet38"], mc.LAYERS["L1"], 1, mc.Tiles(BM=32, BN=64, BK=32, warps_m=2, warps_n=2))


@pytest.mark.parametrize("model", ["resnet38", "vgg19"])
def test_module_source_has_one_kernel_per_position_and_policy(model):
    m = mc.MODELS[model]
    src, pols = mc.module_source(m, mc.LAYERS["L2"], 4, mc.default_tiles(mc.LAYERS["L2"]), debug=True)
    assert "CUSYNC_DEBUG" in src.defines
    # plain + one per position and policy + a sync-warp variant of every waiting position
    assert src.text.count("CUSYNC_CONV2D_KERNEL(") == 1 + (2 * m.convs - 1) * len(pols)
    for _, name, _ in pols:
        assert f"CUSYNC_CONV2D_KERNEL(conv1_{name}_S," not in src.text
        assert all(f"CUSYNC_CONV2D_KERNEL(conv{i}_{name}_S, CfgS," in src.text for i in range(2, m.convs + 1))
    for label, name, sems in pols:
        assert sems[-1] == 0 and all(s > 0 for s in sems[:-1])
        # a middle Conv2D posts its own policy and waits on its producer's
        if m.convs == 4:
            assert f"CuStage<conv_vgg19::g2_order, conv_vgg19::dep23_g2_{name}, conv_vgg19::dep12_g1_{name}>" in src.text
    names = {s.name for s in mc.ConvChain.sources()}
    assert len(names) == sum(len(mm.layers) for mm in mc.MODELS.values()) * len(mc.BATCHES) + len(mc.TEST_POINTS)


def test_examples_compile_with_their_defaults():
    for dep in ("conv_resnet38.dep", "conv_vgg19.dep"):
        compiled = cusyncgen.compile(mc.examples_dir() / dep)
        assert {p.name for p in compiled.policies} == {"Conv2DTileSync", "RowSync"}


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None or build.cutlass_include_dir() is None,
                    reason="needs nvcc and the CUTLASS headers (pip install nvidia-cutlass)")
def test_conv_modules_compile_for_sm80_and_sm90a(tmp_path, monkeypatch):
    monkeypatch.setenv("CUSYNCGEN_CACHE", str(tmp_path))
    L = mc.LAYERS["L3"]
    srcs = [mc.module_source(mc.MODELS["vgg19"], L, 2, mc.default_tiles(L), debug=True)[0]]
    paths = build.build_many(srcs, arch="sm_80", jobs=1) + build.build_many(srcs, arch="sm_90a", jobs=1)
    assert all(p.is_file() and p.stat().st_size > 0 for p in paths)


def test_tile_labels_parse_back_and_bad_ones_are_refused():
    t = mc.ALT_TILES[0]
    assert mc.Tiles.parse(t.label) == t and mc.Tiles.parse(mc.Tiles().label) == mc.Tiles()
    with pytest.raises(ValueError, match="not a Conv2D tile label"):
        mc.Tiles.parse("128x64")


def test_split_k_fills_the_sms_only_where_the_tiles_do_not():
    L4, L1 = mc.LAYERS["L4"], mc.LAYERS["L1"]
    t = mc.default_tiles(L4)
    # VGG-19/ResNet-38 L4 at batch 4: 8 x 4 tiles of 72 k-blocks on 132 SMs -> 8 blocks per tile
    assert mc.grid(L4, 4, t) == (8, 4, 1)
    assert mc.splits(L4, 4, t, 132) == 8 and mc.grid(L4, 4, t, 8) == (8, 4, 8)
    # ResNet-38 L4 at batch 1: one pixel tile; capped at 4 k-blocks per block (72 / 4 = 18)
    assert mc.splits(L4, 1, t, 132) == 18
    # L1 at batch 1: 49 tiles of 9 k-blocks -> at most 2 splits; past two tiles per SM none
    assert mc.splits(L1, 1, t, 132) == 2 and mc.splits(L1, 4, t, 132) == 1
    for m, layer, b in mc.bench_points():
        L = mc.LAYERS[layer]
        gx, gy, _ = mc.grid(L, b, t)
        n = mc.splits(L, b, t, 132)
        assert n >= 1 and (9 * L.C // t.BK) // n >= mc.SPLIT_MIN_KBLOCKS
        assert n == 1 or gx * gy < mc.SPLIT_BLOCKS_PER_SM * 132


def test_split_k_is_compiled_into_the_kernels_without_a_sync_warp():
    src, _ = mc.module_source(mc.MODELS["vgg19"], mc.LAYERS["L4"], 8, mc.default_tiles(mc.LAYERS["L4"]))
    assert "ConvConfig<64, 64, 64, 3, 2, 2, 64, false, true>;" in src.text
    assert "ConvConfig<64, 64, 64, 3, 2, 2, 64, true, false>;" in src.text
