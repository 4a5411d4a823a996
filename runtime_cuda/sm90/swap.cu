// The swapped GeMM of token generation, compiled once per CUSYNC_SM90_SWAP line of configs.def: the
// build passes -DCUSYNC_SM90_SWAP_FN=swap_<NAME> -DCUSYNC_SM90_BT=.. -DCUSYNC_SM90_BW=..
// -DCUSYNC_SM90_BK=.. -DCUSYNC_SM90_CW=.. -DCUSYNC_SM90_STAGES=.. -DCUSYNC_SM90_XA=.. -DCUSYNC_SM90_KS=..
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
// HBM streams the weights while the previous grid ends. The weight's loads carry the evict-first L2
// hint (each byte is read once a launch), so that X, Y and the next kernel's operands stay in L2.
// Not synchronized per tile: the stream orders of the decode MLP (docs/sm90.md, "Token generation").
//
// XA (the wide form, CUSYNC_SM90_XA 1): the operands as a user writes them, X as CUTLASS's A operand
// (BT = 64 token rows, wgmma's M) and the weight as B, N-major in groups of G = BW rows ([N / G, K, G],
// the same packing), so that a tile is 64 tokens x BW weight rows with BW any multiple of 16: where
// N / 64 tiles leave a wave partial on 132 SMs (GPT-3's 6144 and 12288 rows: 96 and 192 tiles), BW =
// 96 fits them in 64 and 128, and X's tile is read once for BW weight rows, not 64. Its load warp
// issues every stage's weight (B) tiles before griddepcontrol.wait likewise.
//
// KS > 1 (swap_splitk.cuh): a 64-row tile's K split over a cluster of KS CTAs, the partial sums
// added in the first CTA's shared memory before its epilogue (every epilogue from registers), so that
// a narrow weight (fewer 64-row tiles than SMs) streams on KS times as many SMs.
//
// Epilogues: identity and GeLU-tanh through CUTLASS's TMA epilogue; SwiGLU (CUSYNC_SM90_EPI_SWIGLU_ROWS)
// through RegisterEpilogue below (SwigluRows, SwigluCols), for a weight whose gate and up rows
// interleave by 8 so that each thread's accumulator holds both rows of a pair.
#include <cuda_runtime.h>

#include "cute/tensor.hpp"
#include "cutlass/arch/barrier.h"
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
#include "swap_splitk.cuh"

#if !defined(CUSYNC_SM90_SWAP_FN) || !defined(CUSYNC_SM90_BT) || !defined(CUSYNC_SM90_BW) || \
    !defined(CUSYNC_SM90_BK) || !defined(CUSYNC_SM90_CW) || !defined(CUSYNC_SM90_STAGES) || !defined(CUSYNC_SM90_XA) || \
    !defined(CUSYNC_SM90_KS)
#error "swap.cu is compiled once per CUSYNC_SM90_SWAP line of configs.def, its fields given with -D (see above)"
#endif
#if defined(CUTLASS_ENABLE_GDC_FOR_SM90)
#error "swap.cu waits for the previous grid itself (MainloopSync::pdl_wait), after its first weight loads"
#endif

