"""What the QKV GeMM's strided rows cost the prompt's attention stage (sm_90, torch and the sm90
library needed).

The FMHA of the prompt (runtime_cuda/sm90/fmha.cu) reads Q, K, V from the QKV GeMM's output
[B S, 3 H 128]: a token's row of one head is 256 bytes, the next token's 3 H 256 bytes further. SDPA's
best form gets q, k, v each [B, H, S, 128] contiguous. Per prompt point of `bench attention --kernel
sm90`, this times the same FMHA on both layouts and SDPA (cuDNN) on the contiguous one, each a CUDA
graph of 10 calls, in rotating rounds, and checks both FMHA outputs against SDPA's; on the QKV rows
both kernel schedules (cooperative, ping-pong), the others with the one `fmha_schedule` picks. The last
columns time a graph of one call, the strided FMHA's replayed 30 times back to back and SDPA's
synchronized after each replay: what a synchronize per replay adds to one side (the launch's CPU
latency; the benches time both sides back to back, cusyncgen.cuda.baselines).

    python -m cusyncgen.commands.fmha_layout [--rounds 15]
"""
from __future__ import annotations

import argparse
import statistics
import sys

from cusyncgen.commands import missing_sm90

POINTS = [(1, 512), (1, 1024), (1, 2048), (1, 4096), (4, 1024)]
D = 128


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cusyncgen.commands.fmha_layout",
                                 description="The prompt's FMHA on the QKV GeMM's rows and on contiguous q, k, v, "
                                             "against SDPA (cuDNN); sm_90, torch and the sm90 library needed.")
    ap.add_argument("--rounds", type=int, default=15, help="rotating timing rounds (default 15)")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    if missing_sm90("fmha_layout", "torch.nn.attention"):
        return 1
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from cusyncgen.cuda import driver
    from cusyncgen.cuda.sm90 import fmha, fmha_heads, fmha_schedule
    from cusyncgen.workloads.attention_sm90 import MODELS, heads

    sms = driver.sm_count()
    print(f"# python -m cusyncgen.commands.fmha_layout --rounds {args.rounds} on {torch.cuda.get_device_name()}")
    print("| model | B | S | causal | FMHA on the QKV rows, cooperative / ping-pong (us) | schedule | "
          "FMHA on [B, H, S, D] (us) | SDPA cuDNN (us) | rows / heads | SDPA / rows | SDPA / heads | "
          "rel err rows (both schedules), heads | as the bench: rows, SDPA (us) | SDPA / rows |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    torch.manual_seed(0)
    for model in MODELS:
        H = heads(model)
        for causal in (False, True):
            for B, S in POINTS:
                qkv = torch.randn(B * S, 3 * H * D, device="cuda", dtype=torch.float16)
                q, k, v = (a.contiguous() for a in qkv.view(B, S, 3, H, D).permute(2, 0, 3, 1, 4))
                o_rows = torch.full((B * S, H * D), float("nan"), device="cuda", dtype=torch.float16)
                o_heads = torch.full_like(o_rows, float("nan"))
                lse = torch.empty(B, H, S, device="cuda", dtype=torch.float32)

                pick = fmha_schedule(B, S, causal)

                def rows(st, schedule=pick):
                    fmha(qkv.data_ptr(), o_rows.data_ptr(), lse.data_ptr(), B, H, S, causal, sms, st, schedule)

                def hds(st):
                    fmha_heads(q.data_ptr(), k.data_ptr(), v.data_ptr(), o_heads.data_ptr(), lse.data_ptr(), B, H,
                               S, causal, sms, st)

                def sdpa(st):
                    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

                ref = sdpa(0).float()
                stream = torch.cuda.current_stream().cuda_stream
                rows(stream)
                hds(stream)
                torch.cuda.synchronize()
                ref_rows = ref.permute(0, 2, 1, 3).reshape(B * S, H * D)
                err = [((o.float() - ref_rows).norm() / ref_rows.norm()).item() for o in (o_rows, o_heads)]
                o_rows.fill_(float("nan"))
                rows(stream, "cooperative" if pick == "pingpong" else "pingpong")
                torch.cuda.synchronize()
                e2 = ((o_rows.float() - ref_rows).norm() / ref_rows.norm()).item()
                err[0] = e2 if not e2 <= err[0] else err[0]  # the larger; a NaN (unwritten output) stays
                side = torch.cuda.Stream()

                def graph(fn, calls):
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.stream(side):
                        fn(side.cuda_stream)  # warm outside the capture
                        side.synchronize()
                        with torch.cuda.graph(g, stream=side):
                            for _ in range(calls):
                                fn(side.cuda_stream)
                    return g

                def timed(g, replays, synced):
                    """us per replay: the median of `replays` replays, synchronized after each or back to back"""
                    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                          for _ in range(replays)]
                    for a, b in ev:
                        a.record()
                        g.replay()
                        b.record()
                        if synced:
                            b.synchronize()
                    torch.cuda.synchronize()
                    return statistics.median(a.elapsed_time(b) * 1000.0 for a, b in ev)

                graphs = {n: graph(fn, 10) for n, fn in (("rows", rows), ("heads", hds), ("sdpa", sdpa))}
                other = "cooperative" if pick == "pingpong" else "pingpong"
                graphs["other"] = graph(lambda st: rows(st, other), 10)
                timers = {n: (lambda g=g: timed(g, 1, True) / 10) for n, g in graphs.items()}
                g_rows, g_sdpa = graph(rows, 1), graph(sdpa, 1)
                timers["bench rows"] = lambda: timed(g_rows, 30, False)
                timers["bench sdpa"] = lambda: timed(g_sdpa, 30, True)
                times = {n: [] for n in timers}
                names = list(timers)
                for r in range(args.rounds):
                    for j in range(len(names)):
                        n = names[(j + r) % len(names)]
                        times[n].append(timers[n]())
                t = {n: statistics.median(v) for n, v in times.items()}
                coop, pp = (t["rows"], t["other"]) if pick == "cooperative" else (t["other"], t["rows"])
                print(f"| {model} | {B} | {S} | {'yes' if causal else 'no'} | {coop:.1f} / {pp:.1f} | {pick} | "
                      f"{t['heads']:.1f} | "
                      f"{t['sdpa']:.1f} | {t['rows'] / t['heads']:.3f}x | {t['sdpa'] / t['rows']:.3f}x | "
                      f"{t['sdpa'] / t['heads']:.3f}x | {err[0]:.1e}, {err[1]:.1e} | {t['bench rows']:.1f}, "
                      f"{t['bench sdpa']:.1f} | {t['bench sdpa'] / t['bench rows']:.3f}x |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
