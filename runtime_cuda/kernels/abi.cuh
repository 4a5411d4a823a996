// The layout of every struct a workload kernel takes by value, exported for the host to check
// when it loads a module (cusyncgen/cuda/abi.py): CUSYNC_EXPORT_ABI(Struct, fields...) defines
//   extern "C" __device__ const long long cusync_abi_<Struct>[] = {sizeof, offsetof each field};
//   extern "C" __device__ const int cusync_abi_<Struct>_len;   // its length
// The workload headers (gemm.cuh, conv2d.cuh, softmax.cuh, attention.cuh, copy.cuh) export their
// structs and StageArgs. They are meant for one translation unit per module; a program that
// includes them in several translation units defines CUSYNC_NO_ABI_EXPORT (the symbols are global).
#pragma once
#include <cstddef>
#include <cusync/cusync.h>

#define CUSYNC_ABI_OFFSET_(S, f) static_cast<long long>(offsetof(S, f)),
#define CUSYNC_ABI_MAP1_(S, f) CUSYNC_ABI_OFFSET_(S, f)
#define CUSYNC_ABI_MAP2_(S, f, ...) CUSYNC_ABI_OFFSET_(S, f) CUSYNC_ABI_MAP1_(S, __VA_ARGS__)
#define CUSYNC_ABI_MAP3_(S, f, ...) CUSYNC_ABI_OFFSET_(S, f) CUSYNC_ABI_MAP2_(S, __VA_ARGS__)
#define CUSYNC_ABI_MAP4_(S, f, ...) CUSYNC_ABI_OFFSET_(S, f) CUSYNC_ABI_MAP3_(S, __VA_ARGS__)
#define CUSYNC_ABI_MAP5_(S, f, ...) CUSYNC_ABI_OFFSET_(S, f) CUSYNC_ABI_MAP4_(S, __VA_ARGS__)
#define CUSYNC_ABI_MAP6_(S, f, ...) CUSYNC_ABI_OFFSET_(S, f) CUSYNC_ABI_MAP5_(S, __VA_ARGS__)
#define CUSYNC_ABI_MAP7_(S, f, ...) CUSYNC_ABI_OFFSET_(S, f) CUSYNC_ABI_MAP6_(S, __VA_ARGS__)
#define CUSYNC_ABI_MAP8_(S, f, ...) CUSYNC_ABI_OFFSET_(S, f) CUSYNC_ABI_MAP7_(S, __VA_ARGS__)
#define CUSYNC_ABI_MAP9_(S, f, ...) CUSYNC_ABI_OFFSET_(S, f) CUSYNC_ABI_MAP8_(S, __VA_ARGS__)
#define CUSYNC_ABI_MAP10_(S, f, ...) CUSYNC_ABI_OFFSET_(S, f) CUSYNC_ABI_MAP9_(S, __VA_ARGS__)
#define CUSYNC_ABI_MAP11_(S, f, ...) CUSYNC_ABI_OFFSET_(S, f) CUSYNC_ABI_MAP10_(S, __VA_ARGS__)
#define CUSYNC_ABI_MAP12_(S, f, ...) CUSYNC_ABI_OFFSET_(S, f) CUSYNC_ABI_MAP11_(S, __VA_ARGS__)
#define CUSYNC_ABI_MAP13_(S, f, ...) CUSYNC_ABI_OFFSET_(S, f) CUSYNC_ABI_MAP12_(S, __VA_ARGS__)
#define CUSYNC_ABI_MAP14_(S, f, ...) CUSYNC_ABI_OFFSET_(S, f) CUSYNC_ABI_MAP13_(S, __VA_ARGS__)
#define CUSYNC_ABI_MAP15_(S, f, ...) CUSYNC_ABI_OFFSET_(S, f) CUSYNC_ABI_MAP14_(S, __VA_ARGS__)
#define CUSYNC_ABI_MAP16_(S, f, ...) CUSYNC_ABI_OFFSET_(S, f) CUSYNC_ABI_MAP15_(S, __VA_ARGS__)
#define CUSYNC_ABI_COUNT_(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, N, ...) N
#define CUSYNC_ABI_CAT_(a, b) a##b
#define CUSYNC_ABI_MAP_(N, S, ...) CUSYNC_ABI_CAT_(CUSYNC_ABI_MAP, N)(S, __VA_ARGS__)
#define CUSYNC_ABI_N_(...) CUSYNC_ABI_COUNT_(__VA_ARGS__, 16_, 15_, 14_, 13_, 12_, 11_, 10_, 9_, 8_, 7_, 6_, 5_, 4_, 3_, 2_, 1_, 0_)

#if defined(CUSYNC_NO_ABI_EXPORT)
#define CUSYNC_EXPORT_ABI(NAME, S, ...)
#else
// NAME: the struct's unqualified name (the symbol's suffix); S: its type; then its fields in order.
#define CUSYNC_EXPORT_ABI(NAME, S, ...)                                                          \
  extern "C" __device__ const long long cusync_abi_##NAME[] = {                                 \
      static_cast<long long>(sizeof(S)), CUSYNC_ABI_MAP_(CUSYNC_ABI_N_(__VA_ARGS__), S, __VA_ARGS__)}; \
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
