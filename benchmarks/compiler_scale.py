"""How long ``check``, ``--emit deps|policies|order`` and ``plan`` take, and how much memory they
use, at production sizes; and that a program too large to enumerate is refused quickly.

Every case runs ``python -m cusyncgen ...`` in a fresh child, through a small launcher that waits
for it and reports its wall time, user and system CPU time and peak resident memory
(``resource.getrusage(RUSAGE_CHILDREN)`` of the launcher, so of that one command), with a time
limit and an address-space limit so that a run away case is stopped, not the machine.

    python benchmarks/compiler_scale.py [--tree DIR] [--label after] [--commit REV]
                                        [--timeout 300] [--memory-gb 8] [--md-only]

``--tree`` is the source tree to measure (default: this checkout); results are merged into
benchmarks/results/compiler-scale.json under ``--label`` (so one file holds a ``before`` and an
``after`` run) and benchmarks/results/compiler-scale.md is regenerated from the json. Not a test:
the numbers depend on the machine and its load (recorded with them).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"

BIG = """// 40000 x 40000 tiles, each consumer tile reading its producer tile: 1.6e9 edges
Dim x, y;
Grid p(x, y, 40000, 40000);
Grid c(x, y, 40000, 40000);
Dep d({c, Tile(x, y)}, {p, Tile(x, y)});
"""

def chain(n: int, tiles: int = 64) -> str:
    """n grids of ``tiles`` tiles, each tile reading the same tile of the previous grid: two
    policies per dep (TileSync, RowSync), 2^(n-1) combinations of them."""
    lines = [f"// a chain of {n} grids: 2^{n - 1} policy combinations", f"Param Tiles = {tiles};", "Dim x;"]
    lines += [f"Grid g{i}(x, Tiles);" for i in range(n)]
    lines += [f"Dep d{i}({{g{i + 1}, Tile(x)}}, {{g{i}, Tile(x)}});" for i in range(n - 1)]
    return "\n".join(lines) + "\n"


def row_chain(n: int) -> str:
    """n grids of 16 x 32 tiles, each tile reading its row of the previous grid."""
    lines = [f"// a chain of {n} grids of 16 x 32 tiles, each tile reading its row of the previous grid",
             "Dim x, y;"] + [f"Grid g{i}(x, y, 16, 32);" for i in range(n)]
    lines += [f"Dep d{i}({{g{i + 1}, Tile(x, y)}}, {{g{i}, ForAll(Tile(x, y), x, Range(g{i}.x))}});"
              for i in range(n - 1)]
    return "\n".join(lines) + "\n"


ROWS = """// 100 rows of 4096 producer tiles; each of 122 x 100 consumer tiles reads its whole row: 49,971,200 edges
Dim x, y;
Grid g1(x, y, 4096, 100);
Grid g2(x, y, 122, 100);
Dep dep({g2, Tile(x, y)}, {g1, ForAll(Tile(x, y), x, Range(g1.x))});
"""

ONE_ROW = """// one row of 7000 producer tiles, read whole by each of 7000 consumer tiles: 49,000,000 edges
Dim x;
Grid g1(x, 7000);
Grid g2(x, 7000);
Dep dep({g2, Tile(x)}, {g1, ForAll(Tile(x), x, Range(g1.x))});
"""

CAUSAL = """// 64 x 64 tiles, tile (x, y) reading rows 0..y of its column: 133,120 edges
Dim x, y;
Grid p(x, y, 64, 64);
Grid c(x, y, 64, 64);
Dep d({c, Tile(x, y)}, {p, ForAll(Tile(x, y), y, Range(y + 1))});
"""

#: the scratch programs: {name} in a case's argv is the path of program ``name``
PROGRAMS = {"big": BIG, "chain14": chain(14), "chain16": chain(16), "chain40": chain(40),
            "rowchain40": row_chain(40), "rows": ROWS, "onerow": ONE_ROW, "causal": CAUSAL}

GPT3 = ["examples/mlp_gpt3.dep", "-D", "B=64", "-D", "S=2048"]
GPT3_50M = ["examples/mlp_gpt3.dep", "-D", "B=10850", "-D", "S=128"]
GPT3_SMALL = ["examples/mlp_gpt3.dep", "-D", "B=8", "-D", "S=256"]

#: (name, what it shows, argv after ``python -m cusyncgen``; {out} is a scratch file, {big} and the
#: other names of PROGRAMS their programs). The 40000 x 40000 cases must end within seconds: they
#: get at most REFUSAL_TIMEOUT.
CASES = [
    ("check gpt3-mlp B=64 S=2048", "98,304 consumer tiles, 4,718,592 edges", ["check", *GPT3]),
    ("emit deps gpt3-mlp B=64 S=2048", "the edges' JSON to a file", [*GPT3, "--emit", "deps", "-o", "{out}"]),
    ("emit policies gpt3-mlp B=64 S=2048", "", [*GPT3, "--emit", "policies", "-o", "{out}"]),
    ("emit order gpt3-mlp B=64 S=2048", "", [*GPT3, "--emit", "order", "-o", "{out}"]),
    ("plan gpt3-mlp B=64 S=2048", "H100 wave model, 2 policies simulated", ["plan", *GPT3]),
    ("check 40000x40000", "must be refused quickly", ["check", "{big}"]),
    ("emit deps 40000x40000", "must be refused quickly", ["{big}", "--emit", "deps", "-o", "{out}"]),
    ("plan 40000x40000", "must be refused quickly", ["plan", "{big}"]),
    ("header 40000x40000", "the header enumerates nothing: no limit", ["{big}", "-o", "{out}"]),
    ("check gpt3-mlp B=8 S=256", "the test suite's size", ["check", *GPT3_SMALL]),
    ("emit deps gpt3-mlp B=8 S=256", "", [*GPT3_SMALL, "--emit", "deps", "-o", "{out}"]),
    ("plan gpt3-mlp B=8 S=256", "", ["plan", *GPT3_SMALL]),
    ("check attention_gpt3 (defaults)", "", ["check", "examples/attention_gpt3.dep"]),
    ("check mlp_llama (defaults)", "", ["check", "examples/mlp_llama.dep"]),
    ("check conv_resnet38 (defaults)", "", ["check", "examples/conv_resnet38.dep"]),
    ("plan chain of 14 grids", "64 tiles each, 8,192 policy combinations", ["plan", "{chain14}"]),
    ("plan chain of 16 grids", "64 tiles each, 32,768 policy combinations", ["plan", "{chain16}"]),
    ("plan chain of 40 grids", "64 tiles each, 2^39 policy combinations", ["plan", "{chain40}"]),
    ("plan row chain of 40 grids", "16 x 32 tiles each reading a row, 2^39 combinations", ["plan", "{rowchain40}"]),
    ("plan 50M edges: rows of 4096", "49,971,200 edges (RowSync's pattern), 421,800 tiles", ["plan", "{rows}"]),
    ("plan 50M edges: one row of 7000", "49,000,000 edges, 14,000 tiles", ["plan", "{onerow}"]),
    ("plan 50M edges: gpt3-mlp B=10850 S=128", "49,996,800 edges, 1,562,400 tiles", ["plan", *GPT3_50M]),
    ("plan causal 64x64 --max-edges 133120", "exactly its edges: allowed",
     ["plan", "{causal}", "--max-edges", "133120"]),
    ("plan causal 64x64 --max-edges 133119", "one edge over: refused", ["plan", "{causal}", "--max-edges", "133119"]),
]

REFUSAL_TIMEOUT = 60.0

LAUNCHER = r"""
import json, resource, subprocess, sys, time
timeout, mem = float(sys.argv[1]), int(sys.argv[2])
def limit():
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
t = time.perf_counter()
try:
    p = subprocess.run(sys.argv[3:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       timeout=timeout, preexec_fn=limit)
    rc, err, timed_out = p.returncode, p.stderr.decode(errors="replace"), False
except subprocess.TimeoutExpired as e:
    rc, err, timed_out = None, (e.stderr or b"").decode(errors="replace"), True
wall = time.perf_counter() - t
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rc": rc, "timed_out": timed_out, "wall_s": wall, "user_s": ru.ru_utime,
                  "sys_s": ru.ru_stime, "max_rss_mb": ru.ru_maxrss / 1024, "stderr": err[-2000:]}))
