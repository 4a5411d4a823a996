// The attention block at token generation synchronized per tile: QKV GeMM -> attention -> output
// GeMM by the policies compiled from examples/attention_*.dep (docs/sm90.md, "Attention at token
// generation"), in one launch ("<Policy>+Chain", attention_chain below) or as three PDL-chained
// launches waiting on the same semaphores ("<Policy>+PDL", the stage kernels at the end).
//
// Every block is resident (the grid is the decode GeMM's: SMs x blocks an SM), and runs three
// shares in order, waiting only in the later two:
//   1. its stream-K share of the QKV GeMM (decode_mlp.cuh's run_gemm); the warp that completes a
//      32-column group posts g1's tile of D columns (`tile_cols` = D: one tile a head's Q, K or V)
//      on the depQK policy (TileSync: a semaphore a tile; StridedSync: one for the Q, K and V tiles
//      of a head; RowSync: one). Its pieces are settled (counted, finalized, posted) before it
//      waits on anything, so every post of the QKV GeMM happens whatever the other blocks wait on.
//   2. attention items blockIdx.x, + gridDim.x, ... ((b NH + h) splits + split): a wait for head
//      h's Q, K and V tiles, then decode_attention.cuh's item; the block that writes a head's O posts gT's
//      tile (0, 0, b NH + h) on the depT2 policy (TileSync: a semaphore a tile; the .dep's
//      GroupSync over z: one).
//   3. its share of the output GeMM: its first weight steps issued before it waits; a k-step of
//      64 columns of O waits until every sequence's O of that head is posted (HeadWait), and a
//      warp that waits prefetches its next weight tiles into L2 (so the weight streams while the
//      attention runs).
// Deadlock-free: a block waits only on shares that come before in this order, and every block is
// resident; a wait past the timeout gives up, and the debug record names the tile and semaphore.
#pragma once
#include "kernels/decode_attention.cuh"
#include "kernels/decode_mlp.cuh"

extern "C" {
typedef struct {
  CusyncDecodeParams gemms;   // gemm[0] the QKV GeMM (tile_cols = D), gemm[1] the output GeMM; policy and
                              // sems: depQK's over g1's tiles; ticket, debug, timeout_ns, m (= batch)
  CusyncDecodeAttnParams attn;
  CusyncPolicyDesc o_policy;  // depT2's over the attention's tiles (0, 0, b NH + h)
  uint32_t* o_sems;
  unsigned long long* trace;  // null, or [grid, 8] global-timer ns of each block: start, its QKV share
                              // settled, its attention items done, its output GeMM's first wait met,
                              // its output GeMM's steps done, its end; then its SM (the chain only)
  unsigned long long* stage_tickets;  // [3] the stage kernels' launch counters ("+PDL": each stage its own
                                      // launch; the k-th launch of each sees epoch k)
} CusyncDecodeAttnChainParams;
}

#if defined(__CUDACC__)
namespace cusync {
namespace decode {

// Lanes check tiles tile_at(i), i < n, against value * posts * epoch: true when all are reached
// (warp-uniform); *bad the first tile index seen short (for the debug record).
template <class TileAt>
__device__ __forceinline__ bool tiles_posted(const PolicyDesc& pol, const uint32_t* sems, int n, TileAt&& tile_at,
                                             uint32_t posts, uint32_t epoch, int* bad) {
  const int lane = threadIdx.x % 32;
  int first = n;
  for (int i = lane; i < n; i += 32) {
    const Tile t = tile_at(i);
    if (!reached(ld_relaxed(sems + pol.sem(t)), pol.value(t) * posts * epoch) && i < first) first = i;
  }
  fence_acquire();
#pragma unroll
  for (int off = 16; off > 0; off /= 2) first = min(first, __shfl_xor_sync(0xffffffffu, first, off));
  *bad = first;
  return first == n;
}

// Poll until tiles_posted, backing off 64 ns -> 1 us, `spin()` between polls; false where the
// launch gave up (this wait timed out: recorded as stage `stage`'s; or another did). A stage-s wait
// gives up after s timeouts: one that cannot be met makes every later stage's waits wait too, and the
// first to time out -- the one the record keeps -- is then the cause (an attention item's wait
// on the QKV GeMM), not a consequence that happened to start polling first.
template <class TileAt, class Spin>
__device__ __forceinline__ bool poll(const CusyncDecodeParams& p, const PolicyDesc& pol, const uint32_t* sems, int n,
                                     TileAt&& tile_at, uint32_t posts, uint32_t epoch, int stage, int consumer,
                                     Spin&& spin) {
  const long long start = p.timeout_ns > 0 ? global_timer_ns() : 0;
  unsigned sleep_ns = 64;
  for (;;) {
    int bad = 0;
    if (tiles_posted(pol, sems, n, tile_at, posts, epoch, &bad)) return true;
    spin();
    if (gave_up(p.debug)) return false;
    if (p.timeout_ns > 0 && global_timer_ns() - start > p.timeout_ns * (stage > 1 ? stage : 1)) {
      if (threadIdx.x % 32 == 0) {
        const Tile t = tile_at(bad);
        const int sem = pol.sem(t);
        record_timeout(p.debug, stage, 0, t.x, t.y, t.z, sem, ld_relaxed(sems + sem), pol.value(t) * posts * epoch,
                       consumer, 0, 0);
      }
      __syncwarp();
      return false;
    }
    __nanosleep(sleep_ns);
    sleep_ns = sleep_ns < 1024u ? 2u * sleep_ns : 1024u;
  }
}

// An attention item's wait (warp 0): head h's Q, K and V tiles -- g1 tiles h, NH + h, 2 NH + h of
// row tile 0 -- each posted `posts` times this launch; false where the launch gave up.
__device__ __forceinline__ bool wait_head_qkv(const CusyncDecodeParams& p, const CusyncDecodeAttnParams& a,
                                              const PolicyDesc& pol, int h, uint32_t posts, uint32_t epoch, int item) {
  return poll(p, pol, p.sems, 3, [&](int i) { return Tile{h + i * a.heads, 0, 0}; }, posts, epoch, 1, item, [] {});
}

// The post of a finished (sequence, head) `bh` of O, after the block's stores of it (every thread
// calls it: the fence and barrier order their stores before thread 0's release).
__device__ __forceinline__ void post_head(const CusyncDecodeAttnChainParams& c, int bh) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) red_release_add(c.o_sems + PolicyDesc{c.o_policy}.sem(Tile{0, 0, bh}), 1u);
}

