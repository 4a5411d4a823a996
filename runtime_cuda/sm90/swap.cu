// The swapped GeMM of token generation, compiled once per CUSYNC_SM90_SWAP line of configs.def: the
// build passes -DCUSYNC_SM90_SWAP_FN=swap_<NAME> -DCUSYNC_SM90_BT=.. -DCUSYNC_SM90_BW=..
// -DCUSYNC_SM90_BK=.. -DCUSYNC_SM90_CW=.. -DCUSYNC_SM90_STAGES=.. -DCUSYNC_SM90_XA=..
//
// Y[M, N] = epilogue(X[M, K] W[N, K]^T) at M <= 64 rows, computed as Y^T = W X^T: CUTLASS's stock
// sm90 GemmUniversal (TMA warp-specialized, one consumer warp group, TMA epilogue) with the weight as
// its A operand, so that a tile is BW weight rows x BT tokens (wgmma's N as small as 8) instead of
// a 64-row token tile mostly empty at decode. The weight is packed (swap_pack_stride, sm90.swap_pack):
// each group of G = BW x CW rows stored as a K x G block, rows contiguous (Wp[g][k][r] = W[G g + r][k]),
// so that a tile's k-block is one contiguous run of bytes instead of BW rows K apart; CUTLASS sees a
// batched GeMM of N / G batches of G rows, A M-major, X shared by every batch (batch stride 0), Y^T's
// batch stride G. Clusters of CW CTAs along a group's rows share X's tile through TMA multicast.
// Y^T stored column-major is Y row-major. PDL: every CTA releases the
// next grid as it starts (a next grid not PDL-launched ignores it), and the load warp issues the
// weight (A) tiles of as many k-blocks as the pipeline has stages before griddepcontrol.wait, then
// X's (cusync::sm90::SyncCollectiveMma with kWeightA: the stock collective, its load swapped), so
// HBM streams the weights while the previous grid ends. Not synchronized per tile: the stream
// orders of the decode MLP (docs/sm90.md, "Token generation").
//
// XA (the wide form, CUSYNC_SM90_XA 1): the operands as a user writes them, X as CUTLASS's A operand
// (BT = 64 token rows, wgmma's M) and the weight as B, N-major in groups of G = BW rows ([N / G, K, G],
// the same packing), so that a tile is 64 tokens x BW weight rows with BW any multiple of 16: where
// N / 64 tiles leave a wave partial on 132 SMs (GPT-3's 6144 and 12288 rows: 96 and 192 tiles), BW =
// 96 fits them in 64 and 128, and X's tile is read once for BW weight rows, not 64. Its load warp
// issues every stage's weight (B) tiles before griddepcontrol.wait likewise.
//
// Epilogues: identity and GeLU-tanh through CUTLASS's TMA epilogue; SwiGLU (CUSYNC_SM90_EPI_SWIGLU_ROWS)
// through SwigluRows below, for a weight whose gate and up rows interleave by 8 so that each thread's
// accumulator holds both rows of a pair.
#include <cuda_runtime.h>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/default_epilogue.hpp"
#include "cutlass/epilogue/thread/linear_combination.h"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/epilogue/thread/activation.h"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"
#include "cusync/sm90/collective.h"
#include "sm90_api.h"
#include "swap_chain.cuh"

#if !defined(CUSYNC_SM90_SWAP_FN) || !defined(CUSYNC_SM90_BT) || !defined(CUSYNC_SM90_BW) || \
    !defined(CUSYNC_SM90_BK) || !defined(CUSYNC_SM90_CW) || !defined(CUSYNC_SM90_STAGES) || !defined(CUSYNC_SM90_XA)
#error "swap.cu is compiled once per CUSYNC_SM90_SWAP line of configs.def, its fields given with -D (see above)"
#endif
#if defined(CUTLASS_ENABLE_GDC_FOR_SM90)
#error "swap.cu waits for the previous grid itself (MainloopSync::pdl_wait), after its first weight loads"
#endif

