"""CuTe DSL kernels. Importing this package does not import cutlass: the kernel
classes live in ``sm90_gemm`` and are loaded by the runtime when it compiles."""

from .config import GemmConfig, config_space, dual_shortlist, shortlist
from .epilogue import IDENTITY, Epilogue, EpilogueOperand, bias, bias_activation, gated

__all__ = [
    "IDENTITY",
    "Epilogue",
    "EpilogueOperand",
    "GemmConfig",
    "bias",
    "bias_activation",
    "config_space",
    "dual_shortlist",
    "gated",
    "shortlist",
]
