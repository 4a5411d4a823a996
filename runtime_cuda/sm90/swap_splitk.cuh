// The swapped GeMM's K split over a cluster (swap.cu, CUSYNC_SM90_KS > 1): a tile of 64 weight rows
// is computed by the KS CTAs of one cluster, CTA s over k-blocks [s c, (s + 1) c), c = ceil(kt / KS),
// and the partial sums meet in the shared memory of the cluster's first CTA (DSMEM), which adds them
// in split order (deterministic) and runs the epilogue. It is for the narrow weights of token
// generation: a weight of fewer 64-row tiles than SMs (the attention's QKV GeMM: GPT-3's 4608 rows
// are 72 tiles) streams on the SMs it has tiles for; split KS ways, KS x tiles CTAs stream it. Where
// that pays is measured, not assumed (docs/design.md, "Attention at token generation").
//
// CUTLASS's stock non-persistent kernel runs it unchanged. It sees a problem of KS G rows a batch
// (G the packed group, one tile) and a grid of KS CTAs along M a batch, in clusters of (KS, 1, 1):
// a cluster is one tile's splits. The collective below maps CTA s back to the group's one tile
// (blk m = 0) and its share of K, and builds its TMA descriptors and load tensors on the real G
// rows with the stock collective of clusters of one (no multicast: each CTA reads its own k-blocks
// of X); only its DispatchPolicy names the cluster, for the kernel's launch and pipeline. That
// pipeline releases a stage to every CTA of the cluster (as for multicast), so the splits advance
// together and each must load as many k-blocks: every split takes ceil(kt / KS), the last one's
// past K read as zeros (TMA's out-of-bounds fill).
#pragma once
#include <cooperative_groups.h>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/gemm/dispatch_policy.hpp"

namespace cusync_sm90 {

// The k-blocks of each split: k-blocks [s c, (s + 1) c) of kt are split s's, c = split_count(kt).
template <int KS>
CUTLASS_HOST_DEVICE int split_count(int kt) {
  return (kt + KS - 1) / KS;
}

// A stock sm90 mainloop dispatch policy with another cluster shape.
template <class Policy, class Cluster>
struct WithCluster;
template <int Stages, class ClusterShape, class Schedule, class Cluster>
struct WithCluster<cutlass::gemm::MainloopSm90TmaGmmaWarpSpecialized<Stages, ClusterShape, Schedule>, Cluster> {
  using type = cutlass::gemm::MainloopSm90TmaGmmaWarpSpecialized<Stages, Cluster, Schedule>;
};

// The problem (KS G, M, K, L) the kernel sees as the real one, (G, M, K, L).
template <int KS, class Problem>
CUTLASS_HOST_DEVICE auto split_real_problem(Problem const& p) {
  return cute::make_shape(static_cast<int>(cute::get<0>(p)) / KS, static_cast<int>(cute::get<1>(p)),
                          static_cast<int>(cute::get<2>(p)), static_cast<int>(cute::get<3>(p)));
}

// The collective (a cusync::sm90::SyncCollectiveMma of clusters of one) of split blockIdx.x % KS. The
// kernel passes every method the whole K's k_tile_count; each substitutes its split's. load_tail gets
// the producer state advanced by the whole count and steps it to where the split's loads left it (a
// pipeline state is periodic in 2 x Stages).
template <class Sync, int KS>
struct ClusterSplitK : Sync {
  using typename Sync::Arguments;
  using typename Sync::MainloopPipeline;
  using typename Sync::Params;
  using typename Sync::PipelineState;
  using typename Sync::TensorStorage;
  static_assert(KS >= 2 && KS <= 8, "a cluster of 2-8 CTAs along the splits");
  static_assert(cute::size(typename Sync::DispatchPolicy::ClusterShape{}) == 1,
                "the stock collective of clusters of one: no multicast");
  // the kernel's: its launch in clusters of the splits, and its pipeline's releases to all of them
  using DispatchPolicy =
      typename WithCluster<typename Sync::DispatchPolicy, cute::Shape<cute::Int<KS>, cute::_1, cute::_1>>::type;
  static constexpr int kPeriod = 2 * DispatchPolicy::Stages;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args,
                                                  void* workspace) {
    return Sync::to_underlying_arguments(split_real_problem<KS>(cute::append<4>(problem_shape, 1)), args,
                                         workspace);
  }

