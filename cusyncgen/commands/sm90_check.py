"""Correctness and stress of every synchronized sm90 MLP variant on a Hopper GPU, beyond what the
GPU tests cover: every tile config (and per-GeMM tile pair), launch ordering, policy, split-K
choice and tile order at each M, checked against the float32 reference (fresh random inputs,
outputs poisoned with NaN); then each synchronized variant at the stress sizes: 200 launches with
alternating inputs, each output checked on the device, 1000 back-to-back launches and 100 CUDA-graph
replays (two inputs per replay), never a reset of the semaphores. Each variant is one
``cusyncgen.workloads.mlp_sm90.mlp_chain`` (an ``Sm90Chain``); a wait that times out (2 s) is
reported through its ``check_debug``, never a hang.

    python -m cusyncgen.commands.sm90_check [--models gpt3,llama-ep] [--M 1,200,512] [--stress-M 256] [-o DIR]

Prints one line per variant and exits 1 if any failed; with ``-o DIR`` the same lines go to
``DIR/sm90-checks-<device>.log``, whose first line is the command. ``--sanitizer-target run|presatisfied``
instead runs the small set of variants compute-sanitizer runs (``cusyncgen.commands.sanitize``; the
decode kernel's orderings too, DECODE_SANITIZER_CASES, the swapped GeMM's, SWAP_SANITIZER_CASES, and
the attention block's, ATTENTION_SANITIZER_CASES and PROMPT_SANITIZER_CASES, and the generation
attention kernel's every form, ATTENTION_FORM_CASE) once each. Needs torch with CUDA on an sm_90 GPU and the sm90 library (docs/sm90.md).
"""
from __future__ import annotations

import argparse
import signal
import sys
import time
import traceback
from pathlib import Path

from cusyncgen.cuda import sm90
from cusyncgen.cuda.configs import Ordering
from cusyncgen.commands.bench import command_line, slug
from cusyncgen.errors import CusyncError
from cusyncgen.workloads import mlp_sm90

PROG = "python -m cusyncgen.commands.sm90_check"
# the orderings as this command names them (--orderings, its lines) and as the launch model does:
# StreamSync, PDL alone, <Policy>+PDL and <Policy>+Chain
ORDERINGS = {"stream": Ordering.STREAM, "pdl": Ordering.PDL_ALONE, "pdl+policy": Ordering.PDL,
             "chain": Ordering.PERSISTENT}
WORDS = {o: w for w, o in ORDERINGS.items()}
SYNCED = (Ordering.PDL, Ordering.PERSISTENT)  # the orderings that wait on tile semaphores (take a policy)
# per-GeMM tile pairs (two launches, each GeMM on its own tile): a 64-row producer under 128- and
# 256-row consumers, a 128-row one under a 256-row one, and the TMA-store epilogue on both sides
PAIRS = ("64x128x64+128x128x64", "128x128x64+256x128x64", "64x128x64+128x256x64", "128x192x64tma+256x128x64tma",
         "64x128x64+128x256x64tma")
BANDED_MIN_M = 512  # below, a wave covers the first GeMM's rows: the banded order changes little
TIMEOUT_NS = 2_000_000_000


def variants(configs, orderings, policies, model, M, grouped2=("off", "on"), banded1=("off", "on"), pairs=()):
    """(config, ordering, policy, splits, grouped2, banded1) of every MLP variant at this M (model: a
    cusyncgen.workloads.mlp Model; orderings: Ordering values, those of ORDERINGS): each
    config and ordering (with each policy where it synchronizes), with the second GeMM in the
    compiler's order and in the grouped order, the first GeMM in the compiler's order, (M >=
    BANDED_MIN_M) in the banded order (banded1 "on") and in the grouped order (banded1 "g1"), and,
    where auto_splits splits a GeMM at this M, the same with split-K. `pairs`: "<first GeMM's
    config>+<second's>" run as a config too, in every ordering but the chain (one kernel, one tile)."""
    out = []
    b1s = [{"off": False, "on": True}.get(b, b) for b in banded1 if b != "on" or M >= BANDED_MIN_M]
    for c in list(configs) + list(pairs):
        c1, _, c2 = c.partition("+")
        # each GeMM's tile fits its widths (128x144 fits no MLP GeMM)
        if not (mlp_sm90.fits_gemm(model.name, c1, 1) and mlp_sm90.fits_gemm(model.name, c2 or c1, 2)):
            continue
        splits = ["none"]
        if sm90.has_split(mlp_sm90.mlp_splits(model, M, c1, "auto", c2 or None)):
            splits.append("auto")
        for sp in splits:
            for b1 in b1s:
                for g2 in grouped2:
                    for o in orderings:
                        if c2 and o == Ordering.PERSISTENT:
                            continue
                        for p in (policies if o in SYNCED else (None,)):
                            out.append((c, o, p, sp, g2 == "on", b1))
    return out


