// The 256x128x64 tile configuration (one explicit instantiation per file, so they build in parallel).
#include "sync_gemm_host.cuh"

namespace cusync_sm90 {
CUSYNC_SM90_CONFIG(plan_256x128x64, 256, 128, 64)
}  // namespace cusync_sm90
