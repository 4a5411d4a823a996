"""The paper's Attention (Figure 2b) on the GPU: five dependent kernels synchronized by the
policies cusyncgen generates from examples/attention_gpt3.dep and attention_llama.dep.

    g1  XQKV = X Wqkv^T                 QKV GeMM (gemm.cuh), written into the KV cache rows
    gP  P = Q_h [CachedK, XK]_h^T        per head and request (gemm.cuh through PStage)
    gR  R = dropout(softmax(P/sqrt(Dh)))  softmax.cuh; counter-based dropout mask
    gT  T = R [CachedV, XV]_h            attention.cuh (WMMA), two producers: gR and g1
    g2  XW12 = T Wo^T                    output GeMM (gemm.cuh through OutStage)

    att = Attention(Shape("gpt3", B=1, S=512))         # prompt processing
    att = Attention(Shape("llama", B=4, S=1, Sp=1024)) # token generation with 1024 cached tokens
    bufs = att.buffers(seed=0); att.poison(bufs); att.run(stream, Config("TileSync", "pdl"), bufs)
    errs = att.check(bufs)                              # every kernel against float32 math
"""
from __future__ import annotations

import ctypes
import math
import sys
import time

import cupy
import torch

from cusyncgen.cuda import build, driver, timing
from cusyncgen.cuda.chain import PDL_ALONE, STREAM_SYNC, Config
from cusyncgen.cuda.modules_attention import (DH, TILE_K, Shape, bench_shapes, compile_dep, configs, module_source,
                                              num_sems, role_index)
from cusyncgen.cuda.stages import Stage

ORDER = ("g1", "gP", "gR", "gT", "g2")
DROPOUT = 0.1
TOL_STAGE = 1e-2   # one kernel against float32 math on its own (fp16) inputs
TOL_E2E = 2e-2     # the chain against float32 math from X
DEVICE = "cuda"    # where the buffers and the references live


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class AttnGeo(ctypes.Structure):
    _fields_ = [("cache", ctypes.c_void_p), ("P", ctypes.c_void_p), ("R", ctypes.c_void_p), ("T", ctypes.c_void_p)] + [
        (n, ctypes.c_int) for n in ("B", "S", "Sp", "NH", "Dh", "ld3", "Npad", "ldT", "causal")] + [
        ("rv_ws", ctypes.c_void_p), ("rv_counters", ctypes.c_void_p)]


class SoftmaxArgs(ctypes.Structure):
    _fields_ = [("P", ctypes.c_void_p), ("R", ctypes.c_void_p), ("M", ctypes.c_int), ("Npad", ctypes.c_int),
                ("L", ctypes.c_int), ("scale", ctypes.c_float), ("drop_threshold", ctypes.c_uint32),
                ("keep_scale", ctypes.c_float), ("seed", ctypes.c_uint32), ("causal", ctypes.c_int)]


class MultiChain:
    """Orderings of a chain of kernels (chain.Config names): StreamSync, PDL alone, and the tile
    policies with the paper's wait-kernel (a stream per kernel, priorities falling along the
    chain) or with PDL (one stream, each kernel PDL-launched)."""

    def __init__(self, n: int, wait_kernel):
        lo, hi = driver.stream_priority_range()
        self.streams = [cupy.cuda.Stream(non_blocking=True, priority=min(hi + i, lo)) for i in range(n)]
        self.wait_kernel = wait_kernel
        self.fork = cupy.cuda.Event(disable_timing=True)
        self.done = [cupy.cuda.Event(disable_timing=True) for _ in range(n)]

    def run(self, main, cfg: Config, stages, launches, tiles) -> None:
        n = len(stages)
        if cfg.ordering == "stream":
            for st, ln in zip(stages, launches):
                ln(main, st.args(), False)
            return
        if cfg.ordering == "pdl_alone":
            for i, (st, ln) in enumerate(zip(stages, launches)):
                ln(main, st.args(pdl_trigger=True, pdl_wait=i > 0), i > 0)
            return
        if cfg.ordering == "pdl":
            for i, (st, ln) in enumerate(zip(stages, launches)):
                ln(main, st.args(cfg.custom_order, pdl_trigger=i < n - 1), i > 0)
            return
        assert cfg.ordering == "waitkernel", cfg.ordering
        self.fork.record(main)
        for i, (st, ln) in enumerate(zip(stages, launches)):
            s = self.streams[i]
            s.wait_event(self.fork)
            if i > 0:
                self.wait_kernel.launch((1, 1, 1), [stages[i - 1].ticket, st.ticket, ctypes.c_ulonglong(tiles[i - 1]),
                                                    ctypes.c_ulonglong(tiles[i])], s)
            ln(s, st.args(cfg.custom_order), False)
            self.done[i].record(s)
        for e in self.done:
            main.wait_event(e)


