"""Tile orders of an sm90 GeMM beside the compiler's OrderIR (docs/sm90.md, "Scheduler"): the
compiler's order over a clustered grid, the grouped order (for a GeMM nothing waits on) and the
banded order (for a producer), and the L2-footprint heuristics that size them. Each is a
permutation of the GeMM's tiles, which the policies' values do not depend on."""
from __future__ import annotations

from cusyncgen.cuda.sm90.desc import Order
from cusyncgen.cuda.sm90.errors import Sm90Error
from cusyncgen.cuda.sm90.tiles import cluster_m


def cluster_order(d: Order, config: str) -> Order:
    """A tile order (the compiler's) over the grid of a clustered config: the same walk over the pairs
    of row blocks (OrderIR's row-major and x-grouped forms; one that permutes row blocks would split a
    cluster's pair)."""
    cm = cluster_m(config)
    if cm == 1:
        return d
    if d.group_dim == 1:
        raise Sm90Error(f"config {config}: an order that permutes row blocks cannot pair them in clusters")
    d.extent[1] = -(-d.extent[1] // cm)
    return d


def grouped_order(X: int, Y: int, columns: int) -> Order:
    """The order that walks `columns` N blocks (x = g, g + s, ..., s = X / columns) down every M block
    before the next group (OrderIR's groups_outer form): a wave of G items then reads about
    G / columns row blocks of A and `columns` column blocks of B, not G / X row blocks and every
    column block of B (row-major). For a GeMM nothing waits on (the last of a chain, or alone)."""
    if columns < 1 or X % columns:
        raise Sm90Error(f"grouped order: {columns} columns do not divide {X}")
    d = Order()
    d.group_dim, d.group_stride, d.group_count, d.groups_outer = 0, X // columns, columns, 1
    d.extent[0], d.extent[1], d.extent[2] = X, Y, 1
    return d


def banded_order(X: int, Y: int, rows: int) -> Order:
    """The banded order: bands of `rows` row blocks (the last may be shorter), walked band by band,
    each band column by column (its rows down one column, then the next column). A wave of G items
    reads about `rows` row blocks of A and G / rows column blocks of B, and B is read once per band
    (the row-major order reads all of B once per wave once a wave spans a row), while the rows of a
    band are complete as soon as the band is: an L2-friendly order for a producer. Not an OrderIR
    form: a permutation of the same tiles, which the policies (checked against the compiler's
    OrderIR) do not depend on; docs/sm90.md says why any permutation is deadlock-free."""
    if rows < 1 or rows > Y:
        raise Sm90Error(f"banded order: {rows} rows per band for {Y} row blocks")
    d = Order()
    d.group_dim, d.group_stride, d.group_count, d.groups_outer = -1, rows, 1, 2
    d.extent[0], d.extent[1], d.extent[2] = X, Y, 1
    return d


def band_rows(X: int, Y: int, a_row_bytes: float, b_col_bytes: float, sms: int = 132) -> int:
    """The band height R (1..Y) of banded_order that minimizes a wave's L2 footprint
    R * a_row + ceil(G / R) * b_col (G = min(sms, X * Y) items, columns capped at X); ties go to the
    smaller R (rows complete earlier)."""
    G = min(sms, X * Y)
    best, best_cost = 1, None
    for R in range(1, Y + 1):
        cost = R * a_row_bytes + min(X, -(-G // R)) * b_col_bytes
        if best_cost is None or cost < best_cost:
            best, best_cost = R, cost
    return best


def grouped_columns(X: int, Y: int, a_row_bytes: float, b_col_bytes: float, sms: int = 132) -> int:
    """The divisor c of X that minimizes a wave's L2 footprint c * b_col + (sms / c) * a_row (rows
    capped at Y)."""
    best, best_cost = X, None
    for c in range(1, X + 1):
        if X % c:
            continue
        rows = min(Y, -(-sms // c))
        cost = c * b_col_bytes + rows * a_row_bytes
        if best_cost is None or cost < best_cost:
            best, best_cost = c, cost
    return best