namespace cusync_sm90 {
namespace {

// SwiGLU in the epilogue, stored from registers (operator-style, as CUTLASS's DefaultEpilogue, which
// RegisterEpilogue extends for its types and arguments; ptr_D is Y and dD its stride in Layout; Y is
// M x N / 2 halves, a few hundred KB at decode). Store::apply(problem_shape, blk_coord, acc,
// tiled_mma, thread_idx, y, ldy, smem) writes one tile; smem is the kernel's tensor storage, the
// mainloop's stages and the epilogue's in one union (the non-persistent kernel), free once every
// consumer warp's wgmmas are done. KS > 1: the tile's K split over a cluster (swap_splitk.cuh); the
// epilogue's shared storage, KS - 1 partial sums of PARTIAL floats a thread of the warp group, shares
// that union, and only the cluster's first CTA stores the sum.
template <class Layout, class Store, int KS = 1, int PARTIAL = 0>
struct RegisterEpilogue
    : cutlass::epilogue::collective::DefaultEpilogue<
          cutlass::half_t, cutlass::detail::TagToStrideC_t<Layout>, cutlass::detail::TagToStrideC_t<Layout>,
          cutlass::epilogue::thread::LinearCombination<cutlass::half_t, 1, float, float>,
          cutlass::epilogue::NoSmemWarpSpecialized> {
  using Base = cutlass::epilogue::collective::DefaultEpilogue<
      cutlass::half_t, cutlass::detail::TagToStrideC_t<Layout>, cutlass::detail::TagToStrideC_t<Layout>,
      cutlass::epilogue::thread::LinearCombination<cutlass::half_t, 1, float, float>,
      cutlass::epilogue::NoSmemWarpSpecialized>;
  using typename Base::Params;
  struct SplitStorage {
    alignas(128) float partial[(KS > 1 ? KS - 1 : 1) * (PARTIAL > 0 ? PARTIAL : 1) * cutlass::NumThreadsPerWarpGroup];
  };
  using SharedStorage = cute::conditional_t<KS == 1, typename Base::SharedStorage, SplitStorage>;
  static_assert(KS == 1 || PARTIAL > 0);

  CUTLASS_HOST_DEVICE
  RegisterEpilogue(Params const& params, SharedStorage const& = SharedStorage()) : Base(params), out_(params) {}

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine, class FrgLayout,
            class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK, BlockCoordMNKL blk_coord_mnkl,
                                 cute::Tensor<FrgEngine, FrgLayout> const& acc, TiledMma tiled_mma, ResidueMNK,
                                 int thread_idx, char* smem) {
    // Y's token stride: the column-major Y^T's second mode, the row-major Y's first
    const int64_t ldy = cute::get<cute::is_same_v<Layout, cutlass::layout::ColumnMajor> ? 1 : 0>(out_.dD);
    if constexpr (KS == 1) {
      Store::template apply<BlockShapeMNK>(problem_shape_mnkl, blk_coord_mnkl, acc, tiled_mma, thread_idx, out_.ptr_D,
                                           ldy, smem);
    } else {
      static_assert(decltype(cute::size(acc))::value == PARTIAL);
      auto sum = cute::make_fragment_like(acc);
      cute::copy(acc, sum);
      if (!cluster_reduce<KS>(sum, thread_idx, smem)) return;
      // the first split's tile as the real problem's (the group's one tile, blk m = 0)
      auto blk = cute::make_coord(0, cute::get<1>(blk_coord_mnkl), cute::get<2>(blk_coord_mnkl),
                                  cute::get<3>(blk_coord_mnkl));
      Store::template apply<BlockShapeMNK>(split_real_problem<KS>(problem_shape_mnkl), blk, sum, tiled_mma,
                                           thread_idx, out_.ptr_D, ldy, smem);
    }
  }