def _synced(name, launch):
    def run(s, sa, pdl):
        launch(s, sa, pdl)
        try:
            s.synchronize()
        except Exception as exc:
            raise RuntimeError(f"kernel attn_{name} failed: {exc}") from exc
    return run


def _ptr(t: torch.Tensor, offset_elems: int = 0) -> int:
    return t.data_ptr() + offset_elems * t.element_size()


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    m = 0xFFFFFFFF
    return (x * (c & 0xFFFF) + (((x * (c >> 16)) & 0xFFFF) << 16)) & m


def keep_mask(Z: int, S: int, Npad: int, seed: int, p: float, device=None) -> torch.Tensor:
    """The kernel's dropout mask (softmax.cuh), bit for bit: [Z, S, Npad] bool."""
    idx = torch.arange(Z * S * Npad, device=device or DEVICE, dtype=torch.int64) & 0xFFFFFFFF
    x = (_mul32(idx, 0x9E3779B9) + seed) & 0xFFFFFFFF
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7feb352d)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846ca68b)
    x = x ^ (x >> 16)
    return (x >= int(p * 2 ** 32)).view(Z, S, Npad)


def rel(a: torch.Tensor, ref: torch.Tensor) -> float:
    a = a.float()
    if not bool(torch.isfinite(a).all()):
        return math.inf
    n = float(torch.linalg.vector_norm(ref))
    return float(torch.linalg.vector_norm(a - ref)) / (n if n > 0 else 1.0)


