"""DSL-side helpers that epilogue sources may call, and the source-to-hook step."""
from __future__ import annotations

import math
from typing import Callable

from .. import arch  # noqa: F401  (pins CUTE_DSL_ARCH before cutlass)
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32

from .epilogue import Epilogue

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)


def relu(x):
    return cute.math.max(x, Float32(0.0))


def reciprocal(x):
    """``1 / x`` as ``rcp.approx.ftz.f32`` (within 1 ulp; a subnormal ``x`` counts as 0).

    An IEEE division compiles to a slow-path branch per element, and those branches
    stop the compiler from issuing the epilogue's operand loads together: each of a
    thread's ~128 loads then waits its full latency in turn (SASS of a silu*gate
    epilogue: 129 branches, loads 35 instructions apart instead of 6). Triton divides
    approximately too (``div.full.f32``).
    """
    return cute.arch.rcp_approx(x)


def fdiv(a, b):
    """``a / b`` through ``reciprocal`` (within 2 ulp, as Triton's division)."""
    return a * reciprocal(b)


def sigmoid(x):
    return reciprocal(Float32(1.0) + cute.math.exp(-x, fastmath=True))


def silu(x):
    return x * sigmoid(x)


def tanh(x):
    return cute.math.tanh(x, fastmath=True)


def gelu_tanh(x):
    inner = Float32(_SQRT_2_OVER_PI) * (x + Float32(0.044715) * x * x * x)
    return Float32(0.5) * x * (Float32(1.0) + cute.math.tanh(inner, fastmath=True))


def gelu_erf(x):
    return Float32(0.5) * x * (Float32(1.0) + cute.math.erf(x * Float32(_INV_SQRT_2)))


def select(cond, if_value, else_value):
    """Element-wise ``cond ? if_value : else_value`` on scalars."""
    if isinstance(cond, bool):
        return if_value if cond else else_value
    return Float32(cutlass.select_(cond, Float32(if_value), Float32(else_value)))


def round_to(x, dtype: str):
    """Round an fp32 value through a narrower float type (an explicit cast in the graph)."""
    narrow = {"bfloat16": cutlass.BFloat16, "float16": cutlass.Float16}[dtype]
    return Float32(x).to(narrow).to(Float32)


NAMESPACE = {
    "cute": cute,
    "cutlass": cutlass,
    "Float32": Float32,
    "Int32": Int32,
    "relu": relu,
    "reciprocal": reciprocal,
    "fdiv": fdiv,
    "sigmoid": sigmoid,
    "silu": silu,
    "tanh": tanh,
    "gelu_tanh": gelu_tanh,
    "gelu_erf": gelu_erf,
    "select": select,
    "round_to": round_to,
}


def materialize(epi: Epilogue) -> Callable | None:
    """The trace-time hook function of an epilogue (None for identity)."""
    if epi.is_identity:
        return None
    scope = dict(NAMESPACE)
    exec(compile(epi.source, f"<epilogue {epi.name}>", "exec"), scope)
    fn = scope.get("epilogue")
    if not callable(fn):
        raise ValueError(f"epilogue {epi.name!r} source defines no `epilogue` function")
    return fn
