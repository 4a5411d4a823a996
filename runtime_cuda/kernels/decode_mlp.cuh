// The MLP at token generation (M <= 64 rows): both GeMMs stream their weights from HBM, so the
// kernel is built for bandwidth, not for tensor-core throughput (docs/sm90.md, "Token generation").
//
// Y = act(X W1^T), Z = Y W2^T with W [N, K] row-major. Each GeMM is computed transposed, the weight
// as the wide operand: a warp owns RW = 32 weight rows (two m16 blocks of mma.sync m16n8k16) and up
// to 64 token columns (TB blocks of 8), its weight fragments loaded straight from HBM into
// registers, 16 bytes a load, D steps ahead (no shared memory: nothing but the weight's bytes in
// flight). A step is 64 columns of K, eight loads a lane. Within a 32-column chunk, the lane's 8
// consecutive halves are the k-slots mma.sync gives it (k 2t, 2t+1, 2t+8, 2t+9 of two mmas): the
// dot product does not care about the order of k, so X's fragment takes the same permutation and
// every load is one vector. Packed weights (cusyncgen.cuda.decode.pack_weights) hold each step's
// 16 rows x 64 columns as one tile in the order the loads read it: 512 contiguous bytes a warp
// instruction.
//
// Work: a block (4 warps) walks 4 RW weight rows x 64 columns a step. The steps of a GeMM (row
// blocks x K steps, row block major) are split evenly over the grid (stream-K: each block a
// contiguous range, so every SM streams the same number of bytes). A range ends in the middle of a
// row block's K: each warp adds its partial sums (fp32, [N, 64] in L2) with vector reds and, once a
// GeMM, counts the steps it added on its 32-row group; the warp that completes a group's count reads
// the sums, applies the activation, stores 32 columns of the output, zeroes the sums and the count
// for the next launch (so nothing is reset between launches), and posts the group's producer tile.
//
// Warp-K (CusyncDecodeGemm::warp_k > 0; 16-row variants, no SwiGLU): a block owns warp_k groups of
// 16 weight rows over all of K, its 4 warps split their steps, and the warps add their partial sums
// into the block's shared memory; after a block barrier the block's warps finalize its groups. No
// fence, count or L2 round trip ends the GeMM, and each block posts its producer tiles as it ends
// (the host takes it where the rows split evenly over nearly the whole grid: decode.warp_k_plan).
//
// CuSync: in one launch of both GeMMs (`first` 0, `last` 1), a block runs its share of the first,
// then its share of the second. The second's weight loads do not depend on the first: the warp's
// first D steps are issued before it waits, and a warp that has to wait prefetches its next weight
// tiles into L2 while it spins. The second GeMM's step k reads Y columns [64 k, 64 k + 64): producer
// tile x = k of the compiled policy (the .dep's TileSync or RowSync over 64-column tiles, one row
// tile), each tile posted twice (its two 32-column groups). Launched alone with `pdl`, the second
// GeMM issues its first weight loads before griddepcontrol.wait; launched alone before it (stream
// order, PDL), the first GeMM's blocks, their share streamed, prefetch into L2 the second's first
// kNextSteps steps of the same block index (the same grid), so HBM streams them under the first's
// reduction tail and the launch boundary.
#pragma once
#include <cuda_fp16.h>
#include <stdint.h>

#include "cusync/debug.h"
#include "cusync/desc.h"
#include "cusync/sync.h"

extern "C" {
// One GeMM of the decode MLP.
typedef struct {
  const void* x;      // [M, K] fp16 row-major: the input rows (the first GeMM's X, the second's Y)
  const void* w;      // [N, K] fp16 row-major
  void* y;            // [M, N_out] fp16 row-major; N_out = N, or N / 2 for SwiGLU
  float* ws;          // [N, 64] fp32 partial sums: zero before the first launch, left zero by every launch
  uint32_t* counts;   // [N / 16] step counts of the RW-row groups: the same
  int32_t n, k;       // weight rows (a multiple of the variant's 64 or 128), K (a multiple of 32)
  int32_t act;        // 0 identity, 1 GeLU (tanh), 2 SwiGLU of [W1|V] rows interleaved by 64
  int32_t tile_cols;  // output columns of a producer tile the posts count (0: kTileCols)
  int32_t warp_k;     // > 0: warp-K, this many 16-row groups a block (grid = N / 16 / warp_k), K split
                      // over its warps and reduced in shared memory (RW = 16 variants, no SwiGLU);
                      // 0: stream-K over the grid, reduced through L2
} CusyncDecodeGemm;

typedef struct {
  CusyncDecodeGemm gemm[2];
  CusyncPolicyDesc policy;        // the first GeMM's output tiles (64 columns); num_sems 0: no wait
  uint32_t* sems;                 // the policy's semaphores (never reset; targets scale with the epoch)
  unsigned long long* ticket;     // this kernel's block counter over all launches (the epoch)
  CusyncDebugRecord* debug;       // the first wait that timed out (null: none kept)
  long long timeout_ns;           // a wait longer than this gives up (0: never)
  int32_t m;                      // rows of X (1 .. 8 TB)
  int32_t first, last;            // the GeMMs this launch runs, in order
  int32_t pdl;                    // 1: a PDL launch: griddepcontrol.wait before reading gemm[first].x
} CusyncDecodeParams;
}

