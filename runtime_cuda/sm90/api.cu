// The extern "C" API of libcusync_sm90.so (sm90_api.h), its tables made from configs.def, and the
// layouts of its structs (abi.h).
#include <string.h>

#include <string>

#include <cuda_fp16.h>

#include "abi.h"
#include "plan.h"

namespace {
struct Entry {
  const char* name;
  cusync_sm90::CreatePlan create;
};
const Entry kConfigs[] = {
#define CUSYNC_SM90_TILE(NAME, BM, BN, BK, PINGPONG, EPI_COLS) {#NAME, cusync_sm90::plan_##NAME},
#include "configs.def"
};
struct StockEntry {
  const char* name;
  cusync_sm90::StockGemmFn run;
};
const StockEntry kStock[] = {
#define CUSYNC_SM90_STOCK(NAME, BM, BN, BK) {#NAME, cusync_sm90::stock_##NAME},
#include "configs.def"
};

struct SwapEntry {
  const char* name;
  cusync_sm90::SwapGemmFn run;
};
const SwapEntry kSwap[] = {
#define CUSYNC_SM90_SWAP(NAME, BT, BW, BK, CW, STAGES) {#NAME, cusync_sm90::swap_##NAME},
#include "configs.def"
};

// SwiGLU of the first GeMM's output in the weight's row order ([W1|V] interleaved by 64 columns):
// y[m, 64 b + j] = silu(yp[m, 128 b + j]) * yp[m, 128 b + 64 + j], 8 columns a thread (16-byte
// loads and store). PDL-launched after the GeMM that writes yp: it lets the next GeMM launch at once
// (that one issues its weight loads, then waits for this grid), then waits for the GeMM's grid.
__global__ void swiglu_pair_kernel(const __half* yp, __half* y, int M, int N) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  const int n_out = N / 2, vecs = n_out / 8;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < static_cast<long long>(M) * vecs;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int m = static_cast<int>(i / vecs), c = static_cast<int>(i % vecs) * 8;
    const __half* row = yp + static_cast<size_t>(m) * N + (c / 64) * 128 + c % 64;
    const uint4 g = *reinterpret_cast<const uint4*>(row), u = *reinterpret_cast<const uint4*>(row + 64);
    const __half2* gh = reinterpret_cast<const __half2*>(&g);
    const __half2* uh = reinterpret_cast<const __half2*>(&u);
    uint4 out;
    __half2* oh = reinterpret_cast<__half2*>(&out);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 a = __half22float2(gh[j]), b = __half22float2(uh[j]);
      oh[j] = __floats2half2_rn(a.x / (1.f + __expf(-a.x)) * b.x, a.y / (1.f + __expf(-a.y)) * b.y);
    }
    *reinterpret_cast<uint4*>(y + static_cast<size_t>(m) * n_out + c) = out;
  }
}

// The names of a table, comma-separated, built once.
template <class E, size_t N>
const char* joined(const E (&table)[N]) {
  static const std::string names = [&table] {
    std::string s;
    for (const E& e : table) s += (s.empty() ? "" : ",") + std::string(e.name);
    return s;
  }();
  return names.c_str();
}

#define CUSYNC_SM90_STR_(x) #x
#define CUSYNC_SM90_STR(x) CUSYNC_SM90_STR_(x)
#ifndef CUSYNC_SM90_SOURCE_HASH
#define CUSYNC_SM90_SOURCE_HASH unknown
#endif
}  // namespace

