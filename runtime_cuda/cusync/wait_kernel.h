// The paper's wait-kernel: launched on the consumer's stream right before the consumer, it spins
// until the producer's matching launch has started a block, so no consumer block can take an SM
// ahead of every producer block.
//
// Which producer launch matches is read off the device, not counted on the host: a producer and
// its consumer are launched in pairs, so after k consumer launches (consumer ticket = k * tiles)
// the consumer about to run pairs with producer launch k+1, which has started once the producer
// ticket exceeds k * producer tiles. No host counter, so CUDA-graph replays work unchanged.
#pragma once
#include "sync.h"

namespace cusync {

__device__ __forceinline__ void wait_for_producer_start(const unsigned long long* producer_ticket,
                                                        const unsigned long long* consumer_ticket,
                                                        unsigned long long producer_tiles,
                                                        unsigned long long consumer_tiles) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  const unsigned long long done = ld_acquire(consumer_ticket) / consumer_tiles;
  while (ld_acquire(producer_ticket) <= done * producer_tiles) {
  }
}

}  // namespace cusync

// Defines `extern "C" __global__ void NAME(...)`, the wait-kernel, once per module.
#define CUSYNC_DEFINE_WAIT_KERNEL(NAME)                                                          \
  extern "C" __global__ void NAME(const unsigned long long* producer_ticket,                     \
                                  const unsigned long long* consumer_ticket,                     \
                                  unsigned long long producer_tiles,                             \
                                  unsigned long long consumer_tiles) {                           \
    cusync::wait_for_producer_start(producer_ticket, consumer_ticket, producer_tiles,            \
                                    consumer_tiles);                                             \
  }
