"""The tile configurations of the sm90 library, read from runtime_cuda/sm90/configs.def: the one
list from which the library's instantiations (lib.build compiles config.cu, stock.cu and swap.cu
once per line), its C tables (plan.h, api.cu) and this module's CONFIGS come. Adding a configuration is one
line there. Also what a config's name says: its tile, and the grid an order walks."""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from cusyncgen.cuda.sm90.errors import Sm90Error
from cusyncgen.paths import data_path

CONFIGS_DEF = "configs.def"
_LINE = re.compile(r"^[ \t]*(CUSYNC_SM90_TILE|CUSYNC_SM90_STOCK|CUSYNC_SM90_SWAP)\(([^)]*)\)[ \t]*$", re.M)


def source_dir() -> Path:
    """runtime_cuda/sm90/ of a checkout, or its copy inside an installed wheel."""
    d = data_path("runtime_cuda") / "sm90"
    if not (d / "sm90_api.h").is_file():
        raise Sm90Error(f"cannot find sm90_api.h in {d} (the package's runtime sources)")
    return d


@dataclass(frozen=True)
class Tile:
    """One CUSYNC_SM90_TILE line: the synchronized GeMM's Config<BM, BN, BK, pingpong, epi_cols>
    (epi_cols > 0: the TMA-store epilogue staging that many columns at a time)."""

    name: str
    BM: int
    BN: int
    BK: int
    pingpong: bool = False
    epi_cols: int = 0

    def __post_init__(self):
        if self.pingpong and self.epi_cols:
            raise Sm90Error(f"tile config {self.name}: ping-pong has no TMA-store epilogue")
        if self.name != self.expected_name:
            raise Sm90Error(f"tile config {self.name}: its fields name it {self.expected_name}")

    @property
    def expected_name(self) -> str:
        return f"{self.BM}x{self.BN}x{self.BK}" + ("pp" if self.pingpong else "tma" if self.epi_cols else "")

    @property
    def defines(self) -> list[str]:
        """config.cu's -D flags for this configuration."""
        return [f"-DCUSYNC_SM90_TILE_FN=plan_{self.name}", f"-DCUSYNC_SM90_BM={self.BM}", f"-DCUSYNC_SM90_BN={self.BN}",
                f"-DCUSYNC_SM90_BK={self.BK}", f"-DCUSYNC_SM90_PINGPONG={int(self.pingpong)}",
                f"-DCUSYNC_SM90_EPI_COLS={self.epi_cols}"]


@dataclass(frozen=True)
class StockTile:
    """One CUSYNC_SM90_STOCK line: the stock CUTLASS reference kernels of that tile (stock_ref.cuh)."""

    name: str
    BM: int
    BN: int
    BK: int

    def __post_init__(self):
        if self.name != f"{self.BM}x{self.BN}x{self.BK}":
            raise Sm90Error(f"stock config {self.name}: its fields name it {self.BM}x{self.BN}x{self.BK}")

    @property
    def defines(self) -> list[str]:
        """stock.cu's -D flags for this configuration."""
        return [f"-DCUSYNC_SM90_STOCK_FN=stock_{self.name}", f"-DCUSYNC_SM90_BM={self.BM}",
                f"-DCUSYNC_SM90_BN={self.BN}", f"-DCUSYNC_SM90_BK={self.BK}"]


