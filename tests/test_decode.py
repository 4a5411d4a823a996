"""The decode MLP kernel without a GPU: its translation unit compiles (nvcc), the packed weight
layout is what the kernel's loads read (a model of its addressing, NumPy), the parameter struct's
layout matches the ctypes mirror (a host program built with nvcc), the policies compiled from the
models' .dep programs fit its producer tiles, and bad sizes are refused with a message."""
import ctypes
import shutil
import subprocess

import numpy as np
import pytest

from cusyncgen.cuda import build, decode
from cusyncgen.errors import CusyncError
from cusyncgen.workloads import mlp as sm80
from cusyncgen.workloads import mlp_decode

nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


@nvcc
def test_every_variant_compiles():
    cubin = build.build(decode.source())
    data = cubin.read_bytes()
    for v in decode.VARIANTS + decode.EXTRA:
        assert v.name.encode() in data, v.name


def kernel_reads(packed, shape, n, k, rb, warp, ks, load, lane):
    """The 8 halves a lane's load `load` of step (rb, ks) reads from a packed weight: the kernel's
    addressing (run_gemm's tile_of and load), in NumPy."""
    ck = shape.step_k // 32
    ksteps = -(-k // shape.step_k)
    group = (rb * shape.rows + warp * shape.rw) // 16 + load // (2 * ck)
    flat = packed.reshape(-1)
    start = ((group * ksteps + ks) * 16 * shape.step_k) + ((load % (2 * ck)) * 32 + lane) * 8
    return flat[start:start + 8]


@pytest.mark.parametrize("k", [192, 160])   # whole steps, and a ragged last step (zero-padded)
def test_packed_layout_is_what_the_loads_read(k):
    shape = decode.VARIANTS[0]
    n = 2 * shape.rows
    rng = np.random.default_rng(0)
    w = rng.standard_normal((n, k)).astype(np.float16)
    packed = decode.pack_weights(w, shape.step_k)
    ck = shape.step_k // 32
    padded = np.concatenate([w, np.zeros((n, packed.shape[1] - k), np.float16)], axis=1)
    for rb in range(n // shape.rows):
        for warp in range(4):
            for ks in range(packed.shape[1] // shape.step_k):
                for load in range(8):
                    b, h, c = load // (2 * ck), (load // ck) % 2, load % ck
                    for lane in (0, 5, 31):
                        g, t = lane >> 2, lane & 3
                        row = rb * shape.rows + warp * shape.rw + 16 * b + 8 * h + g
                        col = ks * shape.step_k + 32 * c + 8 * t
                        got = kernel_reads(packed, shape, n, k, rb, warp, ks, load, lane)
                        assert np.array_equal(got, padded[row, col:col + 8]), (rb, warp, ks, load, lane)


@nvcc
def test_parameter_struct_matches_its_mirror(tmp_path):
    fields = [("gemm", "gemm"), ("policy", "policy"), ("sems", "sems"), ("ticket", "ticket"), ("debug", "debug"),
              ("timeout_ns", "timeout_ns"), ("m", "m"), ("first", "first"), ("last", "last"), ("pdl", "pdl")]
    src = tmp_path / "layout.cu"
    body = "".join(f'  printf("%zu\\n", offsetof(CusyncDecodeParams, {c}));\n' for c, _ in fields)
    body += "".join(f'  printf("%zu\\n", offsetof(CusyncDecodeGemm, {c}));\n' for c, _ in decode.Gemm._fields_)
    src.write_text(f'#include <cstdio>\n#include <cstddef>\n#include "{decode.HEADER}"\nint main() {{\n'
                   f'  printf("%zu\\n%zu\\n", sizeof(CusyncDecodeParams), sizeof(CusyncDecodeGemm));\n{body}}}\n')
    exe = tmp_path / "layout"
    subprocess.run(["nvcc", "-std=c++17", f"-I{build.runtime_include_dir()}", "-o", str(exe), str(src)],
                   check=True, capture_output=True)
    got = [int(v) for v in subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split()]
    want = [ctypes.sizeof(decode.Params), ctypes.sizeof(decode.Gemm)]
    want += [getattr(decode.Params, f).offset for _, f in fields]
    want += [getattr(decode.Gemm, f).offset for f, _ in decode.Gemm._fields_]
    assert got == want


@pytest.mark.parametrize("model", mlp_decode.MODELS)
def test_compiled_policies_fit_the_decode_tiles(model):
    from cusyncgen.cuda.sm90.desc import policy_desc

    m = sm80.MODELS[model]
    g1, g2 = mlp_decode.shapes(m)
    assert g2.k == g1.n_out
    pols = mlp_decode.compiled_policies(m)
    assert set(decode.CHAIN_POLICIES) <= set(pols)
    tile = policy_desc(pols["TileSync"])
    row = policy_desc(pols["RowSync"])
    assert tuple(tile.extent) == (g1.tiles, 1, 1) == tuple(row.extent)
    assert tile.num_sems == g1.tiles and row.num_sems == 1


def test_bad_sizes_are_refused():
    with pytest.raises(CusyncError, match="M = 1 to 64"):
        mlp_decode.MLPDecode("gpt3", 65)
    with pytest.raises(CusyncError, match="no model"):
        mlp_decode.MLPDecode("llama", 1)
    with pytest.raises(CusyncError, match="1 to 64 rows"):
        decode.variant(0)
    with pytest.raises(CusyncError, match="multiple of 128"):
        decode.GemmShape(100, 64)
    assert mlp_decode.fits("gpt3", 64) and not mlp_decode.fits("gpt3", 65)


def test_a_timed_out_wait_marks_every_chain_row_wrong():
    rows = [{"config": c.name, "correct": True} for c in mlp_decode.MLPDecode("gpt3", 1).configs()]
    assert [r["config"] for r in rows] == [c + "/decode" for c in decode.ORDERINGS]
    out = mlp_decode.label_rows([dict(r) for r in rows], {})
    assert all(r["correct"] and r["tile_cfg"] == {"kernel": "decode"} and r["splits"] == "1/1" for r in out)
    out = mlp_decode.label_rows([dict(r) for r in rows], {"*": "a wait timed out: ..."})
    assert {r["config"] for r in out if not r["correct"]} == {"TileSync+Chain/decode", "RowSync+Chain/decode"}
    assert all(r["error"].startswith("a wait timed out") for r in out if not r["correct"])


def test_warp_k_plans_split_the_rows_evenly_or_not_at_all():
    """decode.warp_k_plan: one grid for both GeMMs, every GeMM's 16-row groups a whole number a
    block; none under SwiGLU or where the grid would leave more than 5% of the slots idle."""
    G = decode.GemmShape
    gpt3 = (G(6144, 12288, "gelu"), G(12288, 6144))
    assert decode.warp_k_plan(gpt3, 396) == (384, [1, 2])
    assert decode.warp_k_plan(gpt3, 264) is None           # 192 blocks of 2 and 4 groups: 73% of the slots
    assert decode.warp_k_plan(gpt3, 384) == (384, [1, 2])
    assert decode.warp_k_plan((G(11008, 8192, "swiglu"), G(8192, 5504)), 396) is None
    assert decode.warp_k_plan((G(4608, 12288),), 396) is None   # 288 groups: 73% of 396
    grid, ks = decode.warp_k_plan((G(12288, 6144),), 396)
    assert grid * ks[0] == 768 and grid <= 396 and grid >= 0.95 * 396
    assert decode.red_smem(decode.WARP_K[0], 2) == 2 * 16 * 9 * 4


def test_an_unknown_split_is_refused():
    with pytest.raises(CusyncError, match="split 'rows' is not one of auto, stream-k, warp-k"):
        decode.DecodeMlp(1, (decode.GemmShape(128, 128), decode.GemmShape(128, 128)), {}, split="rows")


def test_a_16_row_variant_runs_warp_k_only():
    """The 16-row variants' kernels take every GeMM as warp-K (their Share): a caller's variant
    of 16 rows is refused, never run as stream-K."""
    with pytest.raises(CusyncError, match="16-row variants run warp-K only"):
        decode.variant_for(1, decode.WARP_K[0])
    assert decode.variant_for(5, None) == decode.VARIANTS[0]
