// A shared-memory tiled GeMM C[M,N] = A[M,K] . B[N,K]^T synchronized with CuSync, annotated for
// `cusyncgen reorder` (optimization R).  A is produced by another kernel (the stage waits on the
// producer tile before loading it); B is a weight and needs no wait.
//
//   cusyncgen reorder examples/kernels/gemm_tiled.cu -o gemm_tiled.reordered.cu
//   nvcc -arch=sm_80 -std=c++17 -I runtime_cuda -c gemm_tiled.reordered.cu
//
// moves the tile(B) load above `stage.wait(...)`, so the B load overlaps the wait on A.
#include <cuda_fp16.h>
#include <cusync/cusync.h>

constexpr int BM = 32, BN = 32, BK = 32;

// Producer grid: one tile per (BN columns of A, BM rows of A); the consumer waits on the producer
// tile that wrote the K-slice it is about to read.
using Order = cusync::RowMajor<4, 8, 1>;
using InPolicy = cusync::TileSync<4, 8, 1>;
using Stage = cusync::CuStage<Order, cusync::NoSync, InPolicy>;

__device__ inline void load_tile(half (*dst)[BK + 1], const half* src, int row0, int k0, int ld) {
  for (int i = threadIdx.x; i < BM * BK; i += blockDim.x) {
    const int r = i / BK, c = i % BK;
    dst[r][c] = src[(row0 + r) * ld + k0 + c];
  }
}

__global__ void gemm_tiled(const half* A, const half* B, half* C, int M, int N, int K, Stage stage) {
  __shared__ half As[BM][BK + 1];
  __shared__ half Bs[BN][BK + 1];
  const cusync::Tile t = stage.start();
  const int row0 = t.y * BM, col0 = t.x * BN;
  float acc[BM * BN / 128] = {};
  for (int k0 = 0; k0 < K; k0 += BK) {
#pragma cusync tile(B)
    load_tile(Bs, B, col0, k0, K);  // the weights: independent of the producer
    // A[row0:row0+BM, k0:k0+BK] is the producer tile (k0 / BK, t.y)
    stage.wait(cusync::Tile{k0 / BK, t.y, 0});
#pragma cusync tile(A)
    load_tile(As, A, row0, k0, K);
    __syncthreads();
    for (int e = 0; e < BM * BN / 128; ++e) {
      const int idx = threadIdx.x + 128 * e, r = idx / BN, c = idx % BN;
      for (int kk = 0; kk < BK; ++kk) acc[e] += __half2float(As[r][kk]) * __half2float(Bs[c][kk]);
    }
    __syncthreads();
  }
  for (int e = 0; e < BM * BN / 128; ++e) {
    const int idx = threadIdx.x + 128 * e, r = idx / BN, c = idx % BN;
    if (row0 + r < M && col0 + c < N) C[(row0 + r) * N + col0 + c] = __float2half(acc[e]);
  }
  stage.post(t);
}
