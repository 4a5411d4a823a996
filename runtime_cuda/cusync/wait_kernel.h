// The paper's wait-kernel: launched on the consumer's stream right before the consumer, it spins
// until the producer's current launch has started a block, so no consumer block can take an SM
// ahead of every producer block. It keeps its own launch count on the device, so it needs no
// host-side counter and works under CUDA-graph replay.
#pragma once
#include "sync.h"

namespace cusync {

__device__ __forceinline__ void wait_for_producer_start(const unsigned long long* producer_ticket,
                                                        unsigned long long* launches,
                                                        unsigned long long producer_tiles) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  const unsigned long long e = atomicAdd(launches, 1ull);  // earlier launches of this wait-kernel
  while (ld_acquire(producer_ticket) <= e * producer_tiles) {
  }
}

}  // namespace cusync

// Defines `extern "C" __global__ void NAME(...)`, the wait-kernel, once per module.
#define CUSYNC_DEFINE_WAIT_KERNEL(NAME)                                                          \
  extern "C" __global__ void NAME(const unsigned long long* producer_ticket,                     \
                                  unsigned long long* launches, unsigned long long producer_tiles) { \
    cusync::wait_for_producer_start(producer_ticket, launches, producer_tiles);                  \
  }
