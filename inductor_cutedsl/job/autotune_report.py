"""Per-GEMM autotuning results, gathered from Inductor's feedback hook."""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Iterator

from ..compat import autotune, ir_access


@dataclasses.dataclass
class GemmTuning:
    op: str
    shapes: list[list[int]]
    candidates: dict[str, int]  # backend -> number of candidates
    best_ms: dict[str, float]  # backend -> fastest candidate
    winner: str  # backend of the fastest candidate
    winner_ms: float


def backend_of(choice) -> str:
    name = type(choice).__name__
    if name == "GemmCaller":
        return "cutedsl"
    if "Triton" in name:
        return "triton"
    if "Extern" in name:
        return "aten"
    return name


@contextlib.contextmanager
def record_gemm_tuning() -> Iterator[list[GemmTuning]]:
    """Collect one GemmTuning per GEMM that Inductor autotunes inside the block."""
    rows: list[GemmTuning] = []

    def saver(timings, name, input_nodes, choices, _profile, _precompile_times) -> None:
        if not timings:
            return
        candidates: dict[str, int] = {}
        best: dict[str, float] = {}
        for choice, ms in timings.items():
            backend = backend_of(choice)
            candidates[backend] = candidates.get(backend, 0) + 1
            best[backend] = min(best.get(backend, float("inf")), float(ms))
        winner = min(best, key=best.get)
        shapes = [[ir_access.size_hint(d) for d in node.get_size()] for node in input_nodes]
        rows.append(GemmTuning(name, shapes, candidates, best, winner, best[winner]))

    with autotune.feedback_saver(saver):
        yield rows
