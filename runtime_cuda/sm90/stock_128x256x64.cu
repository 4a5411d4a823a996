// The stock CUTLASS reference kernels with 128x256x64 tiles, clusters 1x1 and 2x1 (stock_ref.cuh).
#include "stock_ref.cuh"

namespace cusync_sm90 {
int stock_128x256x64(int cluster_m, const void* A, const void* B, void* C, int M, int N, int K, int raster, int swizzle,
                  cudaStream_t stream) {
  if (cluster_m == 2) return StockGemm<128, 256, 64, 2>::run(A, B, C, M, N, K, raster, swizzle, stream);
  return StockGemm<128, 256, 64, 1>::run(A, B, C, M, N, K, raster, swizzle, stream);
}
}  // namespace cusync_sm90