 private:
  Params out_;
};

// The swapped tile (Y^T = W X^T): the weight's rows interleave gate and up by 8 ([W1 rows 8b..8b+7 |
// V rows 8b..8b+7] for every b), so accumulator row 16j + i (i < 8) is a gate row and 16j + 8 + i its
// up row, and Y[:, 8 (r / 16) + r % 8] = silu(acc[r, :]) * acc[r + 8, :] for gate rows r. In wgmma's
// 64 x N accumulator (cute's CLayout_64xN) a thread's values (2, 2, N / 8) are (column pair, row + 8,
// column block): values i and i + 2 (i % 4 < 2) are the gate and up rows of one output, in the same
// thread. A thread's outputs are one column of Y at 2 BT / 8 tokens, so they go through shared memory
// (the tile's 32 columns x BT tokens, 4 KB at BT = 64) and leave as 16-byte stores of whole token
// rows (64 bytes of Y each): one store per 8 outputs instead of one per output.
template <int BT>
struct SwigluRows {
  template <class BlockShapeMNK, class ProblemShapeMNKL, class BlockCoordMNKL, class Acc, class TiledMma>
  CUTLASS_DEVICE static void apply(ProblemShapeMNKL problem_shape_mnkl, BlockCoordMNKL blk_coord_mnkl, Acc const& acc,
                                   TiledMma tiled_mma, int thread_idx, cutlass::half_t* y, int64_t ldy, char* smem) {
    using namespace cute;
    static_assert(size<0>(BlockShapeMNK{}) == 64 && size<1>(BlockShapeMNK{}) == BT);
    static_assert(is_same_v<typename TiledMma::CLayout, SM90::GMMA::CLayout_64xN<BT>> && size(TiledMma{}) == 128,
                  "one warp group's 64 x BT wgmma accumulator");
    constexpr int kThreads = cutlass::NumThreadsPerWarpGroup, kCols = 32;  // a 64-row tile's outputs
    // the packed weight's batches: tile m of batch l is weight tile l x (group rows / 64) + m
    const int group = get<0>(problem_shape_mnkl), batches = get<3>(problem_shape_mnkl);
    const int tokens = get<1>(problem_shape_mnkl);
    const int tile_m = get<3>(blk_coord_mnkl) * (group / 64) + get<0>(blk_coord_mnkl);
    const int tile_n = get<1>(blk_coord_mnkl);
    Tensor cD = local_tile(make_identity_tensor(make_shape(group * batches, tokens)), Shape<_64, Int<BT>>{},
                           make_coord(tile_m, tile_n));
    Tensor tCcD = tiled_mma.get_thread_slice(thread_idx).partition_C(cD);
    cutlass::half_t* tile = reinterpret_cast<cutlass::half_t*>(smem);  // [BT tokens][32 columns]
    // every consumer warp's wgmmas have read their stages (each waited for its own in mma_tail)
    cutlass::arch::NamedBarrier::sync(kThreads, cutlass::arch::ReservedNamedBarriers::EpilogueBarrier);
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(acc); ++i) {
      if (i % 4 >= 2) continue;  // an up row: read with its gate row
      const int r = get<0>(tCcD(i)) - tile_m * 64, t = get<1>(tCcD(i)) - tile_n * BT;
      const float g = acc(i), u = acc(i + 2);
      tile[t * kCols + (r / 16) * 8 + r % 8] = cutlass::half_t(g / (1.f + __expf(-g)) * u);
    }
    cutlass::arch::NamedBarrier::sync(kThreads, cutlass::arch::ReservedNamedBarriers::EpilogueBarrier);
    CUTLASS_PRAGMA_UNROLL
    for (int c = thread_idx; c < BT * kCols / 8; c += kThreads) {
      const int t = c / (kCols / 8), q = c % (kCols / 8);
      if (tile_n * BT + t < tokens) {
        *reinterpret_cast<uint4*>(y + (tile_n * BT + t) * ldy + tile_m * kCols + q * 8) =
            *reinterpret_cast<const uint4*>(tile + t * kCols + q * 8);
      }
    }
  }
};

// A swapped 64-row tile stored from registers by epilogue EPI (store_swapped_tile, swap_chain.cuh: a
// 2-byte store an output), the split's epilogue (KS > 1) after the cluster's sum.
template <int BT, int EPI>
struct SwappedRows {
  template <class BlockShapeMNK, class ProblemShapeMNKL, class BlockCoordMNKL, class Acc, class TiledMma>
  CUTLASS_DEVICE static void apply(ProblemShapeMNKL problem_shape_mnkl, BlockCoordMNKL blk_coord_mnkl, Acc const& acc,
                                   TiledMma tiled_mma, int thread_idx, cutlass::half_t* y, int64_t ldy, char*) {
    static_assert(cute::size<0>(BlockShapeMNK{}) == 64 && cute::size<1>(BlockShapeMNK{}) == BT);
    // the packed weight's batches: tile m of batch l is weight tile l x (group rows / 64) + m
    const int group = cute::get<0>(problem_shape_mnkl), batches = cute::get<3>(problem_shape_mnkl);
    store_swapped_tile<BT>(EPI, acc, tiled_mma, thread_idx,
                           cute::get<3>(blk_coord_mnkl) * (group / 64) + cute::get<0>(blk_coord_mnkl),
                           cute::get<1>(blk_coord_mnkl), group * batches, cute::get<1>(problem_shape_mnkl), y, ldy);
  }
};

