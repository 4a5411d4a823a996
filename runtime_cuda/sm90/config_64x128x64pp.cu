// The 64x128x64 tile configuration in ping-pong form (two consumer warp groups on alternate items).
#include "sync_gemm_host.cuh"

namespace cusync_sm90 {
CUSYNC_SM90_CONFIG_PP(plan_64x128x64pp, 64, 128, 64)
}  // namespace cusync_sm90
