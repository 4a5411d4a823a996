"""The vendor at its best (cusyncgen.cuda.baselines.VendorForms): every form of a vendor computation
a user would write is checked against the reference and timed, the fastest correct one is the
point's vendor row and is named in it ("vendor_form"). Without a GPU: the selection on made-up
times, and the MLP's forms computed by a numpy stand-in for PyTorch, against the reference's math."""
from __future__ import annotations

import math
import sys
import types

import numpy as np
import pytest

from cusyncgen.cuda import baselines
from cusyncgen.cuda.baselines import VendorForms, fastest_form
from cusyncgen.cuda import timing
from cusyncgen.cuda.timing import Replay
from cusyncgen.errors import CusyncError
from cusyncgen.workloads import mlp as sm80
from cusyncgen.workloads import mlp_sm90 as W


# ---- the selection ----

def test_the_fastest_correct_form_wins():
    times = {"torch-unfused": 120.9, "cublaslt-gelu": 113.7, "wrong": 50.0}
    errors = {"torch-unfused": 1e-3, "cublaslt-gelu": 2e-3, "wrong": 0.5}
    assert fastest_form(times, errors, 2e-2) == "cublaslt-gelu"   # "wrong" is faster but not correct
    assert fastest_form({"a": 5.0, "b": 5.0}, {"a": 0.0, "b": 0.0}, 1e-2) == "a"   # a tie: by name
    # none correct: the fastest of them all (its row then says correct: false); nothing timed: None
    assert fastest_form({"a": 3.0, "b": 2.0}, {"a": 1.0, "b": 1.0}, 1e-2) == "b"
    assert fastest_form({}, {}, 1e-2) is None
    assert fastest_form({"untested": 1.0, "a": 2.0}, {"a": 0.0}, 1e-2) == "a"   # no error known: not correct


def test_forms_that_cannot_run_are_skipped_with_the_reason(capsys):
    def missing():
        raise AttributeError("module 'torch' has no attribute '_addmm_activation'")

    def no_kernel():
        return lambda: (_ for _ in ()).throw(RuntimeError("No available kernel.  Aborting execution.\nmore"))

    makers = {"a": lambda: (lambda: "A"), "b": lambda: (lambda: "B"), "missing": missing, "no-kernel": no_kernel,
              "c": lambda: (lambda: "C")}
    errors = {"A": 1e-3, "B": 1e-3, "C": 1e-3}
    forms = VendorForms.check(makers, lambda name, fn: errors[fn()])
    assert list(forms.fns) == ["a", "b", "c"]
    assert forms.skipped == {"missing": "AttributeError: module 'torch' has no attribute '_addmm_activation'",
                             "no-kernel": "RuntimeError: No available kernel.  Aborting execution."}
    eager = {"a": 10.0, "b": 12.0, "c": 11.0}
    graph = {"a": 9.0, "b": 8.0}

    def graph_timer(fn, iters):
        if fn() == "C":
            raise RuntimeError("operation not permitted when stream is capturing")
        return graph[{"A": "a", "B": "b"}[fn()]]
    forms.time({"": lambda fn, iters: eager[fn().lower()], "+graph": graph_timer}, iters=3)
    assert forms.times == {"": eager, "+graph": graph}
    assert forms.skipped["c+graph"].startswith("RuntimeError: operation not permitted")
    row = forms.row("+graph", 2e-2)
    assert row["vendor_form"] == "b" and row["time_us"] == 8.0 and row["correct"] and row["rel_err"] == 1e-3
    assert row["vendor_forms"] == {"a": 9.0, "b": 8.0} and set(row["vendor_skipped"]) == {"missing", "no-kernel", "c+graph"}
    assert forms.row("", 2e-2)["vendor_form"] == "a"
    assert VendorForms().row("+graph", 2e-2) is None
    assert "vendor form missing skipped" in capsys.readouterr().err


