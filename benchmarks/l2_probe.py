"""Do small-M GEMMs rank the same timed with L2 hot (fair timing's graph replays) and cold?

    python benchmarks/l2_probe.py --json l2.json

Fair timing (``lowering/fair_timing.py``) replays each contender as a CUDA graph with
no L2 flush: at M <= 256 a weight that fits the H200's 60 MB L2 is then read from L2
on every replay, while inside a transformer block it comes from HBM. If the kernels'
order changes between the two, the selection picks by the wrong one.

Per shape (the Linear layers of the model suite's small blocks), for cuBLAS and the
shortlist's first configs of ours (with ``--fill``, also configs that keep more SMs
busy): the graph replay alone ("hot"), and a graph of an
L2 flush followed by the GEMM, less a graph of the flush alone ("cold"); do_bench
medians over interleaved rounds. Each of ours is checked against cuBLAS first.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from inductor_cutedsl.bench.gemm import build_all, checked_runs, linear_operands, linear_spec  # noqa: E402
from inductor_cutedsl.bench.report import graphed, report_row, run_info  # noqa: E402
from inductor_cutedsl.kernels.config import GemmConfig, shortlist  # noqa: E402
from inductor_cutedsl.timing import bench, interleaved  # noqa: E402

#: (M, N, K) of the small blocks' Linear layers: Phi-3 qkv / o / down, LLaMA qkv / down,
#: Qwen2 qkv / down, ViT qkv / fc1 / fc2 (197 tokens).
SHAPES = [
    (256, 9216, 3072), (256, 3072, 3072), (256, 3072, 8192),
    (256, 3072, 2048), (256, 2048, 8192),
    (256, 2048, 1536), (256, 1536, 8960),
    (197, 2304, 768), (197, 3072, 768), (197, 768, 3072),
]  # fmt: skip
CONFIGS = 3
#: Configs that keep more SMs busy at these shapes (a 128x256 tile leaves 60 of 132 idle
#: at 256x9216): 64-row pingpong tiles, 192-wide tiles, stream-K over the partial wave.
FILL = [
    GemmConfig(64, 128, 1, 2, True, False),
    GemmConfig(64, 256, 2, 1, True, False),
    GemmConfig(128, 192, 2, 1, False, False),
    GemmConfig(128, 128, 1, 2, True, False, stream_k=True),
    GemmConfig(128, 128, 1, 2, False, False, stream_k=True),
]
ROUNDS = 4
FLUSH_BYTES = 256 << 20  # over four times the L2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default=None, help="result file, rewritten after every shape")
    ap.add_argument("--configs", type=int, default=CONFIGS, help=f"our shortlist's first configs (default {CONFIGS})")
    ap.add_argument("--fill", action="store_true", help="also time the FILL configs (more SMs busy at small M)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to probe")
        return
    configs = {s: list(dict.fromkeys([*shortlist(*s)[: args.configs], *(FILL if args.fill else [])])) for s in SHAPES}
    specs = {s: [linear_spec(c) for c in cfgs if c.invalid_reason() is None] for s, cfgs in configs.items()}
    build_all(spec for v in specs.values() for spec in v)
    scratch = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    flush = graphed(lambda: scratch.zero_())
    result = {**run_info(), "flush_bytes": FLUSH_BYTES, "rows": []}
    for m, n, k in SHAPES:
        runs, errors = checked_runs(*linear_operands(m, n, k), specs[(m, n, k)])
        timers = {"flush": flush}
        for name, fn in runs.items():
            timers[f"{name}/hot"] = graphed(fn)
            timers[f"{name}/flushed"] = graphed(lambda fn=fn: (scratch.zero_(), fn()))
        times = interleaved({name: (lambda g=g: bench(g, rep=50)) for name, g in timers.items()}, ROUNDS)
        hot = {name: times[f"{name}/hot"] for name in runs}
        cold = {name: times[f"{name}/flushed"] - times["flush"] for name in runs}
        row = {
            "shape": [m, n, k], "rel_err": errors, "flush_ms": round(times["flush"], 4),
            "hot_ms": {name: round(t, 4) for name, t in hot.items()},
            "cold_ms": {name: round(t, 4) for name, t in cold.items()},
            "best_hot": min(hot, key=hot.get), "best_cold": min(cold, key=cold.get),
        }  # fmt: skip
        row["same_pick"] = row["best_hot"] == row["best_cold"]
        report_row(result, row, args.json)


if __name__ == "__main__":
    main()
