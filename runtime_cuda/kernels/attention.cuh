// Attention kernels with CuSync hooks (header-only): the glue that lets the GeMM of gemm.cuh compute
// the QKV, P = Q K^T and output GeMMs per head, the T = R V kernel (WMMA tensor cores), and a
// stage that picks one of several generated CuStage types at run time (one compiled GeMM per role
// instead of one per policy).
//
// Layouts (fp16, row-major):  NH heads of Dh columns per GPU, D = NH * Dh = H/8.
//   cache [cap * B, 3D]: row s * B + b holds XQKV of token s of request b (Q | K | V, head-major
//         inside each); rows s < Sp are the KV cache, the QKV GeMM writes rows Sp*B .. (Sp+S)*B-1
//         (tokens in the order the GeMM's rows have: B = 1 or S = 1), rows >= (Sp+S)*B are zero
//         padding up to cap = Npad keys.
//   P, R  [Z = B * NH, S, Npad]: z = b * NH + h.
//   T     [B * S, D]: head h in columns h*Dh .. h*Dh + Dh - 1.
#pragma once

#include <mma.h>
#include <kernels/gemm.cuh>
#include <kernels/softmax.cuh>
#include <cusync/cusync.h>

namespace cusync_kernels {

struct AttnGeo {
  half* cache;
  half* P;
  half* R;
  half* T;
  int B, S, Sp, NH, Dh, ld3, Npad, ldT;
  // causal prompt (Sp = 0, key tiles as tall as query row tiles): query row r reads keys <= r, so
  // P tiles above the diagonal are not computed and R.V stops at the row tile's last key
  int causal;
  // T = R V split over keys (token generation; the stage's splits() > 1): splitk.cuh's fp32
  // partials and per-tile counters
  float* rv_ws;
  unsigned* rv_counters;
};
CUSYNC_EXPORT_ABI(AttnGeo, AttnGeo, cache, P, R, T, B, S, Sp, NH, Dh, ld3, Npad, ldT, causal, rv_ws, rv_counters)

// One of several stage types, chosen by `which` (uniform over the grid) at run time.
template <class... S>
struct StageSwitch;
template <class S0>
struct StageSwitch<S0> {
  S0 s;
  __device__ __forceinline__ void init(const cusync::StageArgs& a, int) { s = S0(a); }
  // Does the selected stage wait at all? (The plain stage of StreamSync does not: its adapters
  // then skip the scan of the generated wait lists.)
  __device__ __forceinline__ bool waits(int) const { return S0::waits; }
  __device__ __forceinline__ int splits(int) const { return s.splits(); }
  __device__ __forceinline__ int split(int) const { return s.split(); }
  __device__ __forceinline__ cusync::Tile start(int, int waiter = 0) { return s.start(waiter); }
  template <int I>
  __device__ __forceinline__ void wait(int, cusync::Tile t) { s.template wait<I>(t); }
  template <int L, class Needs>
  __device__ __forceinline__ void serve(int, int num_units, uint32_t* ready, Needs needs) {
    s.template serve<L>(num_units, ready, needs);
  }
  __device__ __forceinline__ void post(int, cusync::Tile t) { s.post(t); }
  __device__ __forceinline__ void post_synced(int, cusync::Tile t) { s.post_synced(t); }
#if defined(CUSYNC_TIMELINE)
  __device__ __forceinline__ void note_wait(int, long long t) { s.note_wait(t); }
#endif
};
template <class S0, class S1, class... Rest>
struct StageSwitch<S0, S1, Rest...> {
  S0 s;
  StageSwitch<S1, Rest...> rest;
  __device__ __forceinline__ void init(const cusync::StageArgs& a, int w) {
    if (w == 0) s = S0(a); else rest.init(a, w - 1);
  }
  __device__ __forceinline__ bool waits(int w) const { return w == 0 ? S0::waits : rest.waits(w - 1); }
  __device__ __forceinline__ int splits(int w) const { return w == 0 ? s.splits() : rest.splits(w - 1); }
  __device__ __forceinline__ int split(int w) const { return w == 0 ? s.split() : rest.split(w - 1); }
  __device__ __forceinline__ cusync::Tile start(int w, int waiter = 0) {
    return w == 0 ? s.start(waiter) : rest.start(w - 1, waiter);
  }
  template <int I>
  __device__ __forceinline__ void wait(int w, cusync::Tile t) {
    if (w == 0) s.template wait<I>(t); else rest.template wait<I>(w - 1, t);
  }
  template <int L, class Needs>
  __device__ __forceinline__ void serve(int w, int num_units, uint32_t* ready, Needs needs) {
    if (w == 0) s.template serve<L>(num_units, ready, needs); else rest.template serve<L>(w - 1, num_units, ready, needs);
  }
  __device__ __forceinline__ void post(int w, cusync::Tile t) {
    if (w == 0) s.post(t); else rest.post(w - 1, t);
  }
  __device__ __forceinline__ void post_synced(int w, cusync::Tile t) {
    if (w == 0) s.post_synced(t); else rest.post_synced(w - 1, t);
  }
#if defined(CUSYNC_TIMELINE)
  __device__ __forceinline__ void note_wait(int w, long long t) {
    if (w == 0) s.note_wait(t); else rest.note_wait(w - 1, t);
  }
#endif
};

// The selected stage with the CuStage interface (start / wait / wait<1> / post).
template <class Sw>
struct SwitchRef {
  Sw* sw;
  int which;
  __device__ __forceinline__ cusync::Tile start() { return sw->start(which); }
  template <int I = 0>
  __device__ __forceinline__ void wait(cusync::Tile t) { sw->template wait<I>(which, t); }
  __device__ __forceinline__ void post(cusync::Tile t) { sw->post(which, t); }
  __device__ __forceinline__ int splits() const { return sw->splits(which); }
  __device__ __forceinline__ int split() const { return sw->split(which); }
};

// QKV GeMM: X [B*S, H] . Wqkv[3D, H]^T -> cache rows Sp*B..; nothing to wait for. In token
// generation (M = B rows) its tiles are split over K (splits(): gemm.cuh's split-K path), as the
// output GeMM's (OutStage) and T = R V's (attn_rv_device).
template <class Sw>
struct QkvStage {
  Sw* sw;
  int which;
  GemmArgs* args;
  const AttnGeo* g;
  __device__ __forceinline__ cusync::Tile start() { return sw->start(which); }
  __device__ __forceinline__ void wait(cusync::Tile) {}
  __device__ __forceinline__ void post(cusync::Tile t) { sw->post(which, t); }
  __device__ __forceinline__ int splits() const { return sw->splits(which); }
  __device__ __forceinline__ int split() const { return sw->split(which); }
};

// The sync warp of an adapter stage (gemm.cuh with SyncWarp): every k-block of the P GeMM needs the
// same producer tiles, so all 32 lanes poll them together (one unit at a time).
template <class Waits>
struct SameTilesEveryUnit {
  cusync::Tile self;
  __device__ __forceinline__ bool operator()(int, int i, cusync::Tile& pt) const {
    if (i >= Waits::count(self)) return false;
    pt = Waits::tile(self, i);
    return true;
  }
};

// k-block kt of the output GeMM reads the T columns of head kt*BK/Dh: the i-th tile of the
// generated list whose z is that head's (one per request).
template <class Waits, int BK>
struct HeadTilesOfUnit {
  cusync::Tile self;
  int NH, Dh;
  __device__ __forceinline__ bool operator()(int kt, int i, cusync::Tile& pt) const {
    const int head = kt * BK / Dh;
    const int n = Waits::count(self);
    for (int j = 0; j < n; ++j) {
      const cusync::Tile p = Waits::tile(self, j);
      if (p.z % NH == head && i-- == 0) {
        pt = p;
        return true;
      }
    }
    return false;
  }
};

// P = Q_h K_h^T for z = b*NH + h: the GeMM's tile (x, y) becomes (key tile, query row tile) of
// head-batch z, its operands the head's columns of the cache.  The GeMM calls wait once (its
// ProdBN is K = Dh): every g1 tile of the generated list (Waits = depQK_g1_waits).
template <class Sw, class Waits>
struct PStage {
  Sw* sw;
  int which;
  GemmArgs* args;
  const AttnGeo* g;
  cusync::Tile self;
  __device__ __forceinline__ cusync::Tile start(int waiter = 0) {
    self = sw->start(which, waiter);
    const int b = self.z / g->NH, h = self.z % g->NH;
    const long long ld = (long long)g->B * g->ld3;
    args->A = g->cache + ((long long)g->Sp * g->B + b) * g->ld3 + h * g->Dh;
    args->B = g->cache + (long long)b * g->ld3 + (g->NH + h) * g->Dh;
    args->C = g->P + (long long)self.z * g->S * g->Npad;
    args->lda = int(ld);
    args->ldb = int(ld);
    return self;
  }
  // causal: a key tile past the query row tile is masked whole (gemm.cuh posts it uncomputed)
  __device__ __forceinline__ bool skip(cusync::Tile t) const { return g->causal && t.x > t.y; }
  __device__ __forceinline__ void wait(cusync::Tile) {
    if (!sw->waits(which)) return;
    // CuSync: the Q and K tiles of the head (2 lines)
    for (int i = 0; i < Waits::count(self); ++i) sw->template wait<0>(which, Waits::tile(self, i));
  }
  // CuSync, sync warp: the same tiles for every k-block (1 line)
  template <int BK>
  __device__ __forceinline__ void serve_k(int k_tiles, uint32_t* ready) { sw->template serve<32>(which, k_tiles, ready, SameTilesEveryUnit<Waits>{self}); }
  __device__ __forceinline__ void post(cusync::Tile t) { sw->post(which, t); }
  __device__ __forceinline__ void post_synced(cusync::Tile t) { sw->post_synced(which, t); }
#if defined(CUSYNC_TIMELINE)
  __device__ __forceinline__ void note_wait(long long t) { sw->note_wait(which, t); }
#endif
};

// Output GeMM T [B*S, D] . Wo[H, D]^T: the GeMM waits before k-block k0 with Tile{k0/Dh, y}: the
// T tiles of head k0/Dh among the generated list (Waits = depT2_gT_waits).
template <class Sw, class Waits>
struct OutStage {
  Sw* sw;
  int which;
  GemmArgs* args;
  const AttnGeo* g;
  cusync::Tile self;
  __device__ __forceinline__ cusync::Tile start(int waiter = 0) { return self = sw->start(which, waiter); }
  // token generation: the K range (heads) split over blocks (gemm.cuh's split-K path; each block
  // waits only for the heads of its range)
  __device__ __forceinline__ int splits() const { return sw->splits(which); }
  __device__ __forceinline__ int split() const { return sw->split(which); }
  __device__ __forceinline__ void wait(cusync::Tile k) {
    // (StreamSync's plain stage: no scan of the list, which costs ~60 us per launch at B=4 on an H200)
    if (!sw->waits(which)) return;
    // CuSync: the T tiles of head k.x (3 lines)
    for (int i = 0; i < Waits::count(self); ++i) {
      const cusync::Tile p = Waits::tile(self, i);
      if (p.z % g->NH == k.x) sw->template wait<0>(which, p);
    }
  }
  // CuSync, sync warp: the T tiles of the k-block's head (1 line; 4 lanes per k-block: B <= 4)
  template <int BK>
  __device__ __forceinline__ void serve_k(int k_tiles, uint32_t* ready) {
    sw->template serve<4>(which, k_tiles, ready, HeadTilesOfUnit<Waits, BK>{self, g->NH, g->Dh});
  }
  __device__ __forceinline__ void post(cusync::Tile t) { sw->post(which, t); }
  __device__ __forceinline__ void post_synced(cusync::Tile t) { sw->post_synced(which, t); }
#if defined(CUSYNC_TIMELINE)
  __device__ __forceinline__ void note_wait(long long t) { sw->note_wait(which, t); }
#endif
};

// T = R V_h for head-batch z: block tile (0, y, z) computes rows [y*BM, y*BM+BM) x Dh = 128
// columns, K = Npad keys, WMMA 16x16x16 fp16 -> fp32, cp.async double buffer.  256 threads.
template <int BM, class StageT, class WaitsR, class WaitsV>
__device__ __forceinline__ void attn_rv_device(const AttnGeo& g, StageT& stage) {
  using namespace nvcuda;
  constexpr int BN = 128, BK = 32, THREADS = 256;
  constexpr int WM = BM == 128 ? 4 : 2, WN = 8 / WM;
  constexpr int TM = BM / WM, TN = BN / WN, FM = TM / 16, FN = TN / 16;
  constexpr int LDA = BK + 8, LDB = BN + 8;
  __shared__ __align__(128) half sA[2][BM * LDA];
  __shared__ __align__(128) half sB[2][BK * LDB];
  __shared__ __align__(128) float scratch[8][16 * 16];

  const cusync::Tile t = stage.start();
  const int splits = stage.splits(), split = stage.split();
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int b = t.z / g.NH, h = t.z % g.NH;
  const int rows_valid = min(BM, g.S - t.y * BM);
  const long long ldv = (long long)g.B * g.ld3;
  const half* gB = g.cache + (long long)b * g.ld3 + (2 * g.NH + h) * g.Dh;
  // causal: the keys up to the tile's last query row (R is zero past them, and V rows of later row
  // tiles are not waited for: never read, even as zeros' partners)
  const int KT_all = g.causal ? min(g.Npad / BK, (g.Sp + t.y * BM + rows_valid + BK - 1) / BK) : g.Npad / BK;
  // split over keys (token generation: one query row per head, thousands of keys): this block's
  // key range; the partial sums meet in splitk.cuh
  const SplitRange kr = split_range(KT_all, split, splits);
  // CuSync: the V tiles of the head, then the softmax rows (4 lines)
  for (int i = 0; i < WaitsV::count(t); ++i) stage.template wait<1>(WaitsV::tile(t, i));
  for (int i = 0; i < WaitsR::count(t); ++i) stage.template wait<0>(WaitsR::tile(t, i));

  const int wm = warp / WN, wn = warp % WN;
  const half* gA = g.R + ((long long)t.z * g.S + (long long)t.y * BM) * g.Npad;

  auto load = [&](int kt, int s) {
#pragma unroll
    for (int c = tid; c < BM * (BK / 8); c += THREADS) {
      const int r = c / (BK / 8), kc = (c % (BK / 8)) * 8;
      const bool ok = r < rows_valid;
      const half* src = gA + (ok ? (long long)r * g.Npad + kt * BK + kc : 0);
      detail::cp_async_16_zfill(uint32_t(__cvta_generic_to_shared(&sA[s][r * LDA + kc])), src, ok);
    }
#pragma unroll
    for (int c = tid; c < BK * (BN / 8); c += THREADS) {
      const int r = c / (BN / 8), nc = (c % (BN / 8)) * 8;
      const half* src = gB + (long long)(kt * BK + r) * ldv + nc;
      detail::cp_async_16_zfill(uint32_t(__cvta_generic_to_shared(&sB[s][r * LDB + nc])), src, true);
    }
    detail::cp_async_fence();
  };

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FM][FN];
#pragma unroll
  for (int i = 0; i < FM; ++i)
#pragma unroll
    for (int j = 0; j < FN; ++j) wmma::fill_fragment(acc[i][j], 0.f);

