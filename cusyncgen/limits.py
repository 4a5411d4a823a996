"""The size guard: how much a command may enumerate before it refuses.

``cusyncgen check``, ``cusyncgen --emit deps|policies|order`` and ``cusyncgen plan`` enumerate
every (consumer tile, producer tile) edge or every tile of a grid; their time and output grow with
that count (about a second per few million edges; the JSON of the edges about 45 bytes each). Each
refuses up front, with a :class:`TooLargeError` naming the count, a program with more than
``max_edges`` edges, or with a grid of more than ``max_edges`` tiles (default
:data:`DEFAULT_MAX_EDGES`; ``--max-edges N`` raises it). Emitting the header enumerates nothing
and has no limit.

The edge count is exact and computed without enumerating edges: per Dep and producer, the consumer
grid's tiles times the tiles one consumer tile waits on. A Range bound that depends on the consumer
tile (a causal mask, ``Range(y + 1)``) is summed over the consumer coordinates it reads (``y``
alone: one value per row, times the grid's other extents); where those coordinates span more than
:data:`EXACT_SUM_TILES` tiles it counts at its largest instead (an upper bound, said "up to").
"""

from __future__ import annotations

from cusyncgen.errors import CusyncError

#: the default limit on edges (and on the tiles of one grid): 10x the 4.7M edges of the GPT-3 MLP
#: at batch 64 x 2048 tokens (examples/mlp_gpt3.dep -D B=64 -D S=2048)
DEFAULT_MAX_EDGES = 50_000_000

FLAG = "--max-edges"

#: a variable Range bound is summed exactly over at most this many consumer coordinates (numpy,
#: in blocks of ir.CHUNK); beyond, the count is the bound at its largest
EXACT_SUM_TILES = 1 << 24


class TooLargeError(CusyncError):
    """The program has more edges or tiles than the command may enumerate (``--max-edges``)."""


def limit_of(max_edges: int | None) -> int:
    return DEFAULT_MAX_EDGES if max_edges is None else max_edges


def edge_count(program) -> int:
    """The number of edges (consumer tile, producer tile) of ``program`` as enumerated (a pair
    listed twice counts twice), exact unless a variable Range spans more than EXACT_SUM_TILES
    consumer coordinates (then an upper bound)."""
    return sum(n for _, n, _ in _edge_terms(program))


def check_edges(program, max_edges: int | None = None) -> None:
    """Raise TooLargeError if ``program`` may have more than ``max_edges`` edges."""
    limit = limit_of(max_edges)
    terms = _edge_terms(program)
    total = sum(n for _, n, _ in terms)
    if total > limit:
        what, _, _ = max(terms, key=lambda t: t[1])
        upto = "" if all(exact for _, _, exact in terms) else "up to "
        raise TooLargeError(f"the program has {upto}{total:,} edges (consumer tile, producer "
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
    """Per Dep and producer: (words, edges, whether the count is exact)."""
    out = []
    for d in program.deps:
        g = program.grid(d.consumer)
        for p in d.producers:
            counts = [_tileset_edges(ts, g.extent) for ts in p.tilesets]
            exact = all(c is not None for c in counts)
            n = sum(g.num_tiles * ts.count if c is None else c for ts, c in zip(p.tilesets, counts))
            upto = "up to " if any(ts.variable for ts in p.tilesets) else ""
            tiles = "tile" if p.count == 1 else "tiles"
            out.append((f"dep {d.name}: {g.num_tiles:,} tiles of '{d.consumer}', each waiting on "
                        f"{upto}{p.count:,} {tiles} of '{p.grid}'", n, exact))
    return out


def _tileset_edges(ts, extent: tuple):
    """The tiles ``ts`` lists summed over every consumer tile of a grid of ``extent``, or None
    where a variable bound reads more than EXACT_SUM_TILES consumer coordinates."""
    import numpy as np

    from cusyncgen import ir

    X, Y, Z = extent
    if not ts.variable:
        return X * Y * Z * ts.count
    names = set().union(*(ir.expr_names(lp.hi_expr) for lp in ts.loops if lp.hi_expr is not None))
    read = [(ax, e) for ax, e in zip(("c.x", "c.y", "c.z"), extent) if ax in names]
    span = 1
    for _, e in read:
        span *= e
    if span > EXACT_SUM_TILES:
        return None
    rest = X * Y * Z // span   # the consumer tiles that share each combination of read coordinates
    total = 0
    for start in range(0, span, ir.CHUNK):
        lin = np.arange(start, min(start + ir.CHUNK, span), dtype=np.int64)
        env = {"c.x": 0, "c.y": 0, "c.z": 0}
        for ax, e in read:   # mixed radix over the read coordinates, the first fastest
            env[ax] = lin % e
            lin = lin // e
        counts = np.broadcast_to(np.asarray(ts.count_np(env)), (min(ir.CHUNK, span - start),))
        total += int(counts.astype(object).sum()) if ts.count >= (1 << 62) // ir.CHUNK \
            else int(counts.sum())
    return total * rest
