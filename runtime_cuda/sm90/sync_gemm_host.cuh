// Host side of the synchronized sm90 GeMM: a launch plan per tile configuration (TMA descriptors
// built once through the collective's to_underlying_arguments; cudaLaunchKernelEx, so the PDL
// attribute can be set). Each config_*.cu instantiates it for one tile shape.
#pragma once
#include <cuda_runtime.h>

#include "cutlass/cuda_host_adapter.hpp"
#include "cutlass/util/packed_stride.hpp"
#include "plan.h"
#include "sync_gemm.cuh"

namespace cusync_sm90 {

#define CUSYNC_SM90_CHECK(expr)                      \
  do {                                               \
    cudaError_t e_ = (expr);                         \
    if (e_ != cudaSuccess) return static_cast<int>(e_); \
  } while (0)

inline int tiles_of(const CusyncSm90Order& o) { return o.extent[0] * o.extent[1] * o.extent[2]; }

template <class Cfg>
struct Plan : PlanBase {
  KernelParams<Cfg> params;
  size_t smem = 0;
  int flags = 0;

  static int check(const CusyncSm90Gemm& g) {
    if (g.A == nullptr || g.B == nullptr || g.C == nullptr) return CUSYNC_SM90_BAD_ARGUMENT;
    if (g.M < 1 || g.N < 1 || g.K < 1) return CUSYNC_SM90_BAD_SHAPE;
    if (g.N % Cfg::BN != 0 || g.K % Cfg::BK != 0) return CUSYNC_SM90_BAD_SHAPE;
    if (g.epilogue < 0 || g.epilogue > CUSYNC_SM90_EPI_SWIGLU_PAIR) return CUSYNC_SM90_BAD_ARGUMENT;
    if (g.epilogue == CUSYNC_SM90_EPI_SWIGLU_PAIR && (g.N % 128 != 0 || Cfg::BN % 128 != 0)) return CUSYNC_SM90_BAD_SHAPE;
    const int out_cols = g.epilogue == CUSYNC_SM90_EPI_SWIGLU_PAIR ? g.N / 2 : g.N;
    if (g.ldc < out_cols || g.ldc % 8 != 0) return CUSYNC_SM90_BAD_SHAPE;
    // The order must cover exactly the tile grid.
    const int X = g.N / Cfg::BN, Y = (g.M + Cfg::BM - 1) / Cfg::BM;
    if (g.order.extent[0] != X || g.order.extent[1] != Y || g.order.extent[2] != 1) return CUSYNC_SM90_BAD_SHAPE;
    if (g.in_sems != nullptr) {
      if (g.in_policy.num_sems <= 0 || g.in_tile_n <= 0 || g.in_tile_n % Cfg::BK != 0) return CUSYNC_SM90_BAD_ARGUMENT;
      // The producer's row tile: a power of two, at most 32 of them in this GeMM's (the sync warp
      // polls whole producer columns of R = BM / in_tile_m rows in one warp).
      const int in_bm = g.in_tile_m > 0 ? g.in_tile_m : Cfg::BM;
      if (g.in_tile_m < 0 || (in_bm & (in_bm - 1)) != 0 || (Cfg::BM % in_bm == 0 && Cfg::BM / in_bm > 32) ||
          (Cfg::BM % in_bm != 0 && in_bm % Cfg::BM != 0))
        return CUSYNC_SM90_BAD_ARGUMENT;
      if (g.K / g.in_tile_n > g.in_policy.extent[0] || g.in_policy.extent[1] < (g.M + in_bm - 1) / in_bm)
        return CUSYNC_SM90_BAD_SHAPE;
    }
    if (g.out_sems != nullptr) {
      if (g.out_policy.num_sems <= 0 || g.out_policy.extent[0] != X || g.out_policy.extent[1] != Y)
        return CUSYNC_SM90_BAD_SHAPE;
    }
    if (g.store != CUSYNC_SM90_STORE_QUAD && g.store != CUSYNC_SM90_STORE_PAIR) return CUSYNC_SM90_BAD_ARGUMENT;
    // the quad stores exchange groups of 4 x 8 columns: BN a multiple of 32 (128x144 stores pairs)
    if (g.store == CUSYNC_SM90_STORE_QUAD && Cfg::BN % 32 != 0) return CUSYNC_SM90_BAD_ARGUMENT;
    // The quad stores write 16 bytes at C + row * ldc + 8j, a TMA store needs a 16-byte aligned global
    // address: C must be 16-byte aligned (ldc % 8 == 0 above).
    if ((g.store == CUSYNC_SM90_STORE_QUAD || tma_store(g)) && reinterpret_cast<uintptr_t>(g.C) % 16 != 0)
      return CUSYNC_SM90_BAD_SHAPE;
    if (g.order.groups_outer == 2 && (g.order.group_stride < 1 || g.order.group_stride > Y)) return CUSYNC_SM90_BAD_ARGUMENT;
    if (g.splits < 0 || g.splits > g.K / Cfg::BK || g.splits > kMaxSplits) return CUSYNC_SM90_BAD_ARGUMENT;
    if (g.split_from < 0 || g.split_from > X * Y) return CUSYNC_SM90_BAD_ARGUMENT;
    return 0;
  }
  static constexpr int kMaxSplits = 64;

