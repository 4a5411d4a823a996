// Fixed-width integers under nvcc, host compilers and NVRTC alike.
#pragma once

#if defined(__CUDACC_RTC__)
#include <cuda/std/cstdint>  // NVRTC has no <cstdint>; CuPy and NVRTC put CCCL on the path
using cuda::std::int32_t;
using cuda::std::uint32_t;
#else
#include <cstdint>
#endif
