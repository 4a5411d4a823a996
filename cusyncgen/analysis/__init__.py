"""Analysis: syntax tree -> ProgramIR, as passes run in order.

Each pass is a plain function that consumes the previous one's output (sqlglot's optimizer
style); PASSES lists them:

1. names.resolve     declarations, kinds, declaration before use, C++-safe names, -D names
2. evaluate.evaluate Param values and grid extents
3. affine.lower      every producer tile index as a quasi-affine form (no sympy)
4. bounds.prove      every index inside its grid for every consumer tile; the IR of the Deps
                     (the only module that imports sympy: it prints indices in messages)
5. graph.check       no cycle between grids, no clash between generated names
6. derive.derive     tile orders and candidate policies (the paper's section V)
"""

from __future__ import annotations

from typing import Optional

from cusyncgen import ir
from cusyncgen import syntax as S

from . import affine, bounds, derive, evaluate, graph, names
from .affine import Aff, floordiv, interval, magnitude, modulo, to_ir  # noqa: F401 - the API
from .derive import Analysis
from .evaluate import INT_MAX  # noqa: F401
from .names import CXX_KEYWORDS, Input  # noqa: F401

PASSES = (names.resolve, evaluate.evaluate, affine.lower, bounds.prove, graph.check,
          derive.derive)


def run(program: S.Program, params: Optional[dict] = None,
        name: Optional[str] = None) -> Analysis:
    """Every pass of PASSES in order: the ProgramIR and the warnings."""
    state = Input(program, {} if params is None else params,
                  "cusync_program" if name is None else name)
    for p in PASSES:
        state = p(state)
    return state


def analyze(program: S.Program, params: Optional[dict] = None,
            name: Optional[str] = None) -> ir.ProgramIR:
    """Check ``program`` for the given Param values and derive its orders and policies."""
    return run(program, params, name).program
