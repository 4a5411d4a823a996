// SyncCollectiveMma: the mainloop adaptor (mainloop.h) as a drop-in CollectiveMainloop of CUTLASS's
// own sm90 GemmUniversal (the TMA warp-specialized cooperative and ping-pong kernels;
// examples/kernels/sm90_gemm_pair.cu; the prebuilt library's swapped GeMM, runtime_cuda/sm90/swap.cu,
// kWeightA). The library's synchronized GeMM has a sync warp of its own instead.
#pragma once
#include "../policy.h"
#include "../sync.h"
#include "mainloop.h"

namespace cusync {
namespace sm90 {

// Its Arguments/Params add the synchronization to the collective's:
//   in_sems  the producer's semaphores (null: no wait) -- Policy gives sem/value of a producer tile,
//            Deps maps a work item to the producer tiles its k-tiles read (deps.h);
//   ticket   a zeroed uint64 counter of this kernel's blocks over all launches (the epoch), needed
//            with in_sems;
//   trigger  griddepcontrol.launch_dependents at the start of every block: a producer lets the
//            consumer it PDL-launches start as soon as all its blocks are resident;
//   pdl_wait griddepcontrol.wait before the first load of the dependent operand ("PDL alone": the
//            whole previous grid), after the independent operand's tiles of the first `ahead` k-tiles
//            (kWeightA: A is the weight, otherwise B; kWeightAhead: the stages a pipeline holds,
//            otherwise one k-tile);
//   evict_first  the weight's TMA loads hinted evict-first (a GeMM that reads each weight byte once).
// load_init(), which every thread runs before the warp roles split, triggers the dependents; the
// load warp's elected thread takes the epoch at its first load() (one ticket atomic per block: CUTLASS
// caps the persistent grid at the number of tiles, so every block loads at least one tile; no shared
// memory, which would shift the kernel's 1024-byte aligned dynamic shared memory) and polls the
// producer tiles of each k-tile before its A load (below), the proxy fence once per k-tile that
// polled. Without a sync warp: a kernel of one's own with a spare producer warp uses the
// sync warp (sync_warp.h) and SyncMainloop::load_synced instead.
struct MainloopSync {
  const uint32_t* in_sems = nullptr;
  unsigned long long* ticket = nullptr;
  bool trigger = false;
  bool pdl_wait = false;
  bool evict_first = false;  // the weight's TMA loads hinted evict-first (read once a launch)
};

template <class Base, class Policy = NoSync, class Deps = void, bool kWeightA = false, bool kWeightAhead = kWeightA>
struct SyncCollectiveMma : SyncMainloop<Base> {
  using typename Base::MainloopPipeline;
  using typename Base::PipelineState;
  using typename Base::TensorStorage;
  using BaseParams = typename Base::Params;
  static constexpr bool kWaits = Policy::num_sems != 0;
  static constexpr int kPollBatch = 16;
  static_assert(!kWaits || !cute::is_void_v<Deps>, "a waiting mainloop needs a dependency map (deps.h)");
  static_assert(!kWaits || !kWeightA, "tile waits map B-operand weights (deps.h): not the swapped operands");

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
      bool waited = !params.sync.pdl_wait;
      this->template load_synced<kWeightA>(
          params, pipeline, smem_pipe_write, load_inputs, blk_coord, k0, k_tile_count, block_rank_in_cluster,
          shared_tensors,
          [&](int) {
            if (!waited) {
              pdl_wait_producer_grid();
              waited = true;
            }
          },
          kWeightAhead ? Base::DispatchPolicy::Stages : 1, params.sync.evict_first);
    } else {
      const Tile c{static_cast<int>(cute::get<1>(blk_coord)), static_cast<int>(cute::get<0>(blk_coord)), 0};
      const auto item = Deps{}.item(c, k0, k_tile_count);
      const bool leader = cute::elect_one_sync();  // the lane load_synced elects (the whole warp is here)
      const int lane = static_cast<int>(threadIdx.x % 32);
      if (params.sync.in_sems != nullptr && epoch_ == 0u) {  // the block's first item: the epoch, to every lane
        uint32_t e = 0u;
        if (leader)
          e = launch_epoch(params.sync.ticket, static_cast<unsigned long long>(gridDim.x) * gridDim.y * gridDim.z);
        epoch_ = __shfl_sync(0xffffffffu, e, __ffs(__ballot_sync(0xffffffffu, leader)) - 1);
      }
      const uint32_t epoch = epoch_;
      const int n = item.count();
      // First the whole warp reads the item's producer tiles, 32 at a time (relaxed loads in flight
      // together, then fence.acq_rel.gpu: acquire for those that saw their posts), up to the first
      // not yet posted: once the producer is ahead, one or two L2 round trips per work item and
      // none between its loads. __syncwarp orders every lane's acquire before the elected lane's
      // proxy fence and loads.
      int next = 0;  // the first producer tile not yet seen posted
      if (params.sync.in_sems != nullptr) {
        for (int base = 0; base < n; base += 32) {
          const int i = base + lane;
          bool ok = true;
          if (i < n && item.need(i) >= 0) {
            const Tile t = item.tile(i);
            ok = reached(ld_relaxed(params.sync.in_sems + Policy{}.sem(t)),
                         static_cast<uint32_t>(Policy{}.value(t)) * epoch);
          }
          fence_acquire();
          const unsigned missing = __ballot_sync(0xffffffffu, !ok);
          next = missing == 0u ? (base + 32 < n ? base + 32 : n) : base + __ffs(missing) - 1;
          if (missing != 0u) break;
        }
        __syncwarp();
      }
      bool fenced = false;
      // k: the k-tile about to load A (called by the elected thread only). Before a k-tile whose
      // tiles are not all seen posted (the producer behind), the thread reads the semaphores of the
      // next kPollBatch tiles the same way, one round trip per batch (an acquire per tile,
      // serialized in this thread, cost the pair about 40% at GPT-3's 48 producer columns).
      auto wait = [&](int k) {
        if (params.sync.in_sems == nullptr) return;
        bool polled = !fenced;  // the warp's acquires above, not yet fenced against the async proxy
        fenced = true;
        while (next < n && item.need(next) <= k - k0) {
          uint32_t seen[kPollBatch], target[kPollBatch];
          CUTLASS_PRAGMA_UNROLL
          for (int j = 0; j < kPollBatch; ++j) {
            seen[j] = 0u;
            target[j] = 0u;  // past the item, or a tile it does not read: ready
            if (next + j < n && item.need(next + j) >= 0) {
              const Tile t = item.tile(next + j);
              target[j] = static_cast<uint32_t>(Policy{}.value(t)) * epoch;
              seen[j] = ld_relaxed(params.sync.in_sems + Policy{}.sem(t));
            }
          }
          fence_acquire();
          int ready = 0;  // the prefix of the batch seen posted
          CUTLASS_PRAGMA_UNROLL
          for (int j = 0; j < kPollBatch; ++j) ready += (ready == j && reached(seen[j], target[j])) ? 1 : 0;
          next = next + ready < n ? next + ready : n;
          polled = true;
        }
        if (polled) fence_proxy_async_global();
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
