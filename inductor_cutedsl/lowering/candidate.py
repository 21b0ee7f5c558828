"""One CuteDSL GEMM candidate as a typed object, from lowering to generated code.

The lowering makes a ``GemmCandidate`` per kernel it offers; the template caller and
the IR buffer Inductor makes of the winner carry it; epilogue fusion derives a new one
from it (``scheduler.fusion.fuse``). Only rendering turns it into source text: a
Python expression that rebuilds the same spec in the generated module.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Sequence
from typing import Any

from .. import config
from ..runtime.spec import GEMM_OPERANDS, KernelSpec

#: How an epilogue tensor operand (or the output) is addressed: element (m, n, l) at
#: offset + strides . (m, n, l), in elements of the tensor passed at launch.
View = tuple[tuple[int, int, int], int]


@dataclasses.dataclass(frozen=True)
class GemmCandidate:
    """A kernel and how the generated code calls it.

    ``input_names``: the kernel function's parameter names, one per Inductor input
    node, in input-node order (``a`` and ``b`` are the GEMM operands); ``operand_args``:
    the inputs passed as the epilogue's tensor operands, in operand order; ``views``:
    per tensor operand, how the kernel reads it (None: as Inductor's view of it,
    broadcast like ``expand``); ``scalars``: the epilogue's scalar operands' values;
    ``out_view``: how the output is written where it is not laid out as the GEMM's own
    (L, M, N) result (a fused consumer's (B, T, N) buffer).
    """

    spec: KernelSpec
    input_names: tuple[str, ...] = ("a", "b")
    operand_args: tuple[str, ...] = ()
    views: tuple[View | None, ...] = ()
    scalars: tuple[float, ...] = ()
    out_view: View | None = None

    def __post_init__(self) -> None:
        tensors = sum(op.is_tensor for op in self.spec.epilogue.operands)
        if len(self.operand_args) != tensors:
            raise ValueError(
                f"epilogue {self.spec.epilogue.name} takes {tensors} tensor operands, got {len(self.operand_args)}"
            )
        if not self.views:
            object.__setattr__(self, "views", (None,) * tensors)
        if len(self.views) != tensors:
            raise ValueError(f"{tensors} tensor operands but {len(self.views)} views")
        if len(self.scalars) != len(self.spec.epilogue.operands) - tensors:
            raise ValueError(
                f"epilogue {self.spec.epilogue.name} takes "
                f"{len(self.spec.epilogue.operands) - tensors} scalars, got {len(self.scalars)}"
            )
        if not set(self.operand_args) <= set(self.input_names):
            raise ValueError(f"operands {self.operand_args} are not all inputs {self.input_names}")

    def key(self) -> str:
        """Stable across renders of the same kernel called the same way: Inductor's
        autotuning cache recognises a repeated GEMM and a second run by it."""
        parts = (self.spec.key(), self.input_names, self.operand_args, self.views, self.scalars, self.out_view)
        return "inductor_cutedsl-" + hashlib.sha256(repr(parts).encode()).hexdigest()[:32]

    def launcher_source(self, input_nodes: Sequence[Any] = ()) -> str:
        """The arguments of ``runtime.generated.launcher`` as Python source (the names
        ``runtime.generated`` exports are in scope there). ``config.programmatic_launch``
        is read now, as the graph's code is generated: the code says how it launches,
        so two compiles that differ in it are two modules. ``input_nodes``: the
        rendering kernel's, whose ``bound_layouts`` the launcher is given."""
        programmatic = ", programmatic=True" if config.programmatic_launch else ""
        layouts = self.bound_layouts(input_nodes)
        bound = f", layouts={layouts!r}" if layouts else ""
        return (
            f"{self.spec!r}, scalars={self.scalars!r}, views={self.views!r}, out_view={self.out_view!r}"
            f"{programmatic}{bound}"
        )

    def bound_layouts(self, input_nodes: Sequence[Any]) -> dict[str, tuple]:
        """Per GEMM operand among ``input_nodes`` (in ``input_names`` order) that the
        generated call passes as its storage buffer, the (sizes, strides) the launcher
        reads it through (``compat.ir_access.bound_layout``: static, from the buffer's
        start). The rest are passed as Inductor's views, as before."""
        from ..compat import ir_access

        found = {}
        for name, node in zip(self.input_names, input_nodes):
            if name in GEMM_OPERANDS and (layout := ir_access.bound_layout(node)) is not None:
                found[name] = layout
        return found

    def launcher(self) -> Callable[..., None]:
        """What the generated module's ``_launch`` is, made here (for timing it)."""
        from ..runtime.generated import launcher

        return launcher(
            self.spec,
            scalars=self.scalars,
            views=self.views,
            out_view=self.out_view,
            programmatic=config.programmatic_launch,
        )