@dataclass(frozen=True)
class SwapTile:
    """One CUSYNC_SM90_SWAP line: the swapped GeMM of token generation (swap.cu), tiles of BT tokens x
    BW weight rows x BK, the weight packed by groups of BW x CW rows (swap_pack), clusters of CW CTAs
    along a group's rows, `stages` pipeline stages (0: as many as shared memory holds). xa: the wide
    form, X as CUTLASS's A operand (BT = 64 token rows, wgmma's M) and the packed weight as B, so that
    BW is any multiple of 16 (clusters of one). KS > 1: a 64-row tile's K split over a cluster of KS
    CTAs, the partial sums added in the first one's shared memory (swap_splitk.cuh), CW 1."""

    name: str
    BT: int
    BW: int
    BK: int
    CW: int
    stages: int = 0
    xa: bool = False
    KS: int = 1

    def __post_init__(self):
        form = "xa" if self.xa else f"sw{self.CW}"
        want = (f"{self.BT}x{self.BW}x{self.BK}{form}" + (f"s{self.stages}" if self.stages else "")
                + (f"k{self.KS}" if self.KS > 1 else ""))
        if self.name != want:
            raise Sm90Error(f"swap config {self.name}: its fields name it {want}")
        if self.stages == 1 or self.stages < 0:
            raise Sm90Error(f"swap config {self.name}: stages 0 (auto) or at least 2")
        if not 1 <= self.KS <= 8:
            raise Sm90Error(f"swap config {self.name}: KS 1 (no split) or a K split over 2-8 CTAs a cluster")
        if self.xa:
            if self.BT != 64 or self.CW != 1 or self.BW % 16 or not 16 <= self.BW <= 256 or self.KS != 1:
                raise Sm90Error(f"swap config {self.name}: the wide form (XA 1) has BT 64 (one warp group's token "
                                "rows), CW 1, BW a multiple of 16 up to 256 and no split")
        elif self.KS > 1 and self.CW != 1:
            raise Sm90Error(f"swap config {self.name}: a K split over a cluster has CW 1 (the cluster is the splits')")
        if not self.xa and (self.BT % 8 or not 8 <= self.BT <= 256 or self.BW != 64 or self.CW not in (1, 2, 4)):
            raise Sm90Error(f"swap config {self.name}: BT a multiple of 8 up to 256, BW 64 (one consumer warp "
                            "group), CW 1, 2 or 4")

    def fits(self, N: int, K: int) -> bool:
        """Does an N x K weight run on it (swap.cu's check: its packed groups of rows divide N, K a
        multiple of 8 for TMA, and a k-block for every split)?"""
        return N % self.group == 0 and K % 8 == 0 and -(-K // self.BK) >= self.KS

    @property
    def chains(self) -> bool:
        """Does it run the one-launch chain (swap_chain.cuh: 64-row tiles of one CTA, no split)?"""
        return not self.xa and self.KS == 1 and self.group == 64

    @property
    def group(self) -> int:
        """The rows of a group of its packed weight (swap_pack): a cluster's BW x CW."""
        return self.BW * self.CW

    @property
    def defines(self) -> list[str]:
        """swap.cu's -D flags for this configuration."""
        return [f"-DCUSYNC_SM90_SWAP_FN=swap_{self.name}", f"-DCUSYNC_SM90_BT={self.BT}",
                f"-DCUSYNC_SM90_BW={self.BW}", f"-DCUSYNC_SM90_BK={self.BK}", f"-DCUSYNC_SM90_CW={self.CW}",
                f"-DCUSYNC_SM90_STAGES={self.stages}", f"-DCUSYNC_SM90_XA={int(self.xa)}",
                f"-DCUSYNC_SM90_KS={self.KS}"]


def parse_configs(text: str, where: str = CONFIGS_DEF) -> tuple[tuple[Tile, ...], tuple[StockTile, ...],
                                                                  tuple[SwapTile, ...]]:
    """The TILE, STOCK and SWAP lines of a configs.def text, in order: lines that hold the macro call
    alone (its #define and comment lines are not entries)."""
    tiles, stock, swap = [], [], []
    for m in _LINE.finditer(text):
        fields = [f.strip() for f in m.group(2).split(",")]
        line = text.count("\n", 0, m.start()) + 1
        try:
            if m.group(1) == "CUSYNC_SM90_TILE":
                name, bm, bn, bk, pp, epi = fields
                tiles.append(Tile(name, int(bm), int(bn), int(bk), bool(int(pp)), int(epi)))
            elif m.group(1) == "CUSYNC_SM90_STOCK":
                name, bm, bn, bk = fields
                stock.append(StockTile(name, int(bm), int(bn), int(bk)))
            else:
                name, bt, bw, bk, cw, stages, xa, ks = fields
                if xa not in ("0", "1"):
                    raise ValueError(xa)
                swap.append(SwapTile(name, int(bt), int(bw), int(bk), int(cw), int(stages), xa == "1", int(ks)))
        except ValueError:
            raise Sm90Error(f"{where}:{line}: not a {m.group(1)} line: {m.group(0).strip()}") from None
        except Sm90Error as e:
            raise Sm90Error(f"{where}:{line}: {e.message}") from None
    names = [t.name for t in tiles]
    if len(set(names)) != len(names) or not tiles:
        raise Sm90Error(f"{where}: {'a tile config is listed twice' if tiles else 'no tile config'}")
    if len({t.name for t in swap}) != len(swap):
        raise Sm90Error(f"{where}: a swap config is listed twice")
    return tuple(tiles), tuple(stock), tuple(swap)


@lru_cache(maxsize=None)
def table() -> tuple[tuple[Tile, ...], tuple[StockTile, ...], tuple[SwapTile, ...]]:
    path = source_dir() / CONFIGS_DEF
    return parse_configs(path.read_text(), str(path))


TILES: tuple[Tile, ...] = table()[0]
STOCK_TILES: tuple[StockTile, ...] = table()[1]
SWAP_TILES: tuple[SwapTile, ...] = table()[2]
# the names, in configs.def's order ("pp": ping-pong, "tma": the TMA-store epilogue)
CONFIGS: tuple[str, ...] = tuple(t.name for t in TILES)
STOCK_CONFIGS: tuple[str, ...] = tuple(t.name for t in STOCK_TILES)
SWAP_CONFIGS: tuple[str, ...] = tuple(t.name for t in SWAP_TILES)
_SWAP_BY_NAME = {t.name: t for t in SWAP_TILES}


def swap_tile(config: str) -> SwapTile:
    """The SWAP line of configs.def named `config`."""
    t = _SWAP_BY_NAME.get(config)
    if t is not None:
        return t
    raise Sm90Error(f"no swapped GeMM {config!r}; configs.def has {', '.join(SWAP_CONFIGS)}")


def swap_configs_for(M: int, configs=None) -> list[str]:
    """The swapped GeMM's configs (configs.def's SWAP lines, or `configs`, in that order) an M-row
    GeMM runs on: those of the two smallest token tiles that hold M (M = 9-16: the 16- and 32-token
    tiles, say)."""
    tiles = [swap_tile(n) for n in (configs if configs is not None else SWAP_CONFIGS)]
    bts = sorted({t.BT for t in tiles if t.BT >= M})[:2]
    return [t.name for t in tiles if t.BT in bts]


def tile_dims(config: str) -> tuple:
    """(BM, BN, BK) of a config name "<BM>x<BN>x<BK>[pp|tma|c2]" ("pp": the ping-pong form; "tma": the
    TMA-store epilogue; "c2": clusters of two CTAs along M sharing B through TMA multicast)."""
    bm, bn, bk = (int(v) for v in config.removesuffix("pp").removesuffix("tma").removesuffix("c2").split("x"))
    return bm, bn, bk


def cluster_m(config: str) -> int:
    return 2 if config.endswith("c2") else 1


def order_grid(config: str, M: int, N: int) -> tuple:
    """(X, Y) of the grid an order walks: N / BN column blocks by the row blocks, or, with clusters of
    two CTAs along M, by the pairs of row blocks (each item is a pair, one row block per CTA)."""
    bm, bn, _ = tile_dims(config)
    cm = cluster_m(config)
    return N // bn, -(-(-(-M // bm)) // cm)
