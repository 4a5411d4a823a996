// CRLF line endings are kept.
struct Stage { __device__ void wait(int) {} };
__device__ void load(float* d, const float* s, int o) { d[threadIdx.x] = s[o + threadIdx.x]; }
__global__ void k(const float* A, const float* B, float* out, int K, Stage* stage) {
  __shared__ float As[64], Bs[64];
  for (int k = 0; k < K; k += 64) {
    stage->wait(k);
#pragma cusync tile(A)
    load(As, A, k);

#pragma cusync tile(B)
    load(Bs, B, k);
    __syncthreads();
    out[threadIdx.x] += As[threadIdx.x] * Bs[threadIdx.x];
  }
}
