// PostingEpilogue: a CUTLASS 3 sm90 collective epilogue that posts each tile's semaphore once the
// tile's stores are complete (a drop-in CollectiveEpilogue of GemmUniversal's TMA warp-specialized
// cooperative kernel; examples/kernels/sm90_gemm_pair.cu). The TMA epilogue's stores are issued by
// the lanes of the first consumer warp (CUTLASS's `issue_tma_store`): after the collective's store()
// of a tile, they wait for their bulk groups to complete (the global writes performed), and lane 0
// fences the async proxy's writes against its generic release and adds (post.h). Arguments/Params
// add `out_sems` (null: no post). Policy: the producer side of the Dep (sem of a tile).
#pragma once
#include "cutlass/cutlass.h"

#include "../policy.h"
#include "post.h"

namespace cusync {
namespace sm90 {

template <class Base, class Policy>
struct PostingEpilogue : Base {
  using BaseParams = typename Base::Params;
  struct Arguments : Base::Arguments {
    uint32_t* out_sems = nullptr;
    Arguments() = default;
    // the stock collective's arguments, posting to `sems`
    Arguments(typename Base::Arguments const& stock, uint32_t* sems = nullptr) : Base::Arguments(stock), out_sems(sems) {}
  };
  struct Params : BaseParams {
    uint32_t* out_sems;
  };

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args,
                                                  void* workspace) {
    return Params{Base::to_underlying_arguments(problem_shape, args, workspace), args.out_sems};
  }

  CUTLASS_HOST_DEVICE PostingEpilogue(Params const& params, typename Base::TensorStorage& shared_tensors)
      : Base(params, shared_tensors), out_sems_(params.out_sems) {}

  template <class LoadPipeline, class LoadState, class StorePipeline, class StoreState, class ProblemShapeMNKL,
            class TileShapeMNK, class TileCoordMNKL, class Accumulators, class TiledMma, class TensorStorage>
  CUTLASS_DEVICE auto store(LoadPipeline load_pipeline, LoadState load_state, StorePipeline store_pipeline,
                            StoreState store_state, ProblemShapeMNKL problem_shape_mnkl, TileShapeMNK tile_shape_MNK,
                            TileCoordMNKL tile_coord_mnkl, Accumulators accumulators, TiledMma tiled_mma,
                            int thread_idx, TensorStorage& shared_tensors, int subtile_idx = -1) {
    auto r = Base::store(load_pipeline, load_state, store_pipeline, store_state, problem_shape_mnkl, tile_shape_MNK,
                         tile_coord_mnkl, accumulators, tiled_mma, thread_idx, shared_tensors, subtile_idx);
    if (out_sems_ != nullptr && thread_idx < 32) {
      bulk_wait_all();  // this lane's TMA stores of the tile, complete
      __syncwarp();
      if (thread_idx == 0) {
        const Tile t{static_cast<int>(cute::get<1>(tile_coord_mnkl)), static_cast<int>(cute::get<0>(tile_coord_mnkl)), 0};
        fence_proxy_async_global();
        red_release_add(out_sems_ + Policy{}.sem(t), 1u);
      }
    }
    return r;
  }

 private:
  uint32_t* out_sems_;
};

}  // namespace sm90
}  // namespace cusync
