"""Attention without a GPU: the .dep files give every policy the paper names, their wait lists are
exactly (or, for depQK, a stated superset of) what the kernels read, and the CUDA module sources
compile with nvcc (marked nvcc)."""
import shutil
from itertools import product
from pathlib import Path

import pytest

import cusyncgen
from cusyncgen.cuda import build
from cusyncgen.workloads import attention as ma

SHAPES = [ma.Shape("gpt3", 1, 512), ma.Shape("llama", 1, 320), ma.Shape("gpt3", 4, 1, 1024), ma.Shape("llama", 3, 1, 700)]


def _program(shape):
    compiled, _ = ma.compile_dep(shape)
    return compiled


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.name)
def test_generated_policies_cover_every_configuration(shape):
    c = _program(shape)
    names = {(p.dep, p.producer, p.name) for p in c.policies}
    assert {("depQK", "g1", "TileSync"), ("depQK", "g1", "StridedSync"), ("depQK", "g1", "RowSync"),
            ("depPR", "gP", "RowSync"), ("depTR1", "gR", "TileSync"), ("depT2", "gT", "TileSync")} <= names
    assert set(ma.configs(c)) == set(ma.POLICY_CONFIGS)
    grids = {g.name: tuple(g.extent) for g in c.program.grids}
    assert grids == shape.grids()


def _reads(shape, grid, tile):
    """The producer tiles a kernel's tile reads, from the kernels' address arithmetic."""
    NH, tm = shape.NH, shape.tile_m
    x, y, z = tile
    h = z % NH
    g1_rows = -(-shape.M // tm)
    if grid == "gP":
        # Q rows of the query tile y; K rows of keys [x*TILE_K, +TILE_K): new keys only in g1
        keys = {((s - shape.Sp) * shape.B) // tm for s in range(x * ma.TILE_K, (x + 1) * ma.TILE_K)
                if shape.Sp <= s < shape.L}
        q = {(h, (r * shape.B) // tm if shape.prompt else 0) for r in range(y * tm, min(shape.S, (y + 1) * tm))}
        return {("g1",) + t for t in q} | {("g1", NH + h, k) for k in keys}
    if grid == "gR":
        return {("gP", kx, y, z) for kx in range(shape.Npad // ma.TILE_K)}
    if grid == "gT":
        return {("gR", 0, y, z)} | {("g1", 2 * NH + h, r) for r in range(g1_rows)}
    if grid == "g2":
        rows = range(y * tm, min(shape.M, (y + 1) * tm))
        return {("gT", 0, (r % shape.S) // tm, (r // shape.S) * NH + hh) for r in rows for hh in range(NH)}
    raise AssertionError(grid)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.name)
def test_wait_lists_cover_what_the_kernels_read(shape):
    c = _program(shape)
    prog = c.program
    for dep in prog.deps:
        g = shape.grids()[dep.consumer]
        for tile in product(range(g[0]), range(g[1]), range(g[2])):
            declared = {_pad((grid,) + tuple(t)) for grid, t in prog.producer_tiles(dep.name, tile)}
            reads = {_pad(r) for r in _reads(shape, dep.consumer, tile)}
            assert reads <= declared, (dep.name, tile, reads - declared)
            if dep.name != "depQK":  # depQK declares the strided pairs: two tiles more than read
                assert declared == reads, (dep.name, tile, declared - reads)


def _pad(t):
    return tuple(t) + (0,) * (4 - len(t))


@pytest.mark.parametrize("shape", SHAPES[:2], ids=lambda s: s.name)
def test_module_source_instantiates_each_kernel_once(shape):
    src = ma.module_source(shape)
    for k in ("attn_qkv", "attn_pgemm", "attn_out", "attn_out_R", "attn_softmax", "attn_rv",
              "attn_pgemm_S", "attn_out_S", "attn_out_RS"):
        assert src.text.count(f"({k},") == 1
    assert "CUSYNC_DEBUG" in ma.module_source(shape, debug=True).defines
    assert len(ma.Attention.sources()) == len(ma.bench_shapes()) + len(ma.TEST_SHAPES)


def test_dep_files_are_the_examples():
    root = Path(__file__).resolve().parents[1] / "examples"
    for m in ("gpt3", "llama"):
        text = (root / f"attention_{m}.dep").read_text()
        assert "Dep depQK" in text and "Dep depPR" in text and "Dep depTR1" in text and "Dep depT2" in text


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None or build.cutlass_include_dir() is None,
                    reason="needs nvcc and the CUTLASS headers (pip install nvidia-cutlass)")
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_attention_module_compiles(tmp_path, monkeypatch, arch):
    """Every kernel of an attention module (sync-warp variants included) for Hopper and Ampere."""
    monkeypatch.setenv("CUSYNCGEN_CACHE", str(tmp_path))
    shape = ma.Shape("llama", 2, 1, 512) if arch == "sm_90a" else ma.Shape("gpt3", 1, 512, 0)
    paths = build.build_many([ma.module_source(shape, debug=arch == "sm_90a")], arch=arch, jobs=1)
    assert paths[0].stat().st_size > 0


def test_wide_tiles_are_a_prompt_option_with_their_own_module():
    wide = ma.Shape("gpt3", 1, 1024, 0, wide=True)
    assert wide.name.endswith("_wide") and wide.gemm_threads == 256 and wide.tiles_label == "wide"
    assert "GemmConfig<128, 128, 64, 3, 2, 4" in ma.module_source(wide).text
    assert {s.wide for s in ma.bench_shapes(wide=True)} == {True} and all(s.prompt for s in ma.bench_shapes(wide=True))
    assert len(ma.Attention.sources(tune=True)) == len(ma.Attention.sources()) + len(ma.bench_shapes(wide=True))
    with pytest.raises(ValueError, match="prompt"):
        ma.Shape("gpt3", 4, 1, 512, wide=True)


def test_token_generation_splits_the_long_k_loops_and_prompts_do_not():
    """Split-K (kernels/splitk.cuh) only where one block per tile leaves SMs idle: the QKV GeMM
    (K = H), R V (K = S' keys) and the output GeMM (K = D) of token generation, filling 2 (GeMMs)
    or 4 (R V) blocks per SM of a 132-SM GPU, with at least 8 k-tiles (QKV) / 4 k-tiles (output)
    / 256 keys (R V) per block; launch grids grow in z."""
    assert ma.Shape("gpt3", 1, 1024, 0).splits(132) == {"g1": 1, "gT": 1, "g2": 1}
    gen = ma.Shape("gpt3", 1, 1, 1024)
    sp = gen.splits(132)
    # 36 QKV tiles x 7 = 252 <= 264; 1152 keys / 256 -> 5; 96 output tiles x 2 = 192 <= 264
    assert sp == {"g1": 7, "gT": 5, "g2": 2}
    # 24 QKV tiles x 11 = 264; 2176 keys -> 9; 64 output tiles x 4 (16 k-tiles / 4)
    assert ma.Shape("llama", 4, 1, 2048).splits(132) == {"g1": 11, "gT": 9, "g2": 4}
    # a small GPU: no more blocks than it holds (8 SMs: 16 GeMM slots < 36 or 96 tiles; 32 R V slots)
    assert ma.Shape("gpt3", 1, 1, 512).splits(8) == {"g1": 1, "gT": 2, "g2": 1}
    g = gen.grids(sp)
    assert g["g1"] == (36, 1, 7) and g["gT"] == (1, 1, 12 * 5) and g["g2"] == (96, 1, 2)
    assert gen.grids()["gT"] == (1, 1, 12)
