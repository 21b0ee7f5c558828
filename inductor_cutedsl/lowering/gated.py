"""The lowering of a gated MLP's op (``gated_op``) as one dual-GEMM kernel, or as the graph was.

``lower`` measures our dual kernel against the best alternative, the graph's own
GEMMs and a pointwise kernel, side by side, and keeps the faster: ours writes ``h``,
and ``gate`` / ``up`` as extra outputs of the same kernel where anything reads them
(training); the alternative is lowered as the graph was. Any failure of ours here
lowers the graph as it was (``errors.fallback``).
"""

from __future__ import annotations

import logging
import math
import time
import weakref
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from .. import config
from ..compat import autotune, ir_access, lowerings, settings
from ..compat.lazy import V, ir_ops
from ..config import BACKEND_TOKEN
from ..errors import Unsupported, fallback
from ..kernels import epilogue as E
from ..kernels.config import PROMOTE_NONE, PROMOTE_TILE, dual_shortlist, promotion_mode
from ..runtime import compiler, records
from ..runtime.launch import default_cache
from ..runtime.spec import ALIGNMENT, KernelSpec
from ..runtime.support import AB_DTYPES, FP8_DTYPES, OUT_DTYPES, device_reason
from ..timing import side_by_side
from . import fair_timing, gated_op  # noqa: F401  (gated_op registers the op this lowers)
from .candidate import GemmCandidate
from .gemm_choices import SKINNY_ROWS, SMALL_ROWS, operand_scale_mode
from .template import gemm_template

log = logging.getLogger("inductor_cutedsl.lowering")


def _operand_reason(name: str, node: Any, major_mode: int) -> str | None:
    """TMA's rules for an (R, C) operand whose mode ``major_mode`` is contiguous."""
    stride, align = node.get_stride(), ALIGNMENT // node.get_dtype().itemsize
    lead = stride[1 - major_mode]
    if not ir_access.is_one(stride[major_mode]):
        return f"{name} strides {list(stride)} are not contiguous along mode {major_mode}"
    if not ir_access.multiple_of(lead, align) or not ir_access.multiple_of(ir_access.offset_of(node), align):
        return f"{name} rows or offset are not 16-byte aligned"
    return None


def _check_product(x, w_gate, w_up, biases, dtypes: dict, k_mode: int) -> None:
    """The refusals (Unsupported) every dual kernel shares: the backend off, code that
    cannot be generated, operands not all of one of ``dtypes``, biases of other than a
    16- or 32-bit float or of more than one dim, the two weights laid out differently,
    and operands TMA cannot read with K contiguous (the weights' mode ``k_mode``)."""
    if not settings.backend_enabled(BACKEND_TOKEN):
        raise Unsupported(f"{BACKEND_TOKEN} is not in max_autotune_gemm_backends", "backend-off")
    blocked = ir_access.codegen_blocked() or device_reason(ir_access.device_of(x))
    if blocked:
        raise Unsupported(blocked, "codegen-blocked")
    dtype = x.get_dtype()
    if dtype not in dtypes or {w_gate.get_dtype(), w_up.get_dtype()} != {dtype}:
        want = "/".join(sorted(map(str, dtypes)))
        raise Unsupported(f"dtypes {dtype}/{w_gate.get_dtype()}/{w_up.get_dtype()} (equal, one of {want})", "dtype")
    for b in biases:
        if b is not None and (b.get_dtype() not in OUT_DTYPES or len(b.get_size()) != 1):
            raise Unsupported(f"bias dtype {b.get_dtype()} of {len(b.get_size())} dims", "dtype")
    for weight in (w_gate, w_up):
        ir_access.freeze_layout(weight)
    if list(w_gate.get_stride()) != list(w_up.get_stride()):
        raise Unsupported("the two weights are laid out differently", "layout")
    reasons = [
        _operand_reason("x", x, 1),
        _operand_reason("w_gate", w_gate, k_mode),
        _operand_reason("w_up", w_up, k_mode),
    ]
    if any(reasons):
        raise Unsupported("; ".join(r for r in reasons if r), "tma-alignment")


