"""Where the attention block's GeMMs stand at prompt processing (sm_90, CuPy, torch and the sm90 library needed).

Each GeMM of the prompt's attention block (the QKV projection and the output projection, GPT-3 and
LLaMA at 8-way model parallelism) at M tokens, alone, three ways in the same rounds:

- cuBLAS as a user calls it (torch.mm into a preallocated output, in a CUDA graph; the kernel it
  picks named from the profiler);
- every engine the prompt's bench offers that GeMM (attention_sm90.prompt_engines_for: our
  synchronized kernel's tile configs, with the split-K tails auto_splits picks);
- the stock CUTLASS 4.2 kernel of the library (cooperative, persistent, TMA epilogue) on clusters
  of 1 and of 2 CTAs along M (B multicast to both): what the cluster buys at these shapes.

Each form is a CUDA graph of 5 launches over five input sets (weights too: none read from L2 twice),
timed in rounds that rotate over the forms; the median per form. Every form's output is checked
against a float32 product on a poisoned output. The floor beside each is the GeMM's FLOPs over the
same run's cuBLAS rate at 8192^3 (baselines.ceilings).

    python -m cusyncgen.commands.prompt_gemms [--M 512,1024,2048,4096] [--rounds 5]
"""
from __future__ import annotations

import argparse
import math
import sys

from cusyncgen.commands import missing_sm90

SETS = 5
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


class _Replay:
    """A torch CUDA graph replayed on the timing stream (timing.time_graphs' launch(stream))."""

    def __init__(self, graph, tstream):
        self.graph, self.tstream = graph, tstream

    def launch(self, stream) -> None:
        _on(self.tstream, self.graph.replay)


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
    from cusyncgen.workloads.mlp_sm90 import rotations

    ceil = baselines.ceilings()
    stream = cupy.cuda.Stream(non_blocking=True)
    tstream = torch.cuda.ExternalStream(stream.ptr)
    print(f"# python -m cusyncgen.commands.prompt_gemms --M {args.M} --models {args.models} --rounds {args.rounds} "
          f"on {torch.cuda.get_device_name()}, library of source hash {sm90.source_hash()[:12]}; cuBLAS at 8192^3 "
          f"{ceil['peak_flops'] / 1e12:.0f} TFLOP/s")
    wrong = 0
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
                yc = cupy.from_dlpack(y)
                forms, errs = {}, {}

                def check(label, one):
                    y.fill_(math.nan)
                    torch.cuda.synchronize()
                    with stream:
                        one(stream)
                    stream.synchronize()
                    errs[label] = float(rel_err(yc, cupy.from_dlpack(ref)))

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
                graphs = {k: timing.capture(f, stream) for k, f in forms.items()}
                graphs["cublas"] = _Replay(tg, tstream)
                res = {k: [] for k in graphs}
                for order in rotations(list(graphs), args.rounds):
                    for k in order:
                        res[k].append(timing.median(timing.time_graphs([graphs[k]], stream, iters=10)) / SETS)
                t = {k: timing.median(v) for k, v in res.items()}
                for k, e in errs.items():
                    if e >= A.TOL:
                        wrong += 1
                        print(f"prompt_gemms: {model} {name} M={M} {k}: relative error {e:.3g}", file=sys.stderr)
                        t[k] = math.inf
                ours = {k: v for k, v in t.items() if k != "cublas" and not k.startswith("stock")}
                best = min(ours, key=ours.get)
                st = [t[f"stock {c} c{cm}"] for c, cm in STOCK]
                c1, c2 = min(st[0], st[2]), min(st[1], st[3])
                floor = 2 * M * N * K / ceil["peak_flops"] * 1e6
                kern = cublas_kernel(lambda: torch.mm(xs[0], ws[0].t(), out=y))
                print(f"| {M} | {floor:.1f} | {t['cublas']:.1f} | {t[best]:.1f} ({best}) | {t['cublas'] / t[best]:.3f} | "
                      f"{', '.join(f'{v:.1f}' for v in st)} | {c2 / c1:.3f} | "
                      f"{', '.join(f'{k} {v:.1f}' for k, v in sorted(ours.items(), key=lambda kv: kv[1]))} | "
                      f"`{kern}` |")
                del graphs, forms
    if wrong:
        print(f"prompt_gemms: {wrong} form(s) off the float32 reference", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
