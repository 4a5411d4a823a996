// The extern "C" API of libcusync_sm90.so (sm90_api.h), its tables made from configs.def, and the
// layouts of its structs (abi.h).
#include <string.h>

#include <string>

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
  cusync_sm90::SwapMlpFn mlp;
};
const SwapEntry kSwap[] = {
#define CUSYNC_SM90_SWAP(NAME, BT, BW, BK, CW, STAGES, XA, KS) {#NAME, cusync_sm90::swap_##NAME, cusync_sm90::swap_##NAME##_mlp},
#include "configs.def"
};

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

int cusync_sm90_swap_mlp(const char* config, int epilogue1, const void* W1, const void* X, void* Y, const void* W2,
                         void* Z, int M, int N1, int K1, int N2, int ldy, int ldz, unsigned int* sync,
                         long long timeout_ns, void* stream) {
  if (config == nullptr || W1 == nullptr || X == nullptr || Y == nullptr || W2 == nullptr || Z == nullptr)
    return CUSYNC_SM90_BAD_ARGUMENT;
  for (const SwapEntry& e : kSwap) {
    if (strcmp(e.name, config) == 0)
      return e.mlp(epilogue1, W1, X, Y, W2, Z, M, N1, K1, N2, ldy, ldz, sync, timeout_ns,
                   static_cast<cudaStream_t>(stream));
  }
  return CUSYNC_SM90_BAD_CONFIG;
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