#if defined(__CUDACC__)
#if defined(CUSYNC_DECODE_TRACE)
// Trace builds (diagnostics, python -m cusyncgen.commands.decode_trace): thread 0 of every block
// writes, per GeMM, {entry, first step's mmas issued (its weights and X arrived), last step's
// reds issued, the block's end, SM} (globaltimer ns) to cusync_decode_trace[gemm][block]. With
// cusync_decode_mode 1 the GeMMs only stream their weights (no X, no mma: the read alone), with 2
// they add their partial sums but never count or finalize them (what the reduction's end costs),
// with 3 they count them but never finalize (the workspace and counts are left dirty: the caller
// zeroes them); cusync_decode_next_steps >= 0 replaces kNextSteps (the next GeMM's steps
// prefetched into L2).
extern "C" {
__device__ unsigned long long cusync_decode_trace[2][1024][5];
__device__ int cusync_decode_mode;
__device__ int cusync_decode_next_steps = -1;
}
#define CUSYNC_DECODE_STAMP(gi, slot)                                   \
  do {                                                                  \
    if (threadIdx.x == 0 && blockIdx.x < 1024)                          \
      cusync_decode_trace[gi][blockIdx.x][slot] = global_timer_ns();    \
  } while (0)
#else
#define CUSYNC_DECODE_STAMP(gi, slot) \
  do {                                \
  } while (0)
#endif

