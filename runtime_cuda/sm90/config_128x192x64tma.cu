// The 128x192x64 tile configuration with the TMA-store epilogue (96 columns staged at a time).
#include "sync_gemm_host.cuh"

namespace cusync_sm90 {
CUSYNC_SM90_CONFIG_TMA(plan_128x192x64tma, 128, 192, 64, 96)
}  // namespace cusync_sm90
