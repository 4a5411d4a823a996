// CuSync runtime: fine-grained tile synchronization of dependent kernels (umbrella header).
// Header-only; compiles under nvcc, NVRTC/CuPy (host-only parts are hidden from NVRTC) and, for
// the constexpr tile/policy code only, under a plain host C++17 compiler.
#pragma once

#include "tile.h"
#include "policy.h"
#include "desc.h"
#if defined(__CUDACC__)
#include "sync.h"
#include "stage.h"
#include "wait_kernel.h"
#if !defined(__CUDACC_RTC__)
#include "host.h"
#endif
#endif