// The output GeMM's wait (run_gemm's Wait): 64-column tiles [t0, t1] of O are head t * 64 / D's
// columns, ready when gT's tiles (0, 0, b NH + h) are posted for every sequence b. Heads become
// known-ready in order: [0, ready).
struct HeadWait {
  const CusyncDecodeAttnChainParams* c;
  uint32_t epoch;
  int ready = 0;
  bool off = false;

  template <class Prefetch>
  __device__ void need(int t0, int t1, int tiles, int rb, Prefetch&& spin_prefetch) {
    const int h1 = t1 * kTileCols / kHeadDim;
    if (off || h1 < ready) return;
    const int nh = c->attn.heads, batch = c->attn.batch, h0 = ready;
    const PolicyDesc pol{c->o_policy};
    auto tile_at = [&](int i) { return Tile{0, 0, (i % batch) * nh + h0 + i / batch}; };
    if (poll(c->gemms, pol, c->o_sems, (h1 - h0 + 1) * batch, tile_at, 1u, epoch, 2, rb, spin_prefetch)) {
      if (ready == 0 && c->trace != nullptr && threadIdx.x == 0) c->trace[blockIdx.x * 8 + 3] = global_timer_ns();
      ready = h1 + 1;
    }
    else
      off = true;
  }
};

template <class S, int U>
__device__ __forceinline__ void attention_chain(const CusyncDecodeAttnChainParams& c) {
  const CusyncDecodeParams& p = c.gemms;
  const CusyncDecodeAttnParams& a = c.attn;
  __shared__ uint32_t epoch_s;
  __shared__ int off_s;
  if (threadIdx.x == 0) epoch_s = launch_epoch(p.ticket, gridDim.x);
  __syncthreads();
  const uint32_t epoch = epoch_s;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  auto mark = [&](int i) {
    if (c.trace != nullptr && threadIdx.x == 0) c.trace[blockIdx.x * 8 + i] = global_timer_ns();
  };
  mark(0);
  if (c.trace != nullptr && threadIdx.x == 0) {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    c.trace[blockIdx.x * 8 + 6] = sm;
  }
  Pending pending;
  TileWait none{&p, epoch, 1u};
  none.off = true;
  run_gemm<S>(p, 0, false, true, false, none, pending);
  settle<S>(p, pending);   // every post of this block's QKV share, before it waits
  mark(1);

  const int items = a.batch * a.heads * a.splits;
  const PolicyDesc qkv_pol{p.policy};
  const uint32_t qkv_posts = static_cast<uint32_t>(p.gemm[0].tile_cols / S::RW);
  bool off = false;
  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    const int h = (item / a.splits) % a.heads;
    __syncthreads();   // the previous item's shared memory is read
    if (warp == 0) {
      if (!off) off = !wait_head_qkv(p, a, qkv_pol, h, qkv_posts, epoch, item);
      if (lane == 0) off_s = off;
    }
    __syncthreads();
    attention_item<U>(a, item, [&](int done_bh) { post_head(c, done_bh); });
  }
  mark(2);
  HeadWait hw{&c, epoch};
  run_gemm<S>(p, 1, true, false, false, hw, pending);
  mark(4);
  settle<S, true>(p, pending);
  mark(5);
}

