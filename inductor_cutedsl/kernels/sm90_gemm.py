"""Warp-specialized persistent GEMM for Hopper (sm_90a) in CuTe DSL.

    D[m, n, l] = epilogue(sum_k A[m, k, l] * B[n, k, l], m, n, l, operands)

Roles: warpgroup 0 is the producer (one warp issues TMA loads of A/B tiles into
a multi-stage shared-memory ring, multicast across a 2-CTA cluster); warpgroups
1 and 2 consume with wgmma. In the cooperative schedule both consumers share one
128-row tile; in the pingpong schedule each owns a 64-row tile and the two take
turns, so one warpgroup's epilogue overlaps the other's mainloop. The epilogue
applies the hook per accumulator element, converts, stages sub-tiles in shared
memory and stores them with TMA, which also clips rows/columns past M/N (and
zero-fills loads past M/N/K), so no size needs to be a tile multiple.

An M x N epilogue input declared ``staged`` (cooperative, no stream-K) is instead
TMA-loaded, sub-tile by sub-tile, into shared memory by a second producer warp that
walks the same tiles ahead of the consumers, and read with ldmatrix in the
epilogue, where the hook then runs per sub-tile.

A dual (gated) kernel multiplies A by two B operands of the same shape, gate and up,
and stores ``epilogue((gate, up), ...)`` per output element: the producer fills each
B stage with two TMA loads, the first half of the MMA tile's columns from the gate
weight and the second half from the up weight, both at the output tile's columns.
The wgmma accumulator holds columns c and c + tile_n / 2 in the same thread, so the
hook gets each gate value with its up value in registers, and the output tile is
half as wide as the MMA tile (see ``_dual_partner``).

Tiles go to cluster slots in the persistent scheduler's order. With stream-K
(cooperative only) the last partial wave is instead split by k-iterations over
every slot, and partial sums meet through global memory (see ``_schedule``).

The host entry takes raw pointers, sizes and strides (not tensors) so that a
launch costs a few Python object constructions, and so that one compiled kernel
serves every M, N, K, L and leading dimension with the alignment it assumes.
"""
# No `from __future__ import annotations`: cute.struct reads real annotations.

import itertools
import re
import types
from collections.abc import Callable

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import Float32, Int32, Int64
from cutlass._mlir.dialects import llvm
from cutlass.memory import SmemAllocator
from cutlass.pipeline import pipeline_init_arrive, pipeline_init_wait
from cutlass.tensor_utils import LayoutEnum

from .config import (
    K_TILE_BYTES,
    MIN_STAGED_AB_STAGES,
    PROMOTE_ALTERNATE,
    PROMOTE_HALVES,
    STAGED_BUFFERS,
    GemmConfig,
    promote_reason,
)
from .dtypes import DSL_TYPES
from .epilogue import Epilogue
from .epilogue_math import materialize

DTYPES = DSL_TYPES
AB_DTYPES = ("bfloat16", "float16", "float8_e4m3fn")
# 8-bit operands: Hopper's fp8 wgmma reads both from shared memory K-major only.
FP8_DTYPES = ("float8_e4m3fn",)
# 16-byte TMA alignment, in elements.
ALIGN_BYTES = 16

_WG_THREADS = 128
_PRODUCER_REGS = 40
_CONSUMER_REGS = 232
# k-tiles before a tile's end at which its full epilogue inputs are prefetched to L2:
# enough mainloop time left to cover a DRAM round trip with every SM prefetching its
# operand tile at once, yet late enough that the tile's own A/B loads do not evict it.
_PREFETCH_LEAD_K_TILES = 8
# Stream-K shares per tail tile, on average at most: its owner reads the others' partial
# tiles (128 KiB each at 128x256) alone, before its epilogue. A share is then at least a
# quarter of a tile's k-iterations, so a tile not aligned with the shares meets one more.
# It also bounds the slots after an owner up to the last one in its tile (its peers,
# empty shares among them): they are a static window of this many (``_add_peers``).
_STREAM_K_MAX_PARTS = 4
# 128-bit loads of its peers' partial sums a thread may have in flight before it adds
# them (128 registers beside a 32-register accumulator): a 128x64 tile's runs of every
# peer, read in about one L2 round trip. Larger tiles read one peer at a time.
_STREAM_K_LOADS_IN_FLIGHT = 32
# B bytes a CTA prefetches to L2 before it waits for the previous kernel (programmatic
# dependent launch): its first k-tiles of the weight, which no earlier kernel of a
# forward pass writes. 64 KiB is a decode share's whole weight at 128x64 and, over
# 132 CTAs, a sixth of the L2.
_EARLY_PREFETCH_BYTES = 64 * 1024
# The producer warpgroup's warp that TMA-loads a staged operand (warp 0 loads A/B).
_STAGED_LOAD_WARP = 1
# Named barrier ids (0 is __syncthreads).
_BAR_EPI = 1  # +wg in pingpong
_BAR_MMA_TURN = 3  # +wg
_BAR_EPI_TURN = 5  # +wg


@cute.jit
def _store_in_bounds(t: cute.Tensor, m, n, batch, value, size_m, size_n):
    if m < size_m:
        if n < size_n:
            t[(m, n, batch)] = value


@cute.jit
def _store_pair_in_bounds(t: cute.Tensor, m, n, batch, first, second, size_m, size_n):
    """Elements (m, n) and (m, n + 1) of a 16-bit tensor with one 4-byte store (n even;
    N even, so the pair is in bounds or out together; base, M and L strides even, N
    stride 1)."""
    if m < size_m:
        if n < size_n:
            at = cute.assume(cute.crd2idx((m, n, batch), t.layout), divby=2)
            pair = cute.make_rmem_tensor(cute.make_layout(2), t.element_type)
            pair[0] = first
            pair[1] = second
            cute.make_tensor(t.iterator + at, cute.make_layout(2)).store(pair.load())


def _fragment(coords) -> tuple:
    """The wgmma accumulator fragment mode, ((2, 2, X), M, N): pairs of adjacent
    columns, two rows eight apart, X column blocks eight apart (refused otherwise)."""
    frag = coords.shape[0]
    if not (isinstance(frag, tuple) and len(frag) == 3 and frag[0] == 2 and frag[1] == 2):
        raise NotImplementedError(f"unexpected accumulator fragment {coords.shape}")
    return frag


def _load_pair(t: cute.Tensor, m, n, batch) -> tuple:
    """Elements (m, n) and (m, n + 1) of a 16-bit tensor, as Float32, from one 4-byte
    load (n even; the operand's base, M and L strides even, N stride 1)."""
    at = cute.assume(cute.crd2idx((m, n, batch), t.layout), divby=2)
    pair = cute.make_tensor(t.iterator + at, cute.make_layout(2)).load().to(Float32)
    return pair[0], pair[1]


