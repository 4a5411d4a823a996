// Standalone test + benchmark of runtime_cuda/kernels/gemm.cuh against a float32 reference and cuBLAS,
// on the GPT-3 and LLaMA MLP shapes (no synchronization: NoStage).
//
// Build (sm_90):
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 -I runtime_cuda -I <cutlass include> \
//        tests/cuda_src/gemm_bench.cu -o gemm_bench
// Run:  ./gemm_bench [--quick]   (prints one line per shape and variant, then a summary table)
// cuBLAS is loaded at run time with dlopen (no cuBLAS headers needed to build): set CUBLAS_LIB to
// its path, else libcublas.so.13/.12 from the loader path, /usr/local/cuda*/lib64 or a pip wheel.
#include <cuda_runtime.h>
#include <library_types.h>
#include <dlfcn.h>
#include <glob.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <kernels/gemm.cuh>

using namespace cusync_kernels;

#define CK(x)                                                                                  \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, __LINE__, #x); \
      exit(1);                                                                                 \
    }                                                                                          \
  } while (0)
#define CB(x)                                                                       \
  do {                                                                              \
    int s_ = (x);                                                                   \
    if (s_ != 0) {                                                                  \
      fprintf(stderr, "cuBLAS error %d at %s:%d: %s\n", int(s_), __FILE__, __LINE__, #x); \
      exit(1);                                                                      \
    }                                                                               \
  } while (0)

// ---- minimal cuBLAS binding through dlopen
typedef void* cublasHandle_t;
typedef int (*cublasCreate_t)(cublasHandle_t*);
typedef int (*cublasDestroy_t)(cublasHandle_t);
typedef int (*cublasGemmEx_t)(cublasHandle_t, int, int, int, int, int, const void*, const void*, int, int,
                              const void*, int, int, const void*, void*, int, int, int, int);
static cublasCreate_t p_cublasCreate;
static cublasDestroy_t p_cublasDestroy;
static cublasGemmEx_t p_cublasGemmEx;
enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_COMPUTE_32F = 68, CUBLAS_GEMM_DEFAULT = -1 };
static bool load_cublas() {
  std::vector<std::string> cands;
  if (const char* e = getenv("CUBLAS_LIB")) cands.push_back(e);
  cands.push_back("libcublas.so.13");
  cands.push_back("libcublas.so.12");
  cands.push_back("libcublas.so");
  const char* pats[] = {"/usr/local/cuda*/lib64/libcublas.so*", "/usr/local/cuda*/targets/*/lib/libcublas.so*",
                        "/opt/*/.venv/lib/python3*/site-packages/nvidia/*/lib/libcublas.so*",
                        "/usr/lib/x86_64-linux-gnu/libcublas.so*"};
  for (const char* p : pats) {
    glob_t g;
    if (glob(p, 0, nullptr, &g) == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i) cands.push_back(g.gl_pathv[i]);
    globfree(&g);
  }
  for (auto& c : cands) {
    void* h = dlopen(c.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!h) continue;
    p_cublasCreate = (cublasCreate_t)dlsym(h, "cublasCreate_v2");
    p_cublasDestroy = (cublasDestroy_t)dlsym(h, "cublasDestroy_v2");
    p_cublasGemmEx = (cublasGemmEx_t)dlsym(h, "cublasGemmEx");
    if (p_cublasCreate && p_cublasDestroy && p_cublasGemmEx) {
      printf("cuBLAS: %s\n", c.c_str());
      return true;
    }
  }
  printf("cuBLAS: not found (set CUBLAS_LIB)\n");
  return false;
}

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads) gemm_kernel(GemmArgs args, NoStage stage) {
  extern __shared__ __align__(128) char smem[];
  gemm_device<Cfg>(args, stage, smem);
}

enum Kind { PLAIN = 0, GELU = 1, SWIGLU = 2, SWIGLU_H2 = 3, SWIGLU_SM = 4 };
static const char* kind_name[] = {"plain", "gelu", "swiglu", "swiglu_h2", "swiglu_sm"};

