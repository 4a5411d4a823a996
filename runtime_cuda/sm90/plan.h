// The type-erased launch plan that api.cu hands out (one implementation per tile configuration,
// sync_gemm_host.cuh), and the configurations this library holds.
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

// Defined in config_<name>.cu.
int plan_128x128x64(const CusyncSm90Gemm*, int, unsigned long long*, int, int, long long, CusyncSm90Debug*, PlanBase**);
int plan_128x256x64(const CusyncSm90Gemm*, int, unsigned long long*, int, int, long long, CusyncSm90Debug*, PlanBase**);
int plan_64x128x64(const CusyncSm90Gemm*, int, unsigned long long*, int, int, long long, CusyncSm90Debug*, PlanBase**);
int plan_128x192x64(const CusyncSm90Gemm*, int, unsigned long long*, int, int, long long, CusyncSm90Debug*, PlanBase**);
int plan_256x128x64(const CusyncSm90Gemm*, int, unsigned long long*, int, int, long long, CusyncSm90Debug*, PlanBase**);
int plan_64x128x64pp(const CusyncSm90Gemm*, int, unsigned long long*, int, int, long long, CusyncSm90Debug*, PlanBase**);
int plan_128x128x64pp(const CusyncSm90Gemm*, int, unsigned long long*, int, int, long long, CusyncSm90Debug*, PlanBase**);
int plan_128x128x64tma(const CusyncSm90Gemm*, int, unsigned long long*, int, int, long long, CusyncSm90Debug*, PlanBase**);
int plan_128x192x64tma(const CusyncSm90Gemm*, int, unsigned long long*, int, int, long long, CusyncSm90Debug*, PlanBase**);
int plan_128x256x64tma(const CusyncSm90Gemm*, int, unsigned long long*, int, int, long long, CusyncSm90Debug*, PlanBase**);
int plan_256x128x64tma(const CusyncSm90Gemm*, int, unsigned long long*, int, int, long long, CusyncSm90Debug*, PlanBase**);

// The stock CUTLASS reference kernels (stock_<tile>.cu): cluster_m 1 or 2.
using StockGemmFn = int (*)(int cluster_m, const void* A, const void* B, void* C, int M, int N, int K, int raster,
                            int swizzle, cudaStream_t stream);
int stock_128x128x64(int, const void*, const void*, void*, int, int, int, int, int, cudaStream_t);
int stock_128x256x64(int, const void*, const void*, void*, int, int, int, int, int, cudaStream_t);

}  // namespace cusync_sm90
