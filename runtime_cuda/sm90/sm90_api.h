// The C interface of the synchronized sm90 GeMM library (libcusync_sm90.so): plain structs that
// Python mirrors with ctypes (cusyncgen/cuda/sm90/desc.py; abi.h exports their layouts). Every function returns 0 or an error code:
// a cudaError_t value (> 0 and < 10000), or one of CusyncSm90Status (>= 10000).
#pragma once
#include <stdint.h>

#include "cusync/debug.h"
#include "cusync/desc.h"

#ifdef __cplusplus
extern "C" {
#endif

enum CusyncSm90Status {
  CUSYNC_SM90_OK = 0,
  CUSYNC_SM90_BAD_CONFIG = 10001,     // no such tile configuration in this library
  CUSYNC_SM90_BAD_SHAPE = 10002,      // N or K not a multiple of the tile, or alignment
  CUSYNC_SM90_BAD_ARGUMENT = 10003,   // null pointer, n_gemms not 1 .. CUSYNC_SM90_MAX_GEMMS, bad epilogue, ...
  CUSYNC_SM90_TMA_DESCRIPTOR = 10004, // cuTensorMapEncodeTiled failed (through CUTLASS)
};

// Epilogues, applied in fp32 to the accumulators before the fp16 store.
enum CusyncSm90Epilogue {
  CUSYNC_SM90_EPI_IDENTITY = 0,
  CUSYNC_SM90_EPI_GELU_TANH = 1,  // 0.5 x (1 + tanh(0.79788456 (x + 0.044715 x^3))), as kernels/gemm.cuh
  CUSYNC_SM90_EPI_GELU_ERF = 2,   // 0.5 x (1 + erf(x / sqrt 2))
  CUSYNC_SM90_EPI_SWIGLU_PAIR = 3, // B's rows [W1|V] interleaved by 64: out[:, 64b + j] = silu(acc[:, 128b + j]) * acc[:, 128b + 64 + j]
  CUSYNC_SM90_EPI_SWIGLU_ROWS = 4  // the swapped GeMM's weight rows [W1|V] interleaved by 8: out[:, 8b + j] = silu(acc[:, 16b + j]) * acc[:, 16b + 8 + j]
};

// Epilogue store modes (CusyncSm90Gemm.store).
enum CusyncSm90Store {
  CUSYNC_SM90_STORE_QUAD = 0,  // the 4 threads of a quad exchange fp16 pairs (shuffles): 16-byte stores, full sectors
  CUSYNC_SM90_STORE_PAIR = 1,  // each thread stores its fp16 pairs (4-byte stores, half of each 32-byte sector)
};

// Launch flags.
enum CusyncSm90Flags {
  CUSYNC_SM90_PDL_TRIGGER = 1,  // griddepcontrol.launch_dependents at the start of every CTA
  CUSYNC_SM90_PDL_WAIT = 2,     // griddepcontrol.wait in the DMA warp before its first load ("PDL alone")
  CUSYNC_SM90_PDL_LAUNCH = 4,   // launch with cudaLaunchAttributeProgrammaticStreamSerialization
};

// The compiler's policy and order descriptors (runtime_cuda/cusync/desc.h) and the debug record
// every kernel family shares (cusync/debug.h).
typedef CusyncPolicyDesc CusyncSm90Policy;
typedef CusyncOrderDesc CusyncSm90Order;

// At most this many GeMMs in one plan (one persistent launch over a chain of dependent GeMMs).
#define CUSYNC_SM90_MAX_GEMMS 3

// One GeMM: C[M, N] = epilogue(A[M, K] B[N, K]^T); all row-major fp16, fp32 accumulation.
// ldc: C's row stride in elements (N, or N / 2 for the SwiGLU pair).
typedef struct {
  const void* A;
  const void* B;
  void* C;
  int32_t M, N, K, ldc;
  int32_t epilogue;        // CusyncSm90Epilogue
  CusyncSm90Order order;
  // Wait (consumer side): k-block k of a tile (x, y) reads the producer tiles (k * BK / in_tile_n, py, 0)
  // of every producer row block py its rows [y BM, (y + 1) BM) overlap (cusync::sm90::ColumnDeps: in_tile_m is
  // the producer's BM, 0 for this GeMM's own).
  CusyncSm90Policy in_policy;
  const uint32_t* in_sems; // null: no wait
  int32_t in_tile_n;       // the producer's output tile width (its BN, or BN / 2 for the SwiGLU pair)
  // Post (producer side): each finished tile t adds 1 to out_sems[out_policy.sem(t)].
  CusyncSm90Policy out_policy;
  uint32_t* out_sems;      // null: no post
  // Split-K: each tile's K extent in `splits` parts (0 or 1: none; at most K / BK), each its own work
  // item; the last part to finish sums the fp32 partials in part order (deterministic), runs the
  // epilogue and alone posts. The plan owns the partials' workspace and the self-resetting counters.
  int32_t splits;
  // The first tile (in the order) that is split: tiles [0, split_from) are one work item each, the
  // rest `splits` items each (0: every tile split). With split_from a multiple of the grid, the
  // tiles that fill whole waves run unsplit and only the last, partial wave's tiles are split
  // (data-parallel waves, then a split-K tail).
  int32_t split_from;
  // How the epilogue writes C (CusyncSm90Store): 0 quad-transposed 16-byte stores, 1 the register
  // epilogue's 4-byte fp16-pair stores.
  int32_t store;
  // The producer's row tile (its BM) where it differs from this GeMM's: a consumer tile then reads
  // BM / in_tile_m producer row blocks (or part of one); 0: the same BM. Both powers of two >= 64.
  int32_t in_tile_m;
} CusyncSm90Gemm;

// What the first wait that timed out saw: a zeroed record in device memory, passed to plan_create;
// failed != 0 after the launch means a wait gave up and the outputs are wrong (stage: the GeMM's
// index in the plan; tile_*: the producer tile; consumer_*: the waiting tile).
typedef CusyncDebugRecord CusyncSm90Debug;

// The prompt's attention stage synchronized (cusync_sm90_fmha_sync): CUTLASS's Hopper FMHA whose
// load warps wait for the QKV GeMM's tiles of their work item's head (Q rows of the item's query
// tile; K and V rows up to its last key, causal or not) and whose consumer warp groups post O's
// tiles once stored: O tile (head h, row block r) = rows [r CUSYNC_SM90_FMHA_O_ROWS, +ROWS) of
// [B S, NH D] at columns [h D, (h + 1) D) (each warp group's share of a query tile; S a multiple of
// the rows where out_sems is set).
#define CUSYNC_SM90_FMHA_O_ROWS 64
typedef struct {
  CusyncSm90Policy in_policy;   // the QKV GeMM's policy (sem and value of its tile (x, y, 0))
  const uint32_t* in_sems;      // null: no tile wait
  int32_t in_tile_m, in_tile_n; // the QKV GeMM's tile (BM, BN)
  CusyncSm90Policy out_policy;  // O's tiles (h, r, 0)
  uint32_t* out_sems;           // null: no post
  unsigned long long* ticket;   // a zeroed counter of the stage's waits (its epochs); needed with in_sems
  int32_t flags;                // CusyncSm90Flags
  int64_t timeout_ns;           // > 0: a wait gives up after this long and fills *debug (stage 1)
  CusyncSm90Debug* debug;
} CusyncSm90FmhaSync;

// Names of the tile configurations this library holds, comma-separated (e.g. "128x128x64,..."):
// configs.def's CUSYNC_SM90_TILE lines, in its order.
const char* cusync_sm90_configs(void);

// The hash of the sources the library was built from (cusyncgen/cuda/sm90/lib.py's source_hash,
// given to api.cu as -DCUSYNC_SM90_SOURCE_HASH; "unknown" without it): a prebuilt library
// (CUSYNC_SM90_LIB) is loaded only where it equals this checkout's.
const char* cusync_sm90_source_hash(void);

// A launch plan: one persistent kernel over n_gemms (1 .. CUSYNC_SM90_MAX_GEMMS; more than one: the
// chain in one launch, every tile of gemms[0] in its order, then every tile of gemms[1], ...). TMA descriptors are built here,
// once. `ticket`: a zeroed uint64 counter owned by this plan (epochs); may be null when no GeMM
// waits. grid <= 0: the number of SMs (capped by the number of tiles). timeout_ns > 0: a wait
// longer than that gives up and fills *debug (device memory; see CusyncSm90Debug), or, built
// with -DCUSYNC_DEBUG, prints the tile and semaphore and traps. 0: spin forever.
int cusync_sm90_plan_create(const char* config, const CusyncSm90Gemm* gemms, int n_gemms,
                            unsigned long long* ticket, int grid, int flags, long long timeout_ns,
                            CusyncSm90Debug* debug, void** plan_out);
int cusync_sm90_plan_launch(void* plan, void* stream);

// A/B reference, not synchronized: the stock CUTLASS sm90 GeMM (cooperative, TMA epilogue, persistent
// scheduler) with a tile of cusync_sm90_stock_configs(), cluster cluster_m x 1 (1 or 2); raster 0
// CUTLASS's heuristic, 1 along M, 2 along N; swizzle: the scheduler's max_swizzle_size. Same
// operands as a CusyncSm90Gemm without epilogue; launched on `stream` (arguments built each call).
const char* cusync_sm90_stock_configs(void);
int cusync_sm90_stock_gemm(const char* config, int cluster_m, const void* A, const void* B, void* C, int M, int N,
                           int K, int raster, int swizzle, void* stream);
// Token generation, not synchronized per tile: Y[M, N] = epilogue(X[M, K] W[N, K]^T) (epilogue
// CUSYNC_SM90_EPI_IDENTITY or _GELU_TANH; or _SWIGLU_ROWS, Y then [M, N / 2]; Y's row stride ldy) on
// the swapped GeMM of a configuration of cusync_sm90_swap_configs() (swap.cu: the weight as CUTLASS's
// A operand, tiles of BT tokens x BW weight rows); W packed by groups of G = BW x CW rows, each
// group's K x G block contiguous with its rows fastest (W [N, K] -> [N / G, K, G]); pdl 1: launched
// with programmatic stream serialization, its weight loads before the previous grid ends, X's after.
// N a multiple of G, K of 8.
const char* cusync_sm90_swap_configs(void);
int cusync_sm90_swap_gemm(const char* config, int epilogue, const void* W, const void* X, void* Y, int M, int N, int K,
                          int ldy, int pdl, void* stream);
// Both GeMMs of the MLP at token generation in one persistent launch on a swapped-GeMM config (its tile, clusters of
// one; swap_chain.cuh; W1 and W2 packed by groups of BW rows): Y [M, ldy] = epilogue1(X W1^T)
// (CUSYNC_SM90_EPI_SWIGLU_ROWS: N1 / 2 columns; _GELU_TANH or _IDENTITY: N1), Z [M, ldz] = Y W2^T (W2 [N2, Y's
// columns]). A second-GeMM tile waits (RowSync) until the first GeMM's tiles of its token rows have posted to `sync`
// (CUSYNC_SM90_CHAIN_SYNC_WORDS zeroed words, reset by each launch's last CTA); with timeout_ns > 0 (0: none) a wait
// longer than that gives up and leaves 1 + the tile's index in sync[5] and the count it saw in sync[6].
#define CUSYNC_SM90_CHAIN_SYNC_WORDS 8
int cusync_sm90_swap_mlp(const char* config, int epilogue1, const void* W1, const void* X, void* Y, const void* W2,
                         void* Z, int M, int N1, int K1, int N2, int ldy, int ldz, unsigned int* sync,
                         long long timeout_ns, void* stream);
int cusync_sm90_plan_grid(void* plan);
int cusync_sm90_plan_destroy(void* plan);
const char* cusync_sm90_error_string(int code);

#ifdef __cplusplus
}
#endif
