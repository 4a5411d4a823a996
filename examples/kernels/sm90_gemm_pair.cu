// Two dependent GeMMs built as CUTLASS 3's own sm90 examples build them (CollectiveBuilder,
// GemmUniversal, GemmUniversalAdapter), Z = (X W1^T) W2^T -- the GPT-3 MLP without its GeLU -- and
// the same pair synchronized with CuSync tile by tile: the generated header gives the policy and the
// waits; three types of the Hopper sync layer (runtime_cuda/cusync/sm90) take the place of the
// collective mainloop, the collective epilogue and the consumer's tile scheduler. Everything else
// is the stock kernel.
//
//   cusyncgen examples/mlp_gpt3.dep -D B=1 -D S=512 -o mlp_gpt3.h
//   nvcc -gencode=arch=compute_90a,code=sm_90a -std=c++17 -O3 -DNDEBUG --expt-relaxed-constexpr \
//        $(cusyncgen --includes) -I. examples/kernels/sm90_gemm_pair.cu -lcuda -o sm90_gemm_pair
//   ./sm90_gemm_pair        # checks both pairs against a float32 reference, then times them
//
// Host side: the producer posts to `sems` (one uint32 per semaphore of the policy, zeroed once);
// the consumer waits on them, its epoch from `ticket` (a uint64 zeroed once): neither is reset
// between launches or CUDA-graph replays. Both kernels go on one stream, the consumer launched
// with programmatic dependent launch (PDL): it starts once every producer block is resident and
// has triggered (SyncCollectiveMma's `trigger`), and its blocks take the SMs that producer blocks
// free, waiting only on the producer tiles they read. (Not stream order without PDL: then nothing
// would let the consumer start early; not two streams: consumer blocks could take SMs before the
// producer's.)
//
// Orders: both GeMMs walk CUTLASS's raster along N in bands of `band` row blocks (scheduler
// arguments; 2 by default), so the producer completes its rows band by band and the consumer's
// first items read the first band. The consumer claims its items (DynamicScheduler): its blocks that
// start early on the SMs the producer's partial last wave leaves free take more items than those
// that start when the producer ends -- under CUTLASS's static striding every block has the same
// share and the early start gains nothing. Where the producer fills its last wave there is nothing
// to overlap and the hooks' cost shows (docs/design.md, "a stock CUTLASS GemmUniversal pair").
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"

#include "mlp_gpt3.h"  // generated: policies, waits, orders (namespace mlp_gpt3)
#include <cusync/sm90.h>
#include <cusync/sm90/cutlass_scheduler.h>
#include <cusync/sm90/epilogue.h>

#ifndef PAIR_POLICY
#define PAIR_POLICY dep_g1_TileSync  // or dep_g1_RowSync
#endif
#define PAIR_STR2(x) #x
#define PAIR_STR(x) PAIR_STR2(x)

using namespace cute;
using Half = cutlass::half_t;
constexpr int kTileM = 128, kTileN = 128, kTileK = 64;  // the .dep's TileM, TileN
using TileShape = Shape<Int<kTileM>, Int<kTileN>, Int<kTileK>>;
using ClusterShape = Shape<_1, _1, _1>;
using ProblemShape = Shape<int, int, int, int>;

// ---- the stock pieces (CUTLASS's examples/48_hopper_warp_specialized_gemm, fp16) ----------------
using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float, Half, cutlass::layout::RowMajor, 8, Half,
    cutlass::layout::RowMajor, 8, cutlass::epilogue::TmaWarpSpecializedCooperative>::CollectiveOp;
using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Half, cutlass::layout::RowMajor, 8, Half,
    cutlass::layout::ColumnMajor, 8, float, TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
    cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;

using StockGemm = cutlass::gemm::device::GemmUniversalAdapter<
    cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>>;

// ---- the synchronized pair: three swaps ------------------------------------------------------------
using Policy = mlp_gpt3::PAIR_POLICY;
// the consumer's k-tile k reads producer column k * kTileK / kTileN
using Waits = cusync::sm90::WaitsDeps<mlp_gpt3::dep_g1_waits, kTileN / kTileK>;

