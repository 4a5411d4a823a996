"""The sm90 library (runtime_cuda/sm90/): its policy and order descriptors evaluate like the
compiler's reference model (PolicyIR.sem/value, OrderIR.tile), in the Python mirror and in
the runtime's cusync/desc.h and the sync layer's dependency map compiled on the host; and nvcc builds libcusync_sm90.so for sm_90a (HGMMA in the
SASS, no local memory) when nvcc and the CUTLASS headers are present."""

import importlib.util
import shutil
import subprocess

import pytest

import cusyncgen
from cusyncgen.cuda import sm90
from cusyncgen.workloads import mlp_sm90 as W
from cusyncgen.ir import DimMap, OrderIR, PolicyIR

MLP_CASES = [("gpt3", M, c) for M in (1, 300, 4096) for c in sm90.CONFIGS if W.fits("gpt3", c)] + \
            [("llama-ep", M, c) for M in (1, 300, 4096) for c in sm90.CONFIGS if sm90.tile_dims(c)[1] == 128]


def _extra_policies():
    """Policies with mod and div maps (the MLP examples have only tile and all)."""
    ext = (10, 7, 3)
    out = []
    for dims in [(DimMap("mod", 3), DimMap("div", 2), DimMap("tile")),
                 (DimMap("div", 4), DimMap("all"), DimMap("mod", 2)),
                 (DimMap("tile"), DimMap("mod", 5), DimMap("div", 2))]:
        C = [d.extent(E) for d, E in zip(dims, ext)]
        out.append(PolicyIR("d", "c", "p", "X", ext, dims, C[0] * C[1] * C[2]))
    return out


def _extra_orders():
    return [OrderIR("g", "x", 3, 4, (12, 5, 2)), OrderIR("g", "y", 2, 3, (4, 6, 1)),
            OrderIR("g", "x", 4, 3, (12, 5, 2), groups_outer=True), OrderIR("g", None, 1, 1, (7, 3, 2))]


def _all_tiles(ext):
    return [(x, y, z) for z in range(ext[2]) for y in range(ext[1]) for x in range(ext[0])]


