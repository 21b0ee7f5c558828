"""Inductor's choices handler with CuteDSL GEMM candidates."""
from __future__ import annotations

import logging

from .. import _compat
from .gemm_choices import GEMM_OPS, gemm_choices

log = logging.getLogger("inductor_cutedsl.lowering")


class CuteDSLChoices(_compat.InductorChoices):
    """Inductor's default heuristics, plus CuteDSL GEMM candidates."""

    def uuid(self) -> tuple:
        """Part of Inductor's compile cache key (newer Inductor refuses a choices class
        without it): which of our classes, our source and our settings."""
        from ..install import cache_key

        return (f"{type(self).__module__}.{type(self).__qualname__}", *cache_key())

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