namespace cusync_sm90 {
namespace {

// SwiGLU in the epilogue: the weight's rows interleave gate and up by 8 ([W1 rows 8b..8b+7 | V rows
// 8b..8b+7] for every b), so accumulator row 16j + i (i < 8) is a gate row and 16j + 8 + i its up row,
// and Y[:, 8 (r / 16) + r % 8] = silu(acc[r, :]) * acc[r + 8, :] for gate rows r. In wgmma's 64 x N
// accumulator (cute's CLayout_64xN) a thread's values (2, 2, N / 8) are (column pair, row + 8, column
// block): values i and i + 2 (i % 4 < 2) are the gate and up rows of one output, in the same thread
// (store_swapped_tile, swap_chain.cuh). Operator-style (as CUTLASS's DefaultEpilogue, which it extends
// for its types and arguments; ptr_D is Y and dD its column-major stride, ldy the token stride),
// stores straight from registers: Y is M x N / 2 halves, a few hundred KB at decode.
using SwigluBase = cutlass::epilogue::collective::DefaultEpilogue<
    cutlass::half_t, cutlass::detail::TagToStrideC_t<cutlass::layout::ColumnMajor>,
    cutlass::detail::TagToStrideC_t<cutlass::layout::ColumnMajor>,
    cutlass::epilogue::thread::LinearCombination<cutlass::half_t, 1, float, float>,
    cutlass::epilogue::NoSmemWarpSpecialized>;

template <int BT>
struct SwigluRows : SwigluBase {
  using Base = SwigluBase;
  using typename Base::Params;
  using typename Base::SharedStorage;

  CUTLASS_HOST_DEVICE
  SwigluRows(Params const& params, SharedStorage const& = SharedStorage()) : Base(params), out_(params) {}

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine, class FrgLayout,
            class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK, BlockCoordMNKL blk_coord_mnkl,
                                 cute::Tensor<FrgEngine, FrgLayout> const& acc, TiledMma tiled_mma, ResidueMNK,
                                 int thread_idx, char*) {
    static_assert(cute::size<0>(BlockShapeMNK{}) == 64 && cute::size<1>(BlockShapeMNK{}) == BT);
    // the packed weight's batches: tile m of batch l is weight tile l x (group rows / 64) + m
    const int group = cute::get<0>(problem_shape_mnkl), batches = cute::get<3>(problem_shape_mnkl);
    store_swapped_tile<BT>(CUSYNC_SM90_EPI_SWIGLU_ROWS, acc, tiled_mma, thread_idx,
                           cute::get<3>(blk_coord_mnkl) * (group / 64) + cute::get<0>(blk_coord_mnkl),
                           cute::get<1>(blk_coord_mnkl), group * batches, cute::get<1>(problem_shape_mnkl),
                           out_.ptr_D, cute::get<1>(out_.dD));
  }

 private:
  Params out_;
};

template <int BT, int BW, int BK, int CW, int STAGES, class Fusion>
struct TmaEpilogue {
  using Op = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cute::Shape<cute::Int<BW>, cute::Int<BT>, cute::Int<BK>>,
      cute::Shape<cute::Int<CW>, cute::_1, cute::_1>, cutlass::epilogue::collective::EpilogueTileAuto, float, float,
      cutlass::half_t, cutlass::layout::ColumnMajor, 8, cutlass::half_t, cutlass::layout::ColumnMajor, 8,
      cutlass::epilogue::TmaWarpSpecialized, Fusion>::CollectiveOp;
};

// Epi: the collective epilogue (TmaEpilogue<...>::Op, or CUTLASS's adapter of SwigluRows).
template <int BT, int BW, int BK, int CW, int STAGES, class Epi>
struct SwapGemm {
  using TileShape = cute::Shape<cute::Int<BW>, cute::Int<BT>, cute::Int<BK>>;
  using ClusterShape = cute::Shape<cute::Int<CW>, cute::_1, cute::_1>;
  using Half = cutlass::half_t;
  // STAGES 0: as many stages as shared memory holds beside the epilogue's
  using Stages = cute::conditional_t<
      STAGES == 0, cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epi::SharedStorage))>,
      cutlass::gemm::collective::StageCount<(STAGES > 0 ? STAGES : 2)>>;
  // the stock collective, its load warp issuing every stage's weight tiles before the PDL wait
  using Main = cusync::sm90::SyncCollectiveMma<typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Half, cutlass::layout::ColumnMajor, 8, Half,
      cutlass::layout::ColumnMajor, 8, float, TileShape, ClusterShape, Stages,
      cutlass::gemm::KernelTmaWarpSpecialized>::CollectiveOp,
                                               cusync::NoSync, void, /*kWeightA=*/true>;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Main, Epi>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  // The problem as CUTLASS sees it: (G, M, K, N / G), A = the packed W (G rows M-major a batch), B =
  // X [M, K] K-major in every batch, D = Y^T [G, M] column-major a batch, G columns of Y apart (ldy:
  // Y's row stride).
  static int run(const void* W, const void* X, void* Y, int M, int N, int K, int ldy, bool pdl, cudaStream_t stream) {
    using namespace cute;
    constexpr int G = BW * CW;
    const int L = N / G;
    auto sA = swap_pack_stride<typename Kernel::StrideA>(G, K, L);
    auto sB = cutlass::make_cute_packed_stride(typename Kernel::StrideB{}, make_shape(M, K, 1));
    cute::get<2>(sB) = 0;
    auto sD = cutlass::make_cute_packed_stride(typename Kernel::StrideD{}, make_shape(G, M, 1));
    cute::get<1>(sD) = static_cast<int64_t>(ldy);
    cute::get<2>(sD) = static_cast<int64_t>(G);
    typename Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {G, M, K, L},
        typename Main::Arguments({static_cast<const Half*>(W), sA, static_cast<const Half*>(X), sB},
                                 cusync::sm90::MainloopSync{nullptr, nullptr, /*trigger=*/true, /*pdl_wait=*/pdl}),
        {{}, static_cast<const Half*>(Y), sD, static_cast<Half*>(Y), sD}};
    args.epilogue.thread.alpha = 1.0f;
    args.epilogue.thread.beta = 0.0f;
    Gemm gemm;
    if (gemm.can_implement(args) != cutlass::Status::kSuccess) return CUSYNC_SM90_BAD_SHAPE;
    if (Gemm::get_workspace_size(args) != 0) return CUSYNC_SM90_BAD_ARGUMENT;  // the non-persistent kernel needs none
    if (gemm.initialize(args, nullptr, stream) != cutlass::Status::kSuccess) return CUSYNC_SM90_BAD_ARGUMENT;
    if (gemm.run(stream, nullptr, pdl) != cutlass::Status::kSuccess) {
      const cudaError_t e = cudaGetLastError();
      return e != cudaSuccess ? static_cast<int>(e) : CUSYNC_SM90_BAD_ARGUMENT;
    }
    return static_cast<int>(cudaGetLastError());
  }
};

