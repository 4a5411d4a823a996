// Run-time descriptors of the compiler's policies and tile orders (cusyncgen.ir.PolicyIR, OrderIR):
// plain C structs, so that a prebuilt library (runtime_cuda/sm90) takes them from Python through
// ctypes, and a generated header gives the same values as constexpr (`<name>_desc`). Evaluated
// here exactly like the reference model (PolicyIR.sem/value, OrderIR.tile); tests compare the
// two over every tile.
#pragma once
#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

// cusyncgen.ir.DimMap per dim: kind 0 tile (t), 1 all (0), 2 mod (t % param), 3 div (t / param).
// sem(t) = c0 + C0 * (c1 + C1 * c2), value(t) = the product of the dims' group sizes.
typedef struct {
  int32_t kind[3];
  int32_t param[3];
  int32_t extent[3];   // the producer grid's (X, Y, Z)
  int32_t num_sems;    // 0: no policy (no wait, no post)
} CusyncPolicyDesc;

// cusyncgen.ir.OrderIR: linear item -> tile (x, y, z). groups_outer 2: the banded order (not an
// OrderIR form; a permutation of the same tiles): bands of group_stride row blocks, walked band by
// band, each band column by column.
typedef struct {
  int32_t group_dim;    // -1 (plain row-major), 0, 1 or 2
  int32_t group_stride;
  int32_t group_count;
  int32_t groups_outer; // 0, 1 (OrderIR's groups_outer) or 2 (banded)
  int32_t extent[3];    // the grid's (X, Y, Z)
} CusyncOrderDesc;

#ifdef __cplusplus
}  // extern "C"

#include "tile.h"

namespace cusync {

enum DimKind : int32_t { kDimTile = 0, kDimAll = 1, kDimMod = 2, kDimDiv = 3 };

// DimMap.coord / extent / group.
CUSYNC_HD constexpr int32_t dim_coord(int32_t kind, int32_t param, int32_t t) {
  return kind == kDimTile ? t : kind == kDimAll ? 0 : kind == kDimMod ? t % param : t / param;
}
CUSYNC_HD constexpr int32_t dim_extent(int32_t kind, int32_t param, int32_t E) {
  return kind == kDimTile ? E : kind == kDimAll ? 1 : kind == kDimMod ? param : (E + param - 1) / param;
}
CUSYNC_HD constexpr int32_t dim_group(int32_t kind, int32_t param, int32_t t, int32_t E) {
  return kind == kDimTile  ? 1
         : kind == kDimAll ? E
         : kind == kDimMod ? E / param + ((t % param) < (E % param) ? 1 : 0)
                           : (param < E - (t / param) * param ? param : E - (t / param) * param);
}

// PolicyIR.sem: c0 + C0 * (c1 + C1 * c2).
CUSYNC_HD constexpr int32_t policy_sem(const CusyncPolicyDesc& p, int32_t x, int32_t y, int32_t z) {
  return dim_coord(p.kind[0], p.param[0], x) +
         dim_extent(p.kind[0], p.param[0], p.extent[0]) *
             (dim_coord(p.kind[1], p.param[1], y) +
              dim_extent(p.kind[1], p.param[1], p.extent[1]) * dim_coord(p.kind[2], p.param[2], z));
}

// PolicyIR.value: how many producer tiles post to the semaphore of (x, y, z) in one launch.
CUSYNC_HD constexpr uint32_t policy_value(const CusyncPolicyDesc& p, int32_t x, int32_t y, int32_t z) {
  return static_cast<uint32_t>(dim_group(p.kind[0], p.param[0], x, p.extent[0])) *
         static_cast<uint32_t>(dim_group(p.kind[1], p.param[1], y, p.extent[1])) *
         static_cast<uint32_t>(dim_group(p.kind[2], p.param[2], z, p.extent[2]));
}

// OrderIR.tile: linear item -> (x, y, z). No indexed array: a local array indexed at run time would
// live in local memory.
CUSYNC_HD Tile order_tile(const CusyncOrderDesc& o, int32_t linear) {
  const int32_t X = o.extent[0], Y = o.extent[1];
  if (o.groups_outer == 2) {
    // Banded: bands of R = group_stride row blocks (the last may be shorter), each walked column by
    // column, R rows down a column: band b's rows are complete once the items of bands 0..b are.
    const int32_t R = o.group_stride, band = linear / (R * X), rest = linear - band * R * X;
    const int32_t rows = Y - band * R < R ? Y - band * R : R;
    return Tile{rest / rows, band * R + rest % rows, 0};
  }
  const int32_t c = o.group_count, s = o.group_stride;
  if (o.groups_outer) {
    const int32_t i = linear % c, yy = (linear / c) % Y, g = (linear / (c * Y)) % s, zz = linear / (c * Y * s);
    return Tile{g + i * s, yy, zz};
  }
  int32_t x = linear % X, y = (linear / X) % Y, z = linear / (X * Y);
  if (o.group_dim == 0) x = x / c + (x % c) * s;
  if (o.group_dim == 1) y = y / c + (y % c) * s;
  if (o.group_dim == 2) z = z / c + (z % c) * s;
  return Tile{x, y, z};
}

// The descriptors behind the interface that generated policies and orders have (sem/value of a
// Tile, tile of a linear index), so that code written against one takes the other.
struct PolicyDesc {
  CusyncPolicyDesc d;
  CUSYNC_HD constexpr int num_sems() const { return d.num_sems; }
  CUSYNC_HD constexpr int sem(Tile t) const { return policy_sem(d, t.x, t.y, t.z); }
  CUSYNC_HD constexpr uint32_t value(Tile t) const { return policy_value(d, t.x, t.y, t.z); }
};
struct OrderDesc {
  CusyncOrderDesc d;
  CUSYNC_HD int num_tiles() const { return d.extent[0] * d.extent[1] * d.extent[2]; }
  CUSYNC_HD Tile tile(int linear) const { return order_tile(d, linear); }
};

}  // namespace cusync
#endif  // __cplusplus
