// The attention stage of the prompt on CUTLASS's Hopper FMHA forward (examples/88_hopper_fmha of the
// nvidia-cutlass wheel: warp-specialized TMA producer, online softmax, causal fusion), reading Q, K
// and V straight from the QKV GeMM's output [tokens, 3 NH D] (token b S + s; columns Q heads, K
// heads, V heads: examples/attention_*.dep's g1 tiles) and writing O as [tokens, NH D] for the
// output GeMM: strides, no permute copy. D = 128, fp16, fp32 accumulation, 128 x 128 tiles.
#include <cuda_runtime.h>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "collective/fmha_fusion.hpp"
#include "device/device_universal.hpp"
#include "kernel/fmha_kernel_builder.hpp"

namespace {
using namespace cute;
using cutlass::fmha::collective::CausalFusion;
using cutlass::fmha::collective::DefaultFusion;
using cutlass::fmha::collective::ResidualFusion;

using Element = cutlass::half_t;
using ProblemShape = cute::tuple<int, int, int, int, int>;           // B H Q K D
using StrideQKV = cute::tuple<int, _1, cute::tuple<int, int>>;      // token, D, (batch, head)
using StrideLSE = cute::tuple<_1, cute::tuple<int, int>>;           // Q, (batch, head)
using TileShape = Shape<_128, _128, _128>;

// Schedule: KernelTmaWarpSpecializedCooperative (a CTA per 128-query tile) or
// KernelTmaWarpSpecializedPingpong (CUTLASS's persistent scheduler, Q loaded apart from K/V)
template <class Fusion, class Schedule>
using Fmha = cutlass::device::Universal<typename cutlass::fmha::kernel::FmhaBuilder<
    Element, float, float, TileShape, StrideQKV, StrideQKV, StrideQKV, Fusion, Schedule>::Kernel>;
using Cooperative = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using Pingpong = cutlass::gemm::KernelTmaWarpSpecializedPingpong;

// q, k, v: element (batch b, head h, token s, d) at b * sb + h * sh + s * ld + d
template <class Fusion, class Schedule>
int run(const void* q, const void* k, const void* v, int ld, int sb, int sh, void* o, float* lse, int B, int H,
        int S, int sm_count, void* workspace, cudaStream_t stream) {
  constexpr int D = 128;
  StrideQKV s_in{ld, _1{}, make_tuple(sb, sh)};
  StrideQKV s_o{H * D, _1{}, make_tuple(S * H * D, D)};
  StrideLSE s_lse{_1{}, make_tuple(H * S, S)};
  cutlass::KernelHardwareInfo hw;
  hw.device_id = 0;
  hw.sm_count = sm_count;
  typename Fmha<Fusion, Schedule>::Arguments args{ProblemShape{B, H, S, S, D},
                                        {static_cast<const Element*>(q), s_in, static_cast<const Element*>(k), s_in,
                                         static_cast<const Element*>(v), s_in},
                                        {static_cast<Element*>(o), s_o, lse, s_lse},
                                        hw};
  Fmha<Fusion, Schedule> op;
  if (op.can_implement(args) != cutlass::Status::kSuccess) return 1;
  if (Fmha<Fusion, Schedule>::get_workspace_size(args) > 0 && workspace == nullptr) return 2;
  if (op.run(args, workspace, stream) != cutlass::Status::kSuccess) return 3;
  return cudaGetLastError() == cudaSuccess ? 0 : 4;
}

template <class Schedule>
int dispatch(const void* q, const void* k, const void* v, int ld, int sb, int sh, void* o, float* lse, int B, int H,
             int S, int causal, int sm_count, cudaStream_t s) {
  if (causal) return run<CausalFusion, Schedule>(q, k, v, ld, sb, sh, o, lse, B, H, S, sm_count, nullptr, s);
  if (S % 128) return run<ResidualFusion, Schedule>(q, k, v, ld, sb, sh, o, lse, B, H, S, sm_count, nullptr, s);
  return run<DefaultFusion, Schedule>(q, k, v, ld, sb, sh, o, lse, B, H, S, sm_count, nullptr, s);
}
int dispatch(int schedule, const void* q, const void* k, const void* v, int ld, int sb, int sh, void* o, float* lse,
             int B, int H, int S, int causal, int sm_count, cudaStream_t s) {
  if (schedule == 0) return dispatch<Cooperative>(q, k, v, ld, sb, sh, o, lse, B, H, S, causal, sm_count, s);
  if (schedule == 1) return dispatch<Pingpong>(q, k, v, ld, sb, sh, o, lse, B, H, S, causal, sm_count, s);
  return 5;
}
}  // namespace

extern "C" {
// O = softmax(Q K^T / sqrt(D)) V per (sequence, head) of B sequences of S tokens, H heads, D = 128;
// causal: each query attends to the keys up to its own. lse: [B, H, S] fp32 (log-sum-exp). schedule:
// 0 cooperative, 1 ping-pong. 0 on success; 1 shape not supported, 2 workspace missing, 3 launch
// failed, 4 a CUDA error, 5 no such schedule.
int cusync_sm90_fmha(const void* qkv, void* o, float* lse, int B, int H, int S, int causal, int schedule,
                     int sm_count, void* stream) {
  constexpr int D = 128;
  const int ld = 3 * H * D;  // the QKV row
  const auto* q = static_cast<const cutlass::half_t*>(qkv);
  return dispatch(schedule, q, q + H * D, q + 2 * H * D, ld, S * ld, D, o, lse, B, H, S, causal, sm_count,
                  static_cast<cudaStream_t>(stream));
}
// The same over q, k, v each [B, H, S, D] contiguous (SDPA's layout): what the QKV GeMM's strided
// rows cost the stage (docs/design.md).
int cusync_sm90_fmha_heads(const void* q, const void* k, const void* v, void* o, float* lse, int B, int H, int S,
                           int causal, int schedule, int sm_count, void* stream) {
  constexpr int D = 128;
  return dispatch(schedule, q, k, v, D, H * S * D, S * D, o, lse, B, H, S, causal, sm_count,
                  static_cast<cudaStream_t>(stream));
}
}