extern "C" {

const char* cusync_sm90_configs(void) { return joined(kConfigs); }

const char* cusync_sm90_stock_configs(void) { return joined(kStock); }

const char* cusync_sm90_source_hash(void) { return CUSYNC_SM90_STR(CUSYNC_SM90_SOURCE_HASH); }

int cusync_sm90_stock_gemm(const char* config, int cluster_m, const void* A, const void* B, void* C, int M, int N, int K,
                           int raster, int swizzle, void* stream) {
  if (config == nullptr || A == nullptr || B == nullptr || C == nullptr) return CUSYNC_SM90_BAD_ARGUMENT;
  if (cluster_m != 1 && cluster_m != 2) return CUSYNC_SM90_BAD_ARGUMENT;
  for (const StockEntry& e : kStock) {
    if (strcmp(e.name, config) == 0) return e.run(cluster_m, A, B, C, M, N, K, raster, swizzle, static_cast<cudaStream_t>(stream));
  }
  return CUSYNC_SM90_BAD_CONFIG;
}

const char* cusync_sm90_swap_configs(void) { return joined(kSwap); }

int cusync_sm90_swap_gemm(const char* config, int epilogue, const void* W, const void* X, void* Y, int M, int N, int K,
                          int ldy, int pdl, void* stream) {
  if (config == nullptr || W == nullptr || X == nullptr || Y == nullptr) return CUSYNC_SM90_BAD_ARGUMENT;
  for (const SwapEntry& e : kSwap) {
    if (strcmp(e.name, config) == 0) return e.run(epilogue, W, X, Y, M, N, K, ldy, pdl, static_cast<cudaStream_t>(stream));
  }
  return CUSYNC_SM90_BAD_CONFIG;
}

int cusync_sm90_swiglu_pair(const void* yp, void* y, int M, int N, int pdl, void* stream) {
  if (yp == nullptr || y == nullptr || M < 1) return CUSYNC_SM90_BAD_ARGUMENT;
  if (N % 128 != 0 || reinterpret_cast<uintptr_t>(yp) % 16 != 0 || reinterpret_cast<uintptr_t>(y) % 16 != 0)
    return CUSYNC_SM90_BAD_SHAPE;
  const long long vecs = static_cast<long long>(M) * (N / 16);
  cudaLaunchConfig_t cfg = {};
  cfg.blockDim = dim3(256);
  cfg.gridDim = dim3(static_cast<unsigned>(vecs < 256 * 264 ? (vecs + 255) / 256 : 264));
  cfg.stream = static_cast<cudaStream_t>(stream);
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = pdl ? 1 : 0;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, swiglu_pair_kernel, static_cast<const __half*>(yp),
                                           static_cast<__half*>(y), M, N);
  return static_cast<int>(e != cudaSuccess ? e : cudaGetLastError());
}

int cusync_sm90_plan_create(const char* config, const CusyncSm90Gemm* gemms, int n_gemms, unsigned long long* ticket,
                            int grid, int flags, long long timeout_ns, CusyncSm90Debug* debug,
                            void** plan_out) {
  if (config == nullptr || plan_out == nullptr) return CUSYNC_SM90_BAD_ARGUMENT;
  *plan_out = nullptr;
  for (const Entry& e : kConfigs) {
    if (strcmp(e.name, config) == 0) {
      cusync_sm90::PlanBase* plan = nullptr;
      const int r = e.create(gemms, n_gemms, ticket, grid, flags, timeout_ns, debug, &plan);
      if (r == 0) *plan_out = plan;
      return r;
    }
  }
  return CUSYNC_SM90_BAD_CONFIG;
}

int cusync_sm90_plan_launch(void* plan, void* stream) {
  if (plan == nullptr) return CUSYNC_SM90_BAD_ARGUMENT;
  return static_cast<cusync_sm90::PlanBase*>(plan)->launch(static_cast<cudaStream_t>(stream));
}

int cusync_sm90_plan_grid(void* plan) { return plan == nullptr ? -1 : static_cast<cusync_sm90::PlanBase*>(plan)->grid; }

int cusync_sm90_plan_destroy(void* plan) {
  delete static_cast<cusync_sm90::PlanBase*>(plan);
  return 0;
}

const char* cusync_sm90_error_string(int code) {
  switch (code) {
    case CUSYNC_SM90_OK: return "ok";
    case CUSYNC_SM90_BAD_CONFIG: return "no such sm90 tile configuration";
    case CUSYNC_SM90_BAD_SHAPE: return "shape not supported by this tile configuration (N, K multiples of the tile; ldc; order extent)";
    case CUSYNC_SM90_BAD_ARGUMENT: return "bad argument (null pointer, GeMM count, epilogue, policy, or grid larger than the SMs)";
    case CUSYNC_SM90_TMA_DESCRIPTOR: return "TMA descriptor creation failed";
    default: return code > 0 && code < 10000 ? cudaGetErrorString(static_cast<cudaError_t>(code)) : "unknown error";
  }
}

}  // extern "C"
