// The hand-off from a block's sync warp to its load warp: a ring of Slots messages in shared memory,
// each a count of k-tiles whose producer tiles the sync warp has seen posted, guarded by a full and
// an empty mbarrier per slot (as CUTLASS's pipelines pass data between warps). mbarrier.arrive is a
// release and mbarrier.try_wait an acquire at CTA scope, so the sync warp's gpu-scope acquires of
// the semaphores (ordered before its arrive by __syncwarp) happen before the load warp's later
// accesses; compute-sanitizer's racecheck models this hand-off.
//
// The sender never blocks while it has polling to do: a count it cannot send (the ring full) waits
// in `pending`, and the next send carries the newest count, so the sync warp runs as far ahead as
// the semaphores allow. The receiver takes messages only when it needs more k-tiles; since the last
// message is the total the receiver needs last, every message sent is received.
#pragma once
#include "../types.h"

namespace cusync {
namespace sm90 {

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.shared::cta.b64 st, [%0];\n}" ::"r"(smem_addr(bar)) : "memory");
}
// Whether the phase of parity `phase` has completed (no suspension).
__device__ __forceinline__ bool mbar_test(uint64_t* bar, uint32_t phase) {
  uint32_t done;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
      : "=r"(done)
      : "r"(smem_addr(bar)), "r"(phase)
      : "memory");
  return done != 0;
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t phase) {
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(phase)
        : "memory");
  }
}

template <int Slots = 4>
struct ReadyChannel {
  static_assert(Slots >= 2, "a ring of at least two messages");
  struct Storage {
    alignas(8) uint64_t full[Slots];
    uint64_t empty[Slots];
    uint32_t value[Slots];
  };

  // One thread, before the block barrier that precedes every use.
  __device__ static void init(Storage& s) {
    for (int i = 0; i < Slots; ++i) {
      mbar_init(&s.full[i], 1);
      mbar_init(&s.empty[i], 1);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }

  // The sync warp's lane 0.
  struct Sender {
    int slot = 0;
    uint32_t phase = 1;  // an empty slot's phase: the ring starts empty
    uint32_t sent = 0, pending = 0;
    __device__ bool try_send(Storage& s) {
      if (pending == sent) return true;
      if (!mbar_test(&s.empty[slot], phase)) return false;
      s.value[slot] = pending;
      mbar_arrive(&s.full[slot]);
      sent = pending;
      if (++slot == Slots) {
        slot = 0;
        phase ^= 1u;
      }
      return true;
    }
    // A newer count: sent now if a slot is free, else with the next one.
    __device__ void offer(Storage& s, uint32_t v) {
      if (static_cast<int32_t>(v - pending) > 0) pending = v;
      try_send(s);
    }
    // Every count out (blocks until the receiver frees a slot).
    __device__ void flush(Storage& s) {
      while (!try_send(s)) {
      }
    }
  };

  // The load warp's elected thread.
  struct Receiver {
    int slot = 0;
    uint32_t phase = 0;
    uint32_t ready = 0;  // the newest count received
    __device__ uint32_t receive(Storage& s) {
      mbar_wait(&s.full[slot], phase);
      ready = s.value[slot];
      mbar_arrive(&s.empty[slot]);
      if (++slot == Slots) {
        slot = 0;
        phase ^= 1u;
      }
      return ready;
    }
    // Blocks until at least `need` k-tiles are ready; returns whether it received anything (the
    // caller then fences the generic proxy against the async one before its loads).
    __device__ bool wait_for(Storage& s, uint32_t need) {
      if (static_cast<int32_t>(ready - need) >= 0) return false;
      while (static_cast<int32_t>(receive(s) - need) < 0) {
      }
      return true;
    }
  };
};

}  // namespace sm90
}  // namespace cusync
