"""Exhaustive soundness check of a compiled program for its concrete sizes.

Independent of the interval proofs in analysis.py, it enumerates every tile: each order is a
bijection, each producer tile read lies inside its grid, each policy's semaphores stay in
[0, num_sems) and ``value`` equals the number of producer tiles posting to that semaphore, and for
every consumer tile the waits (decoded like the generated ``waits::tile``) are the producer tiles
it reads, in order (so a consumer waits on the semaphore of every tile it reads). ``cusyncgen check
FILE.dep [-D ...]`` runs it.

The enumeration is vectorized (numpy over blocks of tiles, ir.py's array forms); a violation's
message is then written from the scalar reference model (ir.py) for that one tile. Programs larger
than the size guard (limits.py) are refused before anything is enumerated.
"""

from __future__ import annotations

import numpy as np

from cusyncgen import ir, limits
from cusyncgen.errors import SoundnessError


def problems(program: ir.ProgramIR, limit: int = 20, max_edges: int | None = None) -> list:
    """Every soundness violation found (at most ``limit``); empty when the program is sound.
    Raises limits.TooLargeError when the program has more than ``max_edges`` edges or a grid
    more tiles (default limits.DEFAULT_MAX_EDGES)."""
    limits.check_all(program, max_edges)
    out: list = []

    def bad(msg: str) -> bool:
        out.append(msg)
        return len(out) >= limit

    for o in program.orders:
        msg = _order_problem(program, o)
        if msg and bad(msg):
            return out
    for pol in program.policies:
        for msg in _policy_problems(program, pol):
            if bad(msg):
                return out
    for d in program.deps:
        for p in d.producers:
            for msg in _wait_problems(program, d, p):
                if bad(msg):
                    return out
    return out


def _order_problem(program: ir.ProgramIR, o: ir.OrderIR):
    """The first position whose tile is outside the grid or does not map back to it (then the
    order is no bijection; a tile met twice fails the second test at its second position)."""
    g = program.grid(o.grid)
    for start in range(0, g.num_tiles, ir.CHUNK):
        lin = np.arange(start, min(start + ir.CHUNK, g.num_tiles), dtype=np.int64)
        t = np.broadcast_arrays(*o.tile(lin))
        ok = g.contains_np(*t) & (o.linear(tuple(t)) == lin)
        if not ok.all():
            first = start + int(np.argmin(ok))
            return f"order of {g.name}: linear {first} -> tile {o.tile(first)} is not a bijection"
    return None


def _policy_problems(program: ir.ProgramIR, pol: ir.PolicyIR):
    """Every tile whose semaphore is outside [0, num_sems), then the first tile whose value is
    not the number of tiles posting to its semaphore (tiles in row-major order)."""
    g = program.grid(pol.producer)
    uniq, counts = [], []
    for start in range(0, g.num_tiles, ir.CHUNK):
        x, y, z = g.coords(start, min(start + ir.CHUNK, g.num_tiles))
        s = pol.sem_np(x, y, z)
        for i in np.flatnonzero((s < 0) | (s >= pol.num_sems)):
            t = (int(x[i]), int(y[i]), int(z[i]))
            yield f"{pol.struct_name}: sem{t} = {pol.sem(t)} outside [0, {pol.num_sems})"
        u, c = np.unique(s, return_counts=True)
        uniq.append(u)
        counts.append(c)
    sems, inv = np.unique(np.concatenate(uniq), return_inverse=True)
    posts = np.zeros(len(sems), dtype=np.int64)
    np.add.at(posts, inv, np.concatenate(counts))
    for start in range(0, g.num_tiles, ir.CHUNK):
        x, y, z = g.coords(start, min(start + ir.CHUNK, g.num_tiles))
        n = posts[np.searchsorted(sems, pol.sem_np(x, y, z))]
        wrong = pol.value_np(x, y, z) != n
        if wrong.any():
            i = int(np.argmax(wrong))
            t = (int(x[i]), int(y[i]), int(z[i]))
            yield (f"{pol.struct_name}: value{t} = {pol.value(t)} but {int(n[i])} producer tiles "
                   f"post to semaphore {pol.sem(t)}")
            return


