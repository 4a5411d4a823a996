"""``cusyncgen [options] FILE.dep``: compile tile dependencies into a CUDA policy header.

Subcommands by first word: ``check`` (check.py), ``plan``, ``reorder``, ``bench``, ``tune``.
Exit status: 0 success, 1 user error (the message only, on stderr), 2 usage error.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from pathlib import Path

import cusyncgen
from cusyncgen.errors import CusyncError

SUBCOMMANDS = {
    "plan": ("cusyncgen.plan.cli", "main"),
    "reorder": ("cusyncgen.reorder", "main"),
    "bench": ("cusyncgen.cuda.bench", "main"),
    "tune": ("cusyncgen.cuda.tune", "main"),
}


class _Usage(Exception):
    pass


def _param(text: str) -> tuple:
    name, eq, value = text.partition("=")
    if not eq or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got '{text}'")
    try:
        return name, int(value, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"-D {name}: '{value}' is not an integer") from None


def max_edges_arg(text: str) -> int:
    try:
        n = int(text.replace("_", ""))
    except ValueError:
        n = 0
    if n <= 0:
        raise argparse.ArgumentTypeError(f"--max-edges: '{text}' is not a positive integer")
    return n


def add_max_edges(p: argparse.ArgumentParser) -> None:
    """The size guard's flag (limits.py), for every command that enumerates tiles."""
    from cusyncgen import limits

    p.add_argument("--max-edges", type=max_edges_arg, metavar="N", default=None,
                   help="refuse programs with more than N (consumer tile, producer tile) edges or "
                        f"a grid of more than N tiles (default {limits.DEFAULT_MAX_EDGES:_})")


def params_of(pairs) -> dict:
    return dict(pairs or [])


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
                flags.append(f"-I{inc}")
                break
    return flags


def read_source(path: str) -> tuple:
    """(text, file name for messages) of FILE or ``-`` (stdin)."""
    if path == "-":
        return sys.stdin.read(), "<stdin>"
    try:
        return Path(path).read_text(), Path(path).name
    except OSError as e:
        raise CusyncError(f"cannot read {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise CusyncError(f"cannot read {path}: not UTF-8 text") from None


def compile_file(path: str, params: dict, namespace=None) -> "cusyncgen.Compiled":
    text, name = read_source(path)
    ns = namespace
    if ns is None and path == "-":
        ns = "stdin"
    return cusyncgen.compile(text, params=params, name=name, namespace=ns)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cusyncgen",
        description="Compile tile dependencies (.dep) into CuSync synchronization policies. "
                    "Subcommands: check, plan, reorder, bench, tune (cusyncgen SUBCOMMAND -h).")
    p.add_argument("file", nargs="?", metavar="FILE.dep", help="the .dep program ('-' = stdin)")
    p.add_argument("-o", dest="output", metavar="OUT", help="output file (default: stdout)")
    p.add_argument("-D", dest="params", action="append", type=_param, metavar="NAME=VALUE",
                   help="set a Param (repeatable)")
    p.add_argument("--emit", choices=("header", "deps", "policies", "order"), default="header",
                   help="what to print (default: header)")
    p.add_argument("--namespace", help="C++ namespace of the header (default: the file stem)")
    add_max_edges(p)
    p.add_argument("--includes", action="store_true",
                   help="print the -I flags to compile code that includes the header")
    p.add_argument("--version", action="version", version=f"cusyncgen {cusyncgen.__version__}")
    return p


def _subcommand(name: str, argv: list) -> int:
    module, func = SUBCOMMANDS[name]
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and (module == e.name or module.startswith(e.name + ".")):
            print(f"cusyncgen: error: the '{name}' subcommand is not available in this "
                  f"installation ({module} is missing)", file=sys.stderr)
            return 1
        raise
    fn = getattr(mod, func, None)
    if fn is None:
        print(f"cusyncgen: error: {module} has no {func}()", file=sys.stderr)
        return 1
    rc = fn(argv)
    return int(rc or 0)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "check":
        from cusyncgen.check import main as check_main
        return check_main(argv[1:])
    if argv and argv[0] in SUBCOMMANDS:
        return _subcommand(argv[0], argv[1:])
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    if args.includes:
        print(" ".join(include_flags()))
        return 0
    if args.file is None:
        parser.print_usage(sys.stderr)
        print("cusyncgen: error: FILE.dep is required ('-' reads stdin)", file=sys.stderr)
        return 2
    if args.namespace is not None and not args.namespace.isidentifier():
        parser.print_usage(sys.stderr)
        print(f"cusyncgen: error: --namespace '{args.namespace}' is not a C++ identifier",
              file=sys.stderr)
        return 2
    try:
        compiled = compile_file(args.file, params_of(args.params), args.namespace)
        from cusyncgen import emit

        if args.emit == "header":
            chunks = [compiled.header]
        else:  # streamed; the size guard refuses before any output
            chunks = emit.JSON_VIEWS[args.emit](compiled.program, args.max_edges)
        if args.output and args.output != "-":
            try:
                with open(args.output, "w") as f:
                    for text in chunks:
                        f.write(text)
            except OSError as e:
                print(f"cusyncgen: error: cannot write {args.output}: {e.strerror or e}",
                      file=sys.stderr)
                return 1
        else:
            for text in chunks:
                sys.stdout.write(text)
    except CusyncError as e:
        print(str(e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
