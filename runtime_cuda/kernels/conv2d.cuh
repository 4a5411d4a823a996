// Synchronized implicit-GeMM 3x3 Conv2D for CuSync (header-only, CuTe/CUTLASS headers, SM80 atoms).
//
//   Y[b, p, q, n] = relu(bias[n] + sum_{r, s, c} X[b, p + r - 1, q + s - 1, c] * W[n, r, s, c])
//
// NHWC fp16 activations X [B, P, Q, C] and Y [B, P, Q, K], weights W [K, 3, 3, C] (KRSC) fp16,
// fp32 accumulation, bias + ReLU fused, stride 1, padding 1 (same size output). As a GeMM:
// M = B*P*Q output pixels, N = K output channels, reduction R*S*C, walked as k-blocks
// kt = (r*3 + s) * (C/BK) + c/BK, so W is the row-major [K, 9*C] B operand as it lies in memory, and
// A is gathered on the fly (im2col in the cp.async addresses, zero-fill for the padding).
// C % BK == 0, K % BN == 0, any B*P*Q; checked on the host by conv2d_args_error().
//
// Machinery as runtime_cuda/kernels/gemm.cuh (kernels/sm80_tile.cuh): SM80_16x8x16_F32F16F16F32_TN
// mma.sync TiledMMA, cp.async (16 B, zero-fill) through a Stages-deep pipeline, ldmatrix, swizzled
// shared layouts.
//
// CuSync hooks (Stage: cusync::CuStage, runtime_cuda/cusync/stage.h), called by all threads:
//   cusync::Tile t = stage.start();          tile (t.x, t.y) = (channel tile, pixel tile)
//   stage.wait(cusync::Tile{c / ProdBN, py}) before the cp.async of a k-block of A, for each
//                                            producer pixel tile py its shifted rows touch: the
//                                            3x3 window reads pixels up to Q+1 before and after,
//                                            so py in {t.y-1, t.y, t.y+1} (the halo; BM >= Q+1)
//   stage.post(t)                            after the Y tile is stored
// A producer tile is waited on once (a per-block mask); the flag kConvWaitInput turns the waits
// on (a chain's first Conv2D has no producer), kConvReorder issues the weight k-block's cp.async
// before the wait (the paper's optimization R). The producer is a Conv2D of this kind with channel
// tile ProdBN and the same BM, so its pixel tile py holds the same pixels.
// Lines this kernel needs for CuSync (the paper's Table III), of 222 lines of code: about 32:
// start 1, wait_a 16 (the halo's pixel-tile range and the waited-once mask), the reorder
// branch 6, post 1, flags / stage parameter / kernel ABI 8.
#pragma once

#include <kernels/sm80_tile.cuh>
#include <kernels/splitk.cuh>
#include <kernels/abi.cuh>
#include <cusync/sync.h>
#include <cusync/tile.h>

namespace cusync_kernels {

enum ConvFlags : int {
  kConvWaitInput = 1,  // wait on the producer's tiles before each A k-block
  kConvReorder = 2,    // load the weight k-block before waiting (optimization R)
};

struct ConvArgs {
  const half* X;     // [B, P, Q, C]
  const half* W;     // [K, 3, 3, C]
  const half* bias;  // [K]
  half* Y;           // [B, P, Q, K]
  int B, P, Q, C, K;
  int flags;         // ConvFlags
  // Split-K (ConvConfig::SplitK, the stage's splits() > 1; kernels/splitk.cuh): fp32 partials
  // float[tiles * splits * BM * BN] and one arrival counter per tile, zeroed once.
  float* ws;
  unsigned* counters;
};
CUSYNC_EXPORT_ABI(ConvArgs, ConvArgs, X, W, bias, Y, B, P, Q, C, K, flags, ws, counters)

template <int BM_, int BN_, int BK_, int Stages_, int WarpsM_, int WarpsN_, int ProdBN_ = BN_, bool SyncWarp_ = false,
          bool SplitK_ = false>
struct ConvConfig : Sm80Tile<BM_, BN_, BK_, Stages_, WarpsM_, WarpsN_> {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, Stages = Stages_;
  static constexpr int WarpsM = WarpsM_, WarpsN = WarpsN_, ProdBN = ProdBN_;
  static constexpr int kThreads = WarpsM * WarpsN * 32;  // compute threads
  // SyncWarp: one more warp that does the waits (as gemm.cuh's GemmConfig::SyncWarp).
  static constexpr bool SyncWarp = SyncWarp_;
  static constexpr int kBlockThreads = kThreads + (SyncWarp ? 32 : 0);
  // SplitK: the block honours its stage's splits() (one K range of its tile per block); not with
  // a sync warp, which serves the waits of the whole K loop.
  static constexpr bool SplitK = SplitK_;
  static_assert(!(SplitK && SyncWarp), "split-K Conv2Ds wait in their compute threads");
  static constexpr int kSmemBytes = Stages * (BM * BK + BN * BK) * 2;

