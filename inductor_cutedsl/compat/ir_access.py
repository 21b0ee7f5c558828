"""Reading Inductor's IR while lowering and scheduling: sizes, strides, layouts, nodes.

Every query adds no guard: a property we cannot prove is a refusal, never a guess.
Read against torch 2.11 to 2.15 (``size_hint`` became ``optimization_hint``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch

from .lazy import V, inductor_config, ir


def kernel_out_dtype(kernel_inputs: Any) -> Any:
    """The output dtype a GEMM's ``KernelInputs`` asks for of its own (``mm``/``bmm``
    with ``out_dtype``), else None."""
    return getattr(kernel_inputs, "_out_dtype", None)


def codegen_blocked() -> str | None:
    """Why the current graph cannot take a CuteDSL kernel call, if it cannot."""
    if V.aot_compilation:
        return "AOT compilation (no Python wrapper to call the kernel from)"
    if V.graph.cpp_wrapper:
        return "cpp_wrapper is on (CuteDSL kernels are called from the Python wrapper)"
    return None


def size_hint(expr: Any) -> int:
    """A concrete value of ``expr`` to size a kernel for (adds no guard). Newer releases
    dropped ``size_hint`` for ``optimization_hint``."""
    sizevars = V.graph.sizevars
    hint = getattr(sizevars, "size_hint", None) or sizevars.optimization_hint
    return int(hint(expr, fallback=inductor_config.unbacked_symint_fallback))


def multiple_of(expr: Any, n: int) -> bool:
    """True only when ``expr`` is provably a multiple of ``n`` (adds no guard)."""
    import sympy

    return bool(V.graph.sizevars.statically_known_multiple_of(sympy.sympify(expr), n))


def is_one(expr: Any) -> bool:
    return bool(V.graph.sizevars.statically_known_equals(expr, 1))


def offset_of(node: Any) -> Any:
    """Storage offset (elements) of an input node's layout."""
    return node.get_layout().offset


def freeze_layout(node: Any) -> None:
    """Fix a flexible input layout so that the strides our kernel was picked for hold."""
    ir.ExternKernel.realize_input(node)
    layout = node.get_layout()
    if isinstance(layout, ir.FlexibleLayout):
        node.freeze_layout()


