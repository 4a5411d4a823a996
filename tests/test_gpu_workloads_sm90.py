"""The sm90 MLP workload on a Hopper GPU, through `cusyncgen bench`'s own path: every configuration
(StreamSync, PDL, TileSync/RowSync +PDL and +Chain, split-K where it applies) of a tile config of
each model computes the float32 reference's result on fresh random inputs with poisoned outputs, at
M = 1 and at an M that is a multiple of no tile, also with the second GeMM in the grouped order; no
wait timed out; and a one-size bench has the
rows, "kernel" and gemm section the report reads. Needs CuPy, PyTorch, an sm_90 GPU and the sm90
library (built with nvcc, or CUSYNC_SM90_LIB)."""
import pytest

from support import sm90_cuda

ok, why = sm90_cuda()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not ok, reason=why or "GPU available")]

if ok:
    import cupy

    from cusyncgen.cuda import sm90, timing
    from cusyncgen.workloads import for_device
    from cusyncgen.workloads import mlp_decode, mlp_swap
    from cusyncgen.workloads import mlp_sm90 as W


@pytest.mark.parametrize("model", W.MODELS if ok else ["gpt3"])
@pytest.mark.parametrize("M", W.TEST_SIZES if ok else [1])
def test_every_configuration_is_correct(model, M):
    stream = cupy.cuda.Stream()
    tile = W.default_tile(model, M)
    rows, mlp, *_ = W.measure_point(model, M, 3, stream, seed=M, tile=tile)
    names = [r["config"] for r in rows]
    assert {"StreamSync", "PDL", "TileSync+PDL", "RowSync+PDL", "TileSync+Chain", "RowSync+Chain"} <= set(names)
    assert any(n.endswith("/split-K") for n in names) == sm90.has_split(mlp.splits_of("auto"))
    wrong = [(r["config"], r["rel_err"]) for r in rows if not r["correct"]]
    assert not wrong, wrong
    assert all(r["kernel"] == "sm90" and r["tiles"] == tile for r in rows)


@pytest.mark.parametrize("model,tile", [("gpt3", "128x256x64"), ("llama-ep", "128x128x64")])
def test_the_grouped_second_gemm_is_correct(model, tile):
    stream = cupy.cuda.Stream()
    rows, *_ = W.measure_point(model, W.GROUPED2_MIN_M, 3, stream, seed=7, tile=tile, grouped2=True)
    assert all(r["tiles"] == tile + " G2" for r in rows)
    wrong = [(r["config"], r["rel_err"]) for r in rows if not r["correct"]]
    assert not wrong, wrong


def test_per_gemm_tile_configs_are_correct_in_every_two_launch_configuration():
    stream = cupy.cuda.Stream()
    rows, mlp, *_ = W.measure_point("gpt3", 200, 3, stream, seed=5, tile="64x128x64", tile2="128x192x64")
    names = {r["config"] for r in rows}
    assert {"StreamSync", "PDL", "TileSync+PDL", "RowSync+PDL"} <= names and not any("Chain" in n for n in names)
    assert all(r["tiles"] == "64x128x64+128x192x64" and r["tile_cfg"]["g2"]["BN"] == 192 for r in rows)
    wrong = [(r["config"], r["rel_err"]) for r in rows if not r["correct"]]
    assert not wrong, wrong


def test_confirm_re_measures_a_choice_against_the_stream_order_and_cublas():
    tiles = W.Sm90Tiles("64x128x64", *W.orders_for(200)[1]).as_dict()
    choice = {"config": "TileSync+PDL", "tile_cfg": tiles, "fastest_stream_order": "StreamSync",
              "fastest_stream_order_tile_cfg": W.Sm90Tiles("128x128x64").as_dict()}
    got = W.confirm("gpt3", 200, choice, iters=3, seed=11)
    # the choice, the stream order and every vendor form, each alone and back to back
    timed = 2 * (2 + len(got["vendor_forms"]))
    assert got["correct"] and got["rounds"] == timing.rounds_for(timed) and got["rel_err"] < W.TOL
    assert all(got[k] > 0 for k in ("ours_us", "stream_us", "vendor_us", "ours_chain_us", "stream_chain_us",
                                    "vendor_chain_us"))
    assert got["chain"] == W.CONFIRM_CHAIN and set(got["vendor_chain_forms"]) == set(got["vendor_forms"])


def test_the_device_default_is_the_sm90_family():
    assert for_device("mlp").kernel == "sm90" and for_device("mlp", "sm80").kernel == "sm80"
    assert for_device("conv2d").kernel == "sm80"


def test_a_one_size_bench_has_every_row_the_report_reads():
    from cusyncgen.commands.bench import markdown
    res = W.bench(models="llama-ep", sizes=[64], iters=3, progress=False)
    assert res["kernel"] == "sm90" and all(r["kernel"] == "sm90" for r in res["rows"])
    configs = {r["config"] for r in res["rows"]}
    assert {"StreamSync", "PDL", "RowSync+Chain", "cuBLAS", "cuBLAS+graph", "floor"} <= configs
    pair = W.per_gemm_tiles(res["gemm"])   # the GeMMs alone on tiles of their own: that pair measured too
    want = set(W.tile_candidates("llama-ep", 64)) | ({f"{pair[0]}+{pair[1]}"} if pair[0] != pair[1] else set())
    want.add(mlp_decode.TILES)   # the decode kernel runs at M <= 64 too, and the swapped GeMM
    want |= {mlp_swap.tiles_label(*p) for p in mlp_swap.tile_pairs(64, model="llama-ep")}
    assert {r["tiles"] for r in res["rows"] if "tiles" in r} == want
    assert {"StreamSync/decode", "TileSync+Chain/decode"} <= configs
    assert all(r["correct"] for r in res["rows"]), [r["config"] for r in res["rows"] if not r["correct"]]
    assert [(g["gemm"], g["kernel"]) for g in res["gemm"]] == [(1, "sm90"), (2, "sm90")]
    assert all(g["ours_us"] > 0 and g["cublas_us"] > 0 for g in res["gemm"])
    assert "## llama-ep" in markdown(res)


def test_the_sm90_overhead_benchmark_is_correct_in_every_configuration():
    from cusyncgen.workloads import overhead_sm90
    res = overhead_sm90.measure(iters=3)
    assert res["kernel"] == "sm90" and res["workload"] == "overhead"
    assert [r["config"] for r in res["rows"]] == [c.name for c in W.configs_for()]
    wrong = [(r["config"], r["rel_err"]) for r in res["rows"] if not r["correct"]]
    assert not wrong, wrong
    assert res["rows"][0]["config"] == "StreamSync" and res["rows"][0]["overhead_vs_streamsync"] == 0.0
