// Fused Softmax-Dropout of attention scores with CuSync hooks (header-only).
//
//   R[z, r, c] = keep(z, r, c) / (1 - p) * exp(s P[z,r,c] - m) / sum_c' exp(s P[z,r,c'] - m)
//
// for c < L (the valid keys), R = 0 for L <= c < Npad (the key padding the P GeMM computes).
// Causal (SoftmaxArgs::causal): row r's valid keys are c <= L - M + r (its cached ones and the new
// ones up to its own); the rest of the row is 0 and P there is never read (it may be unwritten).
// P and R are [Z, M, Npad] fp16 (Npad % 64 == 0), row-major; s = 1/sqrt(Dh); fp32 math.
// Dropout: a counter-based hash of the element's linear index and the seed, so a reference
// reproduces the mask exactly:  keep = attn_hash(idx * 0x9E3779B9 + seed) >= p * 2^32 with
// idx = (z * M + r) * Npad + c (mod 2^32) and attn_hash the "lowbias32" integer hash.
//
// A block computes a row tile: rows [t.y * BM, t.y * BM + BM) of head-batch t.z, one warp per row
// at a time.  CuSync: t = stage.start(); wait on every P tile of the row tile (the generated
// waits list, RowSync in the paper); stage.post(t) once the R rows are stored.
#pragma once

#include <cuda_fp16.h>
#include <cstdint>
#include <cusync/tile.h>
#include <kernels/abi.cuh>

namespace cusync_kernels {

struct SoftmaxArgs {
  const half* P;
  half* R;
  int M, Npad, L;          // rows per head-batch, padded and valid columns
  float scale;             // 1/sqrt(Dh)
  uint32_t drop_threshold; // p * 2^32 (0: no dropout)
  float keep_scale;        // 1 / (1 - p)
  uint32_t seed;
  int causal;              // 1: row r of a head-batch reads the keys c <= L - M + r (causal prompt)
};
CUSYNC_EXPORT_ABI(SoftmaxArgs, SoftmaxArgs, P, R, M, Npad, L, scale, drop_threshold, keep_scale, seed, causal)

__host__ __device__ __forceinline__ uint32_t attn_hash(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

template <int BM, int WARPS, class StageT, class Waits>
__device__ __forceinline__ void softmax_dropout_device(const SoftmaxArgs& a, StageT& stage) {
  const cusync::Tile t = stage.start();
  // CuSync: the whole row of P tiles (2 lines)
  for (int i = 0; i < Waits::count(t); ++i) stage.wait(Waits::tile(t, i));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r_end = min(a.M, (t.y + 1) * BM);
  for (int r = t.y * BM + warp; r < r_end; r += WARPS) {
    const long long row = (long long)t.z * a.M + r;
    const int L = a.causal ? a.L - a.M + r + 1 : a.L;  // valid keys of this row
    const __half2* p = reinterpret_cast<const __half2*>(a.P + row * a.Npad);
    __half2* out = reinterpret_cast<__half2*>(a.R + row * a.Npad);
    const int n2 = a.Npad / 2;
    float mx = -INFINITY;
    for (int c2 = lane; c2 < n2; c2 += 32) {
      const float2 v = __half22float2(p[c2]);
      if (2 * c2 < L) mx = fmaxf(mx, v.x * a.scale);
      if (2 * c2 + 1 < L) mx = fmaxf(mx, v.y * a.scale);
    }
#pragma unroll
    for (int o = 16; o; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float sum = 0.f;
    for (int c2 = lane; c2 < n2; c2 += 32) {
      const float2 v = __half22float2(p[c2]);
      if (2 * c2 < L) sum += __expf(v.x * a.scale - mx);
      if (2 * c2 + 1 < L) sum += __expf(v.y * a.scale - mx);
    }
#pragma unroll
    for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const float inv = a.keep_scale / sum;
    const uint32_t base = static_cast<uint32_t>(row * a.Npad);
    for (int c2 = lane; c2 < n2; c2 += 32) {
      const float2 v = __half22float2(p[c2]);
      const int c = 2 * c2;
      float e0 = c < L ? __expf(v.x * a.scale - mx) * inv : 0.f;
      float e1 = c + 1 < L ? __expf(v.y * a.scale - mx) * inv : 0.f;
      if (a.drop_threshold) {
        if (attn_hash((base + c) * 0x9E3779B9u + a.seed) < a.drop_threshold) e0 = 0.f;
        if (attn_hash((base + c + 1) * 0x9E3779B9u + a.seed) < a.drop_threshold) e1 = 0.f;
      }
      out[c2] = __floats2half2_rn(e0, e1);
    }
  }
  stage.post(t);
}

}  // namespace cusync_kernels
