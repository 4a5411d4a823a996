"""User-facing errors of every stage: one base class, one subclass per kind of failure.

``str(err)`` is ``file.dep:7:14: error: <message>`` followed by the source line and a caret line
(``^~~~`` under the offending span), so a CLI can print it verbatim.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from cusyncgen.syntax import Span


def render(kind: str, message: str, span: "Span | None", prog: str = "cusyncgen") -> str:
    """``file:line:col: <kind>: message`` with the source line and a caret under the span, or
    ``<prog>: <kind>: message`` when there is no span (a command-line or I/O problem)."""
    if span is None:
        return f"{prog}: {kind}: {message}"
    head = f"{span.file}:{span.line}:{span.col}: {kind}: {message}"
    text = span.line_text
    if text is None:
        return head
    text = text.expandtabs(1).rstrip("\n")
    start = max(span.col - 1, 0)
    if span.end_line == span.line:
        width = max(span.end_col - span.col, 1)
    else:
        width = max(len(text) - start, 1)
    width = max(min(width, len(text) - start), 1)
    caret = " " * start + "^" + "~" * (width - 1)
    return f"{head}\n{text}\n{caret}"


class _Diagnostic:
    """A message about user input, with the span it points at: ``str()`` is
    ``file:line:col: <kind>: message``, the source line and a caret."""

    kind = "error"

    def __init__(self, message: str, span: "Span | None" = None):
        super().__init__(message)
        self.message = message
        self.span = span

    def __str__(self) -> str:
        return render(self.kind, self.message, self.span)

    def render(self, prog: str = "cusyncgen") -> str:
        """``str(self)``, with ``prog`` (``cusyncgen plan``...) naming a spanless message's source."""
        return render(self.kind, self.message, self.span, prog)


class CusyncError(_Diagnostic, Exception):
    """Base class of every error caused by user input (a .dep file, -D values, DSL objects)."""


class CusyncWarning(_Diagnostic, UserWarning):
    """Something legal but probably not meant (a ForAll over a dim its tile does not use, a
    program with no Dep). Never raised: collected in ``Compiled.warnings`` and printed by the
    commands on stderr, rendered like an error with ``warning:``."""

    kind = "warning"


class ParseError(CusyncError):
    """The text is not a .dep program (a syntax error)."""


class UnknownNameError(CusyncError):
    """A name is used before it is declared, or never declared."""


class UnknownParamError(UnknownNameError):
    """A value is given for a Param the program does not declare: ``given_as`` says how, in the
    words of the caller (``params`` of the Python API, ``-D`` of the command line)."""

    def __init__(self, param: str, declared=(), given_as: str = "params"):
        self.param, self.declared = param, tuple(declared)
        where = f"-D {param}" if given_as == "-D" else f"params={{{param!r}: ...}}"
        its = f"its Params: {', '.join(self.declared)}" if self.declared else "it declares none"
        super().__init__(f"{where}: the program declares no Param '{param}' ({its})")


class DuplicateNameError(CusyncError):
    """A name is declared twice."""


class KindError(CusyncError):
    """A name of the wrong kind is used (a Grid where a Dim is expected, ...)."""


class MissingParamError(CusyncError):
    """A Param has no default and no -D value."""


class InexactDivisionError(CusyncError):
    """``/`` in a grid extent or Param value does not divide exactly."""


class NotAffineError(CusyncError):
    """A tile index is not quasi-affine in the dims (x*y, division by a dim, ...)."""


class DimNotInGridError(CusyncError):
    """A tile uses a dim that its grid does not declare."""


class OutOfBoundsError(CusyncError):
    """A producer tile index leaves its grid for some consumer tile."""


class CyclicDependencyError(CusyncError):
    """The Deps form a cycle between grids."""


class ValueRangeError(CusyncError):
    """A value is outside what the generated code supports (non-positive extent, int overflow, ...)."""


class ArityError(CusyncError):
    """Wrong number of dims, extents or tile indices."""


class ParamValueError(CusyncError, ValueError):
    """A Param value (``-D`` or ``params=``) that is not an integer, or too large for 64 bits."""


class InvalidNameError(CusyncError, ValueError):
    """A name that cannot be a C++ identifier in the generated header (``Grid("my grid")``,
    ``--namespace int``)."""


class MissingDependencyError(CusyncError, ImportError):
    """A package the GPU path needs (CuPy, cuda-bindings, PyTorch) is not installed: the message
    says which, and the pip command that installs it. An ImportError too, for code that tests
    for the GPU stack with ``except ImportError``."""


class SoundnessError(CusyncError):
    """``cusyncgen check`` found a policy or order that is not sound (a compiler bug)."""
