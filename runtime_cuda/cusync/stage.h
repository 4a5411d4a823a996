// CuStage: the per-kernel synchronization object (the paper's CuStage), passed by value as a
// kernel parameter. All device functions are called by every thread of the block.
#pragma once
#include "types.h"
#include "debug.h"
#include "policy.h"
#include "sync.h"
#include "tile.h"

namespace cusync {

enum StageFlags : int {
  kCustomOrder = 1,   // take tiles in the generated order through the ticket counter
  kPdlTrigger = 2,    // sm_90: let the dependent (PDL-launched) grid start right away
  kPdlWait = 4,       // sm_90: "PDL alone": wait for the whole producer grid (griddepcontrol.wait)
};

// Device buffers of one stage; allocated and zeroed once by the host, never reset afterwards.
struct StageArgs {
  unsigned long long* ticket;   // blocks started by this stage over all launches
  uint32_t* out_sems;           // semaphores this stage posts (its OutPolicy), or null
  const uint32_t* in_sems0;     // semaphores of the first producer (its InPolicy), or null
  const uint32_t* in_sems1;     // semaphores of the second producer, or null
  DebugRecord* debug;           // CUSYNC_DEBUG: where a timed-out wait reports, or null
  long long timeout_ns;         // CUSYNC_DEBUG: how long a wait may spin
  int stage_id;
  int flags;                    // StageFlags
  // Blocks per tile (split-K: each block computes one K range of its tile, the last to finish
  // reduces and posts; kernels/splitk.cuh). 0 or 1: one block per tile. A split grid has
  // `splits` times the tiles' z extent: block z = tile z * splits + split.
  int splits;
#if defined(CUSYNC_TIMELINE)
  // CUSYNC_TIMELINE builds (diagnostics, cusyncgen.cuda.timeline): thread 0 of every block writes
  // {start, end of its last wait, end, smid | tile} (globaltimer ns) to
  // timeline[4 * (ticket % timeline_capacity)]; null or a capacity of 0: no records.
  unsigned long long* timeline;
  long long timeline_capacity;
#endif
};

#if defined(CUSYNC_DEBUG)
// The shared record (debug.h), from a stage's wait.
static __device__ __noinline__ void report_timeout(DebugRecord* d, int stage_id, int input, Tile t, int s,
                                                   uint32_t seen, uint32_t target, Tile self) {
  record_timeout(d, stage_id, input, t.x, t.y, t.z, s, seen, target, self.x, self.y, self.z);
}

// The CUSYNC_DEBUG wait: spins like the release one but gives up after args.timeout_ns and
// records what it saw. Kept out of line, so the timeout bookkeeping does not enter the register
// allocation of the (large) kernels that wait.
static __device__ __noinline__ void debug_spin(const uint32_t* p, uint32_t target, DebugRecord* d,
                                               long long timeout_ns, int stage_id, int input, Tile t, int s,
                                               Tile self) {
  const long long t0 = global_timer_ns();
  uint32_t seen;
  while (!reached(seen = ld_acquire(p), target)) {
    if (global_timer_ns() - t0 > timeout_ns) {
      report_timeout(d, stage_id, input, t, s, seen, target, self);
      return;
    }
  }
}
#endif

template <bool C, class A, class B>
struct conditional { using type = A; };
template <class A, class B>
struct conditional<false, A, B> { using type = B; };

template <class Order, class OutPolicy = NoSync, class InPolicy0 = NoSync, class InPolicy1 = NoSync>
struct CuStage {
  using order_type = Order;
  static constexpr int num_tiles = Order::num_tiles;

  StageArgs args;
  // Per-block state, identical in every thread of the block.
  uint32_t epoch;     // launches of this stage so far, this one included (mod 2^32)
  Tile self;          // the tile this block computes
  int split_;         // which of the tile's args.splits K ranges (0 without split-K)
  int last_sem0, last_sem1;
#if defined(CUSYNC_TIMELINE)
  // CUSYNC_TIMELINE builds: this block's record, written to args.timeline when it posts.
  unsigned long long tl_ticket;
  long long tl_start, tl_wait;
  // A kernel whose compute threads learn of their last ready input elsewhere (a sync warp) says when.
  __device__ __forceinline__ void note_wait(long long t) { tl_wait = t; }
#endif

