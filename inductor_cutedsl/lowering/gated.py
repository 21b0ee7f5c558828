"""A gated MLP's ``act(x @ Wg^T [+ bg]) * (x @ Wu^T [+ bu])`` as one dual-GEMM kernel.

Two graph forms reach it: two Linear layers on the same input (LLaMA, Mistral,
Qwen2), and one fused ``gate_up`` Linear whose output is cut into halves by
``chunk(2, -1)`` or ``split`` (Phi-3), the halves being column ranges (weight rows)
of one weight. A pre-grad pass (``rewrite``) replaces either with the
``inductor_cutedsl::gated_mm`` op, which returns ``(h, gate, up)``; the fused form
passes its one weight and bias as ``w_gate`` / ``b_gate`` with ``w_up`` None. Eager and
autograd see what the graph computed: two Linear layers, or one whose output is cut in
two, and a product; the backward pass reads ``gate`` and ``up`` and, for the fused
form, runs one GEMM per gradient over both halves, as stock does. Its lowering
(``lower``) measures our dual kernel against the best alternative, the graph's own
GEMMs and a pointwise kernel, side by side, and keeps the faster: ours writes ``h``,
and ``gate`` / ``up`` as extra outputs of the same kernel where anything reads them
(training); the alternative is lowered as the graph was.
"""
from __future__ import annotations

import logging
import math
import operator
import time
from typing import Any, Callable

import torch
import torch.nn.functional as F

from .. import config
from ..errors import Unsupported
from ..compat import autotune, ir_access, lowerings, settings
from ..compat.lazy import ir_ops
from ..kernels import epilogue as E
from ..kernels.config import dual_shortlist
from ..runtime import compiler
from ..runtime.launch import default_cache
from ..runtime.spec import ALIGNMENT, KernelSpec
from ..runtime.support import AB_DTYPES, OUT_DTYPES, device_reason
from ..timing import side_by_side
from .candidate import GemmCandidate
from ..config import BACKEND_TOKEN
from .template import gemm_template

log = logging.getLogger("inductor_cutedsl.lowering")

#: activation name -> what eager computes.
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "silu": F.silu,
    "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
    "gelu_erf": F.gelu,
    "relu": F.relu,
}
assert set(ACTIVATIONS) == set(E.GATED_ACTIVATIONS)

LIB = "inductor_cutedsl"


