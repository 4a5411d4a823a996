// Tile schedulers for CUTLASS's own sm90 GemmUniversal (pass one as its TileScheduler; clusters of
// one CTA):
//
// OrderedScheduler<Order>: CUTLASS's static persistent scheduler (the sm90 default) walking a
//   generated tile order (`<grid>_order::tile(linear)` of a cusyncgen header) instead of CUTLASS's
//   raster and swizzle: block b takes items b, b + G, ... (G = the persistent grid), item i is tile
//   Order::tile(i).
// DynamicScheduler<Order = void>: block b takes item b first, then claims the next unclaimed item
//   of the order (Order::tile, or CUTLASS's raster and swizzle for void) from a global counter, as
//   CuSync's thread blocks take their tiles. A consumer whose early blocks started on the SMs the
//   producer freed (PDL) takes more items than the blocks that started late; under static striding
//   every block has the same share, so the early start only moves idle time. It runs on the
//   kernel's dynamic-scheduler path: the producer warp group's second warp claims (one item ahead,
//   throttled by the load warp), and a shared-memory pipeline hands the item to every warp.
#pragma once
#include "cutlass/gemm/kernel/sm90_tile_scheduler.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "cutlass/pipeline/sm90_pipeline.hpp"

#include "../tile.h"

namespace cusync {
namespace sm90 {

template <class Order>
class OrderedScheduler
    : public cutlass::gemm::kernel::detail::StaticPersistentTileScheduler<OrderedScheduler<Order>> {
  using BaseScheduler = cutlass::gemm::kernel::detail::StaticPersistentTileScheduler<OrderedScheduler<Order>>;

 public:
  using BaseScheduler::BaseScheduler;
  using Params = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90Params;
  using RasterOrder = typename Params::RasterOrder;
  using RasterOrderOptions = typename Params::RasterOrderOptions;
  using Arguments = typename BaseScheduler::Arguments;
  static constexpr bool IsDynamicPersistent = false;
  using Pipeline = cutlass::PipelineEmpty;
  using PipelineStorage = typename Pipeline::SharedStorage;
  using ThrottlePipeline = cutlass::PipelineEmpty;
  using ThrottlePipelineStorage = typename ThrottlePipeline::SharedStorage;
  struct CLCResponse {};
  class SharedStorage {
   public:
    CUTLASS_DEVICE PipelineStorage pipeline() { return PipelineStorage{}; }
    CUTLASS_DEVICE ThrottlePipelineStorage throttle_pipeline() { return ThrottlePipelineStorage{}; }
    CUTLASS_DEVICE CLCResponse* data() { return nullptr; }
  };

  // The base scheduler's linear item -> (m, n): here the generated order (x: N block, y: M block).
  static CUTLASS_DEVICE cute::tuple<int32_t, int32_t> get_work_idx_m_and_n(
      uint64_t blk_per_grid_dim, cutlass::FastDivmodU64Pow2 const&, cutlass::FastDivmodU64Pow2 const&,
      cutlass::FastDivmodU64 const&, int32_t, RasterOrder) {
    const Tile t = Order::tile(static_cast<int>(blk_per_grid_dim));
    return {t.y, t.x};
  }

  template <class ProblemShape, class ElementAccumulator>
  static size_t get_workspace_size(Arguments const&, ProblemShape, cutlass::KernelHardwareInfo const&, uint32_t,
                                   const uint32_t = 1, uint32_t = 1) {
    return 0;
  }
  template <class ProblemShape, class ElementAccumulator>
  static cutlass::Status initialize_workspace(Arguments const&, void*, cudaStream_t, ProblemShape,
                                              cutlass::KernelHardwareInfo const&, uint32_t, const uint32_t = 1,
                                              uint32_t = 1, cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }
};

// The hand-off of a claimed item from the claiming warp to the others: CUTLASS's PipelineAsync (full
// barrier: one arrival after the item's shared-memory store; empty: every reader) under the
// parameter names the kernel's dynamic-scheduler path sets.
template <int Stages>
class ClaimPipeline : public cutlass::PipelineAsync<Stages> {
  using Base = cutlass::PipelineAsync<Stages>;

