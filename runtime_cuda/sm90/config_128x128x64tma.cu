// The 128x128x64 tile configuration with the TMA-store epilogue (128 columns staged at a time).
#include "sync_gemm_host.cuh"

namespace cusync_sm90 {
CUSYNC_SM90_CONFIG_TMA(plan_128x128x64tma, 128, 128, 64, 128)
}  // namespace cusync_sm90
