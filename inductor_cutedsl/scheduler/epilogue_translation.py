"""Translate Inductor pointwise IR into our GEMM epilogue source.

The translator is an Inductor ops handler: replaying a pointwise node's body
under it turns every ``ops.*`` call into one line of epilogue source. An op or
an index it cannot translate raises ``errors.Unsupported``, and the caller then
leaves the node to Triton: the fusion rule and the code generator are this one
replay, so they cannot disagree.

Values carry their dtype. Arithmetic runs in fp32 (as Inductor's Triton code
does after upcasting); an explicit cast to bf16/fp16 rounds through that type.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import sympy
import torch

from ..compat.lazy import OpsHandlerBase
from ..errors import Unsupported
from ..kernels.epilogue import Epilogue, EpilogueOperand
from ..runtime.support import OUT_DTYPES, STORE_DTYPES  # also the dtypes epilogue values take

_UNARY = {
    "exp": "cute.math.exp({})",
    "exp2": "cute.math.exp2({})",
    "expm1": "cute.math.expm1({})",
    "log": "cute.math.log({})",
    "log1p": "cute.math.log1p({})",
    "log2": "cute.math.log2({})",
    "tanh": "tanh({})",
    "sigmoid": "sigmoid({})",
    "erf": "cute.math.erf({})",
    "rsqrt": "cute.math.rsqrt({})",
    "sqrt": "cute.math.sqrt({})",
    "abs": "cute.math.abs({})",
    "neg": "(-{})",
    "reciprocal": "reciprocal({})",
    "relu": "relu({})",
    "square": "({0} * {0})",
    "sin": "cute.math.sin({})",
    "cos": "cute.math.cos({})",
}
_BINARY = {
    "add": "({} + {})",
    "sub": "({} - {})",
    "mul": "({} * {})",
    "truediv": "fdiv({}, {})",
    "maximum": "cute.math.max({}, {})",
    "minimum": "cute.math.min({}, {})",
}
_COMPARE = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


@dataclasses.dataclass(frozen=True)
class Value:
    """One SSA value of the epilogue: its name in the source and its dtype."""

    name: str
    dtype: torch.dtype | None  # None for booleans


@dataclasses.dataclass(frozen=True)
class Coordinates:
    """The loop variables of one replayed node, as the GEMM output coordinates they
    stand for.

    ``atoms``: symbols with their extents; each output coordinate (m, n, l) is a
    row-major combination of consecutive atoms (``dims[i]``: (atom, weight) pairs, empty
    for a coordinate of extent 1). A node whose loops merge coordinates or split them
    (a (B, T, N) consumer of a (B*T, N) GEMM) is replayed with its loop variables
    written over atoms, so every index it computes is a polynomial in the atoms;
    ``linear`` turns one back into strides over (m, n, l), or refuses it.
    """

    atoms: tuple[tuple[sympy.Symbol, int], ...]
    dims: tuple[tuple[tuple[sympy.Symbol, int], ...], ...]  # (m, n, l)
    simplify: Callable[[sympy.Expr, dict], sympy.Expr] = lambda e, ranges: e

    @classmethod
    def identity(
        cls,
        mnl: tuple[sympy.Symbol, sympy.Symbol, sympy.Symbol],
        sizes: tuple[int, int, int],
        simplify: Callable[[sympy.Expr], sympy.Expr] = lambda e: e,
    ) -> Coordinates:
        """Loop variables that are the coordinates themselves."""
        return cls(tuple(zip(mnl, sizes)), tuple(((s, 1),) for s in mnl), lambda e, ranges: simplify(e))

    def linear(self, index: sympy.Expr) -> tuple[tuple[int, int, int], int]:
        """(strides over (m, n, l), offset) of ``index``, when it is provably linear in
        the coordinates. A coordinate of extent 1 gets stride 0."""
        ranges = dict(self.atoms)
        index = sympy.expand(self.simplify(sympy.sympify(index), ranges))
        symbols = [s for s, _ in self.atoms]
        extra = index.free_symbols - set(symbols)
        if extra:
            raise Unsupported(f"index {index} depends on {sorted(map(str, extra))}", "indexing")
        try:
            poly = sympy.Poly(index, *symbols)
        except sympy.PolynomialError as exc:
            raise Unsupported(f"index {index} is not polynomial", "indexing") from exc
        if poly.total_degree() > 1:
            raise Unsupported(f"index {index} is not linear in (m, n, l)", "indexing")
        coeff = {s: index.coeff(s, 1) for s in symbols}
        offset = index.subs({s: 0 for s in symbols})
        if not all(c.is_Integer for c in coeff.values()) or not offset.is_Integer:
            raise Unsupported(f"index {index} has non-integer coefficients", "indexing")
        strides = []
        for dim in self.dims:
            dim = tuple((s, w) for s, w in dim if ranges[s] > 1)  # extent 1: stride 0
            # Coordinate = sum(weight * atom): the index is linear in it only if each
            # atom's coefficient is the same multiple of that atom's weight.
            stride = int(coeff[dim[0][0]]) // dim[0][1] if dim else 0
            if any(int(coeff[s]) != stride * w for s, w in dim):
                raise Unsupported(
                    f"index {index} is not linear in the GEMM output's coordinates "
                    "(the node's loops are not a pure reshape of them)",
                    "indexing",
                )
            strides.append(stride)
        return (strides[0], strides[1], strides[2]), int(offset)


@dataclasses.dataclass(frozen=True)
class OperandRef:
    """A tensor the epilogue reads: element (m, n, l) is at offset + strides . (m, n, l)."""

    buffer: str
    strides: tuple[int, int, int]
    offset: int
    dtype: torch.dtype


View = tuple[tuple[int, int, int], int]  # (strides over (m, n, l), offset)


@dataclasses.dataclass(frozen=True)
class Translation:
    epilogue: Epilogue
    operands: tuple[OperandRef, ...]  # inputs, then the kept outputs (``out`` operands)
    outputs: tuple[str, ...]  # buffers the epilogue's stores would write, in order
    kept: tuple[str, ...] = ()  # buffers written besides the last output
    out_view: View = ((0, 1, 0), 0)  # where the last output's element (m, n, l) goes


class EpilogueTranslator(OpsHandlerBase):
    """Ops handler that records an epilogue while Inductor bodies are replayed.

    ``acc_buffer``: the GEMM's output buffer; ``mnl``: the symbols of the output
    coordinates (m, n, l) used by the replayed index expressions, unless a node's
    replay sets other ``coords`` (``begin_node``); ``sizes``: (M, N, L) ints;
    ``dtype_of``: the dtype of a buffer by name; ``simplify``: index simplification
    under the coordinates' ranges (ModularIndexing etc.).

    Rules that make a chain's indexing provably right: the GEMM output is read
    element-for-element (the acc at (m, n, l)); a buffer the chain stored is read
    back exactly as it was stored; every node reads one of those two, which pins its
    loops to the GEMM output's coordinates; every other index is linear in (m, n, l).
    """

    def __init__(
        self,
        acc_buffer: str,
        mnl: tuple[sympy.Symbol, sympy.Symbol, sympy.Symbol],
        sizes: tuple[int, int, int],
        dtype_of: Callable[[str], torch.dtype],
        simplify: Callable[[sympy.Expr], sympy.Expr] = lambda e: e,
    ) -> None:
        self.acc_buffer = acc_buffer
        self.coords = Coordinates.identity(mnl, sizes, simplify)
        self.sizes = sizes
        self.dtype_of = dtype_of
        self.lines: list[str] = []
        self.operands: list[OperandRef] = []
        self.stored: dict[str, Value] = {}  # buffer -> value (later loads reuse it)
        self.views: dict[str, View] = {acc_buffer: self.acc_view()}  # how each is laid out
        self.outputs: list[str] = []
        self.reads_acc = False
        self.anchored = True

    # -- bookkeeping
    def _emit(self, expr: str, dtype: torch.dtype | None) -> Value:
        name = f"t{len(self.lines)}"
        self.lines.append(f"    {name} = {expr}")
        return Value(name, dtype)

    def _default(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        raise Unsupported(f"op {name!r} has no CuteDSL epilogue translation", "unsupported-op")

    def indirect_indexing(self, *args: Any, **kwargs: Any) -> Any:
        raise Unsupported("indirect indexing", "indexing")

    def begin_node(self, name: str, coords: Coordinates) -> None:
        """Replay the next node, whose loop variables are written over ``coords``."""
        self.coords, self.node, self.anchored = coords, name, False

    def end_node(self) -> None:
        if not self.anchored:
            raise Unsupported(
                f"{self.node} reads neither the GEMM output nor a buffer of the chain element-for-element", "indexing"
            )

    def _normal(self, view: View) -> View:
        """``view`` with stride 0 along every coordinate of extent 1 (never stepped)."""
        (s_m, s_n, s_l), offset = view
        size_m, size_n, size_l = self.sizes
        return (s_m if size_m > 1 else 0, s_n if size_n > 1 else 0, s_l if size_l > 1 else 0), offset

    def acc_view(self) -> View:
        """(strides, offset) of a buffer laid out like the GEMM output."""
        big_m, big_n, _ = self.sizes
        return self._normal(((big_n, 1, big_m * big_n), 0))

    def _check_same_view(self, name: str, index: sympy.Expr) -> None:
        if self._normal(self.coords.linear(index)) != self.views[name]:
            raise Unsupported(
                f"{name} is accessed at {index}, not element-for-element with the GEMM output", "indexing"
            )
        self.anchored = True

    # -- memory
    def load(self, name: str, index: sympy.Expr) -> Value:
        if name == self.acc_buffer or name in self.stored:
            self._check_same_view(name, index)
            if name == self.acc_buffer:
                self.reads_acc = True
                return Value("acc", torch.float32)
            return self.stored[name]
        dtype = self.dtype_of(name)
        if dtype not in OUT_DTYPES:
            raise Unsupported(f"load of {name} with dtype {dtype} (integer data or indirect indexing)", "dtype")
        strides, offset = self._normal(self.coords.linear(index))
        if min(strides) < 0 or offset < 0:
            raise Unsupported(f"{name} is read with a negative stride or offset", "indexing")
        if strides[1] > 1 and strides[0] < strides[1] and self.sizes[1] > 1:
            # Column-major reads are uncoalesced in our epilogue: Triton does them better.
            raise Unsupported(f"{name} is read transposed (stride {strides[1]} along n)", "indexing")
        ref = OperandRef(name, strides, offset, dtype)
        if ref not in self.operands:
            self.operands.append(ref)
        return Value(f"ops[{self.operands.index(ref)}]", torch.float32)

    def store(self, name: str, index: sympy.Expr, value: Value, mode: Any = None) -> None:
        if mode is not None:
            raise Unsupported(f"store mode {mode!r}", "store-mode")
        view = self._normal(self.coords.linear(index))
        (s_m, s_n, s_l), offset = view
        if (s_n != 1 and self.sizes[1] > 1) or min(s_m, s_l, offset) < 0:
            # The kernel writes whole rows of a tile (TMA, or row-wise plain stores).
            raise Unsupported(
                f"{name} is stored at {index}, not element-for-element in rows like the GEMM output", "indexing"
            )
        self.stored[name] = value
        self.views[name] = view
        self.outputs.append(name)

    # -- values
    def constant(self, value: Any, dtype: torch.dtype) -> Value:
        if dtype == torch.bool:
            return Value(repr(bool(value)), None)
        value = float(value)
        if math.isnan(value):
            raise Unsupported("a NaN constant", "unsupported-op")
        # repr writes `inf`, a name the source does not see; 1e999 is infinity's float literal.
        literal = repr(value) if math.isfinite(value) else ("1e999" if value > 0 else "-1e999")
        return Value(f"Float32({literal})", torch.float32)

    def to_dtype(self, x: Value, dtype: torch.dtype, src_dtype=None, use_compute_types=True) -> Value:
        if dtype == torch.float32:
            return Value(x.name, torch.float32)
        if dtype in STORE_DTYPES:
            # (An fp8 cast saturates, as the Triton kernel it replaces does.)
            return self._emit(f"round_to({x.name}, {STORE_DTYPES[dtype]!r})", dtype)
        raise Unsupported(f"cast to {dtype}", "dtype")

    def where(self, cond: Value, a: Value, b: Value) -> Value:
        return self._emit(f"select({cond.name}, {a.name}, {b.name})", torch.float32)

    def pow(self, x: Value, y: Value) -> Value:
        if y.name.startswith("Float32("):
            exponent = float(y.name[len("Float32(") : -1])
            if exponent.is_integer() and 0 <= exponent <= 8:
                terms = " * ".join([x.name] * int(exponent)) or "Float32(1.0)"
                return self._emit(f"({terms})", torch.float32)
        return self._emit(f"cute.math.pow({x.name}, {y.name})", torch.float32)

    def fma(self, x: Value, y: Value, z: Value) -> Value:
        return self._emit(f"({x.name} * {y.name} + {z.name})", torch.float32)


def _install_table_ops() -> None:
    """One method per table entry (the handler protocol looks ops up by name)."""

    def unary(template):
        return lambda self, x: self._emit(template.format(x.name), torch.float32)

    def binary(template):
        return lambda self, x, y: self._emit(template.format(x.name, y.name), torch.float32)

    def compare(op):
        return lambda self, x, y: self._emit(f"({x.name} {op} {y.name})", None)

    for name, template in _UNARY.items():
        setattr(EpilogueTranslator, name, unary(template))
    for name, template in _BINARY.items():
        setattr(EpilogueTranslator, name, binary(template))
    for name, op in _COMPARE.items():
        setattr(EpilogueTranslator, name, compare(op))


_install_table_ops()


def _input_decl(i: int, op: OperandRef, n: int) -> EpilogueOperand:
    """The declaration of fused input ``i``, by the strides it is read through: zero
    strides compiled into the kernel let each thread load a broadcast value once (a
    zero known only at launch has it loaded per accumulator column or row). Zero every
    way is ``one`` (a tensor-wise scale), zero along N ``col`` (a per-row scale), zero
    along M ``row`` (a bias) unless two columns per load (``_pairs``) already read each
    value once; any other ``full``."""
    dtype = OUT_DTYPES[op.dtype]
    zero_m, zero_n, zero_l = (isinstance(s, (int, sympy.Integer)) and int(s) == 0 for s in op.strides)
    if zero_m and zero_n and zero_l:
        return EpilogueOperand(f"in{i}", "one", dtype)
    if zero_n:
        return EpilogueOperand(f"in{i}", "col", dtype)
    pairs = _pairs(op, n)
    if zero_m and not pairs:
        return EpilogueOperand(f"in{i}", "row", dtype)
    return EpilogueOperand(f"in{i}", "full", dtype, pairs)


def _pairs(op: OperandRef, n: int) -> bool:
    """Whether the kernel may read (an output: write) ``op`` two columns at a time, as
    far as its layout shows (the launcher checks the tensor itself: address, and sizes
    when dynamic)."""
    (s_m, s_n, s_l), offset = op.strides, op.offset
    return (
        op.dtype in (torch.bfloat16, torch.float16)
        and s_n == 1
        and s_m % 2 == 0
        and s_l % 2 == 0
        and offset % 2 == 0
        and n % 2 == 0
    )


def finish(tr: EpilogueTranslator, name: str, keep: tuple[str, ...] = ()) -> Translation:
    """The epilogue computing the last stored value, with the operands it reads.

    ``keep``: buffers that must be written too (read outside the epilogue): the GEMM's
    own output (the accumulator as the GEMM stores it) or an intermediate of the
    chain. Each becomes an ``out`` operand, after the inputs, in ``keep`` order.
    """
    if not tr.outputs:
        raise Unsupported("the epilogue stores nothing", "chain-shape")
    if not tr.reads_acc:
        raise Unsupported("the chain does not read the GEMM output", "chain-shape")
    result = tr.stored[tr.outputs[-1]]
    operands = list(tr.operands)
    values = [result.name]
    for buf in keep:
        dtype = tr.dtype_of(buf)
        if dtype not in OUT_DTYPES:
            raise Unsupported(f"{buf} has dtype {dtype}", "dtype")
        values.append("acc" if buf == tr.acc_buffer else tr.stored[buf].name)
        operands.append(OperandRef(buf, *tr.views[buf], dtype))
    source = "\n".join(["def epilogue(acc, m, n, l, ops):", *tr.lines, f"    return {', '.join(values)}", ""])
    decls = tuple(_input_decl(i, op, tr.sizes[1]) for i, op in enumerate(tr.operands)) + tuple(
        EpilogueOperand(f"out{i}", "out", OUT_DTYPES[op.dtype], _pairs(op, tr.sizes[1]))
        for i, op in enumerate(operands[len(tr.operands) :])
    )
    return Translation(
        Epilogue(name, source, decls), tuple(operands), tuple(tr.outputs), tuple(keep), tr.views[tr.outputs[-1]]
    )