  __host__ __device__ CuStage() {}
  __host__ __device__ explicit CuStage(StageArgs a) : args(a), epoch(0), self{0, 0, 0}, split_(0), last_sem0(-1), last_sem1(-1) {}

  // Split-K: the tile's blocks and this block's share (kernels/splitk.cuh).
  __device__ __forceinline__ int splits() const { return args.splits > 1 ? args.splits : 1; }
  __device__ __forceinline__ int split() const { return split_; }

  // Takes this block's ticket and returns its tile. One 64-bit atomic per block; the epoch is
  // derived from the ticket, so neither semaphores nor counters are reset between launches or
  // CUDA-graph replays.
  static constexpr bool synchronizes =
      OutPolicy::num_sems != 0 || InPolicy0::num_sems != 0 || InPolicy1::num_sems != 0;
  static constexpr bool waits = InPolicy0::num_sems != 0 || InPolicy1::num_sems != 0;

  // `waiter`: the thread that will wait (thread 0, or the sync warp's lane 0 in kernels that have
  // one). Without the custom order no other thread needs the ticket: a stage that only posts
  // counts its block with a fire-and-forget atomic (for the wait-kernel), and a waiting one takes
  // its ticket in `waiter` alone, so no block barrier delays the start of the main loop.
  __device__ __forceinline__ Tile start(int waiter = 0) {
    __shared__ unsigned long long s_ticket;
#if defined(CUSYNC_TIMELINE)
    tl_start = global_timer_ns();
    tl_wait = 0;
    constexpr bool timeline = true;
#else
    constexpr bool timeline = false;
#endif
    if (args.flags & kPdlWait) pdl_wait_producer_grid();
    if (args.flags & kPdlTrigger) pdl_launch_dependents();
    const unsigned long long blocks = static_cast<unsigned long long>(num_tiles) * static_cast<unsigned long long>(splits());
    if (!timeline && !(args.flags & kCustomOrder)) {
      self = Tile{static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y), static_cast<int>(blockIdx.z) / splits()};
      split_ = static_cast<int>(blockIdx.z) % splits();
      last_sem0 = -1;
      last_sem1 = -1;
      if constexpr (synchronizes) {
        // Nothing to count in the plain kernel, as StreamSync runs it.
        const int tid = static_cast<int>(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
        if (tid == waiter) {
          if constexpr (waits) {
            epoch = launch_epoch(args.ticket, blocks);
          } else {
            atomicAdd(args.ticket, 1ull);  // result unused: a reduction, nothing to wait for
          }
        }
      }
      return self;
    }
    if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) s_ticket = atomicAdd(args.ticket, 1ull);
    __syncthreads();
    const unsigned long long t = s_ticket;
#if defined(CUSYNC_TIMELINE)
    tl_ticket = t;
#endif
    epoch = static_cast<uint32_t>(t / blocks + 1ull);
    last_sem0 = -1;
    last_sem1 = -1;
    if (args.flags & kCustomOrder) {
      // split-K: the tickets of a launch take the tiles in the generated order, each tile's
      // splits() blocks in a row, so tiles complete (and post) in that order wave after wave
      const int i = static_cast<int>(t % blocks);
      self = Order::tile(i / splits());
      split_ = i % splits();
    } else {
      self = Tile{static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y), static_cast<int>(blockIdx.z) / splits()};
      split_ = static_cast<int>(blockIdx.z) % splits();
    }
    return self;
  }

  // Blocks until the producer tile `t` of input I is posted in this launch. Repeated waits on a
  // semaphore already seen complete return at once (RowSync waits once per row).
  template <int I = 0>
  __device__ __forceinline__ void wait(Tile t) {
    using P = typename conditional<I == 0, InPolicy0, InPolicy1>::type;
    if constexpr (P::num_sems == 0) {
      return;
    } else {
      const int s = P::sem(t);
      int& last = (I == 0) ? last_sem0 : last_sem1;
      if (s == last) return;
      last = s;
      if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
        const uint32_t* sems = (I == 0) ? args.in_sems0 : args.in_sems1;
        const uint32_t target = static_cast<uint32_t>(P::value(t)) * epoch;
        const uint32_t* p = sems + s;
#if defined(CUSYNC_DEBUG)
        debug_spin(p, target, args.debug, args.timeout_ns, args.stage_id, I, t, s, self);
#else
        while (!reached(ld_acquire(p), target)) {
        }
#endif
#if defined(CUSYNC_TIMELINE)
        tl_wait = global_timer_ns();
#endif
      }
      __syncthreads();
    }
  }

  // Waits for the producer tiles ts[0..n) of input I together: one thread issues the loads of
  // every semaphore not already seen complete at once (one round trip instead of n), spins on
  // those not yet posted, and the block meets one barrier. Semaphores equal to the last one waited
  // on are skipped (RowSync waits once per row); nothing to wait on means no barrier at all.
  template <int I = 0, int N>
  __device__ __forceinline__ void wait_all(const Tile (&ts)[N], int n) {
    using P = typename conditional<I == 0, InPolicy0, InPolicy1>::type;
    if constexpr (P::num_sems == 0) {
      return;
    } else {
      int& last = (I == 0) ? last_sem0 : last_sem1;
      bool fresh = false;
#pragma unroll
      for (int i = 0; i < N; ++i) fresh |= (i < n) && P::sem(ts[i]) != last;
      if (!fresh) return;
      // One distinct semaphore (RowSync, or a batch inside one row): the plain acquire spin. The
      // relaxed loads + fence below pay a gpu-scope fence, which measured slower for a single one.
      bool single = true;
#pragma unroll
      for (int i = 1; i < N; ++i) single &= (i >= n) || P::sem(ts[i]) == P::sem(ts[0]);
      if (single) {
        wait<I>(ts[0]);
        return;
      }
      if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
        const uint32_t* sems = (I == 0) ? args.in_sems0 : args.in_sems1;
        uint32_t seen[N];
#pragma unroll
        for (int i = 0; i < N; ++i) seen[i] = (i < n && P::sem(ts[i]) != last) ? ld_relaxed(sems + P::sem(ts[i])) : 0u;
#pragma unroll
        for (int i = 0; i < N; ++i) {
          if (i >= n || P::sem(ts[i]) == last) continue;
          const uint32_t target = static_cast<uint32_t>(P::value(ts[i])) * epoch;
          if (reached(seen[i], target)) continue;
#if defined(CUSYNC_DEBUG)
          debug_spin(sems + P::sem(ts[i]), target, args.debug, args.timeout_ns, args.stage_id, I, ts[i],
                     P::sem(ts[i]), self);
#else
          while (!reached(ld_relaxed(sems + P::sem(ts[i])), target)) {
          }
#endif
        }
        fence_acquire();
#if defined(CUSYNC_TIMELINE)
        tl_wait = global_timer_ns();
#endif
      }
      last = P::sem(ts[n - 1]);
      __syncthreads();
    }
  }

  // One acquire load, no barrier, no spinning: has producer tile `t` of input I been posted in
  // this launch? For a sync warp whose lanes each watch one tile (the epoch must be known to the
  // calling thread: start(waiter) with the caller as waiter, or the custom order).
  template <int I = 0>
  __device__ __forceinline__ bool poll(Tile t, uint32_t* seen_out = nullptr, uint32_t* target_out = nullptr) const {
    using P = typename conditional<I == 0, InPolicy0, InPolicy1>::type;
    if constexpr (P::num_sems == 0) {
      return true;
    } else {
      const uint32_t* sems = (I == 0) ? args.in_sems0 : args.in_sems1;
      const uint32_t target = static_cast<uint32_t>(P::value(t)) * epoch;
      const uint32_t seen = ld_acquire(sems + P::sem(t));
      if (seen_out != nullptr) *seen_out = seen;
      if (target_out != nullptr) *target_out = target;
      return reached(seen, target);
    }
  }

  // The loop of a sync warp (a warp of the consumer block that only waits; gemm.cuh and
  // conv2d.cuh with SyncWarp): the consumer's main loop consumes units 0..num_units-1 in order (its
  // k-blocks), unit u needing the producer tiles needs(u, i, tile) for i = 0, 1, ... until needs
  // returns false. L lanes share a unit (lane u % L takes i = lane % L, lane % L + L, ...), each
  // polling its tiles with gpu-scope acquire loads; lane 0 publishes the number of leading units
  // whose tiles are all posted to *ready (release at block scope: the compute threads acquire it
  // before loading a unit). Called by all 32 lanes; the epoch is that of lane 0 (start(waiter)).
  // CUSYNC_DEBUG: a wait past args.timeout_ns is reported and every unit published, so the block
  // finishes (with wrong data) and the host raises.
  template <int L, class Needs>
  __device__ __noinline__ void serve(int num_units, uint32_t* ready, Needs needs) {
    static_assert(L >= 1 && 32 % L == 0, "lanes per unit must divide 32");
    constexpr int U = 32 / L;
    const int lane = static_cast<int>(threadIdx.x) & 31;
    epoch = __shfl_sync(0xffffffffu, epoch, 0);
    uint32_t published = 0;
#if defined(CUSYNC_DEBUG)
    const long long t0 = global_timer_ns();
#endif
    for (int base = 0; base < num_units; base += U) {
      const int unit = base + lane / L;
      int i = lane % L;
      bool ok = unit >= num_units;
      Tile pt{0, 0, 0};
      uint32_t seen = 0, target = 0;
      while (true) {
        while (!ok) {
          if (!needs(unit, i, pt)) {
            ok = true;
          } else if (poll<0>(pt, &seen, &target)) {
            i += L;
          } else {
            break;
          }
        }
        const unsigned m = __ballot_sync(0xffffffffu, ok);
        const int lead = (m == 0xffffffffu) ? 32 : __ffs(~m) - 1;
        const uint32_t now = static_cast<uint32_t>(min(base + lead / L, num_units));
        __syncwarp();
        if (lane == 0 && now > published) {
          st_release_cta(ready, now);
          published = now;
        }
        if (m == 0xffffffffu) break;
#if defined(CUSYNC_DEBUG)
        if (global_timer_ns() - t0 > args.timeout_ns) {
          if (lane == __ffs(~m) - 1) report_timeout(args.debug, args.stage_id, 0, pt, sem_index<0>(pt), seen, target, self);
          __syncwarp();
          if (lane == 0) st_release_cta(ready, static_cast<uint32_t>(num_units));
          return;
        }
#endif
      }
    }
  }

  template <int I = 0>
  __device__ __forceinline__ int sem_index(Tile t) const {
    using P = typename conditional<I == 0, InPolicy0, InPolicy1>::type;
    if constexpr (P::num_sems == 0) {
      return -1;
    } else {
      return P::sem(t);
    }
  }

  // Publishes tile `t` once every thread of the block has stored its part of it.
  __device__ __forceinline__ void post(Tile t) {
    if constexpr (OutPolicy::num_sems != 0) __syncthreads();
    post_synced(t);
  }

  // post() for a caller that has already synchronized the threads that stored the tile (a named
  // barrier, in kernels whose sync warp has left): thread 0 posts, no barrier here.
  __device__ __forceinline__ void post_synced(Tile t) {
#if defined(CUSYNC_TIMELINE)
    if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0 && args.timeline != nullptr && args.timeline_capacity > 0) {
      unsigned smid;
      asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
      auto* rec = args.timeline + 4 * (tl_ticket % static_cast<unsigned long long>(args.timeline_capacity));
      rec[0] = static_cast<unsigned long long>(tl_start);
      rec[1] = static_cast<unsigned long long>(tl_wait);
      rec[2] = static_cast<unsigned long long>(global_timer_ns());
      rec[3] = smid | (static_cast<unsigned long long>(self.x) << 16) | (static_cast<unsigned long long>(self.y) << 40);
    }
#endif
    if constexpr (OutPolicy::num_sems != 0) {
      if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) red_release_add(args.out_sems + OutPolicy::sem(t), 1u);
    }
  }
};

// A stage that never synchronizes: the StreamSync baseline runs the same kernels with it.
template <class Order>
using PlainStage = CuStage<Order, NoSync, NoSync, NoSync>;

}  // namespace cusync
