"""The benchmark suite's CPU side: benchmarks/ holds what a user runs (gpu.sh, the compiler's scale
benchmark), every `python -m` module the scripts and docs name exists, no script edits sys.path;
the sm90 checks' and the sanitizer's variant lists cover what they say; the sanitizer's summary reads
compute-sanitizer's output as it prints it."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from cusyncgen.commands import sanitize, sm90_check
from cusyncgen.cuda import sm90
from cusyncgen.cuda.configs import Ordering
from cusyncgen.workloads.mlp import MODELS

ROOT = Path(__file__).resolve().parent.parent
SUITE = {"benchmarks/README.md", "benchmarks/gpu.sh", "benchmarks/compiler_scale.py"}


def _tracked(prefix: str) -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "ls-files", prefix], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return out.split()


def test_benchmarks_hold_the_suite_and_its_results():
    files = _tracked("benchmarks")
    assert {f for f in files if not f.startswith("benchmarks/results/")} == SUITE
    for f in files:
        if f.endswith(".py"):
            assert "sys.path" not in (ROOT / f).read_text(), f"{f} edits sys.path: import the package instead"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_gpu_sh_parses_and_refuses_an_unknown_target():
    subprocess.run(["bash", "-n", str(ROOT / "benchmarks" / "gpu.sh")], check=True)
    r = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu.sh"), "nonsense"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.startswith("usage: bash benchmarks/gpu.sh")


@pytest.mark.parametrize("doc", ["benchmarks/gpu.sh", "benchmarks/README.md", "README.md", "docs/design.md",
                                 "docs/sm90.md"])
def test_every_module_named_exists(doc):
    text = (ROOT / doc).read_text()
    named = set(re.findall(r"python3? -m (cusyncgen[\w.]*)", text)) | set(re.findall(r"\$PY -m (cusyncgen[\w.]*)", text))
    assert named or doc == "docs/design.md"
    for module in named:
        assert importlib.util.find_spec(module) is not None, f"{doc} names {module}, which does not exist"


def test_the_checks_default_to_the_committed_sweep():
    """The default sweep: M = 1, 200 (a multiple of no tile), 512 (the banded order), every tile config,
    pair, ordering and policy, both second-GeMM orders and every first-GeMM order, with and without
    split-K where it applies; the per-GeMM pairs never in the chain (one kernel, one tile)."""
    a = sm90_check.parser().parse_args([])
    assert (a.M, a.stress_M, a.banded1, a.grouped2) == ("1,200,512", "256", "off,on,g1", "off,on")
    assert a.orderings == "stream,pdl,pdl+policy,chain" and a.policies == "TileSync,RowSync"
    orderings = list(sm90_check.ORDERINGS.values())
    assert set(orderings) == set(Ordering) - {Ordering.WAITKERNEL, Ordering.NONE}   # every sm90 ordering
    vs = sm90_check.variants(sm90.CONFIGS, orderings, sm90.POLICIES, MODELS["gpt3"], 512, ("off", "on"),
                             ("off", "on", "g1"), sm90_check.PAIRS)
    assert {v[1] for v in vs} == set(orderings) and {v[2] for v in vs} == {None, *sm90.POLICIES}
    assert all((v[2] is None) == (v[1] not in sm90_check.SYNCED) for v in vs)   # a policy where it synchronizes
    assert {v[5] for v in vs} == {False, True, "g1"} and {v[3] for v in vs} == {"none", "auto"}
    assert not [v for v in vs if "+" in v[0] and v[1] == Ordering.PERSISTENT]
    fit = {c for c in sm90.CONFIGS if sm90_check.mlp_sm90.fits("gpt3", c)}
    assert "128x144x64" not in fit and {v[0] for v in vs} == fit | set(sm90_check.PAIRS)
    small = sm90_check.variants(sm90.CONFIGS, orderings, sm90.POLICIES, MODELS["gpt3"], 200,
                                ("off",), ("off", "on"))
    assert {v[5] for v in small} == {False}  # the banded order from M = 512 on
    # llama-ep's SwiGLU pair epilogue needs 128-wide tiles
    ep = sm90_check.variants(sm90.CONFIGS, (Ordering.STREAM,), sm90.POLICIES, MODELS["llama-ep"], 200)
    assert ep and all(sm90.tile_dims(v[0])[1] == 128 for v in ep)


def test_the_sanitizer_runs_every_ordering_policy_and_epilogue():
    vs = sm90_check.sanitizer_variants("gpt3")
    assert {(v[2], v[3]) for v in vs} >= {(Ordering.STREAM, None), (Ordering.PDL_ALONE, None)} | {
        (o, p) for o in (Ordering.PDL, Ordering.PERSISTENT) for p in sm90.POLICIES}
    assert set(sm90.CONFIGS) >= {v[1] for v in vs} | {v[8] for v in vs if v[8]}
    configs = {v[1] for v in vs}
    assert {"64x128x64pp", "128x128x64pp", "128x128x64tma"} <= configs
    assert {v[7] for v in vs} == {"quad", "pair"} and "llama-ep" in {v[0] for v in vs}
    assert any(v[8] for v in vs) and any(v[4] != "none" for v in vs) and any(v[6] == "G1" for v in vs)
    runs = sanitize.runs("python", "gpt3", 128, sanitize.TOOLS)
    assert [(r.tool, r.log_name) for r in runs] == [("memcheck", "memcheck-sm90.log"), ("synccheck", "synccheck-sm90.log"),
                                                    ("racecheck", "racecheck-sm90.log"), ("racecheck", "racecheck-sm80.log")]
    assert runs[2].command[-2:] == ("--sanitizer-target", "presatisfied")
    assert runs[0].target == "sm90 gpt3 M=128 every ordering"
    only = sanitize.runs("python", "gpt3", 128, ("memcheck",), only="/decode")[0]   # the filtered variants: their own sizes
    assert only.target == "sm90 variants with '/decode' every ordering" and only.command[-4:-2] == ("--only", "/decode")


MEMCHECK = """========= COMPUTE-SANITIZER
# python -m cusyncgen.commands.sm90_check --sanitizer-target run on NVIDIA H100 80GB HBM3, library lib-x
variant gpt3 M=128 sm90 128x128x64 quad-store StreamSync: ok (rel err 1.00e-04)
variant gpt3 M=128 sm90 128x128x64 quad-store TileSync+Chain: ok (rel err 1.00e-04)
========= ERROR SUMMARY: {n} errors
"""
RACECHECK = """variant gpt3 M=128 sm90 128x128x64 quad-store TileSync+Chain: ran (output not checked: waits presatisfied)
========= Error: Race reported between Write access at void k<1>(P)+0x1a0
=========     and Read access at void k<1>(P)+0x2b0 [8 hazards]
========= Error: Race reported between Write access at void k<1>(P)+0x1c0
=========     and Read access at void k<1>(P)+0x2d0 [8 hazards]
========= RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 warnings)
"""


def test_the_summary_reads_compute_sanitizer_output():
    mem, race = sanitize.runs("python", "gpt3", 128, ("memcheck", "racecheck"))
    line, ok = sanitize.summarize(mem, MEMCHECK.format(n=0), 0, 8.2)
    assert ok and line.split() [:2] == ["memcheck", "sm90"] and "ERROR SUMMARY: 0 errors; 2 ok, 0 failed (rc 0, 8s)" in line
    assert not sanitize.summarize(mem, MEMCHECK.format(n=3), 0, 8)[1]
    assert not sanitize.summarize(mem, MEMCHECK.format(n=0).replace(": ok", ": WRONG", 1), 1, 8)[1]
    assert not sanitize.summarize(mem, MEMCHECK.format(n=0), 124, 75)[1]   # out of time
    line, ok = sanitize.summarize(race, RACECHECK, 0, 100)
    assert ok and "RACECHECK SUMMARY: 2 hazards displayed" in line and "1 ok, 0 failed" in line
    assert sanitize.race_kinds(RACECHECK) == ["      2 Error: Race reported between Write access at void k<1>(P)+0x.",
                                              "      2 and Read access at void k<1>(P)+0x. [8 hazards]"]


@pytest.mark.parametrize("probe,usage,modules", [
    ("fmha_layout", [(("--rounds", "0"), "--rounds must be at least 1")], ("torch",)),
    ("swap_slope", [(("--rounds", "0"), "--rounds must be at least 1"), (("--M", "65"), "--M: tokens from 1 to 64")],
     ("torch", "cupy")),
    ("prompt_gemms", [(("--rounds", "0"), "--rounds must be at least 1"), (("--M", "64"), "at least 128 tokens"),
                      (("--M", "5x"), "comma-separated integers"), (("--models", "gpt4"), "unknown gpt4")],
     ("torch", "cupy"))])
def test_the_sm90_probes_say_what_they_need(probe, usage, modules):
    """python -m cusyncgen.commands.<probe> (fmha_layout, swap_slope, prompt_gemms): bad arguments
    are usage errors; without torch (CuPy where it needs it) or an sm_90 GPU a one-line reason, never a
    traceback."""
    import sys

    def run(*a):
        return subprocess.run([sys.executable, "-m", f"cusyncgen.commands.{probe}", *a], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)

    for args, msg in usage:
        r = run(*args)
        assert r.returncode == 2 and msg in r.stderr, (args, r.stderr)
    if all(importlib.util.find_spec(m) is not None for m in modules):
        import torch
        if torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0):
            pytest.skip("an sm_90 GPU is here: the probe would run")
    r = run()
    assert r.returncode == 1 and r.stderr.startswith(f"{probe}: needs ") and "Traceback" not in r.stderr


def test_the_decode_trace_probe_says_what_it_needs():
    """python -m cusyncgen.commands.decode_trace: bad arguments are usage errors; without CuPy or a
    GPU a one-line reason, never a traceback."""
    import sys

    def run(*a):
        return subprocess.run([sys.executable, "-m", "cusyncgen.commands.decode_trace", *a], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)

    for args, msg in ((("--runs", "1"), "--runs must be at least 2"), (("--models", "gpt4"), "--models: of gpt3"),
                      (("--M", "0,16"), "--M: rows from 1 to 64"), (("--M", "x"), "--M: comma-separated"),
                      (("--split", "warp"), "--split: of auto, stream-k")):
        r = run(*args)
        assert r.returncode == 2 and msg in r.stderr, (args, r.stderr)
    if importlib.util.find_spec("cupy") is not None:
        pytest.skip("CuPy is here: the probe would look for a GPU and may run")
    r = run()
    assert r.returncode == 1 and r.stderr.startswith("decode_trace: needs ") and "Traceback" not in r.stderr


def test_the_decode_trace_summarizes_stamps():
    """The probe's per-GeMM summary of a traced launch and its rank correlation, on made-up stamps."""
    from cusyncgen.commands import decode_trace as T

    raw = [[[0] * 5 for _ in range(1024)] for _ in range(2)]
    # 4 blocks on 2 SMs: entry, first data, last step, end (globaltimer ns, never 0), SM; block 3 slower
    for b, (t0, t1, t2, sm) in enumerate([(0, 1000, 9000, 0), (100, 1100, 9100, 0), (200, 1200, 9200, 1),
                                          (300, 1300, 17300, 1)]):
        raw[0][b] = [5000 + t0, 5000 + t1, 5000 + t2, 5500 + t2, sm]
    st = T.gemm_stats(raw, 0, 4, [16384] * 4)
    assert st["t0"] == 5000 and st["last_entry"] == 0.3 and st["last_step"] == pytest.approx((9.0, 9.15, 17.3))
    # SM 0: 2 blocks' bytes over 8.1 us; SM 1: over 16.1 us
    assert st["rates"][0] == pytest.approx(2 * 16384 / 8100) and st["rates"][1] < st["rates"][0]
    assert T.rank_correlation({0: 1, 1: 2, 2: 3}, {0: 10, 1: 20, 2: 30}) == pytest.approx(1.0)
    assert T.rank_correlation({0: 1, 1: 2, 2: 3}, {0: 30, 1: 20, 2: 10}) == pytest.approx(-1.0)
    assert T.rank_correlation({0: 1, 1: 2}, {0: 1, 1: 2}) is None
