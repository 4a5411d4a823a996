"""The generation attention kernel and block without a GPU: the translation unit compiles (nvcc),
its parameter struct matches the ctypes mirror (a host program built with nvcc), the KV split
fills the SMs without splits past the keys, and the block refuses bad shapes with a message."""
import ctypes
import shutil
import subprocess

import pytest

from cusyncgen.cuda import build, decode_attention as A, sm90
from cusyncgen.errors import CusyncError
from cusyncgen.workloads import attention_sm90 as W

nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


@nvcc
def test_the_kernel_compiles():
    data = build.build(A.source()).read_bytes()
    assert f"cusync_decode_attention_{A.UNROLL}".encode() in data


@nvcc
def test_parameter_struct_matches_its_mirror(tmp_path):
    src = tmp_path / "layout.cu"
    body = "".join(f'  printf("%zu\\n", offsetof(CusyncDecodeAttnParams, {f}));\n' for f, _ in A.AttnParams._fields_)
    body += "".join(f'  printf("%zu\\n", offsetof(CusyncDecodeAttnChainParams, {f}));\n' for f, _ in A.ChainParams._fields_)
    src.write_text(f'#include <cstdio>\n#include <cstddef>\n#include "{A.CHAIN_HEADER}"\nint main() {{\n'
                   f'  printf("%zu\\n%zu\\n", sizeof(CusyncDecodeAttnParams), sizeof(CusyncDecodeAttnChainParams));\n'
                   f'{body}}}\n')
    exe = tmp_path / "layout"
    subprocess.run(["nvcc", "-std=c++17", f"-I{build.runtime_include_dir()}", "-o", str(exe), str(src)],
                   check=True, capture_output=True)
    got = [int(v) for v in subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split()]
    assert got == ([ctypes.sizeof(A.AttnParams), ctypes.sizeof(A.ChainParams)]
                   + [getattr(A.AttnParams, f).offset for f, _ in A.AttnParams._fields_]
                   + [getattr(A.ChainParams, f).offset for f, _ in A.ChainParams._fields_])


@pytest.mark.parametrize("batch,heads,keys", [(1, 12, 1), (1, 12, 513), (1, 8, 8193), (4, 12, 2049),
                                              (64, 12, 8193), (64, 8, 513), (16, 12, 700)])
def test_the_split_covers_the_keys_and_fills_the_sms(batch, heads, keys):
    sms = 132
    s = A.split_for(batch, heads, keys, sms)
    assert A.MIN_CHUNK <= s.chunk <= A.MAX_CHUNK and s.chunk % A.MIN_CHUNK == 0
    assert (s.splits - 1) * s.chunk < keys <= s.splits * s.chunk     # every split holds a key
    # the chunk is the keys a block would read if every SM's BLOCKS_PER_SM blocks read the same,
    # rounded up to MIN_CHUNK, within the bounds
    ideal = batch * heads * keys / (A.BLOCKS_PER_SM * sms)
    assert s.chunk == A.MAX_CHUNK or s.chunk == A.MIN_CHUNK or s.chunk - A.MIN_CHUNK < ideal <= s.chunk
    assert s.chunk != A.MAX_CHUNK or ideal > A.MAX_CHUNK - A.MIN_CHUNK
    assert s.chunk != A.MIN_CHUNK or ideal <= A.MIN_CHUNK


@pytest.mark.parametrize("batch,heads,keys", [(1, 12, 513), (1, 12, 8193), (16, 12, 2049), (64, 12, 8193),
                                              (1, 8, 513), (64, 8, 513)])
def test_the_prefetch_is_a_share_of_l2_at_most_the_chunk(batch, heads, keys):
    l2 = 50 << 20   # an H100's
    s = A.split_for(batch, heads, keys, 132)
    items = batch * heads * s.splits
    k = A.prefetch_keys(items, s.chunk, l2)
    per_key = 2 * A.HEAD_DIM * 2     # a K and a V row
    assert 0 <= k <= s.chunk
    assert items * k * per_key <= l2 * A.PREFETCH_L2_SHARE                    # within the share
    assert k == s.chunk or items * (k + 1) * per_key > l2 * A.PREFETCH_L2_SHARE   # and all of it


