"""Installing the backend into Inductor, and taking it out again.

The hook is Inductor's choices handler: our subclass adds CuteDSL candidates to
the mm/addmm/bmm/baddbmm template choices, beside Triton and ATen, so the
autotuner picks the fastest per shape (``lowering``); with epilogue fusion on, its
subclass also scores fusions our GEMMs take, and our CUDA scheduling fuses them
(``scheduler``). Enabling also adds the ``CUTEDSL`` token to
``max_autotune_gemm_backends``, and re-times our best candidate side by side with
the fastest other choice after each autotuning pass (``fair_timing``);
``disable()`` restores all of it exactly.
"""
from __future__ import annotations

import contextlib
import logging
from typing import Any, Iterator

import torch

from . import _compat, config
from .lowering.choices import CuteDSLChoices
from .lowering.fair_timing import rescale
from .lowering.gemm_choices import BACKEND_TOKEN
from .runtime import workers

log = logging.getLogger("inductor_cutedsl")


_saved: dict[str, Any] | None = None


def is_enabled() -> bool:
    return _saved is not None


def _start_workers() -> None:
    if config.enabled and torch.cuda.is_available():
        workers.start(config.compile_workers)


def enable() -> None:
    """Install the backend (idempotent)."""
    global _saved
    if _saved is not None:
        return
    prior_cls = _compat.choices_class()
    if prior_cls is not None and not issubclass(prior_cls, CuteDSLChoices):
        log.warning("replacing inductor_choices_class %r with CuteDSLChoices", prior_cls)
    _saved = {"backends": _compat.autotune_backends(), "choices_class": prior_cls}
    if not _compat.backend_enabled(BACKEND_TOKEN):
        _compat.set_autotune_backends(f"{_saved['backends']},{BACKEND_TOKEN}")
    _compat.set_choices_class(CuteDSLChoices)
    _saved["benchmark_hook"] = _compat.install_benchmark_hook(rescale)
    if config.dual_gemm:
        from .lowering import gated

        _compat.register_lowering(torch.ops.inductor_cutedsl.gated_mm.default, gated.lower)
        _saved["pre_grad_pass"] = _compat.install_pre_grad_pass(gated.rewrite)
    # Compile workers start with the first compilation (not at import): their DSL
    # import then overlaps tracing and lowering, before the first GEMM needs them.
    _saved["compile_start_hook"] = _compat.on_compile_start(_start_workers)
    if config.epilogue_fusion:
        from .scheduler.scheduling import (
            CuteDSLFusionChoices,
            CuteDSLFusionScheduling,
            fusion_verdict,
            pairs_through_view,
        )

        _compat.set_choices_class(CuteDSLFusionChoices)
        _saved["scheduling"] = _compat.install_cuda_scheduling(CuteDSLFusionScheduling)
        # A GEMM whose epilogue we measured is decided already: Inductor's own
        # benchmark of the fusion (Triton candidates only) must not overrule it.
        _saved["fusion_hooks"] = _compat.install_fusion_hooks(fusion_verdict, pairs_through_view)


def disable() -> None:
    """Restore Inductor's settings as they were before ``enable()`` (idempotent)."""
    global _saved
    if _saved is None:
        return
    _compat.set_autotune_backends(_saved["backends"])
    _compat.set_choices_class(_saved["choices_class"])
    _compat.remove_compile_start_hook(_saved["compile_start_hook"])
    _compat.restore_benchmark_hook(_saved["benchmark_hook"])
    if "pre_grad_pass" in _saved:
        _compat.restore_pre_grad_pass(_saved["pre_grad_pass"])
        _compat.unregister_lowering(torch.ops.inductor_cutedsl.gated_mm.default)
    if "scheduling" in _saved:
        _compat.restore_cuda_scheduling(_saved["scheduling"])
        _compat.restore_fusion_hooks(_saved["fusion_hooks"])
    _saved = None


@contextlib.contextmanager
def reenabled(**changes: Any) -> Iterator[None]:
    """The backend reinstalled under ``config`` changes that ``enable()`` reads (such as
    ``epilogue_fusion``); on exit, reinstalled under the settings as they were."""
    disable()
    try:
        with config.patch(**changes):
            enable()
            yield
    finally:
        disable()
        enable()