def bound_layout(node: Any) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(sizes, strides) of a template input read from its storage buffer's start, where
    every one is a number and the view starts where the buffer does (offset 0); else
    None. The generated kernel call then passes the buffer itself, and the launcher
    reads it through these (``runtime.generated.launcher``'s ``layouts``), instead of
    the wrapper rebuilding the view with ``reinterpret_tensor`` at every call."""
    import sympy

    while isinstance(node, ir.MutableBox):
        node = node.data
    if isinstance(node, ir.ReinterpretView):
        layout = node.layout
    elif isinstance(node, ir.BaseView):  # converted only where the call is generated
        return None
    else:
        layout = node.get_layout()
    if isinstance(layout, ir.FlexibleLayout):  # its strides may still change
        return None
    values = [*layout.size, *layout.stride, layout.offset]
    if not all(isinstance(v, (int, sympy.Integer)) for v in values) or int(layout.offset) != 0:
        return None
    return tuple(int(v) for v in layout.size), tuple(int(v) for v in layout.stride)


def device_of(node: Any) -> torch.device:
    return node.get_device()


def node_ranges(node: Any) -> tuple[list[Any], list[Any]]:
    """(loop sizes, reduction sizes) of a scheduler node."""
    var_sizes, reduce_sizes = node.get_ranges()
    return list(var_sizes), list(reduce_sizes)


def replay_node(node: Any, index_vars: list[Any], handler: Any) -> None:
    """Run a scheduler node's loop body once under ``handler`` (an ops handler)."""
    with V.set_ops_handler(handler):
        node._body(index_vars, [])


def simplify_with_ranges(expr: Any, ranges: dict) -> Any:
    return V.graph.sizevars.simplify_with_ranges(expr, ranges)


def tensor_box(buffer: Any) -> Any:
    """The TensorBox a ChoiceCaller's ``output_node`` returns for its IR buffer."""
    return ir.TensorBox.create(buffer)


def buffer_users_outside(scheduler: Any, name: str, inside: set) -> bool:
    """Whether anything but the nodes named in ``inside`` (or the graph output) reads ``name``."""
    if name in V.graph.get_output_names():
        return True
    buf = scheduler.name_to_buf.get(name)
    users = buf.users if buf is not None else []
    return any(getattr(u.node, "get_name", lambda: None)() not in inside for u in users)


def is_multi_template_buffer(node: Any) -> bool:
    return isinstance(node, ir.MultiTemplateBuffer)


def template_inputs(buffer: Any) -> list[Any]:
    """A template buffer's input nodes (``TemplateBuffer.inputs``, 2.11-2.15)."""
    return list(buffer.inputs)


def is_triton_template_caller(choice: Any) -> bool:
    return isinstance(choice, ir.TritonTemplateCallerBase)


def lowering_site() -> tuple[Any, Any] | None:
    """(the graph being lowered, the FX node it is lowering), or None outside a lowering."""
    try:
        graph = V.graph
        node = graph.current_node
    except (AttributeError, AssertionError):  # no graph handler installed
        return None
    return (graph, node) if isinstance(node, torch.fx.Node) else None


#: The op a lowering lowers on behalf of the graph's node (``lowering_op``), if any.
_inner = threading.local()


@contextlib.contextmanager
def lowering_op(target: Any, **args: Any) -> Iterator[None]:
    """Inside: the op being lowered reads as ``target`` called with ``args`` (by name),
    not as the graph's node: for the ops one node's lowering lowers in its place (an fp8
    gated product lowered as the two ``_scaled_mm`` it was), whose choices read their
    op's arguments (``current_node_target``, ``current_node_arg``)."""
    prior = getattr(_inner, "op", None)
    _inner.op = (target, args)
    try:
        yield
    finally:
        _inner.op = prior


def current_node_target() -> Any:
    """The target (an op overload) of the FX node being lowered."""
    inner = getattr(_inner, "op", None)
    return inner[0] if inner is not None else V.graph.current_node.target


def current_node_arg(name: str, index: int, default: Any) -> Any:
    """Argument ``name`` (positional ``index``) of the op being lowered, else ``default``."""
    inner = getattr(_inner, "op", None)
    if inner is not None:
        return inner[1].get(name, default)
    node = V.graph.current_node
    if name in node.kwargs:
        return node.kwargs[name]
    return node.args[index] if len(node.args) > index else default


def current_node_output_used(index: int) -> bool:
    """Whether the graph reads output ``index`` of the op being lowered."""
    import operator

    node = V.graph.current_node
    return any(u.target is operator.getitem and u.args[1] == index for u in node.users)


def realized(node: Any) -> Any:
    """``node`` as a realized buffer or view of one (what a template takes as input)."""
    return ir.ExternKernel.realize_input(node)


def empty_buffer(size: list, dtype: torch.dtype, device: torch.device) -> Any:
    """A new contiguous buffer (a kernel's extra output)."""
    from torch._inductor.lowering import empty_strided

    return empty_strided(size, None, dtype=dtype, device=device)


def fixed_layout(size: list, dtype: torch.dtype, device: torch.device) -> Any:
    return ir.FixedLayout(device, dtype, list(size), ir.FlexibleLayout.contiguous_strides(size))


def pointwise(device: torch.device, dtype: torch.dtype, inner_fn: Callable, ranges: list) -> Any:
    """A pointwise IR node computing ``inner_fn(index)`` (with ``V.ops``) per element."""
    return ir.Pointwise.create(device=device, dtype=dtype, inner_fn=inner_fn, ranges=list(ranges))


def timings_ready(buffer: Any) -> bool:
    """Whether a MultiTemplateBuffer has autotuned already, so that reading its choice
    timings costs nothing; the first read runs the autotuning (it waits for the
    choices' precompiles, then benchmarks them). Read against torch 2.11 to 2.15 (the
    timings per size hint in ``_choice_timings``, None for the graph's own); where
    that is not there, reading them counts as free, as it was taken to be."""
    timings = getattr(buffer, "_choice_timings", None)
    return not isinstance(timings, dict) or None in timings
