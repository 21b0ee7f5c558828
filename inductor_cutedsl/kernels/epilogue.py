"""The GEMM epilogue hook: what runs on each accumulator element before the store.

An :class:`Epilogue` is data (source text plus operand declarations), so that
Inductor can generate one, the cache can key on it, and worker processes can
rebuild it. Its source defines::

    def epilogue(acc, m, n, l, ops):
        ...
        return value

called at trace time once per accumulator element with ``acc`` (Float32), the
element's global coordinates ``m``, ``n``, ``l`` (Int32) and ``ops``: one
Float32 value per declared operand, already loaded for that element (tensor
operands are read at ``(m, n, l)`` through their strides, broadcast operands
through a zero stride). It returns the Float32 value that is cast and stored, or,
with ``out`` operands, a tuple of it and one value per ``out`` operand.

In a dual (gated) kernel (``KernelSpec.dual``) ``acc`` is a pair of Float32, the
gate and the up accumulator at the element's output coordinates (see ``gated``);
the rest of the contract is the same, so a pointwise chain composes after it as
after any epilogue.

The source sees the names of :data:`inductor_cutedsl.kernels.epilogue_math.NAMESPACE`:
``cute``, ``cutlass``, ``Float32``, ``Int32`` and the helpers defined in
``epilogue_math`` (``relu``, ``sigmoid``, ``silu``, ``tanh``, ``gelu_tanh``,
``gelu_erf``, ``reciprocal``, ``fdiv``, ``select``, ``round_to``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import textwrap

OPERAND_KINDS = ("row", "col", "one", "full", "scalar", "out")
OPERAND_DTYPES = ("bfloat16", "float16", "float32")


@dataclasses.dataclass(frozen=True)
class EpilogueOperand:
    """An extra input of the epilogue.

    kind: ``row``: one value per output column n (a bias over N, stride 0 along M);
    ``col``: one value per output row m (stride 0 along N); ``one``: one value for
    every element (a tensor-wise scale: a one-element tensor, its strides zero at
    compile time, so each thread loads it once, where a runtime zero stride has it
    loaded per element); ``full``: one value per (m, n) (a residual or gate);
    ``scalar``: a Float32 passed at launch; ``out``: an extra (L, M, N) output. An
    epilogue with ``out`` operands returns a tuple: the value for D, then one value per
    ``out`` operand in declaration order.

    ``pairs`` (16-bit ``full`` inputs and ``out`` outputs): the kernel reads columns n
    and n + 1 with one 4-byte load (an output: writes them with one 4-byte store), half
    the load (store) instructions of the epilogue's hottest part. It may only be
    declared for tensors with unit stride along N, even strides along M and L, a
    4-byte aligned base and an even N (``runtime.support`` checks).

    ``staged`` (one 16-bit ``full`` input per epilogue, cooperative configs without
    stream-K): a spare producer warp TMA-loads the input's epilogue sub-tiles into
    shared memory ahead of the epilogue (during the tile's mainloop), and the
    epilogue reads them with ldmatrix instead of global loads that stall the tensor
    cores. Needs unit stride along N, 16-byte aligned base and M/L strides.
    """

    name: str
    kind: str
    dtype: str = "float32"
    pairs: bool = False
    staged: bool = False

    def __post_init__(self) -> None:
        if self.kind not in OPERAND_KINDS:
            raise ValueError(f"operand kind {self.kind!r} not in {OPERAND_KINDS}")
        if self.dtype not in OPERAND_DTYPES:
            raise ValueError(f"operand dtype {self.dtype!r} not in {OPERAND_DTYPES}")
        if self.pairs and (self.kind not in ("full", "out") or self.dtype == "float32"):
            raise ValueError("pairs are for 16-bit full inputs and out outputs")
        if self.staged and (self.kind != "full" or self.dtype == "float32"):
            raise ValueError("staged is for 16-bit full inputs")

    @property
    def is_tensor(self) -> bool:
        return self.kind != "scalar"

    @property
    def is_output(self) -> bool:
        return self.kind == "out"

    @property
    def align_bytes(self) -> int:
        """The alignment the compiled kernel assumes of this tensor's base address."""
        if self.staged:
            return 16
        return (4 if self.dtype == "float32" else 2) * (2 if self.pairs else 1)


@dataclasses.dataclass(frozen=True)
class Epilogue:
    """A compile-time epilogue: ``source`` None means store the accumulator as is."""

    name: str
    source: str | None = None
    operands: tuple[EpilogueOperand, ...] = ()

    @property
    def is_identity(self) -> bool:
        return self.source is None

    def fingerprint(self) -> str:
        """Stable digest of everything that changes the generated code."""
        h = hashlib.sha256()
        h.update((self.source or "<identity>").encode())
        for op in self.operands:
            h.update(f"|{op.kind}:{op.dtype}{':pairs' if op.pairs else ''}{':staged' if op.staged else ''}".encode())
        return h.hexdigest()[:16]


IDENTITY = Epilogue("identity")


def bias(kind: str = "row", dtype: str = "bfloat16") -> Epilogue:
    """acc + bias, the bias broadcast along rows (``row``) or columns (``col``)."""
    return Epilogue(
        f"bias_{kind}",
        "def epilogue(acc, m, n, l, ops):\n    return acc + ops[0]\n",
        (EpilogueOperand("bias", kind, dtype),),
    )


ACTIVATIONS = ("relu", "gelu_tanh", "gelu_erf", "silu", "sigmoid", "tanh")


def bias_activation(activation: str, kind: str = "row", dtype: str = "bfloat16") -> Epilogue:
    """activation(acc + bias)."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation {activation!r} not in {ACTIVATIONS}")
    src = textwrap.dedent(
        f"""\
        def epilogue(acc, m, n, l, ops):
            return {activation}(acc + ops[0])
        """
    )
    return Epilogue(f"bias_{kind}_{activation}", src, (EpilogueOperand("bias", kind, dtype),))


def addmm(beta_alpha: bool, bias_kind: str, dtype: str = "bfloat16") -> Epilogue:
    """alpha * acc + beta * C (``torch.addmm``), C a row/col vector or full matrix."""
    if not beta_alpha:
        return bias(bias_kind, dtype)
    return Epilogue(
        f"addmm_{bias_kind}",
        "def epilogue(acc, m, n, l, ops):\n    return ops[1] * acc + ops[2] * ops[0]\n",
        (
            EpilogueOperand("c", bias_kind, dtype),
            EpilogueOperand("alpha", "scalar"),
            EpilogueOperand("beta", "scalar"),
        ),
    )


SCALE_MODES = ("tensor", "row")


def _scale_operands(scale_a: str, scale_b: str, b_names: tuple[str, ...]) -> list[EpilogueOperand]:
    """fp32 scale operands: A's (one value per output row m if row-wise), then one per
    name in ``b_names`` (one value per column n), each tensor-wise (one value, read
    through zero strides) or row-wise."""
    for name, mode in (("scale_a", scale_a), ("scale_b", scale_b)):
        if mode not in SCALE_MODES:
            raise ValueError(f"{name} mode {mode!r} not in {SCALE_MODES}")
    a = EpilogueOperand("scale_a", "col" if scale_a == "row" else "one", "float32")
    kind_b = "row" if scale_b == "row" else "one"
    return [a, *(EpilogueOperand(name, kind_b, "float32") for name in b_names)]


def scaled(scale_a: str, scale_b: str, bias: str | None = None, scale_result: bool = False) -> Epilogue:
    """``(acc * scale_a * scale_b [+ bias]) [/ scale_result]``: what ``torch._scaled_mm``
    computes from an fp8 product, in fp32, scales before the bias. Scales are fp32
    tensors, tensor-wise (one value: a 0-dim or one-element tensor, read through zero
    strides) or row-wise (``scale_a`` one value per output row m, an (M, 1) tensor;
    ``scale_b`` one per column n, a (1, N) tensor); ``bias``: the dtype of a row over N,
    or None; ``scale_result``: one fp32 value dividing the result, for an fp8 output
    (torch divides by it, as its CPU kernel shows; the caller refuses it for other
    outputs, which torch ignores it for). Operands, in order: scale_a, scale_b, the
    bias, scale_result (as given)."""
    ops = _scale_operands(scale_a, scale_b, ("scale_b",))
    result = "acc * ops[0] * ops[1]"
    if bias is not None:
        result += f" + ops[{len(ops)}]"
        ops.append(EpilogueOperand("bias", "row", bias))
    if scale_result:
        result = f"fdiv({result}, ops[{len(ops)}])"
        ops.append(EpilogueOperand("scale_result", "one", "float32"))
    name = f"scaled_{scale_a}_{scale_b}" + (f"_bias_{bias}" if bias is not None else "") + "_sr" * scale_result
    return Epilogue(name, f"def epilogue(acc, m, n, l, ops):\n    return {result}\n", tuple(ops))


GATED_ACTIVATIONS = ("silu", "gelu_tanh", "gelu_erf", "relu")


def gated(
    activation: str,
    bias_gate: str | None = None,
    bias_up: str | None = None,
    keep: str | None = None,
    rounding: str | None = None,
    keep_pairs: bool = False,
    scales: tuple[str, str] | None = None,
) -> Epilogue:
    """``activation(gate + bias_gate) * (up + bias_up)``: the epilogue of a dual kernel.

    ``scales``: an fp8 dual kernel's (scale_a, scale_b) modes (``SCALE_MODES``), the
    accumulators being products of e4m3 operands: gate = acc_gate * scale_a *
    scale_gate and up = acc_up * scale_a * scale_up before their biases, as two
    ``torch._scaled_mm`` compute them (the two weights' scales in the same mode).
    ``bias_gate`` / ``bias_up``: the dtype of a row bias over the output's columns, or
    None for no bias. ``keep``: the dtype of two extra outputs, ``gate`` and ``up``
    with their biases added (what the backward pass reads), or None. ``rounding``:
    round gate and up (biases added) through this dtype before the product: what two
    GEMMs writing that dtype and a pointwise kernel reading them compute.
    ``keep_pairs``: the kept outputs (16-bit) are written two columns per store
    (``EpilogueOperand.pairs``: their layouts must allow it).
    Operands, in order: the scales (scale_a, scale_gate, scale_up), the biases given,
    then the kept outputs.
    """
    if activation not in GATED_ACTIVATIONS:
        raise ValueError(f"activation {activation!r} not in {GATED_ACTIVATIONS}")
    ops: list[EpilogueOperand] = []
    lines = ["def epilogue(acc, m, n, l, ops):", "    gate, up = acc"]
    if scales is not None:
        ops += _scale_operands(*scales, ("scale_gate", "scale_up"))
        lines += ["    gate = gate * ops[0] * ops[1]", "    up = up * ops[0] * ops[2]"]
    for name, dtype in (("gate", bias_gate), ("up", bias_up)):
        if dtype is not None:
            lines.append(f"    {name} = {name} + ops[{len(ops)}]")
            ops.append(EpilogueOperand(f"bias_{name}", "row", dtype))
    if rounding is not None:
        lines += [f"    gate = round_to(gate, {rounding!r})", f"    up = round_to(up, {rounding!r})"]
    result = f"{activation}(gate) * up"
    if keep is not None:
        ops += [EpilogueOperand(name, "out", keep, keep_pairs) for name in ("gate", "up")]
        result += ", gate, up"
    lines.append(f"    return {result}")
    name = "_".join(
        ["gated", activation]
        + ([f"scaled_{scales[0]}_{scales[1]}"] if scales is not None else [])
        + ["bias_gate"] * (bias_gate is not None)
        + ["bias_up"] * (bias_up is not None)
        + ["keep"] * (keep is not None)
        + ["pairs"] * keep_pairs
        + [f"round_{rounding}"] * (rounding is not None)
    )
    return Epilogue(name, "\n".join(lines) + "\n", tuple(ops))
