// Producer -> consumer GeMM pair synchronized by the CuSync runtime (cusync::CuStage), on two
// prioritized streams, against the same two kernels run one after the other (StreamSync): the
// consumer's output must be bitwise equal, over repeated launches with no reset.  Also times both.
//
// Build (sm_90): nvcc -std=c++17 -O3 -DCUSYNC_DEBUG -gencode=arch=compute_90,code=sm_90 \
//   -I runtime_cuda -I <cutlass include> tests/cuda_src/gemm_sync_test.cu -o gemm_sync_test
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cusync/cusync.h>
#include <kernels/gemm.cuh>

using namespace cusync_kernels;

#define CK(x)                                                                                      \
  do {                                                                                             \
    cudaError_t e_ = (x);                                                                          \
    if (e_ != cudaSuccess) {                                                                       \
      fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, __LINE__, #x); \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

template <class Cfg, class StageT>
__global__ void __launch_bounds__(Cfg::kThreads) gemm_kernel(GemmArgs args, StageT stage) {
  extern __shared__ __align__(128) char smem[];
  gemm_device<Cfg>(args, stage, smem);
}

__global__ void fill_uniform(half* p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t x = uint32_t(i) * 2654435761u ^ (seed * 0x9E3779B9u);
    x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16;
    p[i] = __float2half((float(x) * (1.0f / 4294967296.0f) * 2.0f - 1.0f) * scale);
  }
}

// A minimal stand-in stage, independent of the runtime: one flag per producer tile holding the
// launch number that last posted it (st.release / ld.acquire), blockIdx order, bounded spin.
__device__ unsigned g_flag_timeouts;
struct FlagStage {
  unsigned* out;       // this kernel's flags (producer), or null
  const unsigned* in;  // the producer's flags (consumer), or null
  int in_x, out_x;     // grid widths
  unsigned epoch;      // launch number, 1, 2, ...
  __device__ cusync::Tile start() { return cusync::Tile{int(blockIdx.x), int(blockIdx.y), 0}; }
  __device__ void wait(cusync::Tile p) {
    if (in == nullptr) return;
    if (threadIdx.x == 0) {
      const unsigned* f = in + p.y * in_x + p.x;
      long long t0 = clock64();
      unsigned v;
      do {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(f) : "memory");
        if (clock64() - t0 > 4000000000LL) {  // ~2 s: give up, count it
          atomicAdd(&g_flag_timeouts, 1u);
          break;
        }
      } while (int(v - epoch) < 0);
    }
    __syncthreads();
  }
  __device__ void post(cusync::Tile t) {
    if (out == nullptr) return;
    __syncthreads();
    if (threadIdx.x == 0) asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(out + t.y * out_x + t.x), "r"(epoch) : "memory");
  }
};