// The producer: CUTLASS's static persistent scheduler on the banded raster (its arguments, below);
// -DPRODUCER_ORDERED walks the generated g1_order instead (row-major here: every wave re-reads W1).
#if defined(PRODUCER_ORDERED)
using ProducerScheduler = cusync::sm90::OrderedScheduler<mlp_gpt3::g1_order>;
#else
using ProducerScheduler = void;
#endif
using ProducerGemm = cutlass::gemm::device::GemmUniversalAdapter<cutlass::gemm::kernel::GemmUniversal<
    ProblemShape,
    cusync::sm90::SyncCollectiveMma<Mainloop>,                // triggers the consumer's launch
    cusync::sm90::PostingEpilogue<Epilogue, Policy>,          // posts each tile once stored
    ProducerScheduler>>;
// The consumer claims its items in the banded raster's order (DynamicScheduler<g2_order> would walk
// the generated order instead).
using ConsumerScheduler = cusync::sm90::DynamicScheduler<>;
using ConsumerGemm = cutlass::gemm::device::GemmUniversalAdapter<cutlass::gemm::kernel::GemmUniversal<
    ProblemShape,
    cusync::sm90::SyncCollectiveMma<Mainloop, Policy, Waits>, // waits on the tiles each k-tile reads
    Epilogue,
    ConsumerScheduler>>;                                      // claims its items

// ---- sizes: the generated grids ------------------------------------------------------------------
constexpr int M = mlp_gpt3::g1::Y * kTileM;   // B * S tokens
constexpr int N1 = mlp_gpt3::g1::X * kTileN;  // H / 2
constexpr int H = mlp_gpt3::g2::X * kTileN;   // K of the first GeMM, N of the second
static_assert(mlp_gpt3::g2::Y == mlp_gpt3::g1::Y, "both GeMMs cover the same rows");

#define CHECK(expr)                                                                              \
  do {                                                                                           \
    cudaError_t e_ = (expr);                                                                     \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(2);                                                                              \
    }                                                                                            \
  } while (0)
#define CHECK_CUTLASS(expr)                                                                            \
  do {                                                                                                 \
    cutlass::Status s_ = (expr);                                                                       \
    if (s_ != cutlass::Status::kSuccess) {                                                             \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cutlassGetStatusString(s_)); \
      std::exit(2);                                                                                    \
    }                                                                                                  \
  } while (0)

// The stock collectives' arguments of one GeMM C[m, n] = A[m, k] B[n, k]^T (all row-major fp16, B
// the nn.Linear weight); the synchronized collectives' arguments extend them.
struct StockArgs {
  typename Mainloop::Arguments mainloop;
  typename Epilogue::Arguments epilogue;
};
StockArgs stock_args(const Half* A, const Half* B, Half* C, int m, int n, int k) {
  auto sA = cutlass::make_cute_packed_stride(typename Mainloop::StrideA{}, make_shape(m, k, 1));
  auto sB = cutlass::make_cute_packed_stride(typename Mainloop::StrideB{}, make_shape(n, k, 1));
  auto sC = cutlass::make_cute_packed_stride(typename Epilogue::StrideC{}, make_shape(m, n, 1));
  auto sD = cutlass::make_cute_packed_stride(typename Epilogue::StrideD{}, make_shape(m, n, 1));
  return StockArgs{{A, sA, B, sB}, {{1.0f, 0.0f}, C, sC, C, sD}};
}
// swizzle > 0: CUTLASS's raster along N in bands of `swizzle` row blocks (column by column, the
// band's rows down each column); 0: CUTLASS's heuristic (along M when there are more column blocks)
template <class Gemm, class SetMainloop, class SetEpilogue>
typename Gemm::Arguments gemm_args(const StockArgs& b, int m, int n, int k, SetMainloop set_ml, SetEpilogue set_ep,
                                   int swizzle = 0) {
  typename Gemm::GemmKernel::CollectiveMainloop::Arguments ml{b.mainloop};
  typename Gemm::GemmKernel::CollectiveEpilogue::Arguments ep{b.epilogue};
  set_ml(ml);
  set_ep(ep);
  typename Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm, {m, n, k, 1}, ml, ep};
  if (swizzle > 0) {
    args.scheduler.max_swizzle_size = swizzle;
    args.scheduler.raster_order = decltype(args.scheduler.raster_order)::AlongN;
  }
  return args;
}

