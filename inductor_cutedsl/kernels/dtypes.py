"""The DSL type of each dtype name a kernel spec uses.

One table serves the kernel's operand and output types (``sm90_gemm``), the epilogue's
explicit roundings (``epilogue_math.round_to``) and the pointer types of a loaded entry
(``runtime.launch``): they must agree, and a disagreement would show only in a kernel's
results on a GPU, so there is one table and a CPU test checks it against torch's dtypes.
"""

from __future__ import annotations

import cutlass

DSL_TYPES = {
    "bfloat16": cutlass.BFloat16,
    "float16": cutlass.Float16,
    "float32": cutlass.Float32,
    "float8_e4m3fn": cutlass.Float8E4M3FN,
}