// "<Policy>+PDL": the chain's three shares as three launches of one stream, the later two
// PDL-launched and waiting on the same semaphores instead of griddepcontrol.wait, so an attention
// item starts as soon as its head's Q, K and V tiles are posted (during the QKV GeMM's tail) and
// the output GeMM's blocks take the SMs the earlier stages leave. Deadlock-free: a PDL-launched
// grid starts only once every block of the grid before it has started (each triggers at its
// start), so every producer block is resident before a consumer block can take its place.
__device__ __forceinline__ uint32_t stage_epoch(const CusyncDecodeAttnChainParams& c, int stage) {
  __shared__ uint32_t epoch_s;
  if (threadIdx.x == 0) epoch_s = launch_epoch(c.stage_tickets + stage, gridDim.x);
  __syncthreads();
  return epoch_s;
}

template <class S>
__device__ __forceinline__ void qkv_stage(const CusyncDecodeAttnChainParams& c) {
  const uint32_t epoch = stage_epoch(c, 0);
  pdl_launch_dependents();
  Pending pending;
  TileWait none{&c.gemms, epoch, 1u};
  none.off = true;
  run_gemm<S>(c.gemms, 0, false, true, false, none, pending);
  settle<S, true>(c.gemms, pending);
}

template <int U>
__device__ __forceinline__ void attention_stage(const CusyncDecodeAttnChainParams& c) {
  const CusyncDecodeParams& p = c.gemms;
  const CusyncDecodeAttnParams& a = c.attn;
  const uint32_t epoch = stage_epoch(c, 1);
  pdl_launch_dependents();
  const int warp = threadIdx.x / 32, item = blockIdx.x;
  const int h = (item / a.splits) % a.heads;
  if (warp == 0)   // 32 rows a warp post
    wait_head_qkv(p, a, PolicyDesc{p.policy}, h, static_cast<uint32_t>(p.gemm[0].tile_cols / 32), epoch, item);
  __syncthreads();
  attention_item<U>(a, item, [&](int done_bh) { post_head(c, done_bh); });
}

template <class S>
__device__ __forceinline__ void out_stage(const CusyncDecodeAttnChainParams& c) {
  const uint32_t epoch = stage_epoch(c, 2);
  Pending pending;
  HeadWait hw{&c, epoch};
  run_gemm<S>(c.gemms, 1, true, false, false, hw, pending);
  settle<S, true>(c.gemms, pending);
}

}  // namespace decode
}  // namespace cusync

// Per decode GeMM shape: the chain (cusync_decode_attn_chain_<TB>_<D>_<RW>_<BLOCKS>_<PACKED>) and the
// "+PDL" stages' GeMMs (cusync_decode_attn_qkv_..., cusync_decode_attn_out_...); the attention
// stage's kernel: cusync_decode_attn_stage_<U>.
#define CUSYNC_DEFINE_DECODE_ATTN_CHAIN(TB, D, RW, BLOCKS, PACKED, U)                                  \
  extern "C" __global__ void __launch_bounds__(cusync::decode::kThreads, BLOCKS)                        \
      cusync_decode_attn_chain_##TB##_##D##_##RW##_##BLOCKS##_##PACKED(const CusyncDecodeAttnChainParams c) { \
    cusync::decode::attention_chain<cusync::decode::Shape<TB, D, RW, PACKED>, U>(c);                   \
  }                                                                                                     \
  extern "C" __global__ void __launch_bounds__(cusync::decode::kThreads, BLOCKS)                        \
      cusync_decode_attn_qkv_##TB##_##D##_##RW##_##BLOCKS##_##PACKED(const CusyncDecodeAttnChainParams c) { \
    cusync::decode::qkv_stage<cusync::decode::Shape<TB, D, RW, PACKED>>(c);                            \
  }                                                                                                     \
  extern "C" __global__ void __launch_bounds__(cusync::decode::kThreads, BLOCKS)                        \
      cusync_decode_attn_out_##TB##_##D##_##RW##_##BLOCKS##_##PACKED(const CusyncDecodeAttnChainParams c) { \
    cusync::decode::out_stage<cusync::decode::Shape<TB, D, RW, PACKED>>(c);                            \
  }
#define CUSYNC_DEFINE_DECODE_ATTN_STAGE(U)                                                             \
  extern "C" __global__ void __launch_bounds__(cusync::decode::kAttnThreads)                            \
      cusync_decode_attn_stage_##U(const CusyncDecodeAttnChainParams c) {                              \
    cusync::decode::attention_stage<U>(c);                                                              \
  }
#endif  // __CUDACC__
