"""Compile CUDA sources that include the runtime and generated headers into cubins, once.

A cubin is cached on disk under a key made of everything that can change it: the source, the
nvcc options and version, and every header of runtime_cuda/. CuPy is not needed here, so
modules can be built ahead of time on a machine without a GPU (set CUSYNCGEN_CACHE to a folder
and carry it to the GPU machine).
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from cusyncgen.errors import CusyncError

DEFAULT_ARCH = "sm_90a"


class BuildError(CusyncError):
    """nvcc is missing or rejected a generated module."""

    def __init__(self, message: str):
        super().__init__(message, None)


def runtime_include_dir() -> Path:
    """runtime_cuda/ in a checkout, or its copy inside an installed wheel (cusyncgen.data_path)."""
    from cusyncgen.paths import data_path
    candidate = data_path("runtime_cuda")
    if (candidate / "cusync" / "cusync.h").is_file():
        return candidate
    raise BuildError(f"cannot find cusync/cusync.h under {candidate} (the package's runtime headers)")


def cutlass_include_dir() -> Path | None:
    """The CUTLASS/CuTe headers that the nvidia-cutlass wheel ships, found without importing it."""
    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or spec.origin is None:
        return None
    inc = Path(spec.origin).parent / "source" / "include"
    return inc if (inc / "cute").is_dir() else None


def cache_dir() -> Path:
    root = os.environ.get("CUSYNCGEN_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "cusyncgen")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


@lru_cache(maxsize=None)
def nvcc_version(nvcc: str = "nvcc") -> str:
    if shutil.which(nvcc) is None:
        raise BuildError("nvcc was not found on PATH; install the CUDA toolkit or use a prebuilt cache")
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False)
    return out.stdout.strip().splitlines()[-1] if out.stdout else "unknown"


_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]((?:cusync|kernels)/[^>"]+)[>"]', re.M)


def _headers_digest(root: Path, text: str) -> str:
    """The runtime headers (always) and every runtime_cuda header the source or they include."""
    h = hashlib.sha256()
    todo = [str(p.relative_to(root)) for p in sorted((root / "cusync").glob("*.h"))] + _INCLUDE.findall(text)
    seen = set()
    while todo:
        rel = todo.pop()
        path = root / rel
        if rel in seen or not path.is_file():
            continue
        seen.add(rel)
        body = path.read_bytes()
        h.update(rel.encode())
        h.update(body)
        todo += _INCLUDE.findall(body.decode(errors="replace"))
    return h.hexdigest()


def runtime_digest() -> str:
    """A hash of every runtime and kernel header: what measured results depend on besides the
    generated sources (the tuner keys its cache of measurements on it)."""
    root = runtime_include_dir()
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".h", ".cuh")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


@dataclass(frozen=True)
class Source:
    """One translation unit: its text and the extra headers (name -> text) it includes."""

    name: str
    text: str
    headers: tuple[tuple[str, str], ...] = ()
    defines: tuple[str, ...] = ()


def _options(arch: str, defines: tuple[str, ...], include_dirs: list[Path]) -> list[str]:
    number = arch.removeprefix("sm_")
    opts = ["-std=c++17", "-O3", "-cubin", f"-gencode=arch=compute_{number},code=sm_{number}",
            "--expt-relaxed-constexpr", "-Xptxas=-warn-spills"]
    opts += [f"-D{d}" for d in defines]
    opts += [f"-I{d}" for d in include_dirs]
    return opts


def build(source: Source, arch: str = DEFAULT_ARCH, nvcc: str = "nvcc") -> Path:
    """Return the path of the cubin for `source`, compiling it only if the cache lacks it."""
    runtime = runtime_include_dir()
    cutlass = cutlass_include_dir()
    key = hashlib.sha256()
    for part in (source.text, repr(source.headers), repr(source.defines), arch, nvcc_version(nvcc),
                 _headers_digest(runtime, source.text), str(cutlass is not None)):
        key.update(part.encode())
    digest = key.hexdigest()[:24]
    out = cache_dir() / f"{source.name}-{digest}.cubin"
    if out.is_file():
        return out
    work = cache_dir() / f"src-{digest}"
    work.mkdir(exist_ok=True)
    for hname, htext in source.headers:
        (work / hname).write_text(htext)
    src = work / f"{source.name}.cu"
    src.write_text(source.text)
    include_dirs = [work, runtime] + ([cutlass] if cutlass else [])
    tmp = out.with_suffix(f".{os.getpid()}.tmp")
    cmd = [nvcc, *_options(arch, source.defines, include_dirs), "-o", str(tmp), str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BuildError(f"nvcc failed on {src}:\n{proc.stderr[-4000:]}")
    os.replace(tmp, out)
    return out


def build_many(sources: list[Source], arch: str = DEFAULT_ARCH, jobs: int | None = None) -> list[Path]:
    """Build several modules in parallel (nvcc runs as separate processes)."""
    jobs = jobs or os.cpu_count() or 1
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(lambda s: build(s, arch), sources))
