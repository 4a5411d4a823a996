// The 128x256x64 tile configuration (one explicit instantiation per file, so they build in parallel).
#include "sync_gemm_host.cuh"

namespace cusync_sm90 {
CUSYNC_SM90_CONFIG(plan_128x256x64, 128, 256, 64)
}  // namespace cusync_sm90