def order_label(g2, b1) -> str:
    return (" G1" if b1 == "g1" else " B1" if b1 else "") + (" G2" if g2 else "")


def sanitizer_variants(model: str):
    """(model, config, ordering (an Ordering), policy, splits, grouped2, banded1 (or "G1": the first
    GeMM grouped), store, config2) of the compute-sanitizer runs: every ordering and policy on one
    tile, each GeMM on its own tile, both GeMMs grouped, split-K and split-K tails, the banded
    producer, both ping-pong configs, the pair-store epilogue, llama-ep's SwiGLU pair epilogue and
    the TMA-store epilogue."""
    c, t = "128x128x64", "128x128x64tma"
    stream, pdl, policy, chain = Ordering.STREAM, Ordering.PDL_ALONE, Ordering.PDL, Ordering.PERSISTENT
    out = [(model, c, stream, None, "none", False, False, "quad", None),
           (model, c, pdl, None, "none", False, False, "quad", None)]
    out += [(model, c, o, p, "none", False, False, "quad", None) for o in (policy, chain) for p in sm90.POLICIES]
    # each GeMM on its own tile: a consumer tile waits on two producer row blocks
    out += [(model, "64x128x64", policy, p, "none", False, False, "pair", c) for p in sm90.POLICIES]
    tails = ((3, 20), (2, 60))
    out += [(model, c, chain, "TileSync", "none", True, "G1", "pair", None),       # both GeMMs grouped
            (model, c, chain, "RowSync", (3, 2), False, False, "quad", None),      # split-K in the chain
            (model, c, policy, "TileSync", (3, 2), True, False, "quad", None),     # split-K, grouped consumer
            (model, c, chain, "RowSync", "none", True, True, "quad", None),        # banded producer
            (model, c, chain, "TileSync", tails, True, True, "pair", None),        # split-K tails
            (model, c, policy, "RowSync", tails, True, True, "pair", None),
            (model, "64x128x64pp", chain, "TileSync", "none", False, False, "quad", None),  # ping-pong
            (model, "128x128x64pp", chain, "RowSync", ((2, 30), 1), False, False, "pair", None),
            (model, c, chain, "TileSync", "none", False, False, "pair", None),     # the pair-store epilogue
            ("llama-ep", c, chain, "RowSync", "none", False, False, "quad", None),  # the SwiGLU pair epilogue
            ("llama-ep", c, stream, None, "none", False, False, "pair", None)]
    # the TMA-store epilogue: the store warp's bulk stores and post
    out += [(model, t, stream, None, "none", False, False, "pair", None),
            (model, t, policy, "TileSync", "none", True, False, "pair", None),
            (model, t, chain, "RowSync", tails, True, True, "pair", None),
            ("llama-ep", t, chain, "TileSync", "none", False, False, "pair", None)]  # SwiGLU in registers, then TMA
    return out


class Log:
    """Lines to stdout and, with a path, to a log file as they come (a run cut short keeps them)."""

    def __init__(self, path: "Path | None"):
        self.file = open(path, "w") if path else None

    def __call__(self, *parts) -> None:
        line = " ".join(str(p) for p in parts)
        print(line, flush=True)
        if self.file:
            self.file.write(line + "\n")
            self.file.flush()


class Buffers:
    """Inputs, weights and outputs of one model at the largest M (views per M)."""

    def __init__(self, model, Mmax: int, seed: int):
        import torch

        g = torch.Generator(device="cuda").manual_seed(seed)
        m = self.model = model
        self.X = torch.randn(Mmax, m.H, device="cuda", generator=g).half()
        self.X2 = torch.randn(Mmax, m.H, device="cuda", generator=g).half()  # the stress runs' other input
        self.Xs = torch.empty_like(self.X)  # the buffer the runners read (inputs copied in)
        self.W1 = (torch.randn(m.N1, m.H, device="cuda", generator=g) / m.H ** 0.5).half()
        self.W2 = (torch.randn(m.H, m.K2, device="cuda", generator=g) / m.K2 ** 0.5).half()
        self.Y = torch.empty(Mmax, m.K2, device="cuda", dtype=torch.half)
        self.Z = torch.empty(Mmax, m.H, device="cuda", dtype=torch.half)

    def reference(self, X):
        return mlp_sm90.mlp_reference(self.model, X, self.W1, self.W2)


