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
            if _written(gate_half[0], mul):
                continue
            x, w, b = linear
            return x, w, None, b, None, activation
        gate, up = _linear_args(gate_src), _linear_args(other)
        if gate is None or up is None or gate[0] is not up[0]:
            continue
        if len(gate_src.users) != 1 or len(other.users) != 1:
            continue
        if _written(min(gate_src, other), mul):
            continue
        return gate[0], gate[1], up[1], gate[2], up[2], activation
    return None


#: What two fp8 Linears of one input each compute again before ``_scaled_mm`` (the input's
#: quantization: amax, scale, division, cast, views): pure, deterministic ops, so that two
#: copies of the same chain over the same inputs are the same value.
_PURE_METHODS = frozenset(
    ("reshape", "view", "abs", "amax", "float", "to", "clamp", "clamp_min", "clamp_max", "div", "mul",
     "reciprocal", "contiguous", "flatten", "t", "bfloat16", "half")
)  # fmt: skip
_PURE_FUNCTIONS = (operator.truediv, operator.mul, torch.abs, torch.amax, torch.clamp, torch.div, torch.mul,
                   torch.reciprocal, torch.reshape)  # fmt: skip


def _pure(node: torch.fx.Node) -> bool:
    """Whether ``node`` is one of the pure ops of ``_PURE_METHODS`` / ``_PURE_FUNCTIONS``."""
    return (node.op == "call_method" and node.target in _PURE_METHODS) or (
        node.op == "call_function" and node.target in _PURE_FUNCTIONS
    )


def _same_value(p: Any, q: Any, depth: int = 24) -> bool:
    """Whether ``p`` and ``q`` are the same node, or the same chain of pure ops over the
    same nodes and constants (within ``depth`` ops)."""
    if p is q:
        return True
    if isinstance(p, torch.fx.Node) and isinstance(q, torch.fx.Node):
        return (
            depth > 0
            and _pure(p)
            and (p.op, p.target) == (q.op, q.target)
            and _same_value(p.args, q.args, depth - 1)
            and p.kwargs.keys() == q.kwargs.keys()
            and all(_same_value(p.kwargs[key], q.kwargs[key], depth - 1) for key in p.kwargs)
        )
    if isinstance(p, (tuple, list)) and isinstance(q, (tuple, list)):
        return type(p) is type(q) and len(p) == len(q) and all(_same_value(a, b, depth) for a, b in zip(p, q))
    if isinstance(p, torch.fx.Node) or isinstance(q, torch.fx.Node):
        return False
    return type(p) is type(q) and p == q


#: Python's in-place operators (``x *= 2``), which write their first operand.
_IN_PLACE_OPERATORS = frozenset(
    getattr(operator, f"i{name}")
    for name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or", "xor",
                 "lshift", "rshift")
)  # fmt: skip


def _mutates(node: torch.fx.Node) -> bool:
    """Whether ``node`` may write a tensor it reads: an in-place method or function
    (``add_``, ``x *= 2``), an item assignment, or an ``out=`` argument."""
    name = getattr(node.target, "__name__", str(node.target))
    in_place = name.endswith("_") and not name.endswith("__")
    return node.op in ("call_method", "call_function") and (
        in_place or node.target is operator.setitem or node.target in _IN_PLACE_OPERATORS or "out" in node.kwargs
    )


def _written(start: torch.fx.Node, end: torch.fx.Node) -> bool:
    """Whether a node from ``start`` up to ``end`` may write a tensor (``_mutates``).
    The op that replaces a gated product reads its inputs where the product was
    (``end``): a write after its GEMMs read them (``start``) would reach the op and not
    them, and two copies of one pure chain are one value only if nothing wrote their
    inputs while they read them."""
    node = start
    while node is not end:
        if _mutates(node):
            return True
        node = node.next
    return False


def _chain_start(node: torch.fx.Node) -> torch.fx.Node:
    """The earliest node of the chain of pure ops that ends at ``node`` (``_same_value``'s
    allow-list), in graph order."""
    earliest, work = node, [node]
    while work:
        n = work.pop()
        if n < earliest:
            earliest = n
        if _pure(n):
            work.extend(n.all_input_nodes)
    return earliest


#: ``torch._scaled_mm``'s parameters after the operands, with their defaults.
_SCALED_PARAMS = (("scale_a", None), ("scale_b", None), ("bias", None), ("scale_result", None),
                  ("out_dtype", None), ("use_fast_accum", False))  # fmt: skip


def _scaled_args(node: Any) -> dict | None:
    """``torch._scaled_mm``'s arguments by name, where ``node`` (or a view of it that is
    all that reads it) is a ``_scaled_mm`` read by nothing else, with no
    ``scale_result`` and a 16- or 32-bit output; its ``view`` is the view's
    (method, args, kwargs), else None. A view read by anything else than the product
    keeps the ``_scaled_mm`` alive: no match."""
    view = None
    if (
        isinstance(node, torch.fx.Node)
        and node.op == "call_method"
        and node.target in ("reshape", "view")
        and len(node.users) == 1
        and node.args
        and isinstance(node.args[0], torch.fx.Node)
        and len(node.args[0].users) == 1
    ):
        view, node = (node.target, node.args[1:], tuple(node.kwargs.items())), node.args[0]
    if not isinstance(node, torch.fx.Node) or node.op != "call_function" or node.target is not torch._scaled_mm:
        return None
    if len(node.users) != 1 or len(node.args) < 2:
        return None
    args = {"a": node.args[0], "b": node.args[1], "view": view}
    for i, (name, default) in enumerate(_SCALED_PARAMS):
        args[name] = node.kwargs.get(name, node.args[2 + i] if len(node.args) > 2 + i else default)
    if args["scale_a"] is None or args["scale_result"] is not None:
        return None
    if args["out_dtype"] not in (torch.bfloat16, torch.float16, torch.float32):
        return None
    return args


