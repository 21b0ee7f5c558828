"""Installing the backend into Inductor, and taking it out again.

The hook is Inductor's choices handler: our subclass adds CuteDSL candidates to
the mm/addmm/bmm/baddbmm template choices, beside Triton and ATen, so the
autotuner picks the fastest per shape. Enabling also adds the ``CUTEDSL`` token
to ``max_autotune_gemm_backends``, and re-times our best candidate side by side with
the fastest other choice after each autotuning pass (``fair_timing``);
``disable()`` restores all of it exactly.
"""
from __future__ import annotations

import contextlib
import logging
from typing import Any, Iterator

import torch

from .. import _compat, config
from ..runtime import workers
from .fair_timing import rescale
from .gemm_choices import BACKEND_TOKEN, GEMM_OPS, gemm_choices

log = logging.getLogger("inductor_cutedsl.lowering")


class CuteDSLChoices(_compat.InductorChoices):
    """Inductor's default heuristics, plus CuteDSL GEMM candidates."""

    def get_template_configs(self, kernel_inputs, templates, op_name, kwarg_overrides=None):
        choices = super().get_template_configs(kernel_inputs, templates, op_name, kwarg_overrides)
        ours = gemm_choices(kernel_inputs, op_name)
        if not choices and not ours and op_name in GEMM_OPS:
            # CUTEDSL is the only backend and this GEMM was refused: compile it with ATen
            # rather than leave Inductor with no choice at all.
            log.info("%s falls back to ATen (the only other backend is off)", op_name)
            fallback = [_compat.aten_choice(op_name)]
            choices = super().get_template_configs(kernel_inputs, fallback, op_name)
        return [*choices, *ours]


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
    if prior_cls not in (None, CuteDSLChoices):
        log.warning("replacing inductor_choices_class %r with CuteDSLChoices", prior_cls)
    _saved = {"backends": _compat.autotune_backends(), "choices_class": prior_cls}
    if not _compat.backend_enabled(BACKEND_TOKEN):
        _compat.set_autotune_backends(f"{_saved['backends']},{BACKEND_TOKEN}")
    _compat.set_choices_class(CuteDSLChoices)
    _saved["benchmark_hook"] = _compat.install_benchmark_hook(rescale)
    # Compile workers start with the first compilation (not at import): their DSL
    # import then overlaps tracing and lowering, before the first GEMM needs them.
    _saved["compile_start_hook"] = _compat.on_compile_start(_start_workers)
    if config.epilogue_fusion:
        from ..scheduler.scheduling import CuteDSLFusionScheduling, fusion_verdict

        _saved["scheduling"] = _compat.install_cuda_scheduling(CuteDSLFusionScheduling)
        # A GEMM whose epilogue we measured is decided already: Inductor's own
        # benchmark of the fusion (Triton candidates only) must not overrule it.
        _saved["speedup_hook"] = _compat.install_fusion_speedup_hook(fusion_verdict)


def disable() -> None:
    """Restore Inductor's settings as they were before ``enable()`` (idempotent)."""
    global _saved
    if _saved is None:
        return
    _compat.set_autotune_backends(_saved["backends"])
    _compat.set_choices_class(_saved["choices_class"])
    _compat.remove_compile_start_hook(_saved["compile_start_hook"])
    _compat.restore_benchmark_hook(_saved["benchmark_hook"])
    if "scheduling" in _saved:
        _compat.restore_cuda_scheduling(_saved["scheduling"])
        _compat.restore_fusion_speedup_hook(_saved["speedup_hook"])
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
