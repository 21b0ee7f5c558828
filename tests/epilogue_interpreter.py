"""Run epilogue sources on plain Python floats (CPU), to check their arithmetic."""
from __future__ import annotations

import math
import types

import torch


def _round_to(x: float, dtype: str) -> float:
    return float(torch.tensor(x, dtype=torch.float32).to(getattr(torch, dtype)).float())


def _math():
    names = ["exp", "exp2", "expm1", "log", "log1p", "log2", "erf", "sqrt", "sin", "cos"]
    ns = {n: getattr(math, n, None) for n in names}
    ns["exp2"] = lambda x: 2.0**x
    ns["rsqrt"] = lambda x: 1.0 / math.sqrt(x)
    ns["abs"] = abs
    ns["max"], ns["min"], ns["pow"] = max, min, pow
    return types.SimpleNamespace(**ns)


def namespace() -> dict:
    sigmoid = lambda x: 1.0 / (1.0 + math.exp(-x))  # noqa: E731
    return {
        "cute": types.SimpleNamespace(math=_math()),
        "Float32": float,
        "Int32": int,
        "relu": lambda x: max(x, 0.0),
        "reciprocal": lambda x: 1.0 / x,
        "fdiv": lambda a, b: a / b,
        "sigmoid": sigmoid,
        "silu": lambda x: x * sigmoid(x),
        "tanh": math.tanh,
        "gelu_tanh": lambda x: 0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
        "gelu_erf": lambda x: 0.5 * x * (1 + math.erf(x / math.sqrt(2))),
        "select": lambda c, a, b: a if c else b,
        "round_to": _round_to,
    }


def evaluate(source: str, acc: float, ops: tuple, m: int = 0, n: int = 0, l: int = 0) -> float:
    scope = namespace()
    exec(compile(source, "<epilogue>", "exec"), scope)
    return scope["epilogue"](acc, m, n, l, ops)
