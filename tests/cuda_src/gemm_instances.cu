// Compile-only instantiations of runtime_cuda/kernels/gemm.cuh (used by tests/test_kernels_compile.py):
// every epilogue, every SwiGLU mode, reorder on/off, NoStage and the runtime's CuStage.
#include <cusync/cusync.h>
#include <kernels/gemm.cuh>

using cusync_kernels::EpiGeluErf;
using cusync_kernels::EpiGeluTanh;
using cusync_kernels::EpiIdentity;
using cusync_kernels::NoStage;

// GPT-3 first GeMM (GeLU), second GeMM (plain, reorder), LLaMA third GeMM (SwiGLU A operand).
CUSYNC_GEMM_KERNEL(gemm_128x128x32_s4_gelu, 128, 128, 32, 4, 2, 2, EpiGeluTanh, 0, false, 128, NoStage)
CUSYNC_GEMM_KERNEL(gemm_128x256x32_s3_w2x4_r, 128, 256, 32, 3, 2, 4, EpiIdentity, 0, true, 128, NoStage)
CUSYNC_GEMM_KERNEL(gemm_64x256x32_s4_w2x4_swiglu_h2_r, 64, 256, 32, 4, 2, 4, EpiIdentity, 2, true, 128, NoStage)
CUSYNC_GEMM_KERNEL(gemm_64x64x64_s5_gelu_erf, 64, 64, 64, 5, 2, 2, EpiGeluErf, 0, false, 64, NoStage)

// LLaMA M=1024 with the runtime: [W1|V] GeMM (43 x 8 tiles) posts per tile, the SwiGLU GeMM
// (64 x 8 tiles) waits per producer tile, reorder on, SwiGLU combined in shared memory.
using LlamaProd = cusync::CuStage<cusync::RowMajor<43, 8>, cusync::TileSync<43, 8>>;
using LlamaCons = cusync::CuStage<cusync::RowMajor<64, 8>, cusync::NoSync, cusync::TileSync<43, 8>>;
CUSYNC_GEMM_KERNEL(llama_w1v_128x128x32_tilesync, 128, 128, 32, 4, 2, 2, EpiIdentity, 0, false, 128, LlamaProd)
CUSYNC_GEMM_KERNEL(llama_w2_swiglu_sm_128x128x32_tilesync_r, 128, 128, 32, 4, 2, 2, EpiIdentity, 3, true, 128,
                   LlamaCons)
