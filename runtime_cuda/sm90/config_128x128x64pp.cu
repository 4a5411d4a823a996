// The 128x128x64 tile configuration in ping-pong form (two consumer warp groups on alternate items,
// each a whole 128x128 tile: one group's epilogue overlaps the other's MMA; for short K).
#include "sync_gemm_host.cuh"

namespace cusync_sm90 {
CUSYNC_SM90_CONFIG_PP(plan_128x128x64pp, 128, 128, 64)
}  // namespace cusync_sm90
