// One tile configuration of configs.def, compiled once per CUSYNC_SM90_TILE line of it (so that the
// configurations build in parallel): the build (cusyncgen/cuda/sm90/lib.py) passes the line's name
// and fields as -DCUSYNC_SM90_TILE_FN=plan_<NAME> -DCUSYNC_SM90_BM=.. -DCUSYNC_SM90_BN=..
// -DCUSYNC_SM90_BK=.. -DCUSYNC_SM90_PINGPONG=.. -DCUSYNC_SM90_EPI_COLS=..
// CuTe's extended wgmma shapes (every N a multiple of 8 up to 256; its default list has 8, 16, 32,
// 64, 96, 128, 192 and 256): without them its op selector builds a 144-column tile from nine
// 16-column wgmmas, each reading A again (2.4x slower per wave, docs/design.md). Configs whose BN is
// in the default list get the same instruction either way.
#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED
#include "sync_gemm_host.cuh"

#if !defined(CUSYNC_SM90_TILE_FN) || !defined(CUSYNC_SM90_BM) || !defined(CUSYNC_SM90_BN) || \
    !defined(CUSYNC_SM90_BK) || !defined(CUSYNC_SM90_PINGPONG) || !defined(CUSYNC_SM90_EPI_COLS)
#error "config.cu is compiled once per CUSYNC_SM90_TILE line of configs.def, its fields given with -D (see above)"
#endif

namespace cusync_sm90 {
CUSYNC_SM90_CONFIG_T(CUSYNC_SM90_TILE_FN, Config<CUSYNC_SM90_BM, CUSYNC_SM90_BN, CUSYNC_SM90_BK,
                                                 (CUSYNC_SM90_PINGPONG != 0), CUSYNC_SM90_EPI_COLS>)
}  // namespace cusync_sm90