  // The TMA-store epilogue's C: a 2D tensor [M rows, output columns] (row stride ldc), a box of 32
  // columns by BM rows, 64-byte swizzled in shared memory (sync_gemm.cuh's stage_columns); rows past
  // M are clipped by the store.
  static bool tma_store(const CusyncSm90Gemm& g) { return Cfg::kTmaStore && g.epilogue != CUSYNC_SM90_EPI_SWIGLU_PAIR; }
  static int encode_c_map(const CusyncSm90Gemm& g, CUtensorMap* map) {
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(g.N), static_cast<cuuint64_t>(g.M)};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(g.ldc) * 2u};
    const cuuint32_t box[2] = {32u, static_cast<cuuint32_t>(Cfg::BM)};
    const cuuint32_t elem[2] = {1u, 1u};
    const CUresult r = CUTLASS_CUDA_DRIVER_WRAPPER_CALL(cuTensorMapEncodeTiled)(
        map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, g.C, dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
        CU_TENSOR_MAP_SWIZZLE_64B, CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? 0 : CUSYNC_SM90_TMA_DESCRIPTOR;
  }

  ~Plan() override {
    for (int i = 0; i < kMaxGemms; ++i) {
      if (params.partials[i] != nullptr) cudaFree(params.partials[i]);
      if (params.split_count[i] != nullptr) cudaFree(params.split_count[i]);
    }
  }