  static_assert(BM == 64 || BM == 128, "BM must be 64 or 128");
  static_assert(BN == 64 || BN == 128, "BN must be 64 or 128");
  static_assert(BK == 32 || BK == 64, "BK must be 32 or 64");
  static_assert(Stages >= 2 && Stages <= 6, "Stages must be in [2, 6]");
  static_assert(BM % (16 * WarpsM) == 0 && BN % (16 * WarpsN) == 0, "warps must tile the block tile");
  static_assert((BM * BK / 8) % kThreads == 0 && (BN * BK / 8) % kThreads == 0,
                "each thread must copy a whole number of 16-byte chunks per tile");
  static_assert(kThreads % (BK / 8) == 0, "a thread must copy the same channel chunk in every row it loads");
  static_assert(ProdBN % BK == 0, "a k-block's channels must lie inside one producer tile: ProdBN % BK == 0");
};

// Host-side argument check: nullptr when fine, else a message.
template <class Cfg>
inline const char* conv2d_args_error(const ConvArgs& a) {
  if (a.B <= 0 || a.P <= 0 || a.Q <= 0 || a.C <= 0 || a.K <= 0) return "Conv2D: sizes must be positive";
  if (a.C % Cfg::BK != 0) return "Conv2D: C must be a multiple of BK";
  if (a.K % Cfg::BN != 0) return "Conv2D: K must be a multiple of BN";
  if ((a.flags & kConvWaitInput) && a.Q + 1 > Cfg::BM) return "Conv2D: the halo needs BM >= Q + 1";
  return nullptr;
}

template <class Cfg, class StageT>
__device__ __forceinline__ void conv2d_device(const ConvArgs& args, StageT& stage, char* smem) {
  using namespace cute;
  constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, STAGES = Cfg::Stages;
  constexpr int THREADS = Cfg::kThreads;
  constexpr bool SYNC_WARP = Cfg::SyncWarp;
  constexpr int CPR = BK / 8;                   // 16-byte chunks per tile row
  constexpr int A_ITERS = BM * CPR / THREADS;   // A chunks per thread per k-block
  constexpr int B_ITERS = BN * CPR / THREADS;

  const int tid = threadIdx.x;
  const int P = args.P, Q = args.Q, C = args.C;
  const int M = args.B * P * Q;
  const int ldw = 9 * C;
  const int cblocks = C / BK;
  const int k_tiles_all = 9 * cblocks;

  // The k-block kt's A rows are the pixel rows [m0, m0 + rows_valid) shifted by dr*Q + ds: the
  // producer's channel tile px of the pixel tiles [lo/BM, hi/BM] (i-th of them: py = lo/BM + i).
  auto producer_tile = [=](int m0_, int rows_, int kt, int i, cusync::Tile& pt) {  // by value: see gemm.cuh
    const int rs = kt / cblocks;
    const int px = (kt - rs * cblocks) * BK / Cfg::ProdBN;
    const int shift = (rs / 3 - 1) * Q + (rs % 3 - 1);
    const int lo = max(m0_ + shift, 0), hi = min(m0_ + rows_ - 1 + shift, M - 1);
    const int py = lo / BM + i;
    if (py > hi / BM) return false;
    pt = cusync::Tile{px, py, 0};
    return true;
  };
  __shared__ uint32_t s_ready;  // SYNC_WARP: k-blocks whose producer tiles the sync warp saw posted
  cusync::Tile t;
  if constexpr (SYNC_WARP) {
    if (tid == 0) s_ready = 0;
    __syncthreads();
    t = stage.start(THREADS);
    if (tid >= THREADS) {
      if (!(args.flags & kConvWaitInput)) {
        if ((tid & 31) == 0) cusync::st_release_cta(&s_ready, static_cast<uint32_t>(k_tiles_all));
        return;
      }
      const int m0_ = t.y * BM, rows_ = min(BM, M - m0_);
      stage.template serve<1>(k_tiles_all, &s_ready, [=](int kt, int i, cusync::Tile& pt) {
        return producer_tile(m0_, rows_, kt, i, pt);
      });
      return;
    }
  } else {
    t = stage.start();
  }
  const int m0 = t.y * BM;
  const int n0 = t.x * BN;
  const int rows_valid = min(BM, M - m0);

  // Split-K: this block computes k-blocks [kt0, kt0 + k_tiles) of its tile.
  int split = 0, splits = 1;
  if constexpr (Cfg::SplitK) {
    splits = stage.splits();
    split = stage.split();
    if (splits > 1 && (args.ws == nullptr || args.counters == nullptr)) {
      if (tid == 0) printf("cusync Conv2D: split-K needs a workspace and counters\n");
      __trap();
    }
  }
  const SplitRange k_range = split_range(k_tiles_all, split, splits);
  const int kt0 = k_range.begin;
  const int k_tiles = k_range.end - k_range.begin;

  half_t* sA_ptr = reinterpret_cast<half_t*>(smem);
  half_t* sB_ptr = sA_ptr + cosize(typename Cfg::SmemLayoutA{});
  const uint32_t sA_addr = uint32_t(__cvta_generic_to_shared(sA_ptr));
  const uint32_t sB_addr = uint32_t(__cvta_generic_to_shared(sB_ptr));
  typename Cfg::SmemLayoutA lA;
  typename Cfg::SmemLayoutB lB;

  // Per thread, the output pixels of its A chunks (fixed over the k-blocks): row in the tile,
  // image row p and column q, or p = -1 << 20 for rows past M (never valid).
  int a_p[A_ITERS], a_q[A_ITERS];
  CUTE_UNROLL
  for (int i = 0; i < A_ITERS; ++i) {
    const int m = m0 + (tid + i * THREADS) / CPR;
    a_p[i] = m < M ? (m / Q) % P : -(1 << 20);
    a_q[i] = m % Q;
  }
  const int kc = (tid % CPR) * 8;  // THREADS % CPR == 0: the same channel chunk in every iteration

  auto load_a = [&](int kt, int s) {
    const int rs = kt / cblocks;
    const int c0 = (kt - rs * cblocks) * BK;
    const int dr = rs / 3 - 1, ds = rs % 3 - 1;
    const half* src0 = args.X + (long long)(m0 + dr * Q + ds) * C + c0 + kc;
    CUTE_UNROLL
    for (int i = 0; i < A_ITERS; ++i) {
      const int row = (tid + i * THREADS) / CPR;
      const int h = a_p[i] + dr, w = a_q[i] + ds;
      const bool ok = h >= 0 && h < P && w >= 0 && w < Q;
      const half* src = ok ? src0 + (long long)row * C : args.X;
      detail::cp_async_16_zfill(sA_addr + 2u * uint32_t(lA(row, kc, s)), src, ok);
    }
  };
  auto load_b = [&](int kt, int s) {
    const int rs = kt / cblocks;
    const int k0 = rs * C + (kt - rs * cblocks) * BK;
    CUTE_UNROLL
    for (int i = 0; i < B_ITERS; ++i) {
      const int row = (tid + i * THREADS) / CPR;
      const half* src = args.W + (long long)(n0 + row) * ldw + k0 + kc;
      detail::cp_async_16_zfill(sB_addr + 2u * uint32_t(lB(row, kc, s)), src, true);
    }
  };
  // CuSync: before k-block kt's A copy, wait on the producer tiles it reads: channel tile
  // c0 / ProdBN of the pixel tiles that rows [m0, m0 + rows_valid) shifted by dr*Q + ds touch.
  uint32_t waited[3] = {0u, 0u, 0u};  // producer tiles already waited on, rows t.y-1, t.y, t.y+1
  uint32_t known_ready = 0;
  auto wait_a = [&](int kt) {
    if constexpr (SYNC_WARP) {  // the sync warp waited; acquire what it published (block scope)
      if (known_ready <= static_cast<uint32_t>(kt)) {
        while ((known_ready = cusync::ld_acquire_cta(&s_ready)) <= static_cast<uint32_t>(kt)) {
        }
      }
      return;
    }
    if (!(args.flags & kConvWaitInput)) return;
    const int rs = kt / cblocks;
    const int px = (kt - rs * cblocks) * BK / Cfg::ProdBN;
    const int shift = (rs / 3 - 1) * Q + (rs % 3 - 1);
    const int lo = max(m0 + shift, 0), hi = min(m0 + rows_valid - 1 + shift, M - 1);
    for (int py = lo / BM; py <= hi / BM; ++py) {
      const int d = py - t.y + 1;  // in {0, 1, 2} when BM >= Q + 1 (checked on the host)
      if (d >= 0 && d < 3 && px < 32) {
        if (waited[d] & (1u << px)) continue;
        waited[d] |= 1u << px;
      }
      stage.wait(cusync::Tile{px, py, 0});
    }
  };
  auto load_k_tile = [&](int kt, int s) {  // kt counts from this block's first k-block
    kt += kt0;
    if (args.flags & kConvReorder) {
      load_b(kt, s);
      wait_a(kt);
      load_a(kt, s);
    } else {
      wait_a(kt);
      load_a(kt, s);
      load_b(kt, s);
    }
  };

  // ---- MMA partitioning (as gemm.cuh)
  Tensor sA = make_tensor(make_smem_ptr(sA_ptr), lA);
  Tensor sB = make_tensor(make_smem_ptr(sB_ptr), lB);
  typename Cfg::TiledMma mma;
  auto thr_mma = mma.get_slice(tid);
  Tensor tCrA = thr_mma.partition_fragment_A(sA(_, _, 0));
  Tensor tCrB = thr_mma.partition_fragment_B(sB(_, _, 0));
  Tensor accum = partition_fragment_C(mma, Shape<Int<BM>, Int<BN>>{});
  clear(accum);
  auto s2r_a = make_tiled_copy_A(typename Cfg::S2RAtom{}, mma);
  auto s2r_thr_a = s2r_a.get_slice(tid);
  Tensor tXsA = s2r_thr_a.partition_S(sA);
  Tensor tXrA = s2r_thr_a.retile_D(tCrA);
  auto s2r_b = make_tiled_copy_B(typename Cfg::S2RAtom{}, mma);
  auto s2r_thr_b = s2r_b.get_slice(tid);
  Tensor tXsB = s2r_thr_b.partition_S(sB);
  Tensor tXrB = s2r_thr_b.retile_D(tCrB);
  constexpr int K_BLOCKS = size<2>(tCrA);
  auto load_frag = [&](int kb, int s) {
    copy(s2r_a, tXsA(_, _, kb, s), tXrA(_, _, kb));
    copy(s2r_b, tXsB(_, _, kb, s), tXrB(_, _, kb));
  };

  // ---- Prologue: Stages-1 k-tiles in flight. (Issuing every prologue stage's weights before the
  // first wait, as gemm.cuh does with R, took the sync-warp kernels from 166 to 128 registers and
  // made them up to 30% slower on the H100: vgg19-L3 batch 12; kept per stage here.)
  CUTE_UNROLL
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < k_tiles) load_k_tile(s, s);
    detail::cp_async_fence();
  }
  int read_stage = 0, write_stage = STAGES - 1, next_k_tile = STAGES - 1;
  detail::cp_async_wait<STAGES - 2>();
  cusync::compute_sync<SYNC_WARP, THREADS>();
  load_frag(0, read_stage);

  // ---- Main loop
  for (int kt = 0; kt < k_tiles; ++kt) {
    CUTE_UNROLL
    for (int kb = 0; kb < K_BLOCKS; ++kb) {
      if (kb == K_BLOCKS - 1) {
        read_stage = (read_stage + 1 == STAGES) ? 0 : read_stage + 1;
        detail::cp_async_wait<STAGES - 2>();
        cusync::compute_sync<SYNC_WARP, THREADS>();
      }
      const int kb_next = (kb + 1) % K_BLOCKS;
      if (!(kt == k_tiles - 1 && kb == K_BLOCKS - 1)) load_frag(kb_next, read_stage);
      if (kb == 0) {
        if (next_k_tile < k_tiles) load_k_tile(next_k_tile, write_stage);
        ++next_k_tile;
        write_stage = (write_stage + 1 == STAGES) ? 0 : write_stage + 1;
        detail::cp_async_fence();
      }
      gemm(mma, tCrA(_, _, kb), tCrB(_, _, kb), accum);
    }
  }
  detail::cp_async_wait<0>();

  // ---- Epilogue: bias + ReLU in fp32, fp16 pairs stored from the accumulators.
  Tensor cC = make_identity_tensor(Shape<Int<BM>, Int<BN>>{});
  Tensor tCcC = thr_mma.partition_C(cC);
  half* gY = args.Y + (long long)m0 * args.K + n0;
  if constexpr (Cfg::SplitK) {
    if (splits > 1) {
      // fp32 partial of the valid rows to the workspace; the last split's block sums (in split
      // order), adds the bias, applies the ReLU, stores and alone posts.
      const long long tile = (long long)t.y * (args.K / BN) + t.x;
      float* slot0 = args.ws + tile * splits * (BM * BN);
      float* mine = slot0 + (long long)split * (BM * BN);
      CUTE_UNROLL
      for (int i = 0; i < size(accum); i += 2) {
        const int r = get<0>(tCcC(i));
        const int c = get<1>(tCcC(i));
        if (r < rows_valid) *reinterpret_cast<float2*>(mine + r * BN + c) = make_float2(accum(i), accum(i + 1));
      }
      if (!splitk_arrive(args.counters + tile, splits)) return;
      const half* bias = args.bias + n0;
      splitk_reduce_store<BM, BN, THREADS>(
          slot0, splits, rows_valid, gY, args.K, [=](float v, int c) { return fmaxf(v + __half2float(bias[c]), 0.f); },
          tid);
      stage.post(t);
      return;
    }
  }
  CUTE_UNROLL
  for (int i = 0; i < size(accum); i += 2) {
    const int r = get<0>(tCcC(i));
    const int c = get<1>(tCcC(i));
    if (r < rows_valid) {
      const float2 b = __half22float2(*reinterpret_cast<const __half2*>(args.bias + n0 + c));
      const __half2 v = __floats2half2_rn(fmaxf(accum(i) + b.x, 0.f), fmaxf(accum(i + 1) + b.y, 0.f));
      *reinterpret_cast<__half2*>(gY + (long long)r * args.K + c) = v;
    }
  }
  if constexpr (SYNC_WARP) {
    cusync::compute_sync<SYNC_WARP, THREADS>();
    stage.post_synced(t);
  } else {
    stage.post(t);
  }
}

}  // namespace cusync_kernels

// Defines extern "C" __global__ void NAME(cusync_kernels::ConvArgs, cusync::StageArgs): a Conv2D
// of configuration CFG (a ConvConfig) synchronized by the stage type STAGE (one token).
#define CUSYNC_CONV2D_KERNEL(NAME, CFG, STAGE)                                              \
  extern "C" __global__ void __launch_bounds__(CFG::kBlockThreads)                          \
      NAME(cusync_kernels::ConvArgs args, cusync::StageArgs stage_args) {                   \
    extern __shared__ __align__(128) char cusync_conv_smem[];                               \
    STAGE stage(stage_args);                                                                \
    cusync_kernels::conv2d_device<CFG>(args, stage, cusync_conv_smem);                      \
  }