class Attention:
    """All five kernels of one shape, every generated policy combination in one module."""

    sync_each = False  # diagnosis: StreamSync synchronizes after every kernel and names the one that faults

    def __init__(self, shape: Shape, debug: bool = False, arch: str | None = None, dropout: float = DROPOUT,
                 sync_warp: bool | None = None, timeline: bool = False, spread: bool = True,
                 splits: dict[str, int] | None = None):
        """sync_warp: the waiting GeMMs (P and output) wait in a sync warp of their own (gemm.cuh)
        -- None: each where it costs no occupancy or its grid still fits one wave with it
        (driver.sync_warp_pays); True: both; False: neither (thread 0 waits).
        spread: a kernel of at most two waves' blocks that is launched before its producer ends
        (every ordering but StreamSync) is launched with its shared memory padded to at most
        ceil(blocks / SMs) blocks per SM (driver.spread_smem), as stream order would place it.
        splits: blocks per tile of the QKV GeMM, R V and the output GeMM ({"g1": n, "gT": n,
        "g2": n}; default Shape.splits for this GPU's SM count: split-K in token generation; a
        split output GeMM waits in thread 0, without a sync warp)."""
        self.shape = sh = shape
        self.dropout = dropout
        self.compiled, self.ns = compile_dep(sh)
        self.timeline = timeline  # CUSYNC_TIMELINE build: every block's SM and times (cusyncgen.cuda.timeline)
        self.module = driver.Module(build.build(module_source(sh, debug, timeline), arch or driver.arch()))
        k = self.module.kernel
        self.k = {"qkv": k("attn_qkv", sh.gemm_threads, sh.gemm_smem), "pgemm": k("attn_pgemm", sh.gemm_threads, sh.gemm_smem),
                  "softmax": k("attn_softmax", self.module.constant_int("attn_softmax_threads")), "rv": k("attn_rv", 256),
               "out": k("attn_out", sh.gemm_threads, sh.gemm_smem), "out_R": k("attn_out_R", sh.gemm_threads, sh.gemm_smem)}
        self.chain = MultiChain(5, k("cusync_wait_kernel", 1))
        self.index = role_index(sh, self.compiled, self.ns)
        self.policy_names = list(configs(self.compiled))
        # token generation: the QKV GeMM, R V and the output GeMM split over K (kernels/splitk.cuh);
        # their fp32 partials (tile_m x 128 per tile and split) and arrival counters (zeroed once:
        # the last block of a tile resets its counter)
        self.splits = {**sh.splits(driver.sm_count()), **(splits or {})}
        self.grids = sh.grids(self.splits)
        self.tiles = [math.prod(self.grids[g]) for g in ORDER]  # blocks per launch (the tickets)
        self.workspace = {}
        for g, rows, cols in (("g1", sh.tile_m, 128), ("gT", sh.tile_m, DH), ("g2", sh.tile_m, 128)):
            tiles = math.prod(sh.grids()[g])
            n = tiles * self.splits[g] * rows * cols if self.splits[g] > 1 else 1
            self.workspace[g] = (torch.empty(n, device=DEVICE, dtype=torch.float32),
                                 torch.zeros(tiles, device=DEVICE, dtype=torch.int32))
        _sync()  # made on torch's stream; the chain runs on others
        # The synchronized P and output GeMMs: with or without a sync warp (StreamSync and PDL
        # alone always run the plain kernels).
        self.sync_warp_used = {}
        self.k_sync = {}
        for role, grid in (("pgemm", "gP"), ("out", "g2")):
            ks = k(f"attn_{role}_S", sh.gemm_threads + 32, sh.gemm_smem)
            use = sync_warp if sync_warp is not None else driver.sync_warp_pays(
                math.prod(self.grids[grid]), ks, self.k[role])
            use = use and self.splits.get(grid, 1) == 1  # gemm.cuh's split-K has no sync warp
            self.sync_warp_used[role] = bool(use)
            self.k_sync[role] = ks if use else self.k[role]
            if role == "out":
                self.k_sync["out_R"] = k("attn_out_RS", sh.gemm_threads + 32, sh.gemm_smem) if use else self.k["out_R"]
        # Early-launched kernels of at most two waves' blocks: padded to as many blocks per SM as
        # stream order would give each SM (1 or 2; kernel name -> bytes).
        self.spread_smem: dict[str, int] = {}
        if spread:
            producer = {"pgemm": "qkv", "softmax": "pgemm", "rv": "pgemm", "out": "rv", "out_R": "rv"}
            grid_of = {"pgemm": "gP", "softmax": "gR", "rv": "gT", "out": "g2", "out_R": "g2"}
            for role, prod in producer.items():
                per_sm = -(-math.prod(self.grids[grid_of[role]]) // driver.sm_count())
                if per_sm > 2:
                    continue
                self.spread_smem.update(driver.apply_spread((self.k[role], self.k_sync.get(role, self.k[role])),
                                                            driver.block_smem(self.k[prod]), per_sm))
            # Only the padded launches ask for the largest shared-memory carveout (Kernel.launch):
            # setting it on the GeMM functions too slowed StreamSync down (H200: LLaMA prompt
            # S=1024 370 -> 395-413 us).
        self._stages = {None: self._make_stages(None)}
        for name in self.policy_names:
            self._stages[name] = self._make_stages(name)

    def _make_stages(self, config):
        sems = num_sems(self.compiled, config)
        st = [Stage(g, i, sems[g], timeline_blocks=self.tiles[i] if self.timeline else 0, splits=self.splits.get(g, 1))
              for i, g in enumerate(ORDER)]
        st[1].depends_on(st[0], 0, "g1 (QKV GeMM)")
        st[2].depends_on(st[1], 0, "gP (P GeMM)")
        st[3].depends_on(st[2], 0, "gR (softmax)")
        st[3].depends_on(st[0], 1, "g1 (QKV GeMM)")
        st[4].depends_on(st[3], 0, "gT (R V)")
        return st

    def policies_of(self, config: str) -> dict:
        from cusyncgen.cuda.modules_attention import DEPS, POLICY_CONFIGS
        return dict(zip(DEPS, POLICY_CONFIGS[config]))

    # ---- buffers
    def buffers(self, seed: int = 0, weights=None) -> dict:
        sh = self.shape
        g = torch.Generator(device=DEVICE).manual_seed(seed)
        dev, f16 = DEVICE, torch.float16
        rnd = lambda *s: torch.randn(*s, generator=g, device=dev, dtype=torch.float32)
        if weights is None:
            wqkv = (rnd(3 * sh.D, sh.H) / sh.H ** 0.5).to(f16)
            wo = (rnd(sh.H, sh.D) / sh.D ** 0.5).to(f16)
        else:
            wqkv, wo = weights
        x = rnd(sh.M, sh.H).to(f16)
        cache = torch.zeros(sh.Npad * sh.B, 3 * sh.D, device=dev, dtype=f16)
        if sh.Sp:
            cache[: sh.Sp * sh.B] = rnd(sh.Sp * sh.B, 3 * sh.D).to(f16)
        Z = sh.B * sh.NH
        b = {"x": x, "wqkv": wqkv, "wo": wo, "cache": cache, "cached": cache[: sh.Sp * sh.B].clone(),
             "P": torch.empty(Z, sh.S, sh.Npad, device=dev, dtype=f16),
             "R": torch.empty(Z, sh.S, sh.Npad, device=dev, dtype=f16),
             "T": torch.empty(sh.M, sh.D, device=dev, dtype=f16),
             "out": torch.empty(sh.M, sh.H, device=dev, dtype=f16),
             "seed": 12345 + seed}
        _sync()  # made on torch's stream; the chain runs on others, which must not race the init
        return b

    def poison(self, b: dict) -> None:
        sh = self.shape
        b["cache"][sh.Sp * sh.B: sh.L * sh.B].fill_(float("nan"))
        for n in ("P", "R", "T", "out"):
            b[n].fill_(float("nan"))
        _sync()

    # ---- launch
    def geometry(self, b: dict) -> AttnGeo:
        """The kernels' view of the buffers (attention.cuh's AttnGeo)."""
        sh = self.shape
        ws, cnt = self.workspace["gT"]
        return AttnGeo(_ptr(b["cache"]), _ptr(b["P"]), _ptr(b["R"]), _ptr(b["T"]),
                       sh.B, sh.S, sh.Sp, sh.NH, DH, 3 * sh.D, sh.Npad, sh.D, int(sh.causal), _ptr(ws), _ptr(cnt))

    def run(self, stream, cfg: Config, b: dict) -> None:
        sh = self.shape
        which = self.index[cfg.policy]
        stages = self._stages[cfg.policy]
        ld3 = 3 * sh.D
        geo = self.geometry(b)
        ws, cnt = self.workspace["g1"]
        a_qkv = driver.GemmArgs(A=_ptr(b["x"]), B=_ptr(b["wqkv"]), C=_ptr(b["cache"], sh.Sp * sh.B * ld3),
                                M=sh.M, N=ld3, K=sh.H, lda=sh.H, ldb=sh.H, ldc=ld3, swiglu_offset=0,
                                ws=_ptr(ws), counters=_ptr(cnt))
        a_p = driver.GemmArgs(A=0, B=0, C=0, M=sh.S, N=sh.Npad, K=DH, lda=sh.B * ld3, ldb=sh.B * ld3,
                              ldc=sh.Npad, swiglu_offset=0)
        ws2, cnt2 = self.workspace["g2"]
        a_out = driver.GemmArgs(A=_ptr(b["T"]), B=_ptr(b["wo"]), C=_ptr(b["out"]), M=sh.M, N=sh.H, K=sh.D,
                                lda=sh.D, ldb=sh.D, ldc=sh.H, swiglu_offset=0, ws=_ptr(ws2), counters=_ptr(cnt2))
        sm = SoftmaxArgs(_ptr(b["P"]), _ptr(b["R"]), sh.S, sh.Npad, sh.L, 1.0 / math.sqrt(DH),
                         int(self.dropout * 2 ** 32), 1.0 / (1.0 - self.dropout), b["seed"], int(sh.causal))
        G = self.grids
        ks = self.k if cfg.policy is None else {**self.k, **self.k_sync}
        kout = ks["out_R" if cfg.reorder else "out"]
        kp = ks["pgemm"]
        pad = (lambda kern: None) if cfg.ordering == "stream" else (lambda kern: self.spread_smem.get(kern.name))
        ksm, krv = self.k["softmax"], self.k["rv"]
        launches = [
            lambda s, sa, pdl: self.k["qkv"].launch(G["g1"], [a_qkv, sa, which["qkv"], geo], s, pdl),
            lambda s, sa, pdl: kp.launch(G["gP"], [a_p, sa, which["pgemm"], geo], s, pdl, pad(kp)),
            lambda s, sa, pdl: ksm.launch(G["gR"], [sm, sa, which["softmax"]], s, pdl, pad(ksm)),
            lambda s, sa, pdl: krv.launch(G["gT"], [geo, sa, which["rv"]], s, pdl, pad(krv)),
            lambda s, sa, pdl: kout.launch(G["g2"], [a_out, sa, which["out"], geo], s, pdl, pad(kout)),
        ]
        if self.sync_each and cfg.ordering == "stream":
            names = ("qkv", "pgemm", "softmax", "rv", "out")
            launches = [_synced(n, ln) for n, ln in zip(names, launches)]
        self.chain.run(stream, cfg, stages, launches, self.tiles)

    def check_stages(self) -> None:
        for sts in self._stages.values():
            for st in sts:
                st.raise_if_timed_out()

    def configs(self, reorder: bool = True) -> list[Config]:
        out = [STREAM_SYNC, PDL_ALONE]
        for p in self.policy_names:
            for ordering in ("waitkernel", "pdl"):
                for r in ((False, True) if reorder else (False,)):
                    out.append(Config(p, ordering, True, r))
                    out.append(Config(p, ordering, False, r))  # T: the launch's own block order
        return out

    # ---- float32 references
    def _qkv_views(self, cache: torch.Tensor):
        sh = self.shape
        c = cache.float().view(sh.Npad, sh.B, 3, sh.NH, DH)
        q = c[sh.Sp: sh.L, :, 0].permute(1, 2, 0, 3)   # [B, NH, S, Dh]
        k = c[:, :, 1].permute(1, 2, 0, 3)             # [B, NH, Npad, Dh]
        v = c[:, :, 2].permute(1, 2, 0, 3)
        return q, k, v

    def causal_mask(self) -> torch.Tensor:
        """[S, Npad] bool: the keys a query row may not read (True), for a causal prompt."""
        sh = self.shape
        r = torch.arange(sh.S, device=DEVICE).view(-1, 1)
        c = torch.arange(sh.Npad, device=DEVICE).view(1, -1)
        return c > sh.Sp + r

    def _softmax_ref(self, P: torch.Tensor, seed: int) -> torch.Tensor:
        sh = self.shape
        s = P.float() / math.sqrt(DH)
        s[..., sh.L:] = -math.inf
        if sh.causal:
            s = s.masked_fill(self.causal_mask(), -math.inf)
        r = torch.softmax(s, dim=-1)
        if self.dropout:
            r = r * keep_mask(sh.B * sh.NH, sh.S, sh.Npad, seed, self.dropout) / (1.0 - self.dropout)
        return r

    def check(self, b: dict) -> dict[str, float]:
        """Relative errors: each kernel against float32 math on the fp16 inputs it read, and the
        whole chain against float32 math from X (the kernels' fp16 intermediates excepted)."""
        _sync()
        sh = self.shape
        Z = sh.B * sh.NH
        errs = {}
        new = b["cache"][sh.Sp * sh.B: sh.L * sh.B]
        qkv_ref = b["x"].float() @ b["wqkv"].float().T
        errs["g1"] = rel(new, qkv_ref)
        q, k, v = self._qkv_views(b["cache"])
        p_ref = (q @ k.transpose(-1, -2)).reshape(Z, sh.S, sh.Npad)
        if sh.causal:  # the P tiles past the diagonal are not computed (never read)
            r = torch.arange(sh.S, device=DEVICE).view(-1, 1) // sh.tile_m
            c = torch.arange(sh.Npad, device=DEVICE).view(1, -1) // TILE_K
            keep = c <= r
            errs["gP"] = rel(torch.where(keep, b["P"].float(), 0.0), torch.where(keep, p_ref, 0.0))
        else:
            errs["gP"] = rel(b["P"], p_ref)
        errs["gR"] = rel(b["R"], self._softmax_ref(b["P"], b["seed"]))
        t_ref = (b["R"].float().view(sh.B, sh.NH, sh.S, sh.Npad) @ v).permute(0, 2, 1, 3).reshape(sh.M, sh.D)
        errs["gT"] = rel(b["T"], t_ref)
        errs["g2"] = rel(b["out"], b["T"].float() @ b["wo"].float().T)
        errs["chain"] = rel(b["out"], self.reference(b))
        return errs

    def reference(self, b: dict) -> torch.Tensor:
        sh = self.shape
        qkv = b["x"].float() @ b["wqkv"].float().T                      # [B*S, 3D] in (b, s) order
        full = torch.zeros(sh.Npad * sh.B, 3 * sh.D, device=DEVICE)
        full[: sh.Sp * sh.B] = b["cached"].float()
        full[sh.Sp * sh.B: sh.L * sh.B] = qkv
        q, k, v = self._qkv_views(full)
        P = (q @ k.transpose(-1, -2)).reshape(sh.B * sh.NH, sh.S, sh.Npad)
        R = self._softmax_ref(P, b["seed"]).view(sh.B, sh.NH, sh.S, sh.Npad)
        T = (R @ v).permute(0, 2, 1, 3).reshape(sh.M, sh.D)
        return T @ b["wo"].float().T

    @staticmethod
    def ok(errs: dict) -> bool:
        return all(e < TOL_STAGE for n, e in errs.items() if n != "chain") and errs["chain"] < TOL_E2E

    # ---- the same math in PyTorch (cuBLAS)
    def torch_fn(self, b: dict, mask=None, sdpa: bool = False, dropout: float | None = None):
        """The same math in PyTorch: dropout with torch's RNG (timing), with `mask` (the kernel's,
        for checking), or none (dropout=0)."""
        sh = self.shape
        x, wqkv, wo = b["x"], b["wqkv"], b["wo"]
        cache = b["cache"].clone()
        c3 = cache.view(sh.Npad, sh.B, 3 * sh.D)
        p_drop = self.dropout if dropout is None else dropout
        causal = self.causal_mask()[:, : sh.L] if sh.causal else None

        def fn():
            qkv = x @ wqkv.T                                              # [B*S, 3D]
            if sh.prompt:
                kv = qkv.view(sh.S, 3, sh.NH, DH).permute(1, 2, 0, 3)     # [3, NH, S, Dh]
                q, k, v = kv[0], kv[1], kv[2]
            else:
                c3[sh.Sp] = qkv
                kv = c3[: sh.L].view(sh.L, sh.B, 3, sh.NH, DH)
                k = kv[:, :, 1].permute(1, 2, 0, 3)
                v = kv[:, :, 2].permute(1, 2, 0, 3)
                q = qkv.view(sh.B, 3, sh.NH, DH)[:, 0].unsqueeze(2)
            if sdpa:
                t = torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=p_drop, is_causal=sh.causal)
            else:
                s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(DH))
                if sh.causal:
                    s = s.masked_fill(causal, -math.inf)
                r = torch.softmax(s, dim=-1)
                if mask is not None:
                    r = r * mask / (1.0 - p_drop)
                elif p_drop:
                    r = torch.nn.functional.dropout(r, p_drop, training=True)
                t = r @ v
            t = t.transpose(-3, -2).reshape(sh.M, sh.D) if sh.prompt else t.reshape(sh.M, sh.D)
            return t @ wo.T
        return fn

    def flops_bytes(self) -> tuple[float, float]:
        sh = self.shape
        Z = sh.B * sh.NH
        pairs = sh.S * sh.Sp + sh.S * (sh.S + 1) // 2 if sh.causal else sh.S * sh.L  # (query, key) pairs
        flops = 2 * sh.M * sh.H * 3 * sh.D + 4 * Z * pairs * DH + 2 * sh.M * sh.D * sh.H
        byts = 2 * (4 * sh.D * sh.H + sh.M * sh.H * 2 + 2 * sh.B * sh.L * sh.D + 4 * Z * pairs + 2 * sh.M * sh.D)
        return flops, byts


