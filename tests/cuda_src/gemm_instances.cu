// Compile-only instantiations of runtime_cuda/kernels/gemm.cuh (used by tests/test_kernels_compile.py).
#include <kernels/gemm.cuh>

using cusync_kernels::EpiGeluErf;
using cusync_kernels::EpiGeluTanh;
using cusync_kernels::EpiIdentity;
using cusync_kernels::NoStage;

// GPT-3 first GeMM (GeLU), second GeMM (plain, reorder), LLaMA third GeMM (SwiGLU A operand).
CUSYNC_GEMM_KERNEL(gemm_128x128x32_s4_gelu, 128, 128, 32, 4, 2, 2, EpiGeluTanh, false, false, 128, NoStage)
CUSYNC_GEMM_KERNEL(gemm_128x256x32_s3_w2x4_r, 128, 256, 32, 3, 2, 4, EpiIdentity, false, true, 128, NoStage)
CUSYNC_GEMM_KERNEL(gemm_64x128x64_s3_swiglu_r, 64, 128, 64, 3, 2, 2, EpiIdentity, true, true, 128, NoStage)
CUSYNC_GEMM_KERNEL(gemm_64x64x64_s5_gelu_erf, 64, 64, 64, 5, 2, 2, EpiGeluErf, false, false, 64, NoStage)
