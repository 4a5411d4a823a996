// The sync warp: one warp of a block that only reads semaphores. For each of the block's work items
// that waits, it polls the producer tiles the item reads (a dependency map, deps.h) 32 at a time --
// one ld.acquire.gpu per lane, the loads in flight together -- and sends the load warp the count of
// k-tiles whose tiles it has seen posted (channel.h). The load warp never touches a semaphore; the
// sync warp never waits for the load warp (except, at its very end, for a free slot).
#pragma once
#include "../debug.h"
#include "../sync.h"
#include "channel.h"

namespace cusync {
namespace sm90 {

// Where a wait happens, for the debug record and the timeout.
struct WaitSite {
  int stage;         // the waiting stage
  Tile consumer;     // its tile
  DebugRecord* debug;
  long long timeout_ns;  // > 0: give up after this long, fill *debug, and let the launch finish
};

// Polls one work item: `d` its dependency-map view (count/tile/need), `policy` the producer's
// (sem/value of a tile), `sems` the producer's semaphores, `epoch` this launch's, `kc` the item's
// k-tiles, `base` the k-tiles of this block's earlier waiting items (counts are cumulative).
// Called by the whole warp; lane 0 sends.
template <class Item, class Policy, class Sender, class Storage>
__device__ __forceinline__ void poll_item(const Item& d, const Policy& policy, const uint32_t* sems, uint32_t epoch,
                                          int kc, uint32_t base, Sender& tx, Storage& ch, const WaitSite& site) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int n = d.count();
  int i0 = 0;
  long long t0 = 0;
  while (i0 < n) {
    const int i = i0 + lane;
    bool ok = true;
    Tile t{0, 0, 0};
    int s = 0;
    uint32_t seen = 0, target = 0;
    if (i < n && d.need(i) >= 0) {
      t = d.tile(i);
      s = policy.sem(t);
      target = static_cast<uint32_t>(policy.value(t)) * epoch;
      seen = ld_acquire(sems + s);
      ok = reached(seen, target);
    }
    const unsigned missing = __ballot_sync(0xffffffffu, !ok);
    const int first = missing == 0u ? 32 : __ffs(missing) - 1;
    if (first > 0) {
      i0 += first;
      t0 = 0;
      // the k-tiles before the first missing tile's first reader are ready (its need is >= 0)
      const bool known = first < 32 || i0 >= n;
      const int ready = i0 >= n ? kc : first < 32 ? __shfl_sync(0xffffffffu, d.need(i < n ? i : 0), first) : 0;
      __syncwarp();  // every lane's acquire before lane 0's release (the channel's arrive)
      if (lane == 0 && known) tx.offer(ch, base + static_cast<uint32_t>(ready));
      continue;
    }
    if (lane == 0) tx.try_send(ch);  // a count the full ring held back
    if (site.timeout_ns > 0) {
      const long long now = global_timer_ns();
      if (t0 == 0) t0 = now;
      // lane 0's clock decides for the warp (the loop stays converged for the ballot)
      const bool give_up = __shfl_sync(0xffffffffu, gave_up(site.debug) || now - t0 > site.timeout_ns, 0);
      if (give_up) {
        const int fx = __shfl_sync(0xffffffffu, t.x, first), fy = __shfl_sync(0xffffffffu, t.y, first),
                  fz = __shfl_sync(0xffffffffu, t.z, first), fs = __shfl_sync(0xffffffffu, s, first);
        const uint32_t fseen = __shfl_sync(0xffffffffu, seen, first), ftarget = __shfl_sync(0xffffffffu, target, first);
        if (lane == 0 && !gave_up(site.debug))
          record_timeout(site.debug, site.stage, 0, fx, fy, fz, fs, fseen, ftarget, site.consumer.x, site.consumer.y,
                         site.consumer.z);
        // publish the rest: the launch finishes, with the debug record saying why it is wrong
        __syncwarp();
        if (lane == 0) tx.offer(ch, base + static_cast<uint32_t>(kc));
        return;
      }
    }
  }
  if (n == 0) {
    __syncwarp();
    if (lane == 0) tx.offer(ch, base + static_cast<uint32_t>(kc));
  }
}

}  // namespace sm90
}  // namespace cusync