class Sm90Gemm:
    """One kernel variant: config x dtypes x operand majors x epilogue."""

    def __init__(
        self,
        cfg: GemmConfig,
        ab_dtype: str,
        out_dtype: str,
        a_major: str,
        b_major: str,
        epilogue: Epilogue,
        dual: bool = False,
        promote: int = 0,
    ) -> None:
        if ab_dtype not in AB_DTYPES:
            raise ValueError(f"unsupported operand dtype {ab_dtype}")
        in_bytes = DTYPES[ab_dtype].width // 8
        reason = (
            cfg.invalid_reason(in_bytes, DTYPES[out_dtype].width // 8)
            or (cfg.dual_reason() if dual else None)
            or (cfg.promotion_reason(promote) if promote else None)
        )
        if reason:
            raise ValueError(f"invalid config {cfg.name()}: {reason}")
        if a_major not in ("k", "m") or b_major not in ("k", "n"):
            raise ValueError(f"bad majors a={a_major} b={b_major}")
        if ab_dtype in FP8_DTYPES and (a_major, b_major) != ("k", "k"):
            raise ValueError("8-bit operands: A and B K-major")
        if reason := promote_reason(promote, ab_dtype in FP8_DTYPES):
            raise ValueError(reason)
        self.cfg = cfg
        # With ``promote`` (1) fp8 partial sums are added into the fp32 accumulator every
        # k-tile (the fp8 wgmma keeps fewer mantissa bits than fp32: what PyTorch's
        # use_fast_accum=False asks for); 0 accumulates in the wgmma only.
        self.promote = promote
        self.ab_dtype = DTYPES[ab_dtype]
        self.out_dtype = DTYPES[out_dtype]
        self.acc_dtype = Float32
        self.a_major, self.b_major = a_major, b_major
        self.epilogue = epilogue
        self.hook = materialize(epilogue)
        self.tensor_ops = [op for op in epilogue.operands if op.is_tensor]
        # The tensor operand staged through shared memory (see EpilogueOperand.staged).
        staged = [i for i, op in enumerate(self.tensor_ops) if op.staged]
        self.staged = staged[0] if staged else None
        self.c_dtype = DTYPES[self.tensor_ops[self.staged].dtype] if staged else None
        # A staged input of the output's dtype is loaded into the output's store buffers
        # (read, then overwritten with D and stored; handed back to the loader once the
        # store has read it): no shared memory of its own, no mainloop stage lost.
        self.shares_c = bool(staged) and self.c_dtype == self.out_dtype
        if staged and (len(staged) > 1 or not cfg.stages_operands(self.out_dtype.width // 8, self.shares_c)):
            raise ValueError(
                "one staged operand per epilogue, cooperative schedule without stream-K, "
                f"at least {MIN_STAGED_AB_STAGES} mainloop stages beside it"
            )
        # A dual kernel's hook combines the two accumulator halves: never the identity.
        if dual and (epilogue.is_identity or staged):
            raise ValueError("a dual kernel needs an epilogue of (gate, up), without staged operands")
        self.dual = dual

        self.pingpong = cfg.pingpong
        self.tile_shape_mnk = (cfg.tile_m, cfg.tile_n, cfg.tile_k(in_bytes))
        # The output tile (half the MMA tile's columns in a dual kernel).
        self.out_tile_mn = (cfg.tile_m, cfg.out_tile_n(dual))
        self.cluster_shape_mn = (cfg.cluster_m, cfg.cluster_n)
        self.atom_layout_mnk = (1, 1, 1) if cfg.pingpong else (2, 1, 1)
        self.num_consumer_wg = 2
        self.threads_per_cta = (1 + self.num_consumer_wg) * _WG_THREADS
        # Threads that run one tile's epilogue together.
        self.epi_threads = _WG_THREADS if cfg.pingpong else 2 * _WG_THREADS
        self.epi_tile = cfg.epi_tile
        staged_bytes = cfg.staged_bytes(self.c_dtype.width // 8) if staged and not self.shares_c else 0
        self.ab_stage = cfg.ab_stages(in_bytes, self.out_dtype.width // 8, staged_bytes)
        self.epi_stage = cfg.epi_stages(self.out_dtype.width // 8)
        self.c_buffers = self.epi_stage if self.shares_c else STAGED_BUFFERS
        self.a_mcast = cfg.cluster_n
        self.b_mcast = cfg.cluster_m

    # ------------------------------------------------------------------ host
    def device_name(self) -> str:
        """The device kernel's symbol prefix, which profilers show: the variant's config,
        dtypes, majors and epilogue, so that each GEMM of a graph is told apart (the DSL's
        default name is the same for every variant)."""
        parts = [
            "inductor_cutedsl",
            self.cfg.name(),
            f"{self.ab_dtype}_{self.out_dtype}",
            f"a{self.a_major}b{self.b_major}",
            self.epilogue.name,
            "dual" if self.dual else "",
            f"p{self.promote}" if self.promote else "",
        ]
        return re.sub(r"[^0-9A-Za-z]+", "_", "_".join(p for p in parts if p)).strip("_")[:120]

    def make_entry(self) -> Callable:
        """A ``cute.jit`` host function with a flat signature (pointers + ints).

        Signature: a, b, d, m, n, k, l, lda, ldb, ldd, batch_a, batch_b, batch_d,
        max_clusters, programmatic (1: launched as a programmatic dependent of the
        stream's previous kernel, see ``kernel``), in a dual kernel the up weight (ptr, ld, batch stride; ``b`` is
        the gate weight), with stream-K its workspace, flags and this launch's token
        (``stream_k_buffers``), then per tensor operand (ptr, stride_m, stride_n,
        stride_l), then per scalar operand a Float32, then the stream.
        """
        params = ["a", "b", "d", "m", "n", "k", "l", "lda", "ldb", "ldd", "sa", "sb", "sd", "mc", "pdl"]
        ann = {
            "a": cute.Pointer,
            "b": cute.Pointer,
            "d": cute.Pointer,
            "m": Int32,
            "n": Int32,
            "k": Int32,
            "l": Int32,
            "lda": Int64,
            "ldb": Int64,
            "ldd": Int64,
            "sa": Int64,
            "sb": Int64,
            "sd": Int64,
            "mc": Int32,
            "pdl": Int32,
        }
        up_args = ["bu", "ldbu", "sbu"] if self.dual else []
        params += up_args
        ann.update(zip(up_args, (cute.Pointer, Int64, Int64)))
        sk_args = ["ws", "fl", "tok"] if self.cfg.stream_k else []
        params += sk_args
        ann.update(zip(sk_args, (cute.Pointer, cute.Pointer, Int64)))
        tensor_args, scalar_args = [], []
        for i, op in enumerate(self.epilogue.operands):
            if op.is_tensor:
                names = [f"o{i}", f"o{i}_sm", f"o{i}_sn", f"o{i}_sl"]
                ann.update({names[0]: cute.Pointer, **{x: Int64 for x in names[1:]}})
                tensor_args.append("(" + ", ".join(names) + ")")
            else:
                names = [f"o{i}"]
                ann[names[0]] = Float32
                scalar_args.append(names[0])
            params += names
        params.append("stream")
        ann["stream"] = cuda.CUstream
        src = (
            f"def entry({', '.join(params)}):\n"
            f"    launch(a, b, d, m, n, k, l, lda, ldb, ldd, sa, sb, sd, mc, pdl,"
            f" ({''.join(x + ', ' for x in up_args)}), ({''.join(x + ', ' for x in sk_args)}),\n"
            f"           ({''.join(x + ', ' for x in tensor_args)}),"
            f" ({''.join(x + ', ' for x in scalar_args)}), stream)\n"
        )
        scope: dict = {"launch": self._launch}
        exec(compile(src, "<sm90_gemm entry>", "exec"), scope)
        entry = scope["entry"]
        entry.__annotations__ = ann
        # The kernel function is shared by every variant: its name is set for the one
        # being traced now (compiles in a process run one at a time).
        type(self).kernel.set_name_prefix(self.device_name(), remove_cutlass_symbol=True, keep_mangled_name=False)
        return cute.jit(preprocess=False)(entry)

    def fake_args(self) -> list:
        """Placeholder arguments to compile the entry against (no GPU needed)."""

        def ptr(dtype, align):
            return cute.runtime.make_ptr(dtype, 0, cute.AddressSpace.gmem, assumed_align=align)

        args = [
            ptr(self.ab_dtype, ALIGN_BYTES),
            ptr(self.ab_dtype, ALIGN_BYTES),
            ptr(self.out_dtype, ALIGN_BYTES),
            *[Int32(1)] * 4,
            *[Int64(0)] * 6,
            Int32(1),
            Int32(0),
        ]
        if self.dual:
            args += [ptr(self.ab_dtype, ALIGN_BYTES), Int64(0), Int64(0)]
        if self.cfg.stream_k:
            args += [ptr(Float32, 16), ptr(Int64, 8), Int64(1)]
        for op in self.epilogue.operands:
            if op.is_tensor:
                args += [ptr(DTYPES[op.dtype], op.align_bytes), *[Int64(0)] * 3]
            else:
                args.append(Float32(0.0))
        args.append(cute.runtime.make_fake_stream())
        return args

    def _aligned(self, x, dtype):
        return cute.assume(x, divby=ALIGN_BYTES * 8 // dtype.width)

    def _b_stride(self, ld, batch_stride):
        return (ld, 1, batch_stride) if self.b_major == "k" else (1, ld, batch_stride)

    def _launch(self, a, b, d, m, n, k, l, lda, ldb, ldd, sa, sb, sd, mc, pdl, up, sk, tops, scalars, stream):
        ab, od = self.ab_dtype, self.out_dtype
        lda, ldb, ldd = self._aligned(lda, ab), self._aligned(ldb, ab), self._aligned(ldd, od)
        sa, sb, sd = self._aligned(sa, ab), self._aligned(sb, ab), self._aligned(sd, od)
        a_stride = (lda, 1, sa) if self.a_major == "k" else (1, lda, sa)
        b_stride = self._b_stride(ldb, sb)
        mA = cute.make_tensor(a, cute.make_layout((m, k, l), stride=a_stride))
        mB = cute.make_tensor(b, cute.make_layout((n, k, l), stride=b_stride))
        mD = cute.make_tensor(d, cute.make_layout((m, n, l), stride=(ldd, 1, sd)))
        ep_tensors = []
        for (ptr, s_m, s_n, s_l), op in zip(tops, self.tensor_ops):
            stride = (
                0 if op.kind in ("row", "one") else s_m,
                0 if op.kind in ("col", "one") else s_n,
                0 if op.kind == "one" else s_l,
            )
            if cutlass.const_expr(op.pairs):
                stride = (cute.assume(s_m, divby=2), 1, cute.assume(s_l, divby=2))
            if cutlass.const_expr(op.staged):  # TMA: 16-byte strides (runtime.support checks)
                stride = (self._aligned(s_m, DTYPES[op.dtype]), 1, self._aligned(s_l, DTYPES[op.dtype]))
            ep_tensors.append(cute.make_tensor(ptr, cute.make_layout((m, n, l), stride=stride)))

        a_layout = LayoutEnum.ROW_MAJOR if self.a_major == "k" else LayoutEnum.COL_MAJOR
        b_layout = LayoutEnum.ROW_MAJOR if self.b_major == "k" else LayoutEnum.COL_MAJOR
        tiled_mma = sm90_utils.make_trivial_tiled_mma(
            ab,
            ab,
            a_layout.sm90_mma_major_mode(),
            b_layout.sm90_mma_major_mode(),
            self.acc_dtype,
            self.atom_layout_mnk,
            tiler_mn=(64, self.tile_shape_mnk[1]),
        )
        a_smem, b_smem, d_smem = self._smem_layouts(a_layout, b_layout)
        tma_a, tma_tA = self._tma_load(mA, a_smem, (self.tile_shape_mnk[0], self.tile_shape_mnk[2]), self.a_mcast)
        # The up weight's TMA load atom, else nothing.
        up_load = ()
        if cutlass.const_expr(self.dual):
            # Each B load fills half a stage: tile_n / 2 columns of one weight, in the
            # layout of the stage's first tile_n / 2 rows (the same swizzle atom).
            tn, tk = self.tile_shape_mnk[1], self.tile_shape_mnk[2]
            half = self._ab_smem(b_layout, tn // 2, tk if self.b_major == "k" else tn, self.b_major == "k")
            tma_b, tma_tB = self._tma_load(mB, half, (tn // 2, tk), self.b_mcast)
            bu, ldbu, sbu = up
            bu_stride = self._b_stride(self._aligned(ldbu, ab), self._aligned(sbu, ab))
            mBu = cute.make_tensor(bu, cute.make_layout((n, k, l), stride=bu_stride))
            tma_bu, tma_tBu = self._tma_load(mBu, half, (tn // 2, tk), self.b_mcast)
            up_load = (tma_bu, tma_tBu)
        else:
            tma_b, tma_tB = self._tma_load(mB, b_smem, (self.tile_shape_mnk[1], self.tile_shape_mnk[2]), self.b_mcast)
        tma_d, tma_tD = cute.nvgpu.cpasync.make_tiled_tma_atom(
            cute.nvgpu.cpasync.CopyBulkTensorTileS2GOp(),
            mD,
            cute.slice_(d_smem, (None, None, 0)),
            self.epi_tile,
        )
        # A staged operand: its TMA load atom and shared-memory layout, else nothing.
        staged = ()
        if cutlass.const_expr(self.staged is not None):
            c_smem = self._epi_smem(self.c_dtype, self.c_buffers)
            tma_c, tma_tC = cute.nvgpu.cpasync.make_tiled_tma_atom(
                cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp(),
                ep_tensors[self.staged],
                cute.slice_(c_smem, (None, None, 0)),
                self.epi_tile,
            )
            staged = (tma_c, tma_tC, c_smem)
        ntiles = cute.ceil_div((m, n, l), (*self.out_tile_mn, 1))
        sched = utils.PersistentTileSchedulerParams(
            ntiles, (*self.cluster_shape_mn, 1), self.cfg.swizzle, self.cfg.raster_along_m
        )
        grid = utils.StaticPersistentTileScheduler.get_grid_shape(sched, mc)

        self.shared_storage = self._storage(a_smem, b_smem, d_smem, staged[2] if staged else None)
        # Stream-K's partial sums (fp32, a tile per CTA), per-CTA flags (int64, never
        # zeroed by the launch) and the launch's token (``_publish_partial``).
        sk_buffers = (*(cute.make_tensor(p, cute.make_layout(1)) for p in sk[:2]), *sk[2:])
        self.kernel(
            tma_a,
            tma_tA,
            tma_b,
            tma_tB,
            up_load,
            tma_d,
            tma_tD,
            staged,
            tuple(ep_tensors),
            tuple(scalars),
            sk_buffers,
            tiled_mma,
            cute.make_layout((*self.cluster_shape_mn, 1)),
            a_smem,
            b_smem,
            d_smem,
            sched,
            pdl,
        ).launch(
            grid=grid,
            block=[self.threads_per_cta, 1, 1],
            cluster=(*self.cluster_shape_mn, 1),
            min_blocks_per_mp=1,
            stream=stream,
            use_pdl=pdl,
        )

    def _storage(self, a_smem, b_smem, d_smem, c_smem):
        """The shared-memory struct: pipeline barriers, then the A/B stages and the store
        buffers; a staged input adds its pipeline's barriers and (unless it shares the
        store buffers) buffers of its own (``c_smem``)."""

        def buffer(dtype, layout):
            return cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(layout)], 1024]

        staged = self.staged is not None
        fields = {"ab_barriers": cute.struct.MemRange[cutlass.Int64, self.ab_stage * 2]}
        if staged:
            fields["c_barriers"] = cute.struct.MemRange[cutlass.Int64, self.c_buffers * 2]
        fields.update(
            sA=buffer(self.ab_dtype, a_smem), sB=buffer(self.ab_dtype, b_smem), sD=buffer(self.out_dtype, d_smem)
        )
        if staged and not self.shares_c:
            fields["sC"] = buffer(self.c_dtype, c_smem)
        return cute.struct(type("SharedStorage", (), {"__annotations__": fields}))

    def _smem_layouts(self, a_layout, b_layout):
        tm, tn, tk = self.tile_shape_mnk
        a_smem = self._ab_smem(a_layout, tm, tk if self.a_major == "k" else tm, self.a_major == "k")
        b_smem = self._ab_smem(b_layout, tn, tk if self.b_major == "k" else tn, self.b_major == "k")
        return a_smem, b_smem, self._epi_smem(self.out_dtype, self.epi_stage)

    def _ab_smem(self, layout_enum, rows, major_size, k_major):
        """A mainloop operand's staged shared-memory layout, (rows, tile_k, stages), its
        swizzle atom chosen for ``major_size`` contiguous elements."""
        ab, tk = self.ab_dtype, self.tile_shape_mnk[2]
        atom = cute.nvgpu.warpgroup.make_smem_layout_atom(
            sm90_utils.get_smem_layout_atom(layout_enum, ab, major_size), ab
        )
        return cute.tile_to_shape(atom, (rows, tk, self.ab_stage), order=(0, 1, 2) if k_major else (1, 0, 2))

    def _epi_smem(self, dtype, stages: int):
        """Row-major epilogue sub-tile buffers (the output's staging, a staged operand's)."""
        em, en = self.epi_tile
        atom = cute.nvgpu.warpgroup.make_smem_layout_atom(
            sm90_utils.get_smem_layout_atom(LayoutEnum.ROW_MAJOR, dtype, en), dtype
        )
        return cute.tile_to_shape(atom, (em, en, stages), order=(0, 1, 2))

    @staticmethod
    def _tma_load(tensor, smem_staged, tile, mcast):
        op = (
            cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp()
            if mcast == 1
            else cute.nvgpu.cpasync.CopyBulkTensorTileG2SMulticastOp()
        )
        return cute.nvgpu.cpasync.make_tiled_tma_atom(
            op, tensor, cute.slice_(smem_staged, (None, None, 0)), tile, num_multicast=mcast
        )

    # ---------------------------------------------------------------- device
    @cute.kernel
    def kernel(
        self,
        tma_a: cute.CopyAtom,
        mA: cute.Tensor,
        tma_b: cute.CopyAtom,
        mB: cute.Tensor,
        up_load: tuple,
        tma_d: cute.CopyAtom,
        mD: cute.Tensor,
        staged: tuple,
        ep_tensors: tuple,
        ep_scalars: tuple,
        sk_buffers: tuple,
        tiled_mma: cute.TiledMma,
        cta_layout: cute.Layout,
        a_smem: cute.ComposedLayout,
        b_smem: cute.ComposedLayout,
        d_smem: cute.ComposedLayout,
        sched_params: utils.PersistentTileSchedulerParams,
        programmatic: Int32,
    ):
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp_idx == 0:
            cute.nvgpu.cpasync.prefetch_descriptor(tma_a)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_b)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_d)
            if cutlass.const_expr(self.dual):
                cute.nvgpu.cpasync.prefetch_descriptor(up_load[0])

        cta_rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        cluster_coord = cta_layout.get_flat_coord(cta_rank)
        a_mask = cute.make_layout_image_mask(cta_layout, cluster_coord, mode=1)
        b_mask = cute.make_layout_image_mask(cta_layout, cluster_coord, mode=0)
        a_mask = a_mask if cutlass.const_expr(self.a_mcast > 1) else 0
        b_mask = b_mask if cutlass.const_expr(self.b_mcast > 1) else 0

        smem = SmemAllocator()
        storage = smem.allocate(self.shared_storage)
        tx_bytes = cute.size_in_bytes(self.ab_dtype, cute.slice_(a_smem, (None, None, 0))) + cute.size_in_bytes(
            self.ab_dtype, cute.slice_(b_smem, (None, None, 0))
        )
        # Each consumer warp releases a stage to every CTA that multicast into it.
        # In pingpong one warpgroup consumes a given stage, cooperative both.
        consumer_warps = 4 if cutlass.const_expr(self.pingpong) else 4 * self.num_consumer_wg
        ab_pipe = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.ab_barriers.data_ptr(),
            num_stages=self.ab_stage,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(
                pipeline.Agent.Thread, consumer_warps * (self.a_mcast + self.b_mcast - 1)
            ),
            tx_count=tx_bytes,
            cta_layout_vmnk=cute.make_layout((1, *cta_layout.shape)),
            defer_sync=True,
        )
        # A staged operand's sub-tiles: loaded by one producer warp, read by every
        # consumer warp (CTA-local: never multicast).
        c_load = None
        if cutlass.const_expr(self.staged is not None):
            tma_c, mC, c_smem = staged
            # Released by every consumer warp once read, or (shared with the store
            # buffers) by the store warp once its TMA store has read the buffer.
            c_pipe = pipeline.PipelineTmaAsync.create(
                barrier_storage=storage.c_barriers.data_ptr(),
                num_stages=self.c_buffers,
                producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
                consumer_group=pipeline.CooperativeGroup(
                    pipeline.Agent.Thread, 1 if self.shares_c else 4 * self.num_consumer_wg
                ),
                tx_count=cute.size_in_bytes(self.c_dtype, cute.slice_(c_smem, (None, None, 0))),
                defer_sync=True,
            )
            c_storage = storage.sD if cutlass.const_expr(self.shares_c) else storage.sC
            sC = c_storage.get_tensor(c_smem.outer, swizzle=c_smem.inner)
            c_load = (
                tma_c,
                c_pipe,
                sC,
                cute.local_tile(mC, cute.slice_(self.tile_shape_mnk, (None, None, 0)), (None, None, None)),
            )
        pipeline_init_arrive(cluster_shape_mn=self.cluster_shape_mn, is_relaxed=True)

        sA = storage.sA.get_tensor(a_smem.outer, swizzle=a_smem.inner)
        sB = storage.sB.get_tensor(b_smem.outer, swizzle=b_smem.inner)
        sD = storage.sD.get_tensor(d_smem.outer, swizzle=d_smem.inner)

        tile_mk = cute.slice_(self.tile_shape_mnk, (None, 0, None))
        # A dual kernel's weights each fill half of B's MMA tile, as wide as D's tile.
        tile_nk = (self.out_tile_mn[1], self.tile_shape_mnk[2])
        tile_mn = self.out_tile_mn
        gA = cute.local_tile(mA, tile_mk, (None, None, None))  # (bM, bK, RestM, RestK, L)
        gB = cute.local_tile(mB, tile_nk, (None, None, None))  # (bN, bK, RestN, RestK, L)
        gD = cute.local_tile(mD, tile_mn, (None, None, None))  # (bM, bN, RestM, RestN, L)
        # Global (m, n) coordinates of every output element, tiled the same way.
        cD = cute.local_tile(cute.make_identity_tensor((mD.shape[0], mD.shape[1])), tile_mn, (None, None))

        tAsA, tAgA = cute.nvgpu.cpasync.tma_partition(
            tma_a,
            cluster_coord[1],
            cute.make_layout(cute.slice_(cta_layout, (0, None, 0)).shape),
            cute.group_modes(sA, 0, 2),
            cute.group_modes(gA, 0, 2),
        )
        b_cta_layout = cute.make_layout(cute.slice_(cta_layout, (None, 0, 0)).shape)
        # The up weight's loads (dual only): its partitioned stage halves and tiles.
        up_loads = ()
        if cutlass.const_expr(self.dual):
            # The gate weight loads into the first half of each stage's rows, the up
            # weight into the second: (bN / 2, bK, half, 1, stage).
            halves = cute.flat_divide(sB, (self.out_tile_mn[1], self.tile_shape_mnk[2]))
            tma_bu, mBu = up_load
            gBu = cute.local_tile(mBu, tile_nk, (None, None, None))
            tBsB, tBgB = cute.nvgpu.cpasync.tma_partition(
                tma_b,
                cluster_coord[0],
                b_cta_layout,
                cute.group_modes(halves[(None, None, 0, 0, None)], 0, 2),
                cute.group_modes(gB, 0, 2),
            )
            tBusB, tBugB = cute.nvgpu.cpasync.tma_partition(
                tma_bu,
                cluster_coord[0],
                b_cta_layout,
                cute.group_modes(halves[(None, None, 1, 0, None)], 0, 2),
                cute.group_modes(gBu, 0, 2),
            )
            up_loads = (tma_bu, tBusB, tBugB)
        else:
            tBsB, tBgB = cute.nvgpu.cpasync.tma_partition(
                tma_b,
                cluster_coord[0],
                b_cta_layout,
                cute.group_modes(sB, 0, 2),
                cute.group_modes(gB, 0, 2),
            )
        k_tiles = cute.size(gA, mode=[3])
        # Launched as a programmatic dependent (``make_entry``'s ``pdl``), this grid may
        # start while the stream's previous kernel still runs. Nothing here reads or
        # writes global memory before the wait below, which returns once that kernel
        # has finished and its writes are visible, but the L2 prefetch of the first B
        # k-tiles: the L2 is the GPU's point of coherence, so a line prefetched before
        # its writer finished is updated by the write, never read stale. Every thread
        # waits, so this grid cannot end before the previous one (a later dependent's
        # wait covers both). Dependents may launch at once: they wait the same way.
        # Launched plainly, the wait and the trigger do nothing, and nothing is
        # prefetched: the mainloop's own loads follow at once.
        if (warp_idx == 0) & (programmatic != 0):
            self._prefetch_first_b(sched_params, tma_b, tBgB, up_loads, k_tiles)
        cute.arch.griddepcontrol_wait()
        cute.arch.griddepcontrol_launch_dependents()
        pipeline_init_wait(cluster_shape_mn=self.cluster_shape_mn)

        wg_idx = cute.arch.make_warp_uniform(tidx // _WG_THREADS)
        if wg_idx == 0:
            cute.arch.setmaxregister_decrease(_PRODUCER_REGS)
            if warp_idx == 0:
                self._produce(
                    ab_pipe, sched_params, tma_a, tAsA, tAgA, a_mask, tma_b, tBsB, tBgB, b_mask, up_loads, k_tiles
                )
            if cutlass.const_expr(self.staged is not None):
                if warp_idx == _STAGED_LOAD_WARP:
                    self._produce_staged(c_load, sched_params)
        else:
            cute.arch.setmaxregister_increase(_CONSUMER_REGS)
            self._consume(
                ab_pipe,
                sched_params,
                tiled_mma,
                sA,
                sB,
                sD,
                gD,
                cD,
                tma_d,
                c_load,
                ep_tensors,
                ep_scalars,
                sk_buffers,
                k_tiles,
                wg_idx - 1,
                tidx - _WG_THREADS,
                warp_idx,
                mD.shape[0],
                mD.shape[1],
            )

    # --------------------------------------------------------------- schedule
    def _schedule(self, sched, k_tiles):
        """The tile schedule beyond the persistent scheduler's own order.

        Returns (tiles each cluster slot takes whole, linear index of the first tail
        tile, this slot's [start, end) of the tail's k-iterations, the slot, how many
        slots share the tail, the tail's iteration count). Without stream-K every tile
        is taken whole (the first count is never reached) and the tail is empty. With
        it, the tiles of the last partial wave are not taken whole: their k-iterations
        are split evenly over the first ``sharers`` slots (each share is under one
        tile), and a tile's partial sums meet in the slot that computes its first
        k-iteration. The tail is split into at most ``_STREAM_K_MAX_PARTS`` shares per
        tile, so at most one more meets in a tile (one not aligned with the shares) and
        no slot sums more than a few partial tiles alone (one tail tile over 66 slots
        would have one slot read 65).
        """
        slots = sched.num_persistent_clusters
        tiles = cute.size(sched.params.problem_layout_ncluster_mnl)
        slot = cute.arch.block_idx()[2]  # the scheduler's first linear index
        if cutlass.const_expr(not self.cfg.stream_k):
            return tiles, tiles, Int32(0), Int32(0), slot, slots, Int32(0)
        whole = tiles // slots
        first = whole * slots
        iters = (tiles - first) * k_tiles
        # At least one, so that a problem without a tail divides by something.
        sharers = cutlass.max(cutlass.min(slots, (tiles - first) * _STREAM_K_MAX_PARTS), 1)
        start = self._share_start(slot, sharers, iters)
        end = self._share_start(slot + 1, sharers, iters)
        return whole, first, start, end, slot, sharers, iters

    @staticmethod
    def _share_start(slot, sharers, iters):
        """The first tail iteration of ``slot``'s share (``iters`` once past the sharers)."""
        return cutlass.min(slot, sharers) * iters // sharers

    @staticmethod
    def _slot_of(iteration, sharers, iters):
        """The slot whose share of the tail holds ``iteration`` (the inverse of
        ``_share_start`` over the sharers)."""
        return ((iteration + 1) * sharers + iters - 1) // iters - 1

    @cute.jit
    def _produce(self, ab_pipe, sched_params, tma_a, tAsA, tAgA, a_mask, tma_b, tBsB, tBgB, b_mask, up_loads, k_tiles):
        sched = utils.StaticPersistentTileScheduler.create(sched_params, cute.arch.block_idx(), cute.arch.grid_dim())
        whole, first, start, end, _, _, _ = self._schedule(sched, k_tiles)
        loads = (tma_a, tAsA, tAgA, a_mask, tma_b, tBsB, tBgB, b_mask, up_loads)
        work = sched.initial_work_tile_info()
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.ab_stage)
        taken = Int32(0)
        while work.is_valid_tile & (taken < whole):
            state = self._load(ab_pipe, state, work.tile_idx, Int32(0), k_tiles, loads)
            sched.advance_to_next_work()
            work = sched.get_current_work()
            taken += 1
        it = start
        while it < end:  # stream-K share (empty without stream-K)
            r = it // k_tiles
            k0 = it - r * k_tiles
            k1 = cutlass.min(k_tiles, k0 + end - it)
            tc = sched._get_current_work_for_linear_idx(first + r).tile_idx
            state = self._load(ab_pipe, state, tc, k0, k1, loads)
            it += k1 - k0
        ab_pipe.producer_tail(state)

    @cute.jit
    def _produce_staged(self, c_load, sched_params):
        """TMA-load the staged operand's sub-tiles of every tile of this CTA, in the
        order its epilogue reads them, as far ahead as the buffers allow: a tile's
        first sub-tiles arrive while its mainloop still runs."""
        tma_c, c_pipe, sC, gC = c_load
        cute.nvgpu.cpasync.prefetch_descriptor(tma_c)
        sched = utils.StaticPersistentTileScheduler.create(sched_params, cute.arch.block_idx(), cute.arch.grid_dim())
        work = sched.initial_work_tile_info()
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.c_buffers)
        epi_m = self.tile_shape_mnk[0] // self.epi_tile[0]
        epi_n = self.tile_shape_mnk[1] // self.epi_tile[1]
        while work.is_valid_tile:
            tc = work.tile_idx
            sC_part, gC_part = cute.nvgpu.cpasync.tma_partition(
                tma_c,
                0,
                cute.make_layout(1),
                cute.group_modes(sC, 0, 2),
                cute.zipped_divide(gC[(None, None, *tc)], self.epi_tile),
            )
            for em in cutlass.range_constexpr(epi_m):
                for en in cutlass.range_constexpr(epi_n):
                    c_pipe.producer_acquire(state)
                    cute.copy(
                        tma_c,
                        gC_part[(None, (em, en))],
                        sC_part[(None, state.index)],
                        tma_bar_ptr=c_pipe.producer_get_barrier(state),
                    )
                    c_pipe.producer_commit(state)
                    state.advance()
            sched.advance_to_next_work()
            work = sched.get_current_work()
        c_pipe.producer_tail(state)

    @cute.jit
    def _prefetch_first_b(self, sched_params, tma_b, tBgB, up_loads, k_tiles):
        """Prefetch to L2 the B k-tiles this CTA loads first (``_EARLY_PREFETCH_BYTES``
        at most): its first whole tile's, else the first tile of its stream-K share."""
        sched = utils.StaticPersistentTileScheduler.create(sched_params, cute.arch.block_idx(), cute.arch.grid_dim())
        whole, first, start, end, _, _, _ = self._schedule(sched, k_tiles)
        work = sched.initial_work_tile_info()
        if work.is_valid_tile & (whole > 0):
            self._prefetch_b(tma_b, tBgB, up_loads, work.tile_idx, Int32(0), k_tiles)
        if cutlass.const_expr(self.cfg.stream_k):
            if (whole == 0) & (start < end):
                r = start // k_tiles
                k0 = start - r * k_tiles
                tc = sched._get_current_work_for_linear_idx(first + r).tile_idx
                self._prefetch_b(tma_b, tBgB, up_loads, tc, k0, cutlass.min(k_tiles, k0 + end - start))

    @cute.jit
    def _prefetch_b(self, tma_b, tBgB, up_loads, tc, k0, k1):
        """Prefetch to L2 k-tiles [k0, k1) of tile ``tc``'s B (a dual kernel's two
        weights), as many as ``_EARLY_PREFETCH_BYTES`` holds."""
        # A k-tile of B is 128 bytes of each of its rows; a CTA loads its share of the
        # rows that the cluster multicasts.
        b_bytes = self.out_tile_mn[1] * (2 if self.dual else 1) * K_TILE_BYTES // self.b_mcast
        most = max(1, _EARLY_PREFETCH_BYTES // b_bytes)
        tBgB_t = tBgB[(None, tc[1], None, tc[2])]
        for kt in range(k0, cutlass.min(k1, k0 + most)):
            cute.prefetch(tma_b, tBgB_t[(None, kt)])
            if cutlass.const_expr(self.dual):
                cute.prefetch(up_loads[0], up_loads[2][(None, tc[1], kt, tc[2])])

    @cute.jit
    def _load(self, ab_pipe, state, tc, k0, k1, loads):
        """Issue the TMA loads of k-tiles [k0, k1) of tile ``tc`` (in a dual kernel, B's
        two halves: both count toward the stage's expected bytes, and multicast alike)."""
        tma_a, tAsA, tAgA, a_mask, tma_b, tBsB, tBgB, b_mask, up_loads = loads
        tAgA_t = tAgA[(None, tc[0], None, tc[2])]
        tBgB_t = tBgB[(None, tc[1], None, tc[2])]
        tBugB_t = up_loads[2][(None, tc[1], None, tc[2])] if cutlass.const_expr(self.dual) else None
        for kt in range(k0, k1):
            ab_pipe.producer_acquire(state)
            bar = ab_pipe.producer_get_barrier(state)
            cute.copy(tma_a, tAgA_t[(None, kt)], tAsA[(None, state.index)], tma_bar_ptr=bar, mcast_mask=a_mask)
            cute.copy(tma_b, tBgB_t[(None, kt)], tBsB[(None, state.index)], tma_bar_ptr=bar, mcast_mask=b_mask)
            if cutlass.const_expr(self.dual):
                cute.copy(
                    up_loads[0],
                    tBugB_t[(None, kt)],
                    up_loads[1][(None, state.index)],
                    tma_bar_ptr=bar,
                    mcast_mask=b_mask,
                )
            ab_pipe.producer_commit(state)
            state.advance()
        return state

    def _turn_wait(self, base: int, wg):
        cute.arch.barrier(barrier_id=base + wg, number_of_threads=2 * _WG_THREADS)

    def _turn_pass(self, base: int, wg):
        cute.arch.barrier_arrive(barrier_id=base + wg, number_of_threads=2 * _WG_THREADS)

    @cute.jit
    def _consume(
        self,
        ab_pipe,
        sched_params,
        tiled_mma,
        sA,
        sB,
        sD,
        gD,
        cD,
        tma_d,
        c_load,
        ep_tensors,
        ep_scalars,
        sk_buffers,
        k_tiles,
        wg,
        ctidx,
        warp_idx,
        size_m,
        size_n,
    ):
        pingpong = cutlass.const_expr(self.pingpong)
        # Thread index within the threads that share a tile.
        etidx = ctidx - wg * _WG_THREADS if pingpong else ctidx
        # In pingpong each warpgroup owns the whole (64-row) tile: slice 0.
        thr_mma = tiled_mma.get_slice(0 if pingpong else wg * _WG_THREADS)
        tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))
        tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
        if cutlass.const_expr(self.dual):
            # The MMA tile, twice as wide as the output tile (gD).
            acc_shape = thr_mma.partition_C(cute.make_identity_tensor(self.tile_shape_mnk[:2])).shape
            self._dual_partner(tiled_mma)
        else:
            acc_shape = thr_mma.partition_C(gD).shape[:3]
        acc = cute.make_rmem_tensor(acc_shape, self.acc_dtype)
        # What a promotion mode of its own multiplies with (its mainloop unpacks it).
        promotion, part = None, None
        if cutlass.const_expr(self.promote == PROMOTE_HALVES):
            promotion = self._half_mmas(tiled_mma, sA, sB, wg, pingpong)
        elif cutlass.const_expr(self.promote == PROMOTE_ALTERNATE):
            promotion = self._alternate_mma(sA, sB, wg, pingpong, acc_shape)
        else:
            # What the wgmmas accumulate into: the accumulator itself, or (promoting fp8
            # partial sums) a second one added into it after every k-tile.
            part = cute.make_rmem_tensor(acc_shape, self.acc_dtype) if cutlass.const_expr(self.promote) else acc
        # Every wgmma accumulates (each tile starts from a zero-filled acc). Set once, here:
        # a value staged inside the tile loops could not be used after them.
        tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)
        mma = (tiled_mma, tCrA, tCrB, acc, cute.size(tCrA, mode=[2]), part, promotion)

        # Epilogue: registers -> smem (stmatrix for 16-bit D) -> gmem (TMA store).
        # Sub-tiles are carved out of the accumulator with the 16-bit copy's register
        # layout (``geo``); the real copy (``r2s``) may group values differently (fp32 D)
        # but walks the same elements in the same flat order.
        d_layout = LayoutEnum.ROW_MAJOR
        c_atom = cute.make_tiled_copy_C_atom(
            cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(False, 4), cutlass.Float16),
            tiled_mma,
        )
        geo_dtype = self.out_dtype if cutlass.const_expr(self.out_dtype.width == 16) else cutlass.Float16

        def tiled_store(dtype):
            op = sm90_utils.sm90_get_smem_store_op(d_layout, elem_ty_d=dtype, elem_ty_acc=self.acc_dtype)
            return cute.make_tiled_copy_S(op, c_atom)

        geo, r2s = tiled_store(geo_dtype), tiled_store(self.out_dtype)
        thr_r2s = r2s.get_slice(etidx)
        tRS_acc = geo.retile(acc)
        tRS_rD = cute.make_rmem_tensor(
            geo.get_slice(etidx).partition_S(cute.make_identity_tensor(self.epi_tile)).shape,
            self.acc_dtype,
        )
        tRS_rOut = cute.make_rmem_tensor(cute.shape(thr_r2s.partition_S(sD))[:3], self.out_dtype)
        if cutlass.const_expr(cute.size(tRS_rOut) != cute.size(tRS_rD)):
            raise NotImplementedError("store and sub-tile fragments differ in size")
        epi_m = self.tile_shape_mnk[0] // self.epi_tile[0]
        epi_n = self.out_tile_mn[1] // self.epi_tile[1]
        epi_bar = pipeline.NamedBarrier(barrier_id=_BAR_EPI + (wg if pingpong else 0), num_threads=self.epi_threads)
        store_warp = 4 * (1 + wg) if pingpong else 4
        # One barrier per sub-tile: before it, the store warp waits until at most
        # epi_stage - 2 stores still read shared memory, so the buffer written after it
        # (used epi_stage sub-tiles ago) is free. Hence epi_stage - 1 pipeline stages.
        store_pipe = pipeline.PipelineTmaStore.create(
            num_stages=self.epi_stage - 1,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.epi_threads),
        )
        epi = types.SimpleNamespace(
            r2s=r2s,
            tRS_sD=thr_r2s.partition_D(sD),
            tRS_acc=tRS_acc,
            tRS_rD=tRS_rD,
            tRS_rOut=tRS_rOut,
            # A dual kernel's accumulator holds two output tiles' columns (gate, up).
            geometry=self._subtile_geometry(tRS_acc, tRS_rD, epi_m, epi_n * (2 if self.dual else 1)),
            epi_m=epi_m,
            epi_n=epi_n,
            bar=epi_bar,
            store_pipe=store_pipe,
            store_warp=store_warp,
            warp_idx=warp_idx,
            tma_d=tma_d,
            sD=sD,
            gD=gD,
            ep_tensors=ep_tensors,
            ep_scalars=ep_scalars,
            size_m=size_m,
            size_n=size_n,
            geo=geo,
        )
        if cutlass.const_expr(self.staged is not None):
            # The staged operand's sub-tile, read from shared memory with ldmatrix in
            # the layout the output's stmatrix writes (so element v of the fragment
            # below is element v of tRS_rD).
            s2r = cute.make_tiled_copy_S(
                cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(False, 4), self.c_dtype), c_atom
            )
            thr_s2r = s2r.get_slice(etidx)
            tRS_rC = cute.make_rmem_tensor(tRS_rD.layout, self.c_dtype)
            epi.s2r, epi.c_pipe = s2r, c_load[1]
            epi.tSR_sC, epi.tRS_rC, epi.tSR_rC = thr_s2r.partition_S(c_load[2]), tRS_rC, thr_s2r.retile(tRS_rC)

        sched = utils.StaticPersistentTileScheduler.create(sched_params, cute.arch.block_idx(), cute.arch.grid_dim())
        whole, first, start, end, slot, sharers, iters = self._schedule(sched, k_tiles)
        work = sched.initial_work_tile_info()
        read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.ab_stage)
        release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.ab_stage)
        if cutlass.const_expr(pingpong):
            if wg == 1:
                # The second warpgroup starts at the CTA's second tile.
                read.advance(k_tiles)
                release.advance(k_tiles)
                sched.advance_to_next_work()
                work = sched.get_current_work()
            else:
                self._turn_pass(_BAR_MMA_TURN, 0)
                self._turn_pass(_BAR_EPI_TURN, 0)
        epi_count = Int32(0)

        taken = Int32(0)
        while work.is_valid_tile & (taken < whole):
            tc = work.tile_idx
            # Global (m, n) of each accumulator element, from the MMA's own C partition.
            tCcD = tiled_mma.get_slice(etidx).partition_C(self._mma_coords(cD, tc))
            if cutlass.const_expr(pingpong):
                self._turn_wait(_BAR_MMA_TURN, wg)
            read, release = self._mainloop(ab_pipe, mma, read, release, Int32(0), k_tiles, tCcD, tc, wg, epi)
            if cutlass.const_expr(pingpong):
                self._turn_wait(_BAR_EPI_TURN, wg)
            epi_count = self._epilogue(epi, acc, tCcD, tc, epi_count)
            if cutlass.const_expr(pingpong):
                # The two warpgroups share the staging buffers: drain before passing the turn.
                if warp_idx == store_warp:
                    store_pipe.producer_tail()
                self._turn_pass(_BAR_EPI_TURN, 1 - wg)
                read.advance(k_tiles)
                release.advance(k_tiles)
                sched.advance_to_next_work(advance_count=2)
            else:
                sched.advance_to_next_work()
            work = sched.get_current_work()
            taken += 1

        if cutlass.const_expr(self.cfg.stream_k):
            # This slot's share of the last wave: a contributor part of one tile first
            # (published for that tile's first slot), then the first k-iterations of
            # the next (summed with the parts published for it, then stored).
            rank = cute.arch.block_idx_in_cluster()  # partials pair CTAs of equal rank
            cta = self._slot_cta(slot, rank)
            it = start
            while it < end:
                r = it // k_tiles
                k0 = it - r * k_tiles
                k1 = cutlass.min(k_tiles, k0 + end - it)
                tc = sched._get_current_work_for_linear_idx(first + r).tile_idx
                tCcD = tiled_mma.get_slice(etidx).partition_C(self._mma_coords(cD, tc))
                read, release = self._mainloop(ab_pipe, mma, read, release, k0, k1, tCcD, tc, wg, epi)
                if k0 > 0:
                    self._publish_partial(acc, sk_buffers, cta, etidx, epi_bar, tCcD, epi.size_m)
                else:
                    last = self._slot_of((r + 1) * k_tiles - 1, sharers, iters)
                    shares = (last, sharers, iters)
                    self._add_peers(acc, sk_buffers, slot, rank, shares, etidx, epi_bar, tCcD, epi.size_m)
                    epi_count = self._epilogue(epi, acc, tCcD, tc, epi_count)
                it += k1 - k0

        if warp_idx == store_warp:
            store_pipe.producer_tail()

    def _mma_coords(self, cD, tc):
        """Global (m, n) of each element of tile ``tc``'s MMA tile. In a dual kernel the
        MMA tile is twice as wide as the output tile: its first half (gate) has the
        output tile's coordinates, the second half's run on past it and are never used
        (each up value is read beside its gate value, see ``_dual_partner``)."""
        if not self.dual:
            return cD[(None, None, tc[0], tc[1])]
        origin = (tc[0] * self.out_tile_mn[0], tc[1] * self.out_tile_mn[1])
        return cute.domain_offset(origin, cute.make_identity_tensor(self.tile_shape_mnk[:2]))

    def _dual_partner(self, tiled_mma):
        """Check, at trace time, the pairing a dual epilogue relies on: accumulator value
        ((p, h, c), i, j) holds MMA column n < tile_n / 2 (gate) and value
        ((p, h, c + X / 2), i, j) of the same thread column n + tile_n / 2 (up), in the
        same row. (m64nNk16 wgmma: per 8-column block a thread holds two adjacent
        columns of two rows; one MMA atom spans the tile's N, so X = tile_n / 8.)
        A thread's coordinates are its first value's plus a static offset per value,
        so thread 0's static coordinates decide for all."""
        tm, tn = self.tile_shape_mnk[:2]
        coords = tiled_mma.get_slice(0).partition_C(cute.make_identity_tensor((tm, tn)))
        frag = _fragment(coords)
        half = frag[2] // 2
        ok = frag[2] % 2 == 0 and cute.size(coords, mode=[2]) == 1
        for i in range(cute.size(coords, mode=[1]) if ok else 0):
            for p, h, c in itertools.product(range(2), range(2), range(half)):
                m, n = coords[((p, h, c), i, 0)]
                ok = ok and n < tn // 2 and tuple(coords[((p, h, c + half), i, 0)]) == (m, n + tn // 2)
        if not ok:
            raise NotImplementedError(f"accumulator {coords.layout} does not pair column n with n + {tn // 2}")

    def _hook_columns(self, frag) -> int:
        """Accumulator column blocks the hook runs on: in a dual kernel the gate half."""
        return frag[2] // 2 if self.dual else frag[2]

    def _half_mmas(self, tiled_mma, sA, sB, wg, pingpong):
        """What ``PROMOTE_HALVES`` multiplies with: an MMA over half the tile's columns,
        its A and B fragments of each column half of B's stages, a partial-sum
        accumulator per half and, per half, the (partial sum, accumulator) index pairs
        of each value (``_half_pairs``)."""
        tm, tn, tk = self.tile_shape_mnk
        half_mma, thr = self._kmajor_mma(tn // 2, wg, pingpong)
        hA = half_mma.make_fragment_A(thr.partition_A(sA))
        # (bN / 2, bK, half, 1, stage), as a dual kernel's B stage is split.
        b_halves = cute.flat_divide(sB, (tn // 2, tk))
        hB = [half_mma.make_fragment_B(thr.partition_B(b_halves[(None, None, h, 0, None)])) for h in range(2)]
        shape = thr.partition_C(cute.make_identity_tensor((tm, tn // 2))).shape
        parts = [cute.make_rmem_tensor(shape, self.acc_dtype) for _ in range(2)]
        return half_mma, hA, hB, parts, self._half_pairs(tiled_mma, half_mma)

    def _alternate_mma(self, sA, sB, wg, pingpong, acc_shape):
        """What ``PROMOTE_ALTERNATE`` multiplies with: the A and B fragments of an MMA like
        the kernel's own (``_mainloop_alternate`` makes that MMA for each call; its
        accumulate field is set per wgmma, so that each batch's first restarts its
        partial sums from zero, where the kernel's own stays set for good), and the two
        partial-sum sets."""
        alt_mma, thr = self._kmajor_mma(self.tile_shape_mnk[1], wg, pingpong)
        aA = alt_mma.make_fragment_A(thr.partition_A(sA))
        aB = alt_mma.make_fragment_B(thr.partition_B(sB))
        return aA, aB, [cute.make_rmem_tensor(acc_shape, self.acc_dtype) for _ in range(2)]

    def _kmajor_mma(self, tile_n, wg, pingpong):
        """A promotion mode's own MMA over ``tile_n`` columns (fp8: A and B K-major) and
        this warpgroup's slice of it."""
        mode = LayoutEnum.ROW_MAJOR.sm90_mma_major_mode()
        mma = sm90_utils.make_trivial_tiled_mma(
            self.ab_dtype,
            self.ab_dtype,
            mode,
            mode,
            self.acc_dtype,
            self.atom_layout_mnk,
            tiler_mn=(64, tile_n),
        )
        return mma, mma.get_slice(0 if pingpong else wg * _WG_THREADS)

    def _half_pairs(self, tiled_mma, half_mma):
        """Per column half of the tile, the (partial sum index, accumulator index) of
        every value of a thread's half-tile partial sums: the value of ``tiled_mma``'s
        (whole-tile) accumulator at the same (m, n), n offset by tile_n / 2 in the
        second half. A thread's coordinates are its first value's plus a static offset
        per value in both MMAs (the wgmma C layout depends on N only through the number
        of 8-column blocks), so thread 0's static coordinates decide for all; checked
        at trace time."""
        tm, tn = self.tile_shape_mnk[:2]
        full = tiled_mma.get_slice(0).partition_C(cute.make_identity_tensor((tm, tn)))
        at = {tuple(full[j]): j for j in range(cute.size(full))}
        half = half_mma.get_slice(0).partition_C(cute.make_identity_tensor((tm, tn // 2)))
        pairs = []
        for h in range(2):
            index = []
            for i in range(cute.size(half)):
                m, n = half[i]
                j = at.get((m, n + h * (tn // 2)))
                if j is None:
                    raise NotImplementedError(f"half-tile value ({m}, {n}) has no accumulator value in half {h}")
                index.append((i, j))
            pairs.append(index)
        return pairs

    def _prefetch_plan(self, epi, k0, k1):
        """(the full (M x N) epilogue inputs read from global memory, the k-tile at which
        the mainloop over [k0, k1) pulls them toward L2): a few k-tiles before the
        epilogue reads them (see ``_prefetch_full_operands``)."""
        full_inputs = [t for t, op in zip(epi.ep_tensors, self.tensor_ops) if op.kind == "full" and not op.staged]
        return full_inputs, cutlass.max(k1 - _PREFETCH_LEAD_K_TILES, k0)

    @cute.jit
    def _mainloop(self, ab_pipe, mma, read, release, k0, k1, tCcD, tc, wg, epi):
        """acc = the sum over k-tiles [k0, k1) of tile ``tc``: one wgmma batch in flight,
        the stage behind it released."""
        tiled_mma, tCrA, tCrB, acc, k_blocks, part, promotion = mma
        if cutlass.const_expr(self.promote == PROMOTE_ALTERNATE):
            return self._mainloop_alternate(ab_pipe, acc, k_blocks, promotion, read, release, k0, k1, tCcD, tc, wg, epi)
        if cutlass.const_expr(self.promote == PROMOTE_HALVES):
            return self._mainloop_halves(ab_pipe, acc, k_blocks, promotion, read, release, k0, k1, tCcD, tc, wg, epi)
        full_inputs, prefetch_kt = self._prefetch_plan(epi, k0, k1)
        size_m, size_n = epi.size_m, epi.size_n
        # A cooperative tile's warpgroups own 64-row slabs (alternating in a 256-row
        # tile), the second's first row 64 below the first's. Where all of a
        # warpgroup's rows are past M (a decode-sized GEMM's second warpgroup, M <= 64)
        # its wgmmas would multiply the zeros TMA filled in, taking the tensor cores and
        # shared-memory reads from the other: it waits for and releases each stage as
        # the pipeline needs, and its accumulator stays zero, in rows the store clips.
        multiplies = self.pingpong or tc[0] * self.tile_shape_mnk[0] + 64 * wg < size_m
        acc.fill(0.0)
        if cutlass.const_expr(self.promote > 0):
            part.fill(0.0)
        cute.nvgpu.warpgroup.fence()
        for kt in range(k0, k1):
            if cutlass.const_expr(len(full_inputs) > 0):
                if kt == prefetch_kt:
                    self._prefetch_full_operands(tCcD, tc[2], full_inputs, size_m, size_n)
            ab_pipe.consumer_wait(read)
            if multiplies:
                for kb in cutlass.range_constexpr(k_blocks):
                    blk = (None, None, kb, read.index)
                    cute.gemm(tiled_mma, part, tCrA[blk], tCrB[blk], part)
                cute.nvgpu.warpgroup.commit_group()
            read.advance()
            if cutlass.const_expr(self.promote > 0):
                # The partial sums are read only once every wgmma writing them is done.
                cute.nvgpu.warpgroup.wait_group(0)
                self._promote(acc, part)
            if kt > k0:
                cute.nvgpu.warpgroup.wait_group(1)
                ab_pipe.consumer_release(release)
                release.advance()
        if cutlass.const_expr(self.pingpong):
            self._turn_pass(_BAR_MMA_TURN, 1 - wg)
        cute.nvgpu.warpgroup.wait_group(0)
        if k1 > k0:
            ab_pipe.consumer_release(release)
            release.advance()
        return read, release

    @cute.jit
    def _mainloop_halves(self, ab_pipe, acc, k_blocks, halves, read, release, k0, k1, tCcD, tc, wg, epi):
        """``_mainloop`` promoting by column halves (``PROMOTE_HALVES``): per k-tile, the
        second half's sums of the previous k-tile are added while the first half's
        wgmmas run, then the first half's sums while the second half's run. Nothing is
        in flight across the loop's back edge (the k-tile ends waiting for its second
        batch): with a batch in flight there, ptxas serializes every wgmma of the loop.
        The second half's additions are written before the first batch (ptxas schedules
        them among its wgmmas): written after its commit, at a 128x128 tile ptxas made
        the second batch wait for the first (C7517). The second half's sums start at
        zero, so its first addition adds nothing (no branch in the loop: see
        ``promote_reason``); after that each batch's first wgmma restarts them."""
        half_mma, hA, hB, parts, pairs = halves
        full_inputs, prefetch_kt = self._prefetch_plan(epi, k0, k1)
        acc.fill(0.0)
        parts[1].fill(0.0)
        cute.nvgpu.warpgroup.fence()
        for kt in range(k0, k1):
            if cutlass.const_expr(len(full_inputs) > 0):
                if kt == prefetch_kt:
                    self._prefetch_full_operands(tCcD, tc[2], full_inputs, epi.size_m, epi.size_n)
            ab_pipe.consumer_wait(read)
            # The previous k-tile's second half (done: that k-tile ended waiting for it).
            self._promote_half(acc, parts[1], pairs[1])
            for h in cutlass.range_constexpr(2):
                # The additions read the partial sums this batch writes: fenced.
                cute.nvgpu.warpgroup.fence()
                for kb in cutlass.range_constexpr(k_blocks):
                    # Each batch restarts its half's partial sums from zero in its first
                    # wgmma: an instruction writing them between batches would make
                    # ptxas serialize every wgmma.
                    half_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, kb != 0)
                    blk = (None, None, kb, read.index)
                    cute.gemm(half_mma, parts[h], hA[blk], hB[h][blk], parts[h])
                cute.nvgpu.warpgroup.commit_group()
                if cutlass.const_expr(h == 1):
                    cute.nvgpu.warpgroup.wait_group(1)  # this k-tile's first half done
                    self._promote_half(acc, parts[0], pairs[0])
            cute.nvgpu.warpgroup.wait_group(0)
            ab_pipe.consumer_release(release)
            release.advance()
            read.advance()
        if cutlass.const_expr(self.pingpong):
            self._turn_pass(_BAR_MMA_TURN, 1 - wg)
        self._promote_half(acc, parts[1], pairs[1])
        return read, release

    @cute.jit
    def _mainloop_alternate(self, ab_pipe, acc, k_blocks, alt, read, release, k0, k1, tCcD, tc, wg, epi):
        """``_mainloop`` promoting into two partial-sum sets in turn (``PROMOTE_ALTERNATE``):
        k-tile k0 + i accumulates into set i % 2, and once it is issued the other set,
        done with the k-tile before, is added into ``acc`` while it runs: a batch stays
        in flight through the additions and across the loop's back edge. The loop takes
        two k-tiles per turn (each set a name of its own in the code); an odd last
        k-tile follows it. Each batch restarts its set from zero in its first wgmma.
        Pipeline states advance and the MMA's accumulate field is set in this body
        itself: the DSL carries neither out of a branch or loop from a helper. The MMA is
        made anew for each call: setting a field builds on the MMA's last value, and
        one set inside the tile loop does not reach stream-K's share loop after it."""
        aA, aB, parts = alt
        alt_mma, _ = self._kmajor_mma(self.tile_shape_mnk[1], wg, self.pingpong)
        full_inputs, prefetch_kt = self._prefetch_plan(epi, k0, k1)
        acc.fill(0.0)
        rest = k1 - k0 - 1
        ab_pipe.consumer_wait(read)
        cute.nvgpu.warpgroup.fence()
        for kb in cutlass.range_constexpr(k_blocks):
            alt_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, kb != 0)
            blk = (None, None, kb, read.index)
            cute.gemm(alt_mma, parts[0], aA[blk], aB[blk], parts[0])
        cute.nvgpu.warpgroup.commit_group()
        read.advance()
        for turn in range(rest // 2):
            for s in cutlass.range_constexpr(2):
                if cutlass.const_expr(len(full_inputs) > 0):
                    if k0 + 1 + 2 * turn + s == prefetch_kt:
                        self._prefetch_full_operands(tCcD, tc[2], full_inputs, epi.size_m, epi.size_n)
                ab_pipe.consumer_wait(read)
                cute.nvgpu.warpgroup.fence()
                for kb in cutlass.range_constexpr(k_blocks):
                    alt_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, kb != 0)
                    blk = (None, None, kb, read.index)
                    cute.gemm(alt_mma, parts[1 - s], aA[blk], aB[blk], parts[1 - s])
                cute.nvgpu.warpgroup.commit_group()
                read.advance()
                cute.nvgpu.warpgroup.wait_group(1)  # the k-tile before: its set is done
                self._add_partial_sums(acc, parts[s])
                ab_pipe.consumer_release(release)
                release.advance()
        if rest % 2 == 1:
            ab_pipe.consumer_wait(read)
            cute.nvgpu.warpgroup.fence()
            for kb in cutlass.range_constexpr(k_blocks):
                alt_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, kb != 0)
                blk = (None, None, kb, read.index)
                cute.gemm(alt_mma, parts[1], aA[blk], aB[blk], parts[1])
            cute.nvgpu.warpgroup.commit_group()
            read.advance()
            cute.nvgpu.warpgroup.wait_group(1)
            self._add_partial_sums(acc, parts[0])
            ab_pipe.consumer_release(release)
            release.advance()
            self._add_last_partial_sums(acc, parts[1], wg)
        else:
            self._add_last_partial_sums(acc, parts[0], wg)
        ab_pipe.consumer_release(release)
        release.advance()
        return read, release

    @cute.jit
    def _add_last_partial_sums(self, acc, part, wg):
        """The tile's last batch issued: the other warpgroup's turn passed (pingpong),
        then its sums added once it is done."""
        if cutlass.const_expr(self.pingpong):
            self._turn_pass(_BAR_MMA_TURN, 1 - wg)
        cute.nvgpu.warpgroup.wait_group(0)
        self._add_partial_sums(acc, part)

    @cute.jit
    def _add_partial_sums(self, acc, part):
        """acc += part (read through ``_pinned``)."""
        # Unrolled at trace time in runs of 4 (a static loop of 64 and more steps draws
        # the DSL's slow-compile warning at every compile), then the rest.
        for j in cutlass.range_constexpr(cute.size(acc) // 4):
            for k in cutlass.range_constexpr(4):
                acc[4 * j + k] = acc[4 * j + k] + self._pinned(part[4 * j + k])
        for i in cutlass.range_constexpr(4 * (cute.size(acc) // 4), cute.size(acc)):
            acc[i] = acc[i] + self._pinned(part[i])

    @staticmethod
    def _pinned(value):
        """``value`` (a partial sum a wgmma wrote) as read at this point of the code: it
        passes through an empty volatile asm, so no read of it (an addition, a copy) is
        scheduled above the batch wait just before. The compiler takes a wgmma's results
        as ready when it issues; a read hoisted above the wait made ptxas serialize every
        wgmma (C7514)."""
        return Float32(llvm.inline_asm(Float32.mlir_type, [value.ir_value()], "", "=f,0", has_side_effects=True))

    @cute.jit
    def _promote_half(self, acc, part, pairs):
        """The accumulator values of one column half += that half's partial sums."""
        for k in cutlass.range_constexpr(len(pairs)):
            acc[pairs[k][1]] = acc[pairs[k][1]] + part[pairs[k][0]]

    @cute.jit
    def _promote(self, acc, part):
        """acc += part in fp32, and part starts again from zero (registers the next
        wgmmas read: fenced)."""
        for j in cutlass.range_constexpr(cute.size(acc) // 4):  # runs of 4, as in ``_add_partial_sums``
            for k in cutlass.range_constexpr(4):
                acc[4 * j + k] = acc[4 * j + k] + part[4 * j + k]
        for i in cutlass.range_constexpr(4 * (cute.size(acc) // 4), cute.size(acc)):
            acc[i] = acc[i] + part[i]
        part.fill(0.0)
        cute.nvgpu.warpgroup.fence()

    @cute.jit
    def _epilogue(self, epi, acc, tCcD, tc, epi_count):
        """Apply the hook to tile ``tc``'s accumulator and store it, sub-tile by sub-tile."""
        staged = cutlass.const_expr(self.staged is not None)
        if cutlass.const_expr(self.hook is not None and not staged):
            # The hook runs on the accumulator in place, element by element, with
            # coordinates from the MMA's own C partition (so they match by construction).
            self._apply_hook(acc, tCcD, tc[2], epi.ep_tensors, epi.ep_scalars, epi.size_m, epi.size_n)
        # Locals only below: a dynamic `if` cannot capture the namespace itself.
        rv, rm, rn = epi.geometry
        tRS_rD, tRS_acc, tRS_rOut, tRS_sD = epi.tRS_rD, epi.tRS_acc, epi.tRS_rOut, epi.tRS_sD
        warp_idx, store_warp, store_pipe, tma_d = epi.warp_idx, epi.store_warp, epi.store_pipe, epi.tma_d
        shares_c = cutlass.const_expr(staged and self.shares_c)
        c_pipe = epi.c_pipe if shares_c else None
        gD_epi = cute.zipped_divide(epi.gD[(None, None, *tc)], self.epi_tile)
        bSG_sD, bSG_gD = cute.nvgpu.cpasync.tma_partition(
            tma_d, 0, cute.make_layout(1), cute.group_modes(epi.sD, 0, 2), gD_epi
        )
        for em in cutlass.range_constexpr(epi.epi_m):
            for en in cutlass.range_constexpr(epi.epi_n):
                # Sub-tile (em, en) of the accumulator, in stmatrix order.
                if cutlass.const_expr(staged):
                    self._staged_subtile(epi, tCcD, tc[2], epi_count, em, en)
                else:
                    for r in cutlass.range_constexpr(rv):
                        for i in cutlass.range_constexpr(rm):
                            for j in cutlass.range_constexpr(rn):
                                tRS_rD[(r, i, j)] = tRS_acc[((r, en * rn + j), em * rm + i, 0)]
                for v in cutlass.range_constexpr(cute.size(tRS_rD)):
                    tRS_rOut[v] = tRS_rD[v].to(self.out_dtype)
                buf = epi_count % self.epi_stage
                if cutlass.const_expr(shares_c):
                    # D overwrites the staged input's buffer: every warp has read it.
                    epi.bar.arrive_and_wait()
                cute.copy(epi.r2s, tRS_rOut, tRS_sD[(None, None, None, buf)])
                cute.arch.fence_proxy("async.shared", space="cta")
                if warp_idx == store_warp:
                    store_pipe.producer_acquire()
                epi.bar.arrive_and_wait()
                if warp_idx == store_warp:
                    cute.copy(tma_d, bSG_sD[(None, buf)], bSG_gD[(None, (em, en))])
                    store_pipe.producer_commit()
                    if cutlass.const_expr(shares_c):
                        # The buffer goes back to the staged input's loader once the
                        # store has read it.
                        cute.arch.cp_async_bulk_wait_group(0, read=True)
                        c_pipe.consumer_release(self._c_state(epi_count))
                epi_count += 1
        return epi_count

    def _c_state(self, epi_count):
        """The staged input's pipeline position at sub-tile ``epi_count``: its loads are
        consumed in the order they were issued, one per sub-tile."""
        n = self.c_buffers
        return pipeline.PipelineState(n, epi_count, epi_count % n, (epi_count // n) % 2)

    def _staged_subtile(self, epi, tCcD, batch, epi_count, em, en):
        """Sub-tile (em, en) of the accumulator into ``epi.tRS_rD`` with the hook applied,
        the staged operand read from shared memory, the others from global memory.

        Trace-time Python (not preprocessed): every loop here unrolls."""
        rv, rm, rn = epi.geometry
        c_state = self._c_state(epi_count)
        epi.c_pipe.consumer_wait(c_state)
        cute.copy(epi.s2r, epi.tSR_sC[(None, None, None, c_state.index)], epi.tSR_rC)
        if not self.shares_c:
            # The buffer is refilled by TMA (the async proxy) once every warp has read it.
            cute.arch.fence_proxy("async.shared", space="cta")
            cute.arch.sync_warp()
            epi.c_pipe.consumer_release(c_state)
        coords = epi.geo.retile(tCcD)
        last_m, last_n = epi.size_m - 1, epi.size_n - 1
        inputs = [(k, t) for k, (t, op) in enumerate(zip(epi.ep_tensors, self.tensor_ops)) if not op.is_output]
        outputs = [t for t, op in zip(epi.ep_tensors, self.tensor_ops) if op.is_output]
        for r in range(rv):
            for i in range(rm):
                for j in range(rn):
                    at = ((r, en * rn + j), em * rm + i, 0)
                    m, n = coords[at]
                    mc, nc = cutlass.min(m, last_m), cutlass.min(n, last_n)
                    loaded = iter(
                        epi.tRS_rC[(r, i, j)].to(Float32) if k == self.staged else t[(mc, nc, batch)].to(Float32)
                        for k, t in inputs
                    )
                    epi.tRS_rD[(r, i, j)] = self._hook_value(
                        epi.tRS_acc[at], m, n, batch, loaded, epi.ep_scalars, outputs, epi.size_m, epi.size_n
                    )

    def _partial_view(self, acc, sk_buffers, cta, etidx):
        """This thread's slice of CTA ``cta``'s partial-sum buffer, as (4, V / 4): the
        tile's values in the accumulator's own flat order, 16 bytes per thread per row
        of 4 (``[cta][v / 4][thread][4]``: each warp writes 512 contiguous bytes)."""
        values = cute.size(acc)
        base = cute.assume(cta * values * self.epi_threads + etidx * 4, divby=4)
        layout = cute.make_layout((4, values // 4), stride=(1, 4 * self.epi_threads))
        return cute.make_tensor(sk_buffers[0].iterator + base, layout)

    @cute.jit
    def _publish_partial(self, acc, sk_buffers, cta, etidx, epi_bar, coords, size_m):
        """Write this CTA's partial sums and set its flag to the launch's token
        (release, GPU scope).

        The flags are not zeroed for a launch (in a CUDA graph that would be a node of
        its own beside each GEMM): a token drawn per launch (``stream_k_buffers``)
        tells this launch's flags from whatever the memory held, and each flag, read
        once by the tile's owner, is cleared by it, so a replayed graph, whose token and
        memory stay, finds its flags clear again.

        Only the runs of four values with a row inside the problem travel (``coords``:
        each value's global (m, n)): a decode-sized GEMM fills a few rows of its tiles,
        and the whole tile's sums would move about as many bytes as its weight. A run is
        two columns of two rows eight apart (``_fragment``), its first value in the upper
        row: rows past M in a run that has one inside are written and read, never stored."""
        _fragment(coords)  # the runs' layout, checked at trace time
        view = self._partial_view(acc, sk_buffers, cta, etidx)
        for j in cutlass.range_constexpr(cute.size(acc) // 4):  # as in ``_add_peers``
            if coords[4 * j][0] < size_m:
                for i in cutlass.range_constexpr(4):
                    view[(i, j)] = acc[4 * j + i]
        cute.arch.fence_acq_rel_gpu()
        epi_bar.arrive_and_wait()
        if etidx == 0:
            cute.arch.store(sk_buffers[1].iterator + cta, sk_buffers[2], sem="release", scope="gpu")

    def _publishes(self, other, last, sharers, iters):
        """Whether slot ``other`` published partial sums for a tile whose owner's peers
        end at slot ``last``: it is one of them and its share is not empty."""
        return (other <= last) & (
            self._share_start(other, sharers, iters) < self._share_start(other + 1, sharers, iters)
        )

    def _slot_cta(self, slot, rank):
        """The CTA (its flag, its partial sums' buffer) of rank ``rank`` in cluster slot
        ``slot``: partial sums pair CTAs of equal rank in their clusters."""
        return slot * self.cfg.cluster_size + rank

    @cute.jit
    def _add_peers(self, acc, sk_buffers, slot, rank, shares, etidx, epi_bar, coords, size_m):
        """Add the partial sums the slots after ``slot`` published for its tile (the
        slots up to ``shares[0]`` whose shares are not empty), once each flag holds this
        launch's token (acquire, GPU scope); each flag read is then cleared (see
        ``_publish_partial``). The runs read are those ``_publish_partial`` wrote (the
        same ``coords``, the same tile).

        An owner waits for every peer at once, one thread per flag, and, in a tile whose
        runs of every peer fit ``_STREAM_K_LOADS_IN_FLIGHT``, loads them all before
        adding any: about two L2 round trips after the owner's own mainloop, where one
        peer after another cost two per peer. The peers are a static
        window of ``_STREAM_K_MAX_PARTS`` slots: each slot after the owner, up to the
        last, starts its share at one of the tile's k-iterations past its first (k_tiles
        - 1 of them), and shares are at least k_tiles / ``_STREAM_K_MAX_PARTS`` long
        (``_schedule``), so at most ``_STREAM_K_MAX_PARTS`` such starts fit. The sums are
        added in slot order whichever peer finished first, so a result does not change
        from launch to launch."""
        _fragment(coords)  # the runs' layout, checked at trace time
        window = _STREAM_K_MAX_PARTS
        peers = [self._publishes(slot + 1 + d, *shares) for d in range(window)]
        if etidx < window:
            if self._publishes(slot + 1 + etidx, *shares):
                flag = sk_buffers[1].iterator + self._slot_cta(slot + 1 + etidx, rank)
                token = sk_buffers[2]
                ready = Int64(0)
                while ready != token:
                    ready = cute.arch.load(flag, Int64, sem="acquire", scope="gpu")
                cute.arch.store(flag, Int64(0))
        epi_bar.arrive_and_wait()
        views = [self._partial_view(acc, sk_buffers, self._slot_cta(slot + 1 + d, rank), etidx) for d in range(window)]
        runs = cute.size(acc) // 4
        # Unrolled at trace time (register fragments take static indices only).
        if cutlass.const_expr(window * runs <= _STREAM_K_LOADS_IN_FLIGHT):
            # Every peer's runs in flight at once; a run not read stays 0, so the adds
            # need no branch.
            got = cute.make_rmem_tensor(cute.make_layout((4, runs, window)), self.acc_dtype)
            got.fill(0.0)
            for d in cutlass.range_constexpr(window):
                for j in cutlass.range_constexpr(runs):
                    if peers[d] & (coords[4 * j][0] < size_m):
                        for i in cutlass.range_constexpr(4):
                            got[(i, j, d)] = views[d][(i, j)]
            for d in cutlass.range_constexpr(window):
                for v in cutlass.range_constexpr(4 * runs):
                    acc[v] = acc[v] + got[(v % 4, v // 4, d)]
        else:
            # A whole tile's sums per peer (a larger tile, past decode): one peer's
            # runs at a time, as many loads in flight as the registers beside the
            # accumulator allow; batching across peers there spills.
            for d in cutlass.range_constexpr(window):
                if peers[d]:
                    for j in cutlass.range_constexpr(runs):
                        if coords[4 * j][0] < size_m:
                            for i in cutlass.range_constexpr(4):
                                acc[4 * j + i] = acc[4 * j + i] + views[d][(i, j)]

    @staticmethod
    def _subtile_geometry(tRS_acc, tRS_rD, epi_m, epi_n):
        """Static sizes relating the retiled accumulator to one epilogue sub-tile.

        The retiled accumulator is ((V, N-blocks), M-blocks, 1), ``epi_m`` x ``epi_n``
        sub-tiles of (V, m-blocks, n-blocks) each; anything else is refused at trace
        time rather than indexed wrongly.
        """
        acc_shape, sub_shape = tRS_acc.shape, tRS_rD.shape
        rv, rm, rn = (cute.size(tRS_rD, mode=[i]) for i in range(3))
        ok = (
            cute.rank(tRS_acc) == 3
            and cute.size(tRS_acc, mode=[2]) == 1
            and isinstance(acc_shape[0], tuple)
            and len(acc_shape[0]) == 2
            and cute.size(acc_shape[0][0]) == rv
            and cute.size(acc_shape[0][1]) == epi_n * rn
            and cute.size(tRS_acc, mode=[1]) == epi_m * rm
        )
        if not ok:
            raise NotImplementedError(f"unexpected accumulator/sub-tile layouts {acc_shape} / {sub_shape}")
        return rv, rm, rn

    def _prefetch_full_operands(self, coords, batch, tensors, size_m, size_n):
        """Prefetch into L2 the lines of ``tensors`` that this thread's epilogue reads.

        Without it every SM fetches its tile of a residual or gate from DRAM in the same
        moment, at the tile's end (64 KiB per 128x256 bf16 tile). Issued a few k-tiles
        ahead: issued at the tile's start, the lines would be evicted by the operands
        streamed in meanwhile. A hint only, to clamped in-bounds addresses.

        The wgmma accumulator fragment is ((2, 2, X), M, N): pairs of adjacent columns,
        two rows eight apart, X column blocks eight apart. One address per 128-byte line
        per row: every (128 / element bytes / 8)-th column block.
        """
        # Trace-time Python (not preprocessed): every loop here unrolls.
        frag = _fragment(coords)
        last_m = size_m - 1
        last_n = size_n - 1
        for t in tensors:
            step = max(1, 128 // (t.element_type.width // 8) // 8)
            for i in range(cute.size(coords, mode=[1])):
                for j in range(cute.size(coords, mode=[2])):
                    for h in range(2):
                        for c in range(0, self._hook_columns(frag), step):
                            m, n = coords[((0, h, c), i, j)]
                            at = cute.crd2idx((cutlass.min(m, last_m), cutlass.min(n, last_n), batch), t.layout)
                            cute.arch.prefetch((t.iterator + at).llvm_ptr, cache_level="L2")

    def _apply_hook(self, acc, coords, batch, ep_tensors, ep_scalars, size_m, size_n):
        """The hook on every accumulator element, a column pair (n, n + 1) at a time:
        ``pairs`` operands are read once per pair. In a dual kernel, on every gate
        element with its up element (``_dual_partner``), the result in the gate's place."""
        # Trace-time Python (not preprocessed): every loop here unrolls.
        frag = _fragment(coords)
        last_m = size_m - 1
        last_n = size_n - 1
        last_pair = size_n - 2  # N is even where pairs are declared
        inputs = [(t, op) for t, op in zip(ep_tensors, self.tensor_ops) if not op.is_output]
        outputs = [(t, op) for t, op in zip(ep_tensors, self.tensor_ops) if op.is_output]
        columns = self._hook_columns(frag)
        for i in range(cute.size(coords, mode=[1])):
            for j in range(cute.size(coords, mode=[2])):
                for h in range(2):
                    for c in range(columns):
                        # Clamp so elements past M/N (clipped by the TMA store) read in bounds.
                        m0, n0 = coords[((0, h, c), i, j)]
                        mc = cutlass.min(m0, last_m)
                        paired = [
                            _load_pair(t, mc, cutlass.min(n0, last_pair), batch) if op.pairs else None
                            for t, op in inputs
                        ]
                        extra = []  # per column of the pair, the values of the out operands
                        for p in range(2):
                            v = ((p, h, c), i, j)
                            m, n = coords[v]
                            nc = cutlass.min(n, last_n)
                            loaded = iter(
                                pair[p] if pair is not None else t[(mc, nc, batch)].to(Float32)
                                for (t, _), pair in zip(inputs, paired)
                            )
                            value = (acc[v], acc[((p, h, c + columns), i, j)]) if self.dual else acc[v]
                            result = self._hook_result(value, m, n, batch, loaded, ep_scalars)
                            acc[v] = result[0] if outputs else result
                            extra.append(result[1:] if outputs else ())
                        # The extra outputs leave straight from registers (D goes through TMA).
                        for k, (t, op) in enumerate(outputs):
                            first, second = (vals[k].to(t.element_type) for vals in extra)
                            if op.pairs:
                                _store_pair_in_bounds(t, m0, n0, batch, first, second, size_m, size_n)
                            else:
                                m1, n1 = coords[((1, h, c), i, j)]
                                _store_in_bounds(t, m0, n0, batch, first, size_m, size_n)
                                _store_in_bounds(t, m1, n1, batch, second, size_m, size_n)

    def _hook_result(self, value, m, n, batch, loaded, ep_scalars):
        """The hook on one element (``value`` at (m, n, batch), a (gate, up) pair in a
        dual kernel), ``loaded`` yielding the input operands' values in declaration
        order: the value for D, or with ``out`` operands (D's value, then theirs)."""
        scalars = iter(ep_scalars)
        vals = tuple(
            None if op.is_output else next(loaded) if op.is_tensor else next(scalars) for op in self.epilogue.operands
        )
        return self.hook(value, m, n, batch, vals)

    def _hook_value(self, value, m, n, batch, loaded, ep_scalars, outputs, size_m, size_n):
        """``_hook_result``, its extra outputs stored one element at a time straight from
        registers (D goes through TMA). Returns the value for D."""
        result = self._hook_result(value, m, n, batch, loaded, ep_scalars)
        if not outputs:
            return result
        for t, out_value in zip(outputs, result[1:]):
            _store_in_bounds(t, m, n, batch, out_value.to(t.element_type), size_m, size_n)
        return result[0]