def measure_point(shape: Shape, iters: int, stream, seed: int = 0, ceil=None, extra=None, sync_warp=None,
                  spread=None):
    """Rows of the result table for one shape; PyTorch SDPA rows go to `extra`."""
    from cusyncgen.cuda import baselines
    extra = [] if extra is None else extra
    att = Attention(shape, sync_warp=sync_warp, **({} if spread is None else {"spread": spread}))
    sets = [att.buffers(seed=seed + s) for s in range(3)]
    rows = []
    cfgs = att.configs()
    # StreamSync timed first and again last: the faster is the baseline, the difference recorded.
    for i, cfg in enumerate(cfgs + cfgs[:1]):
        b = sets[0]
        att.poison(b)
        att.run(stream, cfg, b)
        stream.synchronize()
        errs = att.check(b)
        graphs = [timing.capture(lambda s, bb=bb: att.run(s, cfg, bb), stream) for bb in sets]
        t = timing.median(timing.time_graphs(graphs, stream, iters=iters))
        del graphs
        if i == len(cfgs):
            base = timing.settle_baseline(rows, t, att.ok(errs))
            break
        row = {"model": shape.label, "M": shape.size, "config": cfg.name, "time_us": round(t, 2),
               "correct": att.ok(errs), "rel_err": errs["chain"],
               "kernel_errs": {k: float(f"{v:.3g}") for k, v in errs.items()}, "B": shape.B, "S": shape.S, "Sp": shape.Sp,
               "tiles": shape.tiles_label}
        if cfg.policy:
            row["policies"] = att.policies_of(cfg.policy)
            row["sync_warp"] = [r for r, used in att.sync_warp_used.items() if used]
            row["spread"] = sorted(att.spread_smem)
        rows.append(row)
    att.check_stages()
    b = sets[0]
    ref = att.reference(b)
    mask = keep_mask(shape.B * shape.NH, shape.S, shape.Npad, b["seed"], att.dropout)[..., : shape.L]
    mask = mask.reshape(shape.B, shape.NH, shape.S, shape.L).half()
    if shape.prompt:
        mask = mask[0]
    terr = {"cuBLAS": rel(att.torch_fn(b, mask=mask)(), ref)}
    drop, att.dropout = att.dropout, 0.0          # SDPA has its own dropout RNG: check it without
    terr["SDPA"] = rel(att.torch_fn(b, sdpa=True)(), att.reference(b))
    att.dropout = drop
    for name, sdpa in (("cuBLAS", False), ("SDPA", True)):
        fn = att.torch_fn(b, sdpa=sdpa)
        for suffix, timer in (("", baselines.time_eager), ("+graph", baselines.graph_time)):
            try:
                t = timer(fn, iters)
            except Exception as exc:  # e.g. a kernel that cannot be captured
                print(f"{name}{suffix} failed: {exc}", file=sys.stderr)
                continue
            # SDPA (PyTorch's fused attention, not the same kernels' math) goes beside the table
            (rows if name == "cuBLAS" else extra).append(
                {"model": shape.label, "M": shape.size, "config": name + suffix, "time_us": round(t, 2),
                 "speedup_vs_streamsync": round(base / t, 4), "correct": terr[name] < TOL_E2E,
                 "rel_err": terr[name], "B": shape.B, "S": shape.S, "Sp": shape.Sp})
    if ceil:
        flops, byts = att.flops_bytes()
        floor = max(flops / ceil["peak_flops"], byts / ceil["bandwidth"]) * 1e6
        rows.append({"model": shape.label, "M": shape.size, "config": "floor", "time_us": round(floor, 2),
                     "speedup_vs_streamsync": round(base / floor, 4), "correct": True, "rel_err": 0.0})
    return rows


