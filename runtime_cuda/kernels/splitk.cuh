// Split-K for tile kernels with CuSync hooks: a tile's K range is shared by `splits` blocks
// (CuStage::splits(), ::split()); each stores its fp32 partial of the tile's valid rows into a
// workspace, and the block that arrives last at the tile's counter sums every partial in split
// order (the result does not depend on which block is last), stores the tile and posts it. Only
// that block posts, so the semaphore values the generated policies expect are unchanged.
//
// Used where a grid of one block per tile leaves most SMs idle: the QKV GeMM and T = R V of token
// generation (M = B <= 4 rows, K up to 12288; attention.cuh). The counter pattern is the CUDA
// programming guide's threadFenceReduction: every thread fences its partial's stores, one thread
// counts the arrival; the last block fences again before it reads the others' partials through L2.
//
//   workspace: float[tiles * splits * ROWS * COLS]   slot (tile, split) at (tile * splits + split)
//   counters:  unsigned[tiles], zero once; the last block resets its tile's counter to zero, so
//              repeated launches and CUDA-graph replays need no memset.
#pragma once

#include <cuda_fp16.h>

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

// The last block: out[r, c] = epi(sum over splits of the partials), r < rows, c < COLS (even),
// fp16 pairs; THREADS threads (those with tid < THREADS) share the work.
template <int ROWS, int COLS, int THREADS, class Epi>
__device__ __forceinline__ void splitk_reduce_store(const float* slot0, int splits, int rows, half* out, long long ldo,
                                                    Epi epi, int tid) {
  for (int e = tid * 2; e < rows * COLS; e += THREADS * 2) {
    const int r = e / COLS, c = e % COLS;
    float2 acc = make_float2(0.f, 0.f);
    for (int s = 0; s < splits; ++s) {
      const float2 v = __ldcg(reinterpret_cast<const float2*>(slot0 + (long long)s * ROWS * COLS + r * COLS + c));
      acc.x += v.x;
      acc.y += v.y;
    }
    *reinterpret_cast<__half2*>(out + r * ldo + c) = __floats2half2_rn(epi(acc.x), epi(acc.y));
  }
}

// Adapter stages that forward split() / splits() of their CuStage (StageSwitch, attention.cuh).
template <class S, class = void>
struct has_split : std::false_type {};
template <class S>
struct has_split<S, std::void_t<decltype(std::declval<const S&>().splits())>> : std::true_type {};

}  // namespace cusync_kernels
