// A synchronized, persistent, warp-specialized sm90 GeMM (TMA loads, wgmma, fp16 in, fp32
// accumulation, fp16 out) with the CuSync hooks.
//
// Derived from CUTLASS 4.2 (the nvidia-cutlass wheel's headers):
//   include/cutlass/gemm/kernel/sm90_gemm_tma_warpspecialized_cooperative.hpp (GemmUniversal::operator():
//     the producer warp group's mainloop DMA warp and the consumer warp groups iterating the same
//     persistent work sequence, the pipeline set-up, register reconfiguration), and
//   include/cutlass/gemm/collective/sm90_mma_tma_gmma_ss_warpspecialized.hpp (the mainloop collective,
//     wrapped by the sync layer's adaptor, cusync/sm90/mainloop.h).
// It is a composition of the Hopper sync layer (runtime_cuda/cusync/sm90.h, docs/sm90.md):
//   - the chain scheduler (cusync/sm90/scheduler.h): static striding over the work items of up to
//     kMaxGemms GeMMs in one launch, each item mapped through its GeMM's order descriptor;
//   - wait: the sync warp polls the producer tiles of each waiting item (a ColumnDeps map,
//     cusync/sm90/deps.h) and hands the load warp counts of ready k-tiles through an mbarrier ring
//     (channel.h); the adaptor issues B's (the weights') TMA, waits for the count, fences the generic
//     proxy against the async one, then issues A's TMA;
//   - post (post.h): after the register epilogue's stores and a named barrier, or after the store
//     warp's TMA stores complete, one red.release.gpu add;
//   - epoch: one ticket atomic per CTA at kernel start (cusync::launch_epoch), through shared memory.
// What this file adds is the GeMM: tile configurations, the epilogues and split-K.
#pragma once

#include <cuda.h>
#include <cuda_fp16.h>
#include <stdio.h>

#include "cutlass/cutlass.h"
#include "cute/tensor.hpp"
#include "cute/arch/cluster_sm90.hpp"
#include "cutlass/arch/reg_reconfig.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/pipeline/pipeline.hpp"

#include "cusync/debug.h"
#include "cusync/desc.h"
#include "cusync/sm90/channel.h"
#include "cusync/sm90/deps.h"
#include "cusync/sm90/mainloop.h"
#include "cusync/sm90/post.h"
#include "cusync/sm90/scheduler.h"
#include "cusync/sm90/sync_warp.h"
#include "cusync/sync.h"
#include "sm90_api.h"

