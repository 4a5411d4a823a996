"""Where the attention block's GeMMs stand at prompt processing (sm_90, CuPy, torch and the sm90 library needed).

Each GeMM of the prompt's attention block (the QKV projection and the output projection, GPT-3 and
LLaMA at 8-way model parallelism) at M tokens, alone, three ways in the same rounds:

- cuBLAS as a user calls it (torch.mm into a preallocated output, in a CUDA graph; the kernel it
  picks named from the profiler);
- every engine the prompt's bench offers that GeMM (attention_sm90.prompt_engines_for: our
  synchronized kernel's tile configs, with the split-K tails auto_splits picks);
- the stock CUTLASS 4.2 kernel of the library (cooperative, persistent, TMA epilogue) on clusters
  of 1 and of 2 CTAs along M (B multicast to both): what the cluster buys at these shapes.

Then, at M up to 1024 tokens, the block's edges: each of its three kernels alone, and the block,
ours (the fastest engines above, the FMHA, stream order) and the vendor's (cuBLAS, SDPA on cuDNN,
cuBLAS): what the block costs beyond its kernels.

Each form is a CUDA graph of 5 launches over five input sets (weights too: none read from L2 twice),
timed in interleaved rounds (timing.time_in_rounds: one replay of each form in turn, the order
rotated from round to round; every form under the same clocks); the median per form. Every form's
output is checked against a float32 product on a poisoned output. The floor beside each is the GeMM's FLOPs over the
same run's cuBLAS rate at 8192^3 (baselines.ceilings).

    python -m cusyncgen.commands.prompt_gemms [--M 512,1024,2048,4096] [--rounds 5]
"""
from __future__ import annotations

import argparse
import math
import sys

from cusyncgen.commands import missing_sm90

SETS = 5
EDGES_MAX_M = 1024   # the edges table's sizes: the --M up to this many tokens
STOCK = (("128x128x64", 1), ("128x128x64", 2), ("128x256x64", 1), ("128x256x64", 2))


