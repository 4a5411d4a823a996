// The 128x192x64 tile configuration (one explicit instantiation per file, so they build in parallel).
#include "sync_gemm_host.cuh"

namespace cusync_sm90 {
CUSYNC_SM90_CONFIG(plan_128x192x64, 128, 192, 64)
}  // namespace cusync_sm90
