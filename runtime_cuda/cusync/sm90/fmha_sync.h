// CuSync in CUTLASS's Hopper FMHA forward (examples/88_hopper_fmha of the nvidia-cutlass wheel), the
// prompt's attention stage between the QKV GeMM and the output GeMM, without copying its kernel:
//
//   SyncFmhaMainloop<Base>    a drop-in CollectiveMainloop: before a work item's first TMA load, each
//                             load warp (the K/V warp; the Q warp where the schedule loads Q apart)
//                             waits for the QKV GeMM's tiles that it loads -- the item's query rows of
//                             head h's Q columns, and the rows up to its last key (the causal bound) of
//                             head h's K and V columns. PDL: the trigger at every CTA's start
//                             (prefetch_tma_descriptors, which one thread of warp 0 runs first) and
//                             griddepcontrol.wait in the load warps ("PDL alone").
//   PostingFmhaEpilogue<Base> a drop-in CollectiveEpilogue: after a consumer warp group's TMA stores
//                             of its rows of O (one O tile: FmhaSync::kORows rows of one head), the
//                             issuing warp waits for their completion and posts the tile.
//
// Each load warp polls like the sync warp (sync_warp.h): 32 semaphores at a time, relaxed loads in
// flight together, then fence.acq_rel.gpu and the proxy fence before the TMA loads. Epochs: each
// waiting warp takes one ticket at its first item (tickets per launch = CTAs x waiting warps).
#pragma once
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"

#include "../debug.h"
#include "../desc.h"
#include "../sync.h"
#include "post.h"

namespace cusync {
namespace sm90 {

// The mainloop's side (the wait); the posts of O's tiles are the epilogue's (PostingFmhaEpilogue).
struct FmhaSync {
  static constexpr int kORows = 64;  // an O tile's rows: one consumer warp group's share of a query tile
  PolicyDesc in_policy{};            // the QKV GeMM's tiles (x: column tile, y: row tile)
  const uint32_t* in_sems = nullptr; // null: no tile wait
  int in_tile_m = 128, in_tile_n = 128;
  unsigned long long* ticket = nullptr;
  bool trigger = false, pdl_wait = false;
  long long timeout_ns = 0;
  DebugRecord* debug = nullptr;
};

// Up to three rectangles of producer tiles (columns [x0, x0 + nx) x rows [y0, y0 + ny)).
struct TileRects {
  int n = 0;
  int x0[3], nx[3], y0[3], ny[3];
  CUSYNC_HD void add(int cx0, int cx1, int ry0, int ry1) {  // tiles covering columns [cx0, cx1) x rows [ry0, ry1)
    x0[n] = cx0;
    nx[n] = cx1 - cx0;
    y0[n] = ry0;
    ny[n] = ry1 - ry0;
    ++n;
  }
  CUSYNC_HD int count() const {
    int c = 0;
    for (int r = 0; r < n; ++r) c += nx[r] * ny[r];
    return c;
  }
  CUSYNC_HD Tile tile(int i) const {
    for (int r = 0; r < n; ++r) {
      const int k = nx[r] * ny[r];
      if (i < k) return Tile{x0[r] + i / ny[r], y0[r] + i % ny[r], 0};
      i -= k;
    }
    return Tile{0, 0, 0};
  }
};

// Every tile of `rects` posted (value(t) x epoch), polled by the whole warp; gives up after
// s.timeout_ns (recording the first tile not posted) so that a launch never hangs.
__device__ __forceinline__ void fmha_wait_tiles(const FmhaSync& s, const TileRects& rects, uint32_t epoch,
                                                Tile self) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int n = rects.count();
  long long t0 = 0;
  for (int base = 0; base < n;) {
    const int i = base + lane;
    bool ok = true;
    Tile t{0, 0, 0};
    int sem = 0;
    uint32_t seen = 0, target = 0;
    if (i < n) {
      t = rects.tile(i);
      sem = s.in_policy.sem(t);
      target = s.in_policy.value(t) * epoch;
      seen = ld_relaxed(s.in_sems + sem);
      ok = reached(seen, target);
    }
    const unsigned missing = __ballot_sync(0xffffffffu, !ok);
    if (missing == 0u) {
      base += 32;
      t0 = 0;
      continue;
    }
    const int first = __ffs(missing) - 1;
    if (first > 0) {  // progress: the tiles before the first missing one are posted
      base += first;
      t0 = 0;
      continue;
    }
    if (s.timeout_ns > 0) {
      const long long now = global_timer_ns();
      if (t0 == 0) t0 = now;
      const bool give_up = __shfl_sync(0xffffffffu, gave_up(s.debug) || now - t0 > s.timeout_ns, 0);
      if (give_up) {
        if (lane == 0 && !gave_up(s.debug))
          record_timeout(s.debug, 1, 0, t.x, t.y, t.z, sem, seen, target, self.x, self.y, self.z);
        break;
      }
    }
  }
  fence_acquire();  // acquire for the relaxed loads that saw their posts
  __syncwarp();
  fence_proxy_async_global();  // before the TMA (async proxy) loads of what they released
}

// kQApart: the kernel's kLoadsQSeparately (a warp of its own loads Q, and waits for it).
template <class Base, bool kQApart>
struct SyncFmhaMainloop : Base {
  using BaseParams = typename Base::Params;
  static constexpr int kTileQ = cute::get<0>(typename Base::TileShape{});
  static constexpr int kTileKV = cute::get<1>(typename Base::TileShape{});
  static constexpr int kHeadDim = cute::get<2>(typename Base::TileShape{});

