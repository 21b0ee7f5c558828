"""Side-by-side measurement, the one implementation: each contender measured once per
round, in interleaved rounds of a balanced order, and the medians compared.

Compilation measures with it (fair timing, the fused/unfused selection, the dual-GEMM
gate), as medians of CUDA graph replays; the main job and the benchmarks use the same
function on plain calls (``graphs=False``)."""

from __future__ import annotations

import functools
import logging
import math
import statistics
import time
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any, TypeVar

import torch


def bench(fn: Callable[[], object], rep: int = 100, warmup: int = 25) -> float:
    """Median milliseconds of ``fn`` (triton.testing.do_bench: ``warmup`` ms, then
    ``rep`` ms of calls)."""
    import triton.testing

    return triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median")


def graphed_run(make: Callable[[], Callable[[], object]]) -> Callable[[], None]:
    """The GPU work of ``make()``'s function captured once as a CUDA graph; returns its replay.

    A replay costs the same few microseconds of host time whatever the function does in
    Python, so short kernels are timed as kernels, not as their launch paths (what a
    model compiled with CUDA graphs runs). ``make`` is called on the capture stream: run
    functions read the current stream once, when made (Inductor's benchmark run functions)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn = make()
        fn()  # outside the capture: a first launch loads kernels and sets up launch paths
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    # thread_local: a compile thread's CUDA calls elsewhere must not void this capture.
    with torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
        fn()

    def replay(keep_alive: Callable[[], object] = fn) -> None:
        # The captured kernels read and write the tensors ``fn`` holds: they must live as
        # long as the graph may replay, or replays touch freed (reused, or unmapped) memory.
        graph.replay()

    return replay


#: How long one side-by-side measurement runs: ``REPLAYS`` replays' worth of the
#: kernel's time, at least ``MIN_REP_MS`` and at most a caller's maximum. do_bench
#: flushes L2 before each replay, so even ``MIN_REP_MS`` gives a short kernel dozens of
#: replays; a fixed length would cost a small GEMM's compile as much as a large one's
#: (each decision runs tens of measurements).
REPLAYS = 300
MIN_REP_MS = 3
#: The longest measurement (and warm-up) of the fused/unfused selection and the dual-GEMM gate.
MAX_REP_MS = 40
MAX_WARMUP_MS = 25


def measure_ms(kernel_ms: float, max_ms: int = MAX_REP_MS) -> int:
    """Milliseconds of replays per measurement of a run whose GPU work takes ``kernel_ms``."""
    return int(min(max_ms, max(MIN_REP_MS, math.ceil(kernel_ms * REPLAYS))))


def replay_ms(replay: Callable[[], None], count: int = 3) -> float:
    """A quick estimate of a replay's GPU milliseconds: ``count`` back to back between events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(count):
        replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / count


def graph_median(
    make_run: Callable[[], Callable[[], object]],
    rep: int | None = None,
    warmup: int | None = None,
    max_ms: int = MAX_REP_MS,
) -> Callable[[], float]:
    """A measurement (ms, ``bench`` median over ``rep`` ms after ``warmup`` ms) of the
    CUDA graph of ``make_run()``'s GPU work (see ``graphed_run``): on this scale, two
    contenders' host paths cost nothing and their kernels compare as kernels. Without
    ``rep``, its length follows the replay's own time (``measure_ms``, at most ``max_ms``)."""
    replay = graphed_run(make_run)
    if rep is None:
        rep = measure_ms(replay_ms(replay), max_ms)
    if warmup is None:
        warmup = min(rep, MAX_WARMUP_MS)
    return lambda: bench(replay, rep=rep, warmup=warmup)


@functools.cache
def sleep_cycles_per_ms(device: int) -> float:
    """Clock cycles of ``torch.cuda._sleep`` per millisecond on ``device`` (measured once)."""
    with torch.cuda.device(device):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        cycles = 10**7
        torch.cuda._sleep(cycles)  # the first launch sets the kernel up
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        return cycles / start.elapsed_time(end)


#: Times ``enqueue_ms`` takes an impure figure again.
IMPURE_RETRIES = 2


def enqueue_ms(fn: Callable[[], object], calls: int = 20) -> tuple[float, bool]:
    """Host milliseconds per call of ``fn`` (its launch path alone: what a step without
    CUDA graphs pays per call when the host sets the pace), and whether the figure is
    pure: ``calls`` calls are enqueued behind a GPU sleep long enough that the GPU starts
    none of them while the host times them. Not pure if the sleep ended first (the
    figure then includes waiting for the GPU). ``calls`` times ``fn``'s launches must fit
    in the GPU's launch queue, or enqueueing blocks. A host that stalls past the sleep (a
    loaded machine preempting the thread) makes the figure impure: it is taken again, up
    to ``IMPURE_RETRIES`` times, each behind a sleep four times as long."""
    ms, pure = _enqueued({0: fn}, calls)
    return ms[0], pure


