"""CuteDSL candidates for Inductor's mm / addmm / bmm / baddbmm and fp8 ``_scaled_mm``
autotuning.

Each GEMM is first checked against what the kernel can take, on the IR (static
sizes, strides and offsets, proven without adding guards). A GEMM that fails a
check gets no CuteDSL candidate, and the reason goes to the
``inductor_cutedsl.lowering`` logger (``TORCH_LOGS="+inductor_cutedsl"``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch

from .. import config
from ..compat import ir_access, settings
from ..config import BACKEND_TOKEN
from ..errors import Unsupported, fallback
from ..kernels import epilogue as E
from ..kernels.config import PROMOTE_NONE, PROMOTE_TILE, promotion_mode, shortlist, under_one_wave
from ..runtime import compiler
from ..runtime.launch import default_cache
from ..runtime.spec import ALIGNMENT, KernelSpec
from ..runtime.support import (
    A_MAJOR,
    AB_DTYPES,
    B_MAJOR,
    FP8_DTYPES,
    OUT_DTYPES,
    STORE_DTYPES,
    device_reason,
    scale_mode,
)
from .candidate import GemmCandidate
from .template import gemm_template

log = logging.getLogger("inductor_cutedsl.lowering")

GEMM_OPS = ("mm", "addmm", "bmm", "baddbmm")
#: Inductor's name for ``aten._scaled_mm`` (fp8), whose candidates ``scaled_candidates`` makes.
SCALED_OP = "scaled_mm"


def _contiguous_mode(name: str, node: Any) -> str:
    """'last' or 'first': which mode of a (.., R, C) operand is contiguous (16-byte rules checked)."""
    size, stride = node.get_size(), node.get_stride()
    align = ALIGNMENT // node.get_dtype().itemsize
    if ir_access.is_one(stride[-1]):
        major, lead = "last", stride[-2]
    elif ir_access.is_one(stride[-2]):
        major, lead = "first", stride[-1]
    else:
        raise Unsupported(f"{name} has no unit-stride matrix mode (strides {list(stride)})", "layout")
    if not ir_access.multiple_of(lead, align):
        raise Unsupported(f"{name} leading stride {lead} is not a multiple of 16 bytes", "tma-alignment")
    if len(size) == 3 and not ir_access.is_one(size[0]) and not ir_access.multiple_of(stride[0], align):
        raise Unsupported(f"{name} batch stride {stride[0]} is not a multiple of 16 bytes", "tma-alignment")
    if len(size) == 3 and ir_access.size_hint(size[0]) > 1 and ir_access.size_hint(stride[0]) == 0:
        raise Unsupported(f"{name} has a broadcast batch", "broadcast-batch")
    if not ir_access.multiple_of(ir_access.offset_of(node), align):
        raise Unsupported(f"{name} storage offset is not a multiple of 16 bytes", "tma-alignment")
    return major


def _device_reason(node: Any) -> str | None:
    device = ir_access.device_of(node)
    return "tensor has no device" if device is None else device_reason(device)


def _check_operands(a: Any, b: Any, out_dtype: Any, ab_dtypes: dict, out_dtypes: dict, takes: str) -> None:
    """Unsupported unless A is on a GPU the kernel targets, A and B share a dtype in
    ``ab_dtypes`` (``takes`` names them in the reason) and ``out_dtype`` is in ``out_dtypes``."""
    reason = _device_reason(a)
    if reason:
        raise Unsupported(reason, "device")
    if a.get_dtype() not in ab_dtypes or b.get_dtype() != a.get_dtype():
        raise Unsupported(f"operand dtypes {a.get_dtype()}/{b.get_dtype()} (CuteDSL takes {takes})", "dtype")
    if out_dtype not in out_dtypes:
        raise Unsupported(f"output dtype {out_dtype}", "dtype")


#: Rows up to which a GEMM is decode-sized: its shortlist offers a stream-K tile in CUDA
#: graphs (``kernels.config.shortlist``), which keeps its whole list.
SKINNY_ROWS = 64
#: Rows up to which a GEMM under one wave of tiles is small (see SMALL_PROBLEM_CONFIGS).
SMALL_ROWS = 256
#: Configs offered for a problem under one wave of 128x128 tiles with M of 65-256 rows
#: (above decode size). In the autotunings of the transformers rows at 256 tokens
#: (``h200-warm-start.json``'s autotune logs, 20 GEMMs of 8 shapes) our best config lost
#: every one, to cuBLAS or a Triton template, by 1.05-1.8x, and the shortlist's first
#: config was within 8% of our best at each shape: further configs bought nothing and
#: cost a build and a benchmark each. One is still offered, so that a fused epilogue
#: can be measured against the unfused way.
SMALL_PROBLEM_CONFIGS = 1
#: Operand types those autotunings measured; fp8 keeps its list.
MEASURED_SMALL = ("bfloat16", "float16")


def candidate_specs(
    mnkl: tuple[int, int, int, int],
    ab_dtype: str,
    out_dtype: str,
    a_major: str,
    b_major: str,
    epilogue: E.Epilogue,
    promote: bool = False,
) -> list[KernelSpec]:
    """The short list of kernels offered for one GEMM (``config.max_configs`` at most);
    ``promote``: an fp8 GEMM whose partial sums are promoted, each config in the mode it
    has registers for (``promotion_mode``)."""
    in_bytes, out_bytes = (getattr(torch, name).itemsize for name in (ab_dtype, out_dtype))
    limit = config.max_configs
    m, n, _, batch = mnkl
    if ab_dtype in MEASURED_SMALL and SKINNY_ROWS < m <= SMALL_ROWS and under_one_wave(m, n, batch):
        limit = min(limit, SMALL_PROBLEM_CONFIGS)
    return [
        KernelSpec(
            cfg,
            ab_dtype,
            out_dtype,
            a_major,
            b_major,
            epilogue,
            promote=promotion_mode(cfg) if promote else PROMOTE_NONE,
        )
        for cfg in shortlist(
            *mnkl,
            limit=limit,
            promote=PROMOTE_TILE if promote else PROMOTE_NONE,
            graphs=settings.compile_uses_cudagraphs(),
        )
        if cfg.invalid_reason(in_bytes, out_bytes) is None
    ]


def bias_kind(size: Sequence[Any], stride: Sequence[Any]) -> str:
    """How addmm's C broadcasts to the output: ``row`` (a bias over N: constant along M),
    ``col`` (constant along N) or ``full``. C comes expanded to the output's size (a
    broadcast mode has stride 0) or as given (newer Inductor's ATen ask: a 1-D bias, or
    a mode of size 1). Only a broadcast the graph proves (a zero stride or a size of
    exactly 1, not merely for these sizes) makes a vector: the kernel then compiles that
    stride in, and reads each bias value once per column instead of once per element."""
    along_m = len(size) < 2 or stride[-2] == 0 or ir_access.is_one(size[-2])
    along_n = stride[-1] == 0 or ir_access.is_one(size[-1])
    if along_m and not along_n:
        return "row"
    if along_n and not along_m:
        return "col"
    return "full"


def _graph_refusal() -> None:
    """Unsupported when nothing of this graph may run our kernel (settings, code generation)."""
    if not settings.backend_enabled(BACKEND_TOKEN):
        raise Unsupported(f"{BACKEND_TOKEN} is not in max_autotune_gemm_backends", "backend-off")
    if not settings.max_autotune_on():
        raise Unsupported("max-autotune is off", "max-autotune-off")
    blocked = ir_access.codegen_blocked()
    if blocked:
        raise Unsupported(blocked, "codegen-blocked")


def _output_layout(kernel_inputs: Any, out_dtype: Any) -> Any:
    """The GEMM's fixed output layout, or Unsupported where the TMA store cannot write it."""
    layout = kernel_inputs.output_layout(flexible=False)
    out_stride = layout.stride
    if not ir_access.is_one(out_stride[-1]) or not ir_access.multiple_of(
        out_stride[-2], ALIGNMENT // out_dtype.itemsize
    ):
        raise Unsupported(f"output layout {list(out_stride)} is not row-major with 16-byte rows", "tma-alignment")
    _check_output_width(layout.size[-1], out_dtype)
    return layout