namespace cusync {
namespace decode {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kTileCols = 64;   // output columns of a producer tile
constexpr int kWsStride = 64;   // floats per row of the partial sums

// A variant's shape: RW weight rows a warp (16 or 32: one or two m16 blocks), CK 32-column chunks
// a step (8 / (2 RW / 16): eight 16-byte loads a lane a step either way), TB token blocks of 8, D
// steps in flight, PACKED the weights in pack_weights' layout.
template <int TB_, int D_, int RW_, bool PACKED_ = false>
struct Shape {
  static constexpr int TB = TB_, D = D_, RW = RW_;
  static constexpr bool PACKED = PACKED_;
  static constexpr int NB = RW / 16, CK = 8 / (2 * NB), STEP_K = 32 * CK, ROWS = kWarps * RW;
  // X's fragments loaded a step ahead of their mmas (two copies in registers) where those and the
  // weights in flight take at most 160 registers; else each step's at the step.
  static constexpr bool X_AHEAD = 2 * TB * CK * 4 + D * 32 <= 160;
  static_assert(RW == 16 || RW == 32, "a warp holds one or two m16 blocks of rows");
};

// Data read once (the weights; the attention's KV cache, never written in a launch that reads it):
// past L1, which keeps X's lines for the block's other warps.
__device__ __forceinline__ uint4 ld_once(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// X may be written in this launch (the second GeMM's Y): a coherent load, after the acquire.
__device__ __forceinline__ uint4 ld_rows(const void* p) {
  uint4 v;
  asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p)
               : "memory");
  return v;
}

__device__ __forceinline__ void bulk_prefetch_l2(const void* p, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mma16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ float gelu_tanh(float v) {
  const float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
  return 0.5f * v * (1.f + tanhf(u));
}

__device__ __forceinline__ float silu(float v) { return v / (1.f + __expf(-v)); }

// The step range [begin, end) of block b out of G over `total` steps.
__device__ __forceinline__ void block_range(int total, int b, int G, int& begin, int& end) {
  begin = static_cast<int>(static_cast<long long>(total) * b / G);
  end = static_cast<int>(static_cast<long long>(total) * (b + 1) / G);
}

// A warp's view of the second GeMM's wait: producer tiles [lo, hi) of this launch seen posted.
struct TileWait {
  const CusyncDecodeParams* p;
  uint32_t epoch;
  uint32_t posts;       // posts a tile gets (its 64 columns / a warp's rows)
  int lo = 0, hi = 0;
  bool off = false;     // no policy, or a wait gave up (the launch ends without waiting; the host raises)

  // Wait until producer tiles [t0, t1] are posted; meanwhile `spin_prefetch()` weight lines. The
  // first read looks at 32 tiles (the known-ready window then covers the steps after); while a
  // needed tile is missing, the warp reads only [t0, t1], backing off from 64 ns to 1 us, so that
  // 1500 waiting warps do not flood L2 with polls while the finalizing warps work.
  template <class Prefetch>
  __device__ void need(int t0, int t1, int tiles, int rb, Prefetch&& spin_prefetch) {
    if (off || (t0 >= lo && t1 < hi)) return;
    const int lane = threadIdx.x % 32;
    const long long start = p->timeout_ns > 0 ? global_timer_ns() : 0;
    int span = 32;          // tiles read this round
    unsigned sleep_ns = 64;
    for (;;) {
      const int t = t0 + lane;
      bool ok = true;
      uint32_t seen = 0, target = 0;
      int sem = 0;
      if (lane < span && t < tiles) {
        const PolicyDesc pol{p->policy};
        sem = pol.sem(Tile{t, 0, 0});
        target = pol.value(Tile{t, 0, 0}) * posts * epoch;
        seen = ld_relaxed(p->sems + sem);
        ok = reached(seen, target);
      }
      fence_acquire();
      const unsigned missing = __ballot_sync(0xffffffffu, !ok);
      const int ready = missing == 0u ? span : __ffs(missing) - 1;
      if (t0 + ready > t1) {
        lo = t0;
        hi = t0 + ready;
        __syncwarp();
        return;
      }
      span = t1 - t0 + 1;
      spin_prefetch();
      if (gave_up(p->debug)) {
        off = true;
        return;
      }
      if (p->timeout_ns > 0 && global_timer_ns() - start > p->timeout_ns) {
        const int bad = t0 + ready;
        const unsigned src = static_cast<unsigned>(bad - t0);
        seen = __shfl_sync(0xffffffffu, seen, src);
        target = __shfl_sync(0xffffffffu, target, src);
        sem = __shfl_sync(0xffffffffu, sem, src);
        if (lane == 0) record_timeout(p->debug, 1, 0, bad, 0, 0, sem, seen, target, rb, 0, 0);
        off = true;
        __syncwarp();
        return;
      }
      __nanosleep(sleep_ns);
      sleep_ns = sleep_ns < 1024u ? 2u * sleep_ns : 1024u;
    }
  }
};

// A warp's group of RW rows: the output columns it completes and the count that says when.
struct Group {
  int index, target, out_col, row_a, row_b;  // row_b: SwiGLU's V rows (-1: none)
};

template <int RW>
__device__ __forceinline__ Group group_of(const CusyncDecodeGemm& g, int row0, int ksteps) {
  if (g.act == 2) {  // [W1|V] interleaved by 64: W1's rows, then V's rows for the same 64 columns
    const int u = row0 / 128, h = row0 % 64;
    const int col = u * 64 + h;
    return Group{col / RW, 2 * ksteps, col, u * 128 + h, u * 128 + 64 + h};
  }
  return Group{row0 / RW, ksteps, row0, row0, -1};
}

// A lane's output column at tokens q .. q + 3 (< m) from its sums (SwiGLU: and its V sums).
__device__ __forceinline__ void store_out(const CusyncDecodeGemm& g, const Group& grp, int q, int m,
                                          const float (&av)[4], const float (&bv)[4]) {
  const int n_out = g.act == 2 ? g.n / 2 : g.n, lane = threadIdx.x % 32;
  __half* y = static_cast<__half*>(g.y);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if (q + j >= m) break;
    const float v = g.act == 2 ? silu(av[j]) * bv[j] : g.act == 1 ? gelu_tanh(av[j]) : av[j];
    y[static_cast<size_t>(q + j) * n_out + grp.out_col + lane] = __float2half_rn(v);
  }
}

// The group's output stored by the warp: post its producer tile (after a fence, lane 0).
__device__ __forceinline__ void post_group(const CusyncDecodeParams& p, const CusyncDecodeGemm& g, const Group& grp) {
  __threadfence();
  __syncwarp();
  if (threadIdx.x % 32 == 0) {
    const PolicyDesc pol{p.policy};
    red_release_add(p.sems + pol.sem(Tile{grp.out_col / (g.tile_cols > 0 ? g.tile_cols : kTileCols), 0, 0}), 1u);
  }
}

// The warp that completed a group's count: sums -> activation -> RW output columns; zero the sums
// and the count; post the producer tile (64 / RW posts a tile). A lane's row is read 4 kRound
// tokens at a time, every load of a round issued before its stores (the stores may alias the sums
// for all the compiler knows, so a load after them waits a round trip per 4 tokens): each round a
// round trip of L2 latency at the GeMM's end (settle picks kRound).
template <class S, int kRound>
__device__ __forceinline__ void finalize(const CusyncDecodeParams& p, const CusyncDecodeGemm& g, const Group& grp,
                                         bool post, int m) {
  const int lane = threadIdx.x % 32;
  if (lane < S::RW) {
    float* wa = g.ws + static_cast<size_t>(grp.row_a + lane) * kWsStride;
    float* wb = grp.row_b >= 0 ? g.ws + static_cast<size_t>(grp.row_b + lane) * kWsStride : nullptr;
    for (int q0 = 0; q0 < m; q0 += 4 * kRound) {
      float4 a[kRound], b[kRound];
#pragma unroll
      for (int i = 0; i < kRound; ++i) {
        const int q = q0 + 4 * i;
        a[i] = b[i] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (q < m) {
          a[i] = __ldcg(reinterpret_cast<const float4*>(wa + q));
          if (wb) b[i] = __ldcg(reinterpret_cast<const float4*>(wb + q));
        }
      }
#pragma unroll
      for (int i = 0; i < kRound; ++i) {
        const int q = q0 + 4 * i;
        if (q >= m) break;
        __stcg(reinterpret_cast<float4*>(wa + q), make_float4(0.f, 0.f, 0.f, 0.f));
        if (wb) __stcg(reinterpret_cast<float4*>(wb + q), make_float4(0.f, 0.f, 0.f, 0.f));
        const float av[4] = {a[i].x, a[i].y, a[i].z, a[i].w}, bv[4] = {b[i].x, b[i].y, b[i].z, b[i].w};
        store_out(g, grp, q, m, av, bv);
      }
    }
  }
  __syncwarp();
  if (lane == 0) g.counts[grp.index] = 0u;
  if (post) post_group(p, g, grp);
}

// Warp-K (CusyncDecodeGemm::warp_k): the block's partial sums, [group][16 rows][red_stride] fp32
// in its dynamic shared memory, zero between GeMMs.
template <class S>
__device__ __forceinline__ int red_stride() { return 8 * S::TB + 1; }

__device__ __forceinline__ float* red_buffer() {
  extern __shared__ float cusync_decode_red[];
  return cusync_decode_red;
}

// Every warp's pieces added (the block's barrier): warp w finalizes groups w, w + 4, ... of the
// block from shared memory and leaves them zero.
template <class S>
__device__ __forceinline__ void finalize_block(const CusyncDecodeParams& p, const CusyncDecodeGemm& g, int ksteps,
                                               bool post) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, st = red_stride<S>(), m = p.m;
  for (int lg = warp; lg < g.warp_k; lg += kWarps) {
    const Group grp = group_of<16>(g, (blockIdx.x * g.warp_k + lg) * 16, ksteps);
    if (lane < 16) {
      float* r = red_buffer() + (lg * 16 + lane) * st;
      for (int q = 0; q < m; q += 4) {
        float av[4], bv[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          av[j] = q + j < m ? r[q + j] : 0.f;
          if (q + j < m) r[q + j] = 0.f;
        }
        store_out(g, grp, q, m, av, bv);
      }
    }
    __syncwarp();
    if (post) post_group(p, g, grp);
  }
}