// The wide tile (XA: Y = X W^T): the same weight order, which in wgmma's 64 x BW accumulator (tokens
// x weight rows) puts a thread's gate column c (c % 16 < 8) at value i and its up column c + 8 at
// value i + 4 (values (column pair, row + 8, column block)), so Y[t, 8 (c / 16) + c % 8] =
// silu(acc[t, c]) * acc[t, c + 8].
template <int BW>
struct SwigluCols {
  template <class BlockShapeMNK, class ProblemShapeMNKL, class BlockCoordMNKL, class Acc, class TiledMma>
  CUTLASS_DEVICE static void apply(ProblemShapeMNKL problem_shape_mnkl, BlockCoordMNKL blk_coord_mnkl, Acc const& acc,
                                   TiledMma tiled_mma, int thread_idx, cutlass::half_t* y, int64_t ldy, char*) {
    using namespace cute;
    static_assert(size<0>(BlockShapeMNK{}) == 64 && size<1>(BlockShapeMNK{}) == BW && BW % 16 == 0);
    static_assert(is_same_v<typename TiledMma::CLayout, SM90::GMMA::CLayout_64xN<BW>> && size(TiledMma{}) == 128,
                  "one warp group's 64 x BW wgmma accumulator");
    static_assert(decltype(size(acc))::value == BW / 2);
    // the packed weight's batches: batch l is weight rows [l BW, (l + 1) BW); one tile of BW a batch
    const int tokens = get<0>(problem_shape_mnkl), row0 = get<0>(blk_coord_mnkl) * 64;
    const int col0 = get<3>(blk_coord_mnkl) * (BW / 2);
    Tensor tCcD = tiled_mma.get_thread_slice(thread_idx).partition_C(make_identity_tensor(Shape<_64, Int<BW>>{}));
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
};

template <class Store, class Layout, int KS = 1, int PARTIAL = 0>
using RegisterEpilogueOp =
    cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<RegisterEpilogue<Layout, Store, KS, PARTIAL>>;

// CUTLASS's TMA epilogue of a tile shape, cluster shape and Y's layout (identity, GeLU).
template <class TileShape, class ClusterShape, class Layout, class Fusion>
using TmaEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float, cutlass::half_t, Layout, 8, cutlass::half_t, Layout,
    8, cutlass::epilogue::TmaWarpSpecialized, Fusion>::CollectiveOp;

// The GeMM of a mainloop and epilogue: CUTLASS's stock collective of those layouts and tiles, its load
// warp issuing every stage's weight tiles (A where kWeightA, else B) before the PDL wait. STAGES 0:
// as many stages as shared memory holds beside the epilogue's (KS > 1: the epilogue's storage is the
// split sums', which the non-persistent kernel's union puts over the stages). KS > 1: the problem's
// M is KS tiles a batch, one tile's splits in a cluster (ClusterSplitK).
template <class LayoutA, class LayoutB, class TileShape, class ClusterShape, int STAGES, bool kWeightA, class Epi,
          int KS = 1>
struct WeightFirstGemm {
  using Stages = cute::conditional_t<
      STAGES == 0,
      cutlass::gemm::collective::StageCountAutoCarveout<KS == 1 ? static_cast<int>(sizeof(typename Epi::SharedStorage))
                                                                : 0>,
      cutlass::gemm::collective::StageCount<(STAGES > 0 ? STAGES : 2)>>;
  using Sync = cusync::sm90::SyncCollectiveMma<typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::half_t, LayoutA, 8, cutlass::half_t, LayoutB, 8,
      float, TileShape, ClusterShape, Stages, cutlass::gemm::KernelTmaWarpSpecialized>::CollectiveOp,
                                               cusync::NoSync, void, kWeightA, /*kWeightAhead=*/true>;
  using Main = cute::conditional_t<KS == 1, Sync, ClusterSplitK<Sync, KS>>;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Main, Epi>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  static_assert(KS == 1 || sizeof(typename Sync::TensorStorage) >= sizeof(typename Epi::SharedStorage),
                "the split sums fit in the stages' shared memory");

