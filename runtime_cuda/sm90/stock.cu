// The stock CUTLASS reference kernels of one CUSYNC_SM90_STOCK line of configs.def, clusters 1x1 and
// 2x1 (stock_ref.cuh), compiled once per line: the build passes -DCUSYNC_SM90_STOCK_FN=stock_<NAME>
// -DCUSYNC_SM90_BM=.. -DCUSYNC_SM90_BN=.. -DCUSYNC_SM90_BK=..
#include "stock_ref.cuh"

#if !defined(CUSYNC_SM90_STOCK_FN) || !defined(CUSYNC_SM90_BM) || !defined(CUSYNC_SM90_BN) || !defined(CUSYNC_SM90_BK)
#error "stock.cu is compiled once per CUSYNC_SM90_STOCK line of configs.def, its fields given with -D (see above)"
#endif

namespace cusync_sm90 {
int CUSYNC_SM90_STOCK_FN(int cluster_m, const void* A, const void* B, void* C, int M, int N, int K, int raster,
                         int swizzle, cudaStream_t stream) {
  if (cluster_m == 2)
    return StockGemm<CUSYNC_SM90_BM, CUSYNC_SM90_BN, CUSYNC_SM90_BK, 2>::run(A, B, C, M, N, K, raster, swizzle, stream);
  return StockGemm<CUSYNC_SM90_BM, CUSYNC_SM90_BN, CUSYNC_SM90_BK, 1>::run(A, B, C, M, N, K, raster, swizzle, stream);
}
}  // namespace cusync_sm90
