// Split-K for tile kernels with CuSync hooks: a tile's K range is shared by `splits` blocks
// (CuStage::splits(), ::split()); each stores its fp32 partial of the tile's valid rows into a
// workspace, and the block that arrives last at the tile's counter sums every partial in split
// order (the result does not depend on which block is last), stores the tile and posts it. Only
// that block posts, so the semaphore values the generated policies expect are unchanged.
//
// Used where a grid of one block per tile leaves most SMs idle: the QKV GeMM and T = R V of token
// generation (M = B <= 4 rows, K up to 12288; attention.cuh), and Conv2Ds of few pixel tiles and
// long reductions (9 * C up to 4608; conv2d.cuh). The counter pattern is the CUDA
// programming guide's threadFenceReduction: every thread fences its partial's stores, one thread
// counts the arrival; the last block fences again before it reads the others' partials through L2.
//
//   workspace: float[tiles * splits * ROWS * COLS]   slot (tile, split) at (tile * splits + split)
//   counters:  unsigned[tiles], zero once; the last block resets its tile's counter to zero, so
//              repeated launches and CUDA-graph replays need no memset.
#pragma once

#include <cuda_fp16.h>
#include <type_traits>

namespace cusync_kernels {

// The K range [begin, end) of split `split` among `splits` over k_tiles units (contiguous, sizes
// differing by at most one).
struct SplitRange {
  int begin, end;
};
__device__ __forceinline__ SplitRange split_range(int k_tiles, int split, int splits) {
  const int q = k_tiles / splits, r = k_tiles % splits;
  const int begin = split * q + min(split, r);
  return SplitRange{begin, begin + q + (split < r ? 1 : 0)};
}

// Called by every thread of the block after its partial is stored: true in the block that arrives
// last (every other split's partial is then visible to it), which also resets the counter.
__device__ __forceinline__ bool splitk_arrive(unsigned* counter, int splits) {
  __shared__ int s_last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned prev = atomicAdd(counter, 1u);
    const int last = prev == static_cast<unsigned>(splits - 1);
    if (last) atomicExch(counter, 0u);
    s_last = last;
  }
  __syncthreads();
  const bool last = s_last != 0;
  if (last) __threadfence();
  return last;
}

// The last block: out[r, c] = epi(sum over splits of the partials) (or epi(sum, c)), r < rows, c < COLS,
// fp16; THREADS threads (those with tid < THREADS) share the work. Each thread keeps CHUNK float4s
// of the sum in registers and reads them split by split, CHUNK loads in flight at a time: a 64 x 64
// fp32 tile is one pass of `splits` L2 round trips (one float2 at a time would be 16 x splits of
// them, ~10 us on a Conv2D tile of 3 splits).
template <int ROWS, int COLS, int THREADS, class Epi>
__device__ __forceinline__ void splitk_reduce_store(const float* slot0, int splits, int rows, half* out, long long ldo,
                                                    Epi epi, int tid) {
  static_assert(COLS % 4 == 0, "rows of whole float4s");
  constexpr int CHUNK = 8;
  const int n = rows * COLS;  // the valid rows' elements, row-major in every slot
  for (int base = tid * 4; base < n; base += THREADS * 4 * CHUNK) {
    float4 acc[CHUNK];
#pragma unroll
    for (int j = 0; j < CHUNK; ++j) acc[j] = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s = 0; s < splits; ++s) {  // split order: the sum does not depend on who is last
      const float* slot = slot0 + (long long)s * ROWS * COLS;
#pragma unroll
      for (int j = 0; j < CHUNK; ++j) {
        const int e = base + j * THREADS * 4;
        if (e < n) {
          const float4 v = __ldcg(reinterpret_cast<const float4*>(slot + e));
          acc[j].x += v.x;
          acc[j].y += v.y;
          acc[j].z += v.z;
          acc[j].w += v.w;
        }
      }
    }
#pragma unroll
    for (int j = 0; j < CHUNK; ++j) {
      const int e = base + j * THREADS * 4;
      if (e < n) {
        const int r = e / COLS, c = e % COLS;
        __half2* dst = reinterpret_cast<__half2*>(out + r * ldo + c);
        if constexpr (std::is_invocable_v<Epi, float, int>) {  // epilogues that need the column (bias)
          dst[0] = __floats2half2_rn(epi(acc[j].x, c), epi(acc[j].y, c + 1));
          dst[1] = __floats2half2_rn(epi(acc[j].z, c + 2), epi(acc[j].w, c + 3));
        } else {
          dst[0] = __floats2half2_rn(epi(acc[j].x), epi(acc[j].y));
          dst[1] = __floats2half2_rn(epi(acc[j].z), epi(acc[j].w));
        }
      }
    }
  }
}

// Adapter stages that forward split() / splits() of their CuStage (StageSwitch, attention.cuh).
template <class S, class = void>
struct has_split : std::false_type {};
template <class S>
struct has_split<S, std::void_t<decltype(std::declval<const S&>().splits())>> : std::true_type {};

}  // namespace cusync_kernels
