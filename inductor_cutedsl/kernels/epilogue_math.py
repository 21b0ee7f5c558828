"""DSL-side helpers that epilogue sources may call, and the source-to-hook step."""

from __future__ import annotations

import ast
import builtins
import math
import symtable
import traceback
from collections.abc import Callable

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32

from .dtypes import DSL_TYPES
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
    return Float32(x).to(DSL_TYPES[dtype]).to(Float32)


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


class EpilogueError(ValueError):
    """An epilogue whose source cannot become a kernel: the message names the epilogue
    and, where one is to blame, the line of its source."""


def _filename(epi: Epilogue) -> str:
    return f"<epilogue {epi.name}>"


def _source(epi: Epilogue) -> str:
    """The source of an epilogue that has one (the identity has none: nothing to check)."""
    if epi.source is None:
        raise EpilogueError(f"epilogue {epi.name!r} is the identity: it has no source")
    return epi.source


def _unknown_names(epi: Epilogue) -> list[tuple[str, int]]:
    """(name, line) of each name the source reads that nothing defines: not a
    parameter, local or module-level name of the source, not in ``NAMESPACE``, not a
    builtin."""
    tables = [symtable.symtable(_source(epi), _filename(epi), "exec")]
    top = tables[0]
    defined = set(NAMESPACE) | set(dir(builtins)) | {s.get_name() for s in top.get_symbols() if s.is_assigned()}
    unknown: set[str] = set()
    while tables:
        table = tables.pop()
        tables += table.get_children()
        for sym in table.get_symbols():
            if sym.is_referenced() and (sym.is_global() or table is top) and sym.get_name() not in defined:
                unknown.add(sym.get_name())
    lines: dict[str, int] = {}
    for node in ast.walk(ast.parse(_source(epi))):
        if isinstance(node, ast.Name) and node.id in unknown:
            lines[node.id] = min(lines.get(node.id, node.lineno), node.lineno)
    return sorted(lines.items(), key=lambda item: item[1])


def _source_line(epi: Epilogue, tb) -> int | None:
    """The last line of ``epi``'s source in the traceback ``tb``."""
    line = None
    for frame, lineno in traceback.walk_tb(tb):
        if frame.f_code.co_filename == _filename(epi):
            line = lineno
    return line


def _check_source(epi: Epilogue) -> Callable:
    """The source's ``epilogue`` function, or an EpilogueError saying what is wrong."""
    try:
        code = compile(_source(epi), _filename(epi), "exec")
    except SyntaxError as exc:
        raise EpilogueError(f"epilogue {epi.name!r}, line {exc.lineno}: {exc.msg}") from None
    unknown = _unknown_names(epi)
    if unknown:
        name, line = unknown[0]
        raise EpilogueError(
            f"epilogue {epi.name!r}, line {line}: unknown name {name!r} (the source sees its own names, "
            f"Python's builtins and {', '.join(sorted(NAMESPACE))})"
        )
    scope = dict(NAMESPACE)
    try:
        exec(code, scope)
    except Exception as exc:
        raise EpilogueError(
            f"epilogue {epi.name!r}, line {_source_line(epi, exc.__traceback__)}: {type(exc).__name__}: {exc}"
        ) from exc
    fn = scope.get("epilogue")
    if not callable(fn):
        raise EpilogueError(f"epilogue {epi.name!r} source defines no `epilogue` function")
    return fn


def materialize(epi: Epilogue) -> Callable | None:
    """The trace-time hook function of an epilogue (None for identity).

    Raises EpilogueError (a ValueError) for a source that does not parse, reads an
    unknown name or defines no ``epilogue``; the hook raises it at trace time for an
    error raised inside the source (with its line) or a result that does not match the
    ``out`` operands (one value without them, a tuple of 1 + their count with them).
    """
    if epi.is_identity:
        return None
    fn = _check_source(epi)
    outputs = sum(op.is_output for op in epi.operands)
    returns = [node.lineno for node in ast.walk(ast.parse(_source(epi))) if isinstance(node, ast.Return)]
    where = f", line {returns[0]}" if len(returns) == 1 else ""

    def hook(acc, m, n, l, ops):
        try:
            result = fn(acc, m, n, l, ops)
        except EpilogueError:
            raise
        except Exception as exc:
            line = _source_line(epi, exc.__traceback__)
            if line is None:
                raise
            raise EpilogueError(f"epilogue {epi.name!r}, line {line}: {type(exc).__name__}: {exc}") from exc
        count = len(result) if isinstance(result, (tuple, list)) else None
        if outputs == 0 and count is not None:
            raise EpilogueError(
                f"epilogue {epi.name!r}{where} returns {count} values but declares no `out` operand: return one "
                "value (for the output), or declare an `out` operand for each value after the first"
            )
        if outputs and count != outputs + 1:
            got = "one value" if count is None else f"{count} values"
            raise EpilogueError(
                f"epilogue {epi.name!r}{where} returns {got}, but its {outputs} `out` operand(s) want a tuple of "
                f"{outputs + 1}: the output's value, then one per `out` operand"
            )
        if result is None or (count is not None and any(v is None for v in result)):
            raise EpilogueError(f"epilogue {epi.name!r}{where} returns None")
        return result

    return hook
