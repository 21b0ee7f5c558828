"""What the main job reports: per-GEMM autotuning results (from Inductor's feedback
hook), GPU time per kernel under torch.profiler, accuracy against a reference, and the
result file."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Callable, Iterator

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from ..compat import autotune, ir_access


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Relative norm error of ``out`` against ``ref``, in float64; inf if ``out`` is not finite."""
    out64, ref64 = out.double(), ref.double()
    if not torch.isfinite(out64).all():
        return float("inf")
    return ((out64 - ref64).norm() / ref64.norm()).item()


def run_info() -> dict:
    return {"device": torch.cuda.get_device_name(), "torch": torch.__version__}


def write_json(result: dict, path: str | None) -> None:
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            f.write(results_text(result))


def results_text(result: dict) -> str:
    """A result file's JSON: one line per top-level key, and one per element of a
    top-level list of objects (the rows), each written compactly. The summary figures
    read at a glance and a rerun diffs row by row, at about a third of indented JSON's
    size: the committed results travel with the tree to the GPU machine, whose calls
    carry at most 64 MiB with the DSL bundle."""

    def compact(value: object) -> str:
        return json.dumps(value, separators=(",", ":"))

    lines = []
    for key, value in result.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            text = "[\n" + ",\n".join(compact(v) for v in value) + "\n]"
        else:
            text = compact(value)
        lines.append(f"{json.dumps(key)}: {text}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


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
        winner = min(best, key=best.__getitem__)
        shapes = [[ir_access.size_hint(d) for d in node.get_size()] for node in input_nodes]
        rows.append(GemmTuning(name, shapes, candidates, best, winner, best[winner]))

    with autotune.feedback_saver(saver):
        yield rows


# Where a compiled block's GPU time goes (diagnostic: the job's figures come from
# ``timing.side_by_side``): which kernels differ between the stock and our compiled block.
def kernel_times(
    fn: Callable[[], object], calls: int = 10, top: int | None = 12, name_chars: int | None = 90
) -> list[dict]:
    """The ``top`` GPU kernels of one call of ``fn`` (all of them if None), longest
    first: name (its first ``name_chars`` characters; whole if None), launches per call
    and device milliseconds per call."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    rows = [
        {
            "kernel": e.key[:name_chars],
            "launches": e.count / calls,
            "ms": round(e.self_device_time_total / calls / 1e3, 4),
        }
        for e in prof.key_averages()
        if e.device_type == DeviceType.CUDA and e.self_device_time_total > 0
    ]
    return sorted(rows, key=lambda r: -r["ms"])[:top]


#: In the GPU names of our kernels (see Sm90Gemm.device_name).
CUTEDSL_KERNEL = "inductor_cutedsl"


def ran_cutedsl(rows: list[dict]) -> bool:
    """Whether ``kernel_times`` rows include one of our kernels."""
    return any(CUTEDSL_KERNEL in row["kernel"] for row in rows)
