"""cusyncgen: compiler from tile dependencies (.dep, CuSync paper's DSL) to CUDA sync policies."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

__version__ = "0.1.0"

from cusyncgen.paths import data_path  # noqa: E402,F401  (the package API)


class Compiled:
    """The result of compiling one program: ``program`` (ProgramIR), ``policies``, ``orders``,
    ``warnings`` (CusyncWarning: legal but probably not meant, e.g. a ForAll over a dim its tile
    does not use) and the ``header`` text (rendered on first use)."""

    def __init__(self, program, namespace: "str | None" = None, warnings: tuple = ()):
        self.program = program
        self.namespace = namespace or program.name
        self.warnings = tuple(warnings)
        self._header = None

    @property
    def policies(self):
        return self.program.policies

    @property
    def orders(self):
        return self.program.orders

    @property
    def header(self) -> str:
        if self._header is None:
            from cusyncgen.emit import header

            self._header = header(self.program, self.namespace)
        return self._header


#: Python frames the analysis may use: expressions nest at most syntax.MAX_DEPTH levels, each a
#: few frames deep
RECURSION_LIMIT = 20_000


@contextlib.contextmanager
def _deep_recursion():
    old = sys.getrecursionlimit()
    if old < RECURSION_LIMIT:
        sys.setrecursionlimit(RECURSION_LIMIT)
    try:
        yield
    finally:
        if old < RECURSION_LIMIT:
            sys.setrecursionlimit(old)


def namespace_for(file: str) -> str:
    """A C++ namespace from a file name: its stem with non-identifier characters as '_'."""
    import re

    stem = Path(file).name
    for suffix in (".dep",):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
    ns = re.sub(r"[^A-Za-z0-9_]", "_", stem).strip("_") or "cusync_program"
    if ns[0].isdigit():
        ns = "_" + ns
    from cusyncgen.analysis import CXX_KEYWORDS

    return ns + "_dep" if ns in CXX_KEYWORDS else ns


def compile(source, params: "dict | None" = None, name: "str | None" = None,
            namespace: "str | None" = None) -> Compiled:  # noqa: A001 - the natural name
    """Compile a .dep program: ``source`` is a path (``pathlib.Path`` or a string naming an
    existing ``*.dep`` file), .dep text, or a ``cusyncgen.dsl.Program``. ``params`` override the
    Params' defaults (like ``-D``; ints only); ``name`` is the file name messages mention (default:
    the path as given; the header mentions its base name). Every problem is a CusyncError."""
    from cusyncgen import analysis
    from cusyncgen.errors import CusyncError, ParseError
    from cusyncgen.parser import parse

    if name is not None and not isinstance(name, str):
        raise CusyncError(f"compile(): name must be a str, not {type(name).__name__}")
    with _deep_recursion():
        if hasattr(source, "to_syntax"):  # the embedded Python DSL
            tree = source.to_syntax(name)
            namespace = namespace if namespace is not None else namespace_for(source.name)
        else:
            if isinstance(source, Path) or (isinstance(source, str) and "\n" not in source
                                            and source.endswith(".dep")):
                path = Path(source)
                if path.is_dir():
                    raise CusyncError(f"cannot read {source}: it is a directory")
                try:
                    text = path.read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError, ValueError) as e:
                    raise CusyncError(f"cannot read {source}: "
                                      f"{getattr(e, 'strerror', None) or e}") from None
                name = name or str(source)
            elif isinstance(source, str):
                text = source
                name = name or "<string>"
            else:
                raise CusyncError(f"compile() takes a path, .dep text or a cusyncgen.dsl.Program, "
                                  f"not {type(source).__name__}")
            try:
                tree = parse(text, name)
            except RecursionError:  # pragma: no cover - parsing does not recurse
                raise ParseError(f"{name}: expressions nested too deeply") from None
        try:
            result = analysis.run(tree, params, namespace if namespace is not None
                                  else namespace_for(tree.file))
        except RecursionError:  # pragma: no cover - expressions are limited to syntax.MAX_DEPTH
            raise CusyncError(f"{tree.file}: expressions nested too deeply") from None
    return Compiled(result.program, namespace, result.warnings)
