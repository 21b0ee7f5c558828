"""What the benchmarks and the main job report with: side-by-side medians of plain
calls and of CUDA graphs, accuracy against a reference, geomeans and result files.
The product's own measurement is ``inductor_cutedsl.timing``."""
from __future__ import annotations

import json
import math
import os
import statistics
from typing import Callable, Iterable

import torch

from .. import timing


def graphed(fn: Callable[[], object]) -> Callable[[], None]:
    """``fn``'s GPU work as a CUDA graph replay (``timing.graphed_run``); ``fn`` must
    launch on the current stream."""
    return timing.graphed_run(lambda: fn)


def side_by_side_rounds(fns: dict, rounds: int = 5) -> dict:
    """``bench`` of each function in each of about ``rounds`` interleaved rounds (rounded
    to whole ``rotations`` designs, at least one): {name: [ms per round]}."""
    design = timing.balanced_rounds(len(fns))
    rounds = design * max(1, math.floor(rounds / design + 0.5))
    measures = {name: (lambda fn=fn: timing.bench(fn, rep=200)) for name, fn in fns.items()}
    return timing.interleaved_rounds(measures, rounds)


def side_by_side(fns: dict, rounds: int = 5) -> dict:
    """The median over rounds of ``side_by_side_rounds``."""
    return {name: statistics.median(t) for name, t in side_by_side_rounds(fns, rounds).items()}


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