def enqueue_each_ms(fns: Mapping[K, Callable[[], object]], calls: int = 10) -> dict[K, float] | None:
    """``enqueue_ms`` of several functions behind one GPU sleep: each function's host
    milliseconds per call, ``calls`` calls each in turn; None if the sleep ended before
    the last call was enqueued, after the same retries. One sleep instead of one per
    function: a compile times the launch paths of several choices per GEMM, and each
    sleep costs milliseconds of compile time. ``calls`` times the functions' launches,
    summed over all of them, must fit in the GPU's launch queue."""
    ms, pure = _enqueued(fns, calls)
    return ms if pure else None


def _enqueued(fns: Mapping[K, Callable[[], object]], calls: int) -> tuple[dict[K, float], bool]:
    """Each function's host milliseconds per call, its ``calls`` calls enqueued in turn
    behind one GPU sleep, and whether the sleep outlasted them all (``enqueue_ms``): the
    last attempt's figures."""
    for fn in fns.values():
        fn()
    t0 = time.perf_counter()
    for fn in fns.values():
        for _ in range(calls):
            fn()
    guess_ms = (time.perf_counter() - t0) * 1e3
    cycles_per_ms = sleep_cycles_per_ms(torch.cuda.current_device())
    out: dict[K, float] = {}
    for attempt in range(1 + IMPURE_RETRIES):
        torch.cuda.synchronize()
        torch.cuda._sleep(int(cycles_per_ms * (2 * guess_ms + 5) * 4**attempt))
        slept = torch.cuda.Event()
        slept.record()
        for key, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            out[key] = (time.perf_counter() - t0) / calls * 1e3
        pure = not slept.query()
        if pure:
            break
    torch.cuda.synchronize()
    return out, pure


def balanced_rounds(count: int) -> int:
    """Rounds in one whole ``rotations`` design over ``count`` contenders."""
    return count if count % 2 == 0 else 2 * count


def rotations(names: list, rounds: int) -> Iterator[list]:
    """The order of each of ``rounds`` interleaved rounds over ``names``: the rows of a
    Williams design, repeated. Over each whole design (``balanced_rounds``) every
    contender is measured in every position, and right after every other contender,
    equally often. On a power-capped GPU a measurement depends on what ran just before
    it (a lighter predecessor leaves a higher clock): a fixed cyclic order would favour
    whoever always follows the lightest contender."""
    n = len(names)
    first, low, high = [0], 1, n - 1
    while len(first) < n:  # 0, 1, n-1, 2, n-2, ...: each step between neighbours differs
        first.append(low)
        low += 1
        if len(first) < n:
            first.append(high)
            high -= 1
    rows = [[(j + i) % n for j in first] for i in range(n)] if n else [[]]
    if n % 2:  # an odd design needs each row reversed too
        rows = [row for r in rows for row in (r, r[::-1])]
    for r in range(rounds):
        yield [names[j] for j in rows[r % len(rows)]]


def interleaved_rounds(measures: Mapping[K, Callable[[], float]], rounds: int) -> dict[K, list[float]]:
    """Each measurement (a callable returning ms) once per interleaved round
    (``rotations``), so clock and thermal drift, and the state each predecessor leaves,
    hit every contender alike: {name: [ms per round]}."""
    times: dict[K, list[float]] = {name: [] for name in measures}
    for order in rotations(list(measures), rounds):
        for name in order:
            times[name].append(measures[name]())
    return times


Maker = Callable[[], Callable[[], object]]
#: What names the contenders of a side-by-side measurement.
K = TypeVar("K", bound=Hashable)


def side_by_side_rounds(
    makers: Mapping[K, Maker],
    rounds: int,
    *,
    graphs: bool = True,
    rep: int | None = None,
    warmup: int | None = None,
    max_ms: int = MAX_REP_MS,
    whole_designs: bool = False,
) -> dict[K, list[float]]:
    """Milliseconds of each run in each of ``rounds`` interleaved rounds (``rotations``).

    ``makers[name]()`` makes the function that runs contender ``name`` once. With
    ``graphs`` each is timed as a CUDA graph replay of its GPU work (``graph_median``:
    host paths cost nothing, kernels compare as kernels), else as plain calls
    (``bench``, ``rep`` ms of calls, 200 by default). ``whole_designs``: ``rounds``
    rounded to whole balanced designs (at least one). A contender that fails to build
    gets no entry (logged here: the caller decides what a failure means)."""
    if whole_designs:
        design = balanced_rounds(len(makers))
        rounds = design * max(1, math.floor(rounds / design + 0.5))
    measures: dict[K, Callable[[], float]] = {}
    for name, make in makers.items():
        try:
            if graphs:
                measures[name] = graph_median(make, rep=rep, warmup=warmup, max_ms=max_ms)
            else:
                measures[name] = functools.partial(bench, make(), rep=rep or 200)
        except Exception as exc:  # e.g. a kernel out of resources: that contender is not taken
            logging.getLogger("inductor_cutedsl").info("side-by-side %s not measured: %s", name, exc)
    return interleaved_rounds(measures, rounds)


def side_by_side(makers: Mapping[K, Maker], rounds: int, **options: Any) -> dict[K, float]:
    """The median over rounds of ``side_by_side_rounds`` for each run; inf for one that
    failed to build."""
    times = side_by_side_rounds(makers, rounds, **options)
    return {name: statistics.median(times[name]) if name in times else math.inf for name in makers}