def _interrupted(signum, frame):
    raise KeyboardInterrupt


def _fatal(e: Exception) -> bool:
    """An error after which the device state is lost: stop the run."""
    return "illegal" in str(e) or "launch failure" in str(e)


def check_all(a, log: Log) -> list[str]:
    """The checks and the stress runs; returns the failures."""
    import torch

    lib = sm90.library()
    configs = a.configs.split(",") if a.configs else list(lib.configs)
    Ms = [int(v) for v in a.M.split(",") if v]
    stress_Ms = [int(v) for v in a.stress_M.split(",") if v]
    orderings, policies = [ORDERINGS[o] for o in a.orderings.split(",")], a.policies.split(",")
    g2s, b1s = a.grouped2.split(","), a.banded1.split(",")
    pairs = [v for v in a.pairs.split(",") if v]
    timeout_ns = int(a.timeout_ms * 1e6)
    failures: list[str] = []
    stream = lambda: torch.cuda.current_stream().cuda_stream  # noqa: E731

    for model_name in a.models.split(","):
        model = mlp_sm90.model_of(model_name)
        buf = Buffers(model, max(Ms + stress_Ms), seed=1234)
        runners: dict = {}
        broken: set = set()  # variants that failed a check: not stressed

        def runner(M, c, o, p, sp, g2, b1):
            key = (M, c, o, p, sp, g2, b1)
            if key not in runners:
                c1, _, c2 = c.partition("+")
                tiles = mlp_sm90.Sm90Tiles(c1, grouped2=g2, banded1=b1 is True, grouped1=b1 == "g1",
                                           config2=c2 or None)
                ptrs = tuple(t.data_ptr() for t in (buf.Xs, buf.W1, buf.W2, buf.Y, buf.Z))
                runners[key] = mlp_sm90.mlp_chain(model, M, mlp_sm90.config_of(o, p), tiles, ptrs, splits=sp,
                                                  timeout_ns=timeout_ns)
            return runners[key]

        def failed(label, M, v, e) -> bool:
            failures.append(label)
            broken.add((M, v))
            log(f"{label}: ERROR {e}")
            if _fatal(e):
                log(traceback.format_exc())
            return _fatal(e)

        for M in Ms:
            buf.Xs[:M].copy_(buf.X[:M])
            Yref, Zref = buf.reference(buf.Xs[:M])
            for v in variants(configs, orderings, policies, model, M, g2s, b1s, pairs):
                c, o, p, sp, g2, b1 = v
                label = f"check {model_name} M={M} {c} {WORDS[o]} {p or ''} {sp}{order_label(g2, b1)}"
                try:
                    r = runner(M, *v)
                    buf.Y.fill_(float("nan"))
                    buf.Z.fill_(float("nan"))
                    r.launch(stream())
                    torch.cuda.synchronize()
                    r.check_debug()
                    ey, ez = mlp_sm90.torch_rel_err(buf.Y[:M], Yref), mlp_sm90.torch_rel_err(buf.Z[:M], Zref)
                    ok = ey < 1e-2 and ez < 1e-2
                    log(f"{label}: rel err Y {ey:.2e} Z {ez:.2e} {'ok' if ok else 'FAIL'}")
                    if not ok:
                        failures.append(label)
                        broken.add((M, v))
                except Exception as e:  # noqa: BLE001 - every failure is reported, the run goes on
                    if failed(label, M, v, e):
                        return failures

        for M in stress_Ms:
            buf.Xs[:M].copy_(buf.X[:M])
            _, Za = buf.reference(buf.X[:M])
            _, Zb = buf.reference(buf.X2[:M])
            scale = float(Za.pow(2).mean().sqrt())
            for v in variants(configs, orderings, policies, model, M, g2s, b1s, pairs):
                c, o, p, sp, g2, b1 = v
                # the synchronized orderings (the second GeMM's order changes nothing they synchronize;
                # the first GeMM's banded order changes when the waits are satisfied: stressed too)
                if o not in SYNCED or g2 or (M, v) in broken:
                    continue
                label = f"stress {model_name} M={M} {c} {WORDS[o]} {p} {sp}{order_label(g2, b1)}"
                try:
                    r = runner(M, *v)
                    bad = torch.zeros((), dtype=torch.int64, device="cuda")

                    def step(Xsrc, Zr):
                        buf.Xs[:M].copy_(Xsrc)
                        buf.Y.fill_(float("nan"))
                        r.launch(stream())
                        d = (buf.Z[:M].float() - Zr).abs()
                        bad.add_((~(d <= 0.03 * Zr.abs() + 0.03 * scale)).sum())

                    t0 = time.time()
                    for i in range(a.stress_alternating):
                        step(buf.X[:M], Za) if i % 2 == 0 else step(buf.X2[:M], Zb)
                    torch.cuda.synchronize()
                    r.check_debug()
                    n_alt = int(bad.item())
                    buf.Xs[:M].copy_(buf.X[:M])
                    buf.Z.fill_(float("nan"))
                    for _ in range(a.stress_launches):
                        r.launch(stream())
                    torch.cuda.synchronize()
                    r.check_debug()
                    e_b2b = mlp_sm90.torch_rel_err(buf.Z[:M], Za)
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g):
                        step(buf.X[:M], Za)
                        step(buf.X2[:M], Zb)
                    bad.zero_()
                    for _ in range(a.stress_replays):
                        g.replay()
                    torch.cuda.synchronize()
                    r.check_debug()
                    n_graph = int(bad.item())
                    e_graph = mlp_sm90.torch_rel_err(buf.Z[:M], Zb)
                    del g
                    ok = n_alt == 0 and n_graph == 0 and e_b2b < 1e-2 and e_graph < 1e-2
                    log(f"{label}: alternating bad {n_alt}, {a.stress_launches} back-to-back rel err {e_b2b:.2e}, "
                        f"{a.stress_replays} graph replays bad {n_graph} rel err {e_graph:.2e} "
                        f"{'ok' if ok else 'FAIL'} ({time.time() - t0:.1f} s)")
                    if not ok:
                        failures.append(label)
                        broken.add((M, v))
                except Exception as e:  # noqa: BLE001
                    if failed(label, M, v, e):
                        return failures
        runners.clear()
        buf = None  # the next model's buffers replace these
        torch.cuda.empty_cache()
    return failures