namespace cusync_sm90 {
using namespace cute;

using cusync::DebugRecord;
using cusync::Tile;
using cusync::fence_proxy_async_global;
using cusync::fence_proxy_async_shared;
using cusync::sm90::bulk_wait_all;

// The TMA-store epilogue (Config::kTmaStore): stmatrix into the staging buffer, the generic-to-async
// proxy fence for shared memory, 2D bulk tensor stores and their bulk-group bookkeeping, and the
// named barriers between the consumer warp groups and the store warp.
__device__ __forceinline__ void stmatrix_x4(uint32_t smem_addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(smem_addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}
__device__ __forceinline__ void tma_store_2d(const void* map, const void* smem, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(map),
               "r"(static_cast<uint32_t>(__cvta_generic_to_shared(smem))), "r"(c0), "r"(c1)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// every bulk group of this thread done reading its shared-memory source
__device__ __forceinline__ void bulk_wait_read_all() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
// The non-.aligned barrier forms: the consumer warp groups and the store warp meet at the same
// barrier from different instructions (bar.sync / bar.arrive are barrier.*.aligned, which requires
// every participating thread to execute the same instruction; synccheck reports the mix). The warp
// reconverges first all the same.
__device__ __forceinline__ void named_bar_sync(int id, int threads) {
  __syncwarp();
  asm volatile("barrier.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(int id, int threads) {
  __syncwarp();
  asm volatile("barrier.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// ---- configurations ------------------------------------------------------------------------------
// BM >= 128 without PingPong: the cooperative schedule's TiledMma (two consumer warp groups split
// M); otherwise the ping-pong schedule's TiledMma (one warp group per tile, its 64-row wgmma atom
// repeated down a 128-row tile), run by one consumer warp group (BM = 64), or, with PingPong, by two
// consumer warp groups on alternate work items of the CTA (CUTLASS's ping-pong kernel: their MMA
// phases strictly alternate through an ordered barrier, so one warp group's epilogue, split-K
// reduction and post overlap the other's MMA).
//
// TmaStore (EpiCols > 0): the TMA-store epilogue. The consumer warp groups write EpiCols columns of
// the tile at a time (fusion, fp16, stmatrix) into a staging buffer in shared memory and hand it to
// the store warp (the producer warp group's third warp), which stores it with TMA, and, after the
// tile's last columns, waits for the stores to complete and posts; the consumers go on to their
// next tile's MMA at once. The staging buffer costs shared memory, so EpiCols is the widest that
// keeps the stages of the register epilogue's config (the tile in BN / EpiCols rounds).
template <int BM_, int BN_, int BK_, bool PingPong = false, int EpiCols = 0>
struct Config {
  static constexpr int BM = BM_, BN = BN_, BK = BK_;
  static constexpr bool kPingPong = PingPong;
  static_assert(!PingPong || BM == 64 || BM == 128, "ping-pong: one warp group per 64- or 128-row tile");
  static constexpr bool kTmaStore = EpiCols > 0;
  static constexpr int kEpiCols = kTmaStore ? EpiCols : BN;
  static_assert(!kTmaStore || (!PingPong && BN % kEpiCols == 0 && kEpiCols % 32 == 0 && BM <= 256),
                "TMA store: one consumer tile at a time, rounds of whole 32-column chunks, a box of at most 256 rows");
  static constexpr int kEpiRounds = BN / kEpiCols;
  // staging: EpiCols / 32 chunks of BM rows x 64 bytes, each a TMA box, 64-byte swizzled
  static constexpr int kEpiBytes = kTmaStore ? BM * EpiCols * 2 : 0;
  using TileShape = Shape<Int<BM>, Int<BN>, Int<BK>>;
  using ClusterShape = Shape<_1, _1, _1>;
  using Schedule = cute::conditional_t<(BM >= 128 && !PingPong), cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                                       cutlass::gemm::KernelTmaWarpSpecializedPingpong>;
  // the kernel's own shared memory (epoch, ...), rounded up, and the staging buffer with its alignment
  static constexpr int kCarveout = 1024 + (kTmaStore ? kEpiBytes + 1024 : 0);
  using BaseMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::half_t, cutlass::layout::RowMajor, 8,
      cutlass::half_t, cutlass::layout::ColumnMajor, 8, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<kCarveout>, Schedule>::CollectiveOp;
  using Mainloop = cusync::sm90::SyncMainloop<BaseMainloop>;
  using TiledMma = typename Mainloop::TiledMma;
  static constexpr int kMmaThreads = size(TiledMma{});  // the threads of one tile's MMA and epilogue
  static constexpr int kConsumerGroups = PingPong ? 2 : 1;  // of kMmaThreads each
  static constexpr int kThreads = kConsumerGroups * kMmaThreads + 128;  // + the producer warp group
  static constexpr int kRegsPerThread = BM * BN / kMmaThreads;
  static constexpr int kLoadRegs = kRegsPerThread >= 208 ? 24 : 40;
  static constexpr int kMmaRegs = kRegsPerThread >= 208 ? 240 : 232;

  using Channel = cusync::sm90::ReadyChannel<4>;
  struct SharedStorage {
    typename Mainloop::SharedStorage mainloop;
    alignas(1024) uint8_t epi[kTmaStore ? kEpiBytes : 16];  // the TMA-store staging buffer
    int32_t epi_desc[2][4];  // per hand-off parity, the staged columns: GeMM (-1: no more), tile x, y, round
    typename Channel::Storage ready;  // the sync warp -> load warp hand-off (k-tiles ready, cumulative)
    uint32_t epoch;
    uint32_t split_last[2];  // split-K: whether this consumer (group) reduces its current tile
    typename cutlass::OrderedSequenceBarrier<1, 2>::SharedStorage mma_order;  // ping-pong
  };
};

// GeMMs of one launch (a chain of dependent GeMMs in one persistent kernel: CUSYNC_SM90_MAX_GEMMS)
constexpr int kMaxGemms = CUSYNC_SM90_MAX_GEMMS;

template <class Cfg>
struct KernelParams {
  CUtensorMap c_map[kMaxGemms];  // the TMA-store epilogue: C as [M rows, output columns], box 32 columns x BM rows
  typename Cfg::Mainloop::Params ml[kMaxGemms];
  CusyncSm90Gemm g[kMaxGemms];
  float* partials[kMaxGemms];        // split-K: fp32 partial tiles [tile][split][BM * BN] (null: no split)
  uint32_t* split_count[kMaxGemms];  // split-K: arrivals per tile (self-resetting)
  cusync::sm90::ChainSchedule<kMaxGemms> sched;  // the work items of every GeMM, GeMM after GeMM
  bool any_wait;                     // some GeMM waits (the sync warp runs)
  unsigned long long* ticket;
  int flags;
  long long timeout_ns;
  DebugRecord* debug;
};

// The sync layer's view of a GeMM that waits: k-tile k reads producer column k BK / in_tile_n.
template <class Cfg>
__device__ __forceinline__ cusync::sm90::ColumnDeps column_deps(const CusyncSm90Gemm& g) {
  return cusync::sm90::ColumnDeps{g.in_tile_n / Cfg::BK, Cfg::BM, g.in_tile_m > 0 ? g.in_tile_m : Cfg::BM,
                                  g.in_policy.extent[1]};
}

// GeLU, tanh approximation and exact form: as runtime_cuda/kernels/gemm.cuh's EpiGeluTanh/EpiGeluErf.
__device__ __forceinline__ float gelu_tanh(float x) {
  const float k0 = 0.7978845608028654f, k1 = 0.044715f;
  return 0.5f * x * (1.0f + tanhf(k0 * (x + k1 * x * x * x)));
}
__device__ __forceinline__ float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f)); }
// silu(g) * u: as kernels/gemm.cuh's EpiSwiGLUHalves::combine.
__device__ __forceinline__ float swiglu(float g, float u) { return g / (1.0f + __expf(-g)) * u; }

template <class Epi, class Accum, class Coord>
__device__ __forceinline__ void store_pairs(Epi epi, const Accum& accum, const Coord& tCcD, __half* C, int ldc,
                                            int rows_left, int col0) {
  CUTLASS_PRAGMA_UNROLL
  for (int i = 0; i < size(accum); i += 2) {
    const int m = get<0>(tCcD(i)), n = get<1>(tCcD(i));
    if (m < rows_left) {
      const __half2 v = __floats2half2_rn(epi(accum(i)), epi(accum(i + 1)));
      *reinterpret_cast<__half2*>(C + static_cast<size_t>(m) * ldc + col0 + n) = v;
    }
  }
}

// The quad-transposed store (CUSYNC_SM90_STORE_QUAD). In the wgmma accumulator fragment, the four
// threads of a quad (lanes 4r .. 4r + 3) hold the same rows, thread q the column pair 2q, 2q + 1 of
// every 8-column group; the fragment's flat index is c + 2 h + 4 grp + V rest (c: the pair's column,
// h: row +8, grp: the 8-column group, V = size<0>). For four consecutive groups grp0 .. grp0 + 3, a
// 4x4 transpose of fp16 pairs inside the quad (two shfl.xor steps, one shuffle per pair) gives
// thread q all 8 columns of group grp0 + q: one 16-byte store per thread, a quad's stores a
// contiguous 64 bytes (two full 32-byte sectors, where the pair stores fill half of each).
// v0..v3 on entry: this thread's pairs of groups grp0 .. grp0 + 3; on exit: pairs 0..3 of group
// grp0 + q (scalars, not an array: nothing may land in local memory).
// The shuffles and the store are volatile asm: they stay in program order, so the compiler does not
// hoist every block's shuffles ahead of the stores (which kept the whole fragment's exchanged pairs
// live at once and spilled registers).
__device__ __forceinline__ uint32_t shfl_xor_ordered(uint32_t v, int lane_mask) {
  uint32_t r;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(r) : "r"(v), "r"(lane_mask));
  return r;
}
__device__ __forceinline__ void st_global_v4(void* p, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
__device__ __forceinline__ void quad_transpose(uint32_t& v0, uint32_t& v1, uint32_t& v2, uint32_t& v3, int q) {
  // step 1 (lanes q, q ^ 2): exchange the pairs of groups g and g ^ 2 where bit 1 of g differs from q's
  {
    const bool hi = (q & 2) != 0;
    const uint32_t r0 = shfl_xor_ordered(hi ? v0 : v2, 2);
    const uint32_t r1 = shfl_xor_ordered(hi ? v1 : v3, 2);
    if (hi) { v0 = r0; v1 = r1; } else { v2 = r0; v3 = r1; }
  }
  // step 2 (lanes q, q ^ 1): the same with bit 0
  {
    const bool hi = (q & 1) != 0;
    const uint32_t r0 = shfl_xor_ordered(hi ? v0 : v1, 1);
    const uint32_t r2 = shfl_xor_ordered(hi ? v2 : v3, 1);
    if (hi) { v0 = r0; v2 = r2; } else { v1 = r0; v3 = r2; }
  }
}
__device__ __forceinline__ uint32_t half2_bits(__half2 h) { return *reinterpret_cast<uint32_t*>(&h); }

// Quad-transposed stores of a fragment: pair(i) gives the fp16 pair (bits) of flat index i (i even); only
// the groups that keep(grp) are stored, out_col maps a tile column to C's column. Every thread of
// the warp executes the shuffles (the predicate is on the store only). One flat, fully unrolled loop
// over the (rest, h, 4-group block) triples: every fragment index is a compile-time constant.
template <int V, class Accum, class Coord, class Pair, class Keep, class OutCol>
__device__ __forceinline__ void store_quads(const Accum& accum, const Coord& tCcD, __half* C, int ldc, int rows_left,
                                            int col0, Pair pair, Keep keep, OutCol out_col) {
  static_assert(V % 16 == 0, "the fragment's columns come in groups of 4 x 8");
  constexpr int F = decltype(size(accum))::value;
  constexpr int B = V / 16;  // 4-group blocks per row half
  const int q = static_cast<int>(threadIdx.x) & 3;
  CUTLASS_PRAGMA_UNROLL
  for (int j = 0; j < F / 8; ++j) {
    const int base0 = (j / (2 * B)) * V, h = (j % (2 * B)) / B, grp0 = 4 * (j % B);
    if (!keep(grp0)) continue;
    const int base = base0 + 2 * h + 4 * grp0;
    uint32_t v0 = pair(base), v1 = pair(base + 4), v2 = pair(base + 8), v3 = pair(base + 12);
    quad_transpose(v0, v1, v2, v3, q);
    const int m = get<0>(tCcD(base));
    const int n = get<1>(tCcD(base)) + 6 * q;  // get<1> is 8 grp0 + 2 q: group grp0 + q's first column
#if defined(CUSYNC_DEBUG)
    if (get<1>(tCcD(base)) % 8 != 2 * q || get<1>(tCcD(base + 12)) != get<1>(tCcD(base)) + 24 ||
        get<0>(tCcD(base + 12)) != m)
      __trap();
#endif
    if (m < rows_left) {
      st_global_v4(C + static_cast<size_t>(m) * ldc + out_col(col0 + n), v0, v1, v2, v3);
    }
  }
}

struct EpiId {
  __device__ __forceinline__ float operator()(float x) const { return x; }
};
struct EpiGeluTanh {
  __device__ __forceinline__ float operator()(float x) const { return gelu_tanh(x); }
};
struct EpiGeluErf {
  __device__ __forceinline__ float operator()(float x) const { return gelu_erf(x); }
};

// The register epilogue of one tile: fusion, fp16 stores (two adjacent columns per store: the wgmma
// accumulator layout holds column pairs). Rows >= M are not stored.
template <class Cfg, class Accum>
__device__ __forceinline__ void store_tile(const CusyncSm90Gemm& g, int x, int y, const Accum& accum, int mma_thread_idx) {
  typename Cfg::TiledMma tiled_mma;
  auto thr = tiled_mma.get_thread_slice(mma_thread_idx);
  Tensor cD = make_identity_tensor(make_shape(Int<Cfg::BM>{}, Int<Cfg::BN>{}));
  Tensor tCcD = thr.partition_C(cD);
  static_assert(decltype(size(tCcD))::value == decltype(size(accum))::value, "accumulator/coordinate mismatch");
  const int row0 = y * Cfg::BM;
  const int rows_left = g.M - row0;
  __half* C = static_cast<__half*>(g.C) + static_cast<size_t>(row0) * g.ldc;
  const int col0 = x * Cfg::BN;
  constexpr int V = decltype(size<0>(accum))::value;
  if constexpr (V % 16 == 0) {  // the quad stores' groups of 4 x 8 columns (the host refuses them otherwise)
  if (g.store == CUSYNC_SM90_STORE_QUAD) {
    // First the fusion over the whole fragment into fp16 pairs (each fp32 accumulator dies as its
    // pair is made, so the live registers shrink), then the exchanges and stores from the pairs.
    // (Fusing inside the store loop kept four pairs' activations -- eight erf evaluations -- in
    // flight at once and spilled registers.)
    constexpr int F = decltype(size(accum))::value;
    uint32_t h[F / 2] = {};
    auto all = [](int) { return true; };
    auto same = [](int c) { return c; };
    auto from_h = [&](int i) { return h[i / 2]; };
    if (g.epilogue == CUSYNC_SM90_EPI_SWIGLU_PAIR) {
      if constexpr (V % 64 == 0) {
        // g at flat index i, u at i + 32 (64 columns further); groups 0..7 of every 16 are g's.
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < F; i += 2) {
          if (((i % V) / 4) % 16 < 8)
            h[i / 2] = half2_bits(__floats2half2_rn(swiglu(accum(i), accum(i + 32)), swiglu(accum(i + 1), accum(i + 33))));
        }
        store_quads<V>(accum, tCcD, C, g.ldc, rows_left, col0, from_h, [](int grp) { return grp % 16 < 8; },
                       [](int gc) { return (gc / 128) * 64 + (gc % 128); });
      }
      return;
    }
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < F; i += 2) {
      float a = accum(i), b = accum(i + 1);
      if (g.epilogue == CUSYNC_SM90_EPI_GELU_TANH) {
        a = gelu_tanh(a);
        b = gelu_tanh(b);
      } else if (g.epilogue == CUSYNC_SM90_EPI_GELU_ERF) {
        a = gelu_erf(a);
        b = gelu_erf(b);
      }
      h[i / 2] = half2_bits(__floats2half2_rn(a, b));
    }
    store_quads<V>(accum, tCcD, C, g.ldc, rows_left, col0, from_h, all, same);
    return;
  }
  }
  if (g.epilogue == CUSYNC_SM90_EPI_SWIGLU_PAIR) {
    // [W1|V] interleaved by 64: columns 128b + j (g) and 128b + 64 + j (u), j < 64, are accumulator
    // elements i and i + 32 of one thread (mode 0 of the wgmma fragment is (2 cols, 2 rows, N/8
    // column groups of 8): +8 groups = +64 columns). Output column 64b + j.
    // (The host rejects the SwiGLU pair unless BN is a multiple of 128.)
    if constexpr (V % 64 == 0) {
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(accum); i += 2) {
      if (((i % V) / 4) % 16 < 8) {
        const int m = get<0>(tCcD(i)), n = get<1>(tCcD(i));
#if defined(CUSYNC_DEBUG)
        if (get<1>(tCcD(i + 32)) != n + 64 || get<0>(tCcD(i + 32)) != m || (n % 128) >= 64) __trap();
#endif
        if (m < rows_left) {
          const int gc = col0 + n;
          const int oc = (gc / 128) * 64 + (gc % 128);
          const __half2 v = __floats2half2_rn(swiglu(accum(i), accum(i + 32)), swiglu(accum(i + 1), accum(i + 33)));
          *reinterpret_cast<__half2*>(C + static_cast<size_t>(m) * g.ldc + oc) = v;
        }
      }
    }
    }
  } else if (g.epilogue == CUSYNC_SM90_EPI_GELU_TANH) {
    store_pairs(EpiGeluTanh{}, accum, tCcD, C, g.ldc, rows_left, col0);
  } else if (g.epilogue == CUSYNC_SM90_EPI_GELU_ERF) {
    store_pairs(EpiGeluErf{}, accum, tCcD, C, g.ldc, rows_left, col0);
  } else {
    store_pairs(EpiId{}, accum, tCcD, C, g.ldc, rows_left, col0);
  }
}

