// Tiles, orders and the attribute macro that generated headers use.
#pragma once

#if defined(__CUDACC__)
#define CUSYNC_HD __host__ __device__ __forceinline__
#else
#define CUSYNC_HD inline
#endif

namespace cusync {

// A tile of a kernel's grid; dims the grid does not declare are 0.
struct Tile {
  int x, y, z;
};

CUSYNC_HD constexpr bool operator==(Tile a, Tile b) { return a.x == b.x && a.y == b.y && a.z == b.z; }

// Floor division and modulo that round towards minus infinity, as the .dep language does.
CUSYNC_HD constexpr int floordiv(int a, int b) { return (a >= 0) ? a / b : -((-a + b - 1) / b); }
CUSYNC_HD constexpr int floormod(int a, int b) { return a - floordiv(a, b) * b; }

// The default tile processing order: x fastest, then y, then z.
template <int X, int Y = 1, int Z = 1>
struct RowMajor {
  static_assert(X > 0 && Y > 0 && Z > 0, "A grid needs at least one tile in every dimension.");
  static constexpr int num_tiles = X * Y * Z;
  CUSYNC_HD static constexpr Tile tile(int linear) { return Tile{linear % X, (linear / X) % Y, linear / (X * Y)}; }
  CUSYNC_HD static constexpr int linear(Tile t) { return t.x + X * (t.y + Y * t.z); }
};

}  // namespace cusync
