// OrderedScheduler: CUTLASS's static persistent tile scheduler (the sm90 GemmUniversal's default)
// walking a generated tile order (`<grid>_order::tile(linear)` of a cusyncgen header) instead of
// CUTLASS's raster and swizzle. Pass it as GemmUniversal's TileScheduler. Clusters of one CTA:
// block b takes items b, b + G, ... (G = the persistent grid), item i is tile Order::tile(i).
#pragma once
#include "cutlass/gemm/kernel/sm90_tile_scheduler.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"

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

}  // namespace sm90
}  // namespace cusync

// GemmUniversal picks its scheduler through this selector; the tag is the scheduler itself.
namespace cutlass::gemm::kernel::detail {
template <class Order, class ArchTag, class TileShape, class ClusterShape, uint32_t Stages, class ProblemShapeType>
struct TileSchedulerSelector<cusync::sm90::OrderedScheduler<Order>, ArchTag, TileShape, ClusterShape, Stages,
                             ProblemShapeType> {
  using Scheduler = cusync::sm90::OrderedScheduler<Order>;
};
}  // namespace cutlass::gemm::kernel::detail
