// The attention stage of the prompt on CUTLASS's Hopper FMHA forward (examples/88_hopper_fmha of the
// nvidia-cutlass wheel: warp-specialized TMA producer, online softmax, causal fusion), reading Q, K
// and V straight from the QKV GeMM's output [tokens, 3 NH D] (token b S + s; columns Q heads, K
// heads, V heads: examples/attention_*.dep's g1 tiles) and writing O as [tokens, NH D] for the
// output GeMM: strides, no permute copy. D = 128, fp16, fp32 accumulation, 128 x 128 tiles.
// Built twice (lib.py units): CUSYNC_FMHA_SYNC=0 the stock kernels (cusync_sm90_fmha, _heads),
// =1 the synchronized ones (cusync_sm90_fmha_sync: cusync/sm90/fmha_sync.h's adaptors in the same
// kernel), so that the two compile in parallel.
#include <cuda_runtime.h>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "collective/fmha_fusion.hpp"
#include "device/device_universal.hpp"
#include "kernel/fmha_kernel_builder.hpp"

#include "cusync/sm90/fmha_sync.h"
#include "sm90_api.h"

#ifndef CUSYNC_FMHA_SYNC
#define CUSYNC_FMHA_SYNC 0
#endif

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

// A call's kernel as types, f(As<Fusion>, As<Schedule>): the fusion causal, residual (S not a
// multiple of the 128-key tile) or none; the schedule 0 cooperative, 1 ping-pong (else 5).
template <class T>
struct As {
  using type = T;
};
template <class F>
int with_kernel(int schedule, bool causal, int S, F&& f) {
  auto by_fusion = [&](auto sched) -> int {
    if (causal) return f(As<CausalFusion>{}, sched);
    if (S % 128) return f(As<ResidualFusion>{}, sched);
    return f(As<DefaultFusion>{}, sched);
  };
  if (schedule == 0) return by_fusion(As<Cooperative>{});
  if (schedule == 1) return by_fusion(As<Pingpong>{});
  return 5;
}

#if !CUSYNC_FMHA_SYNC
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

int dispatch(int schedule, const void* q, const void* k, const void* v, int ld, int sb, int sh, void* o, float* lse,
             int B, int H, int S, int causal, int sm_count, cudaStream_t s) {
  return with_kernel(schedule, causal != 0, S, [&](auto fusion, auto sched) {
    return run<typename decltype(fusion)::type, typename decltype(sched)::type>(q, k, v, ld, sb, sh, o, lse, B, H, S,
                                                                                sm_count, nullptr, s);
  });
}
#endif
}  // namespace

