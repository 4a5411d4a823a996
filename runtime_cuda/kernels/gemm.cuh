// Synchronized tensor-core GeMM for CuSync (header-only, CuTe/CUTLASS headers, SM80 atoms).
//
//   C[M,N] = Epilogue(A'[M,K] . B[N,K]^T)       fp16 in, fp32 accumulate, fp16 out
//
// A row-major [M, K] (lda), B row-major [N, K] (ldb, the nn.Linear weight layout: a "TN" GeMM,
// both operands K-major), C row-major [M, N] (ldc).  A' is A (SwiGLU = 0), or with SwiGLU != 0
// A'[m, k] = silu(A[m, k]) * A[m, k + F], F = args.swiglu_offset (A is then the [M, 2F] output of
// the fused [W1|V] GeMM and K = F; lda >= 2F).  Both A k-blocks go through the cp.async pipeline;
// silu(g) * u is computed as 0.5 g (1 + tanh(g / 2)) u with tanh.approx and rounded once to fp16:
//   SwiGLU = 1: on the register fragments after ldmatrix, fp32 math;
//   SwiGLU = 2: same, half2 math (tanh.approx.f16x2: half the MUFU work, rel. err ~4e-4 vs 3e-4);
//   SwiGLU = 3: once per k-tile in shared memory, fp32 math (each element once per block instead
//               of once per warp column; best with BN = 256 at large M).
// Epilogues (fp32, before the fp16 store): EpiIdentity, EpiGeluTanh (tanh approximation, as
// GPT-2/3), EpiGeluErf (exact erf form).  Any M (rows >= M are zero-filled on load and never stored),
// N % BN == 0, K % BK == 0 (and F % BK == 0), checked on the device (printf + trap) and by
// cusync_kernels::gemm_args_error() on the host.
//
// Machinery (kernels/sm80_tile.cuh, shared with conv2d.cuh): SM80_16x8x16_F32F16F16F32_TN mma.sync
// TiledMMA, cp.async (16 B, .cg, zero-fill) global->shared copies through a Stages-deep pipeline, ldmatrix (SM75_U32x4_LDSM_N) shared->register
// copies, Swizzle<3,3,3> / Swizzle<2,3,3> shared layouts.  It compiles for sm_80 and sm_90 and runs
// on Hopper, but does not use wgmma / TMA (the sm_90a path, out of scope): on an H200 it runs at
// about half of cuBLAS's throughput for M >= 256 (~390 TF/s) and within 4-35% of it at M <= 64
// (see tests/cuda_src/README.md for the measured numbers and the recommended tiles per M).
//
// CuSync hooks (Stage: a struct passed by value, see runtime_cuda/cusync/stage.h), called by all
// threads of the block:
//   cusync::Tile t = stage.start();      first thing; the block computes C tile (t.x, t.y)
//                                        = (column tile, row tile), grid (N/BN, cdiv(M,BM))
//   stage.wait(cusync::Tile{k0 / ProdBN, t.y, 0});      before the cp.async of A's k-block k0
//   stage.wait(cusync::Tile{(k0 + F) / ProdBN, t.y, 0}); (SwiGLU: the second half of A too)
//                                        (issued only when k0 enters a new producer tile)
//   stage.post(t);                       after the C tile is stored
// With Reorder = true (the paper's optimization R) the B (weight) k-block copies are issued before
// the waits (all Stages-1 of the prologue before the first one), so the independent loads overlap
// the wait.  The producer of A is a GeMM of this kind
// with BN = ProdBN and the same BM (its row tile y holds the same rows).
//
// Entry point: CUSYNC_GEMM_KERNEL(name, BM, BN, BK, STAGES, WARPS_M, WARPS_N, Epilogue, SwiGLU,
// Reorder, ProdBN, StageType) defines
//   extern "C" __global__ void name(cusync_kernels::GemmArgs args, StageType stage);
//   extern "C" __device__ int name_threads, name_smem;   (block size, dynamic smem bytes)
// Launch with grid (N/BN, cdiv(M,BM), 1), block (WARPS_M*WARPS_N*32), dynamic shared memory
//   smem = STAGES * (BM*BK*(SwiGLU != 0 ? 2 : 1) + BN*BK) * 2 bytes
// (cusync_kernels::GemmConfig<...>::kThreads / kSmemBytes on the host); above 48 KB raise the
// kernel's cudaFuncAttributeMaxDynamicSharedMemorySize (CuPy: max_dynamic_shared_size_bytes).
// StageType must be a single token (use a typedef/using for template stage types).
#pragma once