// A warp's pieces whose partial sums are added but not yet counted: counting needs a fence after
// the adds, and a fence waits for the warp's loads in flight, so the warp counts its pieces once
// a GeMM (after the next GeMM's first loads are issued), not at every piece. Lane i holds piece i.
struct Pending {
  static constexpr int kMax = 32;
  int n = 0;
  int gemm = 0;  // p.gemm[gemm]
  bool post = false;
  int ksteps = 0;
  int row0 = 0, steps = 0;  // this lane's piece (lane < n)
  int block_gemm = -1;  // warp-K: the GeMM whose block reduction is left to finalize
  int block_ksteps = 0;
  bool block_post = false;
};

// Warp-K: the block's barrier, then its groups finalized from shared memory. Stream-K: count the
// pending pieces, a lane each (their atomics in flight together); the warp that completes a group's
// count finalizes the group.
// At a launch's end (kEnd: nothing else is live) the finalize reads all of a lane's 8 TB tokens in
// one round; within the GeMMs (after the next GeMM's first loads), 8 at a time (32 for TB = 4): more
// spills.
template <class S, bool kEnd = false>
__device__ __forceinline__ void settle(const CusyncDecodeParams& p, Pending& pend) {
  constexpr int kRound = kEnd ? 2 * S::TB : S::TB == 4 ? 8 : 2;  // float4s of tokens a finalize round
  if (pend.block_gemm >= 0) {  // warp-K: every thread of the block settles here
    __syncthreads();
    finalize_block<S>(p, p.gemm[pend.block_gemm], pend.block_ksteps, pend.block_post);
    __syncthreads();
    pend.block_gemm = -1;
  }
  if (pend.n == 0) return;
#if defined(CUSYNC_DECODE_TRACE)
  if (cusync_decode_mode == 2) {  // trace builds: the partial sums added, never counted or finalized
    pend.n = 0;
    return;
  }
#endif
  const int lane = threadIdx.x % 32;
  __threadfence();
  __syncwarp();
  const CusyncDecodeGemm& g = p.gemm[pend.gemm];
  bool completes = false;
  if (lane < pend.n) {
    const Group grp = group_of<S::RW>(g, pend.row0, pend.ksteps);
    const uint32_t old = atomicAdd(g.counts + grp.index, static_cast<uint32_t>(pend.steps));
    completes = static_cast<int>(old) + pend.steps == grp.target;
  }
  unsigned done = __ballot_sync(0xffffffffu, completes);
#if defined(CUSYNC_DECODE_TRACE)
  if (cusync_decode_mode == 3) done = 0u;  // trace builds: counted, never finalized
#endif
  if (done != 0u) __threadfence();
  while (done != 0u) {
    const int i = __ffs(done) - 1;
    done &= done - 1u;
    const int row0 = __shfl_sync(0xffffffffu, pend.row0, i);
    finalize<S, kRound>(p, g, group_of<S::RW>(g, row0, pend.ksteps), pend.post, p.m);
  }
  pend.n = 0;
}

