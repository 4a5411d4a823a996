"""The synchronized Hopper (sm90) GeMM library (runtime_cuda/sm90/, docs/sm90.md), by concern:

- tiles: the tile configurations, read from runtime_cuda/sm90/configs.def (the one list the
  library's instantiations and C table come from too); what a config's name says;
- lib: building libcusync_sm90.so (cached by its sources' hash) and loading it, its struct layouts
  and its sources checked (CUSYNC_SM90_LIB: a prebuilt one);
- desc: the C structs as ctypes mirrors, their constants, the descriptors made from the
  compiler's IR (policy, order, one GeMM);
- orders: the grouped, banded and clustered tile orders and the heuristics that size them;
- split: split-K and the model that picks it;
- launch: Plan (one persistent launch), the stock CUTLASS reference, and Sm90Chain, which turns a
  Config into plans through cusyncgen.cuda.chain.steps, the decoding every kernel family shares.

This package only re-exports their API. The MLP on these kernels (its models, compiled programs,
torch data and tile orders) is the workload cusyncgen.workloads.mlp_sm90; the build command is
``python -m cusyncgen.commands.sm90 build``.
"""
from cusyncgen.cuda.sm90.errors import Sm90Error
from cusyncgen.cuda.sm90.tiles import (CONFIGS, STOCK_CONFIGS, STOCK_TILES, SWAP_CONFIGS, SWAP_TILES, TILES, StockTile,
                                       SwapTile, Tile, cluster_m, order_grid, parse_configs, source_dir, swap_configs_for,
                                       swap_tile, tile_dims)
from cusyncgen.cuda.sm90.split import (ITEM_COST_K, NO_SPLIT, SPLIT_COST_K, Split, as_split, auto_splits, has_split,
                                       split_makespan)
from cusyncgen.cuda.sm90.desc import (CHAIN_SYNC_WORDS, EPI_GELU_ERF, EPI_GELU_TANH, EPI_IDENTITY, EPI_SWIGLU_PAIR, EPI_SWIGLU_ROWS,
                                      STORE_PAIR, STORE_QUAD, STORES, STRUCTS, SWIGLU_BLOCK, SWIGLU_ROWS_BLOCK,
                                      FMHA_O_ROWS, Debug, Epilogue, FmhaSync, Gemm, LaunchFlag, Order, Policy, Store,
                                      desc_sem, desc_tile, desc_value, gemm_desc, order_desc, permuted_policy,
                                      policy_desc, producer_rows, row_major_order)
from cusyncgen.cuda.sm90.orders import band_rows, banded_order, cluster_order, grouped_columns, grouped_order
from cusyncgen.cuda.sm90.lib import LIB_NAME, Library, build, library, library_path, source_hash
from cusyncgen.cuda.sm90.launch import (FMHA_SCHEDULES, POLICIES, RASTERS, Link, Plan, Sm90Chain, debug_message, fmha,
                                        fmha_heads, fmha_schedule, fmha_sync, plan_flags, stock_gemm, swap_gemm,
                                        chain_timed_out, packed_weight, swap_mlp, swap_pack, swiglu_rows)

__all__ = ["CONFIGS", "EPI_GELU_ERF", "EPI_GELU_TANH", "EPI_IDENTITY", "EPI_SWIGLU_PAIR", "EPI_SWIGLU_ROWS", "ITEM_COST_K",
           "LIB_NAME", "NO_SPLIT", "POLICIES", "RASTERS", "SPLIT_COST_K", "STOCK_CONFIGS", "STOCK_TILES", "STORES",
           "SWAP_CONFIGS", "SWAP_TILES", "SwapTile",
           "STORE_PAIR", "STORE_QUAD", "STRUCTS", "SWIGLU_BLOCK", "SWIGLU_ROWS_BLOCK", "TILES", "Debug", "Epilogue", "Gemm", "LaunchFlag",
           "Library", "Link", "Order", "Plan", "Policy", "Sm90Chain", "Sm90Error", "Split", "StockTile", "Store",
           "Tile", "as_split", "auto_splits", "band_rows", "banded_order", "build", "cluster_m", "cluster_order",
           "desc_sem", "desc_tile", "desc_value", "gemm_desc", "grouped_columns", "grouped_order", "has_split",
           "debug_message", "fmha", "fmha_heads", "fmha_schedule", "fmha_sync", "FMHA_O_ROWS", "FMHA_SCHEDULES",
           "FmhaSync", "library", "permuted_policy", "library_path", "order_desc", "order_grid", "parse_configs", "plan_flags", "policy_desc",
           "producer_rows", "row_major_order", "source_dir", "source_hash", "split_makespan", "stock_gemm",
           "swap_configs_for", "swap_gemm", "packed_weight", "swap_pack", "swap_tile", "swiglu_rows", "tile_dims", "swap_mlp", "chain_timed_out", "CHAIN_SYNC_WORDS"]