template <class Gemm>
struct Runner {
  Gemm gemm;
  void* workspace = nullptr;
  void init(const typename Gemm::Arguments& args) {
    CHECK_CUTLASS(gemm.can_implement(args));
    const size_t ws = Gemm::get_workspace_size(args);
    if (ws > 0) CHECK(cudaMalloc(&workspace, ws));
    CHECK_CUTLASS(gemm.initialize(args, workspace));
  }
  void run(cudaStream_t s, bool pdl) { CHECK_CUTLASS(gemm.run(s, nullptr, pdl)); }
};

__global__ void fill_random(Half* p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = Half(scale * (static_cast<float>(h & 0xffffff) / 8388608.0f - 1.0f));
  }
}
__global__ void fill_nan(Half* p, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    reinterpret_cast<uint16_t*>(p)[i] = 0x7e00;
}
// float32 reference C = A B^T, with C also rounded to fp16 (the next GeMM's input, as the kernels have it)
__global__ void reference_gemm(const Half* A, const Half* B, float* C, Half* C16, int m, int n, int k) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x, row = blockIdx.y;
  if (col >= n) return;
  float acc = 0.0f;
  for (int i = 0; i < k; ++i) acc += float(A[size_t(row) * k + i]) * float(B[size_t(col) * k + i]);
  C[size_t(row) * n + col] = acc;
  if (C16 != nullptr) C16[size_t(row) * n + col] = Half(acc);
}

// ||out - ref|| / ||ref||; NaN (an element never written) fails
double rel_err(const Half* out_d, const float* ref_d, size_t n) {
  std::vector<Half> out(n);
  std::vector<float> ref(n);
  CHECK(cudaMemcpy(out.data(), out_d, n * sizeof(Half), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(ref.data(), ref_d, n * sizeof(float), cudaMemcpyDeviceToHost));
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double o = float(out[i]), r = ref[i];
    if (std::isnan(o)) return INFINITY;
    num += (o - r) * (o - r);
    den += r * r;
  }
  return std::sqrt(num / den);
}

float time_graph(cudaGraphExec_t g, cudaStream_t s) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  CHECK(cudaEventRecord(a, s));
  CHECK(cudaGraphLaunch(g, s));
  CHECK(cudaEventRecord(b, s));
  CHECK(cudaEventSynchronize(b));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  return ms;
}

