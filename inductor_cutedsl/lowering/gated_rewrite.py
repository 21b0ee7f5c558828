"""The pre-grad pass that finds gated MLPs, ``act(x @ Wg^T [+ bg]) * (x @ Wu^T [+ bu])``,
and replaces each by the ``inductor_cutedsl::gated_mm`` op (``gated_op``).

Two graph forms reach it: two Linear layers on the same input (LLaMA, Mistral,
Qwen2), and one fused ``gate_up`` Linear whose output is cut into halves by
``chunk(2, -1)`` or ``split`` (Phi-3), the halves being column ranges (weight rows)
of one weight. A product whose parts are read by anything else stays as it is.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from .. import config
from ..compat import settings
from ..errors import fallback
from . import gated_op  # noqa: F401  (registers the op the pass inserts)

log = logging.getLogger("inductor_cutedsl.lowering")


_LINEAR = (torch._C._nn.linear, F.linear)


_MUL = (operator.mul, torch.mul, torch.Tensor.mul)
_SILU = (F.silu,)
_RELU = (F.relu, torch.relu)
_GELU = (F.gelu, torch._C._nn.gelu)


def _activation_of(node: torch.fx.Node) -> str | None:
    """The gated activation ``node`` computes of its first argument, if it is one."""
    target, kwargs = node.target, node.kwargs
    if node.op == "call_function" and target in _SILU:
        return "silu"
    if node.op == "call_function" and target in _RELU:
        return "relu"
    if node.op == "call_method" and target == "relu":
        return "relu"
    if node.op == "call_function" and target in _GELU:
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
            linear = _linear_args(gate_half[0])
            assert linear is not None  # _half_of found a Linear there
            x, w, b = linear
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


#: What a gated product is made of (``_match``): functional ops, which may be erased once
#: nothing reads them. Nothing else of the graph is: an in-place write that nothing reads
#: (a static KV cache's ``index_copy_``) is what the graph is for, and FX's dead-code
#: elimination does not know a method call such as ``add_`` to be impure.
_PATTERN_FUNCTIONS = (*_LINEAR, *_MUL, *_SILU, *_RELU, *_GELU, operator.getitem, torch.chunk, torch.split)
_PATTERN_METHODS = ("mul", "relu", "chunk", "split")


def _in_pattern(node: torch.fx.Node) -> bool:
    if "out" in node.kwargs:  # writes a tensor it was given
        return False
    if node.op == "call_function":
        return node.target in _PATTERN_FUNCTIONS
    return node.op == "call_method" and node.target in _PATTERN_METHODS


def _erase_unread(graph: torch.fx.Graph, roots: list[torch.fx.Node]) -> None:
    """Erase ``roots`` and, walking back from them, every node of a gated product's kind
    that no node reads any more (the product's Linears, activation, halves)."""
    erased: set[torch.fx.Node] = set()
    work = list(roots)
    while work:
        node = work.pop()
        if node in erased or node.users or not _in_pattern(node):
            continue
        inputs = list(node.all_input_nodes)
        graph.erase_node(node)
        erased.add(node)
        work.extend(inputs)


def rewrite(graph: torch.fx.Graph) -> int:
    """Replace each gated product of the graph by ``gated_mm``; returns how many."""
    if not (config.enabled and config.dual_gemm and settings.max_autotune_on()):
        return 0
    replaced: list[torch.fx.Node] = []
    for mul in list(graph.nodes):
        made: list[torch.fx.Node] = []
        try:
            args = _match(mul)
            if args is None:
                continue
            with graph.inserting_before(mul):
                op = graph.call_function(torch.ops.inductor_cutedsl.gated_mm.default, args)
                made.append(op)
                _fake_value(op, torch.ops.inductor_cutedsl.gated_mm.default, *args)
                h = graph.call_function(operator.getitem, (op, 0))
                made.append(h)
                if "example_value" in op.meta:
                    h.meta["example_value"] = op.meta["example_value"][0]
        except Exception as exc:  # this product stays as the graph wrote it
            fallback("lowering", f"gated product {mul.name}", exc, log)
            for node in reversed(made):
                graph.erase_node(node)
            continue
        # The one step that changes what the graph computes, taken last.
        mul.replace_all_uses_with(h)
        replaced.append(mul)
    try:
        _erase_unread(graph, replaced)
    except Exception as exc:  # what is left unerased is only dead, pure nodes
        fallback("lowering", "erasing the replaced gated products", exc, log)
    if replaced:
        log.info("gated MLP: %d gated product(s) replaced by one dual-GEMM op each", len(replaced))
    return len(replaced)
