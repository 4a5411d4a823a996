"""compute-sanitizer over the synchronized kernels, in one call (a few minutes on an H100):

- memcheck and synccheck on every sm90 variant of ``python -m cusyncgen.commands.sm90_check
  --sanitizer-target run`` (every ordering and policy, split-K and split-K tails, both ping-pong
  configs, per-GeMM tiles, the grouped and banded orders, the pair-store, SwiGLU and TMA-store
  epilogues; GPT-3 at M = 128; the decode kernel's orderings at M = 3-64; the swapped GeMM's at
  M = 5 and 64), launched as the
  benchmark launches them (memcheck with
  ``--report-api-errors no``: the driver entry-point probes of the libraries are not kernel errors;
  and ``PYTORCH_NO_CUDA_MEMORY_CACHING=1``, so an access past a buffer is past an allocation);
- racecheck on the same variants with every wait satisfied beforehand, in stream order
  (``--sanitizer-target presatisfied``: racecheck serializes the blocks, so a block waiting for
  another's post could starve);
- racecheck on ``python -m cusyncgen.commands.selfcheck --model gpt3 --M 1``, the SM80 kernels (their
  modules compiled meanwhile by ``cusyncgen.commands.prebuild``, which needs nvcc).

    python -m cusyncgen.commands.sanitize [-o DIR] [--tools memcheck,synccheck,racecheck,sm80] [--only TEXT]

Writes ``DIR/sanitize-<device>.log`` (its first line the command; one line per tool: the tool's
summary line, variants ok / failed; then the racecheck reports grouped by kind) and each tool's
whole output under ``DIR/sanitize-raw/``. Exit status 1 if memcheck or synccheck found an error, a
variant failed or a tool ran out of time; racecheck's hazards are listed by kind, not failed on
(docs/sm90.md explains the block-scope release/acquire pairs it reports: compare the kinds).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from cusyncgen.commands.bench import command_line, slug

PROG = "python -m cusyncgen.commands.sanitize"
TOOLS = ("memcheck", "synccheck", "racecheck", "sm80")
OK_LINE = re.compile(r"^variant .*: (ok|ran)|rel_err .* ok$", re.M)
BAD_LINE = re.compile(r"^variant .*: (WRONG|ERROR)|rel_err .* WRONG$", re.M)
SUMMARY = re.compile(r"(ERROR|RACECHECK) SUMMARY: .*")
RACE = re.compile(r"Race reported|and (Read|Write) access")


@dataclass(frozen=True)
class Run:
    """One compute-sanitizer run: the tool, what it runs, its time limit in seconds."""

    tool: str
    target: str
    command: tuple
    limit: int
    env: tuple = ()

    @property
    def log_name(self) -> str:
        return f"{self.tool}-{'sm80' if 'selfcheck' in ' '.join(self.command) else 'sm90'}.log"


def runs(python: str, model: str, M: int, tools, only: str = "", limits: "dict | None" = None) -> list[Run]:
    limits = {"memcheck": 75, "synccheck": 55, "racecheck": 240, "sm80": 240, **(limits or {})}
    target = [python, "-m", "cusyncgen.commands.sm90_check", "--models", model, "--sanitizer-M", str(M)] + \
        (["--only", only] if only else [])
    out = []
    scope = f"sm90 variants with '{only}'" if only else f"sm90 {model} M={M}"   # --only: its own models and M
    if "memcheck" in tools:
        out.append(Run("memcheck", f"{scope} every ordering", tuple(target + ["--sanitizer-target", "run"]),
                       limits["memcheck"], (("PYTORCH_NO_CUDA_MEMORY_CACHING", "1"),)))
    if "synccheck" in tools:
        out.append(Run("synccheck", f"{scope} every ordering", tuple(target + ["--sanitizer-target", "run"]),
                       limits["synccheck"]))
    if "racecheck" in tools:
        out.append(Run("racecheck", f"{scope} stream order, waits satisfied",
                       tuple(target + ["--sanitizer-target", "presatisfied"]), limits["racecheck"]))
    if "sm80" in tools:
        out.append(Run("racecheck", "sm80 selfcheck gpt3 M=1 (every config)",
                       (python, "-m", "cusyncgen.commands.selfcheck", "--model", "gpt3", "--M", "1"), limits["sm80"]))
    return out


def summarize(run: Run, text: str, rc: int, seconds: float) -> tuple[str, bool]:
    """One line of the summary table for a run's output, and whether it passed: the tool's summary
    line, the variants that ran ok / failed. racecheck's hazards pass (the block-scope
    release/acquire pairs it reports are explained in docs/sm90.md); its report kinds are listed."""
    status = "TIMEOUT" if rc in (124, -9, -15) else "done"
    found = "; ".join(m.group(0) for m in SUMMARY.finditer(text)) or f"no summary line (rc {rc})"
    ok, bad = len(OK_LINE.findall(text)), len(BAD_LINE.findall(text))
    errors = re.search(r"ERROR SUMMARY: (\d+) error", text)
    passed = status == "done" and bad == 0 and ok > 0 and (run.tool == "racecheck" or (errors and errors.group(1) == "0"))
    line = f"{run.tool:10s} {run.target:44s} {status:8s} {found}; {ok} ok, {bad} failed (rc {rc}, {seconds:.0f}s)"
    return line, bool(passed)


def race_kinds(text: str, top: int = 12) -> list[str]:
    """racecheck's reports by kind, the most frequent first (addresses elided)."""
    counts: dict = {}
    for line in text.splitlines():
        if RACE.search(line):
            key = re.sub(r"0x[0-9a-f]+", "0x.", re.sub(r"^=+ *", "", line)).strip()
            counts[key] = counts.get(key, 0) + 1
    return [f"{n:7d} {k}" for k, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top]]


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tools", default=",".join(TOOLS),
                    help=f"comma-separated, of {', '.join(TOOLS)} (sm80: racecheck on the SM80 kernels)")
    ap.add_argument("--model", default="gpt3")
    ap.add_argument("--M", type=int, default=128)
    ap.add_argument("--only", default="", help="only the sm90 variants whose name contains this")
    ap.add_argument("--limit", action="append", default=[], metavar="TOOL=SECONDS",
                    help="a tool's time limit (defaults: memcheck 75, synccheck 55, racecheck 240, sm80 240)")
    ap.add_argument("--compute-sanitizer", default=None,
                    help="the compute-sanitizer binary (default: on PATH, else /usr/local/cuda/bin)")
    ap.add_argument("-o", "--out-dir", type=Path, default=Path("."))
    return ap


