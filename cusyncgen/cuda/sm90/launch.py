"""Launching the sm90 library: a Plan (one persistent launch over one GeMM or the GeMMs of a chain,
its TMA descriptors built once), the stock CUTLASS reference, the swapped GeMM of token generation
(with its SwiGLU), and Sm90Chain, the sm90 family's side
of the one launch decoding: a Config becomes launches in cusyncgen.cuda.chain.steps (as for the
SM80 kernels), and each launch here becomes a Plan with the library's LaunchFlag (plan_flags):

- StreamSync: every GeMM its own plan, in stream order;
- PDL alone: the producer triggers its dependents, the consumer is PDL-launched and waits for the
  whole producer grid (griddepcontrol.wait) before its loads;
- <Policy>+PDL: the consumer PDL-launched, waiting on the tile semaphores instead;
- <Policy>+Chain (Ordering.PERSISTENT): one persistent plan holding every GeMM, every producer
  tile handed out before any consumer tile.

Launches take device pointers (ints) and a stream handle; the chain's semaphores, tickets and
debug record are torch tensors (zeroed once, never reset: the epochs advance). docs/sm90.md.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Sequence

from cusyncgen.cuda.chain import StageFlag, Step, launches, steps
from cusyncgen.cuda.configs import SM90_ORDERINGS, Config, Ordering
from cusyncgen.cuda.lazy import torch
from cusyncgen.cuda.sm90.desc import (CHAIN_SEEN, CHAIN_TIMED_OUT, EPI_SWIGLU_PAIR, EPI_SWIGLU_ROWS,
                                      SWIGLU_ROWS_BLOCK, Debug, FmhaSync, Gemm, LaunchFlag, policy_desc)
from cusyncgen.cuda.sm90.errors import Sm90Error
from cusyncgen.cuda.sm90.lib import library
from cusyncgen.cuda.sm90.tiles import swap_tile, tile_dims

# the policies the library's descriptors evaluate (cusync/desc.h)
POLICIES = ("TileSync", "RowSync")
RASTERS = {"heuristic": 0, "m": 1, "n": 2}
# CusyncSm90Debug as int32 words (the chain's record; 16 words leave room for fields it may gain)
DEBUG_WORDS = 16


class Plan:
    """One persistent launch over one GeMM or the GeMMs of a chain (its TMA descriptors built once)."""

    def __init__(self, config: str, gemms: list, ticket: int = 0, grid: int = 0, flags: LaunchFlag = LaunchFlag.NONE,
                 timeout_ns: int = 0, debug: int = 0):
        if not isinstance(flags, LaunchFlag):
            raise Sm90Error(f"plan flags: a LaunchFlag, not {flags!r} (cusyncgen.cuda.chain's StageFlag is the SM80 "
                            "kernels')")
        lib = library()
        if config not in lib.configs:
            raise Sm90Error(f"unknown sm90 config {config!r}; the library has {', '.join(lib.configs)}")
        arr = (Gemm * len(gemms))(*gemms)
        handle = ctypes.c_void_p()
        lib.check(lib.dll.cusync_sm90_plan_create(config.encode(), arr, len(gemms), ticket or None, grid, flags.value,
                                                  timeout_ns, debug or None, ctypes.byref(handle)),
                  f"sm90 plan ({config}, {len(gemms)} GeMM)")
        self.lib, self.handle, self.config, self.flags = lib, handle, config, flags
        self.grid = lib.dll.cusync_sm90_plan_grid(handle)

    def launch(self, stream: int = 0):
        self.lib.check(self.lib.dll.cusync_sm90_plan_launch(self.handle, ctypes.c_void_p(stream)), "sm90 launch")

    def __del__(self):
        if getattr(self, "handle", None):
            self.lib.dll.cusync_sm90_plan_destroy(self.handle)
            self.handle = None


def stock_gemm(config: str, cluster_m: int, A: int, B: int, C: int, M: int, N: int, K: int, raster: str = "heuristic",
               swizzle: int = 1, stream: int = 0):
    """One launch of the stock CUTLASS GeMM (the A/B reference; not synchronized, no epilogue)."""
    lib = library()
    if config not in lib.stock_configs:
        raise Sm90Error(f"no stock reference {config!r}; the library has {', '.join(lib.stock_configs)}")
    lib.check(lib.dll.cusync_sm90_stock_gemm(config.encode(), cluster_m, A, B, C, M, N, K, RASTERS[raster], swizzle,
                                             ctypes.c_void_p(stream)), f"stock CUTLASS GeMM {config} c{cluster_m}x1")


def _swap_library(config: str):
    """The library, which must have the swapped GeMM `config`."""
    lib = library()
    if config not in lib.swap_configs:
        raise Sm90Error(f"no swapped GeMM {config!r}; the library has {', '.join(lib.swap_configs)}")
    return lib


def swap_gemm(config: str, epilogue: int, W: int, X: int, Y: int, M: int, N: int, K: int, ldy: int = 0,
              pdl: bool = False, stream: int = 0):
    """One launch of the swapped GeMM of token generation (swap.cu): Y[M, N] = epilogue(X[M, K]
    W[N, K]^T), W given packed (swap_pack(w, the config's SwapTile.group); a wide-form config, its
    SwapTile.xa, reads the same packing as CUTLASS's B operand), epilogue EPI_IDENTITY or
    EPI_GELU_TANH; or EPI_SWIGLU_ROWS, W's rows gate and up interleaved by 8 (swiglu_rows, then
    packed) and Y [M, N / 2] = silu(X gate^T) * X up^T. Y's row stride ldy (0:
    its width); pdl: a PDL launch (its weight loads before griddepcontrol.wait, X's after the previous
    grid). Not synchronized per tile."""
    lib = _swap_library(config)
    ldy = ldy or (N // 2 if epilogue == EPI_SWIGLU_ROWS else N)
    lib.check(lib.dll.cusync_sm90_swap_gemm(config.encode(), epilogue, W, X, Y, M, N, K, ldy, int(pdl),
                                            ctypes.c_void_p(stream)), f"swapped GeMM {config} ({M} x {N} x {K})")


def swap_mlp(config: str, epilogue1: int, W1: int, X: int, Y: int, W2: int, Z: int, M: int, N1: int, K1: int,
             N2: int, sync: int, ldy: int = 0, ldz: int = 0, timeout_ns: int = 0, stream: int = 0):
    """Both GeMMs of the MLP in one persistent launch on swapped-GeMM config `config`
    (swap_chain.cuh; W1 and W2 given packed by swap_pack(w, its BW)): Y = epilogue1(X W1^T)
    (EPI_SWIGLU_ROWS: N1 / 2 columns, W1's rows as swiglu_rows orders them; EPI_GELU_TANH,
    EPI_IDENTITY: N1), Z = Y W2^T, a second-GeMM tile
    waiting (RowSync) for the first GeMM's tiles of its token rows. sync: CHAIN_SYNC_WORDS zeroed
    uint32 words of device memory, kept for every launch; timeout_ns > 0: a wait gives up after it
    (see chain_timed_out)."""
    lib = _swap_library(config)
    if not swap_tile(config).chains:
        raise Sm90Error(f"swapped MLP chain {config}: the one-launch chain runs on the swapped tiles of one CTA, not "
                        "the wide form (X as the A operand) or a K split over a cluster")
    cols = N1 // 2 if epilogue1 == EPI_SWIGLU_ROWS else N1
    lib.check(lib.dll.cusync_sm90_swap_mlp(config.encode(), epilogue1, W1, X, Y, W2, Z, M, N1, K1, N2, ldy or cols,
                                           ldz or N2, sync, timeout_ns, ctypes.c_void_p(stream)),
              f"swapped MLP chain {config} (M = {M}, {N1} x {K1} then {N2} x {cols})")


def chain_timed_out(words, config: str) -> str:
    """The message for a swapped MLP chain whose wait timed out, from its sync words (host ints:
    CHAIN_SYNC_WORDS of them), or "" if none did."""
    tile = int(words[CHAIN_TIMED_OUT])
    if tile == 0:
        return ""
    return (f"swapped MLP chain {config}: a wait timed out at tile {tile - 1} of the launch (the second GeMM's "
            f"tiles follow the first's), its token row's posts seen: {int(words[CHAIN_SEEN])}")


def swiglu_rows(gate, up):
    """The swapped GeMM's SwiGLU weight (EPI_SWIGLU_ROWS) from the gate and up weights ([F, K] each, F a
    multiple of 8; CuPy or NumPy): [2F, K], gate rows 8b..8b+7 then up rows 8b..8b+7 for every b."""
    F, K = gate.shape
    if up.shape != gate.shape or F % SWIGLU_ROWS_BLOCK:
        raise Sm90Error(f"SwiGLU weights: gate and up of one shape, rows a multiple of {SWIGLU_ROWS_BLOCK} "
                        f"(got {tuple(gate.shape)} and {tuple(up.shape)})")
    b = SWIGLU_ROWS_BLOCK
    out = gate.reshape(F // b, 1, b, K).repeat(2, axis=1)
    out[:, 1] = up.reshape(F // b, b, K)
    return out.reshape(2 * F, K)


def swap_pack(w, group: int):
    """The swapped GeMM's weight layout (swap.cu, swap_chain.cuh): W [N, K] packed by groups of `group`
    rows (SwapTile.group for swap_gemm, its BW for swap_mlp), each group's K x group block contiguous
    with its rows fastest: [N / group, K, group], Wp[g, k, r] = W[group g + r, k], so that a tile's
    k-block is one contiguous run of bytes (CuPy or NumPy; a new array)."""
    N, K = w.shape
    if group < 1 or N % group:
        raise Sm90Error(f"the swapped GeMM packs its weight by groups of {group} rows: {N} rows do not split so")
    return w.reshape(N // group, group, K).transpose(0, 2, 1).copy()


def packed_weight(kept: dict, w, group: int, stream=None, order=None, tag: str = ""):
    """The packed copy of weight `w` the swapped GeMM reads (swap_pack by `group` rows; `order`, named
    by `tag`, applied to w first), kept in `kept` by (w's pointer, group, tag): made at the first call
    with w, on `stream` (or the current one) and synchronized, so that a launch on any stream reads it;
    never inside a graph capture (run once first)."""
    hit = kept.get((w.data.ptr, group, tag))
    if hit is not None and hit[0] is w:
        return hit[1]
    from cusyncgen.cuda.lazy import cupy
    s = stream or cupy.cuda.get_current_stream()
    if s.is_capturing():
        raise Sm90Error(f"the swapped GeMM's packed weight ({tuple(w.shape)}, groups of {group} rows) is made at the "
                        "first launch with it, not inside a graph capture (run once first)")
    with s:
        p = swap_pack(order(w) if order else w, group)
    s.synchronize()
    kept[(w.data.ptr, group, tag)] = (w, p)
    return p


FMHA_ERRORS = {1: "the shape is not supported", 2: "a workspace is needed", 3: "the launch failed",
               4: "a CUDA error after the launch", 5: "no such schedule",
               6: "bad synchronization arguments (tile waits without a ticket or tile sizes, or O posted where "
                  "S is not a multiple of its row tile)"}
#: the FMHA's kernel schedules (fmha.cu): a CTA per 128-query tile, or CUTLASS's persistent ping-pong
FMHA_SCHEDULES = {"cooperative": 0, "pingpong": 1}


def fmha_schedule(B: int, S: int, causal: bool) -> str:
    """The faster schedule as measured on an H100 (docs/design.md): ping-pong, except a causal
    prompt of one sequence of 2048 tokens or more, where the persistent schedule's equal shares of
    unequal causal tiles leave it 5-7% behind the cooperative one."""
    return "cooperative" if causal and B == 1 and S >= 2048 else "pingpong"


def _schedule(B: int, S: int, causal: bool, schedule) -> int:
    name = schedule or fmha_schedule(B, S, causal)
    if name not in FMHA_SCHEDULES:
        raise Sm90Error(f"FMHA schedule {name!r}: one of {', '.join(FMHA_SCHEDULES)}")
    return FMHA_SCHEDULES[name]


def _fmha_check(code: int, B: int, H: int, S: int, causal: bool) -> None:
    if code != 0:
        raise Sm90Error(f"FMHA B={B} H={H} S={S}{' causal' if causal else ''}: {FMHA_ERRORS.get(code, code)}")


def fmha(qkv: int, o: int, lse: int, B: int, H: int, S: int, causal: bool, sm_count: int, stream: int = 0,
         schedule: str | None = None) -> None:
    """The prompt's attention on CUTLASS's Hopper FMHA forward (runtime_cuda/sm90/fmha.cu): Q, K, V
    read from the QKV GeMM's output [B S, 3 H 128] (fp16), O written as [B S, H 128], lse [B, H, S]
    fp32; causal or full, S any length; `schedule` one of FMHA_SCHEDULES (None: fmha_schedule).
    Launched on `stream` (arguments built each call)."""
    _fmha_check(library().dll.cusync_sm90_fmha(qkv, o, lse, B, H, S, int(causal), _schedule(B, S, causal, schedule),
                                               sm_count, ctypes.c_void_p(stream)), B, H, S, causal)


def fmha_heads(q: int, k: int, v: int, o: int, lse: int, B: int, H: int, S: int, causal: bool, sm_count: int,
               stream: int = 0, schedule: str | None = None) -> None:
    """The same FMHA over q, k, v each [B, H, S, 128] contiguous (SDPA's layout) instead of the QKV
    GeMM's rows: what the strided rows cost the stage (cusyncgen/commands/fmha_layout.py)."""
    _fmha_check(library().dll.cusync_sm90_fmha_heads(q, k, v, o, lse, B, H, S, int(causal),
                                                     _schedule(B, S, causal, schedule), sm_count,
                                                     ctypes.c_void_p(stream)), B, H, S, causal)


def fmha_sync(qkv: int, o: int, lse: int, B: int, H: int, S: int, causal: bool, sm_count: int, sync: FmhaSync,
              stream: int = 0, schedule: str | None = None) -> None:
    """fmha() synchronized (cusync/sm90/fmha_sync.h): `sync` (desc.FmhaSync) says which QKV GeMM
    tiles each work item waits for, where O's tiles are posted and how it is launched (PDL)."""
    _fmha_check(library().dll.cusync_sm90_fmha_sync(qkv, o, lse, B, H, S, int(causal),
                                                    _schedule(B, S, causal, schedule), sm_count,
                                                    ctypes.byref(sync), ctypes.c_void_p(stream)), B, H, S, causal)


def debug_message(d: Debug) -> str | None:
    """What a debug record says (None: no wait timed out)."""
    if not d.failed:
        return None
    return (f"a wait timed out: block {d.block} gemm {d.stage} tile ({d.consumer_x}, {d.consumer_y}) producer tile "
            f"({d.tile_x}, {d.tile_y}) sem {d.sem} seen {d.seen} target {d.expected}")


def plan_flags(step: Step) -> LaunchFlag:
    """The library's launch flags of a launch whose first kernel the chain decoded into `step`: PDL
    trigger and wait as the Step's StageFlag says, the PDL launch attribute where it is
    PDL-launched (the custom-order flag has no counterpart: an sm90 GeMM always walks its order)."""
    if step.side_stream or step.wait_kernel:
        raise Sm90Error("the sm90 kernels run on one stream, without the wait-kernel")
    f = LaunchFlag.NONE
    if step.flags & StageFlag.PDL_TRIGGER:
        f |= LaunchFlag.PDL_TRIGGER
    if step.flags & StageFlag.PDL_WAIT:
        f |= LaunchFlag.PDL_WAIT
    if step.pdl:
        f |= LaunchFlag.PDL_LAUNCH
    return f


@dataclass(frozen=True)
class Link:
    """One GeMM of an sm90 chain: its tile config and descriptor (desc.gemm_desc: its operands,
    order, split-K and store mode; the chain wires the waits and posts)."""

    config: str
    gemm: Gemm


class Sm90Chain:
    """The plans of a chain of sm90 GeMMs under a Config (one of SM90_ORDERINGS). `links`: the GeMMs,
    each consuming the previous one's output; `policies`: with a policy configuration, the
    compiled PolicyIR of each dependency (links[i] -> links[i + 1]), the one named cfg.policy.
    Allocates the semaphores, one ticket per waiting plan and the debug record (zeroed once,
    never reset). Each consumer tile waits on the producer tiles its k-blocks read: the producer's
    output tile width (its BN, half of it for the SwiGLU pair) and row tile (its BM) come from the
    producer's link. `name`: what its errors call it (default: the Config's name)."""

    def __init__(self, cfg: Config, links: Sequence[Link], policies: Sequence = (), timeout_ns: int = 0,
                 name: str = ""):
        if cfg.ordering not in SM90_ORDERINGS:
            raise Sm90Error(f"{cfg.name}: the sm90 kernels have no {cfg.ordering.value} ordering (they have "
                            "StreamSync, PDL, <Policy>+PDL and <Policy>+Chain)")
        if cfg.policy is None and cfg.ordering in (Ordering.PDL, Ordering.PERSISTENT):
            raise Sm90Error(f"the {cfg.ordering.value} ordering synchronizes on tiles: it needs a policy "
                            f"({', '.join(POLICIES)})")
        if cfg.policy is not None and cfg.policy not in POLICIES:
            raise Sm90Error(f"{cfg.name}: the sm90 kernels have no policy {cfg.policy} (they have "
                            f"{', '.join(POLICIES)})")
        n = len(links)
        if cfg.policy is not None and len(policies) != n - 1:
            raise Sm90Error(f"{cfg.name}: a chain of {n} GeMMs needs {n - 1} policies, got {len(policies)}")
        decoded = steps(cfg, n)
        groups = launches(decoded)
        for group in groups:
            if len({links[i].config for i in group}) > 1:
                raise Sm90Error(f"{cfg.name}: one launch is one kernel with one tile config: "
                                f"{' and '.join(links[i].config for i in group)} need launches of their own "
                                "(StreamSync, PDL or <Policy>+PDL)")
        self.cfg, self.name = cfg, name or cfg.name
        gemms = [Gemm.from_buffer_copy(link.gemm) for link in links]
        dev = torch.device("cuda")
        self.debug = torch.zeros(DEBUG_WORDS, dtype=torch.int32, device=dev)
        self.sems = []
        if cfg.policy is not None:
            for i, pol in enumerate(policies):
                if pol.name != cfg.policy:
                    raise Sm90Error(f"{cfg.name}: dependency {i} was given the policy {pol.name}")
                sems = torch.zeros(max(1, pol.num_sems), dtype=torch.int32, device=dev)
                self.sems.append(sems)
                pd = policy_desc(pol)
                producer, consumer = gemms[i], gemms[i + 1]
                bm, bn, _ = tile_dims(links[i].config)
                producer.out_policy, producer.out_sems = pd, sems.data_ptr()
                consumer.in_policy, consumer.in_sems = pd, sems.data_ptr()
                consumer.in_tile_n = bn // 2 if producer.epilogue == EPI_SWIGLU_PAIR else bn
                consumer.in_tile_m = bm
        waits = [any(gemms[i].in_sems for i in group) for group in groups]
        self.tickets = torch.zeros(2 * max(1, sum(waits)), dtype=torch.int64, device=dev)
        self.plans, k = [], 0
        for group, wait in zip(groups, waits):
            kw = {}
            if wait:   # a plan that waits takes its own ticket (its epochs), times out and reports
                kw = dict(ticket=self.tickets.data_ptr() + 16 * k, timeout_ns=timeout_ns, debug=self.debug.data_ptr())
                k += 1
            self.plans.append(Plan(links[group[0]].config, [gemms[i] for i in group],
                                   flags=plan_flags(decoded[group[0]]), **kw))

    def launch(self, stream: int = 0):
        for p in self.plans:
            p.launch(stream)

    def timed_out(self) -> str | None:
        """What the first wait that timed out saw (after synchronizing), or None."""
        words = self.debug.cpu().tolist()[:ctypes.sizeof(Debug) // 4]
        return debug_message(Debug.of(words))

    def check_debug(self):
        """Raise if a wait of this chain timed out (call after synchronizing)."""
        msg = self.timed_out()
        if msg:
            raise Sm90Error(f"{self.name}: {msg}")
