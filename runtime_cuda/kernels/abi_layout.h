// The layout of a struct as one list of long longs, {sizeof, offsetof each field in declaration order},
// for the host to compare with its ctypes mirror when it loads the code (cusyncgen/cuda/abi.py):
// CUSYNC_ABI_LAYOUT_(S, fields...) expands to that initializer list. Plain preprocessor (only
// <cstddef>), shared by the SM80 modules' device exports (kernels/abi.cuh) and the sm90 library's
// host exports (sm90/abi.h). At most 24 fields.
#pragma once
#include <cstddef>

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
#define CUSYNC_ABI_MAP17_(S, f, ...) CUSYNC_ABI_OFFSET_(S, f) CUSYNC_ABI_MAP16_(S, __VA_ARGS__)
#define CUSYNC_ABI_MAP18_(S, f, ...) CUSYNC_ABI_OFFSET_(S, f) CUSYNC_ABI_MAP17_(S, __VA_ARGS__)
#define CUSYNC_ABI_MAP19_(S, f, ...) CUSYNC_ABI_OFFSET_(S, f) CUSYNC_ABI_MAP18_(S, __VA_ARGS__)
#define CUSYNC_ABI_MAP20_(S, f, ...) CUSYNC_ABI_OFFSET_(S, f) CUSYNC_ABI_MAP19_(S, __VA_ARGS__)
#define CUSYNC_ABI_MAP21_(S, f, ...) CUSYNC_ABI_OFFSET_(S, f) CUSYNC_ABI_MAP20_(S, __VA_ARGS__)
#define CUSYNC_ABI_MAP22_(S, f, ...) CUSYNC_ABI_OFFSET_(S, f) CUSYNC_ABI_MAP21_(S, __VA_ARGS__)
#define CUSYNC_ABI_MAP23_(S, f, ...) CUSYNC_ABI_OFFSET_(S, f) CUSYNC_ABI_MAP22_(S, __VA_ARGS__)
#define CUSYNC_ABI_MAP24_(S, f, ...) CUSYNC_ABI_OFFSET_(S, f) CUSYNC_ABI_MAP23_(S, __VA_ARGS__)
#define CUSYNC_ABI_COUNT_(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, _17, _18, _19, _20, _21, _22, _23, _24, N, ...) N
#define CUSYNC_ABI_CAT_(a, b) a##b
#define CUSYNC_ABI_MAP_(N, S, ...) CUSYNC_ABI_CAT_(CUSYNC_ABI_MAP, N)(S, __VA_ARGS__)
#define CUSYNC_ABI_N_(...) CUSYNC_ABI_COUNT_(__VA_ARGS__, 24_, 23_, 22_, 21_, 20_, 19_, 18_, 17_, 16_, 15_, 14_, 13_, 12_, 11_, 10_, 9_, 8_, 7_, 6_, 5_, 4_, 3_, 2_, 1_, 0_)
#define CUSYNC_ABI_LAYOUT_(S, ...) \
  static_cast<long long>(sizeof(S)), CUSYNC_ABI_MAP_(CUSYNC_ABI_N_(__VA_ARGS__), S, __VA_ARGS__)
