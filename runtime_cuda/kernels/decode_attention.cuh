// Attention at token generation: one new query token per sequence against its KV cache, built for
// the cache's bandwidth (docs/sm90.md, "Attention at token generation").
//
// The QKV GeMM's output row of sequence b holds Q, K and V of every head ([B, 3 NH D]: Q heads,
// then K heads, then V heads, as examples/attention_*.dep lay out g1's column tiles). The caches
// are [B, NH, smax, D] (the layout torch's SDPA reads): positions < past are the earlier tokens;
// this kernel appends the new token's K and V at position `past` and attends over past + 1 keys:
// P = q . concat(cachedK, k)^T, O = softmax(P / sqrt(D)) . concat(cachedV, v) (the paper's cached
// attention). The new K and V are read from the QKV row, never from the cache, so the append races
// with no read.
//
// Split over the KV length (flash-decoding): block (b, h, split) reads `chunk` keys of one head
// (contiguous rows of the cache) in one pass: a half-warp a key, 16 bytes a lane, an online softmax
// per half-warp (running max, sum and unnormalized O), the 8 half-warps merged in shared memory.
// The keys come either by loads (the K and V rows of U keys a half-warp in flight together:
// attention_item) or by bulk copies into shared memory (stages of KPS keys' K and V boxes, STAGES
// in flight: attention_bulk). A split's partial result (its max,
// sum and unnormalized O) goes to a workspace; the block that completes a head's count combines
// the splits (in parallel over the splits), writes O [B, NH D] (the output GeMM's input) and zeroes
// the count (so nothing is reset between launches). Launched with `pdl`, the kernel reads the QKV
// row only after griddepcontrol.wait, and lets the output GeMM launch early; before it waits, it
// prefetches the first prefetch_keys cached keys of its split into L2 (prefetch_cached).
#pragma once
#include <cuda_fp16.h>
#include <stdint.h>

#include "cusync/sync.h"
#include "kernels/decode_mlp.cuh"   // ld_once

extern "C" {
typedef struct {
  const void* qkv;      // [B, 3 NH D] fp16: the QKV GeMM's output
  void* kcache;         // [B, NH, smax, D] fp16: positions < past cached, the new key written at past
  void* vcache;         // the same for V
  void* o;              // [B, NH D] fp16: the attention's output (the output GeMM's input)
  float* ws;            // fp32 [B NH splits, D]: each split's O (unnormalized); then [B NH splits, 2]: max, sum
  uint32_t* counts;     // [B NH]: splits done; zero before the first launch, left zero by every launch
  int32_t batch, heads, smax, past;
  int32_t splits, chunk;  // a head's past + 1 keys in splits ranges of chunk keys (the last shorter)
  float scale;          // log2(e) / sqrt(D): scores in base 2
  int32_t pdl;          // 1: PDL-launched: griddepcontrol.wait before reading qkv
  int32_t prefetch_keys;  // with pdl: the first prefetch_keys cached keys of a block's split (K and V rows)
                          // prefetched into L2 before the wait (0: none)
} CusyncDecodeAttnParams;
}

#if defined(__CUDACC__)
namespace cusync {
namespace decode {

constexpr int kHeadDim = 128;
constexpr int kAttnWarps = 4;
constexpr int kAttnThreads = 32 * kAttnWarps;
constexpr int kMaxSplits = 512;   // splits a head's combine weighs

__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 t = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}

// Scores of a half-warp's U keys (K rows kv, the lane's 8 columns of each; ok: the key is in the
// split) against q (pre-scaled to base 2), and their V rows vv folded into the half-warp's online
// softmax: running max m, sum l and unnormalized O (the lane's 8 columns). Called by whole warps.
template <int U>
__device__ __forceinline__ void absorb(const float (&q)[8], const uint4 (&kv)[U], const uint4 (&vv)[U],
                                       const bool (&ok)[U], float& m, float& l, float (&acc)[8]) {
  float sc[U];
  float mb = m;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    float f[8];
    unpack8(kv[u], f);
    float s = 0.f;
#pragma unroll
    for (int e = 0; e < 8; ++e) s = fmaf(q[e], f[e], s);
    s += __shfl_xor_sync(0xffffffffu, s, 8);
    s += __shfl_xor_sync(0xffffffffu, s, 4);
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    sc[u] = ok[u] ? s : -INFINITY;
    mb = fmaxf(mb, sc[u]);
  }
  if (mb == -INFINITY) return;   // none of this half-warp's keys in the batch
  const float corr = exp2f(m - mb);
  l *= corr;
#pragma unroll
  for (int e = 0; e < 8; ++e) acc[e] *= corr;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const float pj = exp2f(sc[u] - mb);
    float f[8];
    unpack8(vv[u], f);
    l += pj;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] = fmaf(pj, f[e], acc[e]);
  }
  m = mb;
}

