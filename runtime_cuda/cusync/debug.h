// What the first wait that timed out saw: one record for every kernel family (the SM80 CuStage,
// the sm90 sync layer). A zeroed record in device memory; `failed` becomes 1 after the rest is
// written, and the host turns it into an error naming the stage, the tile and the semaphore.
#pragma once
#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int32_t failed;     // 0: no failure; 1: a wait timed out (written last)
  int32_t stage;      // the waiting stage (StageArgs::stage_id; the sm90 plan's GeMM index)
  int32_t producer;   // which input of the stage (0 or 1)
  int32_t tile_x, tile_y, tile_z;           // the producer tile waited on
  int32_t sem;        // its semaphore in the producer's array
  uint32_t seen;      // the semaphore's value when the wait gave up
  uint32_t expected;  // the value the wait needed
  int32_t consumer_x, consumer_y, consumer_z;  // the waiting block's own tile
  int32_t block;      // the waiting block (blockIdx.x)
  int32_t claimed;    // the first failing wait's claim
} CusyncDebugRecord;

#ifdef __cplusplus
}  // extern "C"

#if defined(__CUDACC__)
namespace cusync {

using DebugRecord = CusyncDebugRecord;

// Fills the record; the first failing wait of any block wins.
__device__ __forceinline__ void record_timeout(DebugRecord* d, int stage, int input, int px, int py, int pz, int sem,
                                               uint32_t seen, uint32_t expected, int cx, int cy, int cz) {
  if (d != nullptr && atomicCAS(&d->claimed, 0, 1) == 0) {
    d->stage = stage;
    d->producer = input;
    d->tile_x = px;
    d->tile_y = py;
    d->tile_z = pz;
    d->sem = sem;
    d->seen = seen;
    d->expected = expected;
    d->consumer_x = cx;
    d->consumer_y = cy;
    d->consumer_z = cz;
    d->block = static_cast<int32_t>(blockIdx.x);
    __threadfence();
    atomicExch(&d->failed, 1);
  }
}

// Whether some wait has given up (every later wait then gives up at once, so the launch ends).
__device__ __forceinline__ bool gave_up(const DebugRecord* d) {
  return d != nullptr && *reinterpret_cast<const volatile int32_t*>(&d->failed) != 0;
}

}  // namespace cusync
#endif  // __CUDACC__
#endif  // __cplusplus
