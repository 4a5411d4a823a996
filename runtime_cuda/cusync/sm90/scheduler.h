// The chain scheduler: n dependent stages in one persistent launch. Work items are numbered stage
// after stage -- every item of stage 0 in its tile order, then stage 1's, ... -- and block b of G
// takes items b, b + G, b + 2G, ... in increasing order (static striding; G <= the SMs, one block
// per SM, so every block is resident).
//
// Deadlock freedom (docs/sm90.md): an item waits only on items of earlier stages, which have smaller
// numbers. Take the smallest-numbered item not yet complete: everything it waits on is complete,
// and its block has completed its own earlier items (smaller numbers) and is resident, so that item
// progresses. Within a block, each warp role walks the same items in the same order, and the load
// warp gets ahead of the math warps only by the pipeline's stages, never by waiting on a later item
// before an earlier item's loads are issued.
//
// Split-K: a stage's tiles before split_from are one item each, the rest S items each (consecutive:
// the S splits of a tile run in one wave); split s of a tile computes k-tiles
// [s kt / S, (s + 1) kt / S).
#pragma once
#include "../desc.h"

namespace cusync {
namespace sm90 {

struct StageWork {
  int tiles;       // tiles of the stage's grid (its order's)
  int k_tiles;     // mainloop k-tiles of one tile
  int splits;      // S (1: no split)
  int split_from;  // the first split tile in the order
  CUSYNC_HD int items() const { return splits > 1 ? split_from + (tiles - split_from) * splits : tiles; }
};

// One work item: its stage, tile (t: its index in the stage's order), split s of S, the tile's slot
// among the split tiles (wt = t - split_from), and the k-tiles [k_begin, k_begin + k_count).
struct Work {
  int stage;
  Tile tile;
  int t, s, S, wt, k_begin, k_count;
};

template <int MaxStages, class Order = OrderDesc>
struct ChainSchedule {
  int n;                       // stages in this launch
  int begin[MaxStages + 1];    // item numbers: stage i has [begin[i], begin[i + 1])
  StageWork stage[MaxStages];
  Order order[MaxStages];

  CUSYNC_HD int items() const { return begin[n]; }

  CUSYNC_HD Work work(int w) const {
    Work r;
    r.stage = 0;
    for (int i = 1; i < n; ++i) r.stage += w >= begin[i] ? 1 : 0;
    const StageWork& st = stage[r.stage];
    const int local = w - begin[r.stage];
    const int S = st.splits > 1 ? st.splits : 1;
    if (S == 1 || local < st.split_from) {
      r.S = 1;
      r.t = local;
      r.s = 0;
      r.wt = 0;
    } else {
      r.S = S;
      const int rest = local - st.split_from;
      r.wt = rest / S;
      r.t = st.split_from + r.wt;
      r.s = rest - r.wt * S;
    }
    r.tile = order[r.stage].tile(r.t);
    r.k_begin = r.s * st.k_tiles / r.S;
    r.k_count = (r.s + 1) * st.k_tiles / r.S - r.k_begin;
    return r;
  }

#if !defined(__CUDACC_RTC__)
  // Host: append a stage; false if MaxStages are taken.
  bool add(const Order& o, const StageWork& st) {
    if (n >= MaxStages) return false;
    if (n == 0) begin[0] = 0;
    order[n] = o;
    stage[n] = st;
    begin[n + 1] = begin[n] + st.items();
    ++n;
    return true;
  }
#endif
};

}  // namespace sm90
}  // namespace cusync
