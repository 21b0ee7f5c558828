"""Where our kernel loses time to cuBLAS: a K sweep, config variants, fused epilogues.

    python benchmarks/kernel_probe.py --json probe.json

Every figure is a ratio cuBLAS / ours (above 1: ours faster) from interleaved rounds,
under both timers in use: the median of triton's do_bench (our benchmarks) and
Inductor's benchmarker (fastest repetition, L2 flushed; what its autotuner compares).

* K sweep at M=8192, N=4096 with one config: a gap that shrinks as K grows is a
  fixed cost per tile (prologue, epilogue); a constant gap is the mainloop's rate.
* Variants (raster, swizzle, cluster, tile, epilogue staging, stream-K) at 8192 x 4096
  x 4096, each against cuBLAS.
* Twins at every benchmark shape: the shortlist's first config against itself with
  stream-K, and with the whole tile's stores staged (each pair timed side by side).
* Fused epilogues with full M x N inputs: fused / unfused time of our kernel.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from inductor_cutedsl import _compat  # noqa: E402
from inductor_cutedsl.bench.gemm import SHAPES  # noqa: E402
from inductor_cutedsl.kernels.config import GemmConfig, shortlist  # noqa: E402
from inductor_cutedsl.kernels.epilogue import Epilogue, EpilogueOperand  # noqa: E402
from inductor_cutedsl.runtime import compiler, get_gemm, spec_for  # noqa: E402
from inductor_cutedsl.runtime.launch import default_cache, max_active_clusters  # noqa: E402
from inductor_cutedsl.bench.report import rel_err, run_info, write_json  # noqa: E402
from inductor_cutedsl.timing import bench, interleaved  # noqa: E402

BASE = GemmConfig(128, 256, 2, 1, False, False, 8, 64)  # the usual winner at 8192 x 4096
K_SWEEP = [(8192, 4096, k) for k in (512, 2048, 8192, 16384)]
VARIANT_SHAPES = [(8192, 4096, 4096)]
VARIANTS = [
    BASE,
    *(dataclasses.replace(BASE, swizzle=s) for s in (1, 2, 4, 16)),
    *(dataclasses.replace(BASE, raster_along_m=True, swizzle=s) for s in (4, 8)),
    dataclasses.replace(BASE, epi_n=32),
    # The whole tile staged at once (no sub-tile waits for a store), one mainloop stage less.
    dataclasses.replace(BASE, epi_buffers=4),
    # The last partial wave split over every cluster slot (7.76 waves at 8192 x 4096).
    dataclasses.replace(BASE, stream_k=True),
    dataclasses.replace(BASE, epi_buffers=4, stream_k=True),
    dataclasses.replace(BASE, cluster_m=1),
    dataclasses.replace(BASE, cluster_m=1, cluster_n=2),
    dataclasses.replace(BASE, cluster_n=2),
    GemmConfig(256, 128, 1, 2, False, False, 8, 64),
    GemmConfig(256, 128, 2, 1, False, False, 8, 64),
    GemmConfig(128, 128, 2, 1, True, False, 8, 32),
]



def twins(m: int, n: int, k: int) -> dict[str, tuple[GemmConfig, GemmConfig]]:
    """(base, variant) pairs at a shape: the shortlist's first config (with its derived
    store buffers) and its twins."""
    base = dataclasses.replace(shortlist(m, n, k)[0], epi_buffers=0)
    return {
        "stream_k": (base, dataclasses.replace(base, stream_k=True)),
        "whole_tile_staging": (base, dataclasses.replace(base, epi_buffers=base.whole_tile_buffers())),
    }


FUSED = {
    f"{name}{'_pairs' if pairs else ''}": Epilogue(
        name, f"def epilogue(acc, m, n, l, ops):\n    return {expr}\n",
        (EpilogueOperand("r", "full", "bfloat16", pairs),),
    )
    for name, expr in (("relu_residual", "relu(acc) + ops[0]"), ("silu_gate", "silu(acc) * ops[0]"))
    for pairs in (False, True)
}  # fmt: skip
FUSED_SHAPES = [(1024, 4096, 4096), (8192, 4096, 4096)]


def operands(m: int, n: int, k: int):
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    b = torch.randn(n, k, device="cuda").to(torch.bfloat16).t()
    return a, b, torch.empty(m, n, device="cuda", dtype=torch.bfloat16)


def ratios(ours, theirs, rounds: int = 3) -> dict:
    """theirs / ours under each timer, from interleaved rounds."""
    out = {}
    for timer, measure in (("median", lambda fn: bench(fn)), ("inductor_min", _compat.benchmark_gpu)):
        t = interleaved({"ours": lambda: measure(ours), "theirs": lambda: measure(theirs)}, rounds)
        out[timer] = {"ours_ms": round(t["ours"], 4), "theirs_ms": round(t["theirs"], 4),
                      "ratio": round(t["theirs"] / t["ours"], 4)}  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.manual_seed(0)
    cache = default_cache()
    meta_a = torch.empty(8, 8, device="meta", dtype=torch.bfloat16)
    meta_b = torch.empty(8, 8, device="meta", dtype=torch.bfloat16).t()
    configs = [*VARIANTS, *(c for shape in SHAPES for pair in twins(*shape).values() for c in pair)]
    specs = {c: spec_for(meta_a, meta_b, torch.bfloat16, c) for c in dict.fromkeys(configs) if c.invalid_reason() is None}
    fused = {name: spec_for(meta_a, meta_b, torch.bfloat16, BASE, epi) for name, epi in FUSED.items()}
    compiler.build_many([*specs.values(), *fused.values()], cache, os.cpu_count() or 1)

    bench(lambda: torch.mm(*operands(4096, 4096, 4096)[:2]), rep=1000)  # steady clock (and a context)
    result = {**run_info(), "max_active_clusters": {s: max_active_clusters(s, 0) for s in (1, 2, 4)}}
    print("max active clusters:", result["max_active_clusters"], flush=True)

    result["k_sweep"] = []
    for m, n, k in K_SWEEP:
        a, b, out = operands(m, n, k)
        kern = get_gemm(specs[BASE], cache)
        r = ratios(lambda: kern(a, b, out), lambda: torch.mm(a, b, out=out))
        result["k_sweep"].append({"shape": [m, n, k], **r})
        print(f"K sweep {m}x{n}x{k} {BASE.name()}: {r}", flush=True)

    result["variants"] = []
    for m, n, k in VARIANT_SHAPES:
        a, b, out = operands(m, n, k)
        ref = torch.mm(a, b)
        for cfg, spec in specs.items():
            kern = get_gemm(spec, cache)
            out.fill_(float("nan"))
            kern(a, b, out)
            err = rel_err(out, ref)
            if not err < 1e-2:
                print(f"{cfg.name()} WRONG at {m}x{n}x{k}: {err}", flush=True)
                continue
            r = ratios(lambda: kern(a, b, out), lambda: torch.mm(a, b, out=out))
            result["variants"].append({"shape": [m, n, k], "config": cfg.name(), **r})
            print(f"{m}x{n}x{k} {cfg.name():>28}: median {r['median']['ratio']:.3f} "
                  f"min {r['inductor_min']['ratio']:.3f}", flush=True)  # fmt: skip

    result["twins"] = []
    for m, n, k in SHAPES:
        a, b, out = operands(m, n, k)
        for name, (base, variant) in twins(m, n, k).items():
            plain, other = get_gemm(specs[base], cache), get_gemm(specs[variant], cache)
            r = ratios(lambda: other(a, b, out), lambda: plain(a, b, out))
            result["twins"].append({"shape": [m, n, k], "twin": name, "base": base.name(), **r})
            print(f"twin {name} {m}x{n}x{k} {base.name()}: base/variant median {r['median']['ratio']:.3f} "
                  f"min {r['inductor_min']['ratio']:.3f}", flush=True)  # fmt: skip

    result["fused"] = []
    for m, n, k in FUSED_SHAPES:
        a, b, out = operands(m, n, k)
        plain = get_gemm(specs[BASE], cache)
        for name, spec in fused.items():
            kern = get_gemm(spec, cache)
            res = torch.randn(m, n, device="cuda").to(torch.bfloat16)
            fused_out = torch.empty_like(out)
            r = ratios(lambda: kern(a, b, fused_out, res), lambda: plain(a, b, out))
            result["fused"].append({"shape": [m, n, k], "epilogue": name, **r})
            print(f"fused {name} {m}x{n}x{k}: unfused/fused median {r['median']['ratio']:.3f} "
                  f"min {r['inductor_min']['ratio']:.3f}", flush=True)  # fmt: skip
    write_json(result, args.json)


if __name__ == "__main__":
    main()
