"""Exhaustive soundness check of a compiled program for its concrete sizes.

Independent of the interval proofs in analysis.py, it enumerates every tile: each order is a
bijection, each producer tile read lies inside its grid, each policy's semaphores stay in
[0, num_sems) and ``value`` equals the number of producer tiles posting to that semaphore, and for
every consumer tile the waits (decoded like the generated ``waits::tile``) cover every producer
tile it reads. ``cusyncgen check FILE.dep [-D ...]`` runs it.
"""

from __future__ import annotations

from collections import Counter

from cusyncgen import ir
from cusyncgen.errors import SoundnessError


def problems(program: ir.ProgramIR, limit: int = 20) -> list:
    """Every soundness violation found (at most ``limit``); empty when the program is sound."""
    out: list = []

    def bad(msg: str) -> bool:
        out.append(msg)
        return len(out) >= limit

    for o in program.orders:
        g = program.grid(o.grid)
        seen = set()
        for lin in range(g.num_tiles):
            t = o.tile(lin)
            if not g.contains(t) or o.linear(t) != lin or t in seen:
                if bad(f"order of {g.name}: linear {lin} -> tile {t} is not a bijection"):
                    return out
                break
            seen.add(t)
    for pol in program.policies:
        g = program.grid(pol.producer)
        posts: Counter = Counter()
        for t in g.tiles():
            s = pol.sem(t)
            if not 0 <= s < pol.num_sems:
                if bad(f"{pol.struct_name}: sem{t} = {s} outside [0, {pol.num_sems})"):
                    return out
            posts[s] += 1
        for t in g.tiles():
            if pol.value(t) != posts[pol.sem(t)]:
                if bad(f"{pol.struct_name}: value{t} = {pol.value(t)} but {posts[pol.sem(t)]} "
                       f"producer tiles post to semaphore {pol.sem(t)}"):
                    return out
                break
    for d in program.deps:
        cg = program.grid(d.consumer)
        for p in d.producers:
            pg = program.grid(p.grid)
            pols = program.policies_of(d.name, p.grid)
            for c in cg.tiles():
                reads = p.tiles(c)
                n = program.wait_count_at(d.name, p.grid, c)  # waits::count(c)
                waited = [program.wait_tile(d.name, p.grid, c, i) for i in range(n)]
                if waited != reads:
                    if bad(f"dep {d.name}: waits of {d.consumer}{c} on {p.grid} decode to "
                           f"{waited[:4]}... but it reads {reads[:4]}..."):
                        return out
                    break
                for t in reads:
                    if not pg.contains(t):
                        if bad(f"dep {d.name}: {d.consumer}{c} reads {p.grid}{t}, outside the "
                               f"grid {pg.extent}"):
                            return out
                        break
                for pol in pols:
                    covered = {(pol.sem(t), pol.value(t)) for t in waited}
                    for t in reads:
                        if (pol.sem(t), pol.value(t)) not in covered:
                            if bad(f"{pol.struct_name}: {d.consumer}{c} reads {p.grid}{t} but "
                                   f"does not wait on its semaphore"):
                                return out
    return out


def check(program: ir.ProgramIR) -> None:
    """Raise SoundnessError listing the violations, if any."""
    found = problems(program)
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

    def body(args) -> int:
        compiled = cliutil.compile_file(args.file, cliutil.params_of(args.params))
        cliutil.warn(compiled, "cusyncgen check")
        prog = compiled.program
        check(prog)
        tiles = sum(g.num_tiles for g in prog.grids)
        cliutil.write_output(f"ok: {len(prog.orders)} orders, {len(prog.policies)} policies and "
                             f"{sum(len(d.producers) for d in prog.deps)} wait lists sound over "
                             f"{tiles} tiles\n", None, "cusyncgen check")
        return cliutil.EXIT_OK

    return cliutil.run("cusyncgen check", p, body, argv)
