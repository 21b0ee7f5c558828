"""The gated MLP's op, ``inductor_cutedsl::gated_mm``: ``(act(gate) * up, gate, up)`` with
``gate = x @ Wg^T [+ bg]`` and ``up = x @ Wu^T [+ bu]``, as eager and autograd compute it.

The fused form (Phi-3's one ``gate_up`` Linear cut in two) passes its one weight and
bias as ``w_gate`` / ``b_gate`` with ``w_up`` None. Eager and autograd see what the graph
computed: two Linear layers, or one whose output is cut in two, and a product; the
backward pass reads ``gate`` and ``up`` and, for the fused form, runs one GEMM per
gradient over both halves, as stock does. ``gated_rewrite`` puts the op into graphs;
``gated`` lowers it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from ..kernels import epilogue as E

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
    x: torch.Tensor,
    w_gate: torch.Tensor,
    w_up: torch.Tensor | None,
    b_gate: torch.Tensor | None,
    b_up: torch.Tensor | None,
    activation: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
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


@torch.library.custom_op(f"{LIB}::gated_scaled_mm", mutates_args=())
def gated_scaled_mm(
    x: torch.Tensor,
    w_gate: torch.Tensor,
    w_up: torch.Tensor,
    scale_x: torch.Tensor,
    scale_gate: torch.Tensor,
    scale_up: torch.Tensor,
    b_gate: torch.Tensor | None,
    b_up: torch.Tensor | None,
    activation: str,
    out_dtype: torch.dtype,
    use_fast_accum: bool,
) -> torch.Tensor:
    """act(gate) * up with gate = ``torch._scaled_mm(x, w_gate, scale_x, scale_gate,
    b_gate, ...)`` and up likewise: an fp8 gated MLP, x (M, K) and the weights (K, N)
    e4m3, as the graph computed it. Inference only: ``_scaled_mm`` has no backward."""

    def product(w, scale, bias):
        return torch._scaled_mm(x, w, scale_x, scale, bias=bias, out_dtype=out_dtype, use_fast_accum=use_fast_accum)

    return ACTIVATIONS[activation](product(w_gate, scale_gate, b_gate)) * product(w_up, scale_up, b_up)


@gated_scaled_mm.register_fake
def _(x, w_gate, w_up, scale_x, scale_gate, scale_up, b_gate, b_up, activation, out_dtype, use_fast_accum):
    return x.new_empty((x.shape[0], w_gate.shape[1]), dtype=out_dtype)