def selected(a, name: str) -> bool:
    """Does --only (a.only: a substring of the variants' names, or empty for all) take this variant?"""
    return not a.only or a.only in name


def sanitizer_target(a, log: Log) -> list[str]:
    """The compute-sanitizer variants, each launched once. ``presatisfied`` (for racecheck, which
    serializes the blocks, so that a block waiting for another block's post could starve): every
    semaphore raised far beyond any target first, so every wait is satisfied at its first load, and
    the GeMMs of a two-launch ordering one after the other in stream order; the chain's output is
    then not checked (its consumer tiles may read the intermediate before the producer tiles that
    write it ran), the other orderings' are."""
    import torch

    failures: list[str] = []
    cases: dict = {}
    stream = torch.cuda.current_stream().cuda_stream
    for model, c, o, p, sp, g2, b1, st, c2 in sanitizer_variants(a.models.split(",")[0]):
        try:
            # the name first: a model's case (its reference) is built only for a variant that runs
            tiles = mlp_sm90.Sm90Tiles(c, grouped2=g2, banded1=b1 is True, grouped1=b1 == "G1", config2=c2)
            cfg = mlp_sm90.config_of(o, p)
            name = f"{model} M={a.sanitizer_M} {mlp_sm90.mlp_chain_name(model, a.sanitizer_M, cfg, tiles, sp, st)}"
            if not selected(a, name):
                continue
            if model not in cases:
                m = mlp_sm90.model_of(model)
                X, W1, W2, _, Zref = mlp_sm90.mlp_case(m, a.sanitizer_M, seed=7)
                Y = torch.empty(a.sanitizer_M, m.K2, device="cuda", dtype=torch.half)
                Z = torch.empty(a.sanitizer_M, m.H, device="cuda", dtype=torch.half)
                cases[model] = (X, W1, W2, Y, Z, Zref)
            X, W1, W2, Y, Z, Zref = cases[model]
            ptrs = tuple(t.data_ptr() for t in (X, W1, W2, Y, Z))
            r = mlp_sm90.mlp_chain(model, a.sanitizer_M, cfg, tiles, ptrs, splits=sp, store=st, timeout_ns=TIMEOUT_NS)
            Y.fill_(float("nan"))
            Z.fill_(float("nan"))
            checked = True
            if a.sanitizer_target == "presatisfied":
                if r.sems:
                    for sems in r.sems:
                        sems.fill_(1 << 24)  # every target (value * epoch) is far below: no wait spins
                    checked = o != Ordering.PERSISTENT
                for plan in r.plans:  # stream order, one GeMM at a time
                    plan.launch(stream)
                    torch.cuda.synchronize()
            else:
                r.launch(stream)
                torch.cuda.synchronize()
            r.check_debug()
            if checked:
                e = mlp_sm90.torch_rel_err(Z, Zref)
                if e >= 1e-2:
                    failures.append(name)
                log(f"variant {name}: {'ok' if e < 1e-2 else 'WRONG'} (rel err {e:.2e})")
            else:
                log(f"variant {name}: ran (output not checked: waits presatisfied)")
        except Exception as e:  # noqa: BLE001 - every variant is reported
            name = f"{model} M={a.sanitizer_M} {c} {WORDS[o]} {p} {sp} G2={g2} B1={b1} {st}"
            failures.append(name)
            log(f"variant {name}: ERROR {e}")
            log(traceback.format_exc())
            if _fatal(e):
                break
    failures += decode_sanitizer_target(a, log)
    failures += swap_sanitizer_target(a, log)
    failures += attention_sanitizer_target(a, log)
    log(f"sanitizer target: {len(failures)} variant(s) failed")
    return failures


