"""The size guard: how much a command may enumerate before it refuses.

``cusyncgen check``, ``cusyncgen --emit deps|policies|order`` and ``cusyncgen plan`` enumerate
every (consumer tile, producer tile) edge or every tile of a grid; their time and output grow with
that count (about a second per few million edges; the JSON of the edges about 45 bytes each). Each
refuses up front, with a :class:`TooLargeError` naming the count, a program with more than
``max_edges`` edges, or with a grid of more than ``max_edges`` tiles (default
:data:`DEFAULT_MAX_EDGES`; ``--max-edges N`` raises it). Emitting the header enumerates nothing
and has no limit.

The edge count is an upper bound computed without enumerating: per Dep and producer, the consumer
grid's tiles times the most tiles one consumer tile waits on (a Range bound that depends on the
consumer tile, as in a causal mask, counts at its largest).
"""

from __future__ import annotations

from cusyncgen.errors import CusyncError

#: the default limit on edges (and on the tiles of one grid): 10x the 4.7M edges of the GPT-3 MLP
#: at batch 64 x 2048 tokens (examples/mlp_gpt3.dep -D B=64 -D S=2048)
DEFAULT_MAX_EDGES = 50_000_000

FLAG = "--max-edges"


class TooLargeError(CusyncError):
    """The program has more edges or tiles than the command may enumerate (``--max-edges``)."""


def limit_of(max_edges: int | None) -> int:
    return DEFAULT_MAX_EDGES if max_edges is None else max_edges


def edge_count(program) -> int:
    """An upper bound of the number of edges (consumer tile, producer tile) of ``program``."""
    return sum(n for _, n in _edge_terms(program))


def check_edges(program, max_edges: int | None = None) -> None:
    """Raise TooLargeError if ``program`` may have more than ``max_edges`` edges."""
    limit = limit_of(max_edges)
    terms = _edge_terms(program)
    total = sum(n for _, n in terms)
    if total > limit:
        what, _ = max(terms, key=lambda t: t[1])
        raise TooLargeError(f"the program has up to {total:,} edges (consumer tile, producer "
                            f"tile) to enumerate, more than the limit of {limit:,} ({what}); "
                            f"{FLAG} N raises the limit")


def check_tiles(program, max_edges: int | None = None, grids=None) -> None:
    """Raise TooLargeError if a grid of ``grids`` (default: every grid) has more than
    ``max_edges`` tiles."""
    limit = limit_of(max_edges)
    for g in program.grids if grids is None else grids:
        if g.num_tiles > limit:
            X, Y, Z = g.extent
            raise TooLargeError(f"grid '{g.name}' has {g.num_tiles:,} tiles ({X} x {Y} x {Z}) to "
                                f"enumerate, more than the limit of {limit:,}; {FLAG} N raises "
                                f"the limit")


def check_all(program, max_edges: int | None = None) -> None:
    """check_tiles and check_edges: what ``check`` and ``plan`` enumerate."""
    check_tiles(program, max_edges)
    check_edges(program, max_edges)


def _edge_terms(program) -> list:
    out = []
    for d in program.deps:
        g = program.grid(d.consumer)
        for p in d.producers:
            n = g.num_tiles * p.count
            upto = "up to " if any(ts.variable for ts in p.tilesets) else ""
            tiles = "tile" if p.count == 1 else "tiles"
            out.append((f"dep {d.name}: {g.num_tiles:,} tiles of '{d.consumer}', each waiting on "
                        f"{upto}{p.count:,} {tiles} of '{p.grid}'", n))
    return out
