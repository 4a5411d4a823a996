// The mainloop adaptor: wraps a CUTLASS 3 sm90 collective mainloop (CollectiveMma of
// sm90_mma_tma_gmma_ss_warpspecialized.hpp, as the CollectiveBuilder makes it) so that its load()
// waits on the producer tiles the next k-block reads. Per k-block: the independent operand's TMA
// (B, the weights) first, then wait(k) -- which blocks until k's producer tiles are posted and fences
// the generic proxy against the async one (fence.proxy.async.global) -- then the dependent operand's
// TMA (A, the producer's output). mma() and everything else are the collective's own.
//
// load_synced is CollectiveMma::load() of CUTLASS 4.2 with those two changes; k is the k-tile index
// in the whole K extent, and the work item loads k-tiles [k_begin, k_begin + k_tile_count) (a
// split-K item loads its share).
#pragma once
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/gemm/dispatch_policy.hpp"

#include "../policy.h"
#include "../sync.h"

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

  template <class TensorA, class TensorB, class BlockCoord, class Wait>
  CUTLASS_DEVICE void load_synced(Params const& mainloop_params, MainloopPipeline pipeline, PipelineState smem_pipe_write,
                                  cute::tuple<TensorA, TensorB> const& load_inputs, BlockCoord const& blk_coord,
                                  int k_begin, int k_tile_count, uint32_t block_rank_in_cluster,
                                  TensorStorage& shared_tensors, Wait&& wait) {
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
      CUTLASS_PRAGMA_NO_UNROLL
      for (int k = k_begin; k < k_begin + k_tile_count; ++k) {
        pipeline.producer_acquire(smem_pipe_write);
        using BarrierType = typename MainloopPipeline::ProducerBarrierType;
        BarrierType* tma_barrier = pipeline.producer_get_barrier(smem_pipe_write);
        int write_stage = smem_pipe_write.index();
        // B (the weights) never waits: issued first, it runs ahead of any wait (optimization R).
        copy(mainloop_params.tma_load_b.with(*tma_barrier, mcast_mask_b), tBgB(_, _, _, k), tBsB(_, _, _, write_stage));
        wait(k);
        copy(mainloop_params.tma_load_a.with(*tma_barrier, mcast_mask_a), tAgA(_, _, _, k), tAsA(_, _, _, write_stage));
        ++smem_pipe_write;
      }
    }
  }
};

// SyncCollectiveMma: the adaptor as a drop-in CollectiveMainloop of CUTLASS's own sm90 GemmUniversal
// (the TMA warp-specialized cooperative and ping-pong kernels; examples/kernels/sm90_gemm_pair.cu).
// Its Arguments/Params add the synchronization to the collective's:
//   in_sems  the producer's semaphores (null: no wait) -- Policy gives sem/value of a producer tile,
//            Deps maps a work item to the producer tiles its k-tiles read (deps.h);
//   ticket   a zeroed uint64 counter of this kernel's blocks over all launches (the epoch), needed
//            with in_sems;
//   trigger  griddepcontrol.launch_dependents at the start of every block: a producer lets the
//            consumer it PDL-launches start as soon as all its blocks are resident.
// load_init(), which every thread runs before the warp roles split, triggers the dependents; the
// load warp's elected thread takes the epoch at its first load() (one ticket atomic per block: CUTLASS
// caps the persistent grid at the number of tiles, so every block loads at least one tile; no shared
// memory, which would shift the kernel's 1024-byte aligned dynamic shared memory) and polls the
// producer tiles of each k-tile before its A load (an acquire per tile, the proxy fence once per
// k-tile that waited). Without a sync warp: a kernel of one's own with a spare producer warp uses the
// sync warp (sync_warp.h) and SyncMainloop::load_synced instead.
struct MainloopSync {
  const uint32_t* in_sems = nullptr;
  unsigned long long* ticket = nullptr;
  bool trigger = false;
};

template <class Base, class Policy = NoSync, class Deps = void>
struct SyncCollectiveMma : SyncMainloop<Base> {
  using typename Base::MainloopPipeline;
  using typename Base::PipelineState;
  using typename Base::TensorStorage;
  using BaseParams = typename Base::Params;
  static constexpr bool kWaits = Policy::num_sems != 0;
  static_assert(!kWaits || !cute::is_void_v<Deps>, "a waiting mainloop needs a dependency map (deps.h)");

  struct Arguments : Base::Arguments {
    MainloopSync sync;
    Arguments() = default;
    // the stock collective's arguments, synchronized by `sync`
    Arguments(typename Base::Arguments const& stock, MainloopSync s = {}) : Base::Arguments(stock), sync(s) {}
  };
  struct Params : BaseParams {
    MainloopSync sync;
  };

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args,
                                                  void* workspace) {
    return Params{Base::to_underlying_arguments(problem_shape, args, workspace), args.sync};
  }

  template <class ProblemShape_MNKL>
  CUTLASS_DEVICE auto load_init(ProblemShape_MNKL const& problem_shape_MNKL, Params const& params) const {
    if (params.sync.trigger && threadIdx.x == 0) pdl_launch_dependents();
    return Base::load_init(problem_shape_MNKL, static_cast<BaseParams const&>(params));
  }

  template <class TensorA, class TensorB, class KTileIterator, class BlockCoord>
  CUTLASS_DEVICE void load(Params const& params, MainloopPipeline pipeline, PipelineState smem_pipe_write,
                           cute::tuple<TensorA, TensorB> const& load_inputs, BlockCoord const& blk_coord,
                           KTileIterator k_tile_iter, int k_tile_count, int /*thread_idx*/,
                           uint32_t block_rank_in_cluster, TensorStorage& shared_tensors) {
    const int k0 = static_cast<int>(*k_tile_iter);
    if constexpr (!kWaits) {
      this->load_synced(params, pipeline, smem_pipe_write, load_inputs, blk_coord, k0, k_tile_count,
                        block_rank_in_cluster, shared_tensors, [](int) {});
    } else {
      const Tile c{static_cast<int>(cute::get<1>(blk_coord)), static_cast<int>(cute::get<0>(blk_coord)), 0};
      const auto item = Deps{}.item(c, k0, k_tile_count);
      const bool leader = cute::elect_one_sync();  // the lane load_synced elects (the whole warp is here)
      if (leader && epoch_ == 0u && params.sync.in_sems != nullptr)
        epoch_ = launch_epoch(params.sync.ticket, static_cast<unsigned long long>(gridDim.x) * gridDim.y * gridDim.z);
      const uint32_t epoch = epoch_;
      const int n = item.count();
      int next = 0;  // the first producer tile not yet seen posted
      // k: the k-tile about to load A (called by the elected thread only)
      auto wait = [&](int k) {
        if (params.sync.in_sems == nullptr) return;
        bool waited = false;
        while (next < n && item.need(next) <= k - k0) {
          if (item.need(next) >= 0) {
            const Tile t = item.tile(next);
            const uint32_t target = static_cast<uint32_t>(Policy{}.value(t)) * epoch;
            const uint32_t* sem = params.sync.in_sems + Policy{}.sem(t);
            while (!reached(ld_acquire(sem), target)) {
            }
            waited = true;
          }
          ++next;
        }
        if (waited) fence_proxy_async_global();
      };
      this->load_synced(params, pipeline, smem_pipe_write, load_inputs, blk_coord, k0, k_tile_count,
                        block_rank_in_cluster, shared_tensors, wait);
    }
  }

 private:
  uint32_t epoch_ = 0;  // this launch's epoch, in the load warp's elected thread (0: not taken yet)
};

}  // namespace sm90
}  // namespace cusync
