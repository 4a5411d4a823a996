"""The sm90 library's boundary without a GPU: the one list of tile configurations (configs.def) read
alike by the C preprocessor and by Python; the struct layouts the library exports (abi.h) compiled
on the host and compared with the ctypes mirrors, a wrong mirror named by its field; the C enums
against Python's, the library's launch flags kept apart from the SM80 kernels'; the source hash
that a prebuilt library must carry; and, with nvcc, api.cu linked against stub tile
configurations (no CUTLASS, no GPU) and loaded through the real loader, so that Sm90Chain's plans
cross the real C interface: every configuration of the sm90 family decoded by chain.steps into
plans whose GeMMs, waits, posts, tickets and flags are what the library receives."""
import ctypes
import re
import shutil
import subprocess
import types

import pytest

from cusyncgen.cuda import abi, chain, sm90
from cusyncgen.cuda.configs import PDL_ALONE, SM90_ORDERINGS, STREAM_SYNC, Config, Ordering
from cusyncgen.cuda.sm90 import launch, lib
from cusyncgen.workloads import mlp_sm90 as W

SRC = sm90.source_dir()
CXX = shutil.which("g++") or shutil.which("c++")


def _host_run(tmp_path, main: str, *flags) -> str:
    if CXX is None:
        pytest.skip("no host C++ compiler")
    src = tmp_path / "main.cpp"
    src.write_text(main)
    exe = tmp_path / "main"
    subprocess.run([CXX, "-std=c++17", f"-I{SRC}", f"-I{SRC.parent}", *flags, str(src), "-o", str(exe)], check=True)
    return subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout


# ---- one list of tile configurations ----

def test_python_reads_configs_def_as_the_preprocessor_does(tmp_path):
    out = _host_run(tmp_path, r"""
#include <cstdio>
int main() {
#define CUSYNC_SM90_TILE(NAME, BM, BN, BK, PP, EPI) std::printf("tile %s %d %d %d %d %d\n", #NAME, BM, BN, BK, PP, EPI);
#define CUSYNC_SM90_STOCK(NAME, BM, BN, BK) std::printf("stock %s %d %d %d\n", #NAME, BM, BN, BK);
#define CUSYNC_SM90_SWAP(NAME, BT, BW, BK, CW, S, XA, KS) std::printf("swap %s %d %d %d %d %d %d %d\n", #NAME, BT, BW, BK, CW, S, XA, KS);
#include "configs.def"
#if defined(CUSYNC_SM90_TILE) || defined(CUSYNC_SM90_STOCK) || defined(CUSYNC_SM90_SWAP)
  std::printf("not undefined\n");
#endif
}
""")
    want = [f"tile {t.name} {t.BM} {t.BN} {t.BK} {int(t.pingpong)} {t.epi_cols}" for t in sm90.TILES]
    want += [f"stock {s.name} {s.BM} {s.BN} {s.BK}" for s in sm90.STOCK_TILES]
    want += [f"swap {s.name} {s.BT} {s.BW} {s.BK} {s.CW} {s.stages} {int(s.xa)} {s.KS}" for s in sm90.SWAP_TILES]
    assert out.splitlines() == want
    assert sm90.CONFIGS == W.CONFIGS == tuple(t.name for t in sm90.TILES)
    assert "128x192x64tma" in sm90.CONFIGS and sm90.STOCK_CONFIGS == ("128x128x64", "128x256x64")


