"""The Inductor template whose generated code calls our runtime.

Rendering yields a small Python module: it builds the kernel launcher once, at
import (a cache hit when the candidates were precompiled), and defines the
``<kernel>_main(inputs..., out, stream)`` function that Inductor's wrapper calls.
"""
from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import time
from typing import Any

import torch

from .._compat import CuteDSLTemplate, CuteDSLTemplateCaller
from ..runtime import compiler

TEMPLATE_NAME = "inductor_cutedsl_gemm"

#: Wall seconds this process spent benchmarking CuteDSL candidates (load + first run + timing).
stats = {"benchmark_s": 0.0}

# The kernel key (sources, DSL version, ...) is in the text so that Inductor's own
# caches of this module and of its autotuning timings change when our kernel does.
SOURCE = r"""
# inductor_cutedsl kernel {{kernel_key}}
from inductor_cutedsl.runtime.generated import launcher
_launch = launcher({{spec_literal}}, {{scalars_literal}}, {{views_literal}})
{{def_kernel(*argnames)}}
    _launch(a, b, {{get_output()}}{% for op in operand_args %}, {{op}}{% endfor %}, stream=stream)
"""


def render_args(input_names: list[str], operand_names: list[str], views: tuple = ()) -> dict:
    """Template arguments naming the kernel inputs (in input-node order) and the
    epilogue's tensor operands (in operand order), with their strided views
    (None: the operand is passed as Inductor's view of it)."""
    views = tuple(views) or (None,) * len(operand_names)
    if len(views) != len(operand_names):
        raise ValueError(f"{len(operand_names)} tensor operands but {len(views)} views")
    return {
        "argnames": input_names,
        "operand_args": operand_names,
        "views_literal": repr(views),
    }


class GemmCaller(CuteDSLTemplateCaller):
    """A CuteDSL GEMM candidate, benchmarked on inputs shaped like its own operands.

    Inductor's shared benchmark inputs are per buffer: one tensor for ``mm(x, x.t())``,
    and the base buffer rather than the view for a transposed weight or an expanded
    bias. So inputs are made from this choice's tensor metadata (sizes, strides,
    offsets of the views themselves). Inductor also aborts compilation on exceptions
    other than RuntimeError, so DSL errors are converted.
    """

    render_kwargs: dict[str, Any] = {}
    build: concurrent.futures.Future | None = None  # this candidate's kernel build

    def precompile(self) -> None:
        """Wait for this candidate's kernel (Inductor drops it if the build failed)."""
        if self.build is not None:
            compiler.wait([self.build])

    def benchmark(self, *args: torch.Tensor, out: torch.Tensor) -> float:
        try:
            self.precompile()
        except Exception as exc:
            raise RuntimeError(f"CuteDSL candidate {self.name} did not compile: {exc}") from exc
        t0 = time.perf_counter()
        try:
            return self.bmreq.benchmark(*self.benchmark_inputs(), out=out)
        except RuntimeError:
            raise
        except Exception as exc:  # a DSL or driver error must not abort compilation
            raise RuntimeError(f"CuteDSL candidate {self.name} failed: {exc}") from exc
        finally:
            stats["benchmark_s"] += time.perf_counter() - t0

    def benchmark_inputs(self) -> tuple[torch.Tensor, ...]:
        """Random inputs laid out as this choice's own operand views."""
        return tuple(meta.to_tensor() for meta in self.bmreq.input_tensor_meta)

    def hash_key(self) -> str:
        """Stable across renders of the same kernel for the same inputs (the stock key
        hashes the source, which names the kernel by a running counter), so Inductor's
        autotuning cache recognises a repeated GEMM and a second run."""
        k = self.render_kwargs
        parts = [k.get("kernel_key"), k.get("scalars_literal"), k.get("views_literal"), k.get("argnames")]
        return "inductor_cutedsl-" + hashlib.sha256(repr(parts).encode()).hexdigest()[:32]

    def info_dict(self) -> dict[str, Any]:
        return {**super().info_dict(), "backend": "inductor_cutedsl"}

    def output_node(self):
        box = super().output_node()
        box.data.data.cutedsl_render_kwargs = self.render_kwargs
        return box


class GemmTemplate(CuteDSLTemplate):
    def generate(self, **kwargs: Any) -> GemmCaller:
        base = super().generate(**kwargs)
        caller = GemmCaller(
            name=base.name,
            input_nodes=base.input_nodes,
            layout=base.layout,
            make_kernel_render=base.make_kernel_render,
            bmreq=base.bmreq,
            template=self,
            mutated_inputs=base.mutated_inputs,
        )
        # What the epilogue-fusion codegen needs to render this GEMM again.
        caller.render_kwargs = {k: v for k, v in kwargs.items() if k not in ("input_nodes", "layout")}
        return caller


@functools.cache
def gemm_template() -> GemmTemplate:
    """The one template instance (Inductor requires unique template names)."""
    return GemmTemplate(TEMPLATE_NAME, SOURCE)