def main(argv=None) -> int:
    ap = parser()
    a = ap.parse_args(argv)
    tools = [t for t in a.tools.split(",") if t]
    if set(tools) - set(TOOLS):
        ap.error(f"--tools: no tool {', '.join(sorted(set(tools) - set(TOOLS)))} (known: {', '.join(TOOLS)})")
    try:
        limits = {k: int(v) for k, _, v in (s.partition("=") for s in a.limit)}
    except ValueError:
        ap.error("--limit: TOOL=SECONDS")
    cs = a.compute_sanitizer or shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    if not Path(cs).exists() and not shutil.which(cs):
        print(f"{PROG}: error: compute-sanitizer not found ({cs}); --compute-sanitizer names it", file=sys.stderr)
        return 1
    import torch

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    from cusyncgen.cuda import sm90
    raw = a.out_dir / "sanitize-raw"
    raw.mkdir(parents=True, exist_ok=True)
    prebuild = None
    if "sm80" in tools:  # the SM80 modules selfcheck loads, compiled while the sm90 tools run
        with open(raw / "sm80-prebuild.log", "w") as f:
            prebuild = subprocess.Popen([sys.executable, "-m", "cusyncgen.commands.prebuild", "--workloads", "mlp",
                                         "--M", "1"], stdout=f, stderr=subprocess.STDOUT)
    lines = [f"# {command_line(PROG, argv)} on {device}, library of source hash {sm90.library().source_hash}",
             f"{'tool':10s} {'target':44s} {'status':8s} errors / hazards; variants"]
    print("\n".join(lines), flush=True)
    kinds = []
    passed = True
    for run in runs(sys.executable, a.model, a.M, tools, a.only, limits):
        if prebuild is not None and "selfcheck" in " ".join(run.command):
            prebuild.wait()
        extra = ["--report-api-errors", "no", "--leak-check", "no"] if run.tool == "memcheck" else []
        t0 = time.time()
        log = raw / run.log_name
        with open(log, "w") as f:
            # its own process group: a tool out of time is stopped with the program it runs
            proc = subprocess.Popen([cs, "--tool", run.tool, *extra, "--print-limit", "50", *run.command],
                                    stdout=f, stderr=subprocess.STDOUT, env={**os.environ, **dict(run.env)},
                                    start_new_session=True)
            try:
                rc = proc.wait(timeout=run.limit)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait()
                rc = 124
        text = log.read_text(errors="replace")
        line, ok = summarize(run, text, rc, time.time() - t0)
        passed &= ok
        lines.append(line)
        print(line, flush=True)
        if run.tool == "racecheck":
            found = race_kinds(text)
            if found:
                kinds += ["", f"# racecheck reports on {run.target}, by kind (docs/sm90.md says why they are expected)"]
                kinds += found
    text = "\n".join(lines + kinds) + "\n"
    (a.out_dir / f"sanitize-{slug(device)}.log").write_text(text)
    print("\n".join(kinds), flush=True)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
