"""What every compiler command shares: option parsing that exits 2 on usage errors, ``-D``,
reading a program, writing the output, and turning every failure into a message and an exit code.

Exit status of every command (``cusyncgen``, ``check``, ``plan``, ``reorder``): 0 success, 1 an
error (a bad program, a file that cannot be read or written: the message only, on stderr), 2 a
usage error (an unknown option, a missing or malformed argument). cli.py, check.py, plan/cli.py
and reorder.py import this module; it imports none of them.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

from cusyncgen import files
from cusyncgen.errors import CusyncError, InvalidNameError, UnknownParamError

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2

EXIT_STATUS = ("exit status: 0 success; 1 error (a bad program, an unreadable input or an "
               "unwritable output: the message only, on stderr); 2 usage error (unknown option, "
               "missing or malformed argument)")

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class UsageError(Exception):
    """A malformed command line: the command prints its usage and this message, and exits 2."""


class _Exit(Exception):
    def __init__(self, status: int):
        super().__init__(status)
        self.status = status


class ArgumentParser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of exiting, with the exit codes in its epilog."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("epilog", EXIT_STATUS)
        super().__init__(*args, **kwargs)

    def error(self, message):
        raise UsageError(message)

    def exit(self, status=0, message=None):  # after -h and --version
        if message:
            sys.stderr.write(message)
        raise _Exit(status)


def param(text: str) -> tuple:
    """``-D NAME=VALUE`` (an argparse type): (name, int value)."""
    name, eq, value = text.partition("=")
    name = name.strip()
    if not eq or not _IDENT.match(name):
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got '{text}'")
    try:
        v = int(value.strip(), 0) if len(value) <= 64 else None
    except ValueError:
        v = None
    if v is None:
        raise argparse.ArgumentTypeError(f"-D {name}: '{_short(value)}' is not an integer")
    from cusyncgen.analysis.names import PARAM_LIMIT

    if abs(v) > PARAM_LIMIT:
        raise argparse.ArgumentTypeError(f"-D {name}: {v} does not fit in 64 bits")
    return name, v


def _short(text: str, n: int = 40) -> str:
    return text if len(text) <= n else text[:n] + "..."


def params_of(pairs) -> dict:
    return dict(pairs or [])


def namespace(text: str) -> str:
    """``--namespace NS`` (an argparse type): a C++ identifier that is not a keyword."""
    from cusyncgen.analysis.names import check_namespace

    try:
        return check_namespace(text)
    except InvalidNameError as e:
        raise argparse.ArgumentTypeError(e.message) from None


def read_source(path: str, keep_newlines: bool = False) -> tuple:
    """(text, file name for messages: the path as given) of FILE or ``-`` (stdin);
    ``keep_newlines``: line endings as they are (``\r\n`` stays), not translated to ``\n``."""
    if path == "-":
        if sys.stdin is None:  # started with stdin closed (``<&-``)
            raise CusyncError("cannot read <stdin>: it is closed")
        try:
            buf = getattr(sys.stdin, "buffer", None) if keep_newlines else None
            return (buf.read().decode("utf-8") if buf is not None else sys.stdin.read()), "<stdin>"
        except UnicodeDecodeError:
            raise CusyncError("cannot read <stdin>: not UTF-8 text") from None
        except (OSError, ValueError) as e:  # ValueError: a closed file object
            raise CusyncError(f"cannot read <stdin>: {getattr(e, 'strerror', None) or e}") from None
    if os.path.isdir(path):
        raise CusyncError(f"cannot read {path}: it is a directory")
    try:
        with open(path, encoding="utf-8", newline="" if keep_newlines else None) as f:
            return f.read(), path
    except OSError as e:
        raise CusyncError(f"cannot read {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise CusyncError(f"cannot read {path}: not UTF-8 text") from None
    except ValueError as e:  # an embedded NUL in the path
        raise CusyncError(f"cannot read {_short(repr(path))}: {e}") from None


def compile_file(path: str, params: dict, namespace=None):
    """Compile FILE (or ``-``): messages name the path as given, the header its base name."""
    import cusyncgen

    text, name = read_source(path)
    ns = namespace
    if ns is None and path == "-":
        ns = "stdin"
    try:
        return cusyncgen.compile(text, params=params, name=name, namespace=ns)
    except UnknownParamError as e:  # said in the command line's words
        raise UnknownParamError(e.param, e.declared, given_as="-D") from None


def warn(compiled, prog: str) -> None:
    """Print the compiler's warnings on stderr."""
    for w in getattr(compiled, "warnings", ()):
        print(w.render(prog), file=sys.stderr)


def write_output(text, path, prog: str) -> None:
    """Write ``text`` (a str or an iterable of str) to ``path``, or to stdout when it is None or
    ``-``; a write that fails (a full disk, ``> /dev/full``) is a CusyncError, and leaves the file
    that was at ``path`` as it was (files.write_files)."""
    chunks = (text,) if isinstance(text, str) else text
    if path and path != "-":
        files.write_file(path, chunks)  # a temporary file renamed: a failed write keeps the old file
        return
    if sys.stdout is None:  # started with stdout closed
        raise CusyncError("cannot write to stdout: it is closed")
    try:
        for c in chunks:
            sys.stdout.write(c)
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
    except OSError as e:
        _silence_stdout()
        raise CusyncError(f"cannot write to stdout: {e.strerror or e}") from None


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    except OSError:
        pass


def run(prog: str, parser: argparse.ArgumentParser, body, argv) -> int:
    """Parse ``argv`` and run ``body(args)``; every failure becomes a message and an exit code
    (see EXIT_STATUS), never a traceback."""
    try:
        args = parser.parse_args(argv)
        rc = body(args)
    except UsageError as e:
        parser.print_usage(sys.stderr)
        print(f"{prog}: error: {e}", file=sys.stderr)
        rc = EXIT_USAGE
    except _Exit as e:
        rc = e.status
    except CusyncError as e:
        print(e.render(prog), file=sys.stderr)
        rc = EXIT_ERROR
    except RecursionError:
        print(f"{prog}: error: the program nests too deeply to analyze", file=sys.stderr)
        rc = EXIT_ERROR
    except MemoryError:
        print(f"{prog}: error: out of memory", file=sys.stderr)
        rc = EXIT_ERROR
    try:
        write_output("", None, prog)  # flush: a full stdout is an error here, not at exit
    except CusyncError as e:
        if not rc:  # not reported yet
            print(e.render(prog), file=sys.stderr)
            rc = EXIT_ERROR
    return int(rc or 0)


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
