// The layout of every struct a workload kernel takes by value, exported for the host to check
// when it loads a module (cusyncgen/cuda/abi.py): CUSYNC_EXPORT_ABI(Struct, fields...) defines
//   extern "C" __device__ const long long cusync_abi_<Struct>[] = {sizeof, offsetof each field};
//   extern "C" __device__ const int cusync_abi_<Struct>_len;   // its length
// The workload headers (gemm.cuh, conv2d.cuh, softmax.cuh, attention.cuh, copy.cuh) export their
// structs and StageArgs. They are meant for one translation unit per module; a program that
// includes them in several translation units defines CUSYNC_NO_ABI_EXPORT (the symbols are global).
#pragma once
#include <cusync/cusync.h>
#include <kernels/abi_layout.h>

#if defined(CUSYNC_NO_ABI_EXPORT)
#define CUSYNC_EXPORT_ABI(NAME, S, ...)
#else
// NAME: the struct's unqualified name (the symbol's suffix); S: its type; then its fields in order.
#define CUSYNC_EXPORT_ABI(NAME, S, ...)                                                          \
  extern "C" __device__ const long long cusync_abi_##NAME[] = {CUSYNC_ABI_LAYOUT_(S, __VA_ARGS__)}; \
  extern "C" __device__ const int cusync_abi_##NAME##_len =                                     \
      static_cast<int>(sizeof(cusync_abi_##NAME) / sizeof(long long));
#endif

#if defined(CUSYNC_TIMELINE)
CUSYNC_EXPORT_ABI(StageArgs, cusync::StageArgs, ticket, out_sems, in_sems0, in_sems1, debug, timeout_ns, stage_id,
                  flags, splits, timeline, timeline_capacity)
#else
CUSYNC_EXPORT_ABI(StageArgs, cusync::StageArgs, ticket, out_sems, in_sems0, in_sems1, debug, timeout_ns, stage_id,
                  flags, splits)
#endif