def test_every_instantiation_and_table_comes_from_configs_def():
    # one translation unit per line, compiled from config.cu / stock.cu with the line's fields (and
    # the prompt's FMHA, fmha.cu, twice: its stock kernels and the synchronized ones)
    assert not list(SRC.glob("config_*.cu")) and not list(SRC.glob("stock_*.cu"))
    units = {name: (path.name, defines) for name, path, defines in lib.units()}
    assert set(units) == ({"api", "fmha", "fmha_sync"} | {f"config_{c}" for c in sm90.CONFIGS}
                          | {f"stock_{c}" for c in sm90.STOCK_CONFIGS} | {f"swap_{c}" for c in sm90.SWAP_CONFIGS})
    assert units["swap_16x64x128sw1"] == ("swap.cu", [
        "-DCUSYNC_SM90_SWAP_FN=swap_16x64x128sw1", "-DCUSYNC_SM90_BT=16", "-DCUSYNC_SM90_BW=64", "-DCUSYNC_SM90_BK=128",
        "-DCUSYNC_SM90_CW=1", "-DCUSYNC_SM90_STAGES=0", "-DCUSYNC_SM90_XA=0", "-DCUSYNC_SM90_KS=1"])
    assert units["swap_16x64x64sw1s10"][1][-3] == "-DCUSYNC_SM90_STAGES=10"
    assert units["swap_64x96x64xa"][1][2:] == ["-DCUSYNC_SM90_BW=96", "-DCUSYNC_SM90_BK=64", "-DCUSYNC_SM90_CW=1",
                                               "-DCUSYNC_SM90_STAGES=0", "-DCUSYNC_SM90_XA=1", "-DCUSYNC_SM90_KS=1"]
    assert units["swap_16x64x64sw1s10k3"][1][-3:] == ["-DCUSYNC_SM90_STAGES=10", "-DCUSYNC_SM90_XA=0",
                                                     "-DCUSYNC_SM90_KS=3"]
    assert units["fmha"] == ("fmha.cu", ["-DCUSYNC_FMHA_SYNC=0"])
    assert units["fmha_sync"] == ("fmha.cu", ["-DCUSYNC_FMHA_SYNC=1"])
    assert units["config_128x192x64tma"] == ("config.cu", [
        "-DCUSYNC_SM90_TILE_FN=plan_128x192x64tma", "-DCUSYNC_SM90_BM=128", "-DCUSYNC_SM90_BN=192",
        "-DCUSYNC_SM90_BK=64", "-DCUSYNC_SM90_PINGPONG=0", "-DCUSYNC_SM90_EPI_COLS=96"])
    assert units["api"][1] == [f"-DCUSYNC_SM90_SOURCE_HASH={sm90.source_hash()}"]
    for text in ((SRC / "api.cu").read_text(), (SRC / "plan.h").read_text()):
        assert '#include "configs.def"' in text and "128x128x64" not in text


def test_a_configs_line_is_checked_where_it_is_read():
    one = "CUSYNC_SM90_TILE(128x128x64, 128, 128, 64, 0, 0)\n"
    tiles, stock, swap = sm90.parse_configs(one + "CUSYNC_SM90_STOCK(128x256x64, 128, 256, 64)\n"
                                            "CUSYNC_SM90_SWAP(16x64x128sw2, 16, 64, 128, 2, 0, 0, 1)\n")
    assert tiles == (sm90.Tile("128x128x64", 128, 128, 64),) and stock == (sm90.StockTile("128x256x64", 128, 256, 64),)
    assert swap == (sm90.SwapTile("16x64x128sw2", 16, 64, 128, 2),)
    assert sm90.parse_configs(one + "CUSYNC_SM90_SWAP(16x64x64sw2s10, 16, 64, 64, 2, 10, 0, 1)\n")[2][0].stages == 10
    # the wide form (XA 1): X as A, 64 token rows, any multiple of 16 weight rows, clusters of one
    wide = sm90.parse_configs(one + "CUSYNC_SM90_SWAP(64x96x64xas4, 64, 96, 64, 1, 4, 1, 1)\n")[2][0]
    assert (wide.xa, wide.group, wide.stages) == (True, 96, 4)
    assert wide.fits(6144, 12288) and not wide.fits(5504, 8192) and not wide.fits(8192, 2752)
    for bad, what in (("64x96x64xa, 64, 96, 64, 2, 0, 1, 1", "CW 1"), ("32x96x64xa, 32, 96, 64, 1, 0, 1, 1", "BT 64"),
                      ("64x72x64xa, 64, 72, 64, 1, 0, 1, 1", "multiple of 16"),
                      ("64x96x64sw1, 64, 96, 64, 1, 0, 0, 1", "BW 64"),
                      ("64x64x64sw1, 64, 64, 64, 1, 0, 1, 1", "fields name it 64x64x64xa")):
        with pytest.raises(sm90.Sm90Error, match=what):
            sm90.parse_configs(one + f"CUSYNC_SM90_SWAP({bad})\n")
    # a K split over a cluster (KS > 1): 64-row tiles, clusters of the splits only, no one-launch chain
    split = sm90.parse_configs(one + "CUSYNC_SM90_SWAP(16x64x64sw1s10k2, 16, 64, 64, 1, 10, 0, 2)\n")[2][0]
    assert (split.KS, split.group, split.chains) == (2, 64, False)
    assert split.fits(3072, 8192) and not split.fits(3072 + 32, 8192) and not split.fits(3072, 64)
    assert split.fits(3072, 72) and sm90.SwapTile("64x64x64sw1", 64, 64, 64, 1).chains
    assert not sm90.SwapTile("16x64x64sw2", 16, 64, 64, 2).chains and not wide.chains
    for bad, what in (("16x64x64sw2k2, 16, 64, 64, 2, 0, 0, 2", "CW 1"),
                      ("64x96x64sw1k2, 64, 96, 64, 1, 0, 0, 2", "BW 64"),
                      ("64x96x64xak2, 64, 96, 64, 1, 0, 1, 2", "no split"),
                      ("16x64x64sw1k9, 16, 64, 64, 1, 0, 0, 9", "2-8 CTAs"),
                      ("16x64x64sw1, 16, 64, 64, 1, 0, 0, 2", "fields name it 16x64x64sw1k2")):
        with pytest.raises(sm90.Sm90Error, match=what):
            sm90.parse_configs(one + f"CUSYNC_SM90_SWAP({bad})\n")
    with pytest.raises(sm90.Sm90Error, match="x.def:2: not a CUSYNC_SM90_SWAP line"):
        sm90.parse_configs(one + "CUSYNC_SM90_SWAP(64x96x64xa, 64, 96, 64, 1, 0, 2, 1)\n", "x.def")
    with pytest.raises(sm90.Sm90Error, match="fields name it 32x64x128sw2"):
        sm90.parse_configs(one + "CUSYNC_SM90_SWAP(16x64x128sw2, 32, 64, 128, 2, 0, 0, 1)\n")
    with pytest.raises(sm90.Sm90Error, match="fields name it 16x64x64sw2s6"):
        sm90.parse_configs(one + "CUSYNC_SM90_SWAP(16x64x64sw2, 16, 64, 64, 2, 6, 0, 1)\n")
    with pytest.raises(sm90.Sm90Error, match="x.def:2: swap config 12x64x64sw2: BT a multiple of 8"):
        sm90.parse_configs(one + "CUSYNC_SM90_SWAP(12x64x64sw2, 12, 64, 64, 2, 0, 0, 1)\n", "x.def")
    with pytest.raises(sm90.Sm90Error, match="x.def:2: not a CUSYNC_SM90_SWAP line"):
        sm90.parse_configs(one + "CUSYNC_SM90_SWAP(16x64x64sw2, 16, 64, 64, 2, 0)\n", "x.def")
    with pytest.raises(sm90.Sm90Error, match="a swap config is listed twice"):
        sm90.parse_configs(one + "CUSYNC_SM90_SWAP(16x64x64sw2, 16, 64, 64, 2, 0, 0, 1)\n" * 2)
    assert sm90.parse_configs("CUSYNC_SM90_TILE(64x128x64pp, 64, 128, 64, 1, 0)\n")[0][0].pingpong
    with pytest.raises(sm90.Sm90Error, match="its fields name it 128x256x64"):
        sm90.parse_configs("CUSYNC_SM90_TILE(128x128x64, 128, 256, 64, 0, 0)\n")
    with pytest.raises(sm90.Sm90Error, match="fields name it 128x128x64tma"):
        sm90.parse_configs("CUSYNC_SM90_TILE(128x128x64, 128, 128, 64, 0, 64)\n")
    with pytest.raises(sm90.Sm90Error, match="x.def:2: not a CUSYNC_SM90_TILE line"):
        sm90.parse_configs("\nCUSYNC_SM90_TILE(128x128x64, 128, 128)\n", "x.def")
    with pytest.raises(sm90.Sm90Error, match="listed twice"):
        sm90.parse_configs(one + one)


