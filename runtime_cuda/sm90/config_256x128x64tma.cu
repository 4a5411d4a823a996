// The 256x128x64 tile configuration with the TMA-store epilogue (64 columns staged at a time).
#include "sync_gemm_host.cuh"

namespace cusync_sm90 {
CUSYNC_SM90_CONFIG_TMA(plan_256x128x64tma, 256, 128, 64, 64)
}  // namespace cusync_sm90