// A warp's partial sums of its rows (from row0) over `piece` steps: added to the workspace (relaxed
// vector reds), the piece left pending; warp-K, to the block's shared memory.
template <class S>
__device__ __forceinline__ void flush(const CusyncDecodeParams& p, int gi, float (&acc)[S::NB][S::TB][4], int row0,
                                      int ksteps, int piece, bool post, Pending& pend) {
  const CusyncDecodeGemm& g = p.gemm[gi];
  constexpr int TB = S::TB, NB = S::NB;
  const int lane = threadIdx.x % 32, gid = lane >> 2, t4 = lane & 3, m = p.m;
  if constexpr (S::RW == 16) {  // warp-K (the 16-row variants): into the block's shared memory
    float* buf = red_buffer() + (row0 / 16 - blockIdx.x * g.warp_k) * 16 * red_stride<S>();
#pragma unroll
    for (int t = 0; t < TB; ++t) {
      const int tok = t * 8 + 2 * t4;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float* dst = buf + (h * 8 + gid) * red_stride<S>() + tok;
        if (tok < m) atomicAdd(dst, acc[0][t][2 * h]);
        if (tok + 1 < m) atomicAdd(dst + 1, acc[0][t][2 * h + 1]);
        acc[0][t][2 * h] = acc[0][t][2 * h + 1] = 0.f;
      }
    }
    return;
  } else {
#pragma unroll
    for (int b = 0; b < NB; ++b)
#pragma unroll
      for (int t = 0; t < TB; ++t) {
        const int tok = t * 8 + 2 * t4;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float* dst = g.ws + static_cast<size_t>(row0 + b * 16 + h * 8 + gid) * kWsStride + tok;
          if (tok + 1 < m)
            atomicAdd(reinterpret_cast<float2*>(dst), make_float2(acc[b][t][2 * h], acc[b][t][2 * h + 1]));
          else if (tok < m)
            atomicAdd(dst, acc[b][t][2 * h]);
          acc[b][t][2 * h] = acc[b][t][2 * h + 1] = 0.f;
        }
      }
  }
  if (pend.n == Pending::kMax) settle<S>(p, pend);
  pend.gemm = gi;
  pend.post = post;
  pend.ksteps = ksteps;
  if (lane == pend.n) {
    pend.row0 = row0;
    pend.steps = piece;
  }
  ++pend.n;
}

// Packed weights (pack_weights): the 16 rows x STEP_K columns of a step are one contiguous tile of
// kTileBytes, ordered as the loads read it, zero-padded past K; a 16-row group's steps follow each
// other. The tile of step ks of the 16-row group from row0, + b groups.
template <class S>
struct PackedTile {
  static constexpr int kTileBytes = 16 * S::STEP_K * 2;
  __device__ __forceinline__ static const char* of(const CusyncDecodeGemm& g, int ksteps, int row0, int b, int ks) {
    return static_cast<const char*>(g.w) + (static_cast<size_t>(row0 / 16 + b) * ksteps + ks) * kTileBytes;
  }
};