# ---- the struct layouts, the constants ----

def _exported_on_host(tmp_path) -> dict:
    prints = "\n".join(f'  dump("{n}", cusync_abi_{n}, cusync_abi_{n}_len);' for n in sm90.STRUCTS)
    out = _host_run(tmp_path, r"""
#include <cstdio>
#include "abi.h"
static void dump(const char* name, const long long* v, int n) {
  std::printf("%s", name);
  for (int i = 0; i < n; ++i) std::printf(" %lld", v[i]);
  std::printf("\n");
}
int main() {
%DUMPS%
}
""".replace("%DUMPS%", prints))
    return {line.split()[0]: [int(v) for v in line.split()[1:]] for line in out.splitlines()}


def test_the_exported_layouts_are_the_ctypes_mirrors(tmp_path):
    layouts = _exported_on_host(tmp_path)
    assert set(layouts) == set(sm90.STRUCTS)
    lib.check_layouts(layouts)
    assert layouts["CusyncSm90Gemm"][0] == ctypes.sizeof(sm90.Gemm)


def test_a_mirror_that_differs_is_named_by_its_field(tmp_path):
    layouts = _exported_on_host(tmp_path)
    moved = dict(layouts, CusyncSm90Gemm=layouts["CusyncSm90Gemm"][:9] + [v + 4 for v in layouts["CusyncSm90Gemm"][9:]])
    with pytest.raises(abi.AbiError, match=r"CusyncSm90Gemm\.order: at offset 44 on the host, 48 in the kernels"):
        lib.check_layouts(moved)
    grown = dict(layouts, CusyncSm90Debug=[layouts["CusyncSm90Debug"][0] + 4] + layouts["CusyncSm90Debug"][1:] + [44])
    with pytest.raises(abi.AbiError, match="CusyncSm90Debug: the kernels' struct has 15 fields, the host's 14"):
        lib.check_layouts(grown)


