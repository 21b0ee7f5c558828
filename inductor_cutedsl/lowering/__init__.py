"""Inductor lowering: CuteDSL GEMM candidates for mm, addmm, bmm and baddbmm."""

from .choices import CuteDSLChoices

__all__ = ["CuteDSLChoices"]