// One work item's place: item = (b NH + h) splits + split; its keys [k0, k0 + n) of past + 1; its
// head's cache rows and QKV row.
struct Item {
  int bh, split, b, h, k0, n;
  const __half *kc, *vc, *qn, *kn, *vn;
  size_t head;   // the head's first element in the caches
  __device__ __forceinline__ Item(const CusyncDecodeAttnParams& p, int item) {
    bh = item / p.splits;
    split = item % p.splits;
    b = bh / p.heads;
    h = bh % p.heads;
    k0 = split * p.chunk;
    n = min(p.chunk, p.past + 1 - k0);
    head = (static_cast<size_t>(b) * p.heads + h) * p.smax * kHeadDim;
    kc = static_cast<const __half*>(p.kcache) + head;
    vc = static_cast<const __half*>(p.vcache) + head;
    const __half* row = static_cast<const __half*>(p.qkv) + static_cast<size_t>(b) * 3 * p.heads * kHeadDim;
    qn = row + h * kHeadDim;
    kn = row + (p.heads + h) * kHeadDim;
    vn = row + (2 * p.heads + h) * kHeadDim;
  }
  // the new token's K and V appended (by the split that holds position past; warp 0)
  __device__ __forceinline__ void append(const CusyncDecodeAttnParams& p) const {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, l16 = lane % 16;
    if (warp == 0 && p.past >= k0 && p.past < k0 + n) {
      const __half* src = lane < 16 ? kn : vn;
      __half* dst = static_cast<__half*>(lane < 16 ? p.kcache : p.vcache) + head + static_cast<size_t>(p.past) * kHeadDim;
      *reinterpret_cast<uint4*>(dst + l16 * 8) = *reinterpret_cast<const uint4*>(src + l16 * 8);
    }
  }
  // the lane's 8 columns of q, scaled to base 2
  __device__ __forceinline__ void load_q(const CusyncDecodeAttnParams& p, float (&q)[8]) const {
    unpack8(*reinterpret_cast<const uint4*>(qn + (threadIdx.x % 16) * 8), q);
#pragma unroll
    for (int e = 0; e < 8; ++e) q[e] *= p.scale;
  }
};