def test_the_prefetch_covers_short_caches_whole_and_long_ones_in_part():
    l2 = 50 << 20
    short = A.split_for(1, 12, 513, 132)        # GPT-3, S' = 512: 3 MB of cache
    assert A.prefetch_keys(12 * short.splits, short.chunk, l2) == short.chunk
    long = A.split_for(64, 12, 8193, 132)       # B = 64, S' = 8192: 3.2 GB
    assert 0 <= A.prefetch_keys(64 * 12 * long.splits, long.chunk, l2) < long.chunk // 8
    assert A.prefetch_keys(10 ** 6, 64, l2) == 0


RESIDENTS = {"bulk64x3": 2, "loads": 4, "bulk32x2": 5}   # an H200's blocks an SM of each form


@pytest.mark.parametrize("batch,heads,keys", [(4, 8, 8193), (16, 8, 2049), (16, 8, 8193), (64, 8, 513),
                                              (64, 12, 2049), (16, 12, 8193), (4, 12, 8193), (64, 12, 8193)])
def test_a_large_cache_is_read_by_a_balanced_grid(batch, heads, keys):
    sms = 132
    p = A.plan_for(batch, heads, keys, sms, RESIDENTS)
    s = p.split
    assert p.form in A.ONE_WAVE_FORMS
    assert (s.splits - 1) * s.chunk < keys <= s.splits * s.chunk
    blocks = batch * heads * s.splits
    per_sm = -(-blocks // sms)
    # the busiest SM keeps IN_FLIGHT bytes of the cache in flight
    assert min(RESIDENTS[p.form], per_sm) * min(A.in_flight(p.form), s.chunk * A.KEY_BYTES) >= A.IN_FLIGHT
    one_wave = blocks <= RESIDENTS[p.form] * sms
    # no candidate of the forms reads fewer keys on its busiest SM (a one-wave grid first)
    for form in A.ONE_WAVE_FORMS:
        for n in range(1, 65):
            chunk = -(-keys // n)
            b = batch * heads * -(-keys // chunk)
            flight = min(RESIDENTS[form], -(-b // sms)) * min(A.in_flight(form), chunk * A.KEY_BYTES)
            if flight < A.IN_FLIGHT or (one_wave and b > RESIDENTS[form] * sms):
                continue
            if b <= RESIDENTS[form] * sms or not one_wave:
                assert per_sm * (s.chunk + A.BLOCK_COST_KEYS) <= -(-b // sms) * (chunk + A.BLOCK_COST_KEYS), (form, n)


def test_the_plan_matches_what_the_probe_measured():
    # the attention alone, H200 (docs/design.md): one bulk block a head at LLaMA B = 16, one
    # loads block a head at B = 64 (512 heads, 4 an SM), two loads splits at GPT-3 B = 16
    assert A.plan_for(16, 8, 8193, 132, RESIDENTS) == A.Plan("bulk64x3", A.Split(8193, 1))
    assert A.plan_for(64, 8, 2049, 132, RESIDENTS) == A.Plan("loads", A.Split(2049, 1))
    assert A.plan_for(16, 12, 8193, 132, RESIDENTS) == A.Plan("loads", A.Split(4097, 2))
    # GPT-3 B = 64: 768 heads fit no one-wave grid; one bulk block a head
    assert A.plan_for(64, 12, 2049, 132, RESIDENTS) == A.Plan("bulk64x3", A.Split(2049, 1))


@pytest.mark.parametrize("batch,heads,keys", [(1, 12, 1), (1, 8, 513), (4, 8, 2049), (1, 12, 8193), (16, 12, 513)])
def test_a_small_cache_keeps_the_latency_split(batch, heads, keys):
    assert batch * heads * keys * A.KEY_BYTES < A.ONE_WAVE_MIN_BYTES * 132
    assert A.plan_for(batch, heads, keys, 132, RESIDENTS) == A.Plan("loads", A.split_for(batch, heads, keys, 132))


@pytest.mark.parametrize("batch,heads,keys", [(4, 8, 8193), (16, 8, 2049), (64, 8, 513), (64, 8, 8193),
                                              (16, 12, 8193), (64, 12, 2049), (1, 8, 513), (4, 12, 2049)])
def test_a_large_cache_also_tries_many_short_splits(batch, heads, keys):
    sms = 132
    got = A.sizings(batch, heads, keys, sms, RESIDENTS)
    assert got[0] == A.plan_for(batch, heads, keys, sms, RESIDENTS)
    if batch * heads * keys * A.KEY_BYTES < A.ONE_WAVE_MIN_BYTES * sms:
        assert got == got[:1]                                      # latency-bound: split_for's loads alone
    else:
        waves = A.Plan(A.WAVES_FORM, A.split_for(batch, heads, keys, sms))
        same = waves.form == got[0].form and waves.split.splits == got[0].split.splits == 1   # one block a head
        assert got == (got[:1] if same or waves == got[0] else (got[0], waves))
    assert len(set(got)) == len(got)


def test_the_waves_sizing_is_several_short_blocks_where_the_plan_is_one_long_one():
    # LLaMA B = 64, S' = 8192: one loads block a head (one wave), or nine 1024-key splits a head
    plan, waves = A.sizings(64, 8, 8193, 132, RESIDENTS)
    assert plan == A.Plan("loads", A.Split(8193, 1))
    assert waves == A.Plan("bulk64x3", A.Split(1024, 9))
    # GPT-3 B = 64, S' = 512: one bulk block a head either way (split_for's chunk rounded up to 768)
    assert A.sizings(64, 12, 513, 132, RESIDENTS) == (A.Plan("bulk64x3", A.Split(513, 1)),)


def test_every_form_names_a_kernel_of_the_module():
    text = A.source().text
    assert A.form_kernel("loads") == (f"cusync_decode_attention_{A.UNROLL}", 0)
    for form in A.FORMS[1:]:
        keys, stages = (int(v) for v in form.removeprefix("bulk").split("x"))
        name, smem = A.form_kernel(form)
        assert name == f"cusync_decode_attention_bulk_{keys}_{stages}" and smem == stages * keys * A.KEY_BYTES
        assert f"CUSYNC_DEFINE_DECODE_ATTENTION_BULK({keys}, {stages})" in text
    with pytest.raises(A.AttentionError, match="no attention form 'bulk8x1'"):
        A.form_kernel("bulk8x1")


def test_bad_shapes_are_refused():
    with pytest.raises(CusyncError, match="no model"):
        W.AttentionGen("gpt2", 1, 512)
    with pytest.raises(CusyncError, match="B = 1 to 64"):
        W.AttentionGen("gpt3", 65, 512)
    with pytest.raises(CusyncError, match="cached tokens"):
        W.AttentionGen("llama", 1, -1)
    with pytest.raises(A.AttentionError, match="0 keys"):
        A.split_for(1, 12, 0, 132)
    with pytest.raises(A.AttentionError, match="0 keys"):
        A.plan_for(1, 12, 0, 132, RESIDENTS)


def test_engines_fit_their_gemms():
    for model in W.MODELS:
        for B in (1, 64):
            for n, k in W.AttentionGen(model, B, 512).gemm_shapes():
                es = W.engines_for(B, n, k)
                assert es[0] == W.DECODE_ENGINE and len(es) > 1
                for e in es[1:]:
                    if e.startswith(W.SWAP_ENGINE):   # the swapped GeMM: a token tile that holds B
                        assert sm90.swap_tile(e.removeprefix(W.SWAP_ENGINE)).BT >= B and n % 128 == 0
                        continue
                    cfg = e.split()[0]
                    assert cfg.startswith("64x") and n % 128 == 0
                # every swapped config for B rows whose packed groups divide the weight: the wide
                # form's 96-row groups at B = 64 divide GPT-3's weights and LLaMA's QKV, not its 4096 rows
                fit = [c for c in sm90.swap_configs_for(B) if sm90.swap_tile(c).fits(n, k)]
                assert [e.removeprefix(W.SWAP_ENGINE) for e in es if e.startswith(W.SWAP_ENGINE)] == fit
                assert ("64x96x64xa" in fit) == (B == 64 and n % 96 == 0)
    with pytest.raises(CusyncError, match="does not fit"):
        W.AttentionGen("gpt3", 1, 512, engines=("decode", "128x128x64"))


@pytest.mark.parametrize("model", tuple(W.MODELS))
def test_the_chain_policies_come_from_the_dep(model):
    B, past = 4, 700
    pol = W.compiled_policies(model, B, past)
    nh = W.heads(model)
    for name, (qk, t2) in A.CHAIN_POLICIES.items():
        q, t = pol["depQK"][qk], pol["depT2"][t2]
        assert q.producer_extent == (3 * nh, 1, 1) and t.producer_extent == (1, 1, B * nh), name
    strided = pol["depQK"]["StridedSync"]
    # one semaphore for the Q, K and V tiles of a head, three posts of tiles
    assert strided.num_sems == nh
    assert {strided.sem((h + i * nh, 0, 0)) for i in range(3) for h in (1,)} == {strided.sem((1, 0, 0))}
    assert pol["depT2"]["GroupSync_xtile_ytile_zall"].num_sems == 1


def test_floor_counts_weights_and_cache():
    blk = W.AttentionGen("gpt3", 1, 1024)
    nd = 12 * 128
    weights = 2 * (3 * nd * 12288 + 12288 * nd)
    cache = 2 * 2 * 12 * 1024 * 128
    assert weights + cache < blk.floor_bytes() < 1.01 * (weights + cache)


def test_the_page_tabulates_every_point():
    head = {"phase": "generation", "kernel": "sm90"}
    rows = []
    for model in ("gpt3", "llama"):
        for B in (1, 4):
            for sp in (512, 2048):
                h = dict(head, model=W.label(model, sp), M=B, B=B, Sp=sp, point=W.point(B, sp))
                rows += [dict(h, config="StreamSync", time_us=60.0, correct=True, splits="3 x 64 keys"),
                         dict(h, config="PDL", time_us=55.0, correct=True, splits="3 x 64 keys",
                              engines=["decode", "64x128x64"]),
                         dict(h, config="TileSync+Chain", time_us=57.0, correct=True),
                         dict(h, config="vendor+graph", time_us=66.0, correct=True, vendor_form="torch+sdpa-cudnn"),
                         dict(h, config="floor", time_us=50.0, correct=True)]
    rows[1]["correct"] = False
    page = W.markdown({"device": "GPU", "ceilings": {"bandwidth": 3e12}, "rows": rows})
    assert page.count("| 1 | 512 |") == 2 and page.count("| 4 | 2048 |") == 2
    # the first point's PDL row is wrong: ours is the chain there, and the point says NO
    assert ("| 1 | 512 | 60.0 | 55.0 | TileSync+Chain | 57.0 | 66.0 (torch+sdpa-cudnn) | 1.158x | 1.14x | 50.0 | "
            "decode, 64x128x64 | 3 x 64 keys | NO |") in page
    assert ("| 4 | 512 | 60.0 | 55.0 | TileSync+Chain | 57.0 | 66.0 (torch+sdpa-cudnn) | 1.200x | 1.10x | 50.0 | "
            "decode, 64x128x64 | 3 x 64 keys | yes |") in page
    # where the orderings' attention sizings differ, the cell names both
    rows[5].update(splits="1 x 2049 keys", attention_form="loads")
    rows[6].update(splits="5 x 512 keys", attention_form="bulk64x3")
    # and where PDL's attention is launched in stream order behind the QKV GeMM
    rows[11].update(splits="3 x 64 keys", attention_pdl=False)
    page = W.markdown({"device": "GPU", "ceilings": {"bandwidth": 3e12}, "rows": rows})
    assert "| decode, 64x128x64 | 1 x 2049 keys (loads); PDL 5 x 512 keys (bulk64x3) | yes |" in page
    assert "| decode, 64x128x64 | 3 x 64 keys; PDL: attention in stream order | yes |" in page


def test_tune_chooses_among_the_sm90_bench_rows_never_a_vendor_row(tmp_path, capsys):
    import json

    from cusyncgen.commands import tune
    rows = [{"model": "gpt3-gen-S'512", "M": 1, "config": c, "time_us": t, "correct": ok, "kernel": "sm90"}
            for c, t, ok in (("StreamSync", 60.0, True), ("PDL", 55.0, True), ("TileSync+PDL", 50.0, False),
                             ("vendor+graph", 40.0, True), ("floor", 30.0, True))]
    rows[1].update(engines=["swap 16x64x64sw1s10", "swap 16x64x128sw1"], splits="9 x 1024 keys",
                   attention_form="bulk64x3", attention_pdl=False)
    res = tmp_path / "attention-gen.json"
    res.write_text(json.dumps({"device": "GPU", "workload": "attention", "kernel": "sm90", "rows": rows}))
    out = tmp_path / "out"
    assert tune.main(["attention", "--kernel", "sm90", "--from-json", str(res), "-o", str(out)]) == 0
    [choice] = json.loads((out / "tune-attention-gpu-sm90.json").read_text())["choices"]
    assert choice["config"] == "PDL" and choice["speedup_vs_streamsync"] == round(60 / 55, 4)   # not the wrong one
    # the page names what the choice ran on: its engines and the attention's sizing
    assert choice["ran_on"] == ("swap 16x64x64sw1s10, swap 16x64x128sw1; 9 x 1024 keys (bulk64x3), attention in "
                                "stream order")
    assert "| 1 | PDL | swap 16x64x64sw1s10, swap 16x64x128sw1; 9 x 1024 keys (bulk64x3), attention in stream " \
           "order | 55.0 |" in \
        (out / "tune-attention-gpu-sm90.md").read_text()
    capsys.readouterr()
    assert tune.main(["attention", "--kernel", "sm80", "--from-json", str(res), "-o", str(tmp_path)]) == 1
    assert "of the sm90 kernels, not sm80" in capsys.readouterr().err


def test_the_qkv_gemm_lets_the_fmha_launch_early_only_where_it_can_work_early():
    from cusyncgen.cuda import sm90
    one, tail = sm90.NO_SPLIT, sm90.Split(2, 132)
    # PDL alone: the FMHA waits for the whole GeMM, so never
    assert not W.qkv_triggers("PDL", "128x192x64tma", 4096, 4608, one, sms=132)
    # synchronized: where the GeMM's CTAs take more than two items each (32 x 24 = 768 tiles at 4096
    # tokens, 16 x 24 = 384 at 2048), not one (96 tiles at 512 tokens) or two (192 tiles with 60 of
    # them split in two: 252 items; 256 tiles of 128x144)
    assert W.qkv_triggers("TileSync+PDL", "128x192x64tma", 4096, 4608, one, sms=132)
    assert W.qkv_triggers("StridedSync+PDL", "128x192x64tma", 2048, 4608, one, sms=132)
    assert not W.qkv_triggers("RowSync+PDL", "128x192x64", 1024, 4608, tail, sms=132)
    assert not W.qkv_triggers("TileSync+PDL", "128x192x64tma", 512, 4608, one, sms=132)
    assert not W.qkv_triggers("TileSync+PDL", "128x144x64", 512, 4608, one, sms=132)   # 128 tiles, one wave
    assert not W.qkv_triggers("TileSync+PDL", "128x144x64", 1024, 4608, one, sms=132)  # 256 tiles


def test_prompt_tiles_fit_their_gemms_and_bad_prompts_are_refused():
    for model in W.MODELS:
        for n, k in W.AttentionPrompt(model, 1, 1024).gemm_shapes():
            tiles = W.prompt_engines_for(1024, n, k)
            assert tiles and all(t.startswith(("128x", "256x", "64x")) for t in tiles)
            assert any(t.startswith("256x") for t in tiles)   # the output GeMM's fastest, cuBLAS's tile
            assert all(t.startswith(("128x", "256x")) for t in W.prompt_engines_for(4096, n, k))
            assert all(n % int(t.split()[0].removesuffix("tma").removesuffix("pp").split("x")[1]) == 0 for t in tiles)
        assert not any(t.endswith("tma") for t in W.prompt_engines_for(128, 12288, 1536))
    with pytest.raises(CusyncError, match="does not fit"):
        W.AttentionPrompt("gpt3", 1, 4096, engines=("64x128x64", "128x128x64"))
    with pytest.raises(CusyncError, match="a prompt of"):
        W.AttentionPrompt("llama", 0, 512)
    with pytest.raises(CusyncError, match="a multiple of 8"):
        W.AttentionPrompt("llama", 1, 300)


def test_prompt_synchronized_configurations_need_qkv_tiles_the_dep_describes_and_whole_o_tiles():
    both = W.AttentionPrompt("gpt3", 1, 1024, engines=("128x128x64tma splitK4@264", "128x256x64tma")).configs()
    assert both == list(W.PROMPT_ORDERINGS + W.PROMPT_SYNCED)
    two = W.AttentionPrompt("llama", 1, 1024, engines=("128x256x64tma", "128x256x64tma")).configs()
    assert two == list(W.PROMPT_ORDERINGS + W.PROMPT_SYNCED)
    # tiles across heads: the per-tile policy and RowSync, no StridedSync
    across = W.AttentionPrompt("gpt3", 1, 512, engines=("128x192x64", "128x192x64")).configs()
    assert across == ["StreamSync", "PDL", "TileSync+PDL", "RowSync+PDL"]
    assert W.AttentionPrompt("gpt3", 1, 1024, engines=("64x128x64", "128x256x64")).configs() == ["StreamSync", "PDL"]
    # a QKV tile's columns: 128-row tiles of whole heads dividing the model's heads, or across heads
    # (at least D / 2 columns dividing the 3 heads D), no cluster
    assert [W.qkv_sync_cols(e, 12) for e in ("128x128x64", "128x128x64pp splitK4@264", "128x256x64tma splitK10@132",
                                             "128x192x64", "128x144x64", "128x96x64", "128x160x64", "64x128x64",
                                             "128x128x64c2", "128x48x64")] == [128, 128, 256, 192, 144, 96, 0, 0, 0, 0]
    assert W.qkv_sync_cols("128x256x64", 8) == 256 and W.qkv_sync_cols("128x256x64", 3) == 0
    assert W.qkv_sync_cols("128x144x64", 8) == 0 and W.qkv_sync_cols("128x96x64", 8) == 96
    assert "TileSync+PDL" not in W.AttentionPrompt("llama", 1, 520, engines=("128x128x64", "128x128x64")).configs()
    blk = W.AttentionPrompt("gpt3", 1, 1024, engines=("64x128x64", "128x256x64"))
    with pytest.raises(CusyncError, match="no configuration 'TileSync\\+PDL'"):
        blk.run(None, "TileSync+PDL", *([None] * 7))


@pytest.mark.parametrize("model,B,S,causal,cols", [("gpt3", 1, 4096, False, 128), ("llama", 4, 1024, True, 128),
                                                   ("llama", 1, 576, False, 128), ("gpt3", 1, 1024, True, 256),
                                                   ("llama", 4, 1024, False, 256), ("gpt3", 1, 512, False, 144),
                                                   ("gpt3", 1, 1024, True, 192), ("llama", 1, 576, True, 96)])
def test_prompt_policies_number_the_tiles_the_kernels_post(model, B, S, causal, cols):
    """The compiled policies the prompt chain hands the kernels: depQK's over the QKV GeMM's grid
    of 128-row tiles of `cols` columns (its order over the same grid), depT2's over O's (head,
    64-row block) tiles once permuted; every tile's semaphore in range, each group's value its tile
    count. Tiles across heads have no StridedSync."""
    from collections import Counter

    from cusyncgen.cuda import sm90
    pols, order = W.compiled_prompt(model, B, S, causal, cols)
    NH, M = W.heads(model), B * S
    X1, Y1 = 3 * NH * W.D // cols, -(-M // 128)
    assert tuple(order.extent) == (X1, Y1, 1)
    assert ("StridedSync" in pols["depQK"]) == (cols % W.D == 0)
    for name, (qk, t2) in W.decode_attention.CHAIN_POLICIES.items():
        if cols % W.D and name == "StridedSync":
            continue
        dq = sm90.policy_desc(W.qkv_policy(pols, qk))
        dt = sm90.permuted_policy(sm90.policy_desc(pols["depT2"][t2]), (2, 1, 0))
        assert tuple(dq.extent) == (X1, Y1, 1) and tuple(dt.extent) == (NH, M // sm90.FMHA_O_ROWS, 1), name
        for d, (X, Y) in ((dq, (X1, Y1)), (dt, (NH, M // sm90.FMHA_O_ROWS))):
            tiles = [(x, y, 0) for x in range(X) for y in range(Y)]
            per_sem = Counter(sm90.desc_sem(d, t) for t in tiles)
            assert set(per_sem) == set(range(d.num_sems)), name
            assert all(per_sem[sm90.desc_sem(d, t)] == sm90.desc_value(d, t) for t in tiles), name


def test_the_page_has_a_prompt_table():
    assert W.prompt_label("gpt3", True, 4) == "gpt3-prompt-B4-causal" != W.prompt_label("gpt3", True)
    head = {"phase": "prompt", "kernel": "sm90", "B": 1, "S": 512, "causal": True, "M": 512,
            "model": W.prompt_label("gpt3", True)}
    rows = [dict(head, config="StreamSync", time_us=100.0, correct=True, engines=["128x128x64", "128x192x64"]),
            dict(head, config="PDL", time_us=98.0, correct=True, engines=["128x128x64", "128x192x64"]),
            dict(head, config="TileSync+PDL", time_us=95.0, correct=True, engines=["128x128x64tma", "128x192x64"]),
            dict(head, config="RowSync+PDL", time_us=90.0, correct=False, engines=["128x128x64tma", "128x192x64"]),
            dict(head, config=W.STAGE, time_us=10.0, correct=True),
            dict(head, config=W.VENDOR_STAGE, time_us=12.0, correct=True, vendor_form="sdpa-cudnn"),
            dict(head, config="vendor+graph", time_us=105.0, correct=True, vendor_form="torch+sdpa-cudnn"),
            dict(head, config="floor", time_us=80.0, correct=True)]
    page = W.markdown({"device": "GPU", "ceilings": {"bandwidth": 3e12}, "rows": rows})
    assert "## gpt3 prompt" in page
    # the fastest correct of ours (TileSync+PDL; RowSync+PDL is wrong) against the vendor and the floor
    assert ("| 1 | 512 | yes | 100.0 | 98.0 | 95.0 (TileSync+PDL) | 105.0 (torch+sdpa-cudnn) | 1.105x | 1.19x | 80.0 | "
            "10.0 | 12.0 (sdpa-cudnn) | 1.200x | 128x128x64, 128x192x64; 128x128x64tma | NO |") in page