  const int KT = kr.end;
  if (kr.begin < KT) load(kr.begin, kr.begin & 1);
  for (int kt = kr.begin; kt < KT; ++kt) {
    if (kt + 1 < KT) {
      load(kt + 1, (kt + 1) & 1);
      detail::cp_async_wait<1>();
    } else {
      detail::cp_async_wait<0>();
    }
    __syncthreads();
    const half* a = sA[kt & 1];
    const half* bb = sB[kt & 1];
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa[FM];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> fb[FN];
#pragma unroll
      for (int i = 0; i < FM; ++i) wmma::load_matrix_sync(fa[i], a + (wm * TM + i * 16) * LDA + kk, LDA);
#pragma unroll
      for (int j = 0; j < FN; ++j) wmma::load_matrix_sync(fb[j], bb + kk * LDB + wn * TN + j * 16, LDB);
#pragma unroll
      for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
    }
    __syncthreads();
  }

  half* gT = g.T + ((long long)b * g.S + (long long)t.y * BM) * g.ldT + h * g.Dh;
  if (splits > 1) {
    // fp32 partial of the valid rows; the block that arrives last sums the key ranges and posts
    const long long tile = (long long)t.z * gridDim.y + t.y;
    float* slot0 = g.rv_ws + tile * splits * (BM * BN);
    float* mine = slot0 + (long long)split * (BM * BN);
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
      for (int j = 0; j < FN; ++j) {
        wmma::store_matrix_sync(scratch[warp], acc[i][j], 16, wmma::mem_row_major);
        __syncwarp();
        const int e = lane * 8, r = e / 16, c = e % 16;
        const int row = wm * TM + i * 16 + r;
        if (row < rows_valid) {
          float4* dst = reinterpret_cast<float4*>(mine + row * BN + wn * TN + j * 16 + c);
          dst[0] = *reinterpret_cast<const float4*>(&scratch[warp][e]);
          dst[1] = *reinterpret_cast<const float4*>(&scratch[warp][e + 4]);
        }
        __syncwarp();
      }
    if (!splitk_arrive(g.rv_counters + tile, splits)) return;
    splitk_reduce_store<BM, BN, THREADS>(slot0, splits, rows_valid, gT, g.ldT, EpiIdentity{}, tid);
    stage.post(t);
    return;
  }