// ---- the TMA-store epilogue (Config::kTmaStore) ------------------------------------------------
// Named barriers between the consumer warp groups and the store warp (0 is __syncthreads, 1 and 2
// the consumer groups' own): FULL, the consumers have staged columns (bar.sync on both sides: the
// store warp is parked there whenever it is not storing, so the consumers do not wait in practice);
// EMPTY, the store warp's TMA stores have read them out (bar.arrive by the store warp, which must
// not wait for the consumers' next round to post). The description of each hand-off (epi_desc) is
// double-buffered by the hand-off's parity: hand-off h + 2 rewrites h's slot only after FULL of
// h + 1, which the store warp reaches after reading slot h.
constexpr int kBarEpiFull = 3, kBarEpiEmpty = 4;

// Columns [round * kEpiCols, (round + 1) * kEpiCols) of the tile, fused and in fp16, into the staging
// buffer: chunk c (32 columns) at c * BM * 64 bytes, row r at r * 64, its 16-byte unit u at
// (u ^ ((r >> 1) & 3)) * 16 -- the tensor map's 64-byte swizzle, under which the 8 rows of one
// stmatrix 8x8 matrix fall in 8 distinct bank groups. One stmatrix.x4 per thread and column-group
// pair (g, g + 1): the four 8x8 matrices rows (+0, +8) x groups (g, g + 1) are the wgmma accumulator's
// fp16 pairs at flat indices b, b + 2, b + 4, b + 6 (c + 2 h + 4 grp + V rest, thread l holding row
// l / 4, columns 2 (l % 4) + {0, 1} of each: the stmatrix fragment); lane l gives the address of row
// l % 8 of matrix l / 8.
template <class Cfg, class Epi, class Accum, class Coord>
__device__ __forceinline__ void stage_columns(Epi epi, const Accum& accum, const Coord& tCcD, uint8_t* buf, int round) {
  constexpr int F = decltype(size(accum))::value;
  constexpr int V = decltype(size<0>(accum))::value;
  static_assert(V % 8 == 0, "the fragment's column groups come in pairs");
  // One wgmma atom spans the tile's columns (the warp groups split M): group grp of the fragment is
  // columns 8 grp .. 8 grp + 7, a compile-time constant per flat index, so the round's predicate folds.
  static_assert(2 * V == Cfg::BN, "one wgmma atom spans the tile's columns");
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int mi = lane / 8, rr = lane % 8;
  const uint32_t buf_addr = static_cast<uint32_t>(__cvta_generic_to_shared(buf));
  const int c_lo = round * Cfg::kEpiCols;
  auto pk = [&](int i) { return half2_bits(__floats2half2_rn(epi(accum(i)), epi(accum(i + 1)))); };
  CUTLASS_PRAGMA_UNROLL
  for (int b = 0; b < F; b += 8) {
    const int n0 = 8 * ((b % V) / 4);  // column group g's first column (a multiple of 16)
    if (n0 < c_lo || n0 >= c_lo + Cfg::kEpiCols) continue;
    const int m0 = get<0>(tCcD(b)) - lane / 4;  // the warp's first row of the pair of 8-row halves
#if defined(CUSYNC_DEBUG)
    if (get<1>(tCcD(b)) != n0 + 2 * (lane % 4) || get<0>(tCcD(b + 2)) != m0 + lane / 4 + 8 ||
        get<1>(tCcD(b + 4)) != n0 + 8 + 2 * (lane % 4) || get<1>(tCcD(b + 6)) != get<1>(tCcD(b + 4)) ||
        get<0>(tCcD(b + 4)) != get<0>(tCcD(b)))
      __trap();
#endif
    const int row = m0 + 8 * (mi & 1) + rr;
    const int col = n0 - c_lo + 8 * (mi >> 1);
    const int u = (col % 32) / 8;
    const uint32_t addr = buf_addr + static_cast<uint32_t>((col / 32) * (Cfg::BM * 64) + row * 64 + ((u ^ ((row >> 1) & 3)) << 4));
    stmatrix_x4(addr, pk(b), pk(b + 2), pk(b + 4), pk(b + 6));
  }
}