// The 8 half-warps' (m, l, acc) merged, the split's partial to the workspace, and the combine by
// the split that completes the head; `done(bh)` is called by every thread of the block that wrote
// the head's O (the post of a chained launch).
template <class Done>
__device__ __forceinline__ void finish_item(const CusyncDecodeAttnParams& p, const Item& it, float m, float l,
                                            const float (&acc)[8], Done&& done) {
  __shared__ __align__(16) float part[2 * kAttnWarps][kHeadDim];   // read as float4 by the combine
  __shared__ float half_m[2 * kAttnWarps], half_l[2 * kAttnWarps], part_l[kAttnWarps], part_m[kAttnWarps];
  __shared__ float weight[kMaxSplits];
  __shared__ uint32_t last_s;
  constexpr int D = kHeadDim;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, l16 = lane % 16;
  const int slot = warp * 2 + lane / 16;
  const int bh = it.bh, split = it.split;
  if (l16 == 0) {
    half_m[slot] = m;
    half_l[slot] = l;
  }
#pragma unroll
  for (int e = 0; e < 8; ++e) part[slot][l16 * 8 + e] = acc[e];
  __syncthreads();
  const int t = threadIdx.x;   // kAttnThreads == D
  float mx = half_m[0];
#pragma unroll
  for (int s8 = 1; s8 < 8; ++s8) mx = fmaxf(mx, half_m[s8]);
  float o = 0.f, lsum = 0.f;
#pragma unroll
  for (int s8 = 0; s8 < 8; ++s8) {
    const float w = exp2f(half_m[s8] - mx);   // 0 for a half-warp without keys
    o = fmaf(w, part[s8][t], o);
    lsum = fmaf(w, half_l[s8], lsum);
  }
  m = mx;
  __half* out = static_cast<__half*>(p.o) + static_cast<size_t>(it.b) * p.heads * D + it.h * D;
  if (p.splits == 1) {
    out[t] = __float2half_rn(o / lsum);
    done(bh);
    return;
  }
  // the split's partial: O (unnormalized) at ws[(bh splits + split) D], its max and sum after
  // every split's O (ws[B NH splits D + 2 (bh splits + split)])
  const size_t nsplit = static_cast<size_t>(p.batch) * p.heads * p.splits;
  float* ml = p.ws + nsplit * D;
  const size_t mine = static_cast<size_t>(bh) * p.splits + split;
  __stcg(p.ws + mine * D + t, o);
  if (t == 0) __stcg(reinterpret_cast<float2*>(ml) + mine, make_float2(m, lsum));
  __threadfence();
  __syncthreads();
  if (t == 0) last_s = atomicAdd(p.counts + bh, 1u) == static_cast<uint32_t>(p.splits - 1);
  __syncthreads();
  if (!last_s) return;
  __threadfence();
  // combine: the splits' weights exp2(m_s - max) in shared memory (a thread a split), then each
  // warp sums a quarter of the splits' O (a lane 4 columns, 16 bytes a load) and the warps add up
  const float2* mls = reinterpret_cast<const float2*>(ml) + static_cast<size_t>(bh) * p.splits;
  float big = -INFINITY;
  for (int s = t; s < p.splits; s += kAttnThreads) big = fmaxf(big, __ldcg(mls + s).x);
#pragma unroll
  for (int off = 16; off > 0; off /= 2) big = fmaxf(big, __shfl_xor_sync(0xffffffffu, big, off));
  if (lane == 0) part_m[warp] = big;
  __syncthreads();
  big = fmaxf(fmaxf(part_m[0], part_m[1]), fmaxf(part_m[2], part_m[3]));
  float den = 0.f;
  for (int s = t; s < p.splits; s += kAttnThreads) {
    const float2 v = __ldcg(mls + s);
    const float w = exp2f(v.x - big);
    weight[s] = w;
    den += w * v.y;
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) den += __shfl_xor_sync(0xffffffffu, den, off);
  if (lane == 0) part_l[warp] = den;
  __syncthreads();
  den = part_l[0] + part_l[1] + part_l[2] + part_l[3];
  const float4* os = reinterpret_cast<const float4*>(p.ws + static_cast<size_t>(bh) * p.splits * D);
  float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
  for (int s = warp; s < p.splits; s += kAttnWarps) {
    const float4 v = __ldcg(os + static_cast<size_t>(s) * (D / 4) + lane);
    const float w = weight[s];
    a.x = fmaf(w, v.x, a.x);
    a.y = fmaf(w, v.y, a.y);
    a.z = fmaf(w, v.z, a.z);
    a.w = fmaf(w, v.w, a.w);
  }
  reinterpret_cast<float4*>(part[warp])[lane] = a;
  __syncthreads();
  out[t] = __float2half_rn((part[0][t] + part[1][t] + part[2][t] + part[3][t]) / den);
  if (t == 0) p.counts[bh] = 0u;
  done(bh);
}

