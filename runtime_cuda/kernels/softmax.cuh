// Fused Softmax-Dropout of attention scores with CuSync hooks (header-only).
//
//   R[z, r, c] = keep(z, r, c) / (1 - p) * exp(s P[z,r,c] - m) / sum_c' exp(s P[z,r,c'] - m)
//
// for c < L (the valid keys), R = 0 for L <= c < Npad (the key padding the P GeMM computes).
// P and R are [Z, M, Npad] fp16 (Npad % 64 == 0), row-major; s = 1/sqrt(Dh); fp32 math.
// Dropout: a counter-based hash of the element's linear index and the seed, so a reference
// reproduces the mask exactly:  keep = attn_hash(idx * 0x9E3779B9 + seed) >= p * 2^32 with
// idx = (z * M + r) * Npad + c (mod 2^32) and attn_hash the "lowbias32" integer hash.
//
// A block computes a row tile: rows [t.y * BM, t.y * BM + BM) of head-batch t.z, one warp per row
// at a time; a row of up to 4096 columns is read once, into registers (16-byte loads).  CuSync: t = stage.start(); wait on every P tile of the row tile (the generated
// waits list, RowSync in the paper); stage.post(t) once the R rows are stored.
#pragma once

#include <cuda_fp16.h>
#include <cstdint>
#include <cusync/tile.h>

namespace cusync_kernels {

struct SoftmaxArgs {
  const half* P;
  half* R;
  int M, Npad, L;          // rows per head-batch, padded and valid columns
  float scale;             // 1/sqrt(Dh)
  uint32_t drop_threshold; // p * 2^32 (0: no dropout)
  float keep_scale;        // 1 / (1 - p)
  uint32_t seed;
};

__host__ __device__ __forceinline__ uint32_t attn_hash(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

// Rows of up to 32 lanes x kRowVecs x 8 columns are read from global memory once, into registers
// (16-byte loads, all issued before the first is used); longer rows take the three-pass loop below.
constexpr int kRowVecs = 16;

__device__ __forceinline__ void unpack8(const uint4& u, float (&f)[8]) {
  const __half2* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 v = __half22float2(h[j]);
    f[2 * j] = v.x;
    f[2 * j + 1] = v.y;
  }
}

// One row (one warp): max, sum of exponentials and the dropped-out, normalized output, with the row
// held in registers.
__device__ __forceinline__ void softmax_row_in_registers(const SoftmaxArgs& a, long long row, int lane) {
  const uint4* p = reinterpret_cast<const uint4*>(a.P + row * a.Npad);
  uint4* out = reinterpret_cast<uint4*>(a.R + row * a.Npad);
  const int nv = a.Npad / 8;
  uint4 buf[kRowVecs];
#pragma unroll
  for (int i = 0; i < kRowVecs; ++i) {
    const int c = lane + 32 * i;
    if (c < nv) buf[i] = p[c];
  }
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < kRowVecs; ++i) {
    const int c = lane + 32 * i;
    if (c < nv) {
      float f[8];
      unpack8(buf[i], f);
#pragma unroll
      for (int j = 0; j < 8; ++j)
        if (8 * c + j < a.L) mx = fmaxf(mx, f[j] * a.scale);
    }
  }
#pragma unroll
  for (int o = 16; o; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < kRowVecs; ++i) {
    const int c = lane + 32 * i;
    if (c < nv) {
      float f[8];
      unpack8(buf[i], f);
#pragma unroll
      for (int j = 0; j < 8; ++j)
        if (8 * c + j < a.L) sum += __expf(f[j] * a.scale - mx);
    }
  }
#pragma unroll
  for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  const float inv = a.keep_scale / sum;
  const uint32_t base = static_cast<uint32_t>(row * a.Npad);
#pragma unroll
  for (int i = 0; i < kRowVecs; ++i) {
    const int c = lane + 32 * i;
    if (c < nv) {
      float f[8];
      unpack8(buf[i], f);
      uint4 o;
      __half2* h = reinterpret_cast<__half2*>(&o);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int col = 8 * c + 2 * j;
        float e0 = col < a.L ? __expf(f[2 * j] * a.scale - mx) * inv : 0.f;
        float e1 = col + 1 < a.L ? __expf(f[2 * j + 1] * a.scale - mx) * inv : 0.f;
        if (a.drop_threshold) {
          if (attn_hash((base + col) * 0x9E3779B9u + a.seed) < a.drop_threshold) e0 = 0.f;
          if (attn_hash((base + col + 1) * 0x9E3779B9u + a.seed) < a.drop_threshold) e1 = 0.f;
        }
        h[j] = __floats2half2_rn(e0, e1);
      }
      out[c] = o;
    }
  }
}

template <int BM, int WARPS, class StageT, class Waits>
__device__ __forceinline__ void softmax_dropout_device(const SoftmaxArgs& a, StageT& stage) {
  const cusync::Tile t = stage.start();
  // CuSync: the whole row of P tiles (2 lines)
  for (int i = 0; i < Waits::count(t); ++i) stage.wait(Waits::tile(t, i));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r_end = min(a.M, (t.y + 1) * BM);
  if (a.Npad <= 32 * 8 * kRowVecs) {
    for (int r = t.y * BM + warp; r < r_end; r += WARPS) softmax_row_in_registers(a, (long long)t.z * a.M + r, lane);
    stage.post(t);
    return;
  }
  for (int r = t.y * BM + warp; r < r_end; r += WARPS) {
    const long long row = (long long)t.z * a.M + r;
    const __half2* p = reinterpret_cast<const __half2*>(a.P + row * a.Npad);
    __half2* out = reinterpret_cast<__half2*>(a.R + row * a.Npad);
    const int n2 = a.Npad / 2;
    float mx = -INFINITY;
    for (int c2 = lane; c2 < n2; c2 += 32) {
      const float2 v = __half22float2(p[c2]);
      if (2 * c2 < a.L) mx = fmaxf(mx, v.x * a.scale);
      if (2 * c2 + 1 < a.L) mx = fmaxf(mx, v.y * a.scale);
    }
#pragma unroll
    for (int o = 16; o; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float sum = 0.f;
    for (int c2 = lane; c2 < n2; c2 += 32) {
      const float2 v = __half22float2(p[c2]);
      if (2 * c2 < a.L) sum += __expf(v.x * a.scale - mx);
      if (2 * c2 + 1 < a.L) sum += __expf(v.y * a.scale - mx);
    }
#pragma unroll
    for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const float inv = a.keep_scale / sum;
    const uint32_t base = static_cast<uint32_t>(row * a.Npad);
    for (int c2 = lane; c2 < n2; c2 += 32) {
      const float2 v = __half22float2(p[c2]);
      const int c = 2 * c2;
      float e0 = c < a.L ? __expf(v.x * a.scale - mx) * inv : 0.f;
      float e1 = c + 1 < a.L ? __expf(v.y * a.scale - mx) * inv : 0.f;
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