# The decode kernel's compute-sanitizer cases: (model, M, row-major weights), every ordering of each
# (a ragged token block, the widest, and the row-major loads).
DECODE_SANITIZER_CASES = (("gpt3", 5, False), ("llama-ep", 5, False), ("llama-ep", 64, False), ("gpt3", 3, True))


def run_variant(log: Log, stream, name: str, run, check) -> "Exception | None":
    """One sanitizer variant: run() on `stream`, synchronized; check() -> its relative error, or None
    where the output is not checked (waits presatisfied). Logs the outcome; returns the exception
    that failed it (a wrong output: a ValueError), or None."""
    try:
        with stream:
            run()
            stream.synchronize()
        e = check()
        if e is None:
            log(f"variant {name}: ran (output not checked: waits presatisfied)")
            return None
        log(f"variant {name}: {'ok' if e < 1e-2 else 'WRONG'} (rel err {e:.2e})")
        return None if e < 1e-2 else ValueError(f"rel err {e:.2e}")
    except Exception as exc:  # noqa: BLE001 - every variant is reported
        log(f"variant {name}: ERROR {exc}")
        log(traceback.format_exc())
        return exc


def decode_sanitizer_target(a, log: Log) -> list[str]:
    """The decode kernel (workloads.mlp_decode) in every ordering of DECODE_SANITIZER_CASES, each
    launched once; ``presatisfied``: the chain's semaphores raised beyond any target first (its
    output then not checked)."""
    import cupy

    from cusyncgen.cuda import decode
    from cusyncgen.workloads import mlp_decode
    from cusyncgen.workloads.base import rel_err

    failures: list[str] = []
    stream = cupy.cuda.Stream()
    for model, M, row_major in DECODE_SANITIZER_CASES:
        names = {cfg: f"{model} M={M} {cfg}{mlp_decode.DECODE} ({'row-major' if row_major else 'packed'} weights)"
                 for cfg in decode.ORDERINGS}
        names = {cfg: name for cfg, name in names.items() if selected(a, name)}
        if not names:   # no variant of the case runs: its reference is not computed
            continue
        mlp = mlp_decode.MLPDecode(model, M, timeout_ns=TIMEOUT_NS, shape=decode.EXTRA[0] if row_major else None)
        x, w1, w2 = mlp.buffers(seed=7)
        ref = mlp.reference(x, w1, w2)
        y, z = mlp.outputs()
        for cfg, name in names.items():
            presat = a.sanitizer_target == "presatisfied" and cfg.endswith("+Chain")

            def run(cfg=cfg, presat=presat):
                z.fill(cupy.nan)
                if presat:
                    mlp.runner.sems[cfg.removesuffix("+Chain")].fill(1 << 24)
                mlp.run(stream, cfg, x, w1, w2, y, z)

            def check(presat=presat):
                mlp.check_stages()
                return None if presat else rel_err(z, ref)
            exc = run_variant(log, stream, name, run, check)
            if exc is not None:
                failures.append(name)
                if _fatal(exc):
                    return failures
    return failures


# The swapped GeMM's compute-sanitizer cases: (model, M), both orderings on each tile config of M
# (a ragged token tile, LLaMA-ep's SwiGLU epilogue, the widest token tile, the wide form on GPT-3's weights).
SWAP_SANITIZER_CASES = (("gpt3", 5), ("llama-ep", 5), ("llama-ep", 64), ("gpt3", 64))
# The K splits' own case: 2 tiles of 64 weight rows, 9 k-blocks of 64 (3 splits take 3 each; 2 take 5
# each, the second's last past K, read as zeros)
SWAP_SPLIT_SHAPE = (128, 576)


