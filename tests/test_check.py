"""Soundness of every example (check.py), and the emitted headers compiled as host C++ (g++,
compared with the Python model tile by tile) and as CUDA (nvcc, sm_80 and sm_90)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import cusyncgen
from cusyncgen import check, ir
from cusyncgen.errors import SoundnessError

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "runtime_cuda"
#: every example -> its -D values (mlp_gpt3.dep is the issue's text: B, S have no default)
EXAMPLES = {p.name: {} for p in sorted((ROOT / "examples").glob("*.dep"))}
EXAMPLES["mlp_gpt3.dep"] = {"B": 8, "S": 256}


#: exercises what the examples do not: 3-D grids, a 4th Dim as a ForAll variable, nested ForAlls,
#: Range(lo, hi), negative floor division and modulo, several producers, non-constant values, a
#: Range bound that depends on the consumer tile (d4: a triangle, then a constant tile set)
EXTRA = """Param D = 3;
Dim x, y, z, k;
Grid p(x, y, z, 7, 5, 2);
Grid q(x, y, z, 4, 5, 2);
Grid r(x, y, 6, 5);
Grid s(x, 7);
Grid t(x, 3);
Dep d1({q, Tile(x, y, z)}, {p, ForAll(Tile(x + k + (x - 3)/4, y, z), k, Range(1, 2)),
                               Tile((x - 9) % 7, (y + 4)/2 - 2 + y % 2, 1 - z)});
Dep d2({r, Tile(x, y)}, {q, ForAll(ForAll(Tile(x % 4, y, k), k, Range(2)), x, Range(1, 4))},
                        {p, Tile(x, y, 0), Tile(x, y, 1)});
