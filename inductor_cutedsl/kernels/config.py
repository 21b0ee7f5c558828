"""Tile/cluster configuration space of the Hopper GEMM, with its validity rules.

Pure Python (no cutlass import) so that Inductor-side code can enumerate and
filter configs without paying for the DSL import.
"""

from __future__ import annotations

import dataclasses
import math

# sm_90 opt-in shared memory per block (227 KiB).
SMEM_CAPACITY = 232448
# Pipeline barriers, alignment padding between the 1 KiB aligned buffers.
SMEM_RESERVED = 2048
# A mainloop stage's K extent is 128 bytes of each operand row (one 128-byte swizzle
# atom): 64 elements of a 16-bit operand, 128 of an 8-bit one.
K_TILE_BYTES = 128
EPI_TILE_N = (32, 64)
MAX_AB_STAGES = 8
MIN_AB_STAGES = 2
# Shared-memory buffers of a staged epilogue input (one epilogue sub-tile each).
STAGED_BUFFERS = 2
# Fewest mainloop stages a staged input may leave: with two, a fused kernel runs far
# slower than the plain one.
MIN_STAGED_AB_STAGES = 3

_TILE_N_CHOICES = (64, 128, 192, 256)
# MMA tile widths of a dual (gated) kernel: each B half (tile_n / 2 columns) must be a
# whole number of 64-column shared-memory swizzle atoms (N-major B) and of epi_n.
_DUAL_TILE_N_CHOICES = (128, 256)
_TILE_M_CHOICES = ((64, True), (128, True), (128, False), (256, False))
_CLUSTERS = ((1, 1), (2, 1), (1, 2), (2, 2))


#: Promotion modes of an fp8 kernel (``KernelSpec.promote``): the wgmma accumulates
#: alone (PyTorch's use_fast_accum=True); the partial sums of each k-tile are added into
#: fp32 once the k-tile's wgmmas are done; or the same per column half of the tile, each
#: half's additions running while the other half's wgmmas do; or into two partial-sum
#: sets in turn, one k-tile's sums added while the next k-tile's wgmmas run.
PROMOTE_NONE, PROMOTE_TILE, PROMOTE_HALVES, PROMOTE_ALTERNATE = 0, 1, 2, 3
PROMOTE_MODES = (PROMOTE_NONE, PROMOTE_TILE, PROMOTE_HALVES, PROMOTE_ALTERNATE)


def promote_reason(promote: object, fp8_operands: bool) -> str | None:
    """None when ``promote`` is a valid promotion mode for these operands, else why not.

    Every mode promotes after every k-tile, none "every p > 1 k-tiles": that promotion
    sits in a branch of the k-loop and ptxas serializes every wgmma (C7515), while after
    every k-tile it folds the restart from zero into the first wgmma and keeps the
    batches pipelined. ``PROMOTE_TILE`` leaves the tensor cores idle while both
    warpgroups add (they wait on the same stage, so they add at the same time);
    ``PROMOTE_HALVES`` issues each half's wgmmas as a batch of their own, so one half's
    additions overlap the other's wgmmas, for the same registers; ``PROMOTE_ALTERNATE``
    accumulates k-tile t into partial-sum set t % 2 and adds the other set, done, while
    t's wgmmas run, so a batch is always in flight, for a third accumulator's registers."""
    if isinstance(promote, bool) or promote not in PROMOTE_MODES:
        return (
            f"promote: 0 (fast accumulation), 1 (fp8 partial sums promoted every k-tile), 2 (the same "
            f"by column halves, overlapped with the other half's wgmmas) or 3 (into two partial-sum sets "
            f"in turn), got {promote!r}"
        )
    if promote and not fp8_operands:
        return "promote: only fp8 operands' partial sums are promoted"
    return None


