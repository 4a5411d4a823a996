// The post: a producer tile's semaphore gets its release add only after the tile's stores are
// complete, from any epilogue.
#pragma once
#include "../sync.h"

namespace cusync {
namespace sm90 {

// Register (st.global) epilogues: the Threads threads that stored the tile meet at named barrier
// `bar_id`; then thread 0's release add at gpu scope (cumulative: it releases every store the
// barrier ordered before it).
template <int Threads, class Policy>
__device__ __forceinline__ void post_after_stores(const Policy& policy, uint32_t* sems, Tile t, int bar_id,
                                                  int thread_idx) {
  if (sems == nullptr) return;
  asm volatile("bar.sync %0, %1;" ::"r"(bar_id), "n"(Threads) : "memory");
  if (thread_idx == 0) red_release_add(sems + policy.sem(t), 1u);
}

// TMA-store epilogues: the thread that issued the tile's bulk stores waits for their completion (the
// global writes performed), orders the async proxy's writes before its generic release
// (fence.proxy.async.global), then adds.
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
template <class Policy>
__device__ __forceinline__ void post_after_bulk_stores(const Policy& policy, uint32_t* sems, Tile t) {
  if (sems == nullptr) return;
  bulk_wait_all();
  fence_proxy_async_global();
  red_release_add(sems + policy.sem(t), 1u);
}

}  // namespace sm90
}  // namespace cusync