  template <class ProblemShape>
  static bool can_implement(ProblemShape const& problem_shape, Arguments const& args) {
    auto p = cute::append<4>(problem_shape, 1);
    const int k_tiles = (static_cast<int>(cute::get<2>(p)) + cute::size<2>(typename Sync::TileShape{}) - 1) /
                        cute::size<2>(typename Sync::TileShape{});
    return static_cast<int>(cute::get<0>(p)) % KS == 0 && k_tiles >= KS &&
           Sync::can_implement(split_real_problem<KS>(p), args);
  }

  template <class ProblemShape_MNKL>
  CUTLASS_DEVICE auto load_init(ProblemShape_MNKL const& problem_shape_MNKL, Params const& params) const {
    return Sync::load_init(split_real_problem<KS>(problem_shape_MNKL), params);
  }

  CUTLASS_DEVICE static int split() { return static_cast<int>(blockIdx.x) % KS; }

  template <class LoadInputs, class BlockCoord, class KTileIterator>
  CUTLASS_DEVICE void load(Params const& params, MainloopPipeline pipeline, PipelineState smem_pipe_write,
                           LoadInputs const& load_inputs, BlockCoord const& blk_coord, KTileIterator,
                           int k_tile_count, int thread_idx, uint32_t, TensorStorage& shared_tensors) {
    const int count = split_count<KS>(k_tile_count), begin = split() * count;
    auto blk = cute::make_coord(0, cute::get<1>(blk_coord), cute::get<2>(blk_coord), cute::get<3>(blk_coord));
    Sync::load(params, pipeline, smem_pipe_write, load_inputs, blk, cute::make_coord_iterator(begin, k_tile_count),
               count, thread_idx, 0u, shared_tensors);
    tail_ = static_cast<uint32_t>(((count - k_tile_count) % kPeriod + kPeriod) % kPeriod);
  }

  CUTLASS_DEVICE void load_tail(MainloopPipeline pipeline, PipelineState smem_pipe_write) {
    smem_pipe_write.advance(tail_);
    Sync::load_tail(pipeline, smem_pipe_write);
  }

  template <class FrgTensorC>
  CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState smem_pipe_read, FrgTensorC& accum, int k_tile_count,
                          int thread_idx, TensorStorage& shared_tensors, Params const& params) {
    Sync::mma(pipeline, smem_pipe_read, accum, split_count<KS>(k_tile_count), thread_idx, shared_tensors, params);
  }

  CUTLASS_DEVICE void mma_tail(MainloopPipeline pipeline, PipelineState smem_pipe_release, int k_tile_count) {
    Sync::mma_tail(pipeline, smem_pipe_release, split_count<KS>(k_tile_count));
  }

 private:
  uint32_t tail_ = 0;
};

// The partial sums of a cluster's KS splits into the first CTA's `sum` (one consumer warp group's
// accumulator fragment, `thread_idx` its thread): true in the first CTA, which then holds the total.
// `smem`: the kernel's tensor storage, a union of the mainloop's stages and the epilogue's storage
// (KS - 1 fragments of the warp group), free once every CTA of the cluster has ended its mainloop
// (the first cluster barrier: every thread's mma_tail has waited for its wgmmas, and the producer
// warps have ended or exited); the second makes the splits' stores visible to the first CTA
// (barrier.cluster.arrive has release and wait acquire semantics by default). Value-major, so a
// warp's stores of one value are one contiguous 128 bytes.
template <int KS, class Frag>
CUTLASS_DEVICE bool cluster_reduce(Frag& sum, int thread_idx, char* smem) {
  constexpr int V = decltype(cute::size(sum))::value;
  constexpr int T = cutlass::NumThreadsPerWarpGroup;
  const int s = static_cast<int>(cute::block_rank_in_cluster());
  float* buf = reinterpret_cast<float*>(smem);
  cute::cluster_sync();
  if (s != 0) {
    float* dst = cooperative_groups::this_cluster().map_shared_rank(buf, 0) + (s - 1) * V * T + thread_idx;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < V; ++i) dst[i * T] = sum(i);
  }
  cute::cluster_sync();
  if (s != 0) return false;
  CUTLASS_PRAGMA_UNROLL
  for (int j = 0; j < KS - 1; ++j) {
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < V; ++i) sum(i) += buf[(j * V + i) * T + thread_idx];
  }
  return true;
}

}  // namespace cusync_sm90