// The wide form's SwiGLU (XA): the same weight order (gate and up rows interleaved by 8), which in
// wgmma's 64 x BW accumulator (tokens x weight rows) puts a thread's gate column c (c % 16 < 8) at
// value i and its up column c + 8 at value i + 4 (values (column pair, row + 8, column block)), so
// Y[t, 8 (c / 16) + c % 8] = silu(acc[t, c]) * acc[t, c + 8], stored from registers.
using SwigluColsBase = cutlass::epilogue::collective::DefaultEpilogue<
    cutlass::half_t, cutlass::detail::TagToStrideC_t<cutlass::layout::RowMajor>,
    cutlass::detail::TagToStrideC_t<cutlass::layout::RowMajor>,
    cutlass::epilogue::thread::LinearCombination<cutlass::half_t, 1, float, float>,
    cutlass::epilogue::NoSmemWarpSpecialized>;

template <int BW>
struct SwigluCols : SwigluColsBase {
  using Base = SwigluColsBase;
  using typename Base::Params;
  using typename Base::SharedStorage;

  CUTLASS_HOST_DEVICE
  SwigluCols(Params const& params, SharedStorage const& = SharedStorage()) : Base(params), out_(params) {}

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine, class FrgLayout,
            class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK, BlockCoordMNKL blk_coord_mnkl,
                                 cute::Tensor<FrgEngine, FrgLayout> const& acc, TiledMma tiled_mma, ResidueMNK,
                                 int thread_idx, char*) {
    using namespace cute;
    static_assert(size<0>(BlockShapeMNK{}) == 64 && size<1>(BlockShapeMNK{}) == BW && BW % 16 == 0);
    static_assert(is_same_v<typename TiledMma::CLayout, SM90::GMMA::CLayout_64xN<BW>> && size(TiledMma{}) == 128,
                  "one warp group's 64 x BW wgmma accumulator");
    static_assert(decltype(size(acc))::value == BW / 2);
    // the packed weight's batches: batch l is weight rows [l BW, (l + 1) BW); one tile of BW a batch
    const int tokens = get<0>(problem_shape_mnkl), row0 = get<0>(blk_coord_mnkl) * 64;
    const int col0 = get<3>(blk_coord_mnkl) * (BW / 2);
    Tensor tCcD = tiled_mma.get_thread_slice(thread_idx).partition_C(make_identity_tensor(Shape<_64, Int<BW>>{}));
    const int64_t ldy = get<0>(out_.dD);
    cutlass::half_t* y = out_.ptr_D;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(acc); ++i) {
      if ((i / 4) % 2 == 1) continue;  // an up column: read with its gate column
      const int t = row0 + get<0>(tCcD(i)), c = get<1>(tCcD(i));
      if (t < tokens) {
        const float g = acc(i), u = acc(i + 4);
        y[t * ldy + col0 + (c / 16) * 8 + c % 8] = cutlass::half_t(g / (1.f + __expf(-g)) * u);
      }
    }
  }

 private:
  Params out_;
};

