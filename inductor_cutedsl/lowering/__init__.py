"""Inductor lowering: CuteDSL GEMM candidates for mm, addmm, bmm and baddbmm."""
from .install import CuteDSLChoices, disable, enable, is_enabled, reenabled

__all__ = ["CuteDSLChoices", "disable", "enable", "is_enabled", "reenabled"]