def _c_enum(text: str, prefix: str) -> dict:
    return {m.group(1): int(m.group(2)) for m in re.finditer(rf"\b{prefix}(\w+)\s*=\s*(\d+)", text)}


def test_the_constants_are_the_c_headers():
    api = (SRC / "sm90_api.h").read_text()
    assert _c_enum(api, "CUSYNC_SM90_EPI_") == {e.name: e.value for e in sm90.Epilogue}
    assert _c_enum(api, "CUSYNC_SM90_STORE_") == {e.name: e.value for e in sm90.Store}
    flags = {k: v for k, v in _c_enum(api, "CUSYNC_SM90_").items() if k.startswith("PDL_")}
    assert flags == {f.name: f.value for f in sm90.LaunchFlag if f.value}
    stage = (SRC.parent / "cusync" / "stage.h").read_text()
    names = {"kCustomOrder": "CUSTOM_ORDER", "kPdlTrigger": "PDL_TRIGGER", "kPdlWait": "PDL_WAIT"}
    assert {names[k]: v for k, v in _c_enum(stage, "").items() if k in names} == {
        f.name: f.value for f in chain.StageFlag if f.value}


def test_the_two_flag_sets_are_kept_apart():
    # the same bit means other things to the SM80 kernels and to the sm90 library
    assert chain.StageFlag.PDL_TRIGGER.value == sm90.LaunchFlag.PDL_WAIT.value
    assert chain.StageFlag.PDL_TRIGGER != sm90.LaunchFlag.PDL_WAIT
    with pytest.raises(TypeError):
        chain.StageFlag.PDL_TRIGGER | sm90.LaunchFlag.PDL_WAIT
    with pytest.raises(sm90.Sm90Error, match="a LaunchFlag"):
        sm90.Plan("128x128x64", [], flags=2)


def test_plan_flags_of_every_step():
    def flags(cfg, n=2):
        return [sm90.plan_flags(s) for s in chain.steps(cfg, n)]
    L = sm90.LaunchFlag
    assert flags(STREAM_SYNC) == [L.NONE, L.NONE]
    assert flags(PDL_ALONE) == [L.PDL_TRIGGER, L.PDL_LAUNCH | L.PDL_WAIT]
    assert flags(Config("RowSync", Ordering.PDL)) == [L.PDL_TRIGGER, L.PDL_LAUNCH]
    assert flags(Config("TileSync", Ordering.PDL), 3) == [L.PDL_TRIGGER, L.PDL_LAUNCH | L.PDL_TRIGGER, L.PDL_LAUNCH]
    assert flags(Config("RowSync", Ordering.PERSISTENT)) == [L.NONE, L.NONE]
    with pytest.raises(sm90.Sm90Error, match="one stream"):
        flags(Config("RowSync", Ordering.WAITKERNEL))


# ---- the source hash ----

def test_the_source_hash_covers_what_the_library_includes():
    files = {str(p.relative_to(SRC.parent)) for p in lib.source_files()}
    assert {"sm90/configs.def", "sm90/api.cu", "sm90/config.cu", "sm90/sync_gemm.cuh", "sm90/abi.h",
            "kernels/abi_layout.h"} <= files
    assert "kernels/gemm.cuh" not in files   # the SM80 kernels are not the library's
    assert re.fullmatch(r"[0-9a-f]{20}", sm90.source_hash())


def test_the_build_command_prints_a_prebuilt_library_and_refuses_a_missing_one(tmp_path, monkeypatch, capsys):
    from cusyncgen.commands import sm90 as command
    prebuilt = tmp_path / "libcusync_sm90.so"
    prebuilt.write_bytes(b"")
    monkeypatch.setenv(lib.LIB_ENV, str(prebuilt))
    assert command.main(["path"]) == 0 and capsys.readouterr().out.strip() == str(prebuilt)
    assert not (tmp_path / W.DESCRIPTORS).exists()
    monkeypatch.setenv(lib.LIB_ENV, str(tmp_path / "missing.so"))
    assert command.main(["build"]) == 1 and "missing.so does not exist" in capsys.readouterr().err


# ---- the loader and the plans, through api.cu and stub tile configurations ----