// The consumers' side of the TMA-store epilogue for one tile: per round, wait until the store warp
// has read out the previous round (not before the CTA's first), stage the round's columns, fence
// them against the async proxy, name the columns in epi_desc[handoff parity] and meet the store
// warp at FULL. `handoffs` counts this CTA's rounds so far.
template <class Cfg, class Accum>
__device__ __forceinline__ void stage_tile(const CusyncSm90Gemm& g, int gi, int x, int y, const Accum& accum,
                                           int mma_thread_idx, typename Cfg::SharedStorage& ss, int& handoffs) {
  constexpr int kBarThreads = Cfg::kMmaThreads + 32;
  typename Cfg::TiledMma tiled_mma;
  auto thr = tiled_mma.get_thread_slice(mma_thread_idx);
  Tensor cD = make_identity_tensor(make_shape(Int<Cfg::BM>{}, Int<Cfg::BN>{}));
  Tensor tCcD = thr.partition_C(cD);
  CUTLASS_PRAGMA_UNROLL
  for (int round = 0; round < Cfg::kEpiRounds; ++round) {
    if (handoffs > 0) named_bar_sync(kBarEpiEmpty, kBarThreads);
    if (g.epilogue == CUSYNC_SM90_EPI_GELU_TANH)
      stage_columns<Cfg>(EpiGeluTanh{}, accum, tCcD, ss.epi, round);
    else if (g.epilogue == CUSYNC_SM90_EPI_GELU_ERF)
      stage_columns<Cfg>(EpiGeluErf{}, accum, tCcD, ss.epi, round);
    else
      stage_columns<Cfg>(EpiId{}, accum, tCcD, ss.epi, round);
    if (mma_thread_idx == 0) {
      int32_t* d = ss.epi_desc[handoffs & 1];
      d[0] = gi;
      d[1] = x;
      d[2] = y;
      d[3] = round;
    }
    fence_proxy_async_shared();
    named_bar_sync(kBarEpiFull, kBarThreads);
    ++handoffs;
  }
}