#pragma unroll
  for (int i = 0; i < FM; ++i)
#pragma unroll
    for (int j = 0; j < FN; ++j) {
      wmma::store_matrix_sync(scratch[warp], acc[i][j], 16, wmma::mem_row_major);
      __syncwarp();
      const int e = lane * 8, r = e / 16, c = e % 16;
      const int row = wm * TM + i * 16 + r;
      if (row < rows_valid) {
        const float* s = &scratch[warp][e];
        __half2 v[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) v[q] = __floats2half2_rn(s[2 * q], s[2 * q + 1]);
        *reinterpret_cast<uint4*>(gT + (long long)row * g.ldT + wn * TN + j * 16 + c) = *reinterpret_cast<uint4*>(v);
      }
      __syncwarp();
    }
  stage.post(t);
}

}  // namespace cusync_kernels

// Kernel entry points; SW is a StageSwitch<...> type (one token: use a `using`).
#define CUSYNC_ATTN_GEMM(NAME, CFG, SW, ADAPTER)                                                  \
  extern "C" __global__ void __launch_bounds__(CFG::kBlockThreads)                                \
      NAME(cusync_kernels::GemmArgs args, cusync::StageArgs sa, int which, cusync_kernels::AttnGeo geo) { \
    extern __shared__ __align__(128) char smem[];                                                 \
    SW sw;                                                                                        \
    sw.init(sa, which);                                                                           \
    cusync_kernels::GemmArgs a = args;                                                            \
    ADAPTER st{&sw, which, &a, &geo};                                                             \
    cusync_kernels::gemm_device<CFG>(a, st, smem);                                                \
  }