  struct Arguments : Base::Arguments {
    FmhaSync sync;
    bool causal = false;
  };
  struct Params : BaseParams {
    FmhaSync sync;
    bool causal;
  };

  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const& problem_size, Arguments const& args, void* workspace) {
    return Params{Base::to_underlying_arguments(problem_size, args, workspace), args.sync, args.causal};
  }

  // Run first in every CTA, by one thread of warp 0: the PDL trigger rides on it.
  CUTLASS_DEVICE static void prefetch_tma_descriptors(Params const& params) {
    if (params.sync.trigger) pdl_launch_dependents();
    Base::prefetch_tma_descriptors(params);
  }

  template <bool kLoadQ, class BlkCoord, class ProblemShape, class... Rest>
  CUTLASS_DEVICE void load_kv_maybe_q(int block_rank_in_cluster, BlkCoord const& blk_coord, Params const& params,
                                      ProblemShape const& problem_size, Rest&&... rest) {
    wait(blk_coord, params, problem_size, true, kLoadQ);
    Base::template load_kv_maybe_q<kLoadQ>(block_rank_in_cluster, blk_coord, params, problem_size,
                                           static_cast<Rest&&>(rest)...);
  }

  template <class BlkCoord, class ProblemShape, class... Rest>
  CUTLASS_DEVICE void load_maybe_q(BlkCoord const& blk_coord, Params const& params, ProblemShape const& problem_size,
                                   Rest&&... rest) {
    wait(blk_coord, params, problem_size, false, true);
    Base::load_maybe_q(blk_coord, params, problem_size, static_cast<Rest&&>(rest)...);
  }

