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

}  // namespace cusync_sm90
