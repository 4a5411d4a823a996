// Release/acquire primitives at GPU scope. One thread per block waits or posts; a block barrier
// orders the rest of the block (the pattern CUTLASS's generic barrier uses). No system fence.
#pragma once
#include "types.h"

namespace cusync {

__device__ __forceinline__ uint32_t ld_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ unsigned long long ld_acquire(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// A relaxed load: several can be in flight at once, unlike acquire loads, which order every later
// access after themselves. fence_acquire() after relaxed loads that saw the posted values gives
// them acquire semantics (the PTX memory model's fence-based synchronization).
__device__ __forceinline__ uint32_t ld_relaxed(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void fence_acquire() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }

__device__ __forceinline__ void red_release_add(uint32_t* p, uint32_t v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Release/acquire on a shared-memory word at block scope: how a block's sync warp tells the other
// warps which producer tiles it has seen posted (the gpu-scope acquire stays in the sync warp).
__device__ __forceinline__ uint32_t ld_acquire_cta(const uint32_t* smem_p) {
  uint32_t v;
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem_p));
  asm volatile("ld.acquire.cta.shared::cta.u32 %0, [%1];" : "=r"(v) : "r"(a) : "memory");
  return v;
}

__device__ __forceinline__ void st_release_cta(uint32_t* smem_p, uint32_t v) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem_p));
  asm volatile("st.release.cta.shared::cta.u32 [%0], %1;" ::"r"(a), "r"(v) : "memory");
}

// Proxy fences (sm_90): global memory written through the generic proxy (ordinary stores, what an
// acquire observed) before the async proxy reads it (a TMA load), or the async proxy's writes (a
// completed TMA store) before a later generic access; and shared memory written by ordinary stores
// (stmatrix too) before a TMA store reads it.
__device__ __forceinline__ void fence_proxy_async_global() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.global;" ::: "memory");
#endif
}
__device__ __forceinline__ void fence_proxy_async_shared() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

// A launch's epoch from a stage's ticket counter, which every block of every launch increments once
// (`blocks` per launch): launches so far, this one included. Semaphores are never reset: a wait in
// launch e needs value * e posts.
__device__ __forceinline__ uint32_t launch_epoch(unsigned long long* ticket, unsigned long long blocks) {
  return static_cast<uint32_t>(atomicAdd(ticket, 1ull) / blocks + 1ull);
}

// The barrier of a block's compute threads: the whole block, or, in a kernel whose sync warp (the
// last warp, which only waits) leaves early, named barrier 1 over the first THREADS threads.
template <bool SyncWarp, int THREADS>
__device__ __forceinline__ void compute_sync() {
  if constexpr (SyncWarp) {
    asm volatile("bar.sync 1, %0;" ::"n"(THREADS) : "memory");
  } else {
    __syncthreads();
  }
}

__device__ __forceinline__ long long global_timer_ns() {
  long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Programmatic dependent launch (sm_90+): no-ops on older targets.
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_wait_producer_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Semaphores only grow; a wait for `target` after 2^32 posts still works by comparing the
// distance in two's complement, which is valid while the producer is less than 2^31 posts ahead.
__device__ __forceinline__ bool reached(uint32_t seen, uint32_t target) {
  return static_cast<int32_t>(seen - target) >= 0;
}

}  // namespace cusync