// Work item `item` with the keys read by loads: a half-warp a key, 16 bytes a lane, the K and V
// rows of U keys a half-warp in flight together.
template <int U, class Done>
__device__ __forceinline__ void attention_item(const CusyncDecodeAttnParams& p, int item, Done&& done) {
  constexpr int D = kHeadDim;
  const Item it(p, item);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, l16 = lane % 16;
  const int slot = warp * 2 + lane / 16;   // the key of 8 this half-warp reads
  it.append(p);
  // a key's row: the cache's, or the new token's (from the QKV row)
  auto key_row = [&](const __half* cache, const __half* fresh, int key) {
    return key < p.past ? cache + static_cast<size_t>(key) * D + l16 * 8 : fresh + l16 * 8;
  };
  // the cache is read once and never written in a launch that reads it (past the new key)
  auto load = [&](const __half* ptr, int key) {
    return key < p.past ? ld_once(ptr) : *reinterpret_cast<const uint4*>(ptr);
  };
  float q[8];
  it.load_q(p, q);
  float m = -INFINITY, l = 0.f;
  float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  for (int j0 = 0; j0 < it.n; j0 += 8 * U) {
    uint4 kv[U], vv[U];
    bool ok[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int j = j0 + u * 8 + slot, key = it.k0 + j;
      ok[u] = j < it.n;
      kv[u] = ok[u] ? load(key_row(it.kc, it.kn, key), key) : make_uint4(0u, 0u, 0u, 0u);
      vv[u] = ok[u] ? load(key_row(it.vc, it.vn, key), key) : make_uint4(0u, 0u, 0u, 0u);
    }
    absorb<U>(q, kv, vv, ok, m, l, acc);
  }
  finish_item(p, it, m, l, acc, done);
}

// The first prefetch_keys cached K and V rows work item `item` reads (contiguous in each cache),
// into L2 (one bulk prefetch each): they do not depend on the QKV GeMM, so a PDL-launched block
// issues them before it waits, while the QKV GeMM streams its weights (evict-first, swap.cu).
__device__ __forceinline__ void prefetch_cached(const CusyncDecodeAttnParams& p, int item) {
  if (threadIdx.x != 0) return;
  constexpr int D = kHeadDim;
  const int bh = item / p.splits, split = item % p.splits;
  const int k0 = split * p.chunk;
  const int cached = min(min(p.chunk, p.past - k0), p.prefetch_keys);
  if (cached <= 0) return;
  const size_t off = (static_cast<size_t>(bh) * p.smax + k0) * D * sizeof(__half);
  const unsigned bytes = static_cast<unsigned>(cached) * D * sizeof(__half);
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(static_cast<const char*>(p.kcache) + off), "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(static_cast<const char*>(p.vcache) + off), "r"(bytes)
               : "memory");
}

// Shared-memory barrier and bulk-copy primitives (PTX, sm_90).
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred done;\n WAIT_%=:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra WAIT_%=;\n}" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}
// `bytes` (a multiple of 16) from global src to shared dst, completing on `bar`; read once
// (evict-first in L2).
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
          smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar)), "l"(policy)
      : "memory");
}

// Work item `item` with the keys read by bulk copies: the split's cached K and V rows (contiguous
// in each cache) in stages of KPS keys, STAGES of them in flight, each a K box and a V box copied
// into dynamic shared memory by one thread; the half-warps read a stage's keys from there (a
// half-warp a key, as the loads do); the new key's rows are read from the QKV row.
template <int KPS, int STAGES>
struct Bulk {
  static constexpr int kRowBytes = kHeadDim * 2;
  static constexpr int kStageBytes = 2 * KPS * kRowBytes;   // K rows, then V rows
  static constexpr int kSmemBytes = STAGES * kStageBytes;
  static_assert(KPS % 8 == 0, "a stage holds whole rounds of the 8 half-warps");
};