#include <kernels/sm80_tile.cuh>
#include <kernels/splitk.cuh>
#include <kernels/abi.cuh>
#include <cusync/sync.h>
#include <cusync/tile.h>

namespace cusync_kernels {

struct GemmArgs {
  const half* A;
  const half* B;
  half* C;
  int M, N, K, lda, ldb, ldc, swiglu_offset;
  // Split-K (a stage whose splits() > 1, kernels/splitk.cuh): fp32 partials of every (tile, split)
  // and one arrival counter per tile (zeroed once). Unused (may be null) otherwise.
  float* ws;
  unsigned* counters;
};
CUSYNC_EXPORT_ABI(GemmArgs, GemmArgs, A, B, C, M, N, K, lda, ldb, ldc, swiglu_offset, ws, counters)

// ---------------------------------------------------------------------------------------------
// Epilogues: applied in fp32 to the accumulator before the fp16 store.
struct EpiIdentity {
  __device__ __forceinline__ float operator()(float x) const { return x; }
};
// GeLU, tanh approximation (as GPT-2/3 and torch.nn.functional.gelu(approximate="tanh")).
struct EpiGeluTanh {
  __device__ __forceinline__ float operator()(float x) const {
    const float k0 = 0.7978845608028654f, k1 = 0.044715f;
    return 0.5f * x * (1.0f + tanhf(k0 * (x + k1 * x * x * x)));
  }
};
// GeLU, exact erf form (torch.nn.functional.gelu default).
struct EpiGeluErf {
  __device__ __forceinline__ float operator()(float x) const {
    return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
  }
};

// SwiGLU in the producer's epilogue ("llama-ep" MLP): B's rows are [W1|V] interleaved by BN/2
// (block j of BN rows = W1 rows [jBN/2, (j+1)BN/2) then the same rows of V), so a BM x BN tile holds
// g = X W1^T in its first BN/2 columns and u = X V^T in the others; the tile stores
// silu(g) * u (fp32, one fp16 rounding) as a BM x BN/2 tile of C at column t.x * BN/2, staged
// through shared memory. Its consumer is a plain GeMM whose producer tiles are BN/2 wide.
struct EpiSwiGLUHalves {
  static constexpr bool kHalves = true;
  __device__ __forceinline__ float operator()(float x) const { return x; }
  __device__ __forceinline__ float combine(float g, float u) const { return g / (1.0f + __expf(-g)) * u; }
};

template <class E, class = void>
struct epi_halves : std::false_type {};
template <class E>
struct epi_halves<E, std::void_t<decltype(E::kHalves)>> : std::integral_constant<bool, E::kHalves> {};

// A stage with no synchronization (plain GeMM).  The CuSync runtime provides real stages.
struct NoStage {
  __device__ __forceinline__ cusync::Tile start() { return cusync::Tile{int(blockIdx.x), int(blockIdx.y), 0}; }
  __device__ __forceinline__ void wait(cusync::Tile) {}
  __device__ __forceinline__ void post(cusync::Tile) {}
};

// ---------------------------------------------------------------------------------------------
template <int BM_, int BN_, int BK_, int Stages_, int WarpsM_, int WarpsN_, class Epilogue_ = EpiIdentity,
          int SwiGLU_ = 0, bool Reorder_ = false, int ProdBN_ = 128, bool SyncWarp_ = false, bool SplitK_ = false>
struct GemmConfig : Sm80Tile<BM_, BN_, BK_, Stages_, WarpsM_, WarpsN_> {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, Stages = Stages_;
  static constexpr int WarpsM = WarpsM_, WarpsN = WarpsN_;
  // SwiGLU: 0 off; 1 (or true): combined on the register fragments after ldmatrix, fp32 math;
  // 2: same with half2 math; 3: combined once per k-tile in shared memory (fp32 math), before
  // ldmatrix (each element once per block instead of once per warp column: less MUFU work).
  static constexpr int SwiGLU = SwiGLU_;
  static constexpr bool Reorder = Reorder_;
  static_assert(SwiGLU >= 0 && SwiGLU <= 3, "SwiGLU must be 0 (off), 1, 2 or 3");
  static constexpr int ProdBN = ProdBN_;
  using Epilogue = Epilogue_;

