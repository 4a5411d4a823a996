// B is the dependent operand here (two producers guard it: two waits); A is independent.
// A second annotated loop in another kernel, a nested loop, and waits that guard nothing.
struct Stage {
  int* sems;
  __device__ void wait(int t) { while (((volatile int*)sems)[t] == 0) {} __syncthreads(); }
  template <int I>
  __device__ void wait(int t) { while (((volatile int*)sems)[I * 64 + t] == 0) {} __syncthreads(); }
  __device__ void post(int t) { __syncthreads(); if (threadIdx.x == 0) atomicAdd(sems + t, 1); }
};

__device__ void load(float* dst, const float* src, int off) { dst[threadIdx.x] = src[off + threadIdx.x]; }

__global__ void k1(const float* A, const float* B, float* C, int K, Stage stage) {
  __shared__ float As[128], Bs[128];
  float acc = 0.f;
  for (int k = 0; k < K; k += 128) {
    if (k == 0) stage.wait(0);  /* guards nothing: inside an if */
    // A: a constant, loaded every iteration
    #pragma cusync tile(A)  // independent
    load(As, A, k);
    /* the two producers of B */
    stage.wait(k / 128);
    stage.template wait<1>(k / 128);
    #pragma cusync tile(B)
    load(Bs, B,
         k);
    __syncthreads();
    for (int i = 0; i < 128; ++i) acc += As[i] * Bs[i];
    __syncthreads();
  }
  C[blockIdx.x * blockDim.x + threadIdx.x] = acc;
  stage.post(blockIdx.x);
}

__global__ void k2(const float* A, const float* B, float* C, int K, int R, Stage stage) {
  __shared__ float As[128], Bs[128];
  float acc = 0.f;
  for (int r = 0; r < R; ++r) {
    for (int k = 0; k < K; k += 128) {
#pragma cusync tile(B)
      for (int j = 0; j < 1; ++j) load(Bs, B, k);
      stage.wait(r);
#pragma cusync tile(A)
      { load(As, A, r * K + k); }
      __syncthreads();
      for (int i = 0; i < 128; ++i) acc += As[i] * Bs[i];
      __syncthreads();
    }
  }
  C[threadIdx.x] = acc;
}
