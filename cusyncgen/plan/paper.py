"""The paper's Tables I and IV (CuSync, CGO'24; V100, 80 SMs) as data, and their reproduction.

GPT-3 145B MLP with 8-way model parallelism: H = 12288, the first GeMM is
``[B*S, H] x [H, 4H/8]`` (N = 6144, K = 12288), the second ``[B*S, 4H/8] x [4H/8, H]``
(N = 12288, K = 6144).  Table IV's grid is ``x = ceil(M / TileM)``, ``y = N / TileN``,
``z = split-k``.  The paper does not list its tile shapes; the ones below are the (TileM, TileN,
split-k, blocks per SM) that reproduce every grid of Tables I and IV exactly from these shapes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .model import ChainSpec, DepSpec, GridSpec, PolicySpec

H = 12288
N1, K1 = 4 * H // 8, H          # first GeMM
N2, K2 = H, 4 * H // 8          # second GeMM
V100_SMS = 80


@dataclass(frozen=True)
class GemmCfg:
    tile_m: int
    tile_n: int
    split_k: int
    occupancy: int


@dataclass(frozen=True)
class Table4Row:
    label: str
    m: int                      # B*S used for the grid (the largest of the row's range)
    g1: GemmCfg
    g2: GemmCfg
    paper_grid1: tuple
    paper_waves1: float
    paper_grid2: tuple
    paper_waves2: float
    paper_ss_waves: float
    paper_ss_us: float
    paper_cs_waves: float
    paper_policy: str
    paper_cs_us: float
    paper_decrease: str


TABLE4 = [
    Table4Row("1-64", 64, GemmCfg(256, 256, 4, 2), GemmCfg(256, 256, 3, 2), (1, 24, 4), 0.6, (1, 48, 3), 0.9, 2, 378, 1.8, "Tile", 355, "5-6.0%"),
    Table4Row("128", 128, GemmCfg(256, 256, 3, 2), GemmCfg(256, 256, 3, 2), (1, 24, 3), 0.4, (1, 48, 3), 0.9, 2, 530, 1.3, "Tile", 523, "2%"),
    Table4Row("256", 256, GemmCfg(256, 128, 4, 2), GemmCfg(256, 128, 2, 2), (1, 48, 4), 1.2, (1, 96, 2), 1.2, 4, 862, 2.4, "Tile", 728, "16%"),
    Table4Row("512", 512, GemmCfg(256, 256, 2, 1), GemmCfg(256, 256, 1, 1), (2, 24, 2), 1.2, (2, 48, 1), 1.2, 6, 1500, 4.8, "Row", 1196, "21%"),
    Table4Row("1024", 1024, GemmCfg(256, 256, 2, 1), GemmCfg(256, 256, 1, 1), (4, 24, 2), 2.4, (4, 48, 1), 2.4, 5, 2111, 3.6, "Row", 1901, "10%"),
    Table4Row("2048", 2048, GemmCfg(256, 256, 1, 1), GemmCfg(256, 256, 1, 1), (8, 24, 1), 2.4, (8, 48, 1), 4.8, 8, 3730, 7.2, "Row", 3574, "4%"),
]

# Table I: (batch, gemm, paper TBs [x, y, z], paper TBs per wave (occupancy), waves, utilization %)
TABLE1 = [
    (256, "Producer", (1, 48, 4), 2, 1.2, 60), (256, "Consumer", (1, 96, 2), 2, 1.2, 60),
    (512, "Producer", (2, 24, 2), 1, 1.2, 60), (512, "Consumer", (2, 48, 1), 1, 1.2, 60),
    (1024, "Producer", (4, 24, 2), 1, 2.4, 80), (1024, "Consumer", (4, 48, 1), 1, 2.4, 80),
]


def gemm_grid(m: int, n: int, cfg: GemmCfg) -> tuple[int, int, int]:
    if n % cfg.tile_n:
        raise ValueError(f"N={n} is not a multiple of TileN={cfg.tile_n}")
    return (math.ceil(m / cfg.tile_m), n // cfg.tile_n, cfg.split_k)


def mlp_spec(grid1, grid2, occ1: int, occ2: int, tile_time1: float = 1.0, tile_time2: float = 1.0) -> ChainSpec:
    """The two GeMMs of the MLP in Table IV's grid convention (x: rows of M, y: columns of N, z:
    split-k).  Consumer tile (x, y', z') reads the K-slice z' of the intermediate, i.e. producer
    columns ``y`` in slice z' of ``Y1`` split ``Z2`` ways, each complete once all ``Z1`` split-k
    blocks of (x, y) are done.  Policies: TileSync (a semaphore per producer output tile (x, y),
    value Z1) and RowSync (one per row x, value Y1*Z1)."""
    X1, Y1, Z1 = grid1
    X2, Y2, Z2 = grid2
    if X1 != X2:
        raise ValueError("both GeMMs must have the same number of row tiles")
    g1 = GridSpec("g1", tuple(grid1), occ1, tile_time1)
    g2 = GridSpec("g2", tuple(grid2), occ2, tile_time2)
    waits = []
    for c in range(g2.num_tiles):
        x, _, zc = g2.tile(c)
        lo, hi = (zc * Y1) // Z2, ((zc + 1) * Y1) // Z2
        waits.append([g1.linear((x, y, z)) for y in range(lo, hi) for z in range(Z1)])
    tile_sem, row_sem = [], []
    for p in range(g1.num_tiles):
        x, y, _ = g1.tile(p)
        tile_sem.append(x * Y1 + y)
        row_sem.append(x)
    pols = [PolicySpec("TileSync", tile_sem, [Z1] * g1.num_tiles),
            PolicySpec("RowSync", row_sem, [Y1 * Z1] * g1.num_tiles)]
    return ChainSpec([g1, g2], [DepSpec("dep", "g2", "g1", waits, pols)], source="paper Table IV")


def _fmt_grid(g) -> str:
    return "x".join(str(v) for v in g)


def reproduce_table1(num_sms: int = V100_SMS) -> list[dict]:
    from .waves import wave_stats
    rows = []
    for batch, which, grid, occ, waves, util in TABLE1:
        ws = wave_stats(grid[0] * grid[1] * grid[2], num_sms, occ)
        rows.append({"batch": batch, "gemm": which, "grid": grid, "occupancy": occ,
                     "blocks_per_wave": ws.blocks_per_wave, "waves": ws.waves, "paper_waves": waves,
                     "utilization": ws.utilization, "paper_utilization": util / 100,
                     "last_wave_utilization": ws.last_wave_utilization})
    return rows


def reproduce_table4(num_sms: int = V100_SMS, model: str = "kstep") -> list[dict]:
    from .simulate import simulate, stream_sync_time
    from .model import build_chain
    from .waves import wave_stats
    out = []
    for r in TABLE4:
        g1 = gemm_grid(r.m, N1, r.g1)
        g2 = gemm_grid(r.m, N2, r.g2)
        w1 = wave_stats(math.prod(g1), num_sms, r.g1.occupancy)
        w2 = wave_stats(math.prod(g2), num_sms, r.g2.occupancy)
        spec = mlp_spec(g1, g2, r.g1.occupancy, r.g2.occupancy)
        ss = stream_sync_time(build_chain(spec, [0], False, model), num_sms).time
        tile = simulate(build_chain(spec, [0], False, model), num_sms).time
        row = simulate(build_chain(spec, [1], False, model), num_sms).time
        ss_whole = w1.full_waves + w2.full_waves
        cs_frac = w1.waves + w2.waves
        notes = []
        if abs(round(w1.waves, 1) - r.paper_waves1) > 1e-9:
            notes.append(f"first GeMM: {math.prod(g1)} blocks / {w1.blocks_per_wave} = {w1.waves:.3g} waves, "
                         f"the paper prints {r.paper_waves1} (truncated, not rounded)")
        if abs(round(w2.waves, 1) - r.paper_waves2) > 1e-9:
            notes.append(f"second GeMM: {w2.waves:.3g} waves, the paper prints {r.paper_waves2}")
        if ss_whole != r.paper_ss_waves:
            notes.append(f"StreamSync waves: ceil({w1.waves:.3g}) + ceil({w2.waves:.3g}) = {ss_whole} "
                         f"from the paper's own grids, the paper prints {r.paper_ss_waves}")
        if abs(cs_frac - r.paper_cs_waves) > 0.1 + 1e-9:
            notes.append(f"CuSync waves: {w1.waves:.3g} + {w2.waves:.3g} = {cs_frac:.3g} from the paper's own "
                         f"grids, the paper prints {r.paper_cs_waves}")
        out.append({
            "label": r.label, "m": r.m, "grid1": g1, "paper_grid1": r.paper_grid1, "grid2": g2,
            "paper_grid2": r.paper_grid2, "waves1": w1.waves, "paper_waves1": r.paper_waves1,
            "waves2": w2.waves, "paper_waves2": r.paper_waves2,
            "ss_whole_waves": ss_whole, "paper_ss_waves": r.paper_ss_waves,
            "cs_fractional_waves": cs_frac, "paper_cs_waves": r.paper_cs_waves,
            "sim_streamsync": ss, "sim_tilesync": tile, "sim_rowsync": row,
            "sim_decrease_tile": 1 - tile / ss, "sim_decrease_row": 1 - row / ss,
            "paper_policy": r.paper_policy, "paper_decrease": r.paper_decrease,
            "paper_ss_us": r.paper_ss_us, "paper_cs_us": r.paper_cs_us,
            "notes": notes,
        })
    return out


def render_paper(num_sms: int = V100_SMS, model: str = "kstep", gpu_name: str = "V100") -> str:
    """Tables I and IV of the paper beside the wave model's numbers on ``gpu_name`` (the paper's
    V100 by default; on another GPU every difference from the paper is the GPU's, not the paper's)."""
    lines = [f"Table I ({gpu_name}, {num_sms} SMs): model vs paper",
             f"{'batch':>5} {'gemm':<8} {'TBs':>9} {'per wave':>9} {'waves':>6} {'paper':>6} {'util':>5} {'paper':>5} {'last wave':>9}"]
    for r in reproduce_table1(num_sms):
        lines.append(f"{r['batch']:>5} {r['gemm']:<8} {_fmt_grid(r['grid']):>9} {r['occupancy']}x{num_sms:<6} "
                     f"{r['waves']:>6.2f} {r['paper_waves']:>6} {r['utilization']*100:>4.0f}% {r['paper_utilization']*100:>4.0f}% "
                     f"{r['last_wave_utilization']*100:>8.0f}%")
    if num_sms != V100_SMS:
        lines.insert(0, f"note: the paper's numbers are for a V100 ({V100_SMS} SMs); on {gpu_name} the "
                        f"differences below are the GPU's, not the paper's")
    lines += ["", f"Table IV ({gpu_name}, {num_sms} SMs, GPT-3 MLP; sim: {model} model, times in waves of one tile time)",
              f"{'B*S':>5} {'grid1':>8} {'w1':>5} {'grid2':>8} {'w2':>5} | {'SS':>3} {'paper':>5} | {'CS':>5} {'paper':>5} |"
              f" {'simSS':>5} {'simTile':>7} {'simRow':>6} {'decr(best)':>10} {'paper':>7}"]
    notes = []
    for r in reproduce_table4(num_sms, model):
        best = max(r["sim_decrease_tile"], r["sim_decrease_row"])
        lines.append(f"{r['label']:>5} {_fmt_grid(r['grid1']):>8} {r['waves1']:>5.2f} {_fmt_grid(r['grid2']):>8} {r['waves2']:>5.2f} | "
                     f"{r['ss_whole_waves']:>3} {r['paper_ss_waves']:>5} | {r['cs_fractional_waves']:>5.2f} {r['paper_cs_waves']:>5} | "
                     f"{r['sim_streamsync']:>5.2f} {r['sim_tilesync']:>7.2f} {r['sim_rowsync']:>6.2f} {best*100:>9.1f}% {r['paper_decrease']:>7}")
        notes += [f"  {r['label']}: {n}" for n in r["notes"]]
    if notes:
        lines += ["", "Where the paper's numbers do not follow from its own grids:"] + notes
        lines.append("  (the grids and per-GeMM waves of every row match; the 512 and 1024 totals look swapped"
                     " or taken from other grids: 6 and 4.8 are what 1024's grids give.)")
    lines.append("  1-64 and 128: each GeMM fits in one wave, so no schedule saves a wave; the paper's 2-6 %"
                 " there come from overlapping the second GeMM's W2 loads and launch (optimizations R and W),"
                 " which a wave model does not see.")
    lines.append("  Measured times are wall-clock; the wave model assumes equal block times, no sync cost and"
                 " no memory effects, so its decrease is an upper bound on the waves saved, not a time.")
    return "\n".join(lines)