def swap_sanitizer_target(a, log: Log) -> list[str]:
    """The swapped GeMM (workloads.mlp_swap) in both orderings on every tile config of each case of
    SWAP_SANITIZER_CASES that runs both of its GeMMs (tile_pairs), each launched once (nothing waits
    per tile: presatisfied runs the same); and, first, each K split over a cluster (SwapTile.KS > 1,
    not an MLP candidate) alone on a small weight ("swap split <config>": SWAP_SPLIT_SHAPE, its last split
    ragged), small enough for racecheck to finish where the models' sizes run past its limit."""
    import cupy

    from cusyncgen.cuda import sm90
    from cusyncgen.workloads import mlp_swap
    from cusyncgen.workloads.base import rel_err

    failures: list[str] = []
    stream = cupy.cuda.Stream()
    N, K = SWAP_SPLIT_SHAPE
    for config in [c for c in sm90.SWAP_CONFIGS if sm90.swap_tile(c).KS > 1]:
        tile = sm90.swap_tile(config)
        M = max(1, tile.BT - 3)
        name = f"swap split {config} M={M} {N}x{K}"
        if not selected(a, name):
            continue
        rs = cupy.random.RandomState(7)
        x = rs.standard_normal((M, K), dtype=cupy.float32).astype(cupy.float16)
        w = (rs.standard_normal((N, K), dtype=cupy.float32) / K ** 0.5).astype(cupy.float16)
        ref = x.astype(cupy.float32) @ w.astype(cupy.float32).T
        wp = sm90.swap_pack(w, tile.group)
        y = cupy.empty((M, N), dtype=cupy.float16)
        cupy.cuda.Device().synchronize()   # the inputs, made on the legacy stream

        def run(config=config, M=M, wp=wp, x=x, y=y):
            y.fill(cupy.nan)
            sm90.swap_gemm(config, sm90.EPI_IDENTITY, wp.data.ptr, x.data.ptr, y.data.ptr, M, N, K, stream=stream.ptr)
        exc = run_variant(log, stream, name, run, lambda y=y, ref=ref: rel_err(y, ref))
        if exc is not None:
            failures.append(name)
            if _fatal(exc):
                return failures
    for model, M in SWAP_SANITIZER_CASES:
        for config in [c for c, c2 in mlp_swap.tile_pairs(M, model=model) if c == c2]:
            mlp = mlp_swap.MLPSwap(model, M, config)
            names = {f"{model} M={M} {cfg.name} ({config})": cfg for cfg in mlp.configs()}
            names = {name: cfg for name, cfg in names.items() if selected(a, name)}
            if not names:   # no variant of the case runs: its reference is not computed
                continue
            x, w1, w2 = mlp.buffers(seed=7)
            ref = mlp.reference(x, w1, w2)
            y, z = mlp.outputs()
            for name, cfg in names.items():

                def run(cfg=cfg, mlp=mlp, y=y, z=z):
                    z.fill(cupy.nan)
                    mlp.run(stream, cfg, x, w1, w2, y, z)
                exc = run_variant(log, stream, name, run, lambda z=z, ref=ref: rel_err(z, ref))
                if exc is not None:
                    failures.append(name)
                    if _fatal(exc):
                        return failures
    return failures


# The attention block's compute-sanitizer cases: generation (model, B, S') in every configuration on
# the decode engines (StreamSync, PDL, each policy +PDL and +Chain), and prompts (model, B, S,
# causal, the QKV and output GeMMs' tile configs) on the CUTLASS GeMMs and the Hopper FMHA (S past a
# whole tile, causal and not; the QKV GeMM on one-head tiles, and on two-head ones).
ATTENTION_SANITIZER_CASES = (("gpt3", 3, 100), ("llama", 2, 700))
# each way the attention kernel reads the cache (decode_attention.FORMS), alone, PDL-launched: (B, heads, S')
ATTENTION_FORM_CASE = (2, 8, 300)
ONE_HEAD = ("128x128x64", "128x128x64")
PROMPT_SANITIZER_CASES = (("llama", 1, 200, True, ONE_HEAD), ("gpt3", 2, 136, False, ONE_HEAD),
                          ("llama", 2, 256, True, ONE_HEAD), ("gpt3", 1, 256, True, ("128x256x64", "128x128x64")),
                          # QKV tiles across heads (examples/attention_qkv_tiles.dep)
                          ("gpt3", 1, 512, False, ("128x192x64tma", "128x192x64tma")),
                          ("gpt3", 1, 384, True, ("128x144x64", "128x128x64")),
                          ("llama", 1, 576, True, ("128x192x64tma splitK3@0", "128x128x64pp")),
                          # the output GeMM on 256-row tiles, each waiting on four of O's 64-row tiles
                          ("gpt3", 1, 512, True, ("128x192x64tma", "256x128x64tma")),
                          # 384 QKV tiles (three rounds): the FMHA waits on them (qkv_triggers)
                          ("llama", 2, 1024, True, ONE_HEAD))