 private:
  // Called by the whole load warp before its item's loads. blk_coord: (query tile m, _0, (batch b, head h)).
  template <class BlkCoord, class ProblemShape>
  CUTLASS_DEVICE void wait(BlkCoord const& blk_coord, Params const& params, ProblemShape const& problem_size, bool kv,
                           bool q) {
    const FmhaSync& s = params.sync;
    if (s.pdl_wait && !waited_grid_) {
      pdl_wait_producer_grid();
      waited_grid_ = true;
    }
    if (s.in_sems == nullptr) return;
    const int lane = static_cast<int>(threadIdx.x % 32);
    if (epoch_ == 0u) {  // this warp's first item: its ticket
      const unsigned long long takers = static_cast<unsigned long long>(gridDim.x) * gridDim.y * gridDim.z *
                                        (kQApart ? 2ull : 1ull);
      uint32_t e = 0u;
      if (lane == 0) e = launch_epoch(s.ticket, takers);
      epoch_ = __shfl_sync(0xffffffffu, e, 0);
    }
    const int m = static_cast<int>(cute::get<0>(blk_coord));
    const int b = static_cast<int>(cute::get<0>(cute::get<2>(blk_coord)));
    const int h = static_cast<int>(cute::get<1>(cute::get<2>(blk_coord)));
    const int S = static_cast<int>(cute::get<2>(problem_size)), NH = static_cast<int>(cute::get<1>(problem_size));
    const int row0 = b * S;  // the sequence's first row of the QKV GeMM's output
    const int q_end = min((m + 1) * kTileQ, S);
    const int kv_end = params.causal ? q_end : S;
    const int bm = s.in_tile_m, bn = s.in_tile_n;
    auto cols = [&](int part) { return (part * NH + h) * kHeadDim; };  // head h's first column of Q, K or V
    TileRects rects;
    if (q) {
      const int c0 = cols(0);
      rects.add(c0 / bn, (c0 + kHeadDim - 1) / bn + 1, (row0 + m * kTileQ) / bm, (row0 + q_end - 1) / bm + 1);
    }
    if (kv) {
      for (int part = 1; part <= 2; ++part) {
        const int c0 = cols(part);
        rects.add(c0 / bn, (c0 + kHeadDim - 1) / bn + 1, row0 / bm, (row0 + kv_end - 1) / bm + 1);
      }
    }
    fmha_wait_tiles(s, rects, epoch_, Tile{m, h, b});
  }

  uint32_t epoch_ = 0u;  // this warp's epoch (0: not taken yet)
  bool waited_grid_ = false;
};

template <class Base>
struct PostingFmhaEpilogue : Base {
  using BaseParams = typename Base::Params;
  struct Arguments : Base::Arguments {
    PolicyDesc out_policy{};
    uint32_t* out_sems = nullptr;
  };
  struct Params : BaseParams {
    PolicyDesc out_policy;
    uint32_t* out_sems;
  };

  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const& problem_size, Arguments const& args,
                                        void* workspace = nullptr) {
    return Params{Base::to_underlying_arguments(problem_size, args, workspace), args.out_policy, args.out_sems};
  }

  // wg_coord: (this warp group's row block m of TileShape's rows, _0, (batch b, head h)).
  template <class TileShape, class BlkCoord, class ResultTuple, class TiledMma, class ProblemShape, class LoadPipeline,
            class TensorStorage>
  CUTLASS_DEVICE void operator()(TileShape const& tile_shape, BlkCoord const& wg_coord, ResultTuple const& result,
                                 TiledMma const& tiled_mma, ProblemShape const& problem_size, Params const& params,
                                 LoadPipeline epi_load_pipeline, TensorStorage& epi_tensor_storage) {
    static_assert(cute::get<0>(TileShape{}) == FmhaSync::kORows, "an O tile is one warp group's rows");
    Base::operator()(tile_shape, wg_coord, result, tiled_mma, problem_size, static_cast<BaseParams const&>(params),
                     epi_load_pipeline, epi_tensor_storage);
    const int t = static_cast<int>(threadIdx.x % cutlass::NumThreadsPerWarpGroup);
    if (params.out_sems == nullptr || t >= 32) return;
    bulk_wait_all();  // the TMA stores this warp issued (thread 0 of the group): complete
    __syncwarp();
    const int S = static_cast<int>(cute::get<2>(problem_size));
    const int m = static_cast<int>(cute::get<0>(wg_coord));
    const int b = static_cast<int>(cute::get<0>(cute::get<2>(wg_coord)));
    const int h = static_cast<int>(cute::get<1>(cute::get<2>(wg_coord)));
    if (t == 0 && m * FmhaSync::kORows < S) {
      fence_proxy_async_global();
      red_release_add(params.out_sems + params.out_policy.sem(Tile{h, (b * S) / FmhaSync::kORows + m, 0}), 1u);
    }
  }
};

}  // namespace sm90
}  // namespace cusync