"""


def run_case(tree: Path, argv: list, timeout: float, mem_bytes: int, scratch: Path) -> dict:
    out = scratch / "out"
    if out.exists():
        out.unlink()
    args = [a.replace("{out}", str(out)) for a in argv]
    for name in PROGRAMS:
        args = [a.replace("{" + name + "}", str(scratch / f"{name}.dep")) for a in args]
    env = dict(os.environ, PYTHONPATH=str(tree))
    r = subprocess.run([sys.executable, "-c", LAUNCHER, str(timeout), str(mem_bytes),
                        sys.executable, "-m", "cusyncgen", *args],
                       cwd=tree, env=env, capture_output=True, text=True, check=True)
    res = json.loads(r.stdout)
    res["output_bytes"] = out.stat().st_size if out.exists() else None
    err = res.pop("stderr").strip().splitlines()
    errors = [line for line in err if "error" in line.lower() or "Error" in line]
    res["message"] = (errors[-1] if errors else (err[-1] if err and res["rc"] else ""))[:400]
    if res["timed_out"]:
        res["message"] = f"stopped after {timeout:g} s"
    elif res["rc"] not in (0, 1, 2):
        res["message"] = (f"exit {res['rc']} (killed: out of memory under the {mem_bytes >> 30} GiB "
                          f"address-space limit?) " + res["message"])[:400]
    return res


def machine() -> dict:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import numpy
    return {"cpus": os.cpu_count(), "cpu_model": model, "gpu": "none used",
            "python": platform.python_version(), "numpy": numpy.__version__,
            "system": f"{platform.system()} {platform.machine()}"}


def measure(tree: Path, timeout: float, mem_gb: float, only=None) -> dict:
    rows = []
    with tempfile.TemporaryDirectory() as d:
        scratch = Path(d)
        for name, text in PROGRAMS.items():
            (scratch / f"{name}.dep").write_text(text)
        for name, note, argv in CASES:
            if only and name not in only:
                continue
            load = os.getloadavg()[0]
            limit = min(timeout, REFUSAL_TIMEOUT) if "{big}" in argv else timeout
            res = run_case(tree, argv, limit, int(mem_gb * (1 << 30)), scratch)
            res.update(name=name, note=note, argv=" ".join(argv), load_avg_1min_before=round(load, 2))
            rows.append(res)
            print(f"{name:40s} rc={res['rc']} wall {res['wall_s']:7.2f} s  cpu "
                  f"{res['user_s'] + res['sys_s']:7.2f} s  rss {res['max_rss_mb']:8.1f} MB  "
                  f"{res['message'][:90]}", flush=True)
    return {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine(),
            "timeout_s": timeout, "memory_limit_gib": mem_gb, "cases": rows}


def _cell(r: dict | None) -> str:
    if r is None:
        return "-"
    if r["timed_out"]:
        return f"> {r['wall_s']:.0f} s (stopped), {r['max_rss_mb']:,.0f} MB"
    text = f"{r['wall_s']:.1f} s ({r['user_s'] + r['sys_s']:.1f} s CPU), {r['max_rss_mb']:,.0f} MB"
    if r["output_bytes"]:
        text += f", {r['output_bytes'] / 1e6:,.0f} MB out"
    if r["rc"] != 0:
        text += f", exit {r['rc']}"
    return text


def markdown(data: dict) -> str:
    runs = data["runs"]
    labels = [lab for lab in ("before", "after") if lab in runs] + \
        [lab for lab in runs if lab not in ("before", "after")]
    lines = ["# Compiler at scale: check, JSON views and plan", "",
             "Generated by `benchmarks/compiler_scale.py` from `compiler-scale.json` (do not edit). "
             "Each cell: wall time (user + system CPU time), peak resident memory of the one "
             "command, the size of the file it wrote, its exit status when not 0. Wall time "
             "depends on the load of the shared machine (the 1-minute load average before each "
             "case is in the json); CPU time less so.", ""]
    for lab in labels:
        r = runs[lab]
        m = r["machine"]
        lines.append(f"- **{lab}**: commit {r.get('commit', '?')}, {r['when']}, {m['cpus']}-core "
                     f"{m['cpu_model'] or m['system']}, no GPU, Python {m['python']}, numpy "
                     f"{m['numpy']}; limits {r['timeout_s']:g} s and {r['memory_limit_gib']:g} GiB "
                     f"a case; load average {min(c['load_avg_1min_before'] for c in r['cases']):.1f}"
                     f"-{max(c['load_avg_1min_before'] for c in r['cases']):.1f}"
                     + (f"; `{r['command']}`" if r.get("command") else ""))
    lines += ["", "| case | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    names = [c["name"] for c in runs[labels[-1]]["cases"]]
    for name in names:
        cells = [_cell(next((c for c in runs[lab]["cases"] if c["name"] == name), None))
                 for lab in labels]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "Messages of the cases that did not succeed:", ""]
    for lab in labels:
        for c in runs[lab]["cases"]:
            if c["rc"] != 0 and c["message"]:
                lines.append(f"- {lab}, {c['name']}: `{c['message']}`")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", type=Path, default=ROOT, help="source tree to measure (default: this one)")
    ap.add_argument("--label", default="after", help="name of this run in the json (default: after)")
    ap.add_argument("--commit", help="the tree's commit (default: git rev-parse HEAD of --tree)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds a case may run (default 300)")
    ap.add_argument("--memory-gb", type=float, default=8.0, help="address-space limit a case (default 8)")
    ap.add_argument("--only", action="append", metavar="NAME",
                    help="run only the case NAME (repeatable); the label's other cases are kept")
    ap.add_argument("--md-only", action="store_true", help="only regenerate the md from the json")
    args = ap.parse_args(argv)
    path = RESULTS / "compiler-scale.json"
    data = json.loads(path.read_text()) if path.exists() else {"runs": {}}
    if not args.md_only:
        commit = args.commit
        if commit is None:
            r = subprocess.run(["git", "-C", str(args.tree), "rev-parse", "--short", "HEAD"],
                               capture_output=True, text=True)
            commit = r.stdout.strip() or "?"
        run = measure(args.tree.resolve(), args.timeout, args.memory_gb, args.only)
        run["commit"] = commit
        run["command"] = " ".join(["python benchmarks/compiler_scale.py", *(argv if argv is not None else sys.argv[1:])])
        old = data["runs"].get(args.label)
        if args.only and old:   # keep the label's other cases, in CASES order
            for c in old["cases"]:
                c.setdefault("timeout_s", old["timeout_s"])
            for c in run["cases"]:
                c["timeout_s"] = run["timeout_s"]
            new = {c["name"]: c for c in old["cases"] + run["cases"]}
            old["cases"] = [new[n] for n, _, _ in CASES if n in new]
            run = old
        data["runs"][args.label] = run
        RESULTS.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1) + "\n")
    (RESULTS / "compiler-scale.md").write_text(markdown(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
