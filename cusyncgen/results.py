"""docs/results.md from the benchmark JSON: ``python -m cusyncgen.results [-o FILE] [--check] [DIR]``.

Reads every ``<workload>-<device>[-<variant>].json`` (bench runs: ``rows``) and
``tune-<workload>-<device>[-<variant>].json`` (tune runs: ``choices``) in DIR and the folders
under it (default ``benchmarks/results``, one folder per device) and writes one markdown page: a summary table per workload, then per run
and per model a table of stream order, PDL alone, the best synchronized configuration on the same
kernels, the vendor library in a CUDA graph and the roofline floor, linking each run's own
markdown. Every number is a value of the JSON or a ratio/geometric mean of such values; nothing is
typed by hand, so the page is regenerated, never edited (``--check`` fails when it is stale).

Rows may carry ``"kernel"`` (``"sm80"``, ``"sm90"``); a row without one is ``"sm80"``. A config
``NAME/VARIANT`` (``Conv2DTileSync+PDL/split-K``) is NAME on the VARIANT chain: its own tables. A
vendor row names the form of the vendor's computation that was fastest at its point in
``"vendor_form"`` (``cublaslt-gelu``, ``sdpa-flash``...); a row without one (results measured before
the forms were compared) is ``unnamed``.
Standard library only: it runs without a GPU, CuPy or PyTorch.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from cusyncgen import files
from cusyncgen.cuda import timing
from cusyncgen.errors import CusyncError

WORKLOADS = ("mlp", "conv2d", "attention", "overhead")
TITLES = {"mlp": "MLP", "conv2d": "Conv2D", "attention": "Attention", "overhead": "Overhead"}
SIZE = {"mlp": "M", "conv2d": "batch", "attention": "M (B·S prompt, B generation)"}
DEFAULT_KERNEL = "sm80"
REGENERATE = "python -m cusyncgen.results -o docs/results.md benchmarks/results"
PROG = "cusyncgen results"  # in messages, run as `cusyncgen results` or `python -m cusyncgen.results`
BELOW = 0.97  # the summary counts points where the best synchronized config is below this
UNNAMED = "unnamed"  # the form of a vendor row without "vendor_form"

METHOD = """\
How every number was measured (`cusyncgen bench`, `cusyncgen tune`): times are medians of CUDA-graph
replays in microseconds, after a warm-up; every configuration's output was checked against a float32
reference on fresh inputs with poisoned outputs ('all correct' says whether every configuration of
the point passed). The synchronized configurations and StreamSync run the *same* kernels; the vendor
library (cuBLAS, cuDNN, PyTorch SDPA) runs through PyTorch, alone and captured in a CUDA graph
('+graph'), in every form a user would write (fused epilogues, each SDPA backend, contiguous
weights, each memory layout), each checked; its row is the fastest correct form, named ('vendor
form'; 'unnamed': a run from before the forms were compared). 'over StreamSync' is StreamSync's time
over the configuration's time in the same run. The floor is max(FLOPs / peak, bytes / bandwidth)
with both ceilings measured in that run. Configuration names follow the paper: the policy (TileSync,
RowSync, StridedSync, Conv2DTileSync, or one per dependency for Attention), `+PDL` consumer
PDL-launched (otherwise the paper's wait-kernel on two streams), `W` no ordering at all, `R` the
independent operand loaded before the wait, `T` no custom tile order; `PDL` alone is the plain
kernels with `griddepcontrol.wait` and no semaphore. `/split-K`: the same configuration on the chain
whose deep-K kernels split each tile's K range over several blocks. 'our fastest' is the fastest
correct configuration of ours at that point on either chain (synchronized, PDL alone or StreamSync)."""


def slug(device: str) -> str:
    """The device as it appears in result file names: ``NVIDIA H200`` -> ``nvidia-h200``."""
    return re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")


@dataclass
class Run:
    """One result file: a bench run (``rows``) or a tune run (``choices``)."""

    path: Path
    workload: str
    device: str
    variant: str  # the file name after <workload>-<device>-, '' for the default run
    tune: bool
    data: dict = field(repr=False)

    @property
    def vendor(self) -> str:
        return self.data.get("vendor", "cuBLAS")


def _load(path: Path) -> Run | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CusyncError(f"{path.name}: not a readable JSON file ({e})") from None
    if not isinstance(data, dict) or "workload" not in data or "device" not in data:
        return None  # not a run (the tune cache, a timeline dump)
    tune = path.stem.startswith("tune-")
    key = "choices" if tune else "rows"
    if not isinstance(data.get(key), list):
        raise CusyncError(f"{path.name}: expected a list '{key}' in a {'tune' if tune else 'bench'} result")
    if not isinstance(data.get("sdpa", []), list):
        raise CusyncError(f"{path.name}: expected a list 'sdpa'")
    for part in (key, "sdpa"):
        for i, r in enumerate(data.get(part, [])):
            missing = [k for k in ("config", "time_us") if not isinstance(r, dict) or k not in r]
            if missing:
                raise CusyncError(f"{path.name}: {part}[{i}] has no {', '.join(missing)}")
            if isinstance(r["time_us"], bool) or not isinstance(r["time_us"], (int, float)):
                raise CusyncError(f"{path.name}: {part}[{i}] time_us is {r['time_us']!r}, not a number")
    workload, device = str(data["workload"]), str(data["device"])
    prefix = ("tune-" if tune else "") + workload + "-" + slug(device)
    stem = path.stem
    variant = stem[len(prefix):].lstrip("-") if stem.startswith(prefix) else stem
    # a kernel family's own default run (bench's -<kernel> file: mlp-<device>-sm90) is no variant
    kernel = str(data.get("kernel", DEFAULT_KERNEL))
    if kernel != DEFAULT_KERNEL and (variant == kernel or variant.startswith(kernel + "-")):
        variant = variant[len(kernel):].lstrip("-")
    return Run(path, workload, device, variant, tune, data)


def load_runs(results: Path) -> list[Run]:
    if not results.is_dir():
        raise CusyncError(f"{results}: no such directory of results")
    runs = [r for p in sorted(results.rglob("*.json")) if (r := _load(p)) is not None]
    order = {w: i for i, w in enumerate(WORKLOADS)}
    # default run first, then variants by name; devices by name
    runs.sort(key=lambda r: (r.tune, order.get(r.workload, len(order)), r.workload, r.device,
                             r.variant != "", r.variant))
    return runs


# --- one bench run -------------------------------------------------------------------------------

def _split(config: str) -> tuple[str, str]:
    base, _, chain = config.partition("/")
    return base, chain


def _reference_names(run: Run) -> tuple[str, ...]:
    v = run.vendor
    return (v, v + "+graph", "SDPA", "SDPA+graph", "floor")


@dataclass
class Point:
    """One (model, size) of one kernel family and chain: the rows the tables are made of."""

    model: str
    M: int
    ours: dict  # config (without /chain) -> row, our kernels
    ref: dict   # vendor, vendor+graph, SDPA(+graph), floor -> row

    def best(self):
        """The fastest correct synchronized configuration (not StreamSync, not PDL alone)."""
        cands = [r for c, r in self.ours.items() if c not in ("StreamSync", "PDL") and r.get("correct", True)]
        return min(cands, key=lambda r: (r["time_us"], r["config"])) if cands else None

    def fastest_ours(self):
        cands = [r for r in self.ours.values() if r.get("correct", True)]
        return min(cands, key=lambda r: (r["time_us"], r["config"])) if cands else None

    def vendor_graph(self):
        """The fastest vendor-library row in a CUDA graph (cuBLAS/cuDNN, or SDPA where timed)."""
        cands = [r for c, r in self.ref.items() if c.endswith("+graph") and r.get("correct", True)]
        return min(cands, key=lambda r: (r["time_us"], r["config"])) if cands else None

    def all_correct(self) -> bool:
        return all(r.get("correct", True) for r in list(self.ours.values()) + list(self.ref.values()))


def points(run: Run) -> dict:
    """{(kernel, chain): {model: [Point by size]}} of a bench run, models in file order."""
    refs = set(_reference_names(run))
    rows = list(run.data["rows"]) + list(run.data.get("sdpa", []))
    ref: dict = {}
    ours: dict = {}
    models: list = []
    for r in rows:
        model, M = r.get("model", ""), r.get("M", 0)
        if model not in models:
            models.append(model)
        if r["config"] in refs:
            ref.setdefault((model, M), {})[r["config"]] = r
            continue
        base, chain = _split(r["config"])
        key = (r.get("kernel", DEFAULT_KERNEL), chain)
        at = ours.setdefault(key, {}).setdefault((model, M), {})
        # a run over several tile configs (the sm90 bench) has one row per config and tile config:
        # the configuration's fastest correct one
        old = at.get(base)
        if old is None or (r.get("correct", True), -r["time_us"]) > (old.get("correct", True), -old["time_us"]):
            at[base] = r
    out: dict = {}
    for key in sorted(ours, key=lambda k: (k[0], k[1] != "", k[1])):
        per_model: dict = {}
        for model in models:
            sizes = sorted(M for (m, M) in ours[key] if m == model)
            if sizes:
                per_model[model] = [Point(model, M, ours[key][(model, M)], ref.get((model, M), {}))
                                    for M in sizes]
        out[key] = per_model
    return out


def fastest_by_point(groups: dict) -> dict:
    """{(kernel, model, M): our fastest correct row over every chain (split-K included)}."""
    out: dict = {}
    for (kernel, _chain), per_model in groups.items():
        for model, pts in per_model.items():
            for p in pts:
                f = p.fastest_ours()
                k = (kernel, model, p.M)
                if f is not None and (k not in out or f["time_us"] < out[k]["time_us"]):
                    out[k] = f
    return out


def form_of(row) -> str:
    """The vendor form a vendor row names (UNNAMED where it names none)."""
    return str(row.get("vendor_form") or UNNAMED)


def forms_label(names) -> str:
    """The vendor forms of several points: the one name where all are the same, else each with its
    count, the most frequent first (``cublaslt-gelu 5, torch-unfused 4``)."""
    counts: dict = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    if len(counts) == 1:
        return next(iter(counts))
    return ", ".join(f"{n} {c}" for n, c in sorted(counts.items(), key=lambda nc: (-nc[1], nc[0])))


def _t(row) -> str:
    return "-" if row is None else f"{row['time_us']:.1f}"


def _x(value) -> str:
    return "-" if value is None else f"{value:.3f}x"


def _speedup(row):
    return None if row is None or "speedup_vs_streamsync" not in row else row["speedup_vs_streamsync"]


def _ratio(a, b):
    """a's time over b's time: how much faster b is (None where either is missing)."""
    if a is None or b is None or not b["time_us"]:
        return None
    return a["time_us"] / b["time_us"]


def _geomean(values):
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _link(path: Path, base: Path) -> str:
    return Path(os.path.relpath(path, base)).as_posix()


def _label(run: Run, kernel: str, chain: str) -> str:
    parts = [f"{kernel} kernels"]
    if chain:
        parts.append(f"{chain} chain")
    return ", ".join(parts)


def _run_title(run: Run) -> str:
    kernel = str(run.data.get("kernel", DEFAULT_KERNEL))
    return (run.device + (f", {run.variant}" if run.variant else "")
            + (f" ({kernel} kernels)" if kernel != DEFAULT_KERNEL else ""))


def bench_tables(run: Run, base: Path) -> list[str]:
    lines = [f"### {TITLES.get(run.workload, run.workload)} on {_run_title(run)}", ""]
    md = run.path.with_suffix(".md")
    png = run.path.with_suffix(".png")
    files = [f"[{run.path.name}]({_link(run.path, base)})"]
    if md.exists():
        files.insert(0, f"[{md.name}]({_link(md, base)}) (every configuration)")
    if png.exists():
        files.append(f"[{png.name}]({_link(png, base)})")
    lines += ["Files: " + ", ".join(files) + ".", ""]
    if run.data.get("note"):
        lines += [str(run.data["note"]), ""]
    if run.workload == "overhead":
        return lines + overhead_table(run)
    vendor = run.vendor
    size = SIZE.get(run.workload, "M")
    groups = points(run)
    if not groups:
        return lines + ["No rows.", ""]
    fastest = fastest_by_point(groups)
    for (kernel, chain), per_model in groups.items():
        for model, pts in per_model.items():
            has_sdpa = any("SDPA+graph" in p.ref for p in pts)
            has_floor = any("floor" in p.ref for p in pts)
            head = [size, "StreamSync", "PDL alone", "best synchronized", "µs", "over StreamSync",
                    f"{vendor}+graph"] + (["SDPA+graph"] if has_sdpa else []) \
                + ["fastest +graph / our fastest", "vendor form"] + (["floor"] if has_floor else []) + ["all correct"]
            lines += [f"#### {model} ({_label(run, kernel, chain)})", "",
                      "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            for p in pts:
                best, ss = p.best(), p.ours.get("StreamSync")
                vg = p.ref.get(vendor + "+graph")
                cells = [str(p.M), _t(ss), _x(_speedup(p.ours.get("PDL"))),
                         best["config"].partition("/")[0] if best else "-", _t(best),
                         _x(_speedup(best)), _t(vg)]
                if has_sdpa:
                    cells.append(_t(p.ref.get("SDPA+graph")))
                cells.append(_x(_ratio(p.vendor_graph(), fastest.get((kernel, model, p.M)))))
                cells.append("-" if p.vendor_graph() is None else form_of(p.vendor_graph()))
                if has_floor:
                    cells.append(_t(p.ref.get("floor")))
                cells.append("yes" if p.all_correct() else "NO")
                lines.append("| " + " | ".join(cells) + " |")
            lines.append("")
    return lines


def overhead_table(run: Run) -> list[str]:
    rows = run.data["rows"]
    info = ", ".join(f"{k} {run.data[k]}" for k in ("blocks", "threads", "tile_bytes") if k in run.data)
    if "tile" in run.data and "tiles" in run.data:   # the sm90 hooks: two light GeMMs (workloads.overhead_sm90)
        head = (f"Two dependent GeMMs of little work per tile, M = {run.data.get('M', '?')}, {run.data['tile']} tiles: "
                f"{run.data['tiles']} (the producer one wave).")
    else:
        head = f"Two copy kernels of one wave ({info})." if info else "Two copy kernels."
    lines = ([head, ""]
             + ["| config | µs | over StreamSync | correct |", "|---|---|---|---|"])
    ss = next((r for r in rows if r["config"] == "StreamSync"), None)
    for r in rows:
        lines.append(f"| {r['config']} | {r['time_us']:.1f} | {_x(_ratio(ss, r))} | "
                     f"{'yes' if r.get('correct', True) else 'NO'} |")
    return lines + [""]


# --- tune runs -----------------------------------------------------------------------------------

def _family(config: str) -> str:
    return _split(config)[0].split("+")[0]


def _is_sync(config: str) -> bool:
    return _family(config) not in ("StreamSync", "PDL")


def tune_tables(run: Run, base: Path) -> list[str]:
    lines = [f"### tune {run.workload} on {_run_title(run)}", ""]
    md = run.path.with_suffix(".md")
    files = [f"[{run.path.name}]({_link(run.path, base)})"]
    if md.exists():
        files.insert(0, f"[{md.name}]({_link(md, base)}) (candidates, prediction)")
    header = run.path.with_suffix(".h")
    if header.exists():
        files.append(f"[{header.name}]({_link(header, base)}) (dispatch table)")
    lines += ["Files: " + ", ".join(files) + ".", "",
              "The fastest correct configuration per size over every candidate the runs measured "
              "(policies, orderings, tile shapes, sync warp, spread, split-K), against the fastest "
              "StreamSync among them.", ""]
    choices = run.data["choices"]
    models: list = []
    for c in choices:
        if c.get("model", "") not in models:
            models.append(c.get("model", ""))
    lines += ["| model | geomean over StreamSync | best | synchronized policy chosen |", "|---|---|---|---|"]
    for model in models:
        cs = [c for c in choices if c.get("model", "") == model]
        g = _geomean([c.get("speedup_vs_streamsync") for c in cs])
        top = max(cs, key=lambda c: (c.get("speedup_vs_streamsync") or 0, -c.get("M", 0)))
        n = sum(_is_sync(c["config"]) for c in cs)
        where = f"{SIZE.get(run.workload, 'M').split(' ')[0]}={top.get('M')}, {top['config']}"
        lines.append(f"| {model} | {_x(g)} | {_x(top.get('speedup_vs_streamsync'))} ({where}) "
                     f"| {n} of {len(cs)} |")
    confirmed = [c for c in choices if isinstance(c.get("confirm"), dict)]
    if confirmed:
        how = "interleaved" if timing.how_timed(c["confirm"] for c in confirmed) else "alternating"
        lines += ["", "Re-measured (the choice, the fastest stream order and the vendor library + graph on "
                  f"fresh inputs, in {how} rounds: free of the selection among the candidates):", "",
                  "| model | over the vendor + graph, geomean over M >= 128 | faster than it | "
                  "over the fastest stream order, max | the vendor's fastest form (sizes) |", "|---|---|---|---|---|"]
        for model in models:
            cs = [c for c in confirmed if c.get("model", "") == model]
            if not cs:
                continue
            r = {c["M"]: c["confirm"]["vendor_us"] / c["confirm"]["ours_us"] for c in cs}
            st = [(c["confirm"]["stream_us"] / c["confirm"]["ours_us"], c["M"]) for c in cs
                  if c["confirm"].get("stream_us")]
            top = max(st) if st else None
            lines.append(f"| {model} | {_x(_geomean([v for M, v in r.items() if M >= VENDOR_MIN_M]))} | "
                         f"{sum(v > 1.0 for v in r.values())} of {len(r)} sizes | "
                         + (f"{_x(top[0])} (M={top[1]}) |" if top else "- |")
                         + f" {forms_label(form_of(c['confirm']) for c in cs)} |")
    has_pred = any(isinstance(c.get("predicted"), dict) for c in choices)
    head = ["model", SIZE.get(run.workload, "M"), "choice", "tiles", "µs", "fastest StreamSync µs",
            "over StreamSync"] + (["planner's choice"] if has_pred else [])
    lines += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in choices:
        cells = [str(c.get("model", "")), str(c.get("M", "")), c["config"], str(c.get("tiles") or "-"),
                 f"{c['time_us']:.1f}", f"{c['streamsync_us']:.1f}" if "streamsync_us" in c else "-",
                 _x(c.get("speedup_vs_streamsync"))]
        if has_pred:
            pred = c.get("predicted")
            cells.append(f"{pred['policy']} {_x(pred.get('speedup'))}" if isinstance(pred, dict) else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


# --- summary -------------------------------------------------------------------------------------

SUMMARY_HEAD = ("| model | device | best synchronized over StreamSync (same kernels) | geomean over points "
                "| synchronized faster | vendor + graph faster than ours |")


def family(model: str) -> tuple[str, str]:
    """A model's family and member for the summary: ``resnet38-L4`` -> (resnet38, L4),
    ``gpt3-gen-S'1024`` -> (gpt3-gen, S'1024), ``gpt3`` -> (gpt3, '')."""
    m = re.fullmatch(r"(.+)-(L\d+|S'\d+)", model)
    return (m.group(1), m.group(2)) if m else (model, "")


def summary_rows(run: Run) -> list[tuple[str, str, str]]:
    """(family, device, table line) per model family of a bench run's default chain."""
    out = []
    size = SIZE.get(run.workload, "M").split(" ")[0]
    groups = points(run)
    fastest = fastest_by_point(groups)
    for (kernel, chain), per_model in groups.items():
        if chain:
            continue
        fams: dict = {}
        for model, pts in per_model.items():
            fam, member = family(model)
            fams.setdefault(fam, []).extend((member, p) for p in pts)
        for fam, members in fams.items():
            have = [(m, p, b) for m, p in members if (b := p.best()) is not None and _speedup(b) is not None]
            if not have:
                continue
            m_top, p_top, b_top = max(have, key=lambda x: (_speedup(x[2]), -x[1].M))
            faster = sum(_speedup(b) > 1.0 for _, _, b in have)
            with_v = [p for _, p in members
                      if p.vendor_graph() is not None and (kernel, p.model, p.M) in fastest]
            v_faster = sum(p.vendor_graph()["time_us"] < fastest[(kernel, p.model, p.M)]["time_us"]
                           for p in with_v)
            names = "/".join(sorted({p.vendor_graph()["config"][:-len("+graph")] for p in with_v}))
            names += ": " + forms_label(form_of(p.vendor_graph()) for p in with_v)
            name = fam + ("" if kernel == DEFAULT_KERNEL else f" ({kernel})")
            where = (f"{m_top} " if m_top else "") + f"{size}={p_top.M}"
            line = (f"| {name} | {run.device} | {_x(_speedup(b_top))} ({where}, {b_top['config']}) "
                    f"| {_x(_geomean([_speedup(b) for _, _, b in have]))} | {faster} of {len(have)} | "
                    + (f"{v_faster} of {len(with_v)} ({names})" if with_v else "-") + " |")
            out.append((fam, run.device, line))
    return out


VENDOR_HEAD = ("| model | device | best synchronized vs cuBLAS + graph | geomean over M >= 128 "
               "| best synchronized vs fastest stream order (same kernels) | floor / best synchronized, geomean "
               "| cuBLAS's fastest form (sizes) |")
VENDOR_MIN_M = 128


def vendor_rows(run: Run) -> list[tuple[str, str, str]]:
    """(model, device, table line) per model of a bench run of a kernel family other than sm80 (the
    sm90 MLP): per size the fastest correct synchronized configuration over every chain (split-K
    included) against cuBLAS + graph (ratio > 1: ours faster) at its best size and as a geometric
    mean over M >= VENDOR_MIN_M; against the fastest stream order of the same kernels (StreamSync or
    PDL alone, any chain); how close it comes to the roofline floor; and which vendor form was the
    fastest at how many sizes."""
    out = []
    groups = {k: v for k, v in points(run).items() if k[0] != DEFAULT_KERNEL}
    models = list(dict.fromkeys(m for per_model in groups.values() for m in per_model))
    for model in models:
        per_m: dict = {}
        for (_kernel, _chain), per_model in groups.items():
            for p in per_model.get(model, []):
                e = per_m.setdefault(p.M, {"sync": None, "stream": None, "ref": p.ref})
                b = p.best()
                if b is not None and (e["sync"] is None or b["time_us"] < e["sync"]["time_us"]):
                    e["sync"] = b
                for name in ("StreamSync", "PDL"):
                    r = p.ours.get(name)
                    if r is not None and r.get("correct", True) and (e["stream"] is None
                                                                   or r["time_us"] < e["stream"]["time_us"]):
                        e["stream"] = r
        vs_vendor = {M: _ratio(e["ref"].get(run.vendor + "+graph"), e["sync"]) for M, e in per_m.items()}
        vs_stream = {M: _ratio(e["stream"], e["sync"]) for M, e in per_m.items()}
        vs_floor = [_ratio(e["ref"].get("floor"), e["sync"]) for e in per_m.values()]
        have = {M: v for M, v in vs_vendor.items() if v is not None}
        if not have:
            continue
        forms = forms_label(form_of(per_m[M]["ref"][run.vendor + "+graph"]) for M in sorted(have))
        top = max(have, key=lambda M: (have[M], -M))
        top_s = max((M for M in vs_stream if vs_stream[M] is not None), key=lambda M: (vs_stream[M], -M))
        cfg = per_m[top]["sync"]
        line = (f"| {model} | {run.device} | {_x(have[top])} (M={top}, {cfg['config']}; "
                f"{sum(v > 1.0 for v in have.values())} of {len(have)} sizes faster) "
                f"| {_x(_geomean([v for M, v in have.items() if M >= VENDOR_MIN_M]))} "
                f"| {_x(vs_stream[top_s])} (M={top_s}, {per_m[top_s]['sync']['config']}) "
                f"| {_x(_geomean(vs_floor))} | {forms} |")
        out.append((model, run.device, line))
    return out


def summary(runs: list[Run]) -> list[str]:
    lines = ["## Summary", "",
             "Per workload, model and device, from each device's default run: the best synchronized "
             "configuration's speed-up over StreamSync on the same kernels at its best point, the "
             "geometric mean of that speed-up over the points, at how many points it is faster than "
             "StreamSync, and at how many the vendor library in a CUDA graph is faster than the "
             "fastest configuration of ours (synchronized, PDL alone or StreamSync, on either chain).", ""]
    for w in WORKLOADS:
        if w == "overhead":
            continue
        rows = [row for r in runs if not r.tune and r.workload == w and not r.variant
                for row in summary_rows(r)]
        order = list(dict.fromkeys(fam for fam, _, _ in rows))
        rows.sort(key=lambda row: (order.index(row[0]), row[1]))
        lines += [f"### {TITLES[w]}", ""]
        if rows:
            lines += [SUMMARY_HEAD, "|---|---|---|---|---|---|"] + [line for _, _, line in rows]
        else:
            lines.append("No results.")
        lines.append("")
        vrows = [row for r in runs if not r.tune and r.workload == w and not r.variant for row in vendor_rows(r)]
        if vrows:
            kernels = sorted({k for r in runs if not r.tune and r.workload == w and not r.variant
                              for k, _ in points(r) if k != DEFAULT_KERNEL})
            lines += [f"{TITLES[w]} on the {'/'.join(kernels)} kernels against the vendor library: the fastest "
                      "correct synchronized configuration per size (any tile config and chain) over cuBLAS in "
                      f"a CUDA graph (> 1: ours faster), at its best size and as a geometric mean over M >= "
                      f"{VENDOR_MIN_M}; over the fastest stream order of the same kernels; the roofline "
                      "floor over it (1: at the floor); and the vendor's fastest form at how many sizes.", "",
                      VENDOR_HEAD, "|---|---|---|---|---|---|---|"] + [line for _, _, line in vrows] + [""]
    return lines


def render(results: Path, out_dir: Path) -> str:
    """The whole page; links are relative to ``out_dir`` (where the page will be written)."""
    runs = load_runs(results)
    if not runs:
        raise CusyncError(f"{results} holds no bench or tune results (JSON files with a device, a workload and "
                          "rows or choices, as `cusyncgen bench` and `cusyncgen tune` write them): nothing to "
                          "tabulate")
    lines = ["# Results", "",
             f"Generated from [the JSON]({_link(results, out_dir)}/) by `{REGENERATE}`; "
             "do not edit by hand (the tests regenerate it and compare).", "", METHOD, ""]
    lines += summary(runs)
    for w in WORKLOADS + tuple(sorted({r.workload for r in runs} - set(WORKLOADS))):
        bench = [r for r in runs if not r.tune and r.workload == w]
        tune = [r for r in runs if r.tune and r.workload == w]
        lines += [f"## {TITLES.get(w, w)}", ""]
        if not bench and not tune:
            lines += ["No results.", ""]
        for r in bench:
            lines += bench_tables(r, out_dir)
        for r in tune:
            lines += tune_tables(r, out_dir)
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"


def main(argv=None, prog: str = "python -m cusyncgen.results") -> int:
    """``python -m cusyncgen.results`` and ``cusyncgen results`` (prog: the name in the usage)."""
    ap = argparse.ArgumentParser(prog=prog,
                                 description="Write docs/results.md from the benchmark JSON.")
    ap.add_argument("results", nargs="?", type=Path, default=Path("benchmarks/results"),
                    help="directory of the bench and tune JSON, read with its folders (default: benchmarks/results)")
    ap.add_argument("-o", "--output", type=Path, default=None,
                    help="write the page here (default: stdout); links are relative to its folder")
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 if the file given by -o differs from the generated page")
    args = ap.parse_args(argv)
    if args.check and args.output is None:
        ap.error("--check needs -o FILE")
    try:
        if args.output is not None and args.results.is_dir() and not args.check:
            files.refuse_overwrite([args.output], sorted(args.results.rglob("*.json")))
        out_dir = (args.output.parent if args.output is not None else Path("."))
        text = render(args.results, out_dir)
        if args.check:
            old = args.output.read_text() if args.output.exists() else None
            if old != text:
                print(f"{PROG}: error: {args.output} is not what `{REGENERATE}` writes; regenerate it",
                      file=sys.stderr)
                return 1
            return 0
        if args.output is None:
            sys.stdout.write(text)
        else:
            files.make_directory(args.output.parent)
            files.write_file(args.output, text)
    except CusyncError as e:
        print(e.render(PROG), file=sys.stderr)
        return 1
    except OSError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    return 0


def command(argv=None) -> int:
    """``cusyncgen results``: main() under the command's name."""
    return main(argv, prog=PROG)


if __name__ == "__main__":
    sys.exit(main())
