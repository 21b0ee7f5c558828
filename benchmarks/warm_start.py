"""Warm starts from torch's portable cache artifacts: a machine fed by another.

    python -m benchmarks.warm_start --json benchmarks/results/h200-warm-start.json
    python -m benchmarks.warm_start --rows gpt2:small,llama:small:train --pairs 2

Each row (as ``benchmarks.compile`` names them) is compiled, per side (fair stock and
ours) and per pair, twice in fresh processes:

* ``cold``: every cache empty; the compile's artifacts are saved
  (``torch.compiler.save_cache_artifacts()``);
* ``warm``: every cache empty again, then the cold compile's artifacts loaded
  (``load_cache_artifacts()``), as on another machine; the load's seconds are reported
  beside the compile's (``load_s``), not in it.

The sides alternate order between pairs. Figures, medians per row:
``warm_start_ratio_vs_stock`` = ours warm / fair stock warm; ``warm_start_ratio_vs_cold``
= ours warm / ours cold; ``warm_start_cutedsl_builds`` = the CuteDSL kernels ours' warm
compiles built (summed over rows and pairs: the artifacts should leave none to build),
and ``warm_start_our_measurements`` likewise for our decisions. The cold compiles are
``benchmarks.compile``'s measurement (fresh processes, empty caches, fair stock), so
``cold_ratio_vs_stock`` = ours cold / fair stock cold is its ``compile_ratio``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time

from .compile import (
    FAIR_STOCK,
    OURS,
    Caches,
    add_run_options,
    finish,
    median_less_coordesc,
    median_of,
    named_phase_medians,
    run_child,
)
from .harness import geomean_or_none, ratio, run_info, write_json
from .models import BlockId

SIDES = (FAIR_STOCK, OURS)
STARTS = ("cold", "warm")


def plan(rows: list[BlockId], pairs: int) -> list[tuple[BlockId, str, int]]:
    """(row, side, pair) in the order they run; each entry is a cold compile and the warm
    one fed by it. Pairs outermost, the sides reversed in every other pair."""
    return [(bid, side, i) for i in range(pairs) for bid in rows for side in (SIDES if i % 2 == 0 else SIDES[::-1])]


def pending(entries: list[tuple[BlockId, str, int]], runs: dict) -> list[tuple[BlockId, str, int]]:
    """``entries`` less those an earlier result (``runs``: {row: {side: {start: [report]}}})
    holds a warm report for."""
    return [(b, s, i) for b, s, i in entries if len(runs.get(b.name, {}).get(s, {}).get("warm", [])) <= i]


def row_summary(name: str, runs: dict) -> dict:
    medians = {
        side: {start: median_of(runs.get(side, {}).get(start, []), "compile_s") for start in STARTS} for side in SIDES
    }
    warm_ours = runs.get(OURS, {}).get("warm", [])
    return {
        "row": name,
        "median_compile_s": medians,
        "cold_ratio_vs_stock": ratio(medians[OURS]["cold"], medians[FAIR_STOCK]["cold"]),
        "cold_ratio_less_coordesc": ratio(
            *(median_less_coordesc(runs.get(side, {}).get("cold", [])) for side in (OURS, FAIR_STOCK))
        ),
        "warm_start_ratio_vs_stock": ratio(medians[OURS]["warm"], medians[FAIR_STOCK]["warm"]),
        "warm_start_ratio_vs_cold": ratio(medians[OURS]["warm"], medians[OURS]["cold"]),
        "stock_warm_ratio_vs_cold": ratio(medians[FAIR_STOCK]["warm"], medians[FAIR_STOCK]["cold"]),
        "warm_cutedsl_builds": sum(r.get("cutedsl_builds", 0) for r in warm_ours),
        "warm_our_measurements": sum(r.get("our_measurements", 0) for r in warm_ours),
        "median_load_s": {side: median_of(runs.get(side, {}).get("warm", []), "load_s") for side in SIDES},
        "named_phases_median_s": {
            side: {start: named_phase_medians(runs.get(side, {}).get(start, [])) for start in STARTS} for side in SIDES
        },
        "runs": runs,
    }


def summarize(rows: list[dict], info: dict) -> dict:
    def of(key: str) -> list[float]:
        return [r[key] for r in rows if r.get(key) is not None]

    return {
        **info,
        "warm_start_cutedsl_builds": sum(r["warm_cutedsl_builds"] for r in rows),
        "warm_start_our_measurements": sum(r["warm_our_measurements"] for r in rows),
        "cold_ratio_vs_stock_geomean": geomean_or_none(of("cold_ratio_vs_stock")),
        "cold_ratio_vs_stock_max": max(of("cold_ratio_vs_stock"), default=None),
        "cold_ratio_less_coordesc_geomean": geomean_or_none(of("cold_ratio_less_coordesc")),
        "warm_start_ratio_vs_stock_geomean": geomean_or_none(of("warm_start_ratio_vs_stock")),
        "warm_start_ratio_vs_cold_geomean": geomean_or_none(of("warm_start_ratio_vs_cold")),
        "stock_warm_ratio_vs_cold_geomean": geomean_or_none(of("stock_warm_ratio_vs_cold")),
        "rows": rows,
    }


def run(args: argparse.Namespace, info: dict) -> dict:
    prior = None
    if args.resume and os.path.exists(args.resume):
        with open(args.resume) as f:
            prior = json.load(f)
    runs: dict = {r["row"]: r["runs"] for r in (prior or {}).get("rows", [])}
    todo = pending(plan(args.rows, args.pairs), runs)
    order = [b.name for b in args.rows] + [name for name in runs if name not in {b.name for b in args.rows}]

    def result() -> dict:
        rows = [row_summary(name, runs[name]) for name in order if name in runs]
        return summarize(rows, {**info, "mode": args.mode, "pairs": args.pairs})

    start, longest, left = time.perf_counter(), 0.0, []
    with tempfile.TemporaryDirectory(prefix="warm-start-", ignore_cleanup_errors=True) as root:
        caches = Caches(root)
        for bid, side, i in todo:
            if args.budget is not None and time.perf_counter() - start + longest > args.budget:
                left.append(f"{bid.name} {side} #{i + 1}")
                continue
            t0 = time.perf_counter()
            blob = os.path.join(root, f"{bid.name}-{side}-{i}.artifacts")
            reports = {}
            for kind in STARTS:
                dirs = caches.fresh()
                print(f"== {bid.name} {side} {kind} #{i + 1}", flush=True)
                reports[kind] = run_child(
                    bid,
                    args.mode,
                    side,
                    dirs,
                    args.timeout,
                    artifacts_out=blob if kind == "cold" else None,
                    artifacts_in=blob if kind == "warm" else None,
                )
                for path in dirs.values():
                    shutil.rmtree(path, ignore_errors=True)
                r = reports[kind]
                print(
                    f"   first call {r['compile_s']} s, {r['cutedsl_builds']} CuteDSL kernels built"
                    + (f", artifacts loaded in {r['load_s']} s" if "load_s" in r else ""),
                    flush=True,
                )
            os.unlink(blob)
            longest = max(longest, time.perf_counter() - t0)
            for kind, report in reports.items():
                runs.setdefault(bid.name, {}).setdefault(side, {}).setdefault(kind, []).append(report)
            write_json(result(), args.json)
    return finish(result(), left, args.json)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_options(ap, 1, "cold and warm compiles of each side per row")
    return ap


def main(argv: list[str] | None = None) -> dict | None:
    args = parser().parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("benchmarks.warm_start needs a CUDA GPU: nothing measured")
        return None
    return run(args, run_info())


if __name__ == "__main__":
    main()
