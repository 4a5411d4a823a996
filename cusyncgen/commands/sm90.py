"""Build the Hopper library and print its path (no GPU needed: nvcc and the CUTLASS headers):

    python -m cusyncgen.commands.sm90 build [--jobs N] [-v]    # then carry $CUSYNCGEN_CACHE/sm90
    python -m cusyncgen.commands.sm90 path

libcusync_sm90.so is cached by the hash of its sources and options (cusyncgen.cuda.sm90.lib); beside
it go the compiled descriptors of the sm90 MLP's programs (cusyncgen.workloads.mlp_sm90
.write_descriptors), for a GPU machine without the compiler's parser (lark). With CUSYNC_SM90_LIB
set, its path is printed (nothing built, nothing written).
"""
from __future__ import annotations

import os
import sys

from cusyncgen.cuda.sm90 import lib
from cusyncgen.errors import CusyncError
from cusyncgen.workloads import mlp_sm90


def ensure_descriptors(folder) -> None:
    """The sm90 MLP's compiled descriptors beside the library, unless there already."""
    path = folder / mlp_sm90.DESCRIPTORS
    if path.is_file():
        return
    try:
        mlp_sm90.write_descriptors(path)
    except ImportError:
        pass  # no parser here: compiled_mlp needs it at run time then


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m cusyncgen.commands.sm90",
                                 description="build: build the library (what the cache lacks) and print its path; "
                                             "path: print the path it is or would be built at, building nothing")
    ap.add_argument("what", choices=["build", "path"])
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    try:
        path = lib.build(jobs=a.jobs, verbose=a.verbose, dry_run=a.what == "path")
        if a.what == "build" and not os.environ.get(lib.LIB_ENV):   # a prebuilt library's folder is not ours
            ensure_descriptors(path.parent)
        print(path)
    except CusyncError as e:
        print(e.render("python -m cusyncgen.commands.sm90"), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
