"""cusyncgen: compiler from tile dependencies (.dep, CuSync paper's DSL) to CUDA sync policies."""

from __future__ import annotations

from pathlib import Path

__version__ = "0.1.0"


def data_path(name: str) -> Path:
    """The directory ``grammar``, ``templates`` or ``runtime_cuda``: in the repository (editable
    install) or under ``cusyncgen/_data/`` (wheel, see pyproject's force-include)."""
    here = Path(__file__).resolve().parent
    packaged = here / "_data" / name
    if packaged.is_dir():
        return packaged
    return here.parent / name


class Compiled:
    """The result of compiling one program: ``program`` (ProgramIR), ``policies``, ``orders`` and
    the ``header`` text (rendered on first use)."""

    def __init__(self, program, namespace: "str | None" = None):
        self.program = program
        self.namespace = namespace or program.name
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
    Params' defaults (like ``-D``); ``name`` is the file name the header and messages mention."""
    from cusyncgen.analysis import analyze
    from cusyncgen.parser import parse

    if hasattr(source, "to_syntax"):  # the embedded Python DSL
        tree = source.to_syntax(name)
        namespace = namespace or namespace_for(source.name)
    else:
        if isinstance(source, Path) or (isinstance(source, str) and "\n" not in source
                                        and source.endswith(".dep")):
            from cusyncgen.errors import CusyncError

            path = Path(source)
            try:
                text = path.read_text()
            except (OSError, UnicodeDecodeError) as e:
                raise CusyncError(f"cannot read {path}: {getattr(e, 'strerror', None) or e}") \
                    from None
            name = name or path.name
        else:
            text = str(source)
            name = name or "<string>"
        try:
            tree = parse(text, name)
        except RecursionError:
            from cusyncgen.errors import ParseError

            raise ParseError(f"{name}: expressions nested too deeply") from None
    try:
        program = analyze(tree, params, namespace or namespace_for(tree.file))
    except RecursionError:
        from cusyncgen.errors import CusyncError

        raise CusyncError(f"{tree.file}: expressions nested too deeply") from None
    return Compiled(program, namespace)