def attention_sanitizer_target(a, log: Log) -> list[str]:
    """The sm90 attention block (workloads.attention_sm90) in every configuration of the cases above,
    and the generation attention kernel alone in each form, each launched once; ``presatisfied``: a synchronized configuration's semaphores raised beyond any
    target first (its output then not checked)."""
    import cupy
    import torch

    from cusyncgen.workloads import attention_sm90 as W

    failures: list[str] = []
    stream = cupy.cuda.Stream()

    def variant(name, run, check):
        if selected(a, name) and run_variant(log, stream, name, run, check) is not None:
            failures.append(name)

    def wanted(case: str, configs) -> bool:
        """Whether --only names a variant of this case (a case none of whose variants runs is not
        built: its reference would run under the sanitizer too)."""
        return any(selected(a, f"{case} {cfg}") for cfg in configs)

    for model, B, past in ATTENTION_SANITIZER_CASES:
        if not wanted(f"attention {model} B={B} S'={past}", W.ORDERINGS + W.SYNCED):
            continue
        blk = W.AttentionGen(model, B, past, timeout_ns=TIMEOUT_NS)
        ins, outs = blk.buffers(seed=7), blk.outputs()
        ref = blk.reference(*ins)
        for cfg in blk.configs():
            presat = a.sanitizer_target == "presatisfied" and cfg in W.SYNCED

            def run(cfg=cfg, presat=presat):
                if presat:
                    for sems in blk.chain.sems[cfg]:
                        sems.fill(1 << 24)
                for o in outs:
                    o.fill(cupy.nan)
                blk.run(stream, cfg, *ins, *outs)

            def check(presat=presat):
                blk.check_stages()
                if presat:
                    return None
                err, appended = blk.error(outs, ins, ref)
                return err if appended else float("inf")
            variant(f"attention {model} B={B} S'={past} {cfg}", run, check)
    from cusyncgen.cuda import decode_attention as A
    B, H, past = ATTENTION_FORM_CASE
    forms = [f for f in A.FORMS if selected(a, f"attention form {f} B={B} S'={past}")]
    if forms:
        rs = cupy.random.RandomState(7)
        qkv = rs.standard_normal((B, 3 * H * A.HEAD_DIM), dtype=cupy.float32).astype(cupy.float16)
        kc, vc = (rs.standard_normal((B, H, past + 2, A.HEAD_DIM), dtype=cupy.float32).astype(cupy.float16)
                  for _ in range(2))
        ref = A.reference(qkv, kc, vc, past)
        o = cupy.empty((B, H * A.HEAD_DIM), dtype=cupy.float16)
        for form in forms:
            att = A.DecodeAttention(B, H, past + 2, past, form=form)

            def run_form(att=att):
                o.fill(cupy.nan)
                att.launch(stream, qkv, kc, vc, o, pdl=True)

            def check_form():
                return float(cupy.abs(o.astype(cupy.float32) - ref).max())
            variant(f"attention form {form} B={B} S'={past}", run_form, check_form)
    for model, B, S, causal, engines in PROMPT_SANITIZER_CASES:
        if not wanted(f"attention prompt {model} B={B} S={S}{' causal' if causal else ''}",
                      W.PROMPT_ORDERINGS + W.PROMPT_SYNCED):
            continue
        blk = W.AttentionPrompt(model, B, S, causal, engines, timeout_ns=TIMEOUT_NS)
        ins, outs = blk.buffers(seed=7), blk.outputs()
        z_ref, _ = blk.reference(*ins)
        for cfg in blk.configs():
            presat = a.sanitizer_target == "presatisfied" and cfg in W.PROMPT_SYNCED

            def run_prompt(blk=blk, ins=ins, outs=outs, cfg=cfg, presat=presat):
                if presat:
                    for sems in blk.chain(cfg, ins + outs).sems:
                        sems.fill(1 << 24)
                for o in outs[:3]:
                    o.fill(cupy.nan)
                blk.run(stream, cfg, *ins, *outs)

            def check_prompt(blk=blk, outs=outs, z_ref=z_ref, presat=presat):
                blk.check_stages()
                return None if presat else W.rel(torch.from_dlpack(outs[2]), z_ref)
            variant(f"attention prompt {model} B={B} S={S}{' causal' if causal else ''} {cfg}", run_prompt,
                    check_prompt)
    return failures


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="gpt3,llama-ep", help="(the sanitizer target: its first, plus llama-ep's "
                                                              "epilogues)")
    ap.add_argument("--M", default="1,200,512", help="sizes of the checks (200: a multiple of no tile)")
    ap.add_argument("--configs", default=None, help="tile configs (default: every one of the library)")
    ap.add_argument("--orderings", default=",".join(ORDERINGS),
                    help="of stream (StreamSync), pdl (PDL alone), pdl+policy (<Policy>+PDL), chain (<Policy>+Chain)")
    ap.add_argument("--policies", default=",".join(sm90.POLICIES))
    ap.add_argument("--grouped2", default="off,on",
                    help="the second GeMM's order: off (the compiler's), on (grouped_order), or both")
    ap.add_argument("--banded1", default="off,on,g1",
                    help="the first GeMM's order: off (the compiler's), on (banded_order, at M >= 512), g1 "
                         "(grouped_order); a list")
    ap.add_argument("--pairs", default=",".join(PAIRS),
                    help="per-GeMM tile configs, '<config1>+<config2>,...' ('' for none; not in the chain)")
    ap.add_argument("--stress-M", default="256", help="sizes of the stress runs ('' to skip them)")
    ap.add_argument("--stress-alternating", type=int, default=200)
    ap.add_argument("--stress-launches", type=int, default=1000)
    ap.add_argument("--stress-replays", type=int, default=100)
    ap.add_argument("--timeout-ms", type=float, default=TIMEOUT_NS / 1e6,
                    help="a wait longer than this gives up and is reported (0: never)")
    ap.add_argument("--sanitizer-target", choices=["run", "presatisfied"], default=None,
                    help="run the compute-sanitizer variants once each instead: as launched (run) or with every "
                         "wait satisfied beforehand and in stream order (presatisfied, for racecheck)")
    ap.add_argument("--sanitizer-M", type=int, default=128)
    ap.add_argument("--only", default="", help="the sanitizer target: only variants whose name contains this")
    ap.add_argument("-o", "--out-dir", type=Path, default=None,
                    help="also write the lines to DIR/sm90-checks-<device>.log")
    return ap


