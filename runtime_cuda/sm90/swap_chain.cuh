// The swapped MLP in one persistent launch (swap.cu includes this once per CUSYNC_SM90_SWAP line):
// Y = epilogue1(X W1^T), Z = Y W2^T on the swapped GeMM's tiles (64 weight rows x BT tokens; W1 and W2
// packed by 64-row groups, swap_pack_stride), both
// GeMMs' tiles walked by one grid of at most one CTA an SM, the first GeMM's before the second's
// (CTA b takes items b, b + G, ...). The producer warp moves from a CTA's last first-GeMM tile to
// its second-GeMM tile without a pause: the weight (A) tiles of as many k-blocks as the pipeline has
// stages are issued at once, while the consumer still computes the first GeMM's last k-blocks, and
// only Y's (B) loads wait. The wait is RowSync's: a second-GeMM tile reads every column of Y in its
// token rows, so it waits until every first-GeMM tile of that token row has posted (sync[row] ==
// the first GeMM's weight tiles). A first-GeMM tile posts after its stores: the consumer warp group
// meets at a named barrier, then its thread 0 adds with release semantics (post.h's pattern).
//
// CTAs that start on a second-GeMM tile (the SMs the first GeMM leaves idle) fill their pipeline
// with W2 and wait. Deadlock-free: every CTA's first-GeMM tiles precede its second-GeMM tiles, and
// the grid is at most one CTA an SM, so all of it is resident at once on an otherwise idle GPU. With
// timeout_ns > 0 (debug, as the plans' waits), a wait longer than that gives up and records the tile
// and the count it saw (sync[kTimedOut..]), which the host reports (the results are then wrong,
// never a hang).
//
// sync: CUSYNC_SM90_CHAIN_SYNC_WORDS zeroed uint32 words, kept between launches: [0, kMaxRows) the
// rows' counts, [kDone] CTAs finished (the last one resets the counts for the next launch),
// [kTimedOut] 1 + the waiting tile's linear index, [kSeen] the count it saw.
#pragma once
#include <cuda_runtime.h>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/device_kernel.h"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/pipeline/sm90_pipeline.hpp"
#include "cutlass/util/packed_stride.hpp"
#include "cusync/sm90/mainloop.h"
#include "cusync/sync.h"
#include "sm90_api.h"

namespace cusync_sm90 {

// The swapped GeMM's weight W [N, K] packed by groups of G rows (sm90.swap_pack: Wp[g][k][r] = W[G g +
// r][k], each group's K x G block contiguous, so a 64-row tile's k-block is one contiguous run) as
// CUTLASS's M-major A operand of a batched GeMM: (G, K, N / G), strides (1, G, G K).
template <class StrideA>
StrideA swap_pack_stride(int group, int K, int groups) {
  return cutlass::make_cute_packed_stride(StrideA{}, cute::make_shape(group, K, groups));
}

// The register epilogue of one 64 x BT accumulator tile (cute's CLayout_64xN: a thread holds rows r
// and r + 8 of its column pairs, values i and i + 2 with i % 4 < 2): tile (tile_m, tile_n) of a
// (rows x tokens) output, stored to y[token * ldy + column]. SWIGLU_ROWS: gate row r, up row r + 8
// (weight rows interleaved by 8), column 8 (r / 16) + r % 8; GELU_TANH / IDENTITY: column r.
template <int BT, class Acc, class TiledMma>
CUTLASS_DEVICE void store_swapped_tile(int epilogue, Acc const& acc, TiledMma const& tiled_mma, int thread_idx,
                                       int tile_m, int tile_n, int rows, int tokens, cutlass::half_t* y, int64_t ldy) {
  using namespace cute;
  static_assert(is_same_v<typename TiledMma::CLayout, SM90::GMMA::CLayout_64xN<BT>> && size(TiledMma{}) == 128,
                "one warp group's 64 x BT wgmma accumulator");
  static_assert(decltype(size(acc))::value == BT / 2);
  Tensor cD = local_tile(make_identity_tensor(make_shape(rows, tokens)), Shape<_64, Int<BT>>{},
                         make_coord(tile_m, tile_n));
  Tensor tCcD = tiled_mma.get_thread_slice(thread_idx).partition_C(cD);
  if (epilogue == CUSYNC_SM90_EPI_SWIGLU_ROWS) {
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(acc); ++i) {
      if (i % 4 >= 2) continue;  // an up row: read with its gate row
      const int r = get<0>(tCcD(i)), t = get<1>(tCcD(i));
      if (t < tokens) {
        const float g = acc(i), u = acc(i + 2);
        y[t * ldy + (r / 16) * 8 + r % 8] = cutlass::half_t(g / (1.f + __expf(-g)) * u);
      }
    }
  } else {
    const bool gelu = epilogue == CUSYNC_SM90_EPI_GELU_TANH;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(acc); ++i) {
      const int r = get<0>(tCcD(i)), t = get<1>(tCcD(i));
      if (t < tokens) {
        float v = acc(i);
        if (gelu) v = 0.5f * v * (1.f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
        y[t * ldy + r] = cutlass::half_t(v);
      }
    }
  }
}

