"""Vendor baselines and the roofline floor, measured in the same process as the CuSync runs.

The vendor is at its best: each workload offers the forms of its computation a user would write
(VendorForms), and a point's vendor row is the fastest of them that computes the reference's
result, named in the row's "vendor_form"."""
from __future__ import annotations

import itertools
import math
import sys
from dataclasses import dataclass, field

from cusyncgen.cuda.lazy import torch

from cusyncgen.cuda import timing


def _time_torch(fn, iters: int = 30, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) * 1000.0)
    return timing.median(ts)


# Copy-bandwidth measurements of a ceilings() call, the fastest kept: one right after sustained work
# (the matmul, or a point's timing rounds) read as low as 2.54 TB/s on an H100 that copies at 2.9-3.0,
# which would put a floor above what the kernels beside it reached.
BANDWIDTH_TRIES = 3


def ceilings() -> dict:
    """fp16 matmul rate (cuBLAS, 8192^3 on random data) and device copy bandwidth (read+write, 1 GiB:
    the fastest of BANDWIDTH_TRIES medians, measured before the matmul)."""
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    t = min(_time_torch(lambda: y.copy_(x), iters=15) for _ in range(BANDWIDTH_TRIES))
    bw = 2 * (1 << 30) / (t * 1e-6)
    del x, y
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    t = _time_torch(lambda: a @ b, iters=15)
    peak = 2 * 8192 ** 3 / (t * 1e-6)
    del a, b
    return {"peak_flops": peak, "bandwidth": bw}


def graph_of(fn):
    """fn captured in a CUDA graph (after three warm-up calls on a side stream): the graph."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g


def _time_back_to_back(fn, iters: int = 30, warmup: int = 5) -> float:
    """Median time (us) of fn's GPU work, its calls queued back to back between events recorded on
    the stream, one synchronize at the end: how cusyncgen.cuda.timing.time_graphs times ours, so
    that neither side's time holds a launch's CPU latency (a synchronize after each call would put
    the next launch's latency between the start event and the work: several microseconds)."""
    for _ in range(warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return timing.median([s.elapsed_time(e) * 1000.0 for s, e in zip(starts, ends)])


def graph_time(fn, iters: int = 30) -> float:
    return _time_back_to_back(graph_of(fn).replay, iters=iters)


def replays_on(graphs) -> tuple:
    """timing.Replay's launches of torch CUDA graphs (one, or one per input set): each replays its
    graph on a CuPy stream, so that the vendor's forms are timed interleaved with ours on one stream."""
    streams: dict = {}

    def on(g):
        def launch(stream) -> None:
            ts = streams.get(stream.ptr)
            if ts is None:
                ts = streams[stream.ptr] = torch.cuda.ExternalStream(stream.ptr)
            with torch.cuda.stream(ts):
                g.replay()
        return launch
    return tuple(on(g) for g in (graphs if isinstance(graphs, (list, tuple)) else [graphs]))


def time_eager(fn, iters: int = 30) -> float:
    return _time_torch(fn, iters=iters)


# ---- the vendor at its best: every form a user would write, the fastest correct one per point ----

def why_skipped(exc: BaseException) -> str:
    """One line saying why a form did not run: the exception's class and the first line of its message."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__


def fastest_form(times: dict, errors: dict, tol: float) -> str | None:
    """The fastest of the timed forms ({form: us}) whose output was within `tol` of the reference
    ({form: relative error}); where none was, the fastest of them all (its row is then marked
    incorrect); None where nothing was timed. Ties go to the name that sorts first."""
    if not times:
        return None
    ok = [f for f in times if errors.get(f, math.inf) < tol]
    return min(ok or list(times), key=lambda f: (times[f], f))


@dataclass
class VendorForms:
    """The forms of one vendor computation at one point that a user could write (the unfused PyTorch
    ops, a fused cuBLASLt epilogue, each SDPA backend, a weight layout...): each made, run once and
    checked against the reference (check), then timed eagerly and in a CUDA graph (time). A form
    this PyTorch lacks, that has no kernel for the shape, or that cannot be captured is skipped with
    the reason, never a crash. row() gives the fields of the vendor row: the fastest correct form,
    named in "vendor_form", every timed form's time in "vendor_forms", the skipped in
    "vendor_skipped"."""

    fns: dict = field(default_factory=dict)      # form -> the callable returning its output
    errors: dict = field(default_factory=dict)   # form -> relative error against the reference
    skipped: dict = field(default_factory=dict)  # form -> why it was not (or not fully) timed
    times: dict = field(default_factory=dict)    # "" (eager) or "+graph" -> {form: us}

    @classmethod
    def check(cls, makers: dict, error_of) -> "VendorForms":
        """makers: {form: a callable returning the form's callable} (it raises where the form cannot
        be made, e.g. an API missing); error_of(form, fn): the relative error of the form's output
        (it runs fn, or a variant of it: attention checks its SDPA forms without dropout)."""
        out = cls()
        for name, make in makers.items():
            try:
                fn = make()
                out.errors[name] = float(error_of(name, fn))
            except Exception as exc:   # any failure of a form is that form's: it is recorded, the others run
                out.skipped[name] = why_skipped(exc)
                print(f"vendor form {name} skipped: {out.skipped[name]}", file=sys.stderr, flush=True)
                continue
            out.fns[name] = fn
        return out

    def time(self, timers: dict, iters: int) -> None:
        """timers: {suffix: timer(fn, iters) -> us}, e.g. {"": time_eager, "+graph": graph_time}."""
        for suffix, timer in timers.items():
            got = self.times.setdefault(suffix, {})
            for name, fn in self.fns.items():
                try:
                    got[name] = float(timer(fn, iters))
                except Exception as exc:   # e.g. a kernel that cannot be captured in a graph
                    self.skipped[name + suffix] = why_skipped(exc)
                    print(f"vendor form {name}{suffix} skipped: {self.skipped[name + suffix]}", file=sys.stderr,
                          flush=True)

    def fastest(self, suffix: str, tol: float) -> str | None:
        return fastest_form(self.times.get(suffix, {}), self.errors, tol)

    def row(self, suffix: str, tol: float) -> dict | None:
        """time_us, correct, rel_err of the fastest correct form timed with `suffix`, and the forms'
        record; None where no form was timed."""
        best = self.fastest(suffix, tol)
        if best is None:
            return None
        times = self.times[suffix]
        out = {"time_us": round(times[best], 2), "correct": self.errors[best] < tol, "rel_err": self.errors[best],
               "vendor_form": best, "vendor_forms": {f: round(t, 2) for f, t in sorted(times.items())}}
        if self.skipped:
            out["vendor_skipped"] = dict(sorted(self.skipped.items()))
        return out


    def rows(self, names: tuple, point: dict, base: float, tol: float) -> list[dict]:
        """The vendor's eager and CUDA-graph rows of one point (`names`: their configs, e.g.
        ("cuBLAS", "cuBLAS+graph"); `point`: the row's model and M), each its fastest correct
        form, with its speed-up over the point's StreamSync time `base`."""
        out = []
        for name, suffix in zip(names, ("", "+graph")):
            r = self.row(suffix, tol)
            if r is None:
                raise RuntimeError(f"{point['model']} {point['M']}: no vendor form ran ({self.skipped})")
            out.append({**point, "config": name, **r, "speedup_vs_streamsync": round(base / r["time_us"], 4)})
        return out


def time_forms(forms: VendorForms, iters: int) -> VendorForms:
    """Every form of `forms` timed eagerly ("") and in a CUDA graph ("+graph")."""
    forms.time({"": time_eager, "+graph": graph_time}, iters)
    return forms