@torch.library.custom_op(f"{LIB}::gated_mm", mutates_args=())
def gated_mm(
    x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor | None,
    b_gate: torch.Tensor | None, b_up: torch.Tensor | None, activation: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """(act(gate) * up, gate, up) with gate = F.linear(x, w_gate, b_gate), up likewise;
    with ``w_up`` None, gate and up are the halves of F.linear(x, w_gate, b_gate)."""
    if w_up is None:
        gate, up = (t.contiguous() for t in F.linear(x, w_gate, b_gate).chunk(2, -1))
    else:
        gate, up = F.linear(x, w_gate, b_gate), F.linear(x, w_up, b_up)
    return ACTIVATIONS[activation](gate) * up, gate, up


def _width(w_gate, w_up) -> Any:
    """N: the width of gate, up and the product."""
    return w_gate.shape[0] // 2 if w_up is None else w_gate.shape[0]


@gated_mm.register_fake
def _(x, w_gate, w_up, b_gate, b_up, activation):
    shape = (*x.shape[:-1], _width(w_gate, w_up))
    return x.new_empty(shape), x.new_empty(shape), x.new_empty(shape)


#: activation name -> (grad of its output, its input, its output) -> grad of its input,
#: by the ops eager autograd uses (traceable into the backward graph).
_ACTIVATION_BACKWARD: dict[str, Callable[..., torch.Tensor]] = {
    "silu": lambda grad, x, y: torch.ops.aten.silu_backward(grad, x),
    "gelu_tanh": lambda grad, x, y: torch.ops.aten.gelu_backward(grad, x, approximate="tanh"),
    "gelu_erf": lambda grad, x, y: torch.ops.aten.gelu_backward(grad, x),
    "relu": lambda grad, x, y: torch.ops.aten.threshold_backward(grad, y, 0),
}


def _setup_context(ctx, inputs, output) -> None:
    x, w_gate, w_up, b_gate, b_up, activation = inputs
    _, gate, up = output
    ctx.save_for_backward(x, w_gate, w_up, gate, up)
    ctx.activation, ctx.biases = activation, (b_gate is not None, b_up is not None)


def _backward(ctx, grad_h, grad_gate, grad_up):
    """Eager autograd's own formulas for act(gate) * up and the two Linear layers."""
    x, w_gate, w_up, gate, up = ctx.saved_tensors
    act = ACTIVATIONS[ctx.activation](gate)
    d_gate = _ACTIVATION_BACKWARD[ctx.activation](grad_h * up, gate, act)
    d_up = grad_h * act
    if grad_gate is not None:
        d_gate = d_gate + grad_gate
    if grad_up is not None:
        d_up = d_up + grad_up
    x2, dg2, du2 = x.flatten(0, -2), d_gate.flatten(0, -2), d_up.flatten(0, -2)
    if w_up is None:  # one weight: one GEMM per gradient over both halves
        d_gu = torch.cat([dg2, du2], -1)
        d_b = d_gu.sum(0) if ctx.biases[0] else None
        return (d_gu @ w_gate).view(x.shape), d_gu.t() @ x2, None, d_b, None, None
    d_x = (dg2 @ w_gate + du2 @ w_up).view(x.shape)
    d_bg = dg2.sum(0) if ctx.biases[0] else None
    d_bu = du2.sum(0) if ctx.biases[1] else None
    return d_x, dg2.t() @ x2, du2.t() @ x2, d_bg, d_bu, None


gated_mm.register_autograd(_backward, setup_context=_setup_context)


# -- the pre-grad pass --------------------------------------------------------------

_LINEAR = (torch._C._nn.linear, F.linear)
_MUL = (operator.mul, torch.mul, torch.Tensor.mul)


def _activation_of(node: torch.fx.Node) -> str | None:
    """The gated activation ``node`` computes of its first argument, if it is one."""
    target, kwargs = node.target, node.kwargs
    if node.op == "call_function" and target in (F.silu, torch.nn.functional.silu):
        return "silu"
    if node.op == "call_function" and target in (F.relu, torch.relu, torch.nn.functional.relu):
        return "relu"
    if node.op == "call_method" and target == "relu":
        return "relu"
    if node.op == "call_function" and target in (F.gelu, torch._C._nn.gelu):
        approximate = kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none")
        return {"tanh": "gelu_tanh", "none": "gelu_erf"}.get(approximate)
    return None


def _is_mul(node: torch.fx.Node) -> bool:
    return (node.op == "call_function" and node.target in _MUL) or (node.op == "call_method" and node.target == "mul")


def _linear_args(node: Any) -> tuple[Any, Any, Any] | None:
    """(x, weight, bias or None) of a Linear node."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function" or node.target not in _LINEAR:
        return None
    args = list(node.args) + [None] * (3 - len(node.args))
    return args[0], node.kwargs.get("weight", args[1]), node.kwargs.get("bias", args[2])


def _half_of(node: Any) -> tuple[torch.fx.Node, int] | None:
    """(the Linear node, 0 or 1) when ``node`` is the first or second half, along the
    last dim, of a Linear output that is used for nothing else: ``chunk(2, -1)``, or a
    ``split`` into two equal parts (known from the graph's example values)."""
    if not isinstance(node, torch.fx.Node) or node.target is not operator.getitem:
        return None
    cut, index = node.args
    if not isinstance(cut, torch.fx.Node) or len(cut.users) != 2 or index not in (0, 1):
        return None
    if not cut.args or not isinstance(cut.args[0], torch.fx.Node):
        return None
    source, rest = cut.args[0], cut.args[1:]
    if len(source.users) != 1 or _linear_args(source) is None:
        return None
    out = source.meta.get("example_value")
    dim = cut.kwargs.get("dim", rest[1] if len(rest) > 1 else 0)
    if dim != -1 and (out is None or dim != out.dim() - 1):
        return None
    if cut.target in (torch.chunk, "chunk") and rest[:1] == (2,):
        return source, index
    halves = None if out is None or out.shape[-1] % 2 else out.shape[-1] // 2
    if cut.target in (torch.split, "split") and halves and rest[:1] in ((halves,), ([halves] * 2,)):
        return source, index
    return None


def _match(mul: torch.fx.Node) -> tuple | None:
    """``gated_mm``'s arguments (x, w_gate, w_up, b_gate, b_up, activation) for a gated
    product; the Phi-3 form gives its one weight and bias, with w_up and b_up None."""
    if not _is_mul(mul) or len(mul.args) != 2:
        return None
    for act_node, other in (mul.args, mul.args[::-1]):
        if not isinstance(act_node, torch.fx.Node) or len(act_node.users) != 1:
            continue
        activation = _activation_of(act_node)
        if activation is None or not act_node.args:
            continue
        gate_src = act_node.args[0]
        gate_half, up_half = _half_of(gate_src), _half_of(other)
        if gate_half and up_half and gate_half[0] is up_half[0] and (gate_half[1], up_half[1]) == (0, 1):
            x, w, b = _linear_args(gate_half[0])
            return x, w, None, b, None, activation
        gate, up = _linear_args(gate_src), _linear_args(other)
        if gate is None or up is None or gate[0] is not up[0]:
            continue
        if len(gate_src.users) != 1 or len(other.users) != 1:
            continue
        return gate[0], gate[1], up[1], gate[2], up[2], activation
    return None


def _fake_value(node: torch.fx.Node, fn: Callable, *args: Any) -> None:
    """Set ``node``'s example value (later passes read it) from its inputs' fake ones."""
    vals = [a.meta.get("example_value") if isinstance(a, torch.fx.Node) else a for a in args]
    fake = next((v for v in vals if isinstance(v, torch.Tensor)), None)
    if fake is None or getattr(fake, "fake_mode", None) is None:
        return
    with fake.fake_mode:
        node.meta["example_value"] = fn(*vals)


def rewrite(graph: torch.fx.Graph) -> int:
    """Replace each gated product of the graph by ``gated_mm``; returns how many."""
    if not (config.enabled and config.dual_gemm and settings.max_autotune_on()):
        return 0
    count = 0
    for mul in list(graph.nodes):
        args = _match(mul)
        if args is None:
            continue
        with graph.inserting_before(mul):
            op = graph.call_function(torch.ops.inductor_cutedsl.gated_mm.default, args)
            _fake_value(op, torch.ops.inductor_cutedsl.gated_mm.default, *args)
            h = graph.call_function(operator.getitem, (op, 0))
            if "example_value" in op.meta:
                h.meta["example_value"] = op.meta["example_value"][0]
        mul.replace_all_uses_with(h)
        count += 1
    if count:
        graph.eliminate_dead_code()
        log.info("gated MLP: %d gated product(s) replaced by one dual-GEMM op each", count)
    return count


# -- the lowering -------------------------------------------------------------------


def _operand_reason(name: str, node: Any, major_mode: int) -> str | None:
    """TMA's rules for an (R, C) operand whose mode ``major_mode`` is contiguous."""
    stride, align = node.get_stride(), ALIGNMENT // node.get_dtype().itemsize
    lead = stride[1 - major_mode]
    if not ir_access.is_one(stride[major_mode]):
        return f"{name} strides {list(stride)} are not contiguous along mode {major_mode}"
    if not ir_access.multiple_of(lead, align) or not ir_access.multiple_of(ir_access.offset_of(node), align):
        return f"{name} rows or offset are not 16-byte aligned"
    return None


def candidates(x2, w_gate, w_up, b_gate, b_up, activation: str, keep: bool) -> list[GemmCandidate]:
    """Our dual-kernel candidates for ``act(x2 @ w_gate^T + b_gate) * (...)``, or Unsupported."""
    if not settings.backend_enabled(BACKEND_TOKEN):
        raise Unsupported(f"{BACKEND_TOKEN} is not in max_autotune_gemm_backends")
    blocked = ir_access.codegen_blocked() or device_reason(ir_access.device_of(x2))
    if blocked:
        raise Unsupported(blocked)
    dtype = x2.get_dtype()
    if dtype not in AB_DTYPES or {w_gate.get_dtype(), w_up.get_dtype()} != {dtype}:
        raise Unsupported(f"dtypes {dtype}/{w_gate.get_dtype()}/{w_up.get_dtype()} (bf16 or fp16, equal)")
    for b in (b_gate, b_up):
        if b is not None and b.get_dtype() not in OUT_DTYPES:
            raise Unsupported(f"bias dtype {b.get_dtype()}")
    for weight in (w_gate, w_up):
        ir_access.freeze_layout(weight)
    if list(w_gate.get_stride()) != list(w_up.get_stride()):
        raise Unsupported("the two weights are laid out differently")
    reasons = [_operand_reason("x", x2, 1), _operand_reason("w_gate", w_gate, 1), _operand_reason("w_up", w_up, 1)]
    if any(reasons):
        raise Unsupported("; ".join(r for r in reasons if r))
    m, k = (ir_access.size_hint(s) for s in x2.get_size())
    n = ir_access.size_hint(w_gate.get_size()[0])
    if n % (ALIGNMENT // dtype.itemsize):
        raise Unsupported(f"output width {n} is not a multiple of 16 bytes")
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
    return [
        GemmCandidate(KernelSpec(cfg, ab, ab, "k", "k", epi, dual=True), names, operands)
        for cfg in dual_shortlist(m, n, k, limit=config.max_configs)
    ]


#: Wall seconds spent measuring dual kernels against their alternative, this process.
stats = {"measure_s": 0.0}
#: One record per measured gated product in this process.
decisions: list[dict] = []


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
            return lambda: gated_product(*F.linear(x, w, b).chunk(2, -1), activation)
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
    """Our fastest dual candidate if it beats the alternative side by side, else None."""
    builds = [compiler.build_async(c.spec, default_cache(), config.compile_workers) for c in cands]
    compiler.wait(builds)
    runs = {f"dual{i}": _dual_maker(c, shapes, dtype, device, has_bias, keep) for i, c in enumerate(cands)}
    runs["alternative"] = _alternative_maker(shapes, dtype, device, activation, has_bias, fused)
    t0 = time.perf_counter()
    with autotune.preserve_rng_state():
        times = measure(runs, device)
    stats["measure_s"] += time.perf_counter() - t0
    best = min(range(len(cands)), key=lambda i: times.get(f"dual{i}", math.inf))
    ours, other = times.get(f"dual{best}", math.inf), times.get("alternative", math.inf)
    (m, k), n = shapes
    log.info("gated %s %dx%dx%d: dual %s %.4f ms, two GEMMs + pointwise %.4f ms -> %s", activation, m, n, k,
             cands[best].spec.config.name(), ours, other, "dual" if ours < other else "two GEMMs")  # fmt: skip
    decisions.append({"shape": [m, n, k], "activation": activation, "form": "fused" if fused else "two",
                      "dual_ms": ours, "alternative_ms": other,
                      "config": cands[best].spec.config.name(), "way": "dual" if ours < other else "alternative"})  # fmt: skip
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
    # What the template reads: realized buffers (or views of them).
    real = [ir_access.realized(t) if t is not None else None for t in (x2, wg, wu, bg, bu)]
    try:
        cands = candidates(*real, activation, keep)
        if not cands:
            raise Unsupported("no dual config fits")
        shapes = ((ir_access.size_hint(x2.get_size()[0]), ir_access.size_hint(k)), ir_access.size_hint(n))
        has_bias = (bg is not None, bu is not None)
        chosen = decide(cands, shapes, x2.get_dtype(), ir_access.device_of(x2), activation, has_bias, keep, fused)
    except Unsupported as why:
        log.info("gated %s: no dual kernel: %s", activation, why)
        chosen = None
    if chosen is None:
        return _as_graph(x2, w_gate, w_up, b_gate, b_up, activation, lead, n)
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
    c = lambda v: ops.constant(v, torch.float32)  # noqa: E731
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
