// The layout of every struct of sm90_api.h, exported by libcusync_sm90.so for the host to compare
// with its ctypes mirrors when it loads the library (cusyncgen/cuda/sm90/lib.py, through
// cusyncgen/cuda/abi.py, as the SM80 modules' exports are compared): for each struct S,
//   extern "C" const long long cusync_abi_<S>[] = {sizeof, offsetof each field in declaration order};
//   extern "C" const int cusync_abi_<S>_len;   // its length
// Host definitions: included by api.cu alone (and by the host-compiled test of the export). A field
// added to a struct of sm90_api.h is added here, in the same place, and to its ctypes mirror.
#pragma once
#include <kernels/abi_layout.h>

#include "sm90_api.h"

#define CUSYNC_SM90_EXPORT_ABI(S, ...)                                            \
  extern "C" const long long cusync_abi_##S[] = {CUSYNC_ABI_LAYOUT_(S, __VA_ARGS__)}; \
  extern "C" const int cusync_abi_##S##_len = static_cast<int>(sizeof(cusync_abi_##S) / sizeof(long long));

CUSYNC_SM90_EXPORT_ABI(CusyncSm90Policy, kind, param, extent, num_sems)
CUSYNC_SM90_EXPORT_ABI(CusyncSm90Order, group_dim, group_stride, group_count, groups_outer, extent)
CUSYNC_SM90_EXPORT_ABI(CusyncSm90Gemm, A, B, C, M, N, K, ldc, epilogue, order, in_policy, in_sems, in_tile_n,
                       out_policy, out_sems, splits, split_from, store, in_tile_m)
CUSYNC_SM90_EXPORT_ABI(CusyncSm90Debug, failed, stage, producer, tile_x, tile_y, tile_z, sem, seen, expected,
                       consumer_x, consumer_y, consumer_z, block, claimed)
CUSYNC_SM90_EXPORT_ABI(CusyncSm90FmhaSync, in_policy, in_sems, in_tile_m, in_tile_n, out_policy, out_sems, ticket,
                       flags, timeout_ns, debug)