template <int BT, int BW, int BK, int STAGES>
struct SwapChain {
  static_assert(BW == 64, "one consumer warp group: 64 weight rows a tile");
  using Half = cutlass::half_t;
  using TileShape = cute::Shape<cute::Int<BW>, cute::Int<BT>, cute::Int<BK>>;
  using Stages = cute::conditional_t<STAGES == 0, cutlass::gemm::collective::StageCountAutoCarveout<0>,
                                     cutlass::gemm::collective::StageCount<(STAGES > 0 ? STAGES : 2)>>;
  // the stock collective of the swapped GeMM, clusters of one (a persistent CTA walks its own tiles)
  using Base = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Half, cutlass::layout::ColumnMajor, 8, Half,
      cutlass::layout::ColumnMajor, 8, float, TileShape, cute::Shape<cute::_1, cute::_1, cute::_1>, Stages,
      cutlass::gemm::KernelTmaWarpSpecialized>::CollectiveOp;
  using Mainloop = cusync::sm90::SyncMainloop<Base>;
  using TiledMma = typename Base::TiledMma;
  using MainloopPipeline = typename Base::MainloopPipeline;
  using PipelineState = typename Base::PipelineState;
  static constexpr int kStages = Base::DispatchPolicy::Stages;

  static constexpr int kMaxRows = 4;  // token tiles: M <= 64 on BT >= 16
  static constexpr int kDone = kMaxRows, kTimedOut = kMaxRows + 1, kSeen = kMaxRows + 2;
  static_assert(kSeen < CUSYNC_SM90_CHAIN_SYNC_WORDS);

  struct SharedStorage {
    typename Base::TensorStorage tensors;
    alignas(16) typename Base::PipelineStorage pipeline;
  };
  static constexpr int SharedStorageSize = sizeof(SharedStorage);
  static constexpr uint32_t MaxThreadsPerBlock = 256;  // the producer warp group, one consumer warp group
  static constexpr uint32_t MinBlocksPerMultiprocessor = 1;

  struct Params {
    typename Base::Params gemm[2];
    int M, N[2], K[2];
    Half* out[2];
    int64_t ld[2];
    int epilogue1;
    uint32_t* sync;
    long long timeout_ns;
  };

