"""Inductor's choices handler with CuteDSL GEMM candidates."""
from __future__ import annotations

import logging

from .. import _compat, config
from ..config import BACKEND_TOKEN
from .gemm_choices import GEMM_OPS, gemm_choices

log = logging.getLogger("inductor_cutedsl.lowering")


class CuteDSLChoices(_compat.InductorChoices):
    """Inductor's default heuristics, plus CuteDSL GEMM candidates."""

    def uuid(self) -> tuple:
        """Part of Inductor's compile cache key (newer Inductor refuses a choices class
        without it): which of our classes, our source and our settings."""
        return (f"{type(self).__module__}.{type(self).__qualname__}", *config.cache_key())

    def get_template_configs(self, kernel_inputs, templates, op_name, kwarg_overrides=None):
        choices = super().get_template_configs(kernel_inputs, templates, op_name, kwarg_overrides)
        ours = gemm_choices(kernel_inputs, op_name)
        if not choices and not ours and op_name in GEMM_OPS and _only_backend_is_ours():
            # CUTEDSL is the only backend and this GEMM was refused: compile it with ATen
            # rather than leave Inductor with no choice at all. With another backend on,
            # no choice stays an error, as on stock Inductor.
            log.info("%s falls back to ATen (the only other backend is off)", op_name)
            fallback, overrides = _aten_fallback(kernel_inputs, op_name)
            choices = super().get_template_configs(
                kernel_inputs, [fallback], op_name, kwarg_overrides=overrides
            )
        return [*choices, *ours]


def _only_backend_is_ours() -> bool:
    return _compat.autotune_backend_tokens() == [BACKEND_TOKEN]


def _aten_fallback(kernel_inputs, op_name: str):
    """ATen's choice for this GEMM and its kwargs: an output dtype other than the
    inputs' (``torch.bmm(a, b, out_dtype=...)``) needs ATen's ``*_dtype`` kernel."""
    out_dtype = _compat.kernel_out_dtype(kernel_inputs)
    if out_dtype is not None and op_name in ("mm", "bmm"):
        choice = _compat.aten_dtype_choice(op_name)
        return choice, {choice.uid: {"out_dtype": out_dtype}}
    return _compat.aten_choice(op_name), None