STUB = r"""
// Stub tile configurations: each plan_<NAME> records what it was given; no kernel, no CUTLASS.
#include <cstring>
#include <vector>
#include "plan.h"

namespace {
struct Rec {
  char config[32];
  int n, flags, has_ticket, has_debug;
  long long timeout;
  CusyncSm90Gemm gemms[4];
};
std::vector<Rec> recs;
struct StubPlan : cusync_sm90::PlanBase {
  int launch(cudaStream_t) override { return 0; }
};
int record(const char* name, const CusyncSm90Gemm* g, int n, unsigned long long* ticket, int flags, long long timeout,
           CusyncSm90Debug* debug, cusync_sm90::PlanBase** out) {
  if (n < 1 || n > 4) return CUSYNC_SM90_BAD_ARGUMENT;
  Rec r{};
  std::strncpy(r.config, name, sizeof(r.config) - 1);
  r.n = n, r.flags = flags, r.has_ticket = ticket != nullptr, r.has_debug = debug != nullptr, r.timeout = timeout;
  for (int i = 0; i < n; ++i) r.gemms[i] = g[i];
  recs.push_back(r);
  *out = new StubPlan;
  (*out)->grid = 1;
  return 0;
}
}  // namespace

namespace cusync_sm90 {
#define CUSYNC_SM90_TILE(NAME, BM, BN, BK, PP, EPI)                                                             \
  int plan_##NAME(const CusyncSm90Gemm* g, int n, unsigned long long* t, int, int flags, long long timeout,      \
                  CusyncSm90Debug* d, PlanBase** out) {                                                          \
    return record(#NAME, g, n, t, flags, timeout, d, out);                                                       \
  }
#define CUSYNC_SM90_STOCK(NAME, BM, BN, BK) \
  int stock_##NAME(int, const void*, const void*, void*, int, int, int, int, int, cudaStream_t) { return 0; }
#define CUSYNC_SM90_SWAP(NAME, BT, BW, BK, CW, S, XA, KS)                                                       \
  int swap_##NAME(int e, const void*, const void*, void*, int, int N, int, int, int, cudaStream_t) {             \
    return e > CUSYNC_SM90_EPI_GELU_TANH && e != CUSYNC_SM90_EPI_SWIGLU_ROWS ? CUSYNC_SM90_BAD_ARGUMENT          \
           : N % (BW * CW)                                                 ? CUSYNC_SM90_BAD_SHAPE              \
                                                                           : 0;                                 \
  }                                                                                                             \
  int swap_##NAME##_mlp(int e, const void*, const void*, void*, const void*, void*, int, int N1, int, int N2, int,   \
                        int, uint32_t* sync, long long, cudaStream_t) {                                         \
    return e > CUSYNC_SM90_EPI_GELU_TANH && e != CUSYNC_SM90_EPI_SWIGLU_ROWS ? CUSYNC_SM90_BAD_ARGUMENT          \
           : sync == nullptr                                               ? CUSYNC_SM90_BAD_ARGUMENT           \
           : XA || KS > 1                                                  ? CUSYNC_SM90_BAD_CONFIG             \
           : N1 % BW || N2 % BW                                            ? CUSYNC_SM90_BAD_SHAPE              \
                                                                           : 0;                                 \
  }
#include "configs.def"
}  // namespace cusync_sm90

// the prompt's FMHA (fmha.cu): not built into the stub; every call "not supported"
extern "C" int cusync_sm90_fmha(const void*, void*, float*, int, int, int, int, int, int, void*) { return 1; }
extern "C" int cusync_sm90_fmha_heads(const void*, const void*, const void*, void*, float*, int, int, int, int, int,
                                      int, void*) { return 1; }
// the synchronized one: its argument check (fmha.cu's), then "not supported"
extern "C" int cusync_sm90_fmha_sync(const void*, void*, float*, int, int, int S, int, int, int,
                                     const CusyncSm90FmhaSync* sy, void*) {
  if (sy == nullptr || (sy->in_sems != nullptr && (sy->ticket == nullptr || sy->in_tile_m <= 0)) ||
      (sy->out_sems != nullptr && S % CUSYNC_SM90_FMHA_O_ROWS != 0))
    return 6;
  return 1;
}

extern "C" int stub_count(void) { return static_cast<int>(recs.size()); }
extern "C" void stub_clear(void) { recs.clear(); }
extern "C" const char* stub_get(int i, int* n, int* flags, int* ticket, int* debug, long long* timeout,
                                CusyncSm90Gemm* gemms) {
  const Rec& r = recs[i];
  *n = r.n, *flags = r.flags, *ticket = r.has_ticket, *debug = r.has_debug, *timeout = r.timeout;
  for (int k = 0; k < r.n; ++k) gemms[k] = r.gemms[k];
  return r.config;
}
"""


def _stub_library(folder, source_hash: str):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH")
    (folder / "stub.cu").write_text(STUB)
    out = folder / "libstub.so"
    cmd = [nvcc, "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-cudart", "static", f"-I{SRC}", f"-I{SRC.parent}",
           f"-DCUSYNC_SM90_SOURCE_HASH={source_hash}", str(SRC / "api.cu"), str(folder / "stub.cu"), "-o", str(out)]
    subprocess.run(cmd, check=True, capture_output=True)
    return out