 public:
  struct Params {
    typename Base::ThreadCategory role = Base::ThreadCategory::NonParticipant;
    uint32_t producer_blockid = 0;
    uint32_t producer_arv_count = 1;
    uint32_t consumer_arv_count = 1;
    uint32_t transaction_bytes = 0;  // unused: the item arrives by a shared-memory store, not a transaction
    int initializing_warp = 0;
  };
  CUTLASS_DEVICE ClaimPipeline(typename Base::SharedStorage& storage, Params const& p)
      : Base(storage, typename Base::Params{p.role, p.producer_arv_count, p.consumer_arv_count, p.producer_blockid,
                                            p.initializing_warp}) {}
};

template <class Order = void>
class DynamicScheduler
    : public cutlass::gemm::kernel::detail::StaticPersistentTileScheduler<DynamicScheduler<Order>> {
  using BaseScheduler = cutlass::gemm::kernel::detail::StaticPersistentTileScheduler<DynamicScheduler<Order>>;
  static constexpr int kStages = 2;

 public:
  using BaseParams = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90Params;
  using RasterOrder = typename BaseParams::RasterOrder;
  using RasterOrderOptions = typename BaseParams::RasterOrderOptions;
  using Arguments = typename BaseScheduler::Arguments;
  using WorkTileInfo = typename BaseScheduler::WorkTileInfo;
  static constexpr bool IsDynamicPersistent = true;
  using Pipeline = ClaimPipeline<kStages>;
  using ThrottlePipeline = cutlass::PipelineAsync<kStages>;
  struct CLCResponse {
    uint32_t item;
  };
  // the claim counter: every launch makes exactly one claim per item (each block one claim per item it
  // takes after its first, and one that finds the order exhausted), so launch e's claims are
  // [e N, (e + 1) N) and claim c is item G + c % N -- never reset, like the semaphores
  struct Params : BaseParams {
    unsigned long long* claims = nullptr;
  };
  class SharedStorage {
   public:
    CUTLASS_DEVICE typename Pipeline::SharedStorage& pipeline() { return pipeline_; }
    CUTLASS_DEVICE typename ThrottlePipeline::SharedStorage& throttle_pipeline() { return throttle_; }
    CUTLASS_DEVICE CLCResponse* data() { return items_; }

   private:
    typename Pipeline::SharedStorage pipeline_;
    typename ThrottlePipeline::SharedStorage throttle_;
    CLCResponse items_[kStages];
  };

  CUTLASS_HOST_DEVICE DynamicScheduler() {}
  CUTLASS_DEVICE explicit DynamicScheduler(Params const& params) : BaseScheduler(params), claims_(params.claims) {}

  template <class ProblemShapeMNKL, class TileShape, class ClusterShape>
  static Params to_underlying_arguments(ProblemShapeMNKL problem_shape_mnkl, TileShape tile_shape,
                                        ClusterShape cluster_shape, cutlass::KernelHardwareInfo const& hw_info,
                                        Arguments const& arguments, void* workspace = nullptr,
                                        const uint32_t epilogue_subtile = 1, uint32_t ktile_start_alignment_count = 1u) {
    Params params;
    static_cast<BaseParams&>(params) = BaseScheduler::to_underlying_arguments(
        problem_shape_mnkl, tile_shape, cluster_shape, hw_info, arguments, workspace, epilogue_subtile,
        ktile_start_alignment_count);
    params.claims = static_cast<unsigned long long*>(workspace);
    return params;
  }
  template <class ProblemShape, class ElementAccumulator>
  static size_t get_workspace_size(Arguments const&, ProblemShape, cutlass::KernelHardwareInfo const&, uint32_t,
                                   const uint32_t = 1, uint32_t = 1) {
    return sizeof(unsigned long long);
  }
  template <class ProblemShape, class ElementAccumulator>
  static cutlass::Status initialize_workspace(Arguments const&, void* workspace, cudaStream_t stream, ProblemShape,
                                              cutlass::KernelHardwareInfo const&, uint32_t, const uint32_t = 1,
                                              uint32_t = 1, cutlass::CudaHostAdapter* = nullptr) {
    if (workspace == nullptr) return cutlass::Status::kErrorWorkspaceNull;
    return cudaMemsetAsync(workspace, 0, sizeof(unsigned long long), stream) == cudaSuccess
               ? cutlass::Status::kSuccess
               : cutlass::Status::kErrorInternal;
  }

  CUTLASS_DEVICE void set_data_ptr(CLCResponse* items) { items_ = items; }

  // The claiming warp (every lane calls it): one claim, handed to every warp through stage `state`.
  template <class PipelineState>
  CUTLASS_DEVICE PipelineState advance_to_next_work(Pipeline& pipeline, PipelineState state) {
    pipeline.producer_acquire(state);
    if (cute::elect_one_sync()) {
      const uint64_t n = this->scheduler_params.blocks_per_problem_;
      const uint64_t g = static_cast<uint64_t>(gridDim.x) * gridDim.y * gridDim.z;
      const uint64_t c = atomicAdd(claims_, 1ull);
      const uint64_t item = g + c % n;
      items_[state.index()].item = static_cast<uint32_t>(item < n ? item : n);
      pipeline.producer_commit(state);
    }
    __syncwarp();
    ++state;
    return state;
  }
  // Every warp that walks the items: the claimed item of stage `state`.
  template <class PipelineState>
  CUTLASS_DEVICE auto fetch_next_work(WorkTileInfo, Pipeline& pipeline, PipelineState state) {
    pipeline.consumer_wait(state);
    const uint32_t item = items_[state.index()].item;
    pipeline.consumer_release(state);
    return cute::make_tuple(this->get_current_work_for_linear_idx(item), true);
  }
  using BaseScheduler::fetch_next_work;

  // item -> (m, n): the generated order, or CUTLASS's raster and swizzle
  static CUTLASS_DEVICE cute::tuple<int32_t, int32_t> get_work_idx_m_and_n(
      uint64_t blk_per_grid_dim, cutlass::FastDivmodU64Pow2 const& major, cutlass::FastDivmodU64Pow2 const& minor,
      cutlass::FastDivmodU64 const& blk_major, int32_t log_swizzle, RasterOrder raster) {
    if constexpr (cute::is_void_v<Order>) {
      return cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90::get_work_idx_m_and_n(
          blk_per_grid_dim, major, minor, blk_major, log_swizzle, raster);
    } else {
      const Tile t = Order::tile(static_cast<int>(blk_per_grid_dim));
      return {t.y, t.x};
    }
  }

 private:
  unsigned long long* claims_ = nullptr;
  CLCResponse* items_ = nullptr;
};

}  // namespace sm90
}  // namespace cusync

// GemmUniversal picks its scheduler through this selector; the tag is the scheduler itself.
namespace cutlass::gemm::kernel::detail {
template <class Order, class ArchTag, class TileShape, class ClusterShape, uint32_t Stages, class ProblemShapeType>
struct TileSchedulerSelector<cusync::sm90::OrderedScheduler<Order>, ArchTag, TileShape, ClusterShape, Stages,
                             ProblemShapeType> {
  using Scheduler = cusync::sm90::OrderedScheduler<Order>;
};
template <class Order, class ArchTag, class TileShape, class ClusterShape, uint32_t Stages, class ProblemShapeType>
struct TileSchedulerSelector<cusync::sm90::DynamicScheduler<Order>, ArchTag, TileShape, ClusterShape, Stages,
                             ProblemShapeType> {
  using Scheduler = cusync::sm90::DynamicScheduler<Order>;
};
}  // namespace cutlass::gemm::kernel::detail