  CUTLASS_DEVICE void operator()(Params const& params, char* smem_buf) {
    using namespace cute;
    SharedStorage& shared = *reinterpret_cast<SharedStorage*>(smem_buf);
    const int thread_idx = static_cast<int>(threadIdx.x);
    const int warp_idx = cutlass::canonical_warp_idx_sync();
    const int warp_group = cutlass::canonical_warp_group_idx();
    const int wg_thread = thread_idx % cutlass::NumThreadsPerWarpGroup;
    if (warp_idx == 0 && cute::elect_one_sync()) {
      Base::prefetch_tma_descriptors(params.gemm[0]);
      Base::prefetch_tma_descriptors(params.gemm[1]);
    }
    typename MainloopPipeline::Params pipeline_params;
    if (warp_group == 0 && warp_idx == 0) pipeline_params.role = MainloopPipeline::ThreadCategory::Producer;
    if (warp_group == 1) pipeline_params.role = MainloopPipeline::ThreadCategory::Consumer;
    pipeline_params.is_leader = wg_thread == 0;
    pipeline_params.num_consumers = cutlass::NumThreadsPerWarpGroup;
    pipeline_params.transaction_bytes = params.gemm[0].tma_transaction_bytes;  // one tile shape: the same bytes
    MainloopPipeline pipeline(shared.pipeline, pipeline_params, Shape<_1, _1, _1>{});
    __syncthreads();

    const int token_tiles = (params.M + BT - 1) / BT;
    const int weight_tiles[2] = {params.N[0] / BW, params.N[1] / BW};
    const int first = weight_tiles[0] * token_tiles, items = first + weight_tiles[1] * token_tiles;
    Mainloop mainloop;
    // the packed weights: weight tile t is batch t of one 64-row tile (swap_pack_stride)
    auto in0 = mainloop.load_init(make_shape(BW, params.M, params.K[0], params.N[0] / BW), params.gemm[0]);
    auto in1 = mainloop.load_init(make_shape(BW, params.M, params.K[1], params.N[1] / BW), params.gemm[1]);
    const int k_tiles[2] = {static_cast<int>(size<3>(get<0>(in0))), static_cast<int>(size<3>(get<0>(in1)))};

    if (warp_group == 0) {
      if (warp_idx == 0) {
        PipelineState state = cutlass::make_producer_start_state<MainloopPipeline>();
        for (int item = static_cast<int>(blockIdx.x); item < items; item += static_cast<int>(gridDim.x)) {
          const int g = item < first ? 0 : 1, u = g == 0 ? item : item - first;
          const int tm = u % weight_tiles[g], tn = u / weight_tiles[g];
          auto coord = make_coord(0, tn, _, tm);
          if (g == 0) {
            mainloop.template load_synced<true>(params.gemm[0], pipeline, state, in0, coord, 0, k_tiles[0], 0u,
                                                shared.tensors, [](int) {}, 1);
          } else {
            bool waited = false;
            auto wait = [&](int) {  // the elected lane, before Y's first load: its token row complete
              if (waited) return;
              waited = true;
              const long long start = cusync::global_timer_ns();
              uint32_t seen;
              while ((seen = cusync::ld_acquire(params.sync + tn)) < static_cast<uint32_t>(weight_tiles[0])) {
                if (params.timeout_ns > 0 && cusync::global_timer_ns() - start > params.timeout_ns) {
                  if (atomicCAS(params.sync + kTimedOut, 0u, static_cast<uint32_t>(item) + 1u) == 0u)
                    params.sync[kSeen] = seen;
                  break;
                }
                __nanosleep(64);
              }
              cusync::fence_proxy_async_global();  // Y's generic stores before the TMA (async proxy) reads them
            };
            mainloop.template load_synced<true>(params.gemm[1], pipeline, state, in1, coord, 0, k_tiles[1], 0u,
                                                shared.tensors, wait, kStages);
          }
          state.advance(k_tiles[g]);
        }
        mainloop.load_tail(pipeline, state);
      }
    } else {
      PipelineState state;
      TiledMma tiled_mma;
      for (int item = static_cast<int>(blockIdx.x); item < items; item += static_cast<int>(gridDim.x)) {
        const int g = item < first ? 0 : 1, u = g == 0 ? item : item - first;
        const int tm = u % weight_tiles[g], tn = u / weight_tiles[g];
        Tensor acc = partition_fragment_C(tiled_mma, take<0, 2>(TileShape{}));
        mainloop.mma(pipeline, state, acc, k_tiles[g], wg_thread, shared.tensors, params.gemm[g]);
        mainloop.mma_tail(pipeline, state, k_tiles[g]);
        state.advance(k_tiles[g]);
        store_swapped_tile<BT>(g == 0 ? params.epilogue1 : CUSYNC_SM90_EPI_IDENTITY, acc, tiled_mma, wg_thread, tm,
                               tn, params.N[g], params.M, params.out[g], params.ld[g]);
        if (g == 0) {  // the post: every consumer thread's stores, then one release add
          asm volatile("bar.sync 1, %0;" ::"n"(cutlass::NumThreadsPerWarpGroup) : "memory");
          if (wg_thread == 0) cusync::red_release_add(params.sync + tn, 1u);
        }
      }
    }
    // The launch's last CTA resets the rows' counts: every wait of this launch has returned by then.
    __syncthreads();
    if (thread_idx == 0) {
      __threadfence();
      if (atomicAdd(params.sync + kDone, 1u) == gridDim.x - 1) {
        for (int r = 0; r < kMaxRows; ++r) params.sync[r] = 0u;
        params.sync[kDone] = 0u;
        __threadfence();
      }
    }
  }