@pytest.mark.parametrize("model,M,config", MLP_CASES)
def test_mlp_descriptors_match_ir(model, M, config):
    pols, o1, o2 = W.compiled_mlp(model, M, config)
    assert set(pols) >= {"TileSync", "RowSync"}
    bm, bn, _ = sm90.tile_dims(config)
    m = W.model_of(model)
    # the orders cover the kernel's tile grid: X = N / BN, Y = ceil(M / BM)
    assert o1.extent == (m.N1 // bn, -(-M // bm), 1)
    assert o2.extent == (m.H // bn, -(-M // bm), 1)
    for o in (o1, o2):
        d = sm90.order_desc(o)
        assert [sm90.desc_tile(d, i) for i in range(o.num_tiles)] == [o.tile(i) for i in range(o.num_tiles)]
    for p in pols.values():
        d = sm90.policy_desc(p)
        for t in _all_tiles(p.producer_extent):
            assert (sm90.desc_sem(d, t), sm90.desc_value(d, t)) == (p.sem(t), p.value(t))


def test_extra_descriptors_match_ir():
    for p in _extra_policies():
        d = sm90.policy_desc(p)
        sems = set()
        for t in _all_tiles(p.producer_extent):
            assert (sm90.desc_sem(d, t), sm90.desc_value(d, t)) == (p.sem(t), p.value(t))
            sems.add(p.sem(t))
        assert sems == set(range(p.num_sems))
    for o in _extra_orders():
        d = sm90.order_desc(o)
        assert [sm90.desc_tile(d, i) for i in range(o.num_tiles)] == [o.tile(i) for i in range(o.num_tiles)]


def test_grouped_order_is_a_permutation_that_walks_column_groups_down_every_row():
    for X, Y, c in [(48, 4, 8), (24, 32, 6), (7, 3, 7), (12, 1, 3)]:
        d = sm90.grouped_order(X, Y, c)
        tiles = [sm90.desc_tile(d, i) for i in range(X * Y)]
        assert sorted(tiles) == sorted((x, y, 0) for y in range(Y) for x in range(X))
        # the first c * Y items cover c columns and every row
        assert {t[0] for t in tiles[: c * Y]} == set(range(0, X, X // c))
        assert {t[1] for t in tiles[: c * Y]} == set(range(Y))
        # and it is OrderIR's groups_outer form, which the device header evaluates
        o = OrderIR("g", "x", X // c, c, (X, Y, 1), groups_outer=True)
        assert tiles == [o.tile(i) for i in range(o.num_tiles)]
    with pytest.raises(cusyncgen.errors.CusyncError, match="divide"):
        sm90.grouped_order(48, 4, 5)


def _banded_reference(X, Y, R):
    """banded_order's walk, written out: band by band, column by column, R rows down a column."""
    out = []
    for y0 in range(0, Y, R):
        for x in range(X):
            out += [(x, y, 0) for y in range(y0, min(Y, y0 + R))]
    return out


def test_banded_order_is_a_permutation_that_completes_rows_band_by_band():
    for X, Y, R in [(48, 16, 8), (48, 16, 5), (43, 4, 4), (32, 1, 1), (7, 9, 2), (5, 3, 3)]:
        d = sm90.banded_order(X, Y, R)
        tiles = [sm90.desc_tile(d, i) for i in range(X * Y)]
        assert tiles == _banded_reference(X, Y, R)
        assert sorted(tiles) == sorted((x, y, 0) for y in range(Y) for x in range(X))
        # after the items of bands 0..b, the rows of those bands are complete
        for b in range(-(-Y // R)):
            done = tiles[: X * min(Y, (b + 1) * R)]
            assert {t[1] for t in done} == set(range(min(Y, (b + 1) * R)))
    for bad in (0, 17):
        with pytest.raises(cusyncgen.errors.CusyncError, match="banded"):
            sm90.banded_order(48, 16, bad)


def test_band_rows_balances_a_and_b_traffic():
    # equal A row and B column blocks, 132 items a wave: about sqrt(132) ~ 11-12 rows a band
    assert sm90.band_rows(48, 32, 1.0, 1.0) in (11, 12)
    # never more rows than the GeMM has
    assert sm90.band_rows(48, 4, 1.0, 1.0) == 4
    assert sm90.band_rows(48, 1, 1.0, 1.0) == 1
    # B much larger: taller bands (fewer B columns per wave)
    assert sm90.band_rows(48, 64, 1.0, 4.0) > sm90.band_rows(48, 64, 1.0, 1.0)


def test_gemm_desc_store_modes():
    assert sm90.gemm_desc(1, 1, 1, 64, 128, 128, "64x128x64").store == sm90.STORE_PAIR
    assert sm90.gemm_desc(1, 1, 1, 64, 128, 128, "64x128x64", store=sm90.STORE_QUAD).store == sm90.STORE_QUAD
    with pytest.raises(cusyncgen.errors.CusyncError, match="store"):
        sm90.gemm_desc(1, 1, 1, 64, 128, 128, "64x128x64", store=7)


def test_grouped_columns_balances_a_and_b_traffic():
    # B column blocks twice as large as A row blocks: about sqrt(132 / 2) ~ 8 columns per group
    assert sm90.grouped_columns(48, 32, 1.0, 2.0) == 8
    # a single row block: one column per group (A's one row block is read whatever the grouping)
    assert sm90.grouped_columns(48, 1, 1.0, 2.0) == 1
    assert 48 % sm90.grouped_columns(48, 5, 3.0, 1.0) == 0


def test_auto_splits_fits_the_probe_and_splits_only_a_tail():
    # the best split counts on an H100 (docs/design.md, 'Hopper: split-K tails'): gpt3 M=1's first GeMM (48 tiles of 192
    # k-tiles) 2 splits, llama-ep's (43 tiles of 128) 3; gpt3's second (96 tiles of 96) none
    assert sm90.auto_splits(48, 192) == sm90.Split(2, 0)
    assert sm90.auto_splits(43, 128) == sm90.Split(3, 0)
    assert sm90.auto_splits(96, 96) == sm90.NO_SPLIT
    assert sm90.auto_splits(48, 8) == sm90.NO_SPLIT             # too few k-tiles to split
    # llama-ep's first GeMM at M = 512 on 128x128 tiles: 172 tiles, one whole wave and 40 more: the
    # first wave unsplit, the 40 tiles split 3 ways (one more round of a third of a tile)
    sp = sm90.auto_splits(172, 128)
    assert sp == sm90.Split(3, 132)
    assert sm90.split_makespan(172, 128, sp) < 0.8 * sm90.split_makespan(172, 128, sm90.NO_SPLIT)
    assert sm90.auto_splits(264, 128) == sm90.NO_SPLIT          # two whole waves
    for tiles in range(1, 400, 7):
        for kt in (16, 43, 96, 192):
            sp = sm90.auto_splits(tiles, kt)
            assert sp == sm90.NO_SPLIT or (kt // sp.S >= 8 and sp.start % 132 == 0 and sp.start < tiles)
            assert sm90.split_makespan(tiles, kt, sp) <= sm90.split_makespan(tiles, kt, sm90.NO_SPLIT)


def test_split_makespan_counts_rounds_of_the_static_schedule():
    # 172 tiles, no split: two rounds of whole tiles (k-tiles + ITEM_COST_K each)
    assert sm90.split_makespan(172, 128, sm90.NO_SPLIT) == 2 * (128 + sm90.ITEM_COST_K)
    # the tail split 3 ways: one round of whole tiles, then 120 items of 43 k-tiles in one round
    assert sm90.split_makespan(172, 128, sm90.Split(3, 132)) == \
        (128 + sm90.ITEM_COST_K) + (43 + sm90.ITEM_COST_K + sm90.SPLIT_COST_K)


def test_gemm_desc_splits():
    with pytest.raises(cusyncgen.errors.CusyncError, match="split"):
        sm90.gemm_desc(1, 1, 1, 64, 128, 128, "64x128x64", splits=3)
    g = sm90.gemm_desc(1, 1, 1, 64, 128, 128, "64x128x64", splits=2)
    assert (g.splits, g.split_from) == (2, 0)
    g = sm90.gemm_desc(1, 1, 1, 300, 1024, 1024, "128x128x64", splits=sm90.Split(4, 20))
    assert (g.splits, g.split_from) == (4, 20)
    with pytest.raises(cusyncgen.errors.CusyncError, match="split"):   # 24 tiles: a split start past them
        sm90.gemm_desc(1, 1, 1, 300, 1024, 1024, "128x128x64", splits=sm90.Split(4, 25))
    assert str(sm90.Split(3, 132)) == "3@132" and str(sm90.Split(2)) == "2" and str(sm90.NO_SPLIT) == "1"


def test_mlp_splits():
    none = (sm90.NO_SPLIT, sm90.NO_SPLIT)
    assert W.mlp_splits("gpt3", 4096, "128x256x64", "auto") == none
    s1, s2 = W.mlp_splits("gpt3", 64, "64x128x64", "auto")
    assert s1.S > 1 and sm90.has_split((s1, s2))
    assert W.mlp_splits("gpt3", 64, "64x128x64", "none") == none and not sm90.has_split(none)
    assert W.mlp_splits("gpt3", 64, "64x128x64", (3, 2)) == (sm90.Split(3), sm90.Split(2))
    assert W.mlp_splits("llama-ep", 512, "128x128x64", "auto")[0] == sm90.Split(3, 132)
    assert W.mlp_splits("gpt3", 64, "64x128x64", ((3, 10), 1)) == (sm90.Split(3, 10), sm90.NO_SPLIT)


ABI_MAIN = r"""
#include <cstddef>
#include <cstdio>
#include "sm90_api.h"
#define F(S, f) std::printf(#S "." #f " %zu\n", offsetof(S, f));
int main() {
  std::printf("CusyncSm90Gemm %zu\nCusyncSm90Policy %zu\nCusyncSm90Order %zu\nCusyncSm90Debug %zu\n",
              sizeof(CusyncSm90Gemm), sizeof(CusyncSm90Policy), sizeof(CusyncSm90Order), sizeof(CusyncSm90Debug));
  %FIELDS%
  return 0;
}
"""


def test_ctypes_structs_match_the_c_header(tmp_path):
    """The ctypes mirrors (sm90.Gemm, Policy, Order, Debug) have the C header's sizes and field
    offsets (g++ on the host: the library is built with the same layout rules)."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    structs = {"CusyncSm90Gemm": sm90.Gemm, "CusyncSm90Policy": sm90.Policy, "CusyncSm90Order": sm90.Order,
               "CusyncSm90Debug": sm90.Debug}
    fields = "\n  ".join(f"F({c}, {f})" for c, py in structs.items() for f, _ in py._fields_)
    src = tmp_path / "abi.cpp"
    src.write_text(ABI_MAIN.replace("%FIELDS%", fields))
    exe = tmp_path / "abi"
    subprocess.run([cxx, "-std=c++17", f"-I{sm90.source_dir()}", f"-I{sm90.source_dir().parent}", str(src), "-o",
                    str(exe)], check=True)
    got = dict(line.rsplit(" ", 1) for line in subprocess.run([str(exe)], capture_output=True, text=True,
                                                               check=True).stdout.split("\n") if line)
    import ctypes
    want = {c: str(ctypes.sizeof(py)) for c, py in structs.items()}
    want.update({f"{c}.{f}": str(getattr(py, f).offset) for c, py in structs.items() for f, _ in py._fields_})
    assert got == want


def test_config_names_and_cluster_grids():
    assert sm90.tile_dims("64x128x64pp") == (64, 128, 64)
    assert sm90.tile_dims("128x256x64c2") == (128, 256, 64)
    assert (sm90.cluster_m("128x256x64c2"), sm90.cluster_m("128x256x64")) == (2, 1)
    # 300 rows = 3 row blocks of 128: two cluster pairs (the second with a phantom row block)
    assert sm90.order_grid("128x256x64c2", 300, 1024) == (4, 2)
    assert sm90.order_grid("128x256x64", 300, 1024) == (4, 3)
    d = sm90.cluster_order(sm90.row_major_order(4, 3), "128x256x64c2")
    assert (d.extent[0], d.extent[1]) == (4, 2)
    with pytest.raises(cusyncgen.errors.CusyncError, match="row blocks"):
        sm90.cluster_order(sm90.order_desc(OrderIR("g", "y", 2, 3, (4, 6, 1))), "128x256x64c2")


def test_wrong_tile_width_for_llama_ep_is_a_clear_error():
    with pytest.raises(cusyncgen.errors.CusyncError, match="128 wide"):
        W.dep_params(W.model_of("llama-ep"), 256, "128x256x64")


HOST_MAIN = r"""
#include <cstdio>
#include "cusync/desc.h"
#include "cusync/sm90/deps.h"
int main() {
  int n;
  while (scanf("%d", &n) == 1) {
    if (n == 0) {  // policy: 10 ints, then tiles
      CusyncPolicyDesc p;
      for (int i = 0; i < 3; ++i) scanf("%d %d %d", &p.kind[i], &p.param[i], &p.extent[i]);
      scanf("%d", &p.num_sems);
      for (int z = 0; z < p.extent[2]; ++z)
        for (int y = 0; y < p.extent[1]; ++y)
          for (int x = 0; x < p.extent[0]; ++x)
            printf("%d %u\n", cusync::policy_sem(p, x, y, z), cusync::policy_value(p, x, y, z));
    } else if (n == 2) {  // ColumnDeps::rows: y, bm, in_bm, producer_Y
      int y, bm, in_bm, Y, py0, rows;
      scanf("%d %d %d %d", &y, &bm, &in_bm, &Y);
      cusync::sm90::ColumnDeps{1, bm, in_bm, Y}.rows(y, py0, rows);
      printf("%d %d\n", py0, rows);
    } else if (n == 3) {  // ColumnDeps::item: ptk, bm, in_bm, producer_Y, consumer y, k0, kc
      int ptk, bm, in_bm, Y, y, k0, kc;
      scanf("%d %d %d %d %d %d %d", &ptk, &bm, &in_bm, &Y, &y, &k0, &kc);
      const auto it = cusync::sm90::ColumnDeps{ptk, bm, in_bm, Y}.item(cusync::Tile{0, y, 0}, k0, kc);
      printf("%d", it.count());
      for (int i = 0; i < it.count(); ++i) printf(" %d,%d,%d", it.tile(i).x, it.tile(i).y, it.need(i));
      printf("\n");
    } else {  // order
      CusyncOrderDesc o;
      scanf("%d %d %d %d %d %d %d", &o.group_dim, &o.group_stride, &o.group_count, &o.groups_outer, &o.extent[0],
            &o.extent[1], &o.extent[2]);
      for (int i = 0; i < o.extent[0] * o.extent[1] * o.extent[2]; ++i) {
        const cusync::Tile t = cusync::order_tile(o, i);
        printf("%d %d %d\n", t.x, t.y, t.z);
      }
    }
  }
  return 0;
}
"""


def _column_deps_reference(ptk, bm, in_bm, M, y, k0, kc):
    """The producer tiles k-tiles [k0, k0 + kc) of consumer row block y read, by definition: k-tile k
    reads producer column k // ptk in every row block its rows overlap; each tile once, in the order
    the k-loop first reads it, with that k-tile (relative to k0)."""
    seen = {}
    for k in range(k0, k0 + kc):
        for py in _rows_read(M, y, bm, in_bm):
            seen.setdefault((k // ptk, py), max(0, (k // ptk) * ptk - k0))
    return f"{len(seen)}" + "".join(f" {x},{py},{need}" for (x, py), need in seen.items())


def test_policy_desc_header_on_the_host_matches_ir(tmp_path):
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    src = tmp_path / "main.cpp"
    src.write_text(HOST_MAIN)
    exe = tmp_path / "main"
    subprocess.run([cxx, "-std=c++17", "-O1", f"-I{sm90.source_dir().parent}", str(src), "-o", str(exe)], check=True)
    pols = list(W.compiled_mlp("gpt3", 300, "128x128x64")[0].values()) + _extra_policies()
    orders = list(W.compiled_mlp("llama-ep", 300, "64x128x64")[1:]) + _extra_orders()
    inp, want = [], []
    for p in pols:
        d = sm90.policy_desc(p)
        inp.append("0 " + " ".join(f"{d.kind[i]} {d.param[i]} {d.extent[i]}" for i in range(3)) + f" {d.num_sems}")
        want += [f"{p.sem(t)} {p.value(t)}" for t in _all_tiles(p.producer_extent)]
    for o in orders:
        d = sm90.order_desc(o)
        inp.append(f"1 {d.group_dim} {d.group_stride} {d.group_count} {d.groups_outer} "
                   + " ".join(str(e) for e in o.extent))
        want += ["%d %d %d" % o.tile(i) for i in range(o.num_tiles)]
    for X, Y, R in [(48, 16, 5), (7, 9, 2), (43, 4, 4)]:  # the banded order (not an OrderIR form)
        d = sm90.banded_order(X, Y, R)
        inp.append(f"1 {d.group_dim} {d.group_stride} {d.group_count} {d.groups_outer} {X} {Y} 1")
        want += ["%d %d %d" % t for t in _banded_reference(X, Y, R)]
    for M, bm, in_bm in _row_tile_cases():
        for y in range(-(-M // bm)):
            inp.append(f"2 {y} {bm} {in_bm} {-(-M // in_bm)}")
            rows = _rows_read(M, y, bm, in_bm)
            want.append(f"{rows[0]} {len(rows)}")
    for ptk, bm, in_bm, M in [(2, 128, 128, 300), (1, 256, 64, 1000), (4, 64, 128, 200), (3, 128, 64, 1)]:
        kt = 12
        for y in range(-(-M // bm)):
            for k0, kc in [(0, kt), (0, 5), (5, 7), (kt - 1, 1)]:
                inp.append(f"3 {ptk} {bm} {in_bm} {-(-M // in_bm)} {y} {k0} {kc}")
                want.append(_column_deps_reference(ptk, bm, in_bm, M, y, k0, kc))
    out = subprocess.run([str(exe)], input="\n".join(inp) + "\n", capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:-1] == want


def _row_tile_cases():
    """(M, consumer BM, producer BM): every pair of the library's row tiles, M a multiple of
    neither, of both, and smaller than one tile."""
    return [(M, bm, in_bm) for M in (1, 200, 512, 1000) for bm in (64, 128, 256) for in_bm in (64, 128, 256)]


def _rows_read(M: int, y: int, bm: int, in_bm: int) -> list:
    """The producer row blocks holding a row of [y bm, (y + 1) bm) below M: the rows a consumer tile
    reads, by definition (every row, not a formula)."""
    return sorted({r // in_bm for r in range(y * bm, min((y + 1) * bm, M))})


def test_producer_rows_cover_exactly_the_rows_a_consumer_tile_reads():
    for M, bm, in_bm in _row_tile_cases():
        for y in range(-(-M // bm)):
            py0, n = sm90.producer_rows(y, bm, in_bm, -(-M // in_bm))
            assert list(range(py0, py0 + n)) == _rows_read(M, y, bm, in_bm), (M, y, bm, in_bm)
            assert 32 % n == 0   # the sync warp polls whole producer columns of n rows


@pytest.mark.nvcc
def test_library_builds_for_sm90a_with_hgmma_and_no_local_memory():
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    if importlib.util.find_spec("cutlass_library") is None:
        pytest.skip("CUTLASS headers not found (pip install nvidia-cutlass)")
    lib = sm90.build(jobs=2)
    assert lib.is_file()
    if shutil.which("cuobjdump") is None:
        pytest.skip("cuobjdump is not on PATH")
    sass = subprocess.run(["cuobjdump", "-sass", str(lib)], capture_output=True, text=True, check=True).stdout
    kernels = [blk for blk in sass.split("Function : ")[1:] if "sync_gemm_kernel" in blk.split("\n", 1)[0]]
    assert len(kernels) == len(sm90.CONFIGS)
    stock = [blk for blk in sass.split("Function : ")[1:] if "GemmUniversal" in blk.split("\n", 1)[0]]
    assert len(stock) == 2 * len(sm90.STOCK_CONFIGS)  # clusters 1x1 and 2x1
    for k in kernels:
        name = k.split("\n", 1)[0]
        assert "HGMMA" in k, name
        assert "STL" not in k and "LDL" not in k, f"local memory in {name}"


def test_stored_descriptors_equal_the_compiled_ones(tmp_path, monkeypatch):
    """A GPU machine without lark reads the descriptors `build` wrote: the same PolicyIR/OrderIR."""
    path = W.write_descriptors(tmp_path / W.DESCRIPTORS)
    monkeypatch.setattr(sm90, "library_path", lambda: tmp_path / sm90.LIB_NAME)
    W._stored_descriptors.cache_clear()
    try:
        table = W._stored_descriptors()
        assert path.is_file() and len(table) > 0
        for (model, M, config), (pols, o1, o2) in table.items():
            want = W._compile(W.model_of(model), M, config)
            assert (pols, o1, o2) == want
    finally:
        W._stored_descriptors.cache_clear()
