// Device (and host) evaluation of the descriptors in sm90_api.h: the policies' sem/value and the
// orders' tile, computed exactly like cusyncgen.ir.PolicyIR.sem/value and OrderIR.tile (the
// reference model; tests/test_sm90_compile.py compares this file, compiled on the host, with it).
#pragma once
#include <stdint.h>
#include "sm90_api.h"

#if defined(__CUDACC__)
#define CUSYNC_SM90_HD __host__ __device__ __forceinline__
#else
#define CUSYNC_SM90_HD inline
#endif

namespace cusync_sm90 {

enum DimKind : int32_t { kDimTile = 0, kDimAll = 1, kDimMod = 2, kDimDiv = 3 };

// DimMap.coord / extent / group.
CUSYNC_SM90_HD int32_t dim_coord(int32_t kind, int32_t param, int32_t t) {
  return kind == kDimTile ? t : kind == kDimAll ? 0 : kind == kDimMod ? t % param : t / param;
}
CUSYNC_SM90_HD int32_t dim_extent(int32_t kind, int32_t param, int32_t E) {
  return kind == kDimTile ? E : kind == kDimAll ? 1 : kind == kDimMod ? param : (E + param - 1) / param;
}
CUSYNC_SM90_HD int32_t dim_group(int32_t kind, int32_t param, int32_t t, int32_t E) {
  if (kind == kDimTile) return 1;
  if (kind == kDimAll) return E;
  if (kind == kDimMod) return E / param + ((t % param) < (E % param) ? 1 : 0);
  const int32_t rest = E - (t / param) * param;
  return param < rest ? param : rest;
}

// PolicyIR.sem: c0 + C0 * (c1 + C1 * c2).
CUSYNC_SM90_HD int32_t policy_sem(const CusyncSm90Policy& p, int32_t x, int32_t y, int32_t z) {
  const int32_t c0 = dim_coord(p.kind[0], p.param[0], x), c1 = dim_coord(p.kind[1], p.param[1], y),
                c2 = dim_coord(p.kind[2], p.param[2], z);
  const int32_t C0 = dim_extent(p.kind[0], p.param[0], p.extent[0]),
                C1 = dim_extent(p.kind[1], p.param[1], p.extent[1]);
  return c0 + C0 * (c1 + C1 * c2);
}

// PolicyIR.value: how many producer tiles post to the semaphore of (x, y, z) in one launch.
CUSYNC_SM90_HD uint32_t policy_value(const CusyncSm90Policy& p, int32_t x, int32_t y, int32_t z) {
  return static_cast<uint32_t>(dim_group(p.kind[0], p.param[0], x, p.extent[0])) *
         static_cast<uint32_t>(dim_group(p.kind[1], p.param[1], y, p.extent[1])) *
         static_cast<uint32_t>(dim_group(p.kind[2], p.param[2], z, p.extent[2]));
}

// The producer row blocks a consumer tile's rows [y bm, (y + 1) bm) read when the producer's row tile
// is in_bm: [py0, py0 + rows), clipped to the producer grid's producer_Y row blocks (the last
// consumer tile may reach past M). bm and in_bm powers of two: rows is 1 or bm / in_bm.
CUSYNC_SM90_HD void producer_rows(int32_t y, int32_t bm, int32_t in_bm, int32_t producer_Y, int32_t& py0, int32_t& rows) {
  py0 = y * bm / in_bm;
  int32_t end = ((y + 1) * bm + in_bm - 1) / in_bm;
  if (end > producer_Y) end = producer_Y;
  rows = end - py0;
}

// OrderIR.tile: linear item -> (x, y, z).
CUSYNC_SM90_HD void order_tile(const CusyncSm90Order& o, int32_t linear, int32_t& x, int32_t& y, int32_t& z) {
  const int32_t X = o.extent[0], Y = o.extent[1];
  if (o.groups_outer == 2) {
    // Banded: bands of R = group_stride row blocks (the last may be shorter), each walked column by
    // column, R rows down a column: a wave of G items reads about R row blocks of A and G / R column
    // blocks of B, and band b's rows are complete once the items of bands 0..b are.
    const int32_t R = o.group_stride, band = linear / (R * X), rest = linear - band * R * X;
    const int32_t rows = Y - band * R < R ? Y - band * R : R;
    x = rest / rows;
    y = band * R + rest % rows;
    z = 0;
    return;
  }
  if (o.groups_outer) {
    const int32_t c = o.group_count, s = o.group_stride;
    const int32_t i = linear % c, yy = (linear / c) % Y, g = (linear / (c * Y)) % s, zz = linear / (c * Y * s);
    x = g + i * s;
    y = yy;
    z = zz;
    return;
  }
  x = linear % X;
  y = (linear / X) % Y;
  z = linear / (X * Y);
  // No indexed array: a local array indexed at run time would live in local memory.
  const int32_t c = o.group_count, s = o.group_stride;
  if (o.group_dim == 0) x = x / c + (x % c) * s;
  if (o.group_dim == 1) y = y / c + (y % c) * s;
  if (o.group_dim == 2) z = z / c + (z % c) * s;
}

}  // namespace cusync_sm90