// The consumers' last hand-off: no more columns (GeMM -1).
template <class Cfg>
__device__ __forceinline__ void stage_done(int mma_thread_idx, typename Cfg::SharedStorage& ss, int handoffs) {
  constexpr int kBarThreads = Cfg::kMmaThreads + 32;
  if (handoffs > 0) named_bar_sync(kBarEpiEmpty, kBarThreads);
  if (mma_thread_idx == 0) ss.epi_desc[handoffs & 1][0] = -1;
  named_bar_sync(kBarEpiFull, kBarThreads);
}

// The store warp: for each staged round (FULL), one TMA store per 32-column chunk (rows past M
// clipped by the tensor map) as one bulk group; once it has read the staging buffer out, EMPTY; after a tile's
// last round, if the tile posts: wait for the group's completion (its global writes performed),
// order them before this thread's later generic accesses (fence.proxy.async.global), then the
// release add (docs/sm90.md).
template <class Cfg>
__device__ __forceinline__ void store_warp(const KernelParams<Cfg>& p, typename Cfg::SharedStorage& ss) {
  constexpr int kBarThreads = Cfg::kMmaThreads + 32;
  const bool leader = threadIdx.x % 32 == 0;
  for (int h = 0;; ++h) {
    named_bar_sync(kBarEpiFull, kBarThreads);
    const volatile int32_t* d = ss.epi_desc[h & 1];
    const int gi = d[0], x = d[1], y = d[2], round = d[3];
    if (gi < 0) break;
    const CusyncSm90Gemm& g = p.g[gi];
    if (leader) {
      CUTLASS_PRAGMA_UNROLL
      for (int c = 0; c < Cfg::kEpiCols / 32; ++c)
        tma_store_2d(&p.c_map[gi], ss.epi + c * (Cfg::BM * 64), x * Cfg::BN + round * Cfg::kEpiCols + 32 * c, y * Cfg::BM);
      bulk_commit();
      bulk_wait_read_all();
    }
    named_bar_arrive(kBarEpiEmpty, kBarThreads);
    if (leader && round == Cfg::kEpiRounds - 1)
      cusync::sm90::post_after_bulk_stores(cusync::PolicyDesc{g.out_policy}, g.out_sems, Tile{x, y, 0});
  }
  if (leader) bulk_wait_all();
}