template <class Cfg, class StageT>
void launch(const GemmArgs& a, StageT st, cudaStream_t s) {
  static bool attr = false;
  if (!attr) {
    CK(cudaFuncSetAttribute(gemm_kernel<Cfg, StageT>, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
    attr = true;
  }
  if (const char* err = gemm_args_error<Cfg>(a)) {
    fprintf(stderr, "%s\n", err);
    exit(1);
  }
  dim3 grid(a.N / Cfg::BN, (a.M + Cfg::BM - 1) / Cfg::BM);
  gemm_kernel<Cfg, StageT><<<grid, Cfg::kThreads, Cfg::kSmemBytes, s>>>(a, st);
  CK(cudaGetLastError());
}

static double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One pipeline: X[M,H] -> producer GeMM (N1 = ProdN columns) -> consumer GeMM (K2, N2).
// InPol / OutPol: TileSync or RowSync over the producer grid.
static int g_repeat = 200;

template <int M, class PCfg, class CCfg, template <int, int, int> class Pol, bool kFlag = false>
bool run_case(const char* name, int H, int N1, int N2, int K2, int F) {
  static_assert(PCfg::BM == CCfg::BM, "producer and consumer row tiles must match");
  static_assert(CCfg::ProdBN == PCfg::BN, "consumer's ProdBN must be the producer's BN");
  constexpr int Y = (M + PCfg::BM - 1) / PCfg::BM;
  // Grids are compile-time in CuStage's order; the N's are checked against them at run time.
  constexpr int XP = PCfg::kGridX, XC = CCfg::kGridX;
  if (N1 / PCfg::BN != XP || N2 / CCfg::BN != XC) {
    fprintf(stderr, "%s: grid mismatch\n", name);
    return false;
  }
  using ProdStage = cusync::CuStage<cusync::RowMajor<XP, Y>, Pol<XP, Y, 1>>;
  using ConsStage = cusync::CuStage<cusync::RowMajor<XC, Y>, cusync::NoSync, Pol<XP, Y, 1>>;

  half *X, *W1, *Y1, *W2, *Y2, *Yref;
  CK(cudaMalloc(&X, size_t(M) * H * 2));
  CK(cudaMalloc(&W1, size_t(N1) * H * 2));
  CK(cudaMalloc(&Y1, size_t(M) * N1 * 2));
  CK(cudaMalloc(&W2, size_t(N2) * K2 * 2));
  CK(cudaMalloc(&Y2, size_t(M) * N2 * 2));
  CK(cudaMalloc(&Yref, size_t(M) * N2 * 2));
  fill_uniform<<<512, 256>>>(X, size_t(M) * H, 1, 1.0f);
  fill_uniform<<<512, 256>>>(W1, size_t(N1) * H, 2, 1.7f / sqrtf(float(H)));
  fill_uniform<<<512, 256>>>(W2, size_t(N2) * K2, 3, 1.7f / sqrtf(float(K2)));
  CK(cudaGetLastError());
  GemmArgs a1{X, W1, Y1, M, N1, H, H, H, N1, 0};
  GemmArgs a2{Y1, W2, Y2, M, N2, K2, N1, K2, N2, F};

  cudaStream_t sp, sc;
  CK(cusync::create_streams(&sp, &sc));
  cudaEvent_t e0, e1, ep;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaEventCreateWithFlags(&ep, cudaEventDisableTiming));

  // StreamSync reference (NoStage kernels, one stream).
  auto stream_sync = [&](half* out) {
    GemmArgs b2 = a2;
    b2.C = out;
    launch<PCfg>(a1, NoStage{}, sp);
    launch<CCfg>(b2, NoStage{}, sp);
  };
  CK(cudaMemset(Yref, 0xFF, size_t(M) * N2 * 2));
  stream_sync(Yref);
  CK(cudaStreamSynchronize(sp));

  cusync::StageArgs pa, ca;
  CK(cusync::alloc_stage(&pa, 0, Pol<XP, Y, 1>::num_sems));
  CK(cusync::alloc_stage(&ca, 1, 0));
  cusync::dependency(pa, &ca);
  ProdStage pst(pa);
  ConsStage cst(ca);
  unsigned* flags;
  CK(cudaMalloc(&flags, XP * Y * 4));
  CK(cudaMemset(flags, 0, XP * Y * 4));
  unsigned epoch = 0;
  auto synced = [&]() {
    CK(cudaEventRecord(e0, sp));
    CK(cudaStreamWaitEvent(sc, e0));  // the consumer may start once the producer is enqueued
    if constexpr (kFlag) {
      ++epoch;
      launch<PCfg>(a1, FlagStage{flags, nullptr, 0, XP, epoch}, sp);
      launch<CCfg>(a2, FlagStage{nullptr, flags, XP, XC, epoch}, sc);
    } else {
      launch<PCfg>(a1, pst, sp);
      launch<CCfg>(a2, cst, sc);
    }
    CK(cudaEventRecord(ep, sc));
    CK(cudaStreamWaitEvent(sp, ep));
  };

  bool ok = true;
  std::vector<half> ref(size_t(M) * N2), out(size_t(M) * N2);
  CK(cudaMemcpy(ref.data(), Yref, ref.size() * 2, cudaMemcpyDeviceToHost));
  const int REPEAT = g_repeat;
  for (int it = 0; it < REPEAT; ++it) {
    if (it == 0 || it == REPEAT - 1) CK(cudaMemsetAsync(Y2, 0xFF, size_t(M) * N2 * 2, sp));
    synced();
    if (it == 0 || it == REPEAT - 1) {
      CK(cudaStreamSynchronize(sp));
      CK(cudaMemcpy(out.data(), Y2, out.size() * 2, cudaMemcpyDeviceToHost));
      if (memcmp(out.data(), ref.data(), out.size() * 2) != 0) {
        size_t bad = 0;
        for (size_t i = 0; i < out.size(); ++i) bad += memcmp(&out[i], &ref[i], 2) != 0;
        printf("%s: launch %d: %zu of %zu outputs differ from StreamSync\n", name, it, bad, out.size());
        ok = false;
      }
    }
  }
  CK(cudaStreamSynchronize(sp));
  CK(cudaDeviceSynchronize());
  cusync::DebugRecord dbg;
  CK(cudaMemcpy(&dbg, pa.debug, sizeof dbg, cudaMemcpyDeviceToHost));
  cusync::DebugRecord dbg2;
  CK(cudaMemcpy(&dbg2, ca.debug, sizeof dbg2, cudaMemcpyDeviceToHost));
  unsigned flag_timeouts = 0;
  CK(cudaMemcpyFromSymbol(&flag_timeouts, g_flag_timeouts, 4));
  if (flag_timeouts) {
    printf("%s: %u flag waits timed out\n", name, flag_timeouts);
    ok = false;
  }
  if (dbg.failed || dbg2.failed) {
    printf("%s: a wait timed out (tile %d,%d sem %d seen %u expected %u)\n", name, dbg2.tile_x, dbg2.tile_y,
           dbg2.sem, dbg2.seen, dbg2.expected);
    ok = false;
  }

  // Timing: median of 20 after warm-up.
  std::vector<float> ts, tc;
  for (int it = 0; it < (g_repeat > 2 ? 25 : 0); ++it) {
    float ms;
    CK(cudaEventRecord(e0, sp));
    stream_sync(Y2);
    CK(cudaEventRecord(e1, sp));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (it >= 5) ts.push_back(ms * 1000);
    cudaEvent_t s0;
    CK(cudaEventCreate(&s0));
    CK(cudaEventRecord(s0, sp));
    synced();
    CK(cudaEventRecord(e1, sp));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms, s0, e1));
    CK(cudaEventDestroy(s0));
    if (it >= 5) tc.push_back(ms * 1000);
  }
  if (ts.empty()) printf("%-52s %s\n", name, ok ? "OK  " : "FAIL");
  else printf("%-52s %s  StreamSync %8.1f us  CuSync %8.1f us  speed-up %.3f\n", name, ok ? "OK  " : "FAIL",
              median(ts), median(tc), median(ts) / median(tc));
  cusync::free_stage(&pa);
  cusync::free_stage(&ca);
  CK(cudaFree(flags));
  CK(cudaFree(X)); CK(cudaFree(W1)); CK(cudaFree(Y1)); CK(cudaFree(W2)); CK(cudaFree(Y2)); CK(cudaFree(Yref));
  CK(cudaStreamDestroy(sp)); CK(cudaStreamDestroy(sc));
  return ok;
}