struct Variant {
  std::string name;
  void (*kernel)(GemmArgs, NoStage);
  int bm, bn, bk, threads, smem;
  Kind kind;
  const char* (*check)(const GemmArgs&);
};

template <int BM, int BN, int BK, int S, int WM, int WN, Kind K>
Variant make_variant() {
  using Epi = std::conditional_t<K == GELU, EpiGeluTanh, EpiIdentity>;
  using Cfg = GemmConfig<BM, BN, BK, S, WM, WN, Epi, K == SWIGLU ? 1 : K == SWIGLU_H2 ? 2 : K == SWIGLU_SM ? 3 : 0, false, 128>;
  char buf[64];
  snprintf(buf, sizeof buf, "%dx%dx%d_s%d_w%dx%d%s", BM, BN, BK, S, WM, WN, K == SWIGLU_H2 ? "_h2" : K == SWIGLU_SM ? "_sm" : "");
  return Variant{buf, gemm_kernel<Cfg>, BM, BN, BK, Cfg::kThreads, Cfg::kSmemBytes, K, gemm_args_error<Cfg>};
}

template <int BM, int BN, int BK, int S, int WM, int WN>
void add_tile(std::vector<Variant>& v) {
  v.push_back(make_variant<BM, BN, BK, S, WM, WN, PLAIN>());
  v.push_back(make_variant<BM, BN, BK, S, WM, WN, GELU>());
  v.push_back(make_variant<BM, BN, BK, S, WM, WN, SWIGLU>());
  v.push_back(make_variant<BM, BN, BK, S, WM, WN, SWIGLU_H2>());
  v.push_back(make_variant<BM, BN, BK, S, WM, WN, SWIGLU_SM>());
}

// ---- helpers on the device
__global__ void fill_uniform(half* p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t x = uint32_t(i) * 2654435761u ^ (seed * 0x9E3779B9u) ^ uint32_t(i >> 32);
    x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16;
    p[i] = __float2half((float(x) * (1.0f / 4294967296.0f) * 2.0f - 1.0f) * scale);
  }
}
__global__ void count_bad(const half* C, int M, int N, int ldc, unsigned long long* bad) {
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < size_t(M) * N; i += size_t(gridDim.x) * blockDim.x) {
    float v = __half2float(C[(i / N) * ldc + i % N]);
    if (!isfinite(v)) ++local;
  }
  if (local) atomicAdd(bad, local);
}
// One warp per output element of the sampled rows: float32 reference, same epilogue.
__global__ void reference(const half* A, const half* B, const int* rows, int nrows, int N, int K, int lda, int ldb,
                          int F, int kind, float* out) {
  int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  if (warp >= nrows * N) return;
  int r = rows[warp / N], n = warp % N;
  const half* a = A + size_t(r) * lda;
  const half* b = B + size_t(n) * ldb;
  float acc = 0.f;
  for (int k = lane; k < K; k += 32) {
    float av = __half2float(a[k]);
    if (kind == SWIGLU) av = av / (1.0f + expf(-av)) * __half2float(a[k + F]);
    acc += av * __half2float(b[k]);
  }
  for (int o = 16; o; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) {
    if (kind == GELU) acc = 0.5f * acc * (1.0f + tanhf(0.7978845608028654f * (acc + 0.044715f * acc * acc * acc)));
    out[warp] = acc;
  }
}

struct Shape {
  const char* model;
  int gemm;  // 1 or 2
  int M, N, K;
  Kind kind;
};

static double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