  int init(const CusyncSm90Gemm* gemms, int n, unsigned long long* ticket, int grid_req, int flags_, long long timeout,
           CusyncSm90Debug* debug) {
    using Mainloop = typename Cfg::Mainloop;
    if (gemms == nullptr || n < 1 || n > kMaxGemms) return CUSYNC_SM90_BAD_ARGUMENT;
    params = KernelParams<Cfg>{};
    for (int i = 0; i < n; ++i) {
      const CusyncSm90Gemm& g = gemms[i];
      if (int r = check(g)) return r;
      if (g.in_sems != nullptr && ticket == nullptr) return CUSYNC_SM90_BAD_ARGUMENT;
      using StrideA = typename Mainloop::StrideA;
      using StrideB = typename Mainloop::StrideB;
      auto sA = cutlass::make_cute_packed_stride(StrideA{}, cute::make_shape(g.M, g.K, 1));
      auto sB = cutlass::make_cute_packed_stride(StrideB{}, cute::make_shape(g.N, g.K, 1));
      typename Mainloop::Arguments args{static_cast<const cutlass::half_t*>(g.A), sA,
                                        static_cast<const cutlass::half_t*>(g.B), sB};
      auto shape = cute::make_shape(g.M, g.N, g.K, 1);
      if (!Mainloop::can_implement(shape, args)) return CUSYNC_SM90_BAD_SHAPE;
      params.ml[i] = Mainloop::to_underlying_arguments(shape, args, nullptr);
      params.g[i] = g;
      if (tma_store(g)) {
        if (int r = encode_c_map(g, &params.c_map[i])) return r;
      }
      const int tiles = tiles_of(g.order);
      // split tiles: those from split_from on (sync_gemm.cuh's item_work), each S items and a
      // workspace slot; a split with no split tile is no split
      const int split_tiles = g.splits > 1 ? tiles - g.split_from : 0;
      const int S = split_tiles > 0 ? g.splits : 1;
      if (S == 1) params.g[i].splits = 1;
      if (S > 1) {
        const size_t part = static_cast<size_t>(split_tiles) * S * Cfg::BM * Cfg::BN * sizeof(float);
        CUSYNC_SM90_CHECK(cudaMalloc(&params.partials[i], part));
        CUSYNC_SM90_CHECK(cudaMalloc(&params.split_count[i], static_cast<size_t>(split_tiles) * sizeof(uint32_t)));
        CUSYNC_SM90_CHECK(cudaMemset(params.split_count[i], 0, static_cast<size_t>(split_tiles) * sizeof(uint32_t)));
        CUSYNC_SM90_CHECK(cudaDeviceSynchronize());
      }
      params.sched.add(cusync::OrderDesc{g.order}, cusync::sm90::StageWork{tiles, g.K / Cfg::BK, S, g.split_from});
      params.any_wait = params.any_wait || g.in_sems != nullptr;
    }
    const int items = params.sched.items();
    params.ticket = ticket;
    params.flags = flags_;
    params.timeout_ns = timeout;
    params.debug = debug;
    flags = flags_;
    smem = sizeof(typename Cfg::SharedStorage);
    int dev = 0, sms = 0;
    CUSYNC_SM90_CHECK(cudaGetDevice(&dev));
    CUSYNC_SM90_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    grid = grid_req > 0 ? grid_req : sms;
    if (grid > items) grid = items;
    // Every CTA must be resident at once (the chain's argument, docs/sm90.md): one per SM.
    if (grid > sms) return CUSYNC_SM90_BAD_ARGUMENT;
    CUSYNC_SM90_CHECK(cudaFuncSetAttribute(sync_gemm_kernel<Cfg>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem)));
    return 0;
  }

  int launch(cudaStream_t stream) override {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(static_cast<unsigned>(grid), 1, 1);
    cfg.blockDim = dim3(Cfg::kThreads, 1, 1);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    cfg.numAttrs = 0;
    if (flags & CUSYNC_SM90_PDL_LAUNCH) {
      attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr[0].val.programmaticStreamSerializationAllowed = 1;
      cfg.numAttrs = 1;
    }
    cfg.attrs = attr;
    CUSYNC_SM90_CHECK(cudaLaunchKernelEx(&cfg, sync_gemm_kernel<Cfg>, params));
    return static_cast<int>(cudaGetLastError());
  }
};

template <class Cfg>
int create_plan(const CusyncSm90Gemm* gemms, int n, unsigned long long* ticket, int grid, int flags, long long timeout,
                CusyncSm90Debug* debug, PlanBase** out) {
  auto* plan = new Plan<Cfg>();
  const int r = plan->init(gemms, n, ticket, grid, flags, timeout, debug);
  if (r != 0) {
    delete plan;
    return r;
  }
  *out = plan;
  return 0;
}

// One per config_*.cu (PP: the ping-pong form, Config's PingPong).
#define CUSYNC_SM90_CONFIG_T(FN, ...)                                                                             \
  int FN(const CusyncSm90Gemm* gemms, int n, unsigned long long* ticket, int grid, int flags, long long timeout, \
         CusyncSm90Debug* debug, PlanBase** out) {                                                              \
    return create_plan<__VA_ARGS__>(gemms, n, ticket, grid, flags, timeout, debug, out);                               \
  }
#define CUSYNC_SM90_CONFIG(FN, BM, BN, BK) CUSYNC_SM90_CONFIG_T(FN, Config<BM, BN, BK, false>)
#define CUSYNC_SM90_CONFIG_PP(FN, BM, BN, BK) CUSYNC_SM90_CONFIG_T(FN, Config<BM, BN, BK, true>)
// TMA: the TMA-store epilogue, EPI columns staged at a time.
#define CUSYNC_SM90_CONFIG_TMA(FN, BM, BN, BK, EPI) CUSYNC_SM90_CONFIG_T(FN, Config<BM, BN, BK, false, EPI>)

}  // namespace cusync_sm90