def main(argv=None) -> int:
    ap = parser()
    a = ap.parse_args(argv)
    unknown = [o for o in a.orderings.split(",") if o not in ORDERINGS]
    if unknown:
        ap.error(f"--orderings: no ordering {', '.join(unknown)} (known: {', '.join(ORDERINGS)})")
    try:
        for m in a.models.split(","):
            mlp_sm90.check_model(m)
    except CusyncError as e:
        ap.error(f"--models: {e.message}")
    import torch

    if not (torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9):
        print(f"{PROG}: error: needs an sm_90 GPU (torch sees none)", file=sys.stderr)
        return 1
    torch.backends.cuda.matmul.allow_tf32 = False
    device = torch.cuda.get_device_name()
    path = None
    if a.out_dir is not None and a.sanitizer_target is None:
        a.out_dir.mkdir(parents=True, exist_ok=True)
        path = a.out_dir / f"sm90-checks-{slug(device)}.log"
    log = Log(path)
    try:
        lib = sm90.library()
    except sm90.Sm90Error as e:
        print(f"{PROG}: error: {e.message}", file=sys.stderr)
        return 1
    log(f"# {command_line(PROG, argv)} on {device}, library of source hash {sm90.library().source_hash}")
    log(f"library configs: {', '.join(lib.configs)}; torch {torch.__version__}")
    t0 = time.time()
    signal.signal(signal.SIGTERM, _interrupted)  # timeout(1): report what ran so far
    try:
        failures = sanitizer_target(a, log) if a.sanitizer_target else check_all(a, log)
    except KeyboardInterrupt:
        failures = ["interrupted"]
    log(f"{len(failures)} failure(s){': ' + '; '.join(failures[:20]) if failures else ''} ({time.time() - t0:.0f} s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