int main(int argc, char** argv) {
  bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);

  std::vector<Variant> vs;
  add_tile<128, 128, 32, 4, 2, 2>(vs);
  add_tile<128, 128, 64, 3, 2, 4>(vs);
  add_tile<128, 256, 32, 3, 2, 4>(vs);
  add_tile<128, 256, 64, 3, 2, 4>(vs);
  add_tile<64, 128, 64, 4, 2, 2>(vs);
  add_tile<64, 256, 32, 4, 2, 4>(vs);
  add_tile<64, 64, 64, 5, 2, 2>(vs);
  for (auto& v : vs) CK(cudaFuncSetAttribute(v.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, v.smem));

  std::vector<int> Ms = quick ? std::vector<int>{1, 200, 1024} : std::vector<int>{1, 64, 200, 256, 1024, 4096};
  std::vector<Shape> shapes;
  for (int M : Ms) {
    shapes.push_back({"gpt3", 1, M, 6144, 12288, GELU});
    shapes.push_back({"gpt3", 2, M, 12288, 6144, PLAIN});
    shapes.push_back({"llama", 1, M, 5504, 8192, PLAIN});
    shapes.push_back({"llama", 2, M, 8192, 2752, SWIGLU});
  }

  cublasHandle_t h = nullptr;
  const bool have_cublas = load_cublas();
  if (have_cublas) CB(p_cublasCreate(&h));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  const int WARM = 3, REPS = 20;

  struct Row { std::string shape, best; double t, cub, err; int M; double flops; };
  std::vector<Row> summary;
  bool all_ok = true;

  for (const Shape& s : shapes) {
    const int lda = s.kind == SWIGLU ? 2 * s.K : s.K, F = s.kind == SWIGLU ? s.K : 0;
    const size_t bytesB = size_t(s.N) * s.K * 2;
    const int nrot = int(std::max<size_t>(1, (256ull << 20) / bytesB + 1));
    half *A, *C, *Ac = nullptr;
    std::vector<half*> Bs(nrot);
    CK(cudaMalloc(&A, size_t(s.M) * lda * 2));
    CK(cudaMalloc(&C, size_t(s.M) * s.N * 2));
    for (int i = 0; i < nrot; ++i) {
      CK(cudaMalloc(&Bs[i], bytesB));
      fill_uniform<<<1024, 256>>>(Bs[i], size_t(s.N) * s.K, 100 + i + s.N, 1.7f / sqrtf(float(s.K)));
      CK(cudaGetLastError());
    }
    fill_uniform<<<1024, 256>>>(A, size_t(s.M) * lda, 7 + s.M + s.K, s.kind == SWIGLU ? 2.0f : 1.0f);
    CK(cudaGetLastError());
    if (s.kind == SWIGLU) {  // cuBLAS gets a plain [M, K] operand of the same size
      CK(cudaMalloc(&Ac, size_t(s.M) * s.K * 2));
      fill_uniform<<<1024, 256>>>(Ac, size_t(s.M) * s.K, 9, 1.0f);
      CK(cudaGetLastError());
    }
    // Sampled reference rows: all when M <= 64, else 64 spread rows including the last.
    std::vector<int> rows;
    int nr = std::min(s.M, 64);
    for (int i = 0; i < nr; ++i) rows.push_back(nr == s.M ? i : int((long long)i * (s.M - 1) / (nr - 1)));
    int* drows;
    float *dref;
    unsigned long long* dbad;
    CK(cudaMalloc(&drows, rows.size() * 4));
    CK(cudaMalloc(&dref, rows.size() * s.N * 4));
    CK(cudaMalloc(&dbad, 8));
    CK(cudaMemcpy(drows, rows.data(), rows.size() * 4, cudaMemcpyHostToDevice));
    {
      long long warps = (long long)rows.size() * s.N;
      reference<<<int((warps * 32 + 255) / 256), 256>>>(A, Bs[0], drows, int(rows.size()), s.N, s.K, lda, s.K, F,
                                                         s.kind, dref);
      CK(cudaGetLastError());
    }
    std::vector<float> ref(rows.size() * s.N);
    CK(cudaMemcpy(ref.data(), dref, ref.size() * 4, cudaMemcpyDeviceToHost));
    std::vector<half> out(size_t(s.M) * s.N);
    const double flops = 2.0 * s.M * s.N * s.K;

    // cuBLAS (plain GeMM, no fused epilogue): C^T[N,M] = B[N,K] . A^T  in column-major terms.
    std::vector<float> tc;
    const float alpha = 1.f, beta = 0.f;
    for (int it = 0; have_cublas && it < WARM + REPS; ++it) {
      const half* Aop = s.kind == SWIGLU ? Ac : A;
      CK(cudaEventRecord(e0));
      CB(p_cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, s.N, s.M, s.K, &alpha, Bs[it % nrot], CUDA_R_16F, s.K, Aop,
                      CUDA_R_16F, s.K, &beta, C, CUDA_R_16F, s.N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (it >= WARM) tc.push_back(ms * 1000.f);
    }
    const double tcub = tc.empty() ? NAN : median(tc);

    char sname[96];
    snprintf(sname, sizeof sname, "%s G%d %s M=%d N=%d K=%d", s.model, s.gemm, kind_name[s.kind], s.M, s.N, s.K);
    Row best{sname, "-", 1e30, tcub, -1, s.M, flops};
    for (const Variant& v : vs) {
      if (v.kind != s.kind && !(s.kind == SWIGLU && (v.kind == SWIGLU_H2 || v.kind == SWIGLU_SM))) continue;
      GemmArgs args{A, Bs[0], C, s.M, s.N, s.K, lda, s.K, s.N, F};
      if (v.check(args)) continue;
      dim3 grid(s.N / v.bn, (s.M + v.bm - 1) / v.bm);
      // correctness: poisoned output, NaN/Inf scan of all M rows, rel. error on sampled rows
      CK(cudaMemset(C, 0xFF, size_t(s.M) * s.N * 2));
      CK(cudaMemset(dbad, 0, 8));
      v.kernel<<<grid, v.threads, v.smem>>>(args, NoStage{});
      CK(cudaGetLastError());
      CK(cudaDeviceSynchronize());
      count_bad<<<1024, 256>>>(C, s.M, s.N, s.N, dbad);
      CK(cudaGetLastError());
      unsigned long long bad = 0;
      CK(cudaMemcpy(&bad, dbad, 8, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(out.data(), C, out.size() * 2, cudaMemcpyDeviceToHost));
      double num = 0, den = 0;
      for (size_t i = 0; i < rows.size(); ++i)
        for (int n = 0; n < s.N; ++n) {
          double o = __half2float(out[size_t(rows[i]) * s.N + n]), r = ref[i * s.N + n];
          num += (o - r) * (o - r);
          den += r * r;
        }
      double err = std::sqrt(num / den);
      bool ok = bad == 0 && err < 1e-2 && std::isfinite(err);
      all_ok &= ok;
      std::vector<float> tv;
      for (int it = 0; it < WARM + REPS; ++it) {
        args.B = Bs[it % nrot];
        CK(cudaEventRecord(e0));
        v.kernel<<<grid, v.threads, v.smem>>>(args, NoStage{});
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        CK(cudaGetLastError());
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (it >= WARM) tv.push_back(ms * 1000.f);
      }
      double t = median(tv);
      printf("%-48s %-22s %9.1f us %7.1f TF/s | cuBLAS %9.1f us %7.1f TF/s | err %.2e bad %llu %s\n", sname,
             v.name.c_str(), t, flops / t * 1e-6, tcub, flops / tcub * 1e-6, err, bad, ok ? "OK" : "FAIL");
      if (ok && t < best.t) { best.t = t; best.best = v.name; best.err = err; }
    }
    summary.push_back(best);
    CK(cudaFree(A)); CK(cudaFree(C)); if (Ac) CK(cudaFree(Ac));
    for (auto b : Bs) CK(cudaFree(b));
    CK(cudaFree(drows)); CK(cudaFree(dref)); CK(cudaFree(dbad));
  }
  printf("\n| shape | best tile | ours us | ours TF/s | cuBLAS us | cuBLAS TF/s | ours/cuBLAS time | rel err |\n");
  printf("|---|---|---|---|---|---|---|---|\n");
  for (auto& r : summary)
    printf("| %s | %s | %.1f | %.1f | %.1f | %.1f | %.2f | %.1e |\n", r.shape.c_str(), r.best.c_str(), r.t,
           r.flops / r.t * 1e-6, r.cub, r.flops / r.cub * 1e-6, r.t / r.cub, r.err);
  printf("%s\n", all_ok ? "ALL CORRECT" : "SOME CHECKS FAILED");
  if (have_cublas) CB(p_cublasDestroy(h));
  return all_ok ? 0 : 2;
}