// THREADS: a multiple of 32; one warp per row at a time (the rows of a warp are latency-bound:
// 32 warps ran a 128-row block of 1024 keys ~3x faster than 8 on the H200).
#define CUSYNC_ATTN_SOFTMAX(NAME, BM, THREADS, SW, WAITS)                                         \
  extern "C" __device__ const int NAME##_threads = THREADS;                                       \
  extern "C" __global__ void __launch_bounds__(THREADS)                                           \
      NAME(cusync_kernels::SoftmaxArgs args, cusync::StageArgs sa, int which) {                   \
    SW sw;                                                                                        \
    sw.init(sa, which);                                                                           \
    cusync_kernels::SwitchRef<SW> st{&sw, which};                                                 \
    cusync_kernels::softmax_dropout_device<BM, THREADS / 32, cusync_kernels::SwitchRef<SW>, WAITS>(args, st); \
  }

#define CUSYNC_ATTN_RV(NAME, BM, SW, WAITS_R, WAITS_V)                                            \
  extern "C" __global__ void __launch_bounds__(256)                                               \
      NAME(cusync_kernels::AttnGeo geo, cusync::StageArgs sa, int which) {                        \
    SW sw;                                                                                        \
    sw.init(sa, which);                                                                           \
    cusync_kernels::SwitchRef<SW> st{&sw, which};                                                 \
    cusync_kernels::attn_rv_device<BM, cusync_kernels::SwitchRef<SW>, WAITS_R, WAITS_V>(geo, st); \
  }