template <int BW, int BK, class Fusion>
struct TmaEpilogueXA {
  using Op = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cute::Shape<cute::_64, cute::Int<BW>, cute::Int<BK>>,
      cute::Shape<cute::_1, cute::_1, cute::_1>, cutlass::epilogue::collective::EpilogueTileAuto, float, float,
      cutlass::half_t, cutlass::layout::RowMajor, 8, cutlass::half_t, cutlass::layout::RowMajor, 8,
      cutlass::epilogue::TmaWarpSpecialized, Fusion>::CollectiveOp;
};

// The wide form (XA): Y = epilogue(X W^T) with X as A and the packed weight as an N-major B.
template <int BW, int BK, int STAGES, class Epi>
struct WideGemm {
  using TileShape = cute::Shape<cute::_64, cute::Int<BW>, cute::Int<BK>>;
  using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;
  using Half = cutlass::half_t;
  using Stages = cute::conditional_t<
      STAGES == 0, cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epi::SharedStorage))>,
      cutlass::gemm::collective::StageCount<(STAGES > 0 ? STAGES : 2)>>;
  // the stock collective, its load warp issuing every stage's weight (B) tiles before the PDL wait
  using Main = cusync::sm90::SyncCollectiveMma<typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Half, cutlass::layout::RowMajor, 8, Half,
      cutlass::layout::RowMajor, 8, float, TileShape, ClusterShape, Stages,
      cutlass::gemm::KernelTmaWarpSpecialized>::CollectiveOp,
                                               cusync::NoSync, void, /*kWeightA=*/false, /*kWeightAhead=*/true>;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Main, Epi>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  // The problem as CUTLASS sees it: (M, G, K, N / G), A = X [M, K] K-major in every batch (batch
  // stride 0), B = the packed W (G rows N-major a batch), D = Y [M, G] row-major a batch, G columns of
  // Y apart (SwiGLU: G / 2).
  static int run(const void* W, const void* X, void* Y, int M, int N, int K, int ldy, bool swiglu, bool pdl,
                 cudaStream_t stream) {
    using namespace cute;
    constexpr int G = BW;
    const int L = N / G;
    auto sA = cutlass::make_cute_packed_stride(typename Kernel::StrideA{}, make_shape(M, K, 1));
    cute::get<2>(sA) = 0;
    auto sB = cutlass::make_cute_packed_stride(typename Kernel::StrideB{}, make_shape(G, K, L));
    auto sD = cutlass::make_cute_packed_stride(typename Kernel::StrideD{}, make_shape(M, G, 1));
    cute::get<0>(sD) = static_cast<int64_t>(ldy);
    cute::get<2>(sD) = static_cast<int64_t>(swiglu ? G / 2 : G);
    typename Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {M, G, K, L},
        typename Main::Arguments({static_cast<const Half*>(X), sA, static_cast<const Half*>(W), sB},
                                 cusync::sm90::MainloopSync{nullptr, nullptr, /*trigger=*/true, /*pdl_wait=*/pdl}),
        {{}, static_cast<const Half*>(Y), sD, static_cast<Half*>(Y), sD}};
    args.epilogue.thread.alpha = 1.0f;
    args.epilogue.thread.beta = 0.0f;
    Gemm gemm;
    if (gemm.can_implement(args) != cutlass::Status::kSuccess) return CUSYNC_SM90_BAD_SHAPE;
    if (Gemm::get_workspace_size(args) != 0) return CUSYNC_SM90_BAD_ARGUMENT;
    if (gemm.initialize(args, nullptr, stream) != cutlass::Status::kSuccess) return CUSYNC_SM90_BAD_ARGUMENT;
    if (gemm.run(stream, nullptr, pdl) != cutlass::Status::kSuccess) {
      const cudaError_t e = cudaGetLastError();
      return e != cudaSuccess ? static_cast<int>(e) : CUSYNC_SM90_BAD_ARGUMENT;
    }
    return static_cast<int>(cudaGetLastError());
  }
};