template <int KPS, int STAGES>
__device__ __forceinline__ void attention_bulk(const CusyncDecodeAttnParams& p) {
  using B = Bulk<KPS, STAGES>;
  constexpr int D = kHeadDim, U = KPS / 8;
  extern __shared__ __align__(128) unsigned char stages[];
  __shared__ __align__(8) uint64_t full[STAGES];
  const Item it(p, blockIdx.x);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, l16 = lane % 16;
  const int slot = warp * 2 + lane / 16;
  const int cached = max(0, min(it.n, p.past - it.k0));   // the split's keys in the cache
  const int nst = (it.n + KPS - 1) / KPS;
  // stage st: its cached keys' K and V boxes (a stage with none arrives without bytes)
  auto issue = [&](int st) {
    uint64_t* bar = full + st % STAGES;
    const int lo = st * KPS, cnt = min(KPS, cached - lo);
    if (cnt <= 0) {
      mbar_arrive(bar);
      return;
    }
    const uint32_t bytes = static_cast<uint32_t>(cnt) * B::kRowBytes;
    unsigned char* dst = stages + (st % STAGES) * B::kStageBytes;
    const size_t off = static_cast<size_t>(it.k0 + lo) * D;
    mbar_expect(bar, 2 * bytes);
    bulk_load(dst, it.kc + off, bytes, bar);
    bulk_load(dst + KPS * B::kRowBytes, it.vc + off, bytes, bar);
  };
  pdl_launch_dependents();   // the output GeMM may take the SMs this launch leaves
  if (p.pdl) {
    prefetch_cached(p, blockIdx.x);
    pdl_wait_producer_grid();
  }
  // the copies after the wait: a PDL chain's earlier kernels (the previous step's append) may still
  // write the cache before it; the prefetch into L2 is only a hint
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) mbar_init(full + s, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    for (int st = 0; st < min(STAGES, nst); ++st) issue(st);
  }
  __syncthreads();   // the barriers initialized
  it.append(p);
  float q[8];
  it.load_q(p, q);
  float m = -INFINITY, l = 0.f;
  float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  for (int st = 0; st < nst; ++st) {
    mbar_wait(full + st % STAGES, (st / STAGES) & 1);
    const unsigned char* kst = stages + (st % STAGES) * B::kStageBytes;
    uint4 kv[U], vv[U];
    bool ok[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int r = u * 8 + slot, j = st * KPS + r;
      ok[u] = j < it.n;
      if (j < cached) {
        kv[u] = *reinterpret_cast<const uint4*>(kst + r * B::kRowBytes + l16 * 16);
        vv[u] = *reinterpret_cast<const uint4*>(kst + (KPS + r) * B::kRowBytes + l16 * 16);
      } else if (ok[u]) {   // the new token (position past)
        kv[u] = *reinterpret_cast<const uint4*>(it.kn + l16 * 8);
        vv[u] = *reinterpret_cast<const uint4*>(it.vn + l16 * 8);
      } else {
        kv[u] = vv[u] = make_uint4(0u, 0u, 0u, 0u);
      }
    }
    absorb<U>(q, kv, vv, ok, m, l, acc);
    if (st + STAGES < nst) {
      __syncthreads();   // every half-warp has read the stage
      if (threadIdx.x == 0) issue(st + STAGES);
    }
  }
  finish_item(p, it, m, l, acc, [](int) {});
}

template <int U>
__device__ __forceinline__ void attention(const CusyncDecodeAttnParams& p) {
  pdl_launch_dependents();   // the output GeMM may take the SMs this launch leaves
  if (p.pdl) {
    prefetch_cached(p, blockIdx.x);
    pdl_wait_producer_grid();
  }
  attention_item<U>(p, blockIdx.x, [](int) {});
}

}  // namespace decode
}  // namespace cusync

// One kernel per keys-in-flight count: cusync_decode_attention_<U>.
#define CUSYNC_DEFINE_DECODE_ATTENTION(U)                                                          \
  extern "C" __global__ void __launch_bounds__(cusync::decode::kAttnThreads)                       \
      cusync_decode_attention_##U(const CusyncDecodeAttnParams p) {                                \
    cusync::decode::attention<U>(p);                                                               \
  }
// One kernel per stage shape: cusync_decode_attention_bulk_<KPS>_<STAGES>, launched with
// Bulk<KPS, STAGES>::kSmemBytes of dynamic shared memory.
#define CUSYNC_DEFINE_DECODE_ATTENTION_BULK(KPS, STAGES)                                           \
  extern "C" __global__ void __launch_bounds__(cusync::decode::kAttnThreads)                       \
      cusync_decode_attention_bulk_##KPS##_##STAGES(const CusyncDecodeAttnParams p) {              \
    cusync::decode::attention_bulk<KPS, STAGES>(p);                                                \
  }
#endif  // __CUDACC__
