"""Build and load libcusync_sm90.so (runtime_cuda/sm90/: the CUTLASS 3 based synchronized GeMM).

Building needs nvcc and the CUTLASS headers of the nvidia-cutlass wheel, not a GPU: api.cu, then
config.cu once per tile configuration, stock.cu once per stock reference and swap.cu once per
swapped GeMM of configs.def, and fmha.cu twice (CUTLASS's Hopper FMHA, from the wheel's examples/88_hopper_fmha: its stock kernels,
and the synchronized ones) (each its own object,
built in parallel), linked with the static cudart. The library is cached under
``$CUSYNCGEN_CACHE`` (or ``~/.cache/cusyncgen``) by the hash of its sources and options, so it can
be built here and carried to the GPU machine (``python -m cusyncgen.commands.sm90 build``).

Loading checks what the library was built from: the layout of every struct of sm90_api.h that it
exports (abi.h) against the ctypes mirrors (desc.py), naming the field that differs, and the hash
of its sources (source_hash, compiled into api.cu) against this checkout's. ``CUSYNC_SM90_LIB``
names a prebuilt library; one built from other sources is refused with a message, unless
``CUSYNC_SM90_LIB_UNCHECKED=1`` (its struct layouts are checked all the same).
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path

from cusyncgen.cuda import abi
from cusyncgen.cuda.sm90.desc import STRUCTS, FmhaSync, Gemm
from cusyncgen.cuda.sm90.errors import Sm90Error
from cusyncgen.cuda.sm90.tiles import STOCK_TILES, SWAP_TILES, TILES, source_dir

ARCH_FLAGS = ["-gencode=arch=compute_90a,code=sm_90a", "-std=c++17", "-O3", "-DNDEBUG", "--expt-relaxed-constexpr",
              "-Xcompiler", "-fPIC"]
LIB_NAME = "libcusync_sm90.so"
LIB_ENV, UNCHECKED_ENV = "CUSYNC_SM90_LIB", "CUSYNC_SM90_LIB_UNCHECKED"
_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)
_SOURCE_SUFFIXES = (".h", ".cuh", ".cu", ".def")


def cutlass_dirs() -> list[Path]:
    import importlib.util

    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or spec.origin is None:
        env = os.environ.get("CUTLASS_DIR")
        if env:
            return [Path(env) / "include", Path(env) / "tools" / "util" / "include",
                    Path(env) / "examples" / "88_hopper_fmha"]
        raise Sm90Error("the CUTLASS headers were not found: install nvidia-cutlass or set CUTLASS_DIR")
    src = Path(spec.origin).parent / "source"
    return [src / "include", src / "tools" / "util" / "include", src / "examples" / "88_hopper_fmha"]


def cache_root() -> Path:
    root = Path(os.environ.get("CUSYNCGEN_CACHE") or Path.home() / ".cache" / "cusyncgen") / "sm90"
    root.mkdir(parents=True, exist_ok=True)
    return root


@lru_cache(maxsize=None)
def _nvcc_version(nvcc: str) -> str:
    if shutil.which(nvcc) is None:
        raise Sm90Error(f"nvcc was not found on PATH (or set {LIB_ENV} to a prebuilt library)")
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False)
    return out.stdout.strip().splitlines()[-1] if out.stdout else "unknown"


def _digest(parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else str(p).encode())
        h.update(b"\0")
    return h.hexdigest()[:20]


def _closure(files) -> list[Path]:
    """`files` and every file of runtime_cuda/ they include, transitively (relative to the including
    file, then to runtime_cuda/), in a stable order."""
    root = source_dir().parent.resolve()
    todo = [Path(f).resolve() for f in files]
    seen: set = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for inc in _INCLUDE.findall(path.read_text()):
            for cand in (path.parent / inc, root / inc):
                cand = cand.resolve()
                if cand.is_file() and root in cand.parents:
                    todo.append(cand)
                    break
    return sorted(seen, key=lambda p: str(p.relative_to(root)))


def _files_digest(files) -> str:
    root = source_dir().parent.resolve()
    return _digest([str(p.relative_to(root)).encode() + b"\0" + p.read_bytes() for p in files])


def source_files() -> list[Path]:
    """Every source the library is built from: runtime_cuda/sm90/ and what it includes of runtime_cuda/."""
    src = source_dir()
    return _closure(p for p in sorted(src.iterdir()) if p.suffix in _SOURCE_SUFFIXES)


def source_hash() -> str:
    """The hash of the library's sources (not of the compiler or its options): compiled into api.cu,
    and what a loaded library must have been built from."""
    return _files_digest(source_files())


def units() -> list[tuple[str, Path, list[str]]]:
    """(object name, source, its -D flags) of every translation unit: api.cu, config.cu per tile
    configuration, stock.cu per stock reference, swap.cu per swapped GeMM (configs.def), fmha.cu twice (the prompt's attention on
    CUTLASS's Hopper FMHA: stock, and synchronized)."""
    src = source_dir()
    return ([("api", src / "api.cu", [f"-DCUSYNC_SM90_SOURCE_HASH={source_hash()}"])]
            + [(f"config_{t.name}", src / "config.cu", t.defines) for t in TILES]
            + [(f"stock_{s.name}", src / "stock.cu", s.defines) for s in STOCK_TILES]
            + [(f"swap_{s.name}", src / "swap.cu", s.defines) for s in SWAP_TILES]
            + [("fmha", src / "fmha.cu", ["-DCUSYNC_FMHA_SYNC=0"]),
               ("fmha_sync", src / "fmha.cu", ["-DCUSYNC_FMHA_SYNC=1"])])


def build(nvcc: str = "nvcc", jobs: int | None = None, defines: tuple = (), verbose: bool = False,
          dry_run: bool = False) -> Path:
    """The path of libcusync_sm90.so (CUSYNC_SM90_LIB, or the cache's), compiling what the cache
    lacks, one line on stderr as each translation unit is done. dry_run: the path only, whether or
    not it is built."""
    env = os.environ.get(LIB_ENV)
    if env:
        if not Path(env).is_file():
            raise Sm90Error(f"{LIB_ENV}={env} does not exist")
        return Path(env)
    src = source_dir()
    incs = cutlass_dirs()
    flags = ARCH_FLAGS + [f"-D{d}" for d in defines] + [f"-I{d}" for d in incs] + [f"-I{src}", f"-I{src.parent}"]
    base = [_nvcc_version(nvcc), " ".join(ARCH_FLAGS), " ".join(defines), str(incs[0].parent)]
    todo = units()
    out = cache_root() / f"lib-{_digest(base + [source_hash()])}" / LIB_NAME
    if dry_run or out.is_file():
        return out
    objdir = cache_root() / "obj"
    objdir.mkdir(parents=True, exist_ok=True)

    def obj_of(unit) -> Path:
        name, path, unit_defines = unit
        return objdir / f"{name}-{_digest(base + unit_defines + [_files_digest(_closure([path]))])}.o"

    left = sum(not obj_of(u).is_file() for u in todo)
    done = iter(range(1, left + 1))  # next() under the GIL: each finished unit its own number
    workers = jobs or os.cpu_count() or 1
    if left:
        print(f"building {LIB_NAME}: {left} of {len(todo)} translation units to compile, {workers} at a time "
              "(minutes each)", file=sys.stderr, flush=True)

    def compile_one(unit) -> Path:
        name, path, unit_defines = unit
        obj = obj_of(unit)
        if obj.is_file():
            return obj
        tmp = obj.with_suffix(f".{os.getpid()}.tmp.o")
        cmd = ["nice", "-n", "10", nvcc, *flags, *unit_defines, "-Xptxas=-warn-spills", "-c", str(path), "-o", str(tmp)]
        if verbose:
            print(" ".join(cmd), file=sys.stderr, flush=True)
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise Sm90Error(f"nvcc failed on {path.name} ({name}):\n{proc.stderr[-4000:]}")
        if verbose and proc.stderr.strip():
            print(proc.stderr, file=sys.stderr, flush=True)
        os.replace(tmp, obj)
        print(f"[{next(done)}/{left}] {name}", file=sys.stderr, flush=True)
        return obj

    with ThreadPoolExecutor(max_workers=workers) as pool:
        objs = list(pool.map(compile_one, todo))
    print(f"linking {LIB_NAME}", file=sys.stderr, flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".{os.getpid()}.tmp")
    cmd = [nvcc, "-shared", "-cudart", "static", "-gencode=arch=compute_90a,code=sm_90a", "-o", str(tmp),
           *map(str, objs)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise Sm90Error(f"linking {LIB_NAME} failed:\n{proc.stderr[-4000:]}")
    os.replace(tmp, out)
    return out


def exported_layouts(dll) -> dict[str, list[int]]:
    """{C struct name: [sizeof, offsetof each field]} as the library exports them (abi.h)."""
    out = {}
    for name in STRUCTS:
        try:
            n = ctypes.c_int.in_dll(dll, f"cusync_abi_{name}_len").value
            out[name] = list((ctypes.c_longlong * n).in_dll(dll, f"cusync_abi_{name}"))
        except ValueError:
            raise Sm90Error(f"the library exports no layout of {name} (cusync_abi_{name}): built from older sources; "
                            "rebuild it") from None
    return out


def check_layouts(layouts: dict[str, list[int]]) -> None:
    """Compare the exported layouts with the ctypes mirrors (abi.compare: the field that differs)."""
    for name, struct in STRUCTS.items():
        abi.compare(struct, layouts[name], name)


class Library:
    """The loaded library: its tile configs (configs.def's, as it was built), its stock references and
    swapped GeMMs,
    its functions with their ctypes signatures; its struct layouts and sources checked."""

    def __init__(self, path: Path, check_sources: bool = True):
        try:
            self.dll = ctypes.CDLL(str(path))
        except OSError as e:
            raise Sm90Error(f"cannot load {path}: {e}") from None
        d = self.dll
        try:
            d.cusync_sm90_source_hash.restype = ctypes.c_char_p
        except AttributeError:
            raise Sm90Error(f"{path} has no cusync_sm90_source_hash: built from older sources; rebuild it") from None
        self.path = Path(path)
        self.source_hash = d.cusync_sm90_source_hash().decode()
        if check_sources:
            self.check_sources()
        try:
            check_layouts(exported_layouts(d))
        except abi.AbiError as e:
            raise Sm90Error(f"{path}: {e.message} (the library and cusyncgen/cuda/sm90/desc.py disagree)") from None
        d.cusync_sm90_configs.restype = ctypes.c_char_p
        d.cusync_sm90_error_string.restype = ctypes.c_char_p
        d.cusync_sm90_error_string.argtypes = [ctypes.c_int]
        d.cusync_sm90_plan_create.argtypes = [ctypes.c_char_p, ctypes.POINTER(Gemm), ctypes.c_int, ctypes.c_void_p,
                                              ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_void_p,
                                              ctypes.POINTER(ctypes.c_void_p)]
        d.cusync_sm90_plan_launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        d.cusync_sm90_plan_grid.argtypes = [ctypes.c_void_p]
        d.cusync_sm90_plan_destroy.argtypes = [ctypes.c_void_p]
        d.cusync_sm90_stock_configs.restype = ctypes.c_char_p
        d.cusync_sm90_stock_gemm.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                             ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                             ctypes.c_int, ctypes.c_void_p]
        d.cusync_sm90_fmha.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 6 + [ctypes.c_void_p]
        d.cusync_sm90_fmha_heads.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int] * 6 + [ctypes.c_void_p]
        d.cusync_sm90_fmha_sync.argtypes = ([ctypes.c_void_p] * 3 + [ctypes.c_int] * 6
                                            + [ctypes.POINTER(FmhaSync), ctypes.c_void_p])
        self.configs = tuple(c for c in d.cusync_sm90_configs().decode().split(",") if c)
        self.stock_configs = tuple(c for c in d.cusync_sm90_stock_configs().decode().split(",") if c)
        d.cusync_sm90_swap_configs.restype = ctypes.c_char_p
        d.cusync_sm90_swap_gemm.argtypes = ([ctypes.c_char_p, ctypes.c_int] + [ctypes.c_void_p] * 3
                                            + [ctypes.c_int] * 5 + [ctypes.c_void_p])
        d.cusync_sm90_swap_mlp.argtypes = ([ctypes.c_char_p, ctypes.c_int] + [ctypes.c_void_p] * 5
                                           + [ctypes.c_int] * 6 + [ctypes.c_void_p, ctypes.c_longlong, ctypes.c_void_p])
        self.swap_configs = tuple(c for c in d.cusync_sm90_swap_configs().decode().split(",") if c)

    def check_sources(self) -> None:
        """Refuse a library built from other sources than this checkout's, unless
        CUSYNC_SM90_LIB_UNCHECKED=1."""
        want = source_hash()
        if self.source_hash == want or os.environ.get(UNCHECKED_ENV) == "1":
            return
        raise Sm90Error(f"{self.path} was built from other sources than runtime_cuda/sm90/ holds (its source hash "
                        f"{self.source_hash}, the sources' {want}): rebuild it (python -m cusyncgen.commands.sm90 "
                        f"build), or set {UNCHECKED_ENV}=1 to load it anyway")

    def check(self, code: int, what: str):
        if code != 0:
            raise Sm90Error(f"{what}: {self.dll.cusync_sm90_error_string(code).decode()} (code {code})")


@lru_cache(maxsize=None)
def library_path() -> Path:
    return build()


@lru_cache(maxsize=None)
def library() -> Library:
    return Library(library_path())


def digest() -> str:
    """What results measured with the library are keyed by (a tune cache): its cache folder
    (lib-<hash of its sources and options>), or, for CUSYNC_SM90_LIB, the file's name and size."""
    p = library_path()
    return p.parent.name if p.parent.name.startswith("lib-") else f"{p.name}:{p.stat().st_size}"