#if CUSYNC_FMHA_SYNC
// (a named namespace: a kernel instantiated from the anonymous one makes the host stub's
// reference to it ambiguous with CuTe's anonymous namespace)
namespace cusync_sm90_fmha {
using cute::_1;
using cute::make_tuple;
// The synchronized kernels: the builder's collectives (the ping-pong schedule is the cooperative
// one, persistent, Q loaded by a warp of its own), wrapped.
using cutlass::fmha::kernel::Option;
using cutlass::fmha::kernel::Tag;
template <class Fusion, class... Options>
struct SyncKernelOf {
  using Builder = cutlass::fmha::kernel::FmhaBuilder<Element, float, float, TileShape, StrideQKV, StrideQKV, StrideQKV,
                                                     Fusion, Cooperative, Options...>;
  static constexpr bool kQApart =
      cutlass::fmha::kernel::find_option_t<Tag::kLoadsQSeparately, cute::false_type, Options...>::value;
  using Mainloop = cusync::sm90::SyncFmhaMainloop<typename Builder::CollectiveMainloop, kQApart>;
  using Epilogue = cusync::sm90::PostingFmhaEpilogue<typename Builder::CollectiveEpilogue>;
  using Kernel = cutlass::fmha::kernel::FmhaKernelTmaWarpSpecialized<Mainloop, Epilogue,
                                                                     typename Builder::TileScheduler, Options...>;
};
template <class Fusion, class Schedule>
struct SyncKernel;
template <class Fusion>
struct SyncKernel<Fusion, Cooperative> : SyncKernelOf<Fusion> {};
template <class Fusion>
struct SyncKernel<Fusion, Pingpong>
    : SyncKernelOf<Fusion, Option<Tag::kIsPersistent, cute::true_type>, Option<Tag::kLoadsQSeparately, cute::true_type>> {};

template <class Fusion, class Schedule>
int run_sync(const void* qkv, void* o, float* lse, int B, int H, int S, bool causal, int sm_count,
             const CusyncSm90FmhaSync& sy, cudaStream_t stream) {
  using K = SyncKernel<Fusion, Schedule>;
  using Kernel = typename K::Kernel;
  constexpr int D = 128;
  const int ld = 3 * H * D;
  const auto* q = static_cast<const Element*>(qkv);
  StrideQKV s_in{ld, _1{}, make_tuple(S * ld, D)};
  StrideQKV s_o{H * D, _1{}, make_tuple(S * H * D, D)};
  StrideLSE s_lse{_1{}, make_tuple(H * S, S)};
  typename K::Mainloop::Arguments ml{};
  static_cast<typename K::Builder::CollectiveMainloop::Arguments&>(ml) = {q, s_in, q + H * D, s_in, q + 2 * H * D, s_in};
  ml.causal = causal;
  cusync::sm90::FmhaSync& f = ml.sync;
  f.in_policy = cusync::PolicyDesc{sy.in_policy};
  f.in_sems = sy.in_sems;
  f.in_tile_m = sy.in_tile_m;
  f.in_tile_n = sy.in_tile_n;
  f.ticket = sy.ticket;
  f.trigger = (sy.flags & CUSYNC_SM90_PDL_TRIGGER) != 0;
  f.pdl_wait = (sy.flags & CUSYNC_SM90_PDL_WAIT) != 0;
  f.timeout_ns = sy.timeout_ns;
  f.debug = sy.debug;
  typename K::Epilogue::Arguments ep{};
  static_cast<typename K::Builder::CollectiveEpilogue::Arguments&>(ep) = {static_cast<Element*>(o), s_o, lse, s_lse};
  ep.out_policy = cusync::PolicyDesc{sy.out_policy};
  ep.out_sems = sy.out_sems;
  cutlass::KernelHardwareInfo hw;
  hw.device_id = 0;
  hw.sm_count = sm_count;
  typename Kernel::Arguments args{ProblemShape{B, H, S, S, D}, ml, ep, hw};
  if (!Kernel::can_implement(args)) return 1;
  auto params = Kernel::to_underlying_arguments(args, nullptr);
  const int smem = Kernel::SharedStorageSize;
  if (cudaFuncSetAttribute(cutlass::device_kernel<Kernel>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) !=
      cudaSuccess)
    return 4;
  void* kernel_params[] = {&params};
  if (cutlass::ClusterLauncher::launch(Kernel::get_grid_shape(params), dim3(1, 1, 1), Kernel::get_block_shape(), smem,
                                      stream, reinterpret_cast<const void*>(cutlass::device_kernel<Kernel>),
                                      kernel_params, (sy.flags & CUSYNC_SM90_PDL_LAUNCH) != 0) !=
      cutlass::Status::kSuccess)
    return 3;
  return cudaGetLastError() == cudaSuccess ? 0 : 4;
}

}  // namespace cusync_sm90_fmha
#endif

#if !CUSYNC_FMHA_SYNC
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
#else
extern "C" {
// The stage synchronized (CusyncSm90FmhaSync, sm90_api.h): the same arguments as cusync_sm90_fmha,
// plus what it waits on, posts and how it is launched. 6: bad synchronization arguments (tile waits
// without a ticket or tile sizes, posts where S is not a multiple of CUSYNC_SM90_FMHA_O_ROWS).
int cusync_sm90_fmha_sync(const void* qkv, void* o, float* lse, int B, int H, int S, int causal, int schedule,
                          int sm_count, const CusyncSm90FmhaSync* sync, void* stream) {
  if (sync == nullptr) return 6;
  const CusyncSm90FmhaSync& sy = *sync;
  if (sy.in_sems != nullptr && (sy.ticket == nullptr || sy.in_tile_m <= 0 || sy.in_tile_n <= 0)) return 6;
  if (sy.out_sems != nullptr && S % CUSYNC_SM90_FMHA_O_ROWS != 0) return 6;
  static_assert(CUSYNC_SM90_FMHA_O_ROWS == cusync::sm90::FmhaSync::kORows, "one O tile size");
  auto s = static_cast<cudaStream_t>(stream);
  return with_kernel(schedule, causal != 0, S, [&](auto fusion, auto sched) {
    return cusync_sm90_fmha::run_sync<typename decltype(fusion)::type, typename decltype(sched)::type>(
        qkv, o, lse, B, H, S, causal != 0, sm_count, sy, s);
  });
}
}
#endif