using Identity = cutlass::epilogue::fusion::LinearCombination<cutlass::half_t, float, cutlass::half_t, float>;
using GeluTanh = cutlass::epilogue::fusion::LinCombEltAct<cutlass::epilogue::thread::GELU_taylor, cutlass::half_t,
                                                          float, cutlass::half_t, float>;

}  // namespace

int CUSYNC_SM90_SWAP_FN(int epilogue, const void* W, const void* X, void* Y, int M, int N, int K, int ldy, int pdl,
                        cudaStream_t stream) {
  constexpr int BT = CUSYNC_SM90_BT, BW = CUSYNC_SM90_BW, BK = CUSYNC_SM90_BK, CW = CUSYNC_SM90_CW;
  constexpr int S = CUSYNC_SM90_STAGES;
  const int n_out = epilogue == CUSYNC_SM90_EPI_SWIGLU_ROWS ? N / 2 : N;
  if (N % (BW * CW) != 0 || K % 8 != 0 || M < 1 || ldy < n_out || ldy % 8 != 0) return CUSYNC_SM90_BAD_SHAPE;
#if CUSYNC_SM90_XA
  static_assert(BT == 64 && CW == 1 && BW % 16 == 0, "the wide form: 64 token rows, BW a multiple of 16");
  switch (epilogue) {
    case CUSYNC_SM90_EPI_IDENTITY:
      return WideGemm<BW, BK, S, typename TmaEpilogueXA<BW, BK, Identity>::Op>::run(W, X, Y, M, N, K, ldy, false,
                                                                                    pdl != 0, stream);
    case CUSYNC_SM90_EPI_GELU_TANH:
      return WideGemm<BW, BK, S, typename TmaEpilogueXA<BW, BK, GeluTanh>::Op>::run(W, X, Y, M, N, K, ldy, false,
                                                                                    pdl != 0, stream);
    case CUSYNC_SM90_EPI_SWIGLU_ROWS:
      return WideGemm<BW, BK, S, cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<SwigluCols<BW>>>::run(
          W, X, Y, M, N, K, ldy, true, pdl != 0, stream);
    default:
      return CUSYNC_SM90_BAD_ARGUMENT;
  }
#else
  switch (epilogue) {
    case CUSYNC_SM90_EPI_IDENTITY:
      return SwapGemm<BT, BW, BK, CW, S, typename TmaEpilogue<BT, BW, BK, CW, S, Identity>::Op>::run(
          W, X, Y, M, N, K, ldy, pdl != 0, stream);
    case CUSYNC_SM90_EPI_GELU_TANH:
      return SwapGemm<BT, BW, BK, CW, S, typename TmaEpilogue<BT, BW, BK, CW, S, GeluTanh>::Op>::run(
          W, X, Y, M, N, K, ldy, pdl != 0, stream);
    case CUSYNC_SM90_EPI_SWIGLU_ROWS:
      return SwapGemm<BT, BW, BK, CW, S,
                      cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<SwigluRows<BT>>>::run(
          W, X, Y, M, N, K, ldy, pdl != 0, stream);
    default:
      return CUSYNC_SM90_BAD_ARGUMENT;
  }
#endif
}

#define CUSYNC_SM90_CAT_(a, b) a##b
#define CUSYNC_SM90_CAT(a, b) CUSYNC_SM90_CAT_(a, b)
int CUSYNC_SM90_CAT(CUSYNC_SM90_SWAP_FN, _mlp)(int epilogue1, const void* W1, const void* X, void* Y, const void* W2,
                                                void* Z, int M, int N1, int K1, int N2, int ldy, int ldz,
                                                uint32_t* sync, long long timeout_ns, cudaStream_t stream) {
  if (epilogue1 != CUSYNC_SM90_EPI_SWIGLU_ROWS && epilogue1 != CUSYNC_SM90_EPI_GELU_TANH &&
      epilogue1 != CUSYNC_SM90_EPI_IDENTITY)
    return CUSYNC_SM90_BAD_ARGUMENT;
#if CUSYNC_SM90_XA
  return CUSYNC_SM90_BAD_CONFIG;  // the one-launch chain runs on the swapped tiles only
#else
  return SwapChain<CUSYNC_SM90_BT, CUSYNC_SM90_BW, CUSYNC_SM90_BK, CUSYNC_SM90_STAGES>::run(
      epilogue1, W1, X, Y, W2, Z, M, N1, K1, N2, ldy, ldz, sync, timeout_ns, stream);
#endif
}

}  // namespace cusync_sm90