def cublas_kernel(fn) -> str:
    """The name of the longest GPU kernel fn launches (torch.profiler), shortened."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    evs = [e for e in prof.key_averages() if e.device_time_total > 0]
    if not evs:
        return "?"
    name = max(evs, key=lambda e: e.device_time_total).key
    return name if len(name) <= 90 else name[:87] + "..."


def _on(tstream, fn) -> None:
    import torch
    with torch.cuda.stream(tstream):
        fn()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cusyncgen.commands.prompt_gemms",
                                 description="The attention block's GeMMs at prompt sizes against cuBLAS and stock "
                                             "CUTLASS (clusters of 1 and 2); sm_90, CuPy, torch and the sm90 library "
                                             "needed.")
    ap.add_argument("--M", default="512,1024,2048,4096", help="tokens, comma-separated (default 512,1024,2048,4096)")
    ap.add_argument("--models", default="gpt3,llama", help="models, comma-separated (default gpt3,llama)")
    ap.add_argument("--rounds", type=int, default=5, help="rotating timing rounds (default 5)")
    args = ap.parse_args(argv)
    try:
        Ms = [int(v) for v in args.M.split(",")]
    except ValueError:
        ap.error(f"--M: comma-separated integers, not {args.M!r}")
    if any(m < 128 for m in Ms):
        ap.error("--M: prompt sizes of at least 128 tokens")
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    models = args.models.split(",")
    from cusyncgen.workloads import attention_sm90 as A
    bad = [m for m in models if m not in A.MODELS]
    if bad:
        ap.error(f"--models: unknown {', '.join(bad)} (known: {', '.join(A.MODELS)})")
    if missing_sm90("prompt_gemms", "cupy"):
        return 1
    import cupy
    import torch

    from cusyncgen.cuda import baselines, sm90, timing
    from cusyncgen.workloads.base import rel_err

    ceil = baselines.ceilings()
    stream = cupy.cuda.Stream(non_blocking=True)
    tstream = torch.cuda.ExternalStream(stream.ptr)
    print(f"# python -m cusyncgen.commands.prompt_gemms --M {args.M} --models {args.models} --rounds {args.rounds} "
          f"on {torch.cuda.get_device_name()}, library of source hash {sm90.source_hash()[:12]}; cuBLAS at 8192^3 "
          f"{ceil['peak_flops'] / 1e12:.0f} TFLOP/s")
    wrong = 0
    chosen: dict = {}   # (model, "QKV" | "out", M): our fastest engine
    for model in models:
        for (name, (N, K)) in zip(("QKV", "out"), A.gemm_shapes(model)):
            print(f"\n## {model} {name} GeMM: N = {N}, K = {K}\n")
            print("| M | floor (us) | cuBLAS (us) | ours, best (us) | cuBLAS / ours | stock c1 128x128, c2 128x128, "
                  "c1 128x256, c2 128x256 (us) | stock c2 / c1, best of each | our engines (us) | cuBLAS kernel |")
            print("|---|---|---|---|---|---|---|---|---|")
            for M in Ms:
                g = torch.Generator(device="cuda").manual_seed(M * 7 + N)
                xs = [torch.randn(M, K, device="cuda", generator=g).half() for _ in range(SETS)]
                ws = [(torch.randn(N, K, device="cuda", generator=g) / K ** 0.5).half() for _ in range(SETS)]
                ref = xs[0].float() @ ws[0].float().t()
                y = torch.empty(M, N, device="cuda", dtype=torch.half)
                xc = [cupy.from_dlpack(x) for x in xs]
                wc = [cupy.from_dlpack(w) for w in ws]
                yc, refc = cupy.from_dlpack(y), cupy.from_dlpack(ref)
                forms, errs = {}, {}

                def check(label, one):
                    y.fill_(math.nan)
                    torch.cuda.synchronize()
                    with stream:
                        one(stream)
                    stream.synchronize()
                    errs[label] = float(rel_err(yc, refc))

                check("cublas", lambda s: _on(tstream, lambda: torch.mm(xs[0], ws[0].t(), out=y)))
                tg = baselines.graph_of(lambda: [torch.mm(xs[i], ws[i].t(), out=y) for i in range(SETS)])
                for e in A.prompt_engines_for(M, N, K):
                    eng = A.CutlassGemm(e, M, N, K)
                    check(e, lambda s, eng=eng: eng.launch(s, xc[0], wc[0], yc))
                    forms[e] = lambda s, eng=eng: [eng.launch(s, xc[i], wc[i], yc) for i in range(SETS)]
                for c, cm in STOCK:
                    label = f"stock {c} c{cm}"

                    def stock(s, i, c=c, cm=cm):
                        sm90.stock_gemm(c, cm, xs[i].data_ptr(), ws[i].data_ptr(), y.data_ptr(), M, N, K,
                                        stream=s.ptr)
                    check(label, lambda s, stock=stock: stock(s, 0))
                    forms[label] = lambda s, stock=stock: [stock(s, i) for i in range(SETS)]
                graphs = {k: timing.Replay((timing.capture(f, stream).launch,), SETS) for k, f in forms.items()}
                graphs["cublas"] = timing.Replay(baselines.replays_on(tg), SETS)
                t, _ = timing.time_in_rounds(graphs, stream, 10, rounds=args.rounds)
                for k, e in errs.items():
                    if e >= A.TOL:
                        wrong += 1
                        print(f"prompt_gemms: {model} {name} M={M} {k}: relative error {e:.3g}", file=sys.stderr)
                        t[k] = math.inf
                ours = {k: v for k, v in t.items() if k != "cublas" and not k.startswith("stock")}
                best = min(ours, key=ours.get)
                chosen[(model, name, M)] = best
                st = [t[f"stock {c} c{cm}"] for c, cm in STOCK]
                c1, c2 = min(st[0], st[2]), min(st[1], st[3])
                floor = 2 * M * N * K / ceil["peak_flops"] * 1e6
                kern = cublas_kernel(lambda: torch.mm(xs[0], ws[0].t(), out=y))
                print(f"| {M} | {floor:.1f} | {t['cublas']:.1f} | {t[best]:.1f} ({best}) | {t['cublas'] / t[best]:.3f} | "
                      f"{', '.join(f'{v:.1f}' for v in st)} | {c2 / c1:.3f} | "
                      f"{', '.join(f'{k} {v:.1f}' for k, v in sorted(ours.items(), key=lambda kv: kv[1]))} | "
                      f"`{kern}` |")
                del graphs, forms
    edges_M = [m for m in Ms if m <= EDGES_MAX_M]
    if edges_M:
        print("\n## The block's edges: each kernel alone, the block, and the block less the kernels alone\n")
        print("Ours: the QKV GeMM and the output GeMM on their fastest engines above, CUTLASS's FMHA, in stream "
              "order; the vendor's: cuBLAS, SDPA (cuDNN backend) on the QKV GeMM's strided views, cuBLAS. Each "
              "a CUDA graph of one block (or one kernel), timed in interleaved rounds.\n")
        print("| model | M | ours: QKV, attention, out alone (us) | ours: block (us) | block - alone | "
              "vendor: QKV, SDPA, out alone (us) | vendor: block (us) | block - alone | rel err (ours, vendor) |")
        print("|---|---|---|---|---|---|---|---|---|")
        for model in models:
            for M in edges_M:
                wrong += _edges(model, M, (chosen[(model, "QKV", M)], chosen[(model, "out", M)]), stream,
                                args.rounds)
    if wrong:
        print(f"prompt_gemms: {wrong} form(s) off the float32 reference", file=sys.stderr)
        return 1
    return 0


def _edges(model: str, M: int, engines: tuple, stream, rounds: int) -> int:
    """One row of the edges table (a prompt of M tokens, one sequence); returns the number of wrong
    blocks (0 or more)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from cusyncgen.cuda import baselines, timing
    from cusyncgen.workloads import attention_sm90 as A

    blk = A.AttentionPrompt(model, 1, M, False, engines)
    ins, outs = blk.buffers(seed=M), blk.outputs()
    x, wq, wo = ins
    qkv, o, z, lse = outs
    g1, g2 = blk.parts
    NH, D = blk.NH, A.D
    ours = {"Q": lambda s: g1.launch(s, x, wq, qkv),
            "F": lambda s: blk.stage(s, qkv, o, lse),
            "O": lambda s: g2.launch(s, o, wo, z)}
    X, WQ, WO = (torch.from_dlpack(a) for a in ins)
    Q = torch.empty(M, 3 * NH * D, device="cuda", dtype=torch.half)
    Z = torch.empty(M, blk.H, device="cuda", dtype=torch.half)
    views = Q.view(1, M, 3, NH, D).permute(2, 0, 3, 1, 4)
    held: dict = {}

    def sdpa():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            held["o"] = torch.nn.functional.scaled_dot_product_attention(views[0], views[1], views[2])
    vendor = {"vQ": lambda: torch.mm(X, WQ.t(), out=Q), "vS": sdpa,
              "vO": lambda: torch.mm(held["o"].transpose(1, 2).reshape(M, NH * D), WO.t(), out=Z)}
    vendor["vQ"]()
    sdpa()
    graphs = {}
    for key, parts in (("Q", "Q"), ("F", "F"), ("O", "O"), ("QFO", "QFO")):
        g = timing.capture(lambda s, parts=parts: [ours[p](s) for p in parts], stream)
        graphs[key] = timing.Replay((g.launch,))
    for key, parts in (("vQ", ["vQ"]), ("vS", ["vS"]), ("vO", ["vO"]), ("vQSO", ["vQ", "vS", "vO"])):
        g = baselines.graph_of(lambda parts=parts: [vendor[p]() for p in parts])
        graphs[key] = timing.Replay(baselines.replays_on(g))
    for o_ in outs[:3]:
        o_.fill(float("nan"))
    Z.fill_(float("nan"))
    torch.cuda.synchronize()
    with stream:
        graphs["QFO"].launches[0](stream)
        graphs["vQSO"].launches[0](stream)
    stream.synchronize()
    z_ref, _ = blk.reference(*ins)
    err = (A.rel(torch.from_dlpack(z), z_ref), A.rel(Z, z_ref))
    t, _ = timing.time_in_rounds(graphs, stream, 20, rounds=rounds)
    alone, valone = t["Q"] + t["F"] + t["O"], t["vQ"] + t["vS"] + t["vO"]
    print(f"| {model} | {M} | {t['Q']:.1f}, {t['F']:.1f}, {t['O']:.1f} | {t['QFO']:.1f} | {t['QFO'] - alone:+.1f} | "
          f"{t['vQ']:.1f}, {t['vS']:.1f}, {t['vO']:.1f} | {t['vQSO']:.1f} | {t['vQSO'] - valone:+.1f} | "
          f"{err[0]:.1e}, {err[1]:.1e} |")
    return sum(e >= A.TOL for e in err)


if __name__ == "__main__":
    sys.exit(main())
