// What the GeMM (gemm.cuh) and the Conv2D (conv2d.cuh) share: the SM80 machinery of a
// BM x BN x BK thread-block tile -- swizzled K-major shared layouts (the CUTLASS SM80 TN defaults),
// the mma.sync TiledMMA, the ldmatrix atom -- and the cp.async helpers of their pipelines.
#pragma once

#include <cuda_fp16.h>
#include <cute/tensor.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/atom/copy_atom.hpp>

namespace cusync_kernels {

template <int BM, int BN, int BK, int Stages, int WarpsM, int WarpsN>
struct Sm80Tile {
  using SmemAtom = cute::conditional_t<
      BK == 64,
      decltype(cute::composition(cute::Swizzle<3, 3, 3>{},
                                 cute::Layout<cute::Shape<cute::_8, cute::_64>, cute::Stride<cute::_64, cute::_1>>{})),
      decltype(cute::composition(cute::Swizzle<2, 3, 3>{},
                                 cute::Layout<cute::Shape<cute::_8, cute::_32>, cute::Stride<cute::_32, cute::_1>>{}))>;
  using SmemLayoutA = decltype(cute::tile_to_shape(
      SmemAtom{}, cute::make_shape(cute::Int<BM>{}, cute::Int<BK>{}, cute::Int<Stages>{})));
  using SmemLayoutB = decltype(cute::tile_to_shape(
      SmemAtom{}, cute::make_shape(cute::Int<BN>{}, cute::Int<BK>{}, cute::Int<Stages>{})));
  using TiledMma = decltype(cute::make_tiled_mma(
      cute::SM80_16x8x16_F32F16F16F32_TN{},
      cute::Layout<cute::Shape<cute::Int<WarpsM>, cute::Int<WarpsN>, cute::_1>>{},
      cute::Tile<cute::Int<16 * WarpsM>, cute::Int<16 * WarpsN>, cute::_16>{}));
  using S2RAtom = cute::Copy_Atom<cute::SM75_U32x4_LDSM_N, cute::half_t>;
};

namespace detail {

// 16-byte global -> shared copy (L2 only); pred = false zero-fills without reading global memory.
__device__ __forceinline__ void cp_async_16_zfill(uint32_t smem_addr, const void* gptr, bool pred) {
  const int src_size = pred ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr), "l"(gptr), "r"(src_size));
}
__device__ __forceinline__ void cp_async_fence() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

}  // namespace detail
}  // namespace cusync_kernels