  // SyncWarp: one more warp per block that does the stage's waits (gpu-scope acquire loads of the
  // producer's semaphores, off the main loop's critical path) and tells the compute warps through
  // a shared-memory word which k-tiles of A are ready; the compute warps never touch a semaphore.
  static constexpr bool SyncWarp = SyncWarp_;
  // SplitK: the kernel honours a stage's splits() > 1 (kernels/splitk.cuh; needs GemmArgs::ws and
  // ::counters). Off, the split-K code is not compiled in (it costs registers).
  static constexpr bool SplitK = SplitK_;
  static_assert(!(SplitK && SyncWarp), "split-K has no sync-warp path");
  static constexpr int kThreads = WarpsM * WarpsN * 32;          // compute threads
  static constexpr int kBlockThreads = kThreads + (SyncWarp ? 32 : 0);  // the launch's block size
  static constexpr int kATileElems = BM * BK;
  static constexpr int kBTileElems = BN * BK;
  static constexpr int kStageElems = kATileElems * (SwiGLU ? 2 : 1) + kBTileElems;
  static constexpr int kSmemBytes = Stages * kStageElems * 2;

  static_assert(BM == 64 || BM == 128 || BM == 256, "BM must be 64, 128 (or 256)");
  static_assert(BN == 64 || BN == 128 || BN == 256, "BN must be 64, 128 or 256");
  static_assert(BK == 32 || BK == 64, "BK must be 32 or 64");
  static_assert(Stages >= 2 && Stages <= 6, "Stages must be in [2, 6]");
  static_assert(BM % (16 * WarpsM) == 0, "BM must be a multiple of 16 * WarpsM");
  static_assert(BN % (16 * WarpsN) == 0, "BN must be a multiple of 16 * WarpsN");
  static_assert((BM * BK / 8) % kThreads == 0 && (BN * BK / 8) % kThreads == 0,
                "each thread must copy a whole number of 16-byte chunks per tile");
  static_assert(ProdBN % BK == 0, "a k-block of A must lie inside one producer tile: ProdBN % BK == 0");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory over the 227 KB limit of sm_90");
  static constexpr bool kHalvesEpilogue = epi_halves<Epilogue>::value;
  static_assert(!kHalvesEpilogue || (SwiGLU == 0 && kSmemBytes >= BM * BN * 4),
                "EpiSwiGLUHalves stages the fp32 tile in the pipeline's shared memory (needs BM*BN*4 bytes)");

};

// Host-side argument check: nullptr when fine, else a message.
template <class Cfg>
inline const char* gemm_args_error(const GemmArgs& a) {
  if (a.M <= 0 || a.N <= 0 || a.K <= 0) return "GeMM: M, N and K must be positive";
  if (a.N % Cfg::BN != 0) return "GeMM: N must be a multiple of the tile's BN";
  if (a.K % Cfg::BK != 0) return "GeMM: K must be a multiple of the tile's BK";
  if (a.lda % 8 || a.ldb % 8 || a.ldc % 2) return "GeMM: lda and ldb must be multiples of 8, ldc of 2";
  if (Cfg::SwiGLU != 0 && (a.swiglu_offset % Cfg::BK != 0 || a.swiglu_offset < a.K))
    return "GeMM: SwiGLU needs swiglu_offset (F) >= K and F % BK == 0";
  return nullptr;
}

namespace detail {

// Copy a [ROWS, BK] fp16 tile (row-major in global memory, ld elements apart) into one stage of a
// swizzled shared layout; rows >= rows_valid are zero-filled without reading global memory.
template <int ROWS, int BK, int THREADS, class SLayout>
__device__ __forceinline__ void load_tile(uint32_t smem_base, SLayout const& slayout, int stage, const half* g,
                                          int ld, int rows_valid, int tid) {
  constexpr int CPR = BK / 8;  // 16-byte chunks per row
  constexpr int ITERS = ROWS * CPR / THREADS;
#pragma unroll
  for (int i = 0; i < ITERS; ++i) {
    const int c = tid + i * THREADS;
    const int r = c / CPR;
    const int kc = (c % CPR) * 8;
    const bool ok = r < rows_valid;
    const half* src = g + (ok ? (long long)r * ld : 0) + kc;
    const uint32_t dst = smem_base + 2u * uint32_t(slayout(r, kc, stage));
    cp_async_16_zfill(dst, src, ok);
  }
}

__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ uint32_t tanh_approx_h2(uint32_t x) {
  uint32_t y;
  asm("tanh.approx.f16x2 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}
// silu(g) * u for a pair of halves packed in 32 bits.  Mode 1: fp32 math (tanh.approx.f32, abs.
// error ~5e-4 on tanh), one fp16 rounding of the result.  Mode 2: half2 math (tanh.approx.f16x2),
// half the MUFU work, a few fp16 roundings (rel. error ~1e-3 per element).
template <int Mode>
__device__ __forceinline__ uint32_t swiglu2(uint32_t g, uint32_t u) {
  if constexpr (Mode == 2) {
    const __half2 hg = __hmul2(*reinterpret_cast<const __half2*>(&g), __float2half2_rn(0.5f));
    const uint32_t hgu = *reinterpret_cast<const uint32_t*>(&hg);
    const uint32_t tu = tanh_approx_h2(hgu);
    const __half2 t = *reinterpret_cast<const __half2*>(&tu);
    const __half2 r = __hmul2(__hfma2(hg, t, hg), *reinterpret_cast<const __half2*>(&u));
    return *reinterpret_cast<const uint32_t*>(&r);
  } else {
    const float2 gf = __half22float2(*reinterpret_cast<const __half2*>(&g));
    const float2 uf = __half22float2(*reinterpret_cast<const __half2*>(&u));
    const float hx = 0.5f * gf.x, hy = 0.5f * gf.y;
    const float rx = fmaf(hx, tanh_approx(hx), hx) * uf.x;
    const float ry = fmaf(hy, tanh_approx(hy), hy) * uf.y;
    const __half2 r = __floats2half2_rn(rx, ry);
    return *reinterpret_cast<const uint32_t*>(&r);
  }
}

// Adapter stages whose grid covers tiles that need no work (a causal mask's upper triangle): the
// block posts such a tile without computing it.
template <class S, class = void>
struct has_skip : std::false_type {};
template <class S>
struct has_skip<S, std::void_t<decltype(std::declval<const S&>().skip(cusync::Tile{}))>> : std::true_type {};

template <class S, class = void>
struct has_poll : std::false_type {};
template <class S>
struct has_poll<S, std::void_t<decltype(std::declval<S&>().poll(cusync::Tile{}))>> : std::true_type {};

// Adapter stages (attention.cuh) that run the sync warp's loop themselves: serve_k<BK>(k_tiles, ready).
template <class S, class = void>
struct has_serve_k : std::false_type {};
template <class S>
struct has_serve_k<S, std::void_t<decltype(std::declval<S&>().template serve_k<32>(0, (uint32_t*)nullptr))>>
    : std::true_type {};

// Producer tiles waited on together by stages that offer wait_all.
constexpr int kWaitGroup = 4;

template <class S, class = void>
struct has_wait_all : std::false_type {};
template <class S>
struct has_wait_all<S, std::void_t<decltype(std::declval<S&>().wait_all(std::declval<const cusync::Tile (&)[1]>(), 0))>>
    : std::true_type {};

}  // namespace detail

template <class Cfg, class StageT>
__device__ __forceinline__ void gemm_device(const GemmArgs& args, StageT& stage, char* smem) {
  using namespace cute;
  constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, STAGES = Cfg::Stages;
  constexpr int THREADS = Cfg::kThreads;
  constexpr bool SWIGLU = Cfg::SwiGLU != 0;
  constexpr bool SW_REG = Cfg::SwiGLU == 1 || Cfg::SwiGLU == 2;  // combine on register fragments
  constexpr bool SW_SMEM = Cfg::SwiGLU == 3;                     // combine in shared memory

  constexpr bool SYNC_WARP = Cfg::SyncWarp;
  static_assert(!SYNC_WARP || detail::has_poll<StageT>::value || detail::has_serve_k<StageT>::value,
                "a sync warp needs a stage with poll() (cusync::CuStage) or serve_k() (an adapter stage)");
  const int tid = threadIdx.x;
  if (args.N % BN != 0 || args.K % BK != 0 || (SWIGLU && args.swiglu_offset % BK != 0)) {
    if (tid == 0 && blockIdx.x == 0 && blockIdx.y == 0)
      printf("cusync GeMM: N=%d must be a multiple of BN=%d and K=%d (and F=%d) of BK=%d\n", args.N, BN, args.K,
             args.swiglu_offset, BK);
    __trap();
  }

  __shared__ uint32_t s_ready;  // SYNC_WARP: k-tiles of A the sync warp has seen ready
  cusync::Tile t;
  if constexpr (SYNC_WARP) {
    if (tid == 0) s_ready = 0;
    __syncthreads();
    t = stage.start(THREADS);  // the sync warp's lane 0 takes the ticket (without the custom order)
    if constexpr (detail::has_skip<StageT>::value) {
      if (stage.skip(t)) {
        if (tid >= THREADS) return;
        cusync::compute_sync<SYNC_WARP, THREADS>();
        stage.post_synced(t);
        return;
      }
    }
    if (tid >= THREADS) {
      // The sync warp: k-block kt of A lies in producer tile kt*BK / ProdBN (SwiGLU: and in the
      // one of kt*BK + F), two lanes per k-block with SwiGLU.
      // (captures by value: a reference would put the compute warps' locals in local memory)
      // An adapter stage whose k-blocks need other producer tiles (attention.cuh) says which itself.
      if constexpr (detail::has_serve_k<StageT>::value) {
        stage.template serve_k<BK>(args.K / BK, &s_ready);
      } else {
        stage.template serve<SWIGLU ? 2 : 1>(args.K / BK, &s_ready, [F = args.swiglu_offset, ty = t.y](int kt, int i, cusync::Tile& pt) {
          if (i >= (SWIGLU ? 2 : 1)) return false;
          pt = cusync::Tile{(kt * BK + (i ? F : 0)) / Cfg::ProdBN, ty, 0};
          return true;
        });
      }
      return;
    }
  } else {
    t = stage.start();
    if constexpr (detail::has_skip<StageT>::value) {
      if (stage.skip(t)) {
        stage.post(t);
        return;
      }
    }
  }
  const int m0 = t.y * BM;
  const int n0 = t.x * BN;
  const int rows_valid = min(BM, args.M - m0);
  const int F = args.swiglu_offset;

  // Split-K: this block computes k-tiles [k_range.begin, k_range.end) of its tile.
  int split = 0, splits = 1;
  if constexpr (Cfg::SplitK && has_split<StageT>::value) {
    splits = stage.splits();
    split = stage.split();
    if (splits > 1 && (Cfg::kHalvesEpilogue || args.ws == nullptr || args.counters == nullptr)) {
      if (tid == 0) printf("cusync GeMM: split-K needs a workspace and counters, no halves epilogue\n");
      __trap();
    }
  }
  const SplitRange k_range = split_range(args.K / BK, split, splits);
  const int k_first = k_range.begin * BK;  // the first k0 of this block waits whatever its alignment

  // Shared memory: per stage [A | A2 (SwiGLU) | B] regions, each a full Stages-deep layout.
  half_t* sA_ptr = reinterpret_cast<half_t*>(smem);
  half_t* sA2_ptr = sA_ptr + (SWIGLU ? cosize(typename Cfg::SmemLayoutA{}) : 0);
  half_t* sB_ptr = sA2_ptr + cosize(typename Cfg::SmemLayoutA{});
  const uint32_t sA_addr = uint32_t(__cvta_generic_to_shared(sA_ptr));
  const uint32_t sA2_addr = uint32_t(__cvta_generic_to_shared(sA2_ptr));
  const uint32_t sB_addr = uint32_t(__cvta_generic_to_shared(sB_ptr));
  typename Cfg::SmemLayoutA lA;
  typename Cfg::SmemLayoutB lB;

  const half* gA = args.A + (long long)m0 * args.lda;
  const half* gB = args.B + (long long)n0 * args.ldb;
  const int k_tiles = k_range.end - k_range.begin;

  // A k-block [k0, k0+BK) lies inside producer tile k0 / ProdBN (ProdBN % BK == 0, F % BK == 0), so
  // the wait is issued only at the first k-block of each producer tile (waits are uniform over the block).
  // A stage with wait_all (cusync::CuStage) waits for kWaitGroup producer tiles at a time, with one
  // round trip and one barrier: a wait costs about half a microsecond even when its tile is ready.
  uint32_t known_ready = 0;
  auto wait_a = [&](int k0) {
    if constexpr (SYNC_WARP) {
      const uint32_t need = static_cast<uint32_t>(k0 / BK + 1);
      if (known_ready < need) {
        while ((known_ready = cusync::ld_acquire_cta(&s_ready)) < need) {
        }
#if defined(CUSYNC_TIMELINE)
        if (tid == 0) stage.note_wait(cusync::global_timer_ns());
#endif
      }
      return;
    }
    if constexpr (detail::has_wait_all<StageT>::value) {
      if (!SWIGLU || F % Cfg::ProdBN == 0) {
        constexpr int G = detail::kWaitGroup;
        if (k0 % (G * Cfg::ProdBN) != 0 && k0 != k_first) return;
        const int p0 = k0 / Cfg::ProdBN;
        const int n = min(G, (args.K - k0 + Cfg::ProdBN - 1) / Cfg::ProdBN);
        cusync::Tile ts[SWIGLU ? 2 * G : G];
        CUTE_UNROLL
        for (int i = 0; i < G; ++i) {
          if constexpr (SWIGLU) {
            ts[2 * i] = cusync::Tile{p0 + i, t.y, 0};
            ts[2 * i + 1] = cusync::Tile{p0 + i + F / Cfg::ProdBN, t.y, 0};
          } else {
            ts[i] = cusync::Tile{p0 + i, t.y, 0};
          }
        }
        stage.wait_all(ts, SWIGLU ? 2 * n : n);
        return;
      }
    }
    if (k0 == k_first || k0 % Cfg::ProdBN == 0) stage.wait(cusync::Tile{k0 / Cfg::ProdBN, t.y, 0});
    if constexpr (SWIGLU) {
      if (k0 == k_first || (k0 + F) % Cfg::ProdBN == 0) stage.wait(cusync::Tile{(k0 + F) / Cfg::ProdBN, t.y, 0});
    }
  };
  auto load_a = [&](int k0, int s) {
    detail::load_tile<BM, BK, THREADS>(sA_addr, lA, s, gA + k0, args.lda, rows_valid, tid);
    if constexpr (SWIGLU) detail::load_tile<BM, BK, THREADS>(sA2_addr, lA, s, gA + k0 + F, args.lda, rows_valid, tid);
  };
  auto load_b = [&](int k0, int s) { detail::load_tile<BN, BK, THREADS>(sB_addr, lB, s, gB + k0, args.ldb, BN, tid); };
  auto load_k_tile = [&](int kt, int s) {
    const int k0 = (k_range.begin + kt) * BK;
    if constexpr (Cfg::Reorder) {
      load_b(k0, s);
      wait_a(k0);
      load_a(k0, s);
    } else {
      wait_a(k0);
      load_a(k0, s);
      load_b(k0, s);
    }
  };

  // ---- MMA partitioning
  Tensor sA = make_tensor(make_smem_ptr(sA_ptr), lA);    // (BM, BK, S)
  Tensor sA2 = make_tensor(make_smem_ptr(sA2_ptr), lA);  // (BM, BK, S) SwiGLU up-projection half
  Tensor sB = make_tensor(make_smem_ptr(sB_ptr), lB);    // (BN, BK, S)

  typename Cfg::TiledMma mma;
  auto thr_mma = mma.get_slice(tid);
  Tensor tCrA = thr_mma.partition_fragment_A(sA(_, _, 0));  // (MMA, MMA_M, MMA_K)
  Tensor tCrA2 = thr_mma.partition_fragment_A(sA(_, _, 0));
  Tensor tCrB = thr_mma.partition_fragment_B(sB(_, _, 0));  // (MMA, MMA_N, MMA_K)
  Tensor accum = partition_fragment_C(mma, Shape<Int<BM>, Int<BN>>{});  // (MMA, MMA_M, MMA_N)
  clear(accum);

  auto s2r_a = make_tiled_copy_A(typename Cfg::S2RAtom{}, mma);
  auto s2r_thr_a = s2r_a.get_slice(tid);
  Tensor tXsA = s2r_thr_a.partition_S(sA);  // (CPY, CPY_M, CPY_K, S)
  Tensor tXsA2 = s2r_thr_a.partition_S(sA2);
  Tensor tXrA = s2r_thr_a.retile_D(tCrA);
  Tensor tXrA2 = s2r_thr_a.retile_D(tCrA2);
  auto s2r_b = make_tiled_copy_B(typename Cfg::S2RAtom{}, mma);
  auto s2r_thr_b = s2r_b.get_slice(tid);
  Tensor tXsB = s2r_thr_b.partition_S(sB);
  Tensor tXrB = s2r_thr_b.retile_D(tCrB);

  constexpr int K_BLOCKS = size<2>(tCrA);

  auto load_frag = [&](int kb, int s) {
    copy(s2r_a, tXsA(_, _, kb, s), tXrA(_, _, kb));
    if constexpr (SW_REG) copy(s2r_a, tXsA2(_, _, kb, s), tXrA2(_, _, kb));
    copy(s2r_b, tXsB(_, _, kb, s), tXrB(_, _, kb));
  };
  // SwiGLU: A'[m,k] = silu(g) * u = 0.5 g (1 + tanh(g/2)) u on the ldmatrix'ed fragments, two
  // halves at a time (one tanh.approx per element in fp32 mode, one per pair in half2 mode).
  auto combine = [&](int kb) {
    if constexpr (SW_REG) {
      Tensor g = recast<uint32_t>(tCrA(_, _, kb));
      Tensor u = recast<uint32_t>(tCrA2(_, _, kb));
      CUTE_UNROLL
      for (int i = 0; i < size(g); ++i) g(i) = detail::swiglu2<Cfg::SwiGLU>(g(i), u(i));
    }
  };

  // SwiGLU mode 3: sA[s] = silu(sA[s]) * sA2[s] for one complete stage, 8 halves per access.
  auto transform = [&](int s) {
    if constexpr (SW_SMEM) {
      constexpr int CPR = BK / 8;
      constexpr int ITERS = BM * CPR / THREADS;
      CUTE_UNROLL
      for (int i = 0; i < ITERS; ++i) {
        const int c = tid + i * THREADS;
        const int off = lA(c / CPR, (c % CPR) * 8, s);
        uint4 g = *reinterpret_cast<const uint4*>(sA_ptr + off);
        const uint4 u = *reinterpret_cast<const uint4*>(sA2_ptr + off);
        g.x = detail::swiglu2<1>(g.x, u.x);
        g.y = detail::swiglu2<1>(g.y, u.y);
        g.z = detail::swiglu2<1>(g.z, u.z);
        g.w = detail::swiglu2<1>(g.w, u.w);
        *reinterpret_cast<uint4*>(sA_ptr + off) = g;
      }
    }
  };

  // ---- Prologue: Stages-1 k-tiles in flight. With R, every prologue stage's B is issued before
  // the first wait (cp.async group 0 = B[0..S-2] + A[0], group s = A[s]: waiting for group s still
  // means k-tile s has landed).
  if constexpr (Cfg::Reorder) {
    CUTE_UNROLL
    for (int s = 0; s < STAGES - 1; ++s) {
      if (s < k_tiles) load_b((k_range.begin + s) * BK, s);
    }
    CUTE_UNROLL
    for (int s = 0; s < STAGES - 1; ++s) {
      if (s < k_tiles) {
        wait_a((k_range.begin + s) * BK);
        load_a((k_range.begin + s) * BK, s);
      }
      detail::cp_async_fence();
    }
  } else {
    CUTE_UNROLL
    for (int s = 0; s < STAGES - 1; ++s) {
      if (s < k_tiles) load_k_tile(s, s);
      detail::cp_async_fence();
    }
  }
  int read_stage = 0;
  int write_stage = STAGES - 1;
  int next_k_tile = STAGES - 1;

  detail::cp_async_wait<STAGES - 2>();
  cusync::compute_sync<SYNC_WARP, THREADS>();
  if constexpr (SW_SMEM) {
    transform(read_stage);
    cusync::compute_sync<SYNC_WARP, THREADS>();
  }
  load_frag(0, read_stage);

  // ---- Main loop
  for (int kt = 0; kt < k_tiles; ++kt) {
    CUTE_UNROLL
    for (int kb = 0; kb < K_BLOCKS; ++kb) {
      if (kb == K_BLOCKS - 1) {
        // mode 3: issue this k-block's MMAs first so the tensor cores overlap the transform
        if constexpr (SW_SMEM) gemm(mma, tCrA(_, _, kb), tCrB(_, _, kb), accum);
        read_stage = (read_stage + 1 == STAGES) ? 0 : read_stage + 1;
        detail::cp_async_wait<STAGES - 2>();
        cusync::compute_sync<SYNC_WARP, THREADS>();
        if constexpr (SW_SMEM) {
          if (kt != k_tiles - 1) {
            transform(read_stage);
            cusync::compute_sync<SYNC_WARP, THREADS>();
          }
        }
      }
      const int kb_next = (kb + 1) % K_BLOCKS;
      if (!(kt == k_tiles - 1 && kb == K_BLOCKS - 1)) load_frag(kb_next, read_stage);
      if (kb == 0) {
        if (next_k_tile < k_tiles) load_k_tile(next_k_tile, write_stage);
        ++next_k_tile;
        write_stage = (write_stage + 1 == STAGES) ? 0 : write_stage + 1;
        detail::cp_async_fence();
      }
      if (!(SW_SMEM && kb == K_BLOCKS - 1)) {
        combine(kb);
        gemm(mma, tCrA(_, _, kb), tCrB(_, _, kb), accum);
      }
    }
  }
  detail::cp_async_wait<0>();

  // ---- Epilogue: fp32 functor, fp16 pairs stored straight from the accumulators.
  typename Cfg::Epilogue epi;
  Tensor cC = make_identity_tensor(Shape<Int<BM>, Int<BN>>{});
  Tensor tCcC = thr_mma.partition_C(cC);  // same layout as accum; element i+1 is column +1 (i even)
  if (Cfg::SplitK && splits > 1) {
    // fp32 partial of the valid rows to the workspace; the last split's block sums, stores, posts.
    const long long tile = ((long long)t.z * ((args.M + BM - 1) / BM) + t.y) * (args.N / BN) + t.x;
    float* slot0 = args.ws + tile * splits * (BM * BN);
    float* mine = slot0 + (long long)split * (BM * BN);
    CUTE_UNROLL
    for (int i = 0; i < size(accum); i += 2) {
      const int r = get<0>(tCcC(i));
      const int c = get<1>(tCcC(i));
      if (r < rows_valid) *reinterpret_cast<float2*>(mine + r * BN + c) = make_float2(accum(i), accum(i + 1));
    }
    if (!splitk_arrive(args.counters + tile, splits)) return;
    splitk_reduce_store<BM, BN, THREADS>(slot0, splits, rows_valid, args.C + (long long)m0 * args.ldc + n0, args.ldc,
                                         epi, tid);
    stage.post(t);
    return;
  }
  if constexpr (Cfg::kHalvesEpilogue) {
    // fp32 tile to shared memory (the pipeline's buffers are free: every cp.async has landed and
    // the barrier below orders the last ldmatrix reads before the overwrite), then silu(g) * u.
    constexpr int HALF = BN / 2;
    float* sC = reinterpret_cast<float*>(smem);
    cusync::compute_sync<SYNC_WARP, THREADS>();
    CUTE_UNROLL
    for (int i = 0; i < size(accum); i += 2) {
      const int r = get<0>(tCcC(i));
      const int c = get<1>(tCcC(i));
      *reinterpret_cast<float2*>(sC + r * BN + c) = make_float2(accum(i), accum(i + 1));
    }
    cusync::compute_sync<SYNC_WARP, THREADS>();
    half* gC = args.C + (long long)m0 * args.ldc + t.x * HALF;
    for (int e = tid * 2; e < BM * HALF; e += THREADS * 2) {
      const int r = e / HALF;
      const int c = e % HALF;
      if (r < rows_valid) {
        const float* row = sC + r * BN;
        const __half2 v = __floats2half2_rn(epi.combine(row[c], row[c + HALF]), epi.combine(row[c + 1], row[c + 1 + HALF]));
        *reinterpret_cast<__half2*>(gC + (long long)r * args.ldc + c) = v;
      }
    }
  } else {
    half* gC = args.C + (long long)m0 * args.ldc + n0;
    CUTE_UNROLL
    for (int i = 0; i < size(accum); i += 2) {
      const int r = get<0>(tCcC(i));
      const int c = get<1>(tCcC(i));
      if (r < rows_valid) {
        const __half2 v = __floats2half2_rn(epi(accum(i)), epi(accum(i + 1)));
        *reinterpret_cast<__half2*>(gC + (long long)r * args.ldc + c) = v;
      }
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

#define CUSYNC_GEMM_KERNEL(name, BM, BN, BK, STAGES, WARPS_M, WARPS_N, Epilogue, SwiGLU, Reorder, ProdBN, StageType) \
  using name##_config =                                                                                            \
      cusync_kernels::GemmConfig<BM, BN, BK, STAGES, WARPS_M, WARPS_N, Epilogue, SwiGLU, Reorder, ProdBN>;         \
  extern "C" __device__ int name##_threads = name##_config::kThreads;                                             \
  extern "C" __device__ int name##_smem = name##_config::kSmemBytes;                                              \
  extern "C" __global__ void __launch_bounds__(WARPS_M * WARPS_N * 32)                                            \
      name(cusync_kernels::GemmArgs args, StageType stage) {                                                      \
    extern __shared__ __align__(128) char cusync_gemm_smem[];                                                     \
    cusync_kernels::gemm_device<name##_config>(args, stage, cusync_gemm_smem);                                    \
  }
