"""Compile, cache and launch CuTe DSL kernels.

Names load lazily, so that compile workers (which never launch) do not import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "CompiledGemm": "launch",
    "KernelCache": "cache",
    "KernelSpec": "spec",
    "default_cache_dir": "cache",
    "gated_gemm": "launch",
    "gated_reason": "support",
    "gemm": "launch",
    "gemm_reason": "support",
    "get_gemm": "launch",
    "operands_reason": "support",
    "scaled_gemm": "launch",
    "scales_reason": "support",
    "spec_for": "launch",
}
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