template <int BM, int BN, int BK, int S, int WM, int WN, class Epi, int Sw, bool R, int PBN, int N>
struct Cfg : GemmConfig<BM, BN, BK, S, WM, WN, Epi, Sw, R, PBN> {
  static constexpr int kGridX = N / BN;
};

int main(int argc, char** argv) {
  // usage: gemm_sync_test [case (-1: all)] [repeats]
  const int only = argc > 1 ? atoi(argv[1]) : -1;
  if (argc > 2) g_repeat = atoi(argv[2]);
  int idx = 0;
#define CASE(...)                          \
  do {                                     \
    if (only < 0 || only == idx) {         \
      ok &= __VA_ARGS__;                   \
      fflush(stdout);                      \
    }                                      \
    ++idx;                                 \
  } while (0)

  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("device: %s\n", prop.name);
  fflush(stdout);
  bool ok = true;
  // GPT-3: X[M,12288] . W1[6144,12288]^T (GeLU) -> . W2[12288,6144]^T
  using G1 = Cfg<128, 128, 32, 4, 2, 2, EpiGeluTanh, 0, false, 128, 6144>;
  using G2r = Cfg<128, 256, 32, 3, 2, 4, EpiIdentity, 0, true, 128, 12288>;
  using G2 = Cfg<128, 256, 32, 3, 2, 4, EpiIdentity, 0, false, 128, 12288>;
  CASE(run_case<1024, G1, G2r, cusync::TileSync>("gpt3 M=1024 TileSync+R", 12288, 6144, 12288, 6144, 0));
  CASE(run_case<200, G1, G2, cusync::RowSync>("gpt3 M=200 RowSync", 12288, 6144, 12288, 6144, 0));
  using S1 = Cfg<64, 128, 64, 4, 2, 2, EpiGeluTanh, 0, false, 128, 6144>;
  using S2 = Cfg<64, 128, 64, 4, 2, 2, EpiIdentity, 0, true, 128, 12288>;
  CASE(run_case<1, S1, S2, cusync::TileSync>("gpt3 M=1 TileSync+R", 12288, 6144, 12288, 6144, 0));
  // LLaMA: X[M,8192] . [W1|V][5504,8192]^T -> SwiGLU-A [M,2752] . W2[8192,2752]^T
  using L1 = Cfg<128, 128, 32, 4, 2, 2, EpiIdentity, 0, false, 128, 5504>;
  using L2r = Cfg<128, 128, 32, 4, 2, 2, EpiIdentity, 3, true, 128, 8192>;
  using L2 = Cfg<128, 128, 32, 4, 2, 2, EpiIdentity, 3, false, 128, 8192>;
  CASE(run_case<1024, L1, L2r, cusync::TileSync>("llama M=1024 TileSync+R (SwiGLU smem)", 8192, 5504, 8192, 2752, 2752));
  CASE(run_case<200, L1, L2, cusync::RowSync>("llama M=200 RowSync (SwiGLU smem)", 8192, 5504, 8192, 2752, 2752));
  using L2h = Cfg<128, 128, 32, 4, 2, 2, EpiIdentity, 2, true, 128, 8192>;
  CASE(run_case<256, L1, L2h, cusync::TileSync>("llama M=256 TileSync+R (SwiGLU half2)", 8192, 5504, 8192, 2752, 2752));
  // The same pairs with the minimal stand-in FlagStage (no runtime): isolates the kernel's hooks.
  CASE(run_case<1024, G1, G2r, cusync::TileSync, true>("gpt3 M=1024 FlagStage+R", 12288, 6144, 12288, 6144, 0));
  CASE(run_case<200, L1, L2, cusync::TileSync, true>("llama M=200 FlagStage (SwiGLU smem)", 8192, 5504, 8192, 2752, 2752));
  printf("%s\n", ok ? "SYNC TESTS PASSED" : "SYNC TESTS FAILED");
  return ok ? 0 : 2;
}