// Step ks of weight g's RW rows from row0 (this warp's) into L2 (a bulk prefetch): packed, its NB
// 16-row tiles (lanes < NB); row-major, its RW rows' bytes of the step (lanes < RW).
template <class S>
__device__ __forceinline__ void prefetch_step_l2(const CusyncDecodeGemm& g, int ksteps, int row0, int ks) {
  const int lane = threadIdx.x % 32;
  const char* w = static_cast<const char*>(g.w);
  if constexpr (S::PACKED) {
    if (lane < S::NB) bulk_prefetch_l2(PackedTile<S>::of(g, ksteps, row0, lane, ks), PackedTile<S>::kTileBytes);
  } else if (lane < S::RW) {
    const int c0 = ks * S::STEP_K, cols = g.k - c0 < S::STEP_K ? g.k - c0 : S::STEP_K;
    bulk_prefetch_l2(w + static_cast<size_t>(row0 + lane) * g.k * 2 + c0 * 2, cols * 2);
  }
}

// The steps [begin, end) of this warp, as (row block, K step) pairs from `begin` (rows_of: the
// warp's first row of a row block): stream-K, the block's share of the grid's row blocks of ROWS
// rows (every warp the same steps, RW rows each); warp-K, the warp's share of its block's warp_k
// groups of 16 rows (the block's warps split them, row group major).
template <class S>
struct Share {
  static constexpr bool warp_k = S::RW == 16;  // the 16-row variants run warp-K only
  int begin, end, rb0;
  __device__ __forceinline__ Share(const CusyncDecodeGemm& g, int ksteps, int block, int grid) {
    if (warp_k) {
      block_range(g.warp_k * ksteps, threadIdx.x / 32, kWarps, begin, end);
      rb0 = block * g.warp_k;
    } else {
      block_range((g.n / S::ROWS) * ksteps, block, grid, begin, end);
      rb0 = 0;
    }
  }
  __device__ __forceinline__ int rows_of(int rb) const {
    return warp_k ? rb * 16 : rb * S::ROWS + (threadIdx.x / 32) * S::RW;
  }
};

