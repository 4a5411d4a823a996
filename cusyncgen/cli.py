"""``cusyncgen [options] FILE.dep``: compile tile dependencies into a CUDA policy header.

Subcommands by first word: ``check`` (check.py), ``plan``, ``reorder``, ``bench``, ``tune``,
``results``.
Exit status of every command: 0 success, 1 error (the message only, on stderr), 2 usage error
(cliutil.py).
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import importlib.util
import sys
from pathlib import Path

import cusyncgen
from cusyncgen import cliutil, files
from cusyncgen.errors import CusyncError

SUBCOMMANDS = {
    "plan": ("cusyncgen.plan.cli", "main"),
    "reorder": ("cusyncgen.reorder", "main"),
    "bench": ("cusyncgen.commands.bench", "main"),
    "tune": ("cusyncgen.commands.tune", "main"),
    "results": ("cusyncgen.results", "command"),
}


def include_flags() -> list:
    """``-I`` flags for code that includes a generated header: the runtime, and CUTLASS/CuTe if
    nvidia-cutlass is installed (found without importing it)."""
    flags = [f"-I{cusyncgen.data_path('runtime_cuda')}"]
    try:
        spec = importlib.util.find_spec("cutlass_library")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            inc = Path(loc) / "source" / "include"
            if inc.is_dir():
                # CUTLASS/CuTe, and its tools' util headers (packed strides, as its examples use)
                flags += [f"-I{d}" for d in (inc, inc.parent / "tools" / "util" / "include") if d.is_dir()]
                break
    return flags


def _parser() -> argparse.ArgumentParser:
    p = cliutil.ArgumentParser(
        prog="cusyncgen",
        description="Compile tile dependencies (.dep) into CuSync synchronization policies. "
                    "Subcommands: check, plan, reorder, bench, tune, results (cusyncgen SUBCOMMAND -h).")
    p.add_argument("file", nargs="?", metavar="FILE.dep", help="the .dep program ('-' = stdin)")
    p.add_argument("-o", dest="output", metavar="OUT", help="output file (default: stdout)")
    p.add_argument("-D", dest="params", action="append", type=cliutil.param, metavar="NAME=VALUE",
                   help="set a Param (repeatable)")
    p.add_argument("--emit", choices=("header", "deps", "policies", "order"), default="header",
                   help="what to print (default: header)")
    p.add_argument("--namespace", type=cliutil.namespace,
                   help="C++ namespace of the header (default: the file stem)")
    cliutil.add_max_edges(p)
    p.add_argument("--includes", action="store_true",
                   help="print the -I flags to compile code that includes the header")
    p.add_argument("--examples", action="store_true",
                   help="print the directory of the example .dep programs (inside the package after "
                        "a non-editable install)")
    p.add_argument("--version", action="version", version=f"cusyncgen {cusyncgen.__version__}")
    return p


def _subcommand(name: str, argv: list) -> int:
    module, func = SUBCOMMANDS[name]
    prog = f"cusyncgen {name}"
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and (module == e.name or module.startswith(e.name + ".")):
            print(f"{prog}: error: the '{name}' subcommand is not available in this "
                  f"installation ({module} is missing)", file=sys.stderr)
            return cliutil.EXIT_ERROR
        raise
    fn = getattr(mod, func, None)
    if fn is None:
        print(f"{prog}: error: {module} has no {func}()", file=sys.stderr)
        return cliutil.EXIT_ERROR
    try:
        rc = fn(argv)
    except CusyncError as e:  # a subcommand that lets one through
        print(e.render(prog), file=sys.stderr)
        return cliutil.EXIT_ERROR
    return int(rc or 0)


def _header(args) -> int:
    if args.includes:
        print(" ".join(include_flags()))
        return cliutil.EXIT_OK
    if args.examples:
        print(cusyncgen.data_path("examples"))
        return cliutil.EXIT_OK
    if args.file is None:
        raise cliutil.UsageError("FILE.dep is required ('-' reads stdin)")
    if args.output not in (None, "-"):
        files.refuse_overwrite([args.output], [args.file])
    compiled = cliutil.compile_file(args.file, cliutil.params_of(args.params), args.namespace)
    cliutil.warn(compiled, "cusyncgen")
    from cusyncgen import emit

    if args.emit == "header":
        out = compiled.header
    else:  # streamed; the size guard refuses before the first chunk, so before any output
        chunks = iter(emit.JSON_VIEWS[args.emit](compiled.program, args.max_edges))
        out = itertools.chain([next(chunks, "")], chunks)
    cliutil.write_output(out, args.output, "cusyncgen")
    return cliutil.EXIT_OK


def main(argv=None) -> int:
    """The exit status: 0 success, 1 error, 2 usage error (cliutil.EXIT_STATUS)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "check":
        from cusyncgen.check import main as check_main
        return check_main(argv[1:])
    if argv and argv[0] in SUBCOMMANDS:
        return _subcommand(argv[0], argv[1:])
    return cliutil.run("cusyncgen", _parser(), _header, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
