// A/B reference: the stock CUTLASS 4.2 sm90 GeMM (GemmUniversal, cooperative warp-specialized
// kernel, TMA epilogue, persistent tile scheduler), the same fp16 in / fp32 accumulate / fp16 out
// problem as sync_gemm.cuh (A [M, K] row-major, B the nn.Linear weight [N, K], C [M, N]). Not synchronized: the benchmark and the profiling script
// time it next to the synchronized kernel of the same tile and cluster, so a gap between the two is
// the synchronized kernel's own (its register epilogue, its order, its missing multicast...).
#pragma once
#include <cuda_runtime.h>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"
#include "sm90_api.h"

namespace cusync_sm90 {

template <int BM, int BN, int BK, int CM>
struct StockGemm {
  using TileShape = cute::Shape<cute::Int<BM>, cute::Int<BN>, cute::Int<BK>>;
  using ClusterShape = cute::Shape<cute::Int<CM>, cute::_1, cute::_1>;
  using Half = cutlass::half_t;
  using Epi = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, Half, cutlass::layout::RowMajor, 8, Half,
      cutlass::layout::RowMajor, 8, cutlass::epilogue::TmaWarpSpecializedCooperative>::CollectiveOp;
  using Main = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Half, cutlass::layout::RowMajor, 8, Half,
      cutlass::layout::ColumnMajor, 8, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epi::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Main, Epi>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  // raster: 0 CUTLASS's heuristic, 1 along M, 2 along N; swizzle: max_swizzle_size (1, 2, 4, 8).
  static int run(const void* A, const void* B, void* C, int M, int N, int K, int raster, int swizzle,
                 cudaStream_t stream) {
    using namespace cute;
    auto sA = cutlass::make_cute_packed_stride(typename Kernel::StrideA{}, make_shape(M, K, 1));
    auto sB = cutlass::make_cute_packed_stride(typename Kernel::StrideB{}, make_shape(N, K, 1));
    auto sC = cutlass::make_cute_packed_stride(typename Kernel::StrideC{}, make_shape(M, N, 1));
    auto sD = cutlass::make_cute_packed_stride(typename Kernel::StrideD{}, make_shape(M, N, 1));
    typename Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm,
                                  {M, N, K, 1},
                                  {static_cast<const Half*>(A), sA, static_cast<const Half*>(B), sB},
                                  {{1.0f, 0.0f}, static_cast<const Half*>(C), sC, static_cast<Half*>(C), sD}};
    using RO = cutlass::gemm::kernel::detail::RasterOrderOptions;
    args.scheduler.raster_order = raster == 1 ? RO::AlongM : raster == 2 ? RO::AlongN : RO::Heuristic;
    args.scheduler.max_swizzle_size = swizzle > 0 ? swizzle : 1;
    Gemm gemm;
    if (gemm.can_implement(args) != cutlass::Status::kSuccess) return CUSYNC_SM90_BAD_SHAPE;
    const size_t ws = Gemm::get_workspace_size(args);
    static void* workspace = nullptr;
    static size_t workspace_size = 0;
    if (ws > workspace_size) {
      if (workspace != nullptr) cudaFree(workspace);
      if (cudaMalloc(&workspace, ws) != cudaSuccess) return static_cast<int>(cudaGetLastError());
      workspace_size = ws;
    }
    if (gemm.initialize(args, workspace, stream) != cutlass::Status::kSuccess) return CUSYNC_SM90_BAD_ARGUMENT;
    if (gemm.run(stream) != cutlass::Status::kSuccess) return static_cast<int>(cudaGetLastError());
    return static_cast<int>(cudaGetLastError());
  }
};

}  // namespace cusync_sm90
