"""Compile, cache and launch CuTe DSL kernels."""
from .cache import KernelCache, default_cache_dir
from .launch import CompiledGemm, gemm, get_gemm, spec_for
from .spec import KernelSpec
from .support import gemm_reason, operands_reason

__all__ = [
    "CompiledGemm",
    "KernelCache",
    "KernelSpec",
    "default_cache_dir",
    "gemm",
    "gemm_reason",
    "get_gemm",
    "operands_reason",
    "spec_for",
]
