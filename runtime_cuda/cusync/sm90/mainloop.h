// The mainloop adaptor: wraps a CUTLASS 3 sm90 collective mainloop (CollectiveMma of
// sm90_mma_tma_gmma_ss_warpspecialized.hpp, as the CollectiveBuilder makes it) so that its load()
// waits on the producer tiles the next k-block reads. Per k-block: the independent operand's TMA
// (B, the weights) first, then wait(k) -- which blocks until k's producer tiles are posted and fences
// the generic proxy against the async one (fence.proxy.async.global) -- then the dependent operand's
// TMA (A, the producer's output). mma() and everything else are the collective's own.
//
// load_synced is CollectiveMma::load() of CUTLASS 4.2 with those two changes; k is the k-tile index
// in the whole K extent, and the work item loads k-tiles [k_begin, k_begin + k_tile_count) (a
// split-K item loads its share). kWeightA: the operands swapped (runtime_cuda/sm90/swap.cu: A the
// weights, B the producer's output). The weight tiles of the first `ahead` k-blocks are issued
// before the first wait (swap.cu: as many as the pipeline has stages, so a pipeline as deep as
// shared memory fills before the producer is done). evict_first: the weight's TMA loads carry
// the evict-first L2 hint (swap.cu: a token-generation GeMM reads each weight byte once).
#pragma once
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/gemm/dispatch_policy.hpp"


namespace cusync {
namespace sm90 {

template <class Base>
struct SyncMainloop : Base {
  using typename Base::MainloopPipeline;
  using typename Base::PipelineState;
  using typename Base::Params;
  using typename Base::TensorStorage;
  using typename Base::DispatchPolicy;
  using typename Base::GmemTiledCopyA;
  using typename Base::GmemTiledCopyB;
  using typename Base::SmemLayoutA;
  using typename Base::SmemLayoutB;

  template <bool kWeightA = false, class TensorA, class TensorB, class BlockCoord, class Wait>
  CUTLASS_DEVICE void load_synced(Params const& mainloop_params, MainloopPipeline pipeline, PipelineState smem_pipe_write,
                                  cute::tuple<TensorA, TensorB> const& load_inputs, BlockCoord const& blk_coord,
                                  int k_begin, int k_tile_count, uint32_t block_rank_in_cluster,
                                  TensorStorage& shared_tensors, Wait&& wait, int ahead = 1,
                                  bool evict_first = false) {
    using namespace cute;
    int lane_predicate = cute::elect_one_sync();
    if (lane_predicate) {
      Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{});  // (BLK_M,BLK_K,PIPE)
      Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutB{});  // (BLK_N,BLK_K,PIPE)
      constexpr uint32_t cluster_shape_x = get<0>(typename DispatchPolicy::ClusterShape());
      uint2 cluster_local_block_id = {block_rank_in_cluster % cluster_shape_x, block_rank_in_cluster / cluster_shape_x};
      Tensor gA_mkl = get<0>(load_inputs);
      Tensor gB_nkl = get<1>(load_inputs);
      auto block_tma_a = mainloop_params.tma_load_a.get_slice(cluster_local_block_id.y);
      auto block_tma_b = mainloop_params.tma_load_b.get_slice(cluster_local_block_id.x);
      auto [m_coord, n_coord, k_coord, l_coord] = blk_coord;
      Tensor gA = gA_mkl(_, _, m_coord, _, l_coord);  // (BLK_M,BLK_K,k)
      Tensor gB = gB_nkl(_, _, n_coord, _, l_coord);  // (BLK_N,BLK_K,k)
      Tensor tAgA = block_tma_a.partition_S(gA);
      Tensor tAsA = block_tma_a.partition_D(sA);
      Tensor tBgB = block_tma_b.partition_S(gB);
      Tensor tBsB = block_tma_b.partition_D(sB);
      uint16_t mcast_mask_a = 0;
      uint16_t mcast_mask_b = 0;
      if constexpr (cute::is_same_v<GmemTiledCopyA, SM90_TMA_LOAD_MULTICAST>) {
        auto block_layout = Layout<typename DispatchPolicy::ClusterShape>{};
        for (int n = 0; n < size<1>(block_layout); ++n) {
          mcast_mask_a |= (uint16_t(1) << block_layout(cluster_local_block_id.x, n, Int<0>{}));
        }
      }
      if constexpr (cute::is_same_v<GmemTiledCopyB, SM90_TMA_LOAD_MULTICAST>) {
        auto block_layout = Layout<typename DispatchPolicy::ClusterShape>{};
        for (int m = 0; m < size<0>(block_layout); ++m) {
          mcast_mask_b |= (uint16_t(1) << block_layout(m, cluster_local_block_id.y, Int<0>{}));
        }
      }
      using BarrierType = typename MainloopPipeline::ProducerBarrierType;
      // The weight's TMA of k-block k into a stage, and the dependent operand's (B's and A's, or A's
      // and B's where kWeightA).
      // evict_first: the weight is read once a launch, so its lines go first and X, Y stay in L2
      const auto hint = evict_first ? cute::TMA::CacheHintSm90::EVICT_FIRST : cute::TMA::CacheHintSm90::EVICT_NORMAL;
      auto load_weight = [&](BarrierType* bar, int k, int stage) {
        if constexpr (kWeightA) {
          copy(mainloop_params.tma_load_a.with(*bar, mcast_mask_a, hint), tAgA(_, _, _, k), tAsA(_, _, _, stage));
        } else {
          copy(mainloop_params.tma_load_b.with(*bar, mcast_mask_b, hint), tBgB(_, _, _, k), tBsB(_, _, _, stage));
        }
      };
      auto load_dependent = [&](BarrierType* bar, int k, int stage) {
        if constexpr (kWeightA) {
          copy(mainloop_params.tma_load_b.with(*bar, mcast_mask_b), tBgB(_, _, _, k), tBsB(_, _, _, stage));
        } else {
          copy(mainloop_params.tma_load_a.with(*bar, mcast_mask_a), tAgA(_, _, _, k), tAsA(_, _, _, stage));
        }
      };
      // The weight never waits (optimization R): the first `lead` stages get their weight tiles, then
      // after wait(k) their dependent tiles into the same stages (each stage's barrier expects both
      // since its acquire); then weight, wait, dependent a k-block.
      const int lead = ahead < k_tile_count ? ahead : k_tile_count;
      PipelineState first = smem_pipe_write;
      CUTLASS_PRAGMA_NO_UNROLL
      for (int i = 0; i < lead; ++i) {
        pipeline.producer_acquire(smem_pipe_write);
        load_weight(pipeline.producer_get_barrier(smem_pipe_write), k_begin + i, smem_pipe_write.index());
        ++smem_pipe_write;
      }
      CUTLASS_PRAGMA_NO_UNROLL
      for (int i = 0; i < lead; ++i) {
        wait(k_begin + i);
        load_dependent(pipeline.producer_get_barrier(first), k_begin + i, first.index());
        ++first;
      }
      CUTLASS_PRAGMA_NO_UNROLL
      for (int k = k_begin + lead; k < k_begin + k_tile_count; ++k) {
        pipeline.producer_acquire(smem_pipe_write);
        BarrierType* tma_barrier = pipeline.producer_get_barrier(smem_pipe_write);
        const int write_stage = smem_pipe_write.index();
        load_weight(tma_barrier, k, write_stage);
        wait(k);
        load_dependent(tma_barrier, k, write_stage);
        ++smem_pipe_write;
      }
    }
  }
};

}  // namespace sm90
}  // namespace cusync
