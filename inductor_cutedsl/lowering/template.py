"""The Inductor template whose generated code calls our runtime.

Rendering a ``GemmCandidate`` yields a small Python module: it builds the kernel
launcher once, at import (a cache hit when the candidates were precompiled), and
defines the ``<kernel>_main(inputs..., out, stream)`` function that Inductor's
wrapper calls.
"""

from __future__ import annotations

import concurrent.futures
import functools
import time
from typing import TYPE_CHECKING, Any

import torch

from ..compat import ir_access
from ..compat.lazy import CuteDSLTemplate, CuteDSLTemplateBuffer, CuteDSLTemplateCaller, CuteDSLTemplateKernel
from ..runtime import compiler
from .candidate import GemmCandidate

if TYPE_CHECKING:
    from ..kernels.config import GemmConfig

TEMPLATE_NAME = "inductor_cutedsl_gemm"

#: Wall seconds this process spent benchmarking CuteDSL candidates (load + first run + timing).
stats = {"benchmark_s": 0.0}

# The kernel key (sources, DSL version, ...) is in the text so that Inductor's own
# caches of this module and of its autotuning timings change when our kernel does.
# ``<kernel>_precompile`` is the entry point torch 2.14 on calls in its compile workers
# (``runtime.generated.precompile``): without it, each kernel logs a warning there.
SOURCE = r"""
# inductor_cutedsl kernel {{candidate.spec.key()}}
from inductor_cutedsl.runtime.generated import launcher, precompile, KernelSpec, GemmConfig, Epilogue, EpilogueOperand
_launch = launcher({{candidate.launcher_source(input_nodes)}}, scope=globals())
{{kernel_name}}_precompile = precompile
{{def_kernel(*candidate.input_names)}}
    _launch(a, b, {{get_output()}}{% for op in candidate.operand_args %}, {{op}}{% endfor %}{% if candidate.spec.dual %}, b_up=b_up{% endif %}, stream=stream)
"""


class GemmTemplateKernel(CuteDSLTemplateKernel):
    """Inductor's CuteDSL template kernel, calling our GEMM operands by their buffers.

    Inductor's call of a CuteDSL kernel rebuilds each input view with
    ``reinterpret_tensor`` at every call (a host cost per operand per launch, which a
    Triton template's call does not pay). A GEMM operand whose layout is static and
    starts at its buffer's start (``GemmCandidate.bound_layouts``) is passed as the
    buffer; the rendered launcher reads it through that layout. Rule: the operands left
    unwrapped here are exactly those the same render gave the launcher layouts for (one
    rule, ``bound_layouts``, on the same nodes)."""

    candidate: GemmCandidate | None = None

    def render(self, template: Any, **kwargs: Any) -> Any:
        self.candidate = kwargs.get("candidate")
        return super().render(template, **kwargs)

    def _get_reinterpret_view(self, node: Any) -> Any:
        if self.candidate is not None:
            bound = self.candidate.bound_layouts(self.input_nodes)
            names = dict(zip(self.candidate.input_names, self.input_nodes))
            if any(names.get(name) is node for name in bound):
                return None
        return super()._get_reinterpret_view(node)


class GemmTemplateBuffer(CuteDSLTemplateBuffer):
    """The IR buffer of a GEMM our template won: it carries the candidate, which
    epilogue fusion renders again with the epilogue in it."""

    def __init__(self, candidate: GemmCandidate, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.candidate = candidate


class GemmCaller(CuteDSLTemplateCaller):
    """A CuteDSL GEMM candidate, benchmarked on inputs shaped like its own operands.

    Inductor's shared benchmark inputs are per buffer: one tensor for ``mm(x, x.t())``,
    and the base buffer rather than the view for a transposed weight or an expanded
    bias. So inputs are made from this choice's tensor metadata (sizes, strides,
    offsets of the views themselves). Inductor also aborts compilation on exceptions
    other than RuntimeError, so DSL errors are converted.
    """

    candidate: GemmCandidate
    build: concurrent.futures.Future | None = None  # this candidate's kernel build

    @property
    def gemm_config(self) -> GemmConfig:
        """The kernel config of this candidate."""
        return self.candidate.spec.config

    def precompile(self) -> None:
        """Load this candidate's kernel if its build is done (Inductor drops the
        candidate if it failed). Inductor runs precompiles in its own threads, beside the
        Triton choices' compiles, and starts no benchmark before every precompile has
        returned: waiting here for a build still running would hold every Triton
        benchmark behind our builds (measured: cold compiles 4-9 s longer), so such a
        build is left to ``benchmark``. Loading here keeps the process's first load (the
        DSL runtime's set-up, seconds on a GPU) and each kernel's load out of the timed
        benchmarks that follow, as Triton's precompile loads its kernels."""
        if self.build is not None and self.build.done():
            self._load()

    def _load(self) -> None:
        assert self.build is not None  # called only with a build started
        ((path, _, _),) = compiler.wait([self.build])
        if torch.cuda.is_initialized():  # a process that runs kernels (not a fake GPU's compile)
            from ..runtime.launch import get_gemm

            with torch.cuda.device(self.layout.device):
                get_gemm(self.candidate.spec, path=path)

    def benchmark(self, *args: torch.Tensor, out: torch.Tensor) -> float:
        try:
            if self.build is not None:
                self._load()
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
        """The candidate's key (the stock key hashes the source, which names the kernel
        by a running counter) and how this compile times choices: Inductor's autotune
        cache keeps a pass's timings by these keys, and fair timing ranks differently
        with and without CUDA graphs (``fair_timing.regime``)."""
        from .fair_timing import regime

        return f"{self.candidate.key()}@{regime()}"

    def info_dict(self) -> dict[str, Any]:
        return {**super().info_dict(), "backend": "inductor_cutedsl"}

    def output_node(self):
        return ir_access.tensor_box(
            GemmTemplateBuffer(
                self.candidate,
                layout=self.layout,
                inputs=self.input_nodes,
                make_kernel_render=self.make_kernel_render,
                template=self.template,
                mutated_inputs=self.mutated_inputs,
            )
        )


class GemmTemplate(CuteDSLTemplate):
    kernel_type = GemmTemplateKernel

    def generate(self, *, candidate: GemmCandidate, **kwargs: Any) -> GemmCaller:
        base = super().generate(candidate=candidate, **kwargs)
        caller = GemmCaller(
            name=base.name,
            input_nodes=base.input_nodes,
            layout=base.layout,
            make_kernel_render=base.make_kernel_render,
            bmreq=base.bmreq,
            template=self,
            mutated_inputs=base.mutated_inputs,
        )
        caller.candidate = candidate
        return caller


@functools.cache
def gemm_template() -> GemmTemplate:
    """The one template instance (Inductor requires unique template names)."""
    return GemmTemplate(TEMPLATE_NAME, SOURCE)