@pytest.mark.parametrize("timed", [1, 2, 3, 4, 5])
def test_confirm_rounds_put_every_timed_thing_in_every_position_equally_often(timed):
    rounds = timing.rounds_for(timed)
    assert rounds >= timing.ROUNDS and rounds % timed == 0 and rounds - timed < timing.ROUNDS
    keys = ["ours", "stream", ("vendor", "torch-unfused"), ("vendor", "cublaslt-gelu"), "x"][:timed]
    orders = timing.rotations(keys, rounds)
    assert all(sorted(map(str, o)) == sorted(map(str, keys)) for o in orders)
    for pos in range(timed):
        assert {str(k): sum(o[pos] == k for o in orders) for k in keys} == {str(k): rounds // timed for k in keys}


def test_confirm_times_every_vendor_form_in_the_rounds_and_keeps_the_fastest_correct():
    us = {"ours": [100.0, 101.0, 99.0, 250.0, 100.0, 100.0, 100.0, 100.0], "stream": [104.0] * 8,
          ("vendor", "torch-unfused"): [952.5] * 8, ("vendor", "cublaslt-gelu"): [908.6] * 8}
    seqs = []

    def measure(seq, replays, stream):   # round r's launches of a key all take us[key][r]; warm-up 1 us
        seqs.append(list(seq))
        r = len(seqs) - 2
        return [1.0 if r < 0 else us[k][r] * replays[k].per for k in seq]
    replays = {k: Replay(launches=(None,), per=1 + (k == "stream")) for k in us}
    times, rounds = timing.time_in_rounds(replays, stream=None, iters=3, measure=measure)
    assert rounds == 8 and len(seqs) == 9 and seqs[0] == [k for k in us for _ in range(2)]   # a warm-up first
    for r, seq in enumerate(seqs[1:]):   # interleaved: 3 steps of every key, in the round's rotated order
        order = list(us)[r % 4:] + list(us)[:r % 4]
        assert seq == order * 3
    assert times["ours"] == 100.0   # the median over the rounds: one slow round does not count
    assert times["stream"] == 104.0   # a replay of `per` units: its time over per
    forms = VendorForms(errors={"torch-unfused": 1e-3, "cublaslt-gelu": 1e-3}, skipped={"x": "AttributeError: no"})
    v = W.vendor_confirmed({k[1]: t for k, t in times.items() if isinstance(k, tuple)}, forms)
    assert v == {"vendor_us": 908.6, "vendor_form": "cublaslt-gelu", "vendor_rel_err": 1e-3,
                 "vendor_forms": {"cublaslt-gelu": 908.6, "torch-unfused": 952.5}, "vendor_skipped": {"x": "AttributeError: no"}}
    forms.errors["cublaslt-gelu"] = 1.0   # a wrong form is never the vendor, however fast
    assert W.vendor_confirmed({"torch-unfused": 952.5, "cublaslt-gelu": 908.6}, forms)["vendor_form"] == "torch-unfused"
    with pytest.raises(CusyncError, match="no vendor form ran"):
        W.vendor_confirmed({}, forms)


def test_launches_in_a_row_read_different_input_sets():
    replays = {"ours": Replay(launches=("s0", "s1")), "vendor": Replay(launches=("s0", "s1")),
               "chain": Replay(launches=("all",), per=10)}
    seq = ["ours", "vendor", "chain"] * 4
    sets = timing.input_sets(seq, replays)
    assert [i for k, i in zip(seq, sets) if k == "chain"] == [0] * 4
    for n in range(len(seq) - 1):   # neighbours with two sets each never share one
        if seq[n] != "chain" and seq[n + 1] != "chain":
            assert sets[n] != sets[n + 1]
    assert {i for k, i in zip(seq, sets) if k == "ours"} == {0, 1}   # every key takes both sets


def test_confirm_reports_each_time_alone_and_back_to_back():
    forms = VendorForms(errors={"torch-unfused": 1e-3, "cublaslt-gelu": 1e-3})
    times = {"ours": 50.0, "stream": 55.0, ("chain", "ours"): 45.0, ("chain", "stream"): 49.0,
             ("vendor", "cublaslt-gelu"): 60.0, ("vendor", "torch-unfused"): 62.0,
             ("vendor-chain", "cublaslt-gelu"): 57.5, ("vendor-chain", "torch-unfused"): 56.0}
    out = W.confirm_fields(times, forms, same=False)
    assert (out["ours_us"], out["stream_us"], out["vendor_us"], out["vendor_form"]) == (50.0, 55.0, 60.0, "cublaslt-gelu")
    # back to back each form is timed again and the fastest correct one kept: here the other form
    assert (out["ours_chain_us"], out["stream_chain_us"], out["vendor_chain_us"], out["vendor_chain_form"]) == (
        45.0, 49.0, 56.0, "torch-unfused")
    assert out["chain"] == W.CONFIRM_CHAIN and out["vendor_chain_forms"] == {"cublaslt-gelu": 57.5, "torch-unfused": 56.0}
    same = W.confirm_fields({k: t for k, t in times.items() if "stream" not in k}, forms, same=True)
    assert same["stream_us"] == 50.0 and same["stream_chain_us"] == 45.0
    alone = W.confirm_fields({k: t for k, t in times.items() if not (isinstance(k, tuple) and "chain" in k[0])},
                             forms, same=False)
    assert "ours_chain_us" not in alone and "vendor_chain_us" not in alone and alone["vendor_us"] == 60.0


def test_confirm_is_cached_under_a_key_of_its_own():
    c = {"config": "TileSync+PDL", "tiles": "128x192x64 B1 G2"}
    assert W.confirm_key("gpt3", 512, c, "lib-abc") == \
        "gpt3|512|confirm:TileSync+PDL:128x192x64 B1 G2:vendor-forms:chain|lib-abc"
    assert W.confirm_key("gpt3", 512, c, "lib-abc", chain=False) == \
        "gpt3|512|confirm:TileSync+PDL:128x192x64 B1 G2:vendor-forms|lib-abc"
    assert W.confirm_key("gpt3", 512, c, "lib-abc", forms=False) == "gpt3|512|confirm:TileSync+PDL:128x192x64 B1 G2|lib-abc"


# ---- the MLP's forms, on a numpy stand-in for PyTorch (float64: the math, not the rounding) ----

class FakeTensor:
    def __init__(self, a):
        self.a = np.asarray(a, dtype=np.float64)
        self.dtype, self.device = "float16", "cuda"

    shape = property(lambda self: self.a.shape)
    T = property(lambda self: FakeTensor(self.a.T))

    def __matmul__(self, o):
        return FakeTensor(self.a @ o.a)

    def __mul__(self, o):
        return FakeTensor(self.a * o.a)

    def __getitem__(self, k):
        return FakeTensor(self.a[k])

    def reshape(self, *shape):
        return FakeTensor(self.a.reshape(*shape))

    def contiguous(self):
        return FakeTensor(np.ascontiguousarray(self.a))

    def chunk(self, n, dim=0):
        return [FakeTensor(p) for p in np.split(self.a, n, axis=dim)]

    def __dlpack__(self, **kw):   # cupy.from_dlpack (numpy's here) of an output
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


def _gelu(y, approximate="none"):
    if approximate == "tanh":
        return sm80.gelu_tanh(y, np)
    assert approximate == "none", approximate
    return 0.5 * y * (1 + np.vectorize(math.erf)(y / math.sqrt(2)))


def _fake_torch(addmm_activation: bool = True):
    t = types.ModuleType("torch")
    t.from_dlpack = FakeTensor
    t.zeros = lambda n, dtype=None, device=None: FakeTensor(np.zeros(n))
    t.cat = lambda ts: FakeTensor(np.concatenate([x.a for x in ts]))
    functional = types.SimpleNamespace(gelu=lambda y, approximate="none": FakeTensor(_gelu(y.a, approximate)),
                                       silu=lambda y: FakeTensor(y.a / (1 + np.exp(-y.a))))
    t.nn = types.SimpleNamespace(functional=functional)
    if addmm_activation:
        # torch._addmm_activation(bias, mat1, mat2, use_gelu=True) on CUDA: cuBLASLt's GELU_BIAS
        # epilogue, the tanh approximation; where cuBLASLt is not used (M = 1), a GeMM then
        # at::gelu_(result, "tanh") (aten/src/ATen/native/cuda/Blas.cpp)
        t._addmm_activation = lambda b, x, w, use_gelu=False, beta=1, alpha=1: FakeTensor(
            sm80.gelu_tanh(x.a @ w.a + b.a, np) if use_gelu else np.maximum(x.a @ w.a + b.a, 0))
    return t


TINY = {  # the models' structure at a size numpy computes in a moment (F a multiple of LLAMA_EP_BLOCK)
    "gpt3": sm80.Model("gpt3", "mlp_gpt3.dep", 96, 48, 48, "cusync_kernels::EpiGeluTanh", False),
    "llama": sm80.Model("llama", "mlp_llama.dep", 64, 2 * 80, 80, "cusync_kernels::EpiIdentity", True),
    "llama-ep": sm80.Model("llama-ep", "mlp_llama_ep.dep", 64, 2 * 128, 128, "cusync_kernels::EpiSwiGLUHalves",
                           False, swiglu_epilogue=True),
}


def _operands(m: sm80.Model, M: int = 5, seed: int = 0):
    rs = np.random.RandomState(seed)
    return (rs.standard_normal((M, m.K1)), rs.standard_normal((m.N1, m.K1)) / m.K1 ** 0.5,
            rs.standard_normal((m.N2, m.K2)) / m.K2 ** 0.5)


def _exact_reference(m: sm80.Model, x, w1, w2):
    """The reference's math (MLP.reference) in float64, without its fp16 rounding of the activation."""
    y = x @ w1.T
    if m.swiglu_epilogue:
        g, u = sm80.split_interleaved(y, m.K2)
    elif m.swiglu:
        g, u = y[:, :m.K2], y[:, m.K2:]
    else:
        return sm80.gelu_tanh(y, np) @ w2.T
    return (g / (1 + np.exp(-g)) * u) @ w2.T


@pytest.fixture()
def fake_torch(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", _fake_torch())
    monkeypatch.setitem(sys.modules, "cupy", np)   # rel_err and the reference on numpy arrays


@pytest.mark.parametrize("model", list(TINY))
def test_every_mlp_form_computes_the_references_math(fake_torch, model):
    m = TINY[model]
    bufs = _operands(m)
    want = _exact_reference(m, *bufs)
    makers = sm80.vendor_forms(m, bufs)
    assert list(makers) == (["torch-unfused", "cublaslt-gelu"] if model == "gpt3" else ["separate", "concat-chunk"])
    for name, make in makers.items():
        got = make()().a
        assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-12, name
    # and the reference itself (fp16 rounding of the activation included) within the bench's tolerance
    ref = sm80.MLP.reference(types.SimpleNamespace(model=m), *bufs)
    forms = sm80.check_vendor_forms(m, bufs, ref)
    assert set(forms.fns) == set(makers) and not forms.skipped
    assert all(e < sm80.TOL for e in forms.errors.values()), forms.errors


def test_the_gelu_of_gpt3s_forms_is_the_references_tanh_approximation(fake_torch):
    """The erf GeLU differs from the tanh approximation by less than the bench's tolerance, so the
    tolerance cannot tell them apart: each GPT-3 form matches the reference's GeLU exactly (the
    float64 math above), and the erf GeLU would not."""
    m = TINY["gpt3"]
    x, w1, w2 = _operands(m, M=64)
    want = _exact_reference(m, x, w1, w2)
    erf = _gelu(x @ w1.T) @ w2.T
    gap = np.linalg.norm(erf - want) / np.linalg.norm(want)
    assert 1e-6 < gap < sm80.TOL
    assert sm80.GELU_APPROXIMATE == "tanh" and m.epilogue1.endswith("GeluTanh")


def test_the_mlp_vendor_rows_are_the_fastest_correct_form_and_name_it(fake_torch, monkeypatch):
    m = TINY["gpt3"]
    bufs = _operands(m)
    ref = sm80.MLP.reference(types.SimpleNamespace(model=m), *bufs)
    # eager: the unfused form faster; in a graph: the fused epilogue (as GPT-3 at M = 64 on an H100)
    times = {("", "torch-unfused"): 130.0, ("", "cublaslt-gelu"): 131.0,
             ("+graph", "torch-unfused"): 120.9, ("+graph", "cublaslt-gelu"): 113.7}
    which = {}

    def timer(suffix):
        def t(fn, iters):
            return times[(suffix, which[id(fn)])]
        return t
    real_check = sm80.check_vendor_forms

    def check(*args):
        forms = real_check(*args)
        which.update({id(fn): name for name, fn in forms.fns.items()})
        return forms
    monkeypatch.setattr(sm80, "check_vendor_forms", check)
    monkeypatch.setattr(baselines, "time_eager", timer(""))
    monkeypatch.setattr(baselines, "graph_time", timer("+graph"))
    rows = sm80.vendor_rows(m, 5, bufs, ref, 150.0, 3, {"peak_flops": 1e15, "bandwidth": 3e12})
    by = {r["config"]: r for r in rows}
    assert set(by) == {"cuBLAS", "cuBLAS+graph", "floor"}
    assert by["cuBLAS"]["vendor_form"] == "torch-unfused" and by["cuBLAS"]["time_us"] == 130.0
    g = by["cuBLAS+graph"]
    assert g["vendor_form"] == "cublaslt-gelu" and g["time_us"] == 113.7 and g["correct"]
    assert g["vendor_forms"] == {"cublaslt-gelu": 113.7, "torch-unfused": 120.9} and "vendor_skipped" not in g
    assert g["speedup_vs_streamsync"] == round(150.0 / 113.7, 4)
    # a PyTorch without _addmm_activation: that form is skipped, said so, and the row is the other one
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(addmm_activation=False))
    g = {r["config"]: r for r in sm80.vendor_rows(m, 5, bufs, ref, 150.0, 3, {"peak_flops": 1e15,
                                                                             "bandwidth": 3e12})}["cuBLAS+graph"]
    assert g["vendor_form"] == "torch-unfused" and g["vendor_forms"] == {"torch-unfused": 120.9}
    assert g["vendor_skipped"] == {"cublaslt-gelu": "AttributeError: module 'torch' has no attribute "
                                                    "'_addmm_activation'"}


# ---- Attention: every SDPA backend, contiguous copies only where a backend refuses the views ----

def test_attention_times_every_sdpa_backend_and_copies_where_one_refuses_the_views(monkeypatch):
    from cusyncgen.workloads import attention as A

    class Att:
        def torch_fn(self, b, mask=None, sdpa=False, dropout=None, backend=None, contiguous=False):
            if backend == "EFFICIENT_ATTENTION":   # what an older PyTorch says of a backend it lacks
                raise AttributeError("type object 'SDPBackend' has no attribute 'EFFICIENT_ATTENTION'")
            if backend == "CUDNN_ATTENTION" and not contiguous:
                def refused():
                    raise RuntimeError("No available kernel. Aborting execution.")
                return refused
            return lambda: {"sdpa": sdpa, "backend": backend, "contiguous": contiguous, "dropout": dropout, "mask": mask}

    # a form is right where it was checked as it must be: SDPA without dropout against the reference
    # without dropout (SDPA draws its own mask); the unfused math with the kernels' mask
    def rel(out, ref):
        if out["sdpa"]:
            return 1e-3 if out["dropout"] == 0.0 and ref == "ref without dropout" else 1.0
        return 1e-3 if out["mask"] == "the kernels' mask" and ref == "ref" else 1.0
    monkeypatch.setattr(A, "rel", rel)
    cublas, sdpa = A.vendor_forms(Att(), {}, "the kernels' mask", "ref", "ref without dropout")
    assert list(cublas.fns) == ["torch-unfused"] and cublas.errors == {"torch-unfused": 1e-3}
    assert set(sdpa.fns) == {"sdpa-flash", "sdpa-math", "sdpa-cudnn+contiguous"}
    assert sdpa.errors == {n: 1e-3 for n in sdpa.fns}
    assert set(sdpa.skipped) == {"sdpa-cudnn", "sdpa-efficient"}   # a missing backend is not retried
    assert sdpa.skipped["sdpa-cudnn"].startswith("RuntimeError: No available kernel")
    # the timed forms run with the workload's dropout (dropout=None: the instance's)
    assert sdpa.fns["sdpa-flash"]()["dropout"] is None and sdpa.fns["sdpa-cudnn+contiguous"]()["contiguous"]


# ---- Conv2D: both memory layouts, with and without cuDNN's fused convolution + bias + ReLU ----

class Conv:
    """A stand-in tensor that records how it was made: its layout and the ops applied."""

    def __init__(self, ops=(), contiguous=False):
        self.ops, self.is_contig = tuple(ops), contiguous

    def permute(self, *dims):
        return Conv(self.ops + ("permute",))

    def contiguous(self):
        return Conv(self.ops + ("contiguous",), True)


def _conv_torch(fused: bool):
    t = types.ModuleType("torch")
    t.from_dlpack = lambda a: Conv((a,))
    t.relu = lambda h: Conv(h.ops + ("relu",), h.is_contig)
    t.nn = types.SimpleNamespace(functional=types.SimpleNamespace(
        conv2d=lambda h, w, b, padding: Conv(h.ops + (f"conv({'nchw' if w.is_contig else 'nhwc'})",), h.is_contig)))
    if fused:
        t.cudnn_convolution_relu = lambda h, w, b, stride, padding, dilation, groups: Conv(
            h.ops + (f"conv_relu({'nchw' if w.is_contig else 'nhwc'})",), h.is_contig)
    return t


@pytest.mark.parametrize("fused", [True, False])
def test_conv2d_forms_are_both_layouts_with_and_without_the_fused_relu(monkeypatch, fused):
    from cusyncgen.workloads import conv2d
    monkeypatch.setitem(sys.modules, "torch", _conv_torch(fused))
    makers = conv2d.vendor_forms("x", ["w1", "w2"], ["b1", "b2"])
    assert list(makers) == ["cudnn-channels-last", "cudnn-contiguous", "cudnn-conv-relu-channels-last",
                            "cudnn-conv-relu-contiguous"]
    forms = VendorForms.check(makers, lambda name, fn: 0.0 if fn() else 1.0)
    fused_forms = {"cudnn-conv-relu-channels-last", "cudnn-conv-relu-contiguous"}
    assert set(forms.fns) == (set(makers) if fused else set(makers) - fused_forms)
    assert set(forms.skipped) == (set() if fused else fused_forms)
    nhwc, nchw = forms.fns["cudnn-channels-last"](), forms.fns["cudnn-contiguous"]()
    # channels_last: the kernels' memory as it is; contiguous: converted once (before the chain runs)
    assert nhwc.ops == ("x", "permute", "conv(nhwc)", "relu", "conv(nhwc)", "relu") and not nhwc.is_contig
    assert nchw.ops == ("x", "permute", "contiguous", "conv(nchw)", "relu", "conv(nchw)", "relu") and nchw.is_contig
    if fused:
        assert forms.fns["cudnn-conv-relu-contiguous"]().ops == ("x", "permute", "contiguous", "conv_relu(nchw)",
                                                                 "conv_relu(nchw)")