  // The launch: W1 [N1, K1] and W2 [N2, K2 = Y's columns] packed by 64-row groups (swap_pack_stride),
  // X [M, K1], Y [M, ldy] (its N1 / 2 or N1 columns), Z [M, ldz]; every pointer 16-byte aligned.
  static int run(int epilogue1, const void* W1, const void* X, void* Y, const void* W2, void* Z, int M, int N1, int K1,
                 int N2, int ldy, int ldz, uint32_t* sync, long long timeout_ns, cudaStream_t stream) {
    using namespace cute;
    const int y_cols = epilogue1 == CUSYNC_SM90_EPI_SWIGLU_ROWS ? N1 / 2 : N1;
    if (M < 1 || (M + BT - 1) / BT > kMaxRows || N1 % BW != 0 || N2 % BW != 0 || K1 % 8 != 0 || y_cols % 8 != 0 ||
        ldy < y_cols || ldy % 8 != 0 || ldz < N2)
      return CUSYNC_SM90_BAD_SHAPE;
    if (sync == nullptr || timeout_ns < 0) return CUSYNC_SM90_BAD_ARGUMENT;
    Params p{};
    const int K2 = y_cols;
    auto args = [](const void* w, const void* x, int n, int m, int k, int ldx) {
      auto sA = swap_pack_stride<typename Base::StrideA>(BW, k, n / BW);
      auto sB = cutlass::make_cute_packed_stride(typename Base::StrideB{}, make_shape(m, k, 1));
      get<0>(sB) = static_cast<int64_t>(ldx);
      get<2>(sB) = 0;  // every batch (weight tile) reads the same X
      return Base::to_underlying_arguments(
          make_shape(BW, m, k, n / BW),
          typename Base::Arguments{static_cast<const Half*>(w), sA, static_cast<const Half*>(x), sB}, nullptr);
    };
    p.gemm[0] = args(W1, X, N1, M, K1, K1);
    p.gemm[1] = args(W2, Y, N2, M, K2, ldy);
    p.M = M;
    p.N[0] = N1;
    p.N[1] = N2;
    p.K[0] = K1;
    p.K[1] = K2;
    p.out[0] = static_cast<Half*>(Y);
    p.out[1] = static_cast<Half*>(Z);
    p.ld[0] = ldy;
    p.ld[1] = ldz;
    p.epilogue1 = epilogue1;
    p.sync = sync;
    p.timeout_ns = timeout_ns;
    int device = 0, sms = 0;
    cudaError_t e = cudaGetDevice(&device);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (e != cudaSuccess) return static_cast<int>(e);
    const int token_tiles = (M + BT - 1) / BT, items = (N1 / BW + N2 / BW) * token_tiles;
    const int grid = items < sms ? items : sms;
    e = cudaFuncSetAttribute(cutlass::device_kernel<SwapChain>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             SharedStorageSize);
    if (e != cudaSuccess) return static_cast<int>(e);
    cutlass::device_kernel<SwapChain><<<grid, MaxThreadsPerBlock, SharedStorageSize, stream>>>(p);
    return static_cast<int>(cudaGetLastError());
  }
};

}  // namespace cusync_sm90
