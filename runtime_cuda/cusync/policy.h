// Policies map producer tiles to semaphores: sem(tile) and value(tile), the number of posts a
// semaphore receives per launch. Generated policies (cusyncgen) follow the same shape.
#pragma once
#include "tile.h"

namespace cusync {

// No dependency: a stage whose input (or output) is not synchronized. wait() and post() on it
// compile to nothing.
struct NoSync {
  static constexpr int num_sems = 0;
  CUSYNC_HD static constexpr int sem(Tile) { return 0; }
  CUSYNC_HD static constexpr int value(Tile) { return 0; }
};

// The paper's two general policies for an X x Y producer grid, for code that does not use a
// generated header.
template <int X, int Y, int Z = 1>
struct TileSync {
  static constexpr int num_sems = X * Y * Z;
  CUSYNC_HD static constexpr int sem(Tile t) { return t.x + X * (t.y + Y * t.z); }
  CUSYNC_HD static constexpr int value(Tile) { return 1; }
};

template <int X, int Y, int Z = 1>
struct RowSync {
  static constexpr int num_sems = Y * Z;
  CUSYNC_HD static constexpr int sem(Tile t) { return t.y + Y * t.z; }
  CUSYNC_HD static constexpr int value(Tile) { return X; }
};

}  // namespace cusync
