// The type-erased launch plan that api.cu hands out (one implementation per tile configuration,
// sync_gemm_host.cuh), and the configurations this library holds (configs.def).
#pragma once
#include <cuda_runtime.h>

#include "sm90_api.h"

namespace cusync_sm90 {

struct PlanBase {
  virtual ~PlanBase() {}
  virtual int launch(cudaStream_t stream) = 0;
  int grid = 0;
};

using CreatePlan = int (*)(const CusyncSm90Gemm*, int, unsigned long long*, int, int, long long, CusyncSm90Debug*, PlanBase**);

// The stock CUTLASS reference kernels: cluster_m 1 or 2.
using StockGemmFn = int (*)(int cluster_m, const void* A, const void* B, void* C, int M, int N, int K, int raster,
                            int swizzle, cudaStream_t stream);

// The swapped GeMM of token generation (swap.cu): epilogue IDENTITY or GELU_TANH, Y's row stride ldy.
using SwapGemmFn = int (*)(int epilogue, const void* W, const void* X, void* Y, int M, int N, int K, int ldy, int pdl,
                           cudaStream_t stream);
// Both GeMMs of the swapped MLP in one persistent launch (swap_chain.cuh).
using SwapMlpFn = int (*)(int epilogue1, const void* W1, const void* X, void* Y, const void* W2, void* Z, int M, int N1,
                          int K1, int N2, int ldy, int ldz, uint32_t* sync, long long timeout_ns, cudaStream_t stream);

// plan_<NAME>: config.cu compiled for that line of configs.def; stock_<NAME>: stock.cu; swap_<NAME>:
// swap.cu.
#define CUSYNC_SM90_TILE(NAME, BM, BN, BK, PINGPONG, EPI_COLS) \
  int plan_##NAME(const CusyncSm90Gemm*, int, unsigned long long*, int, int, long long, CusyncSm90Debug*, PlanBase**);
#define CUSYNC_SM90_STOCK(NAME, BM, BN, BK) \
  int stock_##NAME(int, const void*, const void*, void*, int, int, int, int, int, cudaStream_t);
#define CUSYNC_SM90_SWAP(NAME, BT, BW, BK, CW, STAGES, XA, KS)                                              \
  int swap_##NAME(int, const void*, const void*, void*, int, int, int, int, int, cudaStream_t);         \
  int swap_##NAME##_mlp(int, const void*, const void*, void*, const void*, void*, int, int, int, int, int, int, \
                        uint32_t*, long long, cudaStream_t);
#include "configs.def"

}  // namespace cusync_sm90