// One GeMM's share of this block, its weights streamed into registers; where it `waits`, `tw` says
// when the producer tiles of its X columns are posted (TileWait, or a stage's own wait with the same
// need(t0, t1, tiles, rb, prefetch) over 64-column tiles of X).
template <class S, class Wait>
__device__ __forceinline__ void run_gemm(const CusyncDecodeParams& p, int gi, bool waits, bool post, bool grid_wait,
                                         Wait& tw, Pending& pend) {
  const CusyncDecodeGemm& g = p.gemm[gi];
  constexpr int TB = S::TB, D = S::D, NB = S::NB, CK = S::CK;
  const int lane = threadIdx.x % 32, gid = lane >> 2, t4 = lane & 3;
  const int ksteps = (g.k + S::STEP_K - 1) / S::STEP_K, m = p.m;
  const Share<S> share(g, ksteps, blockIdx.x, gridDim.x);
  const int begin = share.begin, end = share.end;
  auto mark_block = [&]() {  // warp-K: the block's reduction, finalized by the next settle
    if (share.warp_k) {
      pend.block_gemm = gi;
      pend.block_ksteps = ksteps;
      pend.block_post = post;
    }
  };
  if (begin >= end) {
    settle<S>(p, pend);
    mark_block();
    if (grid_wait) pdl_wait_producer_grid();
    return;
  }
  CUSYNC_DECODE_STAMP(gi, 0);
#if defined(CUSYNC_DECODE_TRACE)
  if (threadIdx.x == 0 && blockIdx.x < 1024) {
    unsigned smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    cusync_decode_trace[gi][blockIdx.x][4] = smid;
  }
  const bool read_only = cusync_decode_mode == 1;
#else
  constexpr bool read_only = false;
#endif
  const char* w = static_cast<const char*>(g.w);
  const char* x = static_cast<const char*>(g.x);
  const size_t ldw = static_cast<size_t>(g.k) * 2, ldw8 = 8 * ldw;
  const bool ragged = ksteps * S::STEP_K != g.k;  // the last step of a row holds chunks past K
  // A cursor over the block's steps: row block and K step, advanced without a division.
  struct Cursor {
    int rb, ks;
  };
  auto cursor = [&](int s) { return Cursor{share.rb0 + s / ksteps, s % ksteps}; };
  auto advance = [&](Cursor& c) {
    if (++c.ks == ksteps) {
      c.ks = 0;
      ++c.rb;
    }
  };
  // load i of a step: rows +8 (i / CK) (block i / (2 CK), half (i / CK) % 2), chunk i % CK
  auto load = [&](uint4 (&buf)[8], const Cursor& c) {
    if constexpr (S::PACKED) {
#pragma unroll
      for (int i = 0; i < 8; ++i)
        buf[i] = ld_once(PackedTile<S>::of(g, ksteps, share.rows_of(c.rb), i / (2 * CK), c.ks) +
                         ((i % (2 * CK)) * 32 + lane) * 16);
    } else {
      const char* base = w + static_cast<size_t>(share.rows_of(c.rb) + gid) * ldw +
                         (c.ks * S::STEP_K + t4 * 8) * 2;
      const int c0 = c.ks * S::STEP_K;
#pragma unroll
      for (int i = 0; i < 8; ++i)
        buf[i] = (!ragged || c0 + (i % CK) * 32 < g.k) ? ld_once(base + (i / CK) * ldw8 + (i % CK) * 64)
                                                        : make_uint4(0u, 0u, 0u, 0u);
    }
  };
  auto prefetch_step = [&](const Cursor& c) { prefetch_step_l2<S>(g, ksteps, share.rows_of(c.rb), c.ks); };
  uint4 wbuf[D][8];
  Cursor next = cursor(begin);  // the step the next load reads
#pragma unroll
  for (int d = 0; d < D; ++d)
    if (begin + d < end) {
      load(wbuf[d], next);
      advance(next);
    }
  settle<S>(p, pend);  // the last GeMM's pieces, while this GeMM's first loads are in flight
  mark_block();
  if (grid_wait) pdl_wait_producer_grid();

  const int tiles = (g.k + kTileCols - 1) / kTileCols;
  int prefetched = begin + D;      // the next step a waiting warp prefetches into L2
  Cursor pf = next;
  float acc[NB][TB][4];
#pragma unroll
  for (int b = 0; b < NB; ++b)
#pragma unroll
    for (int t = 0; t < TB; ++t)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[b][t][j] = 0.f;
  int piece = 0;  // steps accumulated since the last flush
  Cursor cur_c = cursor(begin);  // the step consumed
  // The wait for a step's producer tiles, and its X fragments, one step ahead of its mmas where
  // registers allow (S::X_AHEAD): the X loads' round trip overlaps the step before.
  auto wait_step = [&](int s, const Cursor& c) {
    if (!waits || tw.off) return;
    const int t0 = c.ks * S::STEP_K / kTileCols;
    int t1 = ((c.ks + 1) * S::STEP_K - 1) / kTileCols;
    t1 = t1 < tiles ? t1 : tiles - 1;
    tw.need(t0, t1, tiles, c.rb, [&]() {
      // one more step's lines a spin, at most 16 steps ahead of the loads in flight
      if (prefetched <= s + D) {  // the loads overtook the prefetches: go on after the last load
        prefetched = s + D + 1;
        pf = next;
      }
      if (prefetched < end && prefetched < s + D + 16) {
        prefetch_step(pf);
        advance(pf);
        ++prefetched;
      }
    });
  };
  uint4 xv[TB][CK];  // X_AHEAD: the next step's fragments
  auto load_x = [&](const Cursor& c, uint4 (&xv)[TB][CK]) {
#pragma unroll
    for (int t = 0; t < TB; ++t) {
      const int tok = t * 8 + gid;
#pragma unroll
      for (int k = 0; k < CK; ++k) {
        const int col = c.ks * S::STEP_K + k * 32 + t4 * 8;
        xv[t][k] = (tok < m && (!ragged || col < g.k)) ? ld_rows(x + (static_cast<size_t>(tok) * g.k + col) * 2)
                                                      : make_uint4(0u, 0u, 0u, 0u);
      }
    }
  };
  if constexpr (S::X_AHEAD) {
    wait_step(begin, cur_c);
    load_x(cur_c, xv);
  }

  for (int s0 = begin; s0 < end; s0 += D) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      const int s = s0 + d;
      if (s >= end) break;
      const int rb = cur_c.rb, ks = cur_c.ks;
      uint4 xs[TB][CK];  // this step's X fragments
      if constexpr (S::X_AHEAD) {
        advance(cur_c);
#pragma unroll
        for (int t = 0; t < TB; ++t)
#pragma unroll
          for (int c = 0; c < CK; ++c) xs[t][c] = xv[t][c];
        if (s + 1 < end) {
          wait_step(s + 1, cur_c);
          load_x(cur_c, xv);
        }
      } else {
        wait_step(s, cur_c);
        load_x(cur_c, xs);
        advance(cur_c);
      }
      if (read_only) {  // trace builds: the weights' bytes consumed without X or mma
        uint32_t h = 0;
#pragma unroll
        for (int i = 0; i < 8; ++i) h ^= wbuf[d][i].x ^ wbuf[d][i].y ^ wbuf[d][i].z ^ wbuf[d][i].w;
        acc[0][0][0] += __uint_as_float(h & 0x3c00u);
      } else {
#pragma unroll
        for (int t = 0; t < TB; ++t)
#pragma unroll
          for (int c = 0; c < CK; ++c)
#pragma unroll
            for (int b = 0; b < NB; ++b) {
              const uint4 r0 = wbuf[d][b * 2 * CK + c], r8 = wbuf[d][b * 2 * CK + CK + c];
              mma16816(acc[b][t], r0.x, r8.x, r0.y, r8.y, xs[t][c].x, xs[t][c].y);
              mma16816(acc[b][t], r0.z, r8.z, r0.w, r8.w, xs[t][c].z, xs[t][c].w);
            }
      }
      if (s == begin) CUSYNC_DECODE_STAMP(gi, 1);
      // the step's registers are read: refill them with step s + D (D - 1 steps stay in flight
      // meanwhile; a copy of the step would cost another 32 registers)
      if (s + D < end) {
        load(wbuf[d], next);
        advance(next);
      }
      ++piece;
      if (ks == ksteps - 1 || s == end - 1) {
        flush<S>(p, gi, acc, share.rows_of(rb), ksteps, piece, post, pend);
        piece = 0;
      }
    }
  }
  CUSYNC_DECODE_STAMP(gi, 2);
}