def bench(models=None, sweep=None, iters: int = 30, sync_warp: bool | None = None, spread: bool | None = None,
          tiles: str | None = None) -> dict:
    """Every shape of the sweep (B*S for prompt processing, B for generation), every configuration.
    tiles="wide": the prompts alone, their GeMMs on 8-warp 128x128x64 tiles (the tuner's other shape)."""
    from cusyncgen.cuda import baselines
    if tiles not in (None, "default", "wide"):
        raise ValueError(f"attention tiles are 'default' or 'wide', not {tiles!r}")
    models = models.split(",") if isinstance(models, str) else models
    shapes = [s for s in bench_shapes(models, wide=tiles == "wide") if sweep is None or s.size in sweep]
    ceil = baselines.ceilings()
    stream = cupy.cuda.Stream(non_blocking=True)
    rows, sdpa = [], []
    for i, sh in enumerate(shapes):
        t0 = time.time()
        try:
            point = measure_point(sh, iters, stream, seed=100 * i, ceil=ceil, extra=sdpa, sync_warp=sync_warp,
                                  spread=spread)
        except Exception as exc:
            print(f"[{i + 1}/{len(shapes)}] {sh.label} M={sh.size}: FAILED {exc.__class__.__name__}: {exc}",
                  file=sys.stderr, flush=True)
            raise
        rows += point
        cus = [r for r in point if "policies" in r and r["correct"]]
        best = max(cus, key=lambda r: r["speedup_vs_streamsync"]) if cus else None
        tb = {r["config"]: r["time_us"] for r in point + sdpa[-2:]}
        print(f"[{i + 1}/{len(shapes)}] {sh.label} M={sh.size}: StreamSync {point[0]['time_us']:.1f} us, "
              f"PDL {tb.get('PDL', 0):.1f}, best {best['config'] if best else None} "
              f"{best['time_us'] if best else 0:.1f} us ({best['speedup_vs_streamsync'] if best else 0:.3f}x), "
              f"cuBLAS+graph {tb.get('cuBLAS+graph', 0):.1f}, SDPA+graph {tb.get('SDPA+graph', 0):.1f}, "
              f"all correct {all(r['correct'] for r in point)} [{time.time() - t0:.0f} s]", file=sys.stderr, flush=True)
        timing.save_partial("attention", rows, sdpa=sdpa)
        cupy.get_default_memory_pool().free_all_blocks()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return {"device": driver.device_name(), "workload": "attention", "ceilings": ceil, "rows": rows,
            "sdpa": sdpa, "dropout": DROPOUT,
            "notes": "config names: the policy of each dependency (depQK g1->gP and gT, depPR gP->gR, "
                     "depTR1 gR->gT, depT2 gT->g2) is in each row's 'policies'; +PDL: PDL ordering instead "
                     "of the wait-kernel; +R: the output GeMM loads Wo before waiting. Prompt rows: M = B*S "
                     "with B = 1; generation rows: M = B, S = 1, S' in the model name."}


