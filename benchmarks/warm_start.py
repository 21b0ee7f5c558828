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

With ``--artifacts-dir DIR`` each cold compile's artifacts and report are kept in DIR,
stamped with the code they came from (our sources' digest, torch's version); a later run
given the same DIR takes a cold compile from there instead of running it again, where
the stamp matches, and runs only the warm one: more warm pairs for the device time
(``--pairs 3 --resume`` over the same DIR adds warm starts to the cold compiles kept).
A reused cold report says so (``reused``). ``--warm-repeats N`` feeds N warm starts from
each cold compile, each a fresh process with empty caches: a warm start takes seconds, and
one moves by tens of percent between processes, so the median of several is what a row's
warm figure needs.

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

from . import zygote
from .compile import (
    FAIR_STOCK,
    OURS,
    Caches,
    add_run_options,
    finish,
    median_less_coordesc,
    median_of,
    named_phase_medians,
    positive_int,
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
    holds: a pair's cold report is recorded with the warm ones it fed."""
    return [(b, s, i) for b, s, i in entries if len(runs.get(b.name, {}).get(s, {}).get("cold", [])) <= i]


def code_stamp() -> dict:
    """What a kept cold compile's artifacts depend on: our sources (as Inductor's cache
    keys see them) and torch."""
    import torch

    from inductor_cutedsl.config import cache_key

    return {"ours": cache_key()[1], "torch": torch.__version__}


def kept_cold(store: str, bid: BlockId, side: str, i: int, stamp: dict) -> tuple[str, dict | None]:
    """(the artifacts path of this cold compile in ``store``, its kept report or None:
    none kept, or kept from other code)."""
    base = os.path.join(store, f"{bid.name.replace(':', '_')}-{side}-{i}")
    blob = base + ".artifacts"
    try:
        with open(base + ".json") as f:
            kept = json.load(f)
    except (OSError, ValueError):
        return blob, None
    if kept.get("stamp") != stamp or not os.path.exists(blob):
        return blob, None
    return blob, {**kept["report"], "reused": True}


def keep_cold(blob: str, report: dict, stamp: dict) -> None:
    with open(blob[: -len(".artifacts")] + ".json", "w") as f:
        json.dump({"stamp": stamp, "report": report}, f)


def row_summary(name: str, runs: dict) -> dict:
    medians = {
        side: {start: median_of(runs.get(side, {}).get(start, []), "compile_s") for start in STARTS} for side in SIDES
    }
    warm_ours = runs.get(OURS, {}).get("warm", [])
    steps = {
        side: median_of([r for start in STARTS for r in runs.get(side, {}).get(start, [])], "step_ms", 4)
        for side in SIDES
    }
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
        # The compiled step's time in each process (cold and warm run the same kernels):
        # what a faster compile must not have cost.
        "median_step_ms": steps,
        "step_speedup_vs_stock": ratio(steps[FAIR_STOCK], steps[OURS]),
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
        "step_speedup_vs_stock_geomean": geomean_or_none(of("step_speedup_vs_stock")),
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
    store = args.artifacts_dir
    stamp = code_stamp() if store else {}
    if store:
        os.makedirs(store, exist_ok=True)
    with (
        tempfile.TemporaryDirectory(prefix="warm-start-", ignore_cleanup_errors=True) as root,
        zygote.serving(args.zygote),
    ):
        caches = Caches(root)
        for bid, side, i in todo:
            if args.budget is not None and time.perf_counter() - start + longest > args.budget:
                left.append(f"{bid.name} {side} #{i + 1}")
                continue
            t0 = time.perf_counter()
            reports: dict = {}
            if store:
                blob, kept = kept_cold(store, bid, side, i, stamp)
                if kept is not None:
                    reports["cold"] = kept
                    print(f"== {bid.name} {side} cold #{i + 1}: kept from an earlier run", flush=True)
            else:
                blob = os.path.join(root, f"{bid.name}-{side}-{i}.artifacts")
            kinds = ([] if "cold" in reports else ["cold"]) + ["warm"] * args.warm_repeats
            warm: list[dict] = []
            for kind in kinds:
                dirs = caches.fresh()
                print(f"== {bid.name} {side} {kind} #{i + 1}", flush=True)
                r = run_child(
                    bid,
                    args.mode,
                    side,
                    dirs,
                    args.timeout,
                    sample=args.sample if kind == "warm" else None,
                    artifacts_out=blob if kind == "cold" else None,
                    artifacts_in=blob if kind == "warm" else None,
                )
                for path in dirs.values():
                    shutil.rmtree(path, ignore_errors=True)
                if kind == "cold":
                    reports["cold"] = r
                else:
                    warm.append(r)
                print(
                    f"   first call {r['compile_s']} s, {r['cutedsl_builds']} CuteDSL kernels built"
                    + (f", artifacts loaded in {r['load_s']} s" if "load_s" in r else ""),
                    flush=True,
                )
            if store:
                if not reports["cold"].get("reused"):
                    keep_cold(blob, reports["cold"], stamp)
            else:
                os.unlink(blob)
            longest = max(longest, time.perf_counter() - t0)
            recorded = runs.setdefault(bid.name, {}).setdefault(side, {})
            recorded.setdefault("cold", []).append(reports["cold"])
            recorded.setdefault("warm", []).extend(warm)
            write_json(result(), args.json)
    return finish(result(), left, args.json)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_options(ap, 1, "cold and warm compiles of each side per row")
    ap.add_argument(
        "--warm-repeats",
        type=positive_int,
        default=1,
        metavar="N",
        help="warm starts fed by each cold compile, each a fresh process with empty caches: a warm start "
        "takes seconds, and one moves by tens of percent between processes (default: %(default)s)",
    )
    ap.add_argument(
        "--artifacts-dir",
        metavar="DIR",
        help="keep each cold compile's artifacts and report in DIR, and take them from there when the code is the same",
    )
    ap.add_argument(
        "--sample",
        metavar="PATH",
        help="sample each warm child's compiling thread (wall_sampler): reports appended to PATH, folded "
        "stacks to PATH.folded.gz",
    )
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
