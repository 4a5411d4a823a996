// Two dependent copy kernels, one tile per block: the synchronization-overhead microbenchmark of
// the paper's section VI-E. The producer writes mid = in + 1, the consumer out = 2 * mid, so a
// consumer that reads a tile before it is posted produces a detectably wrong (poisoned) result.
#pragma once
#include <cusync/cusync.h>
#include <kernels/abi.cuh>

namespace cusync_kernels {

template <class Stage, bool kConsumer>
__device__ __forceinline__ void tile_copy(const float4* __restrict__ in, float4* __restrict__ out,
                                          int tile_vec4, cusync::StageArgs stage_args) {
  Stage stage(stage_args);
  const cusync::Tile t = stage.start();
  if (kConsumer) stage.wait(t);
  const size_t base = static_cast<size_t>(Stage::order_type::linear(t)) * tile_vec4;
  for (int i = threadIdx.x; i < tile_vec4; i += blockDim.x) {
    float4 v = in[base + i];
    if (kConsumer) {
      v.x *= 2.f; v.y *= 2.f; v.z *= 2.f; v.w *= 2.f;
    } else {
      v.x += 1.f; v.y += 1.f; v.z += 1.f; v.w += 1.f;
    }
    out[base + i] = v;
  }
  stage.post(t);
}

}  // namespace cusync_kernels

#define CUSYNC_COPY_KERNEL(NAME, STAGE, CONSUMER)                                                  \
  extern "C" __global__ void NAME(const float4* in, float4* out, int tile_vec4, cusync::StageArgs s) { \
    cusync_kernels::tile_copy<STAGE, CONSUMER>(in, out, tile_vec4, s);                            \
  }