@pytest.fixture(scope="module")
def stub_lib(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sm90stub")
    return _stub_library(folder, sm90.source_hash()), folder


class _Tensor:
    _next = [0x100000]

    def __init__(self, n):
        self.n = n
        self.ptr = _Tensor._next[0]
        _Tensor._next[0] += 0x10000

    def data_ptr(self):
        return self.ptr

    def cpu(self):
        return self

    def tolist(self):
        return [0] * self.n


@pytest.fixture()
def loaded(stub_lib, monkeypatch):
    """The stub library as `library()`, and a stand-in for torch's allocations."""
    path, _ = stub_lib
    monkeypatch.setenv(lib.LIB_ENV, str(path))
    lib.library_path.cache_clear()
    lib.library.cache_clear()
    fake_torch = types.SimpleNamespace(device=lambda name: name, int32="int32", int64="int64",
                                       zeros=lambda n, dtype=None, device=None: _Tensor(n))
    monkeypatch.setattr(launch, "torch", fake_torch)
    loaded = lib.library()
    loaded.dll.stub_get.restype = ctypes.c_char_p
    loaded.dll.stub_clear()
    yield loaded
    lib.library_path.cache_clear()
    lib.library.cache_clear()


def _recorded(loaded) -> list:
    d = loaded.dll
    out = []
    for i in range(d.stub_count()):
        n, flags, ticket, debug, timeout = (ctypes.c_int(), ctypes.c_int(), ctypes.c_int(), ctypes.c_int(),
                                            ctypes.c_longlong())
        gemms = (sm90.Gemm * 4)()
        name = d.stub_get(i, *(ctypes.byref(v) for v in (n, flags, ticket, debug, timeout)), gemms).decode()
        out.append(types.SimpleNamespace(config=name, flags=sm90.LaunchFlag(flags.value), ticket=bool(ticket.value),
                                         debug=bool(debug.value), timeout=timeout.value, gemms=list(gemms)[:n.value]))
    d.stub_clear()
    return out


@pytest.mark.nvcc
def test_the_loader_reads_the_tables_and_checks_the_layouts(loaded):
    assert loaded.configs == sm90.CONFIGS and loaded.stock_configs == sm90.STOCK_CONFIGS
    assert loaded.source_hash == sm90.source_hash()
    sm90.stock_gemm("128x256x64", 2, 1, 2, 3, 256, 256, 256)   # the stub's: 0
    with pytest.raises(sm90.Sm90Error, match="no stock reference '64x128x64'"):
        sm90.stock_gemm("64x128x64", 1, 1, 2, 3, 256, 256, 256)
    assert loaded.swap_configs == sm90.SWAP_CONFIGS
    sm90.swap_gemm("16x64x128sw1", sm90.EPI_GELU_TANH, 1, 2, 3, 16, 256, 256)   # the stub's: 0
    sm90.swap_gemm("16x64x128sw1", sm90.EPI_SWIGLU_ROWS, 1, 2, 3, 16, 256, 256)
    sm90.swap_mlp("16x64x128sw1", sm90.EPI_SWIGLU_ROWS, 1, 2, 3, 4, 5, 16, 256, 256, 128, sync=6)   # the stub's: 0
    with pytest.raises(sm90.Sm90Error, match=r"swapped MLP chain 16x64x128sw1 \(M = 16, 256 x 256 then 96 x 128\): "
                                             "shape not supported"):
        sm90.swap_mlp("16x64x128sw1", sm90.EPI_SWIGLU_ROWS, 1, 2, 3, 4, 5, 16, 256, 256, 96, sync=6)
    with pytest.raises(sm90.Sm90Error, match="no swapped GeMM '64x128x64'"):
        sm90.swap_mlp("64x128x64", sm90.EPI_IDENTITY, 1, 2, 3, 4, 5, 16, 256, 256, 128, sync=6)
    # the wide form: a GeMM of 96-row groups, no one-launch chain
    sm90.swap_gemm("64x96x64xa", sm90.EPI_SWIGLU_ROWS, 1, 2, 3, 64, 192, 256)   # the stub's: 0
    with pytest.raises(sm90.Sm90Error, match=r"swapped GeMM 64x96x64xa \(64 x 256 x 256\): shape not supported"):
        sm90.swap_gemm("64x96x64xa", sm90.EPI_IDENTITY, 1, 2, 3, 64, 256, 256)
    with pytest.raises(sm90.Sm90Error, match="the one-launch chain runs on the swapped tiles of one CTA, not the wide"):
        sm90.swap_mlp("64x96x64xa", sm90.EPI_IDENTITY, 1, 2, 3, 4, 5, 64, 192, 256, 192, sync=6)
    # a K split over a cluster: a GeMM, no one-launch chain
    sm90.swap_gemm("16x64x64sw1s10k2", sm90.EPI_IDENTITY, 1, 2, 3, 16, 192, 256)   # the stub's: 0
    with pytest.raises(sm90.Sm90Error, match="or a K split over a cluster"):
        sm90.swap_mlp("16x64x64sw1s10k2", sm90.EPI_IDENTITY, 1, 2, 3, 4, 5, 16, 192, 256, 192, sync=6)
    assert sm90.chain_timed_out([0] * sm90.CHAIN_SYNC_WORDS, "c") == ""
    assert "tile 41 of the launch" in sm90.chain_timed_out([0, 0, 0, 0, 0, 42, 3, 0], "c")
    with pytest.raises(sm90.Sm90Error, match=r"swapped GeMM 16x64x128sw1 \(16 x 96 x 256\): shape not supported"):
        sm90.swap_gemm("16x64x128sw1", sm90.EPI_IDENTITY, 1, 2, 3, 16, 96, 256)
    with pytest.raises(sm90.Sm90Error, match="bad argument"):
        sm90.swap_gemm("16x64x128sw1", sm90.EPI_SWIGLU_PAIR, 1, 2, 3, 16, 256, 256)
    with pytest.raises(sm90.Sm90Error, match="no swapped GeMM '64x128x64'"):
        sm90.swap_gemm("64x128x64", sm90.EPI_IDENTITY, 1, 2, 3, 16, 256, 256)


@pytest.mark.nvcc
def test_a_library_of_other_sources_is_refused_unless_asked(tmp_path, monkeypatch):
    other = _stub_library(tmp_path, "0123456789abcdef0123")
    monkeypatch.delenv(lib.UNCHECKED_ENV, raising=False)
    with pytest.raises(sm90.Sm90Error) as err:
        sm90.Library(other)
    msg = str(err.value)
    assert "built from other sources" in msg and "0123456789abcdef0123" in msg and sm90.source_hash() in msg
    assert "CUSYNC_SM90_LIB_UNCHECKED=1" in msg and "\n" not in msg
    monkeypatch.setenv(lib.UNCHECKED_ENV, "1")
    assert sm90.Library(other).source_hash == "0123456789abcdef0123"


def _chain_of(cfg, c1="128x128x64", c2=None, model="gpt3", M=200, splits="none"):
    """An MLP chain over made-up device pointers, its plans made by the loaded (stub) library."""
    tiles = W.Sm90Tiles(c1, config2=c2)
    return W.mlp_chain(model, M, cfg, tiles, (0x1000, 0x2000, 0x3000, 0x4000, 0x5000), splits=splits,
                       timeout_ns=123)


@pytest.mark.nvcc
@pytest.mark.parametrize("cfg", W.configs_for(("none", "auto")), ids=lambda c: c.name)
def test_every_sm90_configuration_crosses_the_c_interface_as_decoded(loaded, cfg):
    """What plan_create receives for each configuration: the launches chain.steps decodes (one plan
    per GeMM, or one for both in the chain), the library's flags of each, the semaphores the
    producer posts and the consumer waits on (the policy named by the Config), the tickets and the
    debug record of the plans that wait."""
    ch = _chain_of(cfg)
    recs = _recorded(loaded)
    pdl = cfg.ordering in (Ordering.PDL, Ordering.PDL_ALONE)
    L = sm90.LaunchFlag
    if cfg.ordering == Ordering.PERSISTENT:
        assert [(r.config, len(r.gemms), r.flags) for r in recs] == [("128x128x64", 2, L.NONE)]
        g1, g2 = recs[0].gemms
    else:
        assert [(r.config, len(r.gemms)) for r in recs] == [("128x128x64", 1), ("128x128x64", 1)]
        assert [r.flags for r in recs] == [L.PDL_TRIGGER if pdl else L.NONE, (
            L.PDL_LAUNCH | L.PDL_WAIT if cfg.ordering == Ordering.PDL_ALONE else L.PDL_LAUNCH if pdl else L.NONE)]
        g1, g2 = recs[0].gemms[0], recs[1].gemms[0]
    assert (g1.A, g1.B, g1.C, g2.A, g2.B, g2.C) == (0x1000, 0x2000, 0x4000, 0x4000, 0x3000, 0x5000)
    assert (g1.M, g1.N, g1.K, g2.N, g2.K) == (200, 6144, 12288, 12288, 6144)
    assert (g1.epilogue, g2.epilogue) == (sm90.EPI_GELU_TANH, sm90.EPI_IDENTITY)
    waits = cfg.policy is not None
    assert bool(g1.out_sems) == bool(g2.in_sems) == waits and not g1.in_sems and not g2.out_sems
    waiting = recs[-1]
    assert (waiting.ticket, waiting.debug, waiting.timeout) == ((True, True, 123) if waits else (False, False, 0))
    if waits:
        pol = W.compiled_mlp("gpt3", 200, "128x128x64")[0][cfg.policy]
        assert g1.out_sems == g2.in_sems == ch.sems[0].data_ptr()
        assert bytes(g2.in_policy) == bytes(g1.out_policy) == bytes(sm90.policy_desc(pol))
        assert (g2.in_tile_n, g2.in_tile_m) == (128, 128)
        assert len(recs) == 1 or not recs[0].ticket   # only the consumer's plan waits
    want_splits = W.mlp_splits("gpt3", 200, "128x128x64", cfg.splits)
    assert [(g.splits, g.split_from) for g in (g1, g2)] == [tuple(s) for s in want_splits]


@pytest.mark.nvcc
def test_per_gemm_tiles_swiglu_and_the_refused_chain(loaded):
    _chain_of(Config("RowSync", Ordering.PDL), "64x128x64", "256x128x64")
    p, c = _recorded(loaded)
    assert (p.config, c.config) == ("64x128x64", "256x128x64")
    assert (c.gemms[0].in_tile_n, c.gemms[0].in_tile_m) == (128, 64)   # the producer's tile, not its own
    _chain_of(Config("TileSync", Ordering.PERSISTENT), "128x128x64", model="llama-ep")
    (r,) = _recorded(loaded)
    g1, g2 = r.gemms
    assert g1.epilogue == sm90.EPI_SWIGLU_PAIR and g1.ldc == 2752 and g2.in_tile_n == 64   # the pair's output width
    with pytest.raises(sm90.Sm90Error, match="one tile config: 64x128x64 and 256x128x64"):
        _chain_of(Config("RowSync", Ordering.PERSISTENT), "64x128x64", "256x128x64")
    with pytest.raises(sm90.Sm90Error, match="no waitkernel ordering"):
        _chain_of(Config("RowSync", Ordering.WAITKERNEL))
    with pytest.raises(sm90.Sm90Error, match="no policy StridedSync"):
        _chain_of(Config("StridedSync", Ordering.PDL))
    for ordering in (Ordering.PDL, Ordering.PERSISTENT):   # no semaphores and no grid-wide wait: a race
        with pytest.raises(sm90.Sm90Error, match=f"the {ordering.value} ordering synchronizes on tiles"):
            _chain_of(Config(None, ordering))
    assert not _recorded(loaded)   # nothing refused reached the library
    assert {c.ordering for c in W.configs_for()} == SM90_ORDERINGS


def test_the_fmha_entry_names_the_shape_it_refuses(loaded):
    with pytest.raises(sm90.Sm90Error, match="FMHA B=1 H=8 S=296 causal: the shape is not supported"):
        sm90.fmha(0, 0, 0, 1, 8, 296, True, 132)
    with pytest.raises(sm90.Sm90Error, match="FMHA B=2 H=12 S=100: the shape is not supported"):
        sm90.fmha_heads(0, 0, 0, 0, 0, 2, 12, 100, False, 132)
    with pytest.raises(sm90.Sm90Error, match="FMHA schedule 'stream-k': one of cooperative, pingpong"):
        sm90.fmha(0, 0, 0, 1, 12, 512, False, 132, schedule="stream-k")
    sync = sm90.FmhaSync()
    sync.in_sems, sync.in_tile_m, sync.in_tile_n = 64, 128, 128   # tile waits without a ticket
    with pytest.raises(sm90.Sm90Error, match="FMHA B=1 H=8 S=512: bad synchronization arguments"):
        sm90.fmha_sync(0, 0, 0, 1, 8, 512, False, 132, sync)
    sync = sm90.FmhaSync()
    sync.out_sems = 64                                             # O's 64-row tiles do not fit S = 520
    with pytest.raises(sm90.Sm90Error, match="bad synchronization arguments"):
        sm90.fmha_sync(0, 0, 0, 1, 8, 520, False, 132, sync)
    assert not _recorded(loaded)


def test_the_fmha_schedule_follows_the_measurement():
    assert sm90.fmha_schedule(1, 2048, True) == sm90.fmha_schedule(1, 4096, True) == "cooperative"
    assert {sm90.fmha_schedule(B, S, c) for B, S, c in ((1, 1024, True), (4, 1024, True), (1, 4096, False),
                                                        (4, 1024, False))} == {"pingpong"}


def test_the_chain_sync_words_match_the_header():
    import re
    header = (sm90.source_dir() / "sm90_api.h").read_text()
    assert int(re.search(r"#define CUSYNC_SM90_CHAIN_SYNC_WORDS (\d+)", header).group(1)) == sm90.CHAIN_SYNC_WORDS
    chain = (sm90.source_dir() / "swap_chain.cuh").read_text()   # where its words sit
    assert (sm90.desc.CHAIN_TIMED_OUT, sm90.desc.CHAIN_SEEN) == (5, 6) and "kMaxRows = 4" in chain