def _diagnose_one(model: str, B: int, S: int, Sp: int, debug: bool) -> None:
    """One shape in this process: StreamSync kernel by kernel, then every configuration."""
    att = Attention(Shape(model, B, S, Sp), debug=debug)
    att.sync_each = True
    stream = cupy.cuda.Stream(non_blocking=True)
    for cfg in att.configs():
        b = att.buffers(seed=1)
        att.poison(b)
        att.run(stream, cfg, b)
        stream.synchronize()
        att.check_stages()
        errs = att.check(b)
        print(f"  {cfg.name:40s} {'ok ' if att.ok(errs) else 'BAD'} " +
              " ".join(f"{k}={v:.1e}" for k, v in errs.items()), flush=True)


def diagnose(shapes=None) -> int:
    """Each test shape, release and CUSYNC_DEBUG builds, in its own process (a fault that kills
    the CUDA context shows which shape, build, configuration and kernel it came from)."""
    import subprocess
    from cusyncgen.cuda.modules_attention import TEST_SHAPES
    bad = 0
    for shape in shapes or TEST_SHAPES:
        for debug in (False, True):
            print(f"{shape} debug={debug}", flush=True)
            code = f"from cusyncgen.cuda.attention import _diagnose_one; _diagnose_one(*{tuple(shape)!r}, {debug})"
            rc = subprocess.run([sys.executable, "-c", code], timeout=120).returncode
            bad += rc != 0
            if rc:
                print(f"  -> exit status {rc}", flush=True)
    return bad


if __name__ == "__main__":
    sys.exit(1 if diagnose() else 0)
