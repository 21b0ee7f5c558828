"""Timing, accuracy checks and result files shared by the benchmarks and the main job."""
from __future__ import annotations

import json
import math
import os
import statistics
from typing import Callable, Iterable, Iterator

import torch


def bench(fn: Callable[[], object], rep: int = 100) -> float:
    """Median milliseconds of ``fn`` (triton.testing.do_bench)."""
    import triton.testing

    return triton.testing.do_bench(fn, warmup=25, rep=rep, return_mode="median")


def graphed(fn: Callable[[], object]) -> Callable[[], None]:
    """``fn``'s GPU work captured once as a CUDA graph; returns its replay.

    A replay costs the same few microseconds of host time whatever ``fn`` does in
    Python, so short kernels are timed as kernels, not as their launch paths (what
    a model compiled with CUDA graphs runs). ``fn`` must launch on the current stream.
    """
    return graphed_run(lambda: fn)


def graphed_run(make: Callable[[], Callable[[], object]]) -> Callable[[], None]:
    """``graphed(make())``, with ``make`` called on the capture stream: for run functions
    that read the current stream once, when made (Inductor's benchmark run functions)."""
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


def graph_median(make_run: Callable[[], Callable[[], object]], rep: int = 40) -> Callable[[], float]:
    """A measurement (ms, ``bench`` median over ``rep`` ms) of the CUDA graph of
    ``make_run()``'s GPU work (see ``graphed_run``): on this scale, two contenders'
    host paths cost nothing and their kernels compare as kernels."""
    replay = graphed_run(make_run)
    return lambda: bench(replay, rep=rep)


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


def interleaved(measures: dict, rounds: int) -> dict:
    """Median of each measurement (a callable returning ms) over interleaved rounds
    (``rotations``), so clock and thermal drift, and the state each predecessor leaves,
    hit every contender alike."""
    times: dict = {name: [] for name in measures}
    for order in rotations(list(measures), rounds):
        for name in order:
            times[name].append(measures[name]())
    return {name: statistics.median(t) for name, t in times.items()}


def side_by_side(fns: dict, rounds: int = 5) -> dict:
    """``bench`` medians of each function, over about ``rounds`` interleaved rounds
    (rounded to whole ``rotations`` designs, at least one)."""
    design = balanced_rounds(len(fns))
    rounds = design * max(1, math.floor(rounds / design + 0.5))
    return interleaved({name: (lambda fn=fn: bench(fn, rep=200)) for name, fn in fns.items()}, rounds)


def graphs_side_by_side(makers: dict, rounds: int) -> dict:
    """Milliseconds of each run, measured as CUDA graph replays (``graph_median`` of each
    maker) over ``rounds`` interleaved rounds; inf for one that fails to build or run
    (the caller decides what a failure means; it is logged here)."""
    import logging

    measures = {}
    for name, make in makers.items():
        try:
            measures[name] = graph_median(make)
        except Exception as exc:  # e.g. a kernel out of resources: that way is not taken
            logging.getLogger("inductor_cutedsl").info("side-by-side %s not measured: %s", name, exc)
    times = interleaved(measures, rounds)
    return {name: times.get(name, math.inf) for name in makers}


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Relative norm error of ``out`` against ``ref``, in float64; inf if ``out`` is not finite."""
    out64, ref64 = out.double(), ref.double()
    if not torch.isfinite(out64).all():
        return float("inf")
    return ((out64 - ref64).norm() / ref64.norm()).item()


def geomean(values: Iterable[float]) -> float:
    values = list(values)
    return math.exp(sum(map(math.log, values)) / len(values))


def run_info() -> dict:
    return {"device": torch.cuda.get_device_name(), "torch": torch.__version__}


def report_row(result: dict, row: dict, path: str | None) -> None:
    """Add ``row`` to ``result["rows"]``, print it and rewrite ``path``: a probe cut
    short by its time limit keeps every row it measured."""
    result["rows"].append(row)
    print(row, flush=True)
    write_json(result, path)


def write_json(result: dict, path: str | None) -> None:
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            json.dump(result, f, indent=2)