def _match_scaled(mul: torch.fx.Node) -> tuple | None:
    """``gated_scaled_mm``'s arguments for an fp8 gated product, ``act(_scaled_mm(x,
    Wg^T, sx, sg)) * _scaled_mm(x, Wu^T, sx, su)`` (each output perhaps viewed alike),
    and the view to give its result (or None); x and sx may be two copies of one
    quantization of the same input (``_same_value``)."""
    if not config.fp8 or not config.fp8_dual or not _is_mul(mul) or len(mul.args) != 2:
        return None
    for act_node, other in (mul.args, mul.args[::-1]):
        if not isinstance(act_node, torch.fx.Node) or len(act_node.users) != 1 or not act_node.args:
            continue
        activation = _activation_of(act_node)
        gate, up = _scaled_args(act_node.args[0]), _scaled_args(other)
        if activation is None or gate is None or up is None:
            continue
        if (gate["out_dtype"], gate["use_fast_accum"]) != (up["out_dtype"], up["use_fast_accum"]):
            continue
        if not _same_value(gate["view"], up["view"]) or not _same_value(gate["a"], up["a"]):
            continue
        if not _same_value(gate["scale_a"], up["scale_a"]):
            continue
        if _written(min(_chain_start(gate["a"]), _chain_start(up["a"])), mul):
            continue
        args = (gate["a"], gate["b"], up["b"], gate["scale_a"], gate["scale_b"], up["scale_b"], gate["bias"],
                up["bias"], activation, gate["out_dtype"], bool(gate["use_fast_accum"]))  # fmt: skip
        return args, gate["view"]
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
_PATTERN_FUNCTIONS = (
    *_LINEAR, *_MUL, *_SILU, *_RELU, *_GELU, operator.getitem, torch.chunk, torch.split, torch._scaled_mm,
    *_PURE_FUNCTIONS,
)  # fmt: skip
_PATTERN_METHODS = ("mul", "relu", "chunk", "split", *_PURE_METHODS)


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


def _one_row(x: Any) -> bool:
    """Whether the Linear input ``x`` is known, from its example value, to hold one row
    (every dim but the last of static size 1)."""
    value = x.meta.get("example_value") if isinstance(x, torch.fx.Node) else None
    shape = getattr(value, "shape", None)
    return shape is not None and len(shape) >= 1 and all(type(d) is int and d == 1 for d in shape[:-1])


def _decomposed_by_inductor(args: tuple) -> bool:
    """Whether stock Inductor turns this product's GEMMs into reductions: with coordinate
    descent tuning on (max-autotune), its decomposition of ``mm`` computes a one-row
    product as a broadcast multiply and a sum, and the scheduler fuses the gate's, the
    up's and their product into one reduction kernel (decode at batch 1). Rule: such a
    product is left to that path. Replaced by our op, its GEMMs would be lowered as GEMMs
    instead of being decomposed, and would run slower than the reduction, 0.92x stock on
    a Qwen2-class decode step at batch 1 (docs/findings.md, The GEMM kernel)."""
    from torch._inductor import config as inductor_config

    return bool(inductor_config.coordinate_descent_tuning) and _one_row(args[0])


def _insert(graph: torch.fx.Graph, mul: torch.fx.Node, made: list[torch.fx.Node]) -> torch.fx.Node | None:
    """Insert before ``mul`` the op of the gated product it is (``gated_mm``, or
    ``gated_scaled_mm`` for fp8) and what reads its result as ``mul`` (appended to
    ``made``); None where ``mul`` is no gated product, or one stock Inductor computes
    as a reduction (``_decomposed_by_inductor``)."""
    args, view = _match(mul), None
    if args is not None and _decomposed_by_inductor(args):
        log.info("gated product %s: one row, left to Inductor's mm decomposition", mul.name)
        return None
    target = torch.ops.inductor_cutedsl.gated_mm.default
    if args is None:
        scaled = _match_scaled(mul)
        if scaled is None:
            return None
        (args, view), target = scaled, torch.ops.inductor_cutedsl.gated_scaled_mm.default
    with graph.inserting_before(mul):
        op = graph.call_function(target, tuple(args))
        made.append(op)
        _fake_value(op, target, *args)
        if target is torch.ops.inductor_cutedsl.gated_mm.default:  # (h, gate, up): h
            h = graph.call_function(operator.getitem, (op, 0))
            if "example_value" in op.meta:
                h.meta["example_value"] = op.meta["example_value"][0]
        elif view is not None:  # the product's output as the graph viewed both parts
            method, view_args, view_kwargs = view
            h = graph.call_method(method, (op, *view_args), dict(view_kwargs))
            if "example_value" in mul.meta:
                h.meta["example_value"] = mul.meta["example_value"]
        else:
            return op
        made.append(h)
    return h


def rewrite(graph: torch.fx.Graph) -> int:
    """Replace each gated product of the graph by ``gated_mm`` (fp8: ``gated_scaled_mm``);
    returns how many."""
    if not (config.enabled and config.dual_gemm and settings.max_autotune_on()):
        return 0
    replaced: list[torch.fx.Node] = []
    for mul in list(graph.nodes):
        made: list[torch.fx.Node] = []
        try:
            h = _insert(graph, mul, made)
            if h is None:
                continue
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