def candidates(x2, w_gate, w_up, b_gate, b_up, activation: str, keep: bool) -> list[GemmCandidate]:
    """Our dual-kernel candidates for ``act(x2 @ w_gate^T + b_gate) * (...)``, or Unsupported."""
    _check_product(x2, w_gate, w_up, (b_gate, b_up), AB_DTYPES, 1)
    dtype = x2.get_dtype()
    m, k = (ir_access.size_hint(s) for s in x2.get_size())
    n = ir_access.size_hint(w_gate.get_size()[0])
    if n % (ALIGNMENT // dtype.itemsize):
        raise Unsupported(f"output width {n} is not a multiple of 16 bytes", "tma-alignment")
    ab = AB_DTYPES[dtype]
    epi = E.gated(
        activation,
        bias_gate=OUT_DTYPES[b_gate.get_dtype()] if b_gate is not None else None,
        bias_up=OUT_DTYPES[b_up.get_dtype()] if b_up is not None else None,
        keep=ab if keep else None,
        rounding=ab,
        keep_pairs=keep,  # fresh contiguous buffers (below), N a multiple of 16 bytes
    )
    operands = tuple(name for name, b in (("bias_gate", b_gate), ("bias_up", b_up)) if b is not None)
    operands += ("gate", "up") if keep else ()
    names = ("a", "b", "b_up") + operands
    limit = config.max_configs
    if SKINNY_ROWS < m <= SMALL_ROWS:
        limit = min(limit, SMALL_DUAL_CONFIGS)
    return [
        GemmCandidate(KernelSpec(cfg, ab, ab, "k", "k", epi, dual=True), names, operands)
        for cfg in dual_shortlist(m, n, k, limit=limit, graphs=settings.compile_uses_cudagraphs())
    ]


#: Dual configs offered for a gated product of 65-256 rows (above decode size, as the
#: plain GEMMs' ``SMALL_PROBLEM_CONFIGS``). In the gate's measurements of the four
#: transformers LLM rows at 256 tokens (``h200-warm-start.json``, the decisions' ``config``
#: and ``candidates_ms``; N of 8192-14336), the shortlist's first config won every time,
#: by 8-44% over the others where they were timed: the two others cost two builds and
#: two measurements a product and bought nothing. One is still measured against the
#: two GEMMs and a pointwise kernel.
SMALL_DUAL_CONFIGS = 1


#: Wall seconds spent measuring dual kernels against their alternative, this process.
stats = {"measure_s": 0.0, "reused": 0, "recorded": 0}


#: One record per measured gated product in this process.
decisions: list[dict] = []
#: Per graph being compiled: what a measured gated product decided (the index of the
#: winning candidate, or None for the alternative), by what the outcome depends on.
#: The layers of a model repeat one product: the first measures, the others take it.
_measured: weakref.WeakKeyDictionary[Any, dict] = weakref.WeakKeyDictionary()


def measure(runs: dict[str, Callable[[], Callable[[], object]]], device: Any) -> dict[str, float]:
    """Milliseconds of each run (a maker of a function running it once), side by side
    as CUDA graph replays; inf for one that fails."""

    with torch.cuda.device(device):
        return side_by_side(runs, rounds=4)


def _operands(shapes, dtype, device, has_bias) -> tuple:
    """Random x (M, K), gate and up weights (N, K) and the biases asked for."""
    (m, k), n = shapes
    x = torch.randn(m, k, dtype=dtype, device=device)
    wg, wu = (torch.randn(n, k, dtype=dtype, device=device) * k**-0.5 for _ in range(2))
    bg, bu = (torch.randn(n, dtype=dtype, device=device) if has else None for has in has_bias)
    return x, wg, wu, bg, bu


def _alternative_maker(shapes, dtype, device, activation, has_bias, fused) -> Callable[[], Callable[[], object]]:
    """The graph's cuBLAS GEMMs (two, or one over the ``fused`` weight) and one pointwise
    kernel: what stock Inductor runs."""

    def make():
        from .gated_product import gated_product

        x, wg, wu, bg, bu = _operands(shapes, dtype, device, has_bias)
        if fused:
            w, b = torch.cat([wg, wu]), torch.cat([bg, bu]) if bg is not None else None

            def run() -> torch.Tensor:
                gate, up = F.linear(x, w, b).chunk(2, -1)
                return gated_product(gate, up, activation)

            return run
        return lambda: gated_product(F.linear(x, wg, bg), F.linear(x, wu, bu), activation)

    return make


def _dual_maker(cand: GemmCandidate, shapes, dtype, device, has_bias, keep) -> Callable[[], Callable[[], object]]:
    """One launch of our dual kernel ``cand``, as the generated code makes it."""
    (m, _), n = shapes

    def make():
        x, wg, wu, bg, bu = _operands(shapes, dtype, device, has_bias)
        ops = [b for b in (bg, bu) if b is not None]
        ops += [torch.empty(m, n, dtype=dtype, device=device) for _ in range(2 * keep)]
        out = torch.empty(m, n, dtype=dtype, device=device)
        launch = cand.launcher()
        stream = torch.cuda.current_stream().cuda_stream
        return lambda: launch(x, wg.t(), out, *ops, b_up=wu.t(), stream=stream)

    return make


def decide(
    cands: list[GemmCandidate], shapes, dtype, device, activation, has_bias, keep, fused
) -> GemmCandidate | None:
    """Our fastest dual candidate if it beats the alternative side by side, else None;
    decided once per graph for each product (``_measured``)."""
    runs = {f"dual{i}": _dual_maker(c, shapes, dtype, device, has_bias, keep) for i, c in enumerate(cands)}
    runs["alternative"] = _alternative_maker(shapes, dtype, device, activation, has_bias, fused)
    key = (str(device), str(dtype), shapes, activation, has_bias, keep, fused)
    return _decide(cands, key, runs, device, activation, shapes, "fused" if fused else "two")


def _decide(
    cands: list[GemmCandidate], key: tuple, runs: dict, device, activation: str, shapes, form: str
) -> GemmCandidate | None:
    """``decide`` for a product that measurement depends on as ``key`` says, timed as
    ``runs`` (``dual<i>`` per candidate, and ``alternative``) run it."""
    # The regime too: without CUDA graphs the launches' host time counts (``launch_charges``).
    key = (*key, tuple(c.spec.key() for c in cands), fair_timing.regime())
    memo = _measured.setdefault(V.graph, {})
    if key in memo:
        best = memo[key]
        stats["reused"] += 1
        log.info("gated %s: %s, as its graph's products of the same shapes were measured", activation, best)
        return None if best is None else cands[best]
    recorded = records.read("gated", repr(key), str(device))
    if isinstance(recorded, dict) and recorded.get("best") in (None, *range(len(cands))):
        best = memo[key] = recorded["best"]
        stats["recorded"] += 1
        log.info("gated %s: %s, as an earlier compile measured", activation, best)
        return None if best is None else cands[best]
    builds = [compiler.build_async(c.spec, default_cache(), config.compile_workers) for c in cands]
    compiler.wait(builds)
    t0 = time.perf_counter()
    with autotune.preserve_rng_state():
        times = measure(runs, device)
        # The dual kernel is one launch where the alternative is three. The alternative's
        # pointwise kernel launches through Triton's Python launcher, slower than
        # Inductor's generated launch: that leans the call towards the dual kernel a little.
        host = fair_timing.launch_charges(runs, times, device)
    stats["measure_s"] += time.perf_counter() - t0
    paced = {name: t + host.get(name, 0.0) for name, t in times.items()}
    best = min(range(len(cands)), key=lambda i: paced.get(f"dual{i}", math.inf))
    ours, other = paced.get(f"dual{best}", math.inf), paced.get("alternative", math.inf)
    (m, k), n = shapes
    log.info(
        "gated %s %dx%dx%d: dual %s %.4f ms, two GEMMs + pointwise %.4f ms%s -> %s",
        activation,
        m,
        n,
        k,
        cands[best].spec.config.name(),
        ours,
        other,
        " (GPU + host)" if host else "",
        "dual" if ours < other else "two GEMMs",
    )
    decisions.append(
        {
            "shape": [m, n, k],
            "activation": activation,
            "form": form,
            "dual_ms": times.get(f"dual{best}", math.inf),
            "alternative_ms": times.get("alternative", math.inf),
            **({"host_ms": host} if host else {}),
            "config": cands[best].spec.config.name(),
            # Every candidate's time, by config: what a shorter list would have lost.
            "candidates_ms": {c.spec.config.name(): times.get(f"dual{i}", math.inf) for i, c in enumerate(cands)},
            "way": "dual" if ours < other else "alternative",
        }
    )
    memo[key] = best if ours < other else None
    records.write("gated", repr(key), str(device), {"best": memo[key]})
    return cands[best] if ours < other else None


def _halves(t: Any, n: Any) -> tuple[Any, Any]:
    """Rows [0, n) and [n, 2n) of ``t`` (a fused weight or bias), as views."""
    L, aten = lowerings.lowering, torch.ops.aten
    return L(aten.slice)(t, 0, 0, n), L(aten.slice)(t, 0, n, 2 * n)


def lower(x, w_gate, w_up, b_gate, b_up, activation):
    """Inductor's lowering of ``gated_mm``: our dual kernel, or what the graph was."""
    L, aten = lowerings.lowering, torch.ops.aten
    k = x.get_size()[-1]
    lead = list(x.get_size()[:-1])
    x2 = L(aten.reshape)(x, [-1, k])
    keep = ir_access.current_node_output_used(1) or ir_access.current_node_output_used(2)
    fused = w_up is None
    if fused:  # the dual kernel reads the halves of the one weight (and bias)
        n = w_gate.get_size()[0] // 2
        (wg, wu), (bg, bu) = _halves(w_gate, n), _halves(b_gate, n) if b_gate is not None else (None, None)
    else:
        n, wg, wu, bg, bu = w_gate.get_size()[0], w_gate, w_up, b_gate, b_up
    try:
        return _dual(x2, wg, wu, bg, bu, activation, keep, fused, lead, n)
    except Unsupported as why:
        log.info("gated %s: no dual kernel: %s [%s]", activation, why, why.rule)
    except Exception as exc:
        fallback("lowering", f"gated {activation} product", exc, log)
    args = (x, w_gate, w_up, b_gate, b_up, activation)
    as_graph = lambda: _as_graph(x2, w_gate, w_up, b_gate, b_up, activation, lead, n)
    return _graph_or_op(torch.ops.inductor_cutedsl.gated_mm.default, as_graph, *args)


def _graph_or_op(op: Any, as_graph: Callable[[], Any], *args: Any) -> Any:
    """``as_graph()``, the graph's ops as stock lowers them; should that fail (a bug of
    ours: the op is ours, so stock would have lowered those ops), ``op`` itself as an
    extern kernel, which computes what the graph did."""
    try:
        return as_graph()
    except Exception as exc:
        fallback("lowering", f"{op} as the graph's ops", exc, log)
    return lowerings.extern(op)(*args)


def _dual(x2, wg, wu, bg, bu, activation, keep, fused, lead, n):
    """Our dual kernel's lowering of the product (h, gate, up), if one measures faster
    than the alternative; Unsupported otherwise."""
    L, aten = lowerings.lowering, torch.ops.aten
    # What the template reads: realized buffers (or views of them).
    real = [ir_access.realized(t) if t is not None else None for t in (x2, wg, wu, bg, bu)]
    cands = candidates(real[0], real[1], real[2], real[3], real[4], activation, keep)
    if not cands:
        raise Unsupported("no dual config fits", "dual-config")
    shapes = ((ir_access.size_hint(x2.get_size()[0]), ir_access.size_hint(x2.get_size()[1])), ir_access.size_hint(n))
    has_bias = (bg is not None, bu is not None)
    chosen = decide(cands, shapes, x2.get_dtype(), ir_access.device_of(x2), activation, has_bias, keep, fused)
    if chosen is None:
        raise Unsupported("two GEMMs and a pointwise kernel measured faster", "measured-slower")
    wg_t, wu_t = (ir_access.realized(L(aten.permute)(w, [1, 0])) for w in (wg, wu))
    size = [x2.get_size()[0], n]
    inputs = [real[0], wg_t, wu_t] + [b for b in real[3:] if b is not None]
    kept = [ir_access.empty_buffer(size, x2.get_dtype(), ir_access.device_of(x2)) for _ in range(2 * keep)]
    layout = ir_access.fixed_layout(size, x2.get_dtype(), ir_access.device_of(x2))
    caller = gemm_template().generate(
        input_nodes=inputs + kept, layout=layout, candidate=chosen, mutated_inputs=kept or None
    )
    h = caller.output_node()
    gate, up = kept if keep else (h, h)  # unread when not kept
    return tuple(L(aten.reshape)(t, lead + [n]) for t in (h, gate, up))


def _as_graph(x2, w_gate, w_up, b_gate, b_up, activation, lead, n):
    """The graph's Linear layers (two, or one whose output is cut in two) and the gated
    product, lowered as Inductor would lower them."""
    L, aten = lowerings.lowering, torch.ops.aten

    def linear(w, b):
        wt = L(aten.permute)(w, [1, 0])
        return L(aten.mm)(x2, wt) if b is None else L(aten.addmm)(b, x2, wt)

    if w_up is None:
        both = linear(w_gate, b_gate)
        gate, up = L(aten.slice)(both, 1, 0, n), L(aten.slice)(both, 1, n, 2 * n)
    else:
        gate, up = linear(w_gate, b_gate), linear(w_up, b_up)
    h = ir_access.pointwise(gate.get_device(), gate.get_dtype(), _product_fn(gate, up, activation), gate.get_size())
    return tuple(L(aten.reshape)(t, lead + [n]) for t in (h, gate, up))


def _act_ops(activation: str, x: Any) -> Any:
    """act(x) in Inductor's ops (fp32), as its own decompositions compute it."""
    ops = ir_ops
    c = lambda v: ops.constant(v, torch.float32)
    if activation == "silu":
        return ops.mul(x, ops.sigmoid(x))
    if activation == "relu":
        return ops.relu(x)
    if activation == "gelu_erf":
        return ops.mul(ops.mul(x, c(0.5)), ops.add(c(1.0), ops.erf(ops.mul(x, c(0.7071067811865476)))))
    inner = ops.mul(c(0.7978845608028654), ops.add(x, ops.mul(c(0.044715), ops.mul(ops.mul(x, x), x))))
    return ops.mul(ops.mul(x, c(0.5)), ops.add(c(1.0), ops.tanh(inner)))


def _product_fn(gate: Any, up: Any, activation: str) -> Callable:
    """The inner function of act(gate) * up, rounding act(gate) to the data's dtype as
    eager does before the product."""
    dtype = gate.get_dtype()
    load_gate, load_up = gate.make_loader(), up.make_loader()

    def inner(index):
        ops = ir_ops
        g = ops.to_dtype(load_gate(index), torch.float32)
        act = ops.to_dtype(ops.to_dtype(_act_ops(activation, g), dtype), torch.float32)
        return ops.to_dtype(ops.mul(act, ops.to_dtype(load_up(index), torch.float32)), dtype)

    return inner


# -- fp8: ``gated_scaled_mm`` ------------------------------------------------------------


def scaled_candidates(
    x, wg, wu, sx, sg, su, bg, bu, activation: str, out_dtype, fast: bool
) -> tuple[list[GemmCandidate], tuple[str, str]]:
    """Our fp8 dual-kernel candidates for ``act(_scaled_mm(x, wg, sx, sg, bg)) *
    _scaled_mm(x, wu, sx, su, bu)`` (x (M, K) and the weights (K, N), e4m3, K-major),
    and the scales' modes (scale_x's, the weights'); or Unsupported."""
    # Hopper's fp8 MMA reads both operands K-major: the (K, N) weights along their columns.
    _check_product(x, wg, wu, (bg, bu), FP8_DTYPES, 0)
    if out_dtype not in OUT_DTYPES:
        raise Unsupported(f"output dtype {out_dtype} (want bf16, fp16 or fp32)", "dtype")
    m, k = (ir_access.size_hint(s) for s in x.get_size())
    n = ir_access.size_hint(wg.get_size()[1])
    if n * out_dtype.itemsize % ALIGNMENT:
        raise Unsupported(f"output width {n} is not a multiple of 16 bytes", "tma-alignment")
    mode_a = operand_scale_mode("scale_x", sx, (m, 1))
    modes_b = {operand_scale_mode(name, s, (1, n)) for name, s in (("scale_gate", sg), ("scale_up", su))}
    if len(modes_b) != 1:
        raise Unsupported("the two weights' scales differ in mode", "scale-mode")
    modes = (mode_a, modes_b.pop())
    out = OUT_DTYPES[out_dtype]
    epi = E.gated(
        activation,
        bias_gate=OUT_DTYPES[bg.get_dtype()] if bg is not None else None,
        bias_up=OUT_DTYPES[bu.get_dtype()] if bu is not None else None,
        rounding=out,  # what two _scaled_mm writing out_dtype and a pointwise kernel read
        scales=modes,
    )
    operands: tuple[str, ...] = ("scale_a", "scale_gate", "scale_up")
    operands += tuple(name for name, b in (("bias_gate", bg), ("bias_up", bu)) if b is not None)
    names = ("a", "b", "b_up") + operands
    graphs = settings.compile_uses_cudagraphs()
    promote = PROMOTE_NONE if fast else PROMOTE_TILE
    configs = dual_shortlist(m, n, k, limit=config.max_configs, graphs=graphs, promote=promote)
    fp8 = FP8_DTYPES[torch.float8_e4m3fn]
    cands = [
        GemmCandidate(
            KernelSpec(cfg, fp8, out, "k", "k", epi, dual=True, promote=PROMOTE_NONE if fast else promotion_mode(cfg)),
            names,
            operands,
        )
        for cfg in configs
    ]
    return cands, modes


def _scaled_operands(shapes, modes, out_dtype, device, has_bias) -> tuple:
    """Random e4m3 x (M, K), gate and up weights (K, N) K-major, fp32 scales in ``modes``
    (scale_x's, the weights'), and the biases asked for."""
    (m, k), n = shapes
    fp8 = torch.float8_e4m3fn
    x = torch.randn(m, k, device=device).to(fp8)
    wg, wu = (torch.randn(n, k, device=device).to(fp8).t() for _ in range(2))

    def scale(mode, shape):
        return torch.rand(shape, device=device) + 0.5 if mode == "row" else torch.tensor(0.5, device=device)

    sx, sg, su = scale(modes[0], (m, 1)), scale(modes[1], (1, n)), scale(modes[1], (1, n))
    bg, bu = (torch.randn(n, dtype=out_dtype, device=device) if has else None for has in has_bias)
    return x, wg, wu, sx, sg, su, bg, bu


def _scaled_runs(cands, shapes, modes, out_dtype, device, activation, has_bias, fast) -> dict:
    """Side-by-side runs of an fp8 gated product: each candidate's launch (``dual<i>``),
    and two ``torch._scaled_mm`` (cuBLASLt) with a pointwise kernel (``alternative``)."""
    from .gated_product import gated_product

    def dual(cand: GemmCandidate) -> Callable[[], Callable[[], object]]:
        def make():
            x, wg, wu, sx, sg, su, bg, bu = _scaled_operands(shapes, modes, out_dtype, device, has_bias)
            out = torch.empty(shapes[0][0], shapes[1], dtype=out_dtype, device=device)
            ops = [t for t in (sx, sg, su, bg, bu) if t is not None]
            launch, stream = cand.launcher(), torch.cuda.current_stream().cuda_stream
            return lambda: launch(x, wg, out, *ops, b_up=wu, stream=stream)

        return make

    def alternative() -> Callable[[], object]:
        x, wg, wu, sx, sg, su, bg, bu = _scaled_operands(shapes, modes, out_dtype, device, has_bias)

        def product(w, s, b):
            return torch._scaled_mm(x, w, sx, s, bias=b, out_dtype=out_dtype, use_fast_accum=fast)

        return lambda: gated_product(product(wg, sg, bg), product(wu, su, bu), activation)

    runs = {f"dual{i}": dual(c) for i, c in enumerate(cands)}
    runs["alternative"] = alternative
    return runs


def lower_scaled(x, wg, wu, sx, sg, su, bg, bu, activation, out_dtype, use_fast_accum):
    """Inductor's lowering of ``gated_scaled_mm``: our fp8 dual kernel, or the graph's two
    ``_scaled_mm`` and product."""
    try:
        return _dual_scaled(x, wg, wu, sx, sg, su, bg, bu, activation, out_dtype, use_fast_accum)
    except Unsupported as why:
        log.info("gated fp8 %s: no dual kernel: %s [%s]", activation, why, why.rule)
    except Exception as exc:
        fallback("lowering", f"gated fp8 {activation} product", exc, log)
    args = (x, wg, wu, sx, sg, su, bg, bu, activation, out_dtype, use_fast_accum)
    return _graph_or_op(torch.ops.inductor_cutedsl.gated_scaled_mm.default, lambda: _scaled_as_graph(*args), *args)


def _dual_scaled(x, wg, wu, sx, sg, su, bg, bu, activation, out_dtype, fast):
    # What the template reads: realized buffers (or views of them).
    real = [ir_access.realized(t) if t is not None else None for t in (x, wg, wu, sx, sg, su, bg, bu)]
    rx, rwg, rwu, rsx, rsg, rsu, rbg, rbu = real
    cands, modes = scaled_candidates(rx, rwg, rwu, rsx, rsg, rsu, rbg, rbu, activation, out_dtype, fast)
    if not cands:
        raise Unsupported("no dual config fits", "dual-config")
    n = wg.get_size()[1]
    shapes = ((ir_access.size_hint(x.get_size()[0]), ir_access.size_hint(x.get_size()[1])), ir_access.size_hint(n))
    has_bias = (bg is not None, bu is not None)
    device = ir_access.device_of(x)
    runs = _scaled_runs(cands, shapes, modes, out_dtype, device, activation, has_bias, fast)
    key = (str(device), "fp8", str(out_dtype), shapes, activation, has_bias, modes, fast)
    chosen = _decide(cands, key, runs, device, activation, shapes, "fp8")
    if chosen is None:
        raise Unsupported("two _scaled_mm and a pointwise kernel measured faster", "measured-slower")
    inputs = [t for t in real if t is not None]
    size = [x.get_size()[0], n]
    layout = ir_access.fixed_layout(size, out_dtype, device)
    return gemm_template().generate(input_nodes=inputs, layout=layout, candidate=chosen).output_node()


def _scaled_as_graph(x, wg, wu, sx, sg, su, bg, bu, activation, out_dtype, fast):
    """The graph's two ``_scaled_mm`` and the gated product, lowered as Inductor would."""
    L, aten = lowerings.lowering, torch.ops.aten
    parts = []
    for w, s, b in ((wg, sg, bg), (wu, su, bu)):
        # Our fp8 candidates read the op's arguments as the graph's node would give them.
        with ir_access.lowering_op(aten._scaled_mm.default, scale_result=None, use_fast_accum=fast):
            parts.append(L(aten._scaled_mm.default)(x, w, sx, s, b, None, out_dtype, fast))
    gate, up = parts
    return ir_access.pointwise(gate.get_device(), out_dtype, _product_fn(gate, up, activation), gate.get_size())