// The next GeMM's first steps of this block's share (the next launch has the same grid, so the
// same block index reads them), prefetched into L2 (kNextSteps of them; a trace build may set it).
constexpr int kNextSteps = 2;

template <class S>
__device__ __forceinline__ void prefetch_share(const CusyncDecodeGemm& g, int steps) {
  const int ksteps = (g.k + S::STEP_K - 1) / S::STEP_K;
  const Share<S> share(g, ksteps, blockIdx.x, gridDim.x);
  for (int s = share.begin; s < share.end && s < share.begin + steps; ++s)
    prefetch_step_l2<S>(g, ksteps, share.rows_of(share.rb0 + s / ksteps), s % ksteps);
}

template <class S>
__device__ __forceinline__ void mlp(const CusyncDecodeParams& p) {
  __shared__ uint32_t epoch_s;
  const bool sync = p.sems != nullptr && p.policy.num_sems > 0 && p.first == 0 && p.last == 1;
  if (threadIdx.x == 0) epoch_s = sync ? launch_epoch(p.ticket, gridDim.x) : 0u;
  if constexpr (Share<S>::warp_k) {  // warp-K's partial sums start at zero
    int groups = 0;
    for (int i = p.first; i <= p.last; ++i) groups = p.gemm[i].warp_k > groups ? p.gemm[i].warp_k : groups;
    for (int i = threadIdx.x; i < groups * 16 * red_stride<S>(); i += kThreads) red_buffer()[i] = 0.f;
  }
  __syncthreads();
  const uint32_t epoch = epoch_s;
  pdl_launch_dependents();  // a PDL-launched next GeMM may take the SMs this launch leaves
  Pending pending;
  TileWait tw{&p, epoch, static_cast<uint32_t>(kTileCols / S::RW)};
  for (int i = p.first; i <= p.last; ++i)
    run_gemm<S>(p, i, sync && i == 1, sync && i == 0, p.pdl != 0 && i == p.first, tw, pending);
  if (p.last == 0 && p.gemm[1].w != nullptr) {
    // the first GeMM launched alone (stream order, PDL): its last loads are issued; the second
    // GeMM's first steps stream into L2 under this launch's reduction, finalize and boundary
#if defined(CUSYNC_DECODE_TRACE)
    prefetch_share<S>(p.gemm[1], cusync_decode_next_steps >= 0 ? cusync_decode_next_steps : kNextSteps);
#else
    prefetch_share<S>(p.gemm[1], kNextSteps);
#endif
  }
  settle<S, true>(p, pending);
  CUSYNC_DECODE_STAMP(p.last, 3);
}

}  // namespace decode
}  // namespace cusync

// One kernel per shape and blocks an SM: cusync_decode_mlp_<TB>_<D>_<RW>_<BLOCKS>_<PACKED>.
#define CUSYNC_DEFINE_DECODE_MLP(TB, D, RW, BLOCKS, PACKED)                                            \
  extern "C" __global__ void __launch_bounds__(cusync::decode::kThreads, BLOCKS)                       \
      cusync_decode_mlp_##TB##_##D##_##RW##_##BLOCKS##_##PACKED(const CusyncDecodeParams p) {          \
    cusync::decode::mlp<cusync::decode::Shape<TB, D, RW, PACKED>>(p);                                  \
  }
#endif  // __CUDACC__