int main(int argc, char** argv) {
  // [launches [rounds [seed]]] [band=N] [parts]: parts also times each synchronized kernel with a stock one
  const int launches = argc > 1 ? std::atoi(argv[1]) : 1000;  // back-to-back synchronized pairs checked
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 10;      // rotating timing rounds (0: checks only)
  int band = 2;                                               // row blocks per band of both orders
  bool parts_mode = false;
  for (int i = 4; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "parts") parts_mode = true;
    if (a.rfind("band=", 0) == 0) band = std::atoi(a.c_str() + 5);
  }
  if (band < 1 || (band & (band - 1)) != 0) {
    std::fprintf(stderr, "band=%d: CUTLASS's swizzle takes a power of two\n", band);
    return 2;
  }
  Half *X, *W1, *Y, *W2, *Z;
  float *Yref, *Zref;
  Half* Y16;
  CHECK(cudaMalloc(&X, sizeof(Half) * M * H));
  CHECK(cudaMalloc(&W1, sizeof(Half) * size_t(N1) * H));
  CHECK(cudaMalloc(&Y, sizeof(Half) * M * N1));
  CHECK(cudaMalloc(&W2, sizeof(Half) * size_t(H) * N1));
  CHECK(cudaMalloc(&Z, sizeof(Half) * M * H));
  CHECK(cudaMalloc(&Yref, sizeof(float) * M * N1));
  CHECK(cudaMalloc(&Y16, sizeof(Half) * M * N1));
  CHECK(cudaMalloc(&Zref, sizeof(float) * M * H));
  uint32_t* sems;
  unsigned long long* ticket;
  CHECK(cudaMalloc(&sems, sizeof(uint32_t) * Policy::num_sems));
  CHECK(cudaMemset(sems, 0, sizeof(uint32_t) * Policy::num_sems));
  CHECK(cudaMalloc(&ticket, sizeof(unsigned long long)));
  CHECK(cudaMemset(ticket, 0, sizeof(unsigned long long)));
  const uint32_t seed = static_cast<uint32_t>(argc > 3 ? std::atoi(argv[3]) : 1);
  fill_random<<<1024, 256>>>(X, size_t(M) * H, seed * 3 + 1, 1.0f);
  fill_random<<<1024, 256>>>(W1, size_t(N1) * H, seed * 3 + 2, 1.0f / std::sqrt(float(H)));
  fill_random<<<1024, 256>>>(W2, size_t(H) * N1, seed * 3 + 3, 1.0f / std::sqrt(float(N1)));
  CHECK(cudaGetLastError());
  reference_gemm<<<dim3((N1 + 127) / 128, M), 128>>>(X, W1, Yref, Y16, M, N1, H);
  reference_gemm<<<dim3((H + 127) / 128, M), 128>>>(Y16, W2, Zref, nullptr, M, H, N1);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());

  auto none = [](auto&) {};
  // the stock pair as CUTLASS runs it by default (its raster heuristic), and on the bands
  Runner<StockGemm> stock1, stock2, banded1, banded2;
  const StockArgs g1 = stock_args(X, W1, Y, M, N1, H), g2 = stock_args(Y, W2, Z, M, H, N1);
  stock1.init(gemm_args<StockGemm>(g1, M, N1, H, none, none));
  stock2.init(gemm_args<StockGemm>(g2, M, H, N1, none, none));
  banded1.init(gemm_args<StockGemm>(g1, M, N1, H, none, none, band));
  banded2.init(gemm_args<StockGemm>(g2, M, H, N1, none, none, band));
  Runner<ProducerGemm> prod;
  Runner<ConsumerGemm> cons;
  prod.init(gemm_args<ProducerGemm>(g1, M, N1, H, [](auto& a) { a.sync.trigger = true; },
                                    [&](auto& a) { a.out_sems = sems; }, band));
  cons.init(gemm_args<ConsumerGemm>(g2, M, H, N1, [&](auto& a) { a.sync.in_sems = sems; a.sync.ticket = ticket; },
                                    none, band));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  auto stock_pair = [&] { stock1.run(s, false); stock2.run(s, false); };
  auto banded_pair = [&] { banded1.run(s, false); banded2.run(s, false); };
  auto sync_pair = [&] { prod.run(s, false); cons.run(s, true); };

  int failures = 0;
  auto check = [&](const char* what, auto pair, int n) {
    fill_nan<<<1024, 256>>>(Y, size_t(M) * N1);
    fill_nan<<<1024, 256>>>(Z, size_t(M) * H);
    for (int i = 0; i < n; ++i) pair();
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaGetLastError());
    const double ey = rel_err(Y, Yref, size_t(M) * N1), ez = rel_err(Z, Zref, size_t(M) * H);
    const bool ok = ey < 1e-2 && ez < 1e-2;
    failures += ok ? 0 : 1;
    std::printf("%-34s %d launch(es)  rel_err Y %.2e  Z %.2e  %s\n", what, n, ey, ez, ok ? "ok" : "WRONG");
  };
  check("stock pair, stream order", stock_pair, 1);
  check("stock pair on the bands", banded_pair, 1);
  check("synchronized pair", sync_pair, 1);
  check("synchronized pair, back to back", sync_pair, launches);

  // CUDA graphs of 10 pairs each; 100 replays of the synchronized graph checked (no reset between;
  // as many as launches when fewer: the sanitizer's runs)
  auto capture = [&](auto pair) {
    cudaGraph_t g;
    cudaGraphExec_t e;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < 10; ++i) pair();
    CHECK(cudaStreamEndCapture(s, &g));
    CHECK(cudaGraphInstantiate(&e, g, 0));
    return e;
  };
  struct Timed {
    const char* name;
    cudaGraphExec_t graph;
    std::vector<float> us;  // per pair, one per round
  };
  std::vector<Timed> timed = {{"stock pair, stream order", capture(stock_pair), {}},
                              {"stock pair on the bands, stream order", capture(banded_pair), {}},
                              {"synchronized pair", capture(sync_pair), {}}};
  check("synchronized pair, graph replays", [&] { CHECK(cudaGraphLaunch(timed[2].graph, s)); },
        std::min(100, launches));
  // the parts get semaphores and a ticket of their own: the synchronized pair's stay paired
  Runner<ProducerGemm> prod_alone;
  Runner<ConsumerGemm> cons_free;
  if (parts_mode) {
    // Where the time goes, each in stream order: the synchronized producer (posting) with the stock
    // consumer; the stock producer with the synchronized consumer, its semaphores raised far past any
    // target first (every wait satisfied at the first poll); both synchronized kernels in stream
    // order (no overlap: what the hooks cost). All on the bands.
    uint32_t *scratch, *raised;
    unsigned long long* ticket_free;
    CHECK(cudaMalloc(&scratch, sizeof(uint32_t) * Policy::num_sems));
    CHECK(cudaMalloc(&raised, sizeof(uint32_t) * Policy::num_sems));
    CHECK(cudaMalloc(&ticket_free, sizeof(unsigned long long)));
    CHECK(cudaMemset(scratch, 0, sizeof(uint32_t) * Policy::num_sems));
    CHECK(cudaMemset(raised, 0x3f, sizeof(uint32_t) * Policy::num_sems));
    CHECK(cudaMemset(ticket_free, 0, sizeof(unsigned long long)));
    prod_alone.init(gemm_args<ProducerGemm>(g1, M, N1, H, none, [&](auto& a) { a.out_sems = scratch; }, band));
    cons_free.init(gemm_args<ConsumerGemm>(g2, M, H, N1,
                                           [&](auto& a) { a.sync.in_sems = raised; a.sync.ticket = ticket_free; },
                                           none, band));
    timed.push_back({"  synchronized producer + stock consumer",
                     capture([&] { prod_alone.run(s, false); banded2.run(s, false); }), {}});
    timed.push_back({"  stock producer + synchronized consumer",
                     capture([&] { banded1.run(s, false); cons_free.run(s, false); }), {}});
    timed.push_back({"  both synchronized, stream order", capture([&] { prod.run(s, false); cons.run(s, false); }), {}});
  }
  if (rounds == 0) {  // checks only (the sanitizer's runs)
    std::printf("%s\n", failures == 0 ? "PASS" : "FAIL");
    return failures == 0 ? 0 : 1;
  }
  for (int i = 0; i < std::min(3, rounds); ++i)
    for (auto& t : timed) time_graph(t.graph, s);
  for (int r = 0; r < rounds; ++r)  // rotating: each first in turn
    for (size_t j = 0; j < timed.size(); ++j) {
      Timed& t = timed[(j + r) % timed.size()];
      t.us.push_back(100.0f * time_graph(t.graph, s));  // ms per 10 pairs -> us per pair
    }
  auto median = [](std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return static_cast<double>(v[v.size() / 2]);
  };
  const double us_stock = std::min(median(timed[0].us), median(timed[1].us)), us_sync = median(timed[2].us);
  std::printf("M %d  N1 %d  H %d  policy %s  band %d\n", M, N1, H, PAIR_STR(PAIR_POLICY), band);
  for (const auto& t : timed)
    std::printf("%-44s %7.1f us  %.3fx\n", t.name, median(t.us), us_stock / median(t.us));
  std::printf("the faster stock pair %.1f us, synchronized pair %.1f us: %.3fx\n", us_stock, us_sync,
              us_stock / us_sync);
  std::printf("%s\n", failures == 0 ? "PASS" : "FAIL");
  return failures == 0 ? 0 : 1;
}