@dataclasses.dataclass(frozen=True, order=True)
class GemmConfig:
    """One point of the kernel's configuration space.

    ``pingpong`` selects the consumer schedule: two warpgroups each own a whole
    tile (64 or 128 rows) and alternate mainloop/epilogue (one stores while the
    other multiplies). Otherwise both warpgroups cooperate on one tile, each
    owning half its rows.
    """

    tile_m: int = 128
    tile_n: int = 256
    cluster_m: int = 1
    cluster_n: int = 1
    pingpong: bool = False
    raster_along_m: bool = True
    swizzle: int = 1
    epi_n: int = 32  # columns per epilogue sub-tile (fewer, larger stores when 64)
    # Staging buffers for the epilogue's stores; 0: about 16-32 KiB worth. As many as
    # a tile has sub-tiles means no sub-tile waits for an earlier store to drain,
    # at the price of mainloop stages.
    epi_buffers: int = 0
    # Stream-K over the last partial wave of tiles: its k-iterations are split evenly
    # over every cluster slot, and each tile's partial sums meet in its first slot.
    stream_k: bool = False

    @staticmethod
    def tile_k(in_bytes: int = 2) -> int:
        """K elements per mainloop stage for operands of ``in_bytes`` bytes."""
        return K_TILE_BYTES // in_bytes

    @property
    def cluster_size(self) -> int:
        return self.cluster_m * self.cluster_n

    @property
    def mma_rows(self) -> int:
        """Rows covered by one wgmma across the warpgroups that share a tile."""
        return 64 if self.pingpong else 128

    def staged_bytes(self, in_bytes: int = 2) -> int:
        """Shared memory of a staged epilogue input's buffers."""
        return STAGED_BUFFERS * self.mma_rows * self.epi_n * in_bytes

    def stages_operands(self, out_bytes: int = 2, shared: bool = False) -> bool:
        """Whether the kernel can TMA-stage a 16-bit epilogue input
        (``EpilogueOperand.staged``): the cooperative schedule without stream-K, with
        at least ``MIN_STAGED_AB_STAGES`` mainloop stages left beside the input's
        buffers. An input of the output's dtype (``shared``) is loaded into the store
        buffers and takes no shared memory of its own."""
        extra = 0 if shared else self.staged_bytes()
        return not self.pingpong and not self.stream_k and self.ab_stages(2, out_bytes, extra) >= MIN_STAGED_AB_STAGES

    @property
    def epi_tile(self) -> tuple[int, int]:
        return (self.mma_rows, self.epi_n)

    def name(self) -> str:
        sched = "pp" if self.pingpong else "coop"
        raster = "m" if self.raster_along_m else "n"
        return (
            f"{self.tile_m}x{self.tile_n}_c{self.cluster_m}x{self.cluster_n}_{sched}"
            f"_r{raster}{self.swizzle}"
            + ("" if self.epi_n == 32 else f"_e{self.epi_n}")
            + (f"_b{self.epi_buffers}" if self.epi_buffers else "")
            + ("_sk" if self.stream_k else "")
        )

    def epi_stages(self, out_bytes: int) -> int:
        """Staging buffers for the TMA store."""
        if self.epi_buffers:
            return self.epi_buffers
        return 4 if out_bytes * self.epi_n <= 64 else 2

    def whole_tile_buffers(self) -> int:
        """Staging buffers for all of a tile's epilogue sub-tiles."""
        return self.tile_m // self.mma_rows * self.tile_n // self.epi_n

    def ab_stages(self, in_bytes: int = 2, out_bytes: int = 2, extra_bytes: int = 0) -> int:
        """Mainloop stages that fit beside the epilogue buffers and ``extra_bytes`` of
        other shared memory (capped)."""
        stage = (self.tile_m + self.tile_n) * self.tile_k(in_bytes) * in_bytes
        epi = self.mma_rows * self.epi_n * out_bytes * self.epi_stages(out_bytes)
        return min(MAX_AB_STAGES, (SMEM_CAPACITY - SMEM_RESERVED - epi - extra_bytes) // stage)

    def out_tile_n(self, dual: bool = False) -> int:
        """Output columns of one tile: a dual kernel's MMA tile holds a gate and an up
        column per output column."""
        return self.tile_n // 2 if dual else self.tile_n

    def dual_reason(self) -> str | None:
        """None when a dual (gated) kernel can be built with this config, else why not
        (beyond ``invalid_reason``)."""
        if self.tile_n not in _DUAL_TILE_N_CHOICES:
            return f"a dual kernel's tile_n must be one of {_DUAL_TILE_N_CHOICES}"
        if self.out_tile_n(True) % self.epi_n:
            return "a dual kernel's epi_n must divide tile_n / 2"
        return None

    def promotion_reason(self, promote: int = PROMOTE_TILE) -> str | None:
        """None when an fp8 kernel that promotes its partial sums in mode ``promote`` (a
        second fp32 accumulator per thread; a third for ``PROMOTE_ALTERNATE``) can be
        built with this config, else why not."""
        sets = 3 if promote == PROMOTE_ALTERNATE else 2
        if sets * self.acc_regs() > 192:
            return f"{sets} accumulators of {self.acc_regs()} registers per thread would spill"
        return None

    def acc_regs(self) -> int:
        """fp32 accumulator registers per consumer thread."""
        return self.tile_m * self.tile_n // (128 if self.pingpong else 256)

    def invalid_reason(self, in_bytes: int = 2, out_bytes: int = 2) -> str | None:
        """None when the kernel can be built with this config, else why not."""
        if (self.tile_m, self.pingpong) not in _TILE_M_CHOICES:
            return "tile_m must be 64 or 128 (pingpong) or 128 or 256 (cooperative)"
        if self.tile_n not in _TILE_N_CHOICES:
            return f"tile_n must be one of {_TILE_N_CHOICES}"
        if self.epi_n not in EPI_TILE_N or self.tile_n % self.epi_n:
            return f"epi_n must be one of {EPI_TILE_N} and divide tile_n"
        # Accumulator registers per consumer thread (fp32), under the 232-register cap.
        acc_regs = self.acc_regs()
        if acc_regs > 192:
            return f"{acc_regs} accumulator registers per thread would spill"
        if (self.cluster_m, self.cluster_n) not in _CLUSTERS:
            return f"cluster must be one of {_CLUSTERS}"
        if self.stream_k and self.pingpong:
            return "stream_k needs the cooperative schedule"
        if self.epi_buffers and not 2 <= self.epi_buffers <= 8:
            return "epi_buffers must be 0 (derived) or 2 to 8"
        if self.swizzle < 1 or self.swizzle & (self.swizzle - 1):
            return "swizzle must be a power of two"
        if self.ab_stages(in_bytes, out_bytes) < MIN_AB_STAGES:
            return "fewer than two mainloop stages fit in shared memory"
        return None


def config_space() -> list[GemmConfig]:
    """Every valid config (the whole space the device tests compile)."""
    out = []
    for tile_m, pingpong in _TILE_M_CHOICES:
        for tile_n in _TILE_N_CHOICES:
            for cm, cn in _CLUSTERS:
                for raster_m in (True, False):
                    for swizzle in (1, 8):
                        for epi_n in EPI_TILE_N:
                            cfg = GemmConfig(tile_m, tile_n, cm, cn, pingpong, raster_m, swizzle, epi_n)
                            if cfg.invalid_reason() is None:
                                out.append(cfg)
                                whole = cfg.whole_tile_buffers()
                                if epi_n == 64 and whole > cfg.epi_stages(2):
                                    staged = dataclasses.replace(cfg, epi_buffers=whole)
                                    if staged.invalid_reason() is None:
                                        out.append(staged)
                                # Stream-K as the shortlist offers it: unclustered
                                # cooperative tiles, unswizzled.
                                if (cm, cn, swizzle, pingpong) == (1, 1, 1, False) and epi_n == 32:
                                    out.append(dataclasses.replace(cfg, stream_k=True))
    return out


def fitted_swizzle(cfg: GemmConfig, m: int, n: int) -> int:
    """The largest swizzle up to ``cfg.swizzle`` that pads the problem by at most 1/16.

    The persistent scheduler rounds the cluster count along the swizzled dimension (N
    when rastering along M, else M) up to a multiple of the swizzle, and the padding
    tiles are scheduled like real ones (loaded as zeros, stores clipped): at 1024 rows a
    256x128 tile swizzled by 8 along M pads 4 tile rows to 8, so twice the tiles
    are scheduled."""
    if cfg.raster_along_m:
        clusters = math.ceil(math.ceil(n / cfg.tile_n) / cfg.cluster_n)
    else:
        clusters = math.ceil(math.ceil(m / cfg.tile_m) / cfg.cluster_m)
    swizzle = cfg.swizzle
    while swizzle > 1 and (-clusters % swizzle) * 16 > clusters:
        swizzle //= 2
    return swizzle


def promotion_mode(cfg: GemmConfig) -> int:
    """The mode a promoting fp8 kernel with ``cfg`` is built in: ``PROMOTE_ALTERNATE``
    where the config has registers for its third accumulator (a batch of wgmmas stays in
    flight through the additions; on the H200 it beat ``PROMOTE_TILE`` at the same tile
    and was our fastest promoting kernel at 7 of the 12 benchmark rows), else
    ``PROMOTE_TILE`` (``PROMOTE_HALVES`` never beat it)."""
    return PROMOTE_ALTERNATE if cfg.promotion_reason(PROMOTE_ALTERNATE) is None else PROMOTE_TILE


#: SMs of the H200, the device the shortlists are ranked on.
SMS = 132


def under_one_wave(m: int, n: int, batch: int = 1) -> bool:
    """Whether an (m, n) output in 128x128 tiles (``batch`` times) has fewer tiles than SMs."""
    return math.ceil(m / 128) * math.ceil(n / 128) * batch < SMS


def decode_stream_k(m: int, tiles: int) -> bool:
    """Whether a GEMM of ``m`` rows and ``tiles`` output tiles of 64 columns (one row of
    tiles) wants a stream-K tile. Decode-sized GEMMs (M <= 64 rows: a few output tiles,
    and a cost that is reading the weight) with fewer tiles than SMs: stream-K splits
    the K loop of those few tiles over the SMs, so that all of them stream the weight,
    and sums the parts in a fixed order (deterministic). The same where a wave of whole
    tiles leaves a second one of at most half the SMs (an 8960-wide weight: 140 tiles,
    8 of them alone on 8 SMs for a whole tile's time): its tiles' K loops are split over
    every slot."""
    return m <= 64 and (tiles < SMS or (tiles < 2 * SMS and tiles - SMS <= SMS // 2))


def shortlist(
    m: int, n: int, k: int, batch: int = 1, limit: int = 6, promote: int = PROMOTE_NONE, graphs: bool = False
) -> list[GemmConfig]:
    """A shape-aware short list of configs worth benchmarking, best guess first.

    Ordered by what won on the H200 (benchmarks/results/h200-gemm.json and
    docs/findings.md): large problems want 128x256 cooperative tiles, 64-column
    epilogue stores and a rasterization swizzle once there are several waves of tiles;
    small ones want narrower tiles so all 132 SMs get work. A pair cluster multicasts
    the wider of a tile's two operands (a 128x256 tile pairs along M, sharing B): the
    least L2 -> SM traffic per MAC, and at the power limit the least energy per GEMM.
    ``promote`` (a promotion mode): only configs with registers for an fp8 kernel's
    partial sums besides its accumulator (``GemmConfig.promotion_reason``). ``graphs``:
    the GEMM will run inside a CUDA graph (a decode step's), where a launch's host work
    is not paid per call.
    """
    sms = SMS
    raster_m = m >= n
    # A square tile reads as much from L2 either way: its pair follows the shape.
    square = (2, 1) if raster_m else (1, 2)
    waves = math.ceil(m / 128) * math.ceil(n / 256) * batch / sms
    swz = 8 if waves >= 2 else 1
    # The whole tile's stores staged at once (b4): a smaller fixed cost per tile for one
    # mainloop stage less; at the power limit our fastest config at every benchmark shape
    # with several tiles per CTA (docs/findings.md). With one tile per
    # CTA there is no next tile to overlap the stores with.
    wide = [GemmConfig(128, 256, 2, 1, False, raster_m, swz, 64, b) for b in (4, 0)]
    # Under one wave of 128x128 tiles (M <= 256 at model widths), the unclustered
    # 128x64 and 64x128 tiles were our fastest at every such shape of the model suite,
    # L2 hot or flushed, clearly ahead of 128x128 (docs/findings.md).
    narrow = (
        [GemmConfig(128, 64, 1, 1, False, raster_m, 1), GemmConfig(64, 128, 1, 1, True, raster_m, 1)]
        if under_one_wave(m, n, batch)
        else []
    )
    # Decode-sized GEMMs (``decode_stream_k``): a stream-K 128x64 tile. Its launch
    # allocates scratch and draws a token, host work that a CUDA graph's replay skips:
    # offered there only.
    skinny = (
        [GemmConfig(128, 64, 1, 1, False, raster_m, 1, stream_k=True)]
        if graphs and not promote and decode_stream_k(m, math.ceil(n / 64) * batch)
        else []
    )
    # A promoting fp8 kernel keeps a second accumulator, which rules out the wide tiles:
    # the widest that hold both (128x192 and 128x128 cooperative), paired and swizzled
    # as the wide ones are, lead its list.
    promoting = [GemmConfig(128, 192, 2, 1, False, raster_m, swz), GemmConfig(128, 128, *square, False, raster_m, swz)]
    cands: list[GemmConfig] = []
    for cfg in (
        *narrow,
        *skinny,
        *(promoting if promote else ()),
        *(wide if waves >= 2 else wide[::-1]),
        GemmConfig(128, 128, *square, True, raster_m, swz),
        # The better raster order was not predictable from the shape: try both.
        GemmConfig(128, 256, 2, 1, False, not raster_m, swz, 64, 4),
        GemmConfig(256, 128, 1, 2, False, raster_m, swz),
        GemmConfig(128, 256, 1, 1, False, raster_m, 1),
        GemmConfig(128, 192, 2, 1, False, raster_m, 1),
        GemmConfig(128, 128, *square, False, raster_m, 1),
        GemmConfig(64, 128, *square, True, raster_m, 1),
        GemmConfig(128, 128, 1, 1, False, raster_m, 1),
        GemmConfig(64, 128, 1, 1, True, raster_m, 1),
        GemmConfig(128, 64, 1, 1, False, raster_m, 1),
    ):
        tiles = math.ceil(m / cfg.tile_m) * math.ceil(n / cfg.tile_n) * batch
        # Skip configs that leave most SMs idle when a smaller tile would not.
        if tiles < sms // 2 and cfg.tile_m * cfg.tile_n > 128 * 128:
            continue
        cfg = dataclasses.replace(cfg, swizzle=fitted_swizzle(cfg, m, n))
        if cfg.invalid_reason() is None and (not promote or cfg.promotion_reason(promote) is None) and cfg not in cands:
            cands.append(cfg)
    return cands[:limit]


def dual_shortlist(
    m: int, n: int, k: int, batch: int = 1, limit: int = 4, graphs: bool = False, promote: int = PROMOTE_NONE
) -> list[GemmConfig]:
    """Configs worth benchmarking for a dual (gated) kernel with an ``n``-column output,
    best guess first.

    A dual tile's MMA is as wide as a plain tile's and its output half as wide, so the
    plain kernel's choices carry over: a 128x256 MMA tile (a 128x128 output tile, its
    two 64-column sub-tiles staged whole in the two default store buffers) with its
    pair cluster along M (B, the wider operand, multicast), and 128x128 MMA tiles
    (64 output columns) where the wide tile would leave most SMs idle. At decode size
    under CUDA graphs (``graphs``; ``decode_stream_k``) a stream-K 128x128 MMA tile
    leads, as ``shortlist``'s 128x64 one does: the same 64 output columns a tile.
    ``promote`` (an fp8 kernel's promotion mode): only configs with registers for its
    partial sums (``GemmConfig.promotion_reason``), which leaves the 128x128 MMA tiles
    and the 64x128 pingpong one.
    """
    sms = 132
    raster_m = m >= n
    square = (2, 1) if raster_m else (1, 2)
    tiles = math.ceil(m / 128) * math.ceil(n / 128) * batch
    swz = 8 if tiles >= 2 * sms else 1
    wide = [
        GemmConfig(128, 256, 2, 1, False, raster_m, swz, 64),
        GemmConfig(64, 256, 2, 1, True, raster_m, swz),
    ]
    narrow = [
        GemmConfig(128, 128, *square, True, raster_m, swz),
        GemmConfig(128, 128, *square, False, raster_m, swz),
    ]
    skinny = (
        [GemmConfig(128, 128, 1, 1, False, raster_m, 1, stream_k=True)]
        if graphs and decode_stream_k(m, math.ceil(n / 64) * batch)
        else []
    )
    if promote:
        narrow.append(GemmConfig(64, 128, 1, 1, True, raster_m, swz))
    cands: list[GemmConfig] = []
    # Too few wide tiles to give most SMs work: the narrow tiles first.
    for cfg in skinny + (wide + narrow if tiles >= sms // 2 else narrow + wide):
        # The scheduler counts MMA columns: twice the output's.
        cfg = dataclasses.replace(cfg, swizzle=fitted_swizzle(cfg, m, 2 * n))
        fits = not promote or cfg.promotion_reason(promote) is None
        if fits and cfg.invalid_reason() is None and cfg.dual_reason() is None and cfg not in cands:
            cands.append(cfg)
    return cands[:limit]
