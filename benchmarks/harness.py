"""What every benchmark shares: side-by-side timing of plain calls and CUDA graphs,
accuracy against a reference, geomeans and result files.

The timing itself is the package's one implementation (``inductor_cutedsl.timing``);
accuracy and result files are the main job's (``inductor_cutedsl.cli.report``).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from inductor_cutedsl import timing
from inductor_cutedsl.cli.report import rel_err, run_info, write_json

__all__ = [
    "geomean",
    "geomean_or_none",
    "graphed",
    "median_interval",
    "ratio",
    "rel_err",
    "report_row",
    "run_info",
    "side_by_side",
    "side_by_side_rounds",
    "stamped",
    "stock_as_fair_stock",
    "stock_keeps_tuned_configs",
    "stock_on_torch_ptxas",
    "suite_device",
    "torch_ptxas",
    "write_json",
]


def torch_ptxas() -> str | None:
    """The ptxas torch ships (the one Inductor's compile workers point Triton at), or None."""
    import torch

    path = os.path.join(os.path.dirname(torch.__file__), "bin", "ptxas")
    return path if os.path.exists(path) else None


#: The two sides every benchmark compares, in the order they compile by default.
BACKENDS = ("stock", "ours")


def stock_as_fair_stock() -> None:
    """Let the stock side of a benchmark that compiles both sides in this process run as
    fair stock does in ``benchmarks.compile``: on torch's ptxas
    (``stock_on_torch_ptxas``) and keeping its Triton kernels' tuned configs
    (``stock_keeps_tuned_configs``). Both are stock's bugs, which ours fixes: the
    benchmark then measures our kernels, not the fixes."""
    stock_on_torch_ptxas()
    stock_keeps_tuned_configs()


@contextlib.contextmanager
def ours_out() -> Iterator[None]:
    """Our backend taken out for the body and put back after if it was in: a fix of
    stock's that the body installs is then not in ``enable()``'s record of what it
    changed, so that a later ``disable()`` (the stock side of a benchmark) leaves it, and
    ``enable()`` finds it in and changes nothing."""
    from inductor_cutedsl import disable, enable, is_enabled

    was_enabled = is_enabled()
    disable()
    try:
        yield
    finally:
        if was_enabled:
            enable()


def stock_keeps_tuned_configs() -> Any:
    """Let stock keep its Triton kernels' tuned configs in this process as fair stock
    does (``benchmarks.compile``): ``compat.autotune.carry_coordinate_descent``,
    installed so that ``disable()`` leaves it. Returns what
    ``compat.autotune.restore_coordinate_descent`` needs to take it out (None where it
    was in already).

    Without it each compile tunes every Triton pointwise and reduction kernel again from
    host-bound timings, the stock side's under ``disable()`` too, so a kernel both sides
    generate runs another config on each (docs/findings.md, Timing); with it, the
    backend compiled second runs the configs the first one's tuning found."""
    from inductor_cutedsl.compat.autotune import carry_coordinate_descent

    with ours_out():  # ours' own carry out first: a later disable() would take it out
        return carry_coordinate_descent()


def stock_on_torch_ptxas() -> str | None:
    """Let stock compile in this process as fair stock does (``benchmarks.compile``):
    with ``TRITON_PTXAS_PATH`` at torch's ptxas, set so that ``disable()`` leaves it.
    Returns the path, or None where torch ships no ptxas (nothing to align).

    Benchmarks that time kernels compile both sides in one process; stock, under
    ``disable()``, would otherwise compile its template choices twice (the ptxas
    mismatch ``compat.environment.align_triton_ptxas`` fixes for ours). That costs
    device time and no figure: these benchmarks time the compiled code, and compile time
    is measured by ``benchmarks.compile`` against fair stock and default stock."""
    path = torch_ptxas()
    if path is None:
        return None
    with ours_out():  # ours' own alignment out first: a later disable() would undo it
        os.environ["TRITON_PTXAS_PATH"] = path
        try:
            from triton.backends.nvidia import compiler as nvidia
        except ImportError:
            pass
        else:  # Triton reads the version once per process: read it again, from this path
            getattr(nvidia.get_ptxas_version, "cache_clear", lambda: None)()
    return path


def graphed(fn: Callable[[], object]) -> Callable[[], None]:
    """``fn``'s GPU work as a CUDA graph replay (``timing.graphed_run``); ``fn`` must
    launch on the current stream."""
    return timing.graphed_run(lambda: fn)


#: The CUDA API calls that start GPU work, as the profiler names them: a CUDA graph's
#: replay, and a kernel launched on its own (runtime and driver entry points; Triton and
#: our launcher use the driver's, ATen the runtime's).
GRAPH_LAUNCHES = frozenset({"cudaGraphLaunch", "cuGraphLaunch"})
KERNEL_LAUNCHES = frozenset(
    {"cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel", "cuLaunchKernel", "cuLaunchKernelEx"}
)


def launch_counts(events: Iterable[tuple[str, int]], calls: int) -> dict:
    """Graph replays and kernels launched alone per call, from the profiler's host-side
    events (``(name, count)`` over ``calls`` calls). A step compiled with CUDA graphs that
    launches its kernels one by one ran its wrapper instead of a replay: its wall time is
    then its host's, whatever its kernels cost."""
    counted = {"graph_launches": 0, "kernel_launches": 0}
    for name, count in events:
        if name in GRAPH_LAUNCHES:
            counted["graph_launches"] += count
        elif name in KERNEL_LAUNCHES:
            counted["kernel_launches"] += count
    return {key: round(value / calls, 2) for key, value in counted.items()}


def launch_api_calls(fn: Callable[[], object], calls: int = 10) -> dict:
    """``launch_counts`` of ``calls`` calls of ``fn`` under the profiler (after one
    untimed call)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return launch_counts(((e.key, e.count) for e in prof.key_averages()), calls)


def side_by_side_rounds(fns: dict, rounds: int = 5, rep_ms: int | None = None) -> dict:
    """Each function timed as plain calls (``rep_ms`` of them, the timing module's
    default if None) in each of about ``rounds`` interleaved rounds (whole balanced
    designs): {name: [ms per round]}."""
    makers = {name: (lambda fn=fn: fn) for name, fn in fns.items()}
    return timing.side_by_side_rounds(makers, rounds, graphs=False, rep=rep_ms, whole_designs=True)


def side_by_side(fns: dict, rounds: int = 5) -> dict:
    """The median over rounds of ``side_by_side_rounds``."""
    makers = {name: (lambda fn=fn: fn) for name, fn in fns.items()}
    return timing.side_by_side(makers, rounds, graphs=False, whole_designs=True)


def plain(value: object) -> object:
    """``value`` as plain JSON data: what the package recorded may hold sympy integers
    and other objects, written as their ``str``."""
    return json.loads(json.dumps(value, default=str))


def geomean(values: Iterable[float]) -> float:
    values = list(values)
    return math.exp(sum(map(math.log, values)) / len(values))


def geomean_or_none(values: Iterable[float]) -> float | None:
    """The geomean to 4 places, or None for no values (a summary over rows that measured
    nothing says so rather than failing)."""
    values = list(values)
    return round(geomean(values), 4) if values else None


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b`` to 4 places, or None where either is missing (or ``b`` is 0)."""
    return round(a / b, 4) if a is not None and b else None


def median_interval(values: Iterable[float], confidence: float = 0.95) -> tuple[float, float] | None:
    """An interval that holds the median of the distribution ``values`` were drawn from
    with at least ``confidence``: the order statistics the binomial places about it. It
    assumes independent draws and no shape, which is what interleaved timing rounds are
    (their ratios have long, uneven tails). None where too few values reach the
    confidence (fewer than 6 at 95%)."""
    xs = sorted(values)
    n, k, tail = len(xs), 0, 0.0
    # The interval [x_(k), x_(n+1-k)] (1-based) misses the median with probability
    # 2 P(Binomial(n, 1/2) < k): take the largest k that keeps each tail within its half.
    while k < n:
        tail += math.comb(n, k) / 2**n
        if tail > (1 - confidence) / 2:
            break
        k += 1
    return (xs[k - 1], xs[n - k]) if k else None


def stamped(result: dict, keys: Iterable[str] = ("device",)) -> list[dict]:
    """A result file's rows, each naming the card it ran on (and the other run-level
    ``keys`` its figures rest on): a row from before rows recorded them takes the file's
    (where it names them: merging a row of a file that names none must not erase what an
    earlier file's row named)."""
    run = {key: result[key] for key in keys if result.get(key)}
    return [{**run, **row} for row in result["rows"]]


def suite_device(rows: list[dict], info: dict) -> str | None:
    """Where the rows ran: the one card, or each card with its count of rows. A run that
    takes several device calls (``--resume``) gets whichever card each call is lent; its
    ratios hold row by row (each row measures both sides on one card), and the file
    says which card each row's figures come from."""
    counts = Counter(r.get("device") or info.get("device") for r in rows)
    counts.pop(None, None)
    if len(counts) <= 1:
        return next(iter(counts), info.get("device"))
    return " and ".join(f"{card} ({n} row{'s' * (n != 1)})" for card, n in sorted(counts.items()))


def report_row(result: dict, row: dict, path: str | None) -> None:
    """Add ``row`` to ``result["rows"]``, print it and rewrite ``path``: a run cut short
    by its time limit keeps every row it measured."""
    result["rows"].append(row)
    print(row, flush=True)
    write_json(result, path)