  // One launch of problem (M, N, K, L) on A, B and D = Y (its strides given), triggering the next
  // grid at its start and, with pdl, waiting for the previous one after the weight's first loads.
  template <class StrideA, class StrideB, class StrideD>
  static int run(cute::Shape<int, int, int, int> problem, const void* A, StrideA sA, const void* B, StrideB sB,
                 void* Y, StrideD sD, bool pdl, cudaStream_t stream) {
    using Half = cutlass::half_t;
    typename Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm, problem,
        typename Main::Arguments({static_cast<const Half*>(A), sA, static_cast<const Half*>(B), sB},
                                 cusync::sm90::MainloopSync{nullptr, nullptr, /*trigger=*/true, /*pdl_wait=*/pdl,
                                                            /*evict_first=*/true}),
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

// The swapped GeMM: (G, M, K, N / G), A = the packed W (G rows M-major a batch), B = X [M, K] K-major
// in every batch, D = Y^T [G, M] column-major a batch, G columns of Y apart (ldy: Y's row stride).
// KS > 1: (KS G, M, K, N / G) to the kernel, G = BW (ClusterSplitK).
template <int BT, int BW, int BK, int CW, int STAGES, class Epi, int KS = 1>
int run_swapped(const void* W, const void* X, void* Y, int M, int N, int K, int ldy, bool pdl, cudaStream_t stream) {
  using namespace cute;
  using G_ = WeightFirstGemm<cutlass::layout::ColumnMajor, cutlass::layout::ColumnMajor, Shape<Int<BW>, Int<BT>, Int<BK>>,
                       Shape<Int<CW>, _1, _1>, STAGES, /*kWeightA=*/true, Epi, KS>;
  static_assert(KS == 1 || CW == 1, "the splits' cluster is the only one");
  using Kernel = typename G_::Kernel;
  constexpr int G = BW * CW;
  const int L = N / G;
  auto sA = swap_pack_stride<typename Kernel::StrideA>(G, K, L);
  auto sB = cutlass::make_cute_packed_stride(typename Kernel::StrideB{}, make_shape(M, K, 1));
  get<2>(sB) = 0;
  auto sD = cutlass::make_cute_packed_stride(typename Kernel::StrideD{}, make_shape(G, M, 1));
  get<1>(sD) = static_cast<int64_t>(ldy);
  get<2>(sD) = static_cast<int64_t>(G);
  return G_::run({KS * G, M, K, L}, W, sA, X, sB, Y, sD, pdl, stream);
}

// The wide form (XA): (M, G, K, N / G), A = X [M, K] K-major in every batch (batch stride 0), B = the
// packed W (G rows N-major a batch), D = Y [M, G] row-major a batch, G columns of Y apart (SwiGLU:
// G / 2).
template <int BW, int BK, int STAGES, class Epi>
int run_wide(const void* W, const void* X, void* Y, int M, int N, int K, int ldy, bool swiglu, bool pdl,
             cudaStream_t stream) {
  using namespace cute;
  using G_ = WeightFirstGemm<cutlass::layout::RowMajor, cutlass::layout::RowMajor, Shape<_64, Int<BW>, Int<BK>>,
                       Shape<_1, _1, _1>, STAGES, /*kWeightA=*/false, Epi>;
  using Kernel = typename G_::Kernel;
  constexpr int G = BW;
  const int L = N / G;
  auto sA = cutlass::make_cute_packed_stride(typename Kernel::StrideA{}, make_shape(M, K, 1));
  get<2>(sA) = 0;
  auto sB = cutlass::make_cute_packed_stride(typename Kernel::StrideB{}, make_shape(G, K, L));
  auto sD = cutlass::make_cute_packed_stride(typename Kernel::StrideD{}, make_shape(M, G, 1));
  get<0>(sD) = static_cast<int64_t>(ldy);
  get<2>(sD) = static_cast<int64_t>(swiglu ? G / 2 : G);
  return G_::run({M, G, K, L}, X, sA, W, sB, Y, sD, pdl, stream);
}

using Identity = cutlass::epilogue::fusion::LinearCombination<cutlass::half_t, float, cutlass::half_t, float>;
using GeluTanh = cutlass::epilogue::fusion::LinCombEltAct<cutlass::epilogue::thread::GELU_taylor, cutlass::half_t,
                                                          float, cutlass::half_t, float>;

}  // namespace

int CUSYNC_SM90_SWAP_FN(int epilogue, const void* W, const void* X, void* Y, int M, int N, int K, int ldy, int pdl,
                        cudaStream_t stream) {
  constexpr int BT = CUSYNC_SM90_BT, BW = CUSYNC_SM90_BW, BK = CUSYNC_SM90_BK, CW = CUSYNC_SM90_CW;
  constexpr int S = CUSYNC_SM90_STAGES;
  [[maybe_unused]] constexpr int KS = CUSYNC_SM90_KS;
  const int n_out = epilogue == CUSYNC_SM90_EPI_SWIGLU_ROWS ? N / 2 : N;
  if (N % (BW * CW) != 0 || K % 8 != 0 || M < 1 || ldy < n_out || ldy % 8 != 0 || reinterpret_cast<uintptr_t>(Y) % 16)
    return CUSYNC_SM90_BAD_SHAPE;  // Y's rows 16-byte aligned: TMA's stores and the SwiGLU epilogue's
#if CUSYNC_SM90_XA
  static_assert(BT == 64 && CW == 1 && BW % 16 == 0, "the wide form: 64 token rows, BW a multiple of 16");
  using Tile = cute::Shape<cute::_64, cute::Int<BW>, cute::Int<BK>>;
  using One = cute::Shape<cute::_1, cute::_1, cute::_1>;
  using Yr = cutlass::layout::RowMajor;
  switch (epilogue) {
    case CUSYNC_SM90_EPI_IDENTITY:
      return run_wide<BW, BK, S, TmaEpilogue<Tile, One, Yr, Identity>>(W, X, Y, M, N, K, ldy, false, pdl != 0, stream);
    case CUSYNC_SM90_EPI_GELU_TANH:
      return run_wide<BW, BK, S, TmaEpilogue<Tile, One, Yr, GeluTanh>>(W, X, Y, M, N, K, ldy, false, pdl != 0, stream);
    case CUSYNC_SM90_EPI_SWIGLU_ROWS:
      return run_wide<BW, BK, S, RegisterEpilogueOp<SwigluCols<BW>, Yr>>(W, X, Y, M, N, K, ldy, true, pdl != 0,
                                                                         stream);
    default:
      return CUSYNC_SM90_BAD_ARGUMENT;
  }
#elif CUSYNC_SM90_KS > 1
  static_assert(CW == 1 && BW == 64, "the split tile: one consumer warp group's 64 rows, clusters of the splits");
  constexpr int P = BT / 2;  // the warp group's accumulator floats a thread
  using YT = cutlass::layout::ColumnMajor;
  switch (epilogue) {
    case CUSYNC_SM90_EPI_IDENTITY:
      return run_swapped<BT, BW, BK, CW, S, RegisterEpilogueOp<SwappedRows<BT, CUSYNC_SM90_EPI_IDENTITY>, YT, KS, P>,
                         KS>(W, X, Y, M, N, K, ldy, pdl != 0, stream);
    case CUSYNC_SM90_EPI_GELU_TANH:
      return run_swapped<BT, BW, BK, CW, S, RegisterEpilogueOp<SwappedRows<BT, CUSYNC_SM90_EPI_GELU_TANH>, YT, KS, P>,
                         KS>(W, X, Y, M, N, K, ldy, pdl != 0, stream);
    case CUSYNC_SM90_EPI_SWIGLU_ROWS:
      return run_swapped<BT, BW, BK, CW, S, RegisterEpilogueOp<SwappedRows<BT, CUSYNC_SM90_EPI_SWIGLU_ROWS>, YT, KS, P>,
                         KS>(W, X, Y, M, N, K, ldy, pdl != 0, stream);
    default:
      return CUSYNC_SM90_BAD_ARGUMENT;
  }
#else
  using Tile = cute::Shape<cute::Int<BW>, cute::Int<BT>, cute::Int<BK>>;
  using Cluster = cute::Shape<cute::Int<CW>, cute::_1, cute::_1>;
  using YT = cutlass::layout::ColumnMajor;  // Y^T column-major: Y row-major
  switch (epilogue) {
    case CUSYNC_SM90_EPI_IDENTITY:
      return run_swapped<BT, BW, BK, CW, S, TmaEpilogue<Tile, Cluster, YT, Identity>>(W, X, Y, M, N, K, ldy,
                                                                                      pdl != 0, stream);
    case CUSYNC_SM90_EPI_GELU_TANH:
      return run_swapped<BT, BW, BK, CW, S, TmaEpilogue<Tile, Cluster, YT, GeluTanh>>(W, X, Y, M, N, K, ldy,
                                                                                      pdl != 0, stream);
    case CUSYNC_SM90_EPI_SWIGLU_ROWS:
      return run_swapped<BT, BW, BK, CW, S, RegisterEpilogueOp<SwigluRows<BT>, YT>>(W, X, Y, M, N, K, ldy, pdl != 0,
                                                                                    stream);
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
#if CUSYNC_SM90_XA || CUSYNC_SM90_KS > 1
  return CUSYNC_SM90_BAD_CONFIG;  // the one-launch chain runs on the swapped tiles of one CTA only
#else
  return SwapChain<CUSYNC_SM90_BT, CUSYNC_SM90_BW, CUSYNC_SM90_BK, CUSYNC_SM90_STAGES>::run(
      epilogue1, W1, X, Y, W2, Z, M, N1, K1, N2, ldy, ldz, sync, timeout_ns, stream);
#endif
}

}  // namespace cusync_sm90