using cusync::sm90::Work;

__device__ __forceinline__ uint32_t atom_add_acq_rel_gpu(uint32_t* p, uint32_t v) {
  uint32_t old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}
__device__ __forceinline__ void st_relaxed_gpu(uint32_t* p, uint32_t v) {
  asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Split-K (docs/sm90.md): every split stores its fp32 partial tile (each consumer thread its own
// accumulator fragment, float2 per column pair, laid out [pair][thread] so that a warp's stores are
// contiguous), the consumer warp groups meet at a named barrier, and one thread adds 1 to the tile's
// arrival counter (acq_rel: it releases this split's partial and, for the last one, acquires every
// other split's). The split that sees S - 1 arrivals before its own is the last: it resets the counter
// (nobody else touches it again in this launch), and its threads sum the S partials in split order
// (0, 1, ..., S - 1: the result does not depend on which split came last) into the accumulators, each
// thread reading back the fragment positions it wrote. Returns whether this CTA holds the tile's sum
// (and must run the epilogue and post).
template <class Cfg, class Accum>
__device__ __forceinline__ bool reduce_splits(float* partials, uint32_t* count, const Work& wk, Accum& accum,
                                              int tid, uint32_t* last_smem, int bar_id) {
  constexpr int T = Cfg::kMmaThreads;
  constexpr int F = decltype(size(accum))::value;
  constexpr size_t kTile = static_cast<size_t>(Cfg::BM) * Cfg::BN;
  float2* tile = reinterpret_cast<float2*>(partials + static_cast<size_t>(wk.wt) * wk.S * kTile);
  float2* mine = tile + static_cast<size_t>(wk.s) * (kTile / 2);
  CUTLASS_PRAGMA_UNROLL
  for (int i = 0; i < F / 2; ++i) __stcg(mine + i * T + tid, make_float2(accum(2 * i), accum(2 * i + 1)));
  asm volatile("bar.sync %0, %1;" ::"r"(bar_id), "n"(T) : "memory");
  if (tid == 0) {
    const bool last = atom_add_acq_rel_gpu(count + wk.wt, 1u) == static_cast<uint32_t>(wk.S - 1);
    if (last) st_relaxed_gpu(count + wk.wt, 0u);
    *last_smem = last ? 1u : 0u;
  }
  asm volatile("bar.sync %0, %1;" ::"r"(bar_id), "n"(T) : "memory");
  if (*last_smem == 0u) return false;
  CUTLASS_PRAGMA_UNROLL
  for (int i = 0; i < F / 2; ++i) {
    const float2 v = __ldcg(tile + i * T + tid);
    accum(2 * i) = v.x;
    accum(2 * i + 1) = v.y;
  }
  CUTLASS_PRAGMA_NO_UNROLL
  for (int j = 1; j < wk.S; ++j) {
    const float2* src = tile + static_cast<size_t>(j) * (kTile / 2);
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < F / 2; ++i) {
      const float2 v = __ldcg(src + i * T + tid);
      accum(2 * i) += v.x;
      accum(2 * i + 1) += v.y;
    }
  }
  return true;
}

// The sync warp (the producer warp group's second warp, in a launch where some GeMM waits): walks the
// CTA's items like the load warp and polls each waiting item's producer tiles (cusync/sm90/sync_warp.h);
// the counts of ready k-tiles are cumulative over the CTA's waiting items, in item order.
template <class Cfg>
__device__ __forceinline__ void sync_warp(const KernelParams<Cfg>& p, typename Cfg::SharedStorage& ss, uint32_t epoch) {
  typename Cfg::Channel::Sender tx;
  uint32_t base = 0;  // k-tiles of the waiting items before the current one
  const int G = static_cast<int>(gridDim.x);
  for (int w = static_cast<int>(blockIdx.x); w < p.sched.items(); w += G) {
    const Work wk = p.sched.work(w);
    const CusyncSm90Gemm& g = p.g[wk.stage];
    if (g.in_sems == nullptr) continue;
    const cusync::sm90::WaitSite site{wk.stage, wk.tile, p.debug, p.timeout_ns};
    cusync::sm90::poll_item(column_deps<Cfg>(g).item(wk.tile, wk.k_begin, wk.k_count), cusync::PolicyDesc{g.in_policy},
                            g.in_sems, epoch, wk.k_count, base, tx, ss.ready, site);
    base += static_cast<uint32_t>(wk.k_count);
  }
  if (threadIdx.x % 32 == 0) tx.flush(ss.ready);
}

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1) sync_gemm_kernel(const __grid_constant__ KernelParams<Cfg> p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Mainloop = typename Cfg::Mainloop;
  using MainloopPipeline = typename Mainloop::MainloopPipeline;
  using PipelineState = typename Mainloop::PipelineState;
  using SharedStorage = typename Cfg::SharedStorage;
  extern __shared__ char smem_buf[];
  SharedStorage& ss = *reinterpret_cast<SharedStorage*>(smem_buf);

  const int thread_idx = static_cast<int>(threadIdx.x);
  const int warp_idx = cutlass::canonical_warp_idx_sync();
  const int warp_group = cutlass::canonical_warp_group_idx();
  const int warp_in_group = warp_idx % cutlass::NumWarpsPerWarpGroup;
  const int warp_group_thread_idx = thread_idx % cutlass::NumThreadsPerWarpGroup;
  const int lane_predicate = cute::elect_one_sync();

  if (p.flags & CUSYNC_SM90_PDL_TRIGGER) cusync::pdl_launch_dependents();
  if (warp_idx == 0 && lane_predicate) {
    for (int i = 0; i < p.sched.n; ++i) Mainloop::prefetch_tma_descriptors(p.ml[i]);
  }
  // The epoch: launches of this plan so far, this one included (the ticket counter is never reset).
  if (thread_idx == 0) {
    Cfg::Channel::init(ss.ready);
    ss.epoch = p.ticket != nullptr ? cusync::launch_epoch(p.ticket, gridDim.x) : 1u;
  }

  typename MainloopPipeline::Params pp;
  if (warp_group == 0 && warp_in_group == 0) pp.role = MainloopPipeline::ThreadCategory::Producer;
  if (warp_group >= 1) pp.role = MainloopPipeline::ThreadCategory::Consumer;
  pp.is_leader = warp_group_thread_idx == 0;
  pp.num_consumers = Cfg::kMmaThreads;  // one tile's MMA threads release a stage (ping-pong: one group)
  pp.transaction_bytes = p.ml[0].tma_transaction_bytes;
  MainloopPipeline pipeline(ss.mainloop.pipeline, pp, typename Cfg::ClusterShape{});
  typename cutlass::OrderedSequenceBarrier<1, 2>::Params op;
  op.group_id = warp_group >= 1 ? warp_group - 1 : 0;
  op.group_size = cutlass::NumThreadsPerWarpGroup;
  cutlass::OrderedSequenceBarrier<1, 2> mma_order(ss.mma_order, op);  // used by ping-pong only
  __syncthreads();  // pipeline, order and hand-off barriers initialized, epoch written
  const uint32_t epoch = ss.epoch;

  Mainloop mainloop;
  const int G = static_cast<int>(gridDim.x);
  if (warp_group == 0) {
    cutlass::arch::warpgroup_reg_dealloc<Cfg::kLoadRegs>();
    if (warp_in_group == 0) {
      // The mainloop DMA warp.
      if (p.flags & CUSYNC_SM90_PDL_WAIT) cusync::pdl_wait_producer_grid();
      PipelineState write = cutlass::make_producer_start_state<MainloopPipeline>();
      typename Cfg::Channel::Receiver rx;
      uint32_t base = 0;  // k-tiles of the waiting items before this one
      for (int w = static_cast<int>(blockIdx.x); w < p.sched.items(); w += G) {
        const Work wk = p.sched.work(w);
        const CusyncSm90Gemm& g = p.g[wk.stage];
        auto li = mainloop.load_init(make_shape(g.M, g.N, g.K, 1), p.ml[wk.stage]);
        // The sync warp has acquired the producer tiles of the first `rx.ready` k-tiles of the waiting
        // items; the channel's release/acquire orders those acquires before this thread's proxy fence
        // and A's TMA (docs/sm90.md).
        auto wait = [&](int k) {
          if (g.in_sems == nullptr) return;
          if (rx.wait_for(ss.ready, base + static_cast<uint32_t>(k - wk.k_begin) + 1u)) fence_proxy_async_global();
        };
        mainloop.load_synced(p.ml[wk.stage], pipeline, write, li, make_coord(wk.tile.y, wk.tile.x, _, 0), wk.k_begin,
                             wk.k_count, 0u, ss.mainloop.tensors, wait);
        write.advance(wk.k_count);
        if (g.in_sems != nullptr) base += static_cast<uint32_t>(wk.k_count);
      }
      mainloop.load_tail(pipeline, write);
    } else if (Cfg::kTmaStore && warp_in_group == 2) {
      store_warp<Cfg>(p, ss);  // the store warp
    } else if (warp_in_group == 1 && p.any_wait) {
      sync_warp<Cfg>(p, ss, epoch);  // the sync warp
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<Cfg::kMmaRegs>();
    // Cooperative (or one group): every consumer thread works on every item of the CTA. Ping-pong:
    // group c takes the CTA's items 2j + c and skips the other group's pipeline stages.
    const int group = Cfg::kPingPong ? warp_group - 1 : 0;
    const int mma_thread_idx = Cfg::kPingPong ? warp_group_thread_idx : thread_idx - cutlass::NumThreadsPerWarpGroup;
    const int bar_id = 1 + group;  // named barrier of this tile's MMA threads (0 is __syncthreads)
    typename Cfg::TiledMma tiled_mma;
    PipelineState read;
    int handoffs = 0;  // TMA-store epilogue rounds handed to the store warp
    int j = 0;
    for (int w = static_cast<int>(blockIdx.x); w < p.sched.items(); w += G, ++j) {
      const Work wk = p.sched.work(w);
      if (Cfg::kPingPong && (j & 1) != group) {
        read.advance(wk.k_count);  // the other group's item
        continue;
      }
      const int gi = wk.stage, x = wk.tile.x, y = wk.tile.y;
      const CusyncSm90Gemm& g = p.g[gi];
      auto accum = partition_fragment_C(tiled_mma, take<0, 2>(typename Cfg::TileShape{}));
      if constexpr (Cfg::kPingPong) mma_order.wait();
      mainloop.mma(pipeline, read, accum, wk.k_count, mma_thread_idx, ss.mainloop.tensors, p.ml[0]);
      if constexpr (Cfg::kPingPong) mma_order.arrive();  // the other group's MMA may start
      mainloop.mma_tail(pipeline, read, wk.k_count);
      read.advance(wk.k_count);
      if (wk.S > 1 && !reduce_splits<Cfg>(p.partials[gi], p.split_count[gi], wk, accum, mma_thread_idx,
                                          &ss.split_last[group], bar_id))
        continue;  // another split of this tile sums the partials, runs the epilogue and posts
      if constexpr (Cfg::kTmaStore) {
        if (g.epilogue != CUSYNC_SM90_EPI_SWIGLU_PAIR) {
          stage_tile<Cfg>(g, gi, x, y, accum, mma_thread_idx, ss, handoffs);
          continue;  // the store warp stores the tile and posts
        }
      }
      store_tile<Cfg>(g, x, y, accum, mma_thread_idx);
      cusync::sm90::post_after_stores<Cfg::kMmaThreads>(cusync::PolicyDesc{g.out_policy}, g.out_sems, Tile{x, y, 0},
                                                        bar_id, mma_thread_idx);
    }
    if constexpr (Cfg::kTmaStore) stage_done<Cfg>(mma_thread_idx, ss, handoffs);
  }
#endif
}

}  // namespace cusync_sm90
