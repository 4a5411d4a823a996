// Dependency maps: which producer tiles a consumer work item reads, and from which of its k-tiles
// on. The sync warp (sync_warp.h) polls them in order; nothing in it knows a GeMM.
//
// A map is a type with `item(Tile c, int k0, int kc)`: the view of consumer tile c's work item that
// computes k-tiles [k0, k0 + kc) of its mainloop (a split-K item computes a share). The view has
//   count()   how many producer tiles it considers, i = 0 .. count() - 1, in the order its loads need them;
//   tile(i)   the i-th producer tile;
//   need(i)   the first of the item's k-tiles (0 .. kc - 1, relative to k0) whose load reads tile i,
//             nondecreasing over the tiles it reads; -1: the item does not read tile i.
// Once every tile before i is posted, k-tiles [0, need(i)) may load.
#pragma once
#include "../tile.h"

namespace cusync {
namespace sm90 {

// A GeMM consumer whose K runs over a producer's output columns (the consumer's A is the producer's
// C): k-tile k reads producer column k / ptk, where ptk = the producer's tile width / BK, in every
// producer row block that the consumer tile's rows [y bm, (y + 1) bm) overlap (the producer's row
// tile in_bm may differ; both powers of two). The prebuilt sm90 library's map, from run-time fields.
struct ColumnDeps {
  int ptk;         // consumer k-tiles per producer column
  int bm, in_bm;   // the consumer's and the producer's row tile
  int producer_y;  // the producer grid's row blocks

  struct Item {
    int k0, ptk, px0, R, py0, n;
    CUSYNC_HD int count() const { return n; }
    CUSYNC_HD Tile tile(int i) const { return Tile{px0 + i / R, py0 + i % R, 0}; }
    CUSYNC_HD int need(int i) const {
      const int k = (px0 + i / R) * ptk - k0;
      return k < 0 ? 0 : k;
    }
  };
  // The producer row blocks [py0, py0 + rows) that consumer row block y reads, clipped to the grid
  // (the last consumer tile may reach past M).
  CUSYNC_HD void rows(int y, int& py0, int& rows) const {
    py0 = y * bm / in_bm;
    int end = ((y + 1) * bm + in_bm - 1) / in_bm;
    if (end > producer_y) end = producer_y;
    rows = end - py0;
  }
  CUSYNC_HD Item item(Tile c, int k0, int kc) const {
    Item it;
    it.k0 = k0;
    it.ptk = ptk;
    it.px0 = k0 / ptk;
    rows(c.y, it.py0, it.R);
    it.n = ((k0 + kc + ptk - 1) / ptk - it.px0) * it.R;
    return it;
  }
};

// The map of a generated header's `<dep>_waits` (count(c), tile(c, i): the producer tiles consumer
// tile c waits on, in the order of the Dep's ForAll) for a consumer whose k-tile k reads producer
// column k / PTK: tile i is needed from k-tile x * PTK on; columns outside the item's k-range are
// not read. The ForAll must walk the producer's x outermost-first (as the paper's GeMM Deps do),
// so that need() is nondecreasing.
template <class Waits, int PTK>
struct WaitsDeps {
  static_assert(PTK > 0, "a producer column spans at least one consumer k-tile");
  struct Item {
    Tile c;
    int k0, kc;
    CUSYNC_HD int count() const { return Waits::count(c); }
    CUSYNC_HD Tile tile(int i) const { return Waits::tile(c, i); }
    CUSYNC_HD int need(int i) const {
      const int x = Waits::tile(c, i).x;
      if ((x + 1) * PTK <= k0 || x * PTK >= k0 + kc) return -1;
      const int k = x * PTK - k0;
      return k < 0 ? 0 : k;
    }
  };
  CUSYNC_HD Item item(Tile c, int k0, int kc) const { return Item{c, k0, kc}; }
};

}  // namespace sm90
}  // namespace cusync
