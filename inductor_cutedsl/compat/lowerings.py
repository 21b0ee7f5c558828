"""Registering lowerings, and the pre-grad pass that rewrites a gated MLP.

Read against torch 2.11 to 2.15: from 2.13 on a pre-grad pass with ``uuid()`` runs
after the compile cache's lookup and is part of its key; 2.14 accepts a list of passes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .lazy import inductor_config
from .settings import _set_setting


def lowering(op: Any) -> Callable[..., Any]:
    """Inductor's lowering of aten ``op`` (called with IR values)."""
    from torch._inductor.lowering import lowerings

    return lowerings[op]


def register_lowering(op: Any, fn: Callable[..., Any]) -> None:
    """Make ``fn`` Inductor's lowering of ``op`` (arguments as the graph passes them)."""
    from torch._inductor.lowering import register_lowering as register

    register(op, type_promotion_kind=None)(fn)


def extern(op: Any) -> Callable[..., Any]:
    """``op`` run as an extern kernel (its own implementation, called from the wrapper):
    Inductor's lowering of an op it has no lowering for."""
    from torch._inductor.lowering import fallback_handler

    return fallback_handler(op, add_to_fallback_set=False)


def unregister_lowering(op: Any) -> None:
    from torch._inductor.lowering import lowerings

    lowerings.pop(op, None)


class _PreGradPasses:
    """A user's pre-grad pass (if any) and then ours. A module-level class, not a
    closure: Inductor pickles its config for its compile cache's key, and an
    unpicklable pass turns that cache off for every compile.

    Registered as Inductor's ``CustomGraphPass``, with ``uuid()``: newer Inductor runs a
    custom pre-grad pass that has one after its compile cache's lookup (and keys the
    cache on it), and logs a warning on every process for a pass without one. ``uuid()``
    is None (the pass runs before the lookup, as on older releases) where a user's pass
    has none of its own."""

    def __init__(self, prior: Any, fn: Callable[[Any], Any], key: Callable[[], Any]) -> None:
        self.prior, self.fn, self.key = prior, fn, key

    def __call__(self, graph: Any) -> None:
        for prior in _graph_passes(self.prior):
            prior(graph)
        self.fn(graph)

    def uuid(self) -> Any:
        priors = []
        for prior in _graph_passes(self.prior):
            uuid = getattr(prior, "uuid", None)
            key = uuid() if callable(uuid) else None
            if key is None:
                return None
            priors.append(key)
        return ("inductor_cutedsl.pre_grad", tuple(priors), self.key())


def _graph_passes(value: Any) -> tuple:
    """The passes a ``pre_grad_custom_pass`` setting holds (newer releases also take a
    list or tuple of them)."""
    if value is None:
        return ()
    return tuple(value) if isinstance(value, (list, tuple)) else (value,)


def install_pre_grad_pass(fn: Callable[[Any], Any], key: Callable[[], Any]) -> Any:
    """Run ``fn`` (a module-level function: it is pickled) on each graph before
    autograd, after a user's own pre-grad pass; ``key()`` (module-level too) says what
    ``fn`` does, for Inductor's compile cache. Returns what ``restore_pre_grad_pass``
    needs."""
    from torch._inductor.custom_graph_pass import CustomGraphPass

    CustomGraphPass.register(_PreGradPasses)
    prior = inductor_config.pre_grad_custom_pass
    _set_setting("pre_grad_custom_pass", _PreGradPasses(prior, fn, key), hold=True)
    return prior


def restore_pre_grad_pass(prior: Any) -> None:
    _set_setting("pre_grad_custom_pass", prior, hold=False)