def _wait_problems(program: ir.ProgramIR, d: ir.DepIR, p: ir.ProducerIR):
    """Consumer tile by consumer tile (row-major): a read outside the producer grid (the first
    one of that tile), and at the first tile whose decoded waits are not its reads, that, and
    nothing after it. Where the waits are the reads, the consumer tile waits on (sem(t),
    value(t)) of every tile t it reads, so each policy covers its reads once value(t) tiles post
    to sem(t) (_policy_problems)."""
    cg, pg = program.grid(d.consumer), program.grid(p.grid)
    step = max(1, ir.CHUNK // max(1, p.count))
    for start in range(0, cg.num_tiles, step):
        cx, cy, cz = cg.coords(start, min(start + step, cg.num_tiles))
        n = len(cx)
        rc, rt = p.enumerate_np(cx, cy, cz)  # what each consumer tile reads
        wc, wt = p.decode_np(cx, cy, cz)  # waits::count(c), waits::tile(c, i)
        rid = np.repeat(np.arange(n), rc)
        differs = rc != wc
        same = np.flatnonzero(~differs)
        if len(same) == n:
            differs[rid[np.any(rt != wt, axis=1)]] = True
        elif len(same):
            k = rc[same]
            cid = np.repeat(same, k)
            pos = np.arange(len(cid)) - np.repeat(np.cumsum(k) - k, k)
            r = rt[(np.cumsum(rc) - rc)[cid] + pos]
            w = wt[(np.cumsum(wc) - wc)[cid] + pos]
            differs[cid[np.any(r != w, axis=1)]] = True
        outside = np.zeros(n, dtype=bool)
        outside[rid[~pg.contains_np(rt[:, 0], rt[:, 1], rt[:, 2])]] = True
        first = int(np.argmax(differs)) if differs.any() else n
        for i in np.flatnonzero(outside[:first]):
            c = (int(cx[i]), int(cy[i]), int(cz[i]))
            t = next(t for t in p.tiles(c) if not pg.contains(t))
            yield f"dep {d.name}: {d.consumer}{c} reads {p.grid}{t}, outside the grid {pg.extent}"
        if first < n:
            c = (int(cx[first]), int(cy[first]), int(cz[first]))
            reads = p.tiles(c)
            waited = [program.wait_tile(d.name, p.grid, c, i)
                      for i in range(program.wait_count_at(d.name, p.grid, c))]
            yield (f"dep {d.name}: waits of {d.consumer}{c} on {p.grid} decode to "
                   f"{waited[:4]}... but it reads {reads[:4]}...")
            return


def check(program: ir.ProgramIR, max_edges: int | None = None) -> None:
    """Raise SoundnessError listing the violations, if any (TooLargeError: see problems)."""
    found = problems(program, max_edges=max_edges)
    if found:
        raise SoundnessError("unsound program:\n  " + "\n  ".join(found))


def main(argv=None) -> int:
    """``cusyncgen check FILE.dep [-D ...]``; exit 0 sound, 1 an error or unsound, 2 usage."""
    from cusyncgen import cliutil

    p = cliutil.ArgumentParser(prog="cusyncgen check",
                               description="Prove the generated orders and policies sound by "
                                           "exhaustive enumeration for the given sizes.")
    p.add_argument("file", metavar="FILE.dep", help="the .dep program ('-' = stdin)")
    p.add_argument("-D", dest="params", action="append", type=cliutil.param, metavar="NAME=VALUE",
                   help="set a Param (repeatable)")
    cliutil.add_max_edges(p)

    def body(args) -> int:
        compiled = cliutil.compile_file(args.file, cliutil.params_of(args.params))
        cliutil.warn(compiled, "cusyncgen check")
        prog = compiled.program
        check(prog, args.max_edges)
        tiles = sum(g.num_tiles for g in prog.grids)
        cliutil.write_output(f"ok: {len(prog.orders)} orders, {len(prog.policies)} policies and "
                             f"{sum(len(d.producers) for d in prog.deps)} wait lists sound over "
                             f"{tiles} tiles\n", None, "cusyncgen check")
        return cliutil.EXIT_OK

    return cliutil.run("cusyncgen check", p, body, argv)