def _check_output_width(width: Any, out_dtype: Any) -> None:
    """Unsupported unless an output row of ``width`` elements is provably whole 16-byte
    units: the TMA store writes no less (runtime.support.row_width_reason)."""
    if not ir_access.multiple_of(width, ALIGNMENT // out_dtype.itemsize):
        raise Unsupported(f"output width {width} is not provably whole 16-byte units", "tma-alignment")


def check_plain_gemm(a: Any, b: Any) -> None:
    """Unsupported unless this graph may run our kernel and it takes ``a @ b`` (IR nodes)
    as the operands are laid out now, with a row-major output of their dtype: the checks
    ``gemm_candidates`` makes of an ``mm``, for a GEMM not lowered yet."""
    _graph_refusal()
    _check_operands(a, b, a.get_dtype(), AB_DTYPES, OUT_DTYPES, "bf16 or fp16")
    _contiguous_mode("A", a)
    _contiguous_mode("B", b)
    _check_output_width(b.get_size()[-1], a.get_dtype())


def gemm_candidates(kernel_inputs: Any, op_name: str) -> tuple[list[GemmCandidate], Any]:
    """The candidates for this GEMM, and the output layout they share.

    Raises Unsupported when the GEMM must not get a CuteDSL candidate.
    """
    _graph_refusal()
    if op_name == SCALED_OP:
        return scaled_candidates(kernel_inputs)
    nodes = kernel_inputs.nodes()
    has_c = op_name in ("addmm", "baddbmm")
    c, a, b = nodes if has_c else (None, *nodes)
    ab_dtype, out_dtype = a.get_dtype(), kernel_inputs.out_dtype()
    _check_operands(a, b, out_dtype, AB_DTYPES, OUT_DTYPES, "bf16 or fp16")
    # The operands' layouts are checked as they stand and frozen only once every check
    # passed (below): a GEMM we refuse leaves Inductor free to pad or re-lay them.
    a_major = A_MAJOR[_contiguous_mode("A", a)]
    b_major = B_MAJOR[_contiguous_mode("B", b)]
    layout = _output_layout(kernel_inputs, out_dtype)

    epilogue: E.Epilogue = E.IDENTITY
    scalars: tuple[float, ...] = ()
    if has_c:
        if c.get_dtype() not in OUT_DTYPES:
            raise Unsupported(f"bias dtype {c.get_dtype()}", "dtype")
        alpha = float(kernel_inputs.get_scalar("alpha"))
        beta = float(kernel_inputs.get_scalar("beta"))
        bias_dtype = OUT_DTYPES[c.get_dtype()]
        if beta == 0.0:
            raise Unsupported("beta == 0 (the bias must be ignored, even NaN): plain mm fits better", "beta-zero")
        kind = bias_kind(c.get_size(), c.get_stride())
        if alpha == 1.0 and beta == 1.0:
            epilogue = E.bias(kind, bias_dtype)
        else:
            epilogue, scalars = E.addmm(True, kind, bias_dtype), (alpha, beta)

    m, n, k = (ir_access.size_hint(x) for x in kernel_inputs.mnk_symbolic())
    batch = ir_access.size_hint(a.get_size()[0]) if len(a.get_size()) == 3 else 1
    specs = candidate_specs((m, n, k, batch), AB_DTYPES[ab_dtype], OUT_DTYPES[out_dtype], a_major, b_major, epilogue)
    names, operands = (("c", "a", "b"), ("c",)) if has_c else (("a", "b"), ())
    for node in (a, b):
        ir_access.freeze_layout(node)
    return [GemmCandidate(spec, names, operands, scalars=tuple(scalars)) for spec in specs], layout


def operand_scale_mode(name: str, node: Any, size: tuple[int, int]) -> str:
    """``support.scale_mode`` of a scale node; Unsupported for any other (block-wise, MX) scale."""
    shape = [ir_access.size_hint(s) for s in node.get_size()]
    mode = scale_mode(shape, node.get_dtype(), *size)
    if mode is None:
        raise Unsupported(
            f"{name} is {node.get_dtype()} of shape {shape}: CuteDSL takes fp32 scales, "
            f"tensor-wise or row-wise {list(size)} only (not block-wise)",
            "scale-mode",
        )
    return mode


def scaled_candidates(kernel_inputs: Any) -> tuple[list[GemmCandidate], Any]:
    """The candidates for ``aten._scaled_mm`` (fp8 e4m3, both operands K-major, fp32
    scales tensor-wise or row-wise, optional bias), and their output layout: our kernel
    with the scales (and bias) as its epilogue, promoting the partial sums every k-tile
    unless the op asks for fast accumulation. Raises Unsupported. Called by
    ``gemm_candidates`` once the graph-wide refusals are checked."""
    if not config.fp8:
        raise Unsupported("fp8 candidates are off (INDUCTOR_CUTEDSL_FP8=1 offers them)", "fp8-off")
    if "_scaled_mm_v2" in str(ir_access.current_node_target()):
        # torch 2.15's ``F.scaled_mm`` asks for choices under the same name, with scale
        # lists and recipes where ``_scaled_mm`` has tensors: its arguments read otherwise.
        raise Unsupported("torch._scaled_mm_v2 (F.scaled_mm) gets no CuteDSL candidates", "scaled-mm-v2")
    a, b, scale_a, scale_b, *rest = kernel_inputs.nodes()
    bias = rest[0] if rest else None
    ab_dtype, out_dtype = a.get_dtype(), kernel_inputs.out_dtype()
    _check_operands(a, b, out_dtype, FP8_DTYPES, STORE_DTYPES, "fp8 e4m3 here")
    if ir_access.current_node_arg("scale_result", 5, None) is not None:
        # Inductor gives templates no scale_result input to read it from.
        raise Unsupported("scale_result (an fp8 output's scale) is not among the template's inputs", "scale-result")
    if (_contiguous_mode("A", a), _contiguous_mode("B", b)) != ("last", "first"):
        raise Unsupported(
            "fp8 operands must both be K-major (A row-major, B column-major): Hopper's fp8 MMA", "fp8-layout"
        )
    m, n, k = (ir_access.size_hint(x) for x in kernel_inputs.mnk_symbolic())
    modes = (operand_scale_mode("scale_a", scale_a, (m, 1)), operand_scale_mode("scale_b", scale_b, (1, n)))
    if bias is not None and (bias.get_dtype() not in OUT_DTYPES or len(bias.get_size()) != 1):
        raise Unsupported(f"bias {bias.get_dtype()} of {len(bias.get_size())} dims (want N values)", "dtype")
    layout = _output_layout(kernel_inputs, out_dtype)
    promote = not ir_access.current_node_arg("use_fast_accum", 7, False)
    epi = E.scaled(*modes, OUT_DTYPES[bias.get_dtype()] if bias is not None else None)
    specs = candidate_specs((m, n, k, 1), FP8_DTYPES[ab_dtype], STORE_DTYPES[out_dtype], "k", "k", epi, promote)
    names = ("a", "b", "scale_a", "scale_b") + (("bias",) if bias is not None else ())
    for node in (a, b):
        ir_access.freeze_layout(node)
    return [GemmCandidate(spec, names, names[2:]) for spec in specs], layout


def gemm_choices(kernel_inputs: Any, op_name: str) -> list[Any]:
    """ChoiceCallers for this GEMM (their kernels building in the background); [] when refused."""
    if not config.enabled or op_name not in (*GEMM_OPS, SCALED_OP):
        return []
    try:
        candidates, layout = gemm_candidates(kernel_inputs, op_name)
    except Unsupported as why:
        log.info("no CuteDSL candidate for %s: %s [%s]", op_name, why, why.rule)
        return []
    # Builds start now, in worker processes, and overlap the rest of lowering; each
    # candidate waits for its own when Inductor precompiles or benchmarks it.
    # A build that fails later makes Inductor drop that candidate at precompile.
    builds = {}
    for cand in candidates:
        try:
            build = compiler.build_async(cand.spec, default_cache(), config.compile_workers)
            failed = build.exception() if build.done() else None
            if failed is not None:
                raise failed
        except Exception as exc:  # a kernel that did not build is simply not offered
            fallback("kernel build", f"{op_name} candidate {cand.spec.describe()}", exc, log)
        else:
            builds[cand] = build
    return list(_callers(builds, layout, kernel_inputs.nodes(), op_name))


def _callers(builds: dict, layout: Any, nodes: list, op_name: str):
    template = gemm_template()
    for cand, build in builds.items():
        try:
            caller = template.generate(input_nodes=nodes, layout=layout, candidate=cand)
        except Exception as exc:  # one bad candidate must not sink the others
            fallback("candidates", f"{op_name} candidate {cand.spec.describe()}", exc, log)
        else:
            caller.build = build
            log.debug("offering CuteDSL %s for %s", cand.spec.describe(), op_name)
            yield caller