Dep d3({t, Tile(x)}, {s, ForAll(Tile(x + D*k), k, Range(2))});
Grid w(x, y, 6, 6);
Dep d4({r, Tile(x, y)}, {w, ForAll(ForAll(Tile(k, z), z, Range(2)), k, Range(1, y + 2)), Tile(x, y)});
"""


def _extra() -> "cusyncgen.Compiled":
    import dataclasses

    prog = cusyncgen.compile(EXTRA, name="extra.dep").program
    tile = ir.DimMap("tile")
    more = tuple(ir.PolicyIR("d3", "t", "s", name, (7, 1, 1), (dm, tile, tile), n)
                 for name, dm, n in (("Div2", ir.DimMap("div", 2), 4),
                                     ("Mod4", ir.DimMap("mod", 4), 4)))
    return cusyncgen.Compiled(dataclasses.replace(prog, policies=prog.policies + more), "extra")


def _compiled():
    out = {n: cusyncgen.compile(ROOT / "examples" / n, params=p) for n, p in EXAMPLES.items()}
    out["extra"] = _extra()
    return out


def test_extra_program_is_sound_and_uses_every_emission_path():
    c = _extra()
    assert check.problems(c.program) == []
    h = c.header
    for text in ("cusyncgen_floordiv(c.x - 3, 4)", "cusyncgen_floormod(c.x - 9, 7)", "const int i1 = ",
                 "(2 + (t.x % 3 < 1 ? 1 : 0))", "(t.x / 2 < 3 ? 2 : 1)", "StridedSync",
                 "count(cusync::Tile c) { return (c.y + 2 - 1) * 2 + 1; }", "if (i < (c.y + 2 - 1) * 2 + 1) {"):
        assert text in h, text


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_is_sound(name):
    prog = cusyncgen.compile(ROOT / "examples" / name, params=EXAMPLES[name]).program
    assert check.problems(prog) == []
    check.check(prog)


def test_check_catches_a_wrong_value():
    prog = cusyncgen.compile(ROOT / "examples" / "mlp_gpt3.dep", params={"B": 2, "S": 128}).program
    # a RowSync that believes the rows are 47 tiles wide: value 47, one tile too few, while the
    # 48 tiles of a row post: the consumer would race
    bad = ir.PolicyIR("dep", "g2", "g1", "RowSync", (47, 2, 1),
                      (ir.DimMap("all"), ir.DimMap("tile"), ir.DimMap("tile")), 2)
    wrong = ir.ProgramIR(prog.name, prog.source, prog.params, prog.overrides, prog.grids,
                         prog.deps, prog.orders, (bad,))
    assert check.problems(wrong) == [
        "dep_g1_RowSync: value(0, 0, 0) = 47 but 48 producer tiles post to semaphore 0"]
    with pytest.raises(SoundnessError):
        check.check(wrong)


def test_check_catches_a_non_bijective_order():
    prog = cusyncgen.compile(ROOT / "examples" / "mlp_llama.dep").program
    g1 = prog.grid("g1")
    bad_order = ir.OrderIR("g1", "x", 43, 3, g1.extent)  # 3 * 43 != 86: not a permutation
    wrong = ir.ProgramIR(prog.name, prog.source, prog.params, prog.overrides, prog.grids,
                         prog.deps, (bad_order, prog.order("g2")), prog.policies)
    assert any("bijection" in p for p in check.problems(wrong))


def test_check_catches_a_sem_out_of_range():
    prog = cusyncgen.compile(ROOT / "examples" / "mlp_llama.dep").program
    pol = [p for p in prog.policies if p.name == "StridedSync"][0]
    short = ir.PolicyIR(pol.dep, pol.consumer, pol.producer, "Short", pol.producer_extent,
                        pol.dims, pol.num_sems - 1)
    wrong = ir.ProgramIR(prog.name, prog.source, prog.params, prog.overrides, prog.grids,
                         prog.deps, prog.orders, (short,))
    assert any("outside [0, 85)" in p for p in check.problems(wrong))


# ---- compiled headers --------------------------------------------------------------------------

def _runtime_include(tmp: Path) -> Path:
    """The real runtime if present, else a minimal stand-in with the two names headers use."""
    if (RUNTIME / "cusync" / "cusync.h").exists():
        return RUNTIME
    stub = tmp / "stub"
    (stub / "cusync").mkdir(parents=True)
    (stub / "cusync" / "cusync.h").write_text(
        "#pragma once\n#ifdef __CUDACC__\n#define CUSYNC_HD __host__ __device__\n#else\n"
        "#define CUSYNC_HD\n#endif\nnamespace cusync { struct Tile { int x, y, z; }; }\n")
    return stub


def _model_lines(c: "cusyncgen.Compiled") -> list:
    """What the host program prints, computed from the Python reference model."""
    p, ns, out = c.program, c.namespace, []
    for o in p.orders:
        for lin in range(o.num_tiles):
            t = o.tile(lin)
            # the order struct, then the header's run-time descriptor of it (cusync/desc.h)
            out.append(f"{ns} O {o.grid} {lin} {t[0]} {t[1]} {t[2]} {o.linear(t)} {t[0]} {t[1]} {t[2]}")
    for pol in p.policies:
        for t in p.grid(pol.producer).tiles():
            out.append(f"{ns} P {pol.struct_name} {t[0]} {t[1]} {t[2]} {pol.sem(t)} {pol.value(t)} "
                       f"{pol.sem(t)} {pol.value(t)}")
    for d in p.deps:
        for prod in d.producers:
            for c_ in p.grid(d.consumer).tiles():
                tiles = prod.tiles(c_)
                out.append(f"{ns} W {d.name}_{prod.grid}_waits {c_[0]} {c_[1]} {c_[2]} {len(tiles)}")
                out += [f"{ns} T {i} {t[0]} {t[1]} {t[2]}" for i, t in enumerate(tiles)]
    return out


def _host_program(compiled: dict) -> str:
    src = ["#include <cstdio>"]
    src += [f'#include "{c.namespace}.h"' for c in compiled.values()]
    src.append("int main() {")
    for c in compiled.values():
        p, ns = c.program, c.namespace
        for o in p.orders:
            src.append(f"  for (int l = 0; l < {ns}::{o.grid}_order::num_tiles; ++l) {{ "
                       f"cusync::Tile t = {ns}::{o.grid}_order::tile(l); "
                       f"cusync::Tile d = cusync::order_tile({ns}::{o.grid}_order_desc(), l); "
                       f'std::printf("{ns} O {o.grid} %d %d %d %d %d %d %d %d\\n", l, t.x, t.y, t.z, '
                       f"{ns}::{o.grid}_order::linear(t), d.x, d.y, d.z); }}")
        for pol in p.policies:
            g = f"{ns}::{pol.producer}"
            s = f"{ns}::{pol.struct_name}"
            src.append(f"  for (int z = 0; z < {g}::Z; ++z) for (int y = 0; y < {g}::Y; ++y) "
                       f"for (int x = 0; x < {g}::X; ++x) {{ cusync::Tile t{{x, y, z}}; "
                       f'std::printf("{ns} P {pol.struct_name} %d %d %d %d %d %d %u\\n", x, y, z, '
                       f"{s}::sem(t), {s}::value(t), cusync::policy_sem({s}_desc(), x, y, z), "
                       f"cusync::policy_value({s}_desc(), x, y, z)); }}")
            t = (pol.producer_extent[0] - 1, pol.producer_extent[1] - 1, 0)
            src.append(f"  static_assert({s}::sem(cusync::Tile{{{t[0]}, {t[1]}, {t[2]}}}) == "
                       f"{pol.sem(t)} && {s}::num_sems == {pol.num_sems}, \"constexpr sem\");")
        for d in p.deps:
            for prod in d.producers:
                g = f"{ns}::{d.consumer}"
                w = f"{ns}::{d.name}_{prod.grid}_waits"
                src.append(f"  for (int z = 0; z < {g}::Z; ++z) for (int y = 0; y < {g}::Y; ++y) "
                           f"for (int x = 0; x < {g}::X; ++x) {{ cusync::Tile c{{x, y, z}}; "
                           f'std::printf("{ns} W {d.name}_{prod.grid}_waits %d %d %d %d\\n", '
                           f"x, y, z, {w}::count(c)); for (int i = 0; i < {w}::count(c); ++i) "
                           f"{{ cusync::Tile t = {w}::tile(c, i); "
                           f'std::printf("{ns} T %d %d %d %d\\n", i, t.x, t.y, t.z); }} }}')
    src.append("  return 0;\n}")
    return "\n".join(src) + "\n"


@pytest.fixture(scope="module")
def headers(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("headers")
    compiled = _compiled()
    for c in compiled.values():
        (tmp / f"{c.namespace}.h").write_text(c.header)
    return tmp, compiled


def test_headers_compile_as_host_cxx_and_match_the_model(headers):
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ not on PATH")
    tmp, compiled = headers
    inc = _runtime_include(tmp)
    (tmp / "host.cpp").write_text(_host_program(compiled))
    exe = tmp / "host"
    r = subprocess.run([gxx, "-std=c++17", "-O1", *WARNINGS, "-I", str(inc), "-I", str(tmp), str(tmp / "host.cpp"), "-o", str(exe)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    got = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    want = [line for c in compiled.values() for line in _model_lines(c)]
    assert len(got) == len(want)
    mismatch = [(g, w) for g, w in zip(got, want) if g != w]
    assert not mismatch, mismatch[:5]


#: the headers compile cleanly with every warning as an error
WARNINGS = ["-Wall", "-Wextra", "-Werror"]


def test_each_header_alone_is_clean_under_wall_wextra_werror(headers):
    """Each example's header on its own (as a user includes it): no warning with g++ -std=c++17
    -Wall -Wextra -Werror (an unused parameter is commented out)."""
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ not on PATH")
    tmp, compiled = headers
    inc = _runtime_include(tmp)
    for c in compiled.values():
        tu = tmp / f"only_{c.namespace}.cpp"
        tu.write_text(f'#include "{c.namespace}.h"\n#include "{c.namespace}.h"\nint main() {{ return 0; }}\n')
        r = subprocess.run([gxx, "-std=c++17", *WARNINGS, "-fsyntax-only", "-I", str(inc), "-I", str(tmp),
                            str(tu)], capture_output=True, text=True)
        assert r.returncode == 0, (c.namespace, r.stderr[-4000:])


def _cuda_source(compiled: dict) -> str:
    src = [f'#include "{c.namespace}.h"' for c in compiled.values()]
    src.append("__global__ void use_all(int* out) {")
    src.append("  cusync::Tile t{int(blockIdx.x), int(blockIdx.y), 0};\n  int acc = 0;")
    for c in compiled.values():
        p, ns = c.program, c.namespace
        for o in p.orders:
            src.append(f"  acc += {ns}::{o.grid}_order::linear({ns}::{o.grid}_order::tile("
                       f"int(threadIdx.x) % {ns}::{o.grid}_order::num_tiles));")
        for pol in p.policies:
            src.append(f"  acc += {ns}::{pol.struct_name}::sem(t) * {ns}::{pol.struct_name}::value(t);")
            src.append(f"  acc += cusync::PolicyDesc{{{ns}::{pol.struct_name}_desc()}}.sem(t);")
        for d in p.deps:
            for prod in d.producers:
                w = f"{ns}::{d.name}_{prod.grid}_waits"
                src.append(f"  for (int i = 0; i < {w}::count(t); ++i) acc += {w}::tile(t, i).x;")
    src.append("  out[threadIdx.x] = acc;\n}")
    return "\n".join(src) + "\n"


@pytest.mark.nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_headers_compile_with_nvcc(arch, headers):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not on PATH")
    tmp, compiled = headers
    inc = _runtime_include(tmp)
    cu = tmp / f"all_{arch}.cu"
    cu.write_text(_cuda_source(compiled))
    r = subprocess.run([nvcc, "-std=c++17", f"-arch={arch}", "-c", "-Werror", "all-warnings",
                        "-Xcompiler", ",".join(WARNINGS), "-I", str(inc), "-I", str(tmp),
                        str(cu), "-o", str(tmp / f"all_{arch}.o")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
