"""Where a promoting fp8 GEMM's time goes, ours beside ``torch._scaled_mm`` (cuBLASLt).

    python -m tools.fp8_profile --shape 8192x8192x8192 --json OUT.json
    ncu --profile-from-start off --section SpeedOfLight ... python -m tools.fp8_profile --ncu
    python -m tools.fp8_profile --sweep --shape 8192x8192x8192 --json OUT.json
    python -m tools.fp8_profile --sweep --shape 8192x8192x8192 --specs SPECS.jsonl

Times one config in every promotion mode it has registers for (fast accumulation
included) side by side with ``_scaled_mm`` promoting and fast, on the same tensors, and
states what promotion costs per k-tile (``promotion_costs``). With ``--ncu`` each way runs
once between ``cudaProfilerStart``/``Stop`` after its warm-up, so Nsight Compute
(``--profile-from-start off``) profiles exactly one launch of each, in ``ways`` order;
``--read-ncu CSV`` (no GPU needed) turns that profile's ``--csv --page details`` output
into rows: each way's duration, its busiest pipeline and how busy (Nsight Compute's
``HighPipeUtilization`` rule: the tensor pipe, or the shared pipe it dominates), its DRAM
and L2 throughput and issue rate (``_METRICS``), and for a promoting way the
promotion's cost per k-tile against the same tile's fast kernel.

``--sweep`` times the leaders' rasterisations instead (``sweep_ways``: each raster order
and swizzle the persistent scheduler offers, fast and promoting), a few plain calls per
way in three interleaved rounds, so that some fifty ways fit one device call; a
rasterisation decides how often the operands' tiles are read from DRAM rather than L2.
``--specs PATH`` appends the ways' kernel specs to PATH (JSON lines, no GPU needed, one
run per shape) for ``tools.rebuild_kernels`` to build before the call.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import math
import re

import torch

from benchmarks.fp8 import operands, scaled_specs
from benchmarks.harness import rel_err, side_by_side, write_json
from inductor_cutedsl.kernels import GemmConfig
from inductor_cutedsl.kernels.config import PROMOTE_MODES, PROMOTE_NONE, SMS, fitted_swizzle, promotion_mode
from inductor_cutedsl.runtime import get_gemm
from inductor_cutedsl.timing import bench
from inductor_cutedsl.timing import side_by_side as timed_side_by_side

#: Our configs profiled: the promoting leaders at the large shapes (128x128 and 128x192,
#: paired along M), the same in a 2x2 cluster (A and B both multicast: half the L2 reads
#: of a pair, where an unclustered tile ran 20% slower than a pair), and the fast leader
#: (128x256, its B multicast, stores staged whole).
CONFIGS = (
    GemmConfig(128, 128, 2, 1, swizzle=8),
    GemmConfig(128, 192, 2, 1, swizzle=8),
    GemmConfig(128, 128, 2, 2, swizzle=8),
    GemmConfig(128, 192, 2, 2, swizzle=8),
    GemmConfig(128, 256, 2, 1, swizzle=8, epi_n=64, epi_buffers=4),
)


def _table(candidates, mode: str) -> dict:
    """name -> (KernelSpec or None for ``_scaled_mm``, promotion mode or use_fast_accum):
    ``_scaled_mm`` promoting and fast, then each (config, promotion modes) of
    ``candidates`` as ``scaled_specs`` builds it, named CONFIG:pMODE."""
    out: dict = {"scaled_mm": (None, False), "scaled_mm_fast": (None, True)}
    for cfg, promote_modes in candidates:
        for spec in scaled_specs(cfg, mode, promote_modes):
            out[f"{cfg.name()}:p{spec.promote}"] = (spec, spec.promote)
    return out


def ways(m: int, n: int, k: int, mode: str, configs=CONFIGS) -> dict:
    """``_table`` of ``configs`` rastered along M where M >= N, their swizzles fitted to
    the shape (``fitted_swizzle``), in every promotion mode."""
    fitted = []
    for cfg in configs:
        cfg = dataclasses.replace(cfg, raster_along_m=m >= n)
        fitted.append((dataclasses.replace(cfg, swizzle=fitted_swizzle(cfg, m, n)), PROMOTE_MODES))
    return _table(fitted, mode)


#: The leaders whose rasterisations ``--sweep`` times (each raster order and swizzle,
#: ``SWIZZLES``), and the swizzles: the scheduler's groups of clusters along the
#: dimension it does not raster along; the shortlist offers 1 and 8 only.
SWEEP = (
    GemmConfig(128, 128, 2, 1),
    GemmConfig(128, 192, 2, 1),
    GemmConfig(128, 256, 2, 1, epi_n=64, epi_buffers=4),
)
SWIZZLES = (1, 2, 4, 8, 16)


def sweep_ways(m: int, n: int, k: int, mode: str, configs=SWEEP) -> dict:
    """``ways`` over each leader's rasterisations: both raster orders, each swizzle the
    scheduler would run unpadded (``fitted_swizzle`` keeps it), fast and in the config's
    promotion mode (``promotion_mode``) where it has the registers."""
    rasterised = (
        dataclasses.replace(base, raster_along_m=raster_m, swizzle=swizzle)
        for base in configs
        for raster_m in (True, False)
        for swizzle in SWIZZLES
    )
    unpadded = (cfg for cfg in rasterised if fitted_swizzle(cfg, m, n) == cfg.swizzle)
    return _table(((cfg, (PROMOTE_NONE, promotion_mode(cfg))) for cfg in unpadded), mode)


def k_tiles_per_sm(m: int, n: int, k: int, cfg: GemmConfig) -> float:
    """K-tiles one SM runs: the tiles' k-tiles shared evenly over the SMs."""
    tiles = math.ceil(m / cfg.tile_m) * math.ceil(n / cfg.tile_n)
    return tiles * math.ceil(k / GemmConfig.tile_k(1)) / SMS


#: Nsight Compute metrics a profile row keeps, as its keys: how much of the DRAM's and the
#: L2's peak throughput the launch used (the operands' tiles re-read from DRAM show as
#: DRAM throughput above another kernel's at the same shape), and its instructions issued
#: per active cycle (a consumer spinning on a pipeline barrier issues more of them).
_METRICS = {"DRAM Throughput": "dram_pct", "L2 Cache Throughput": "l2_pct", "Issued Ipc Active": "ipc"}
_PIPE = re.compile(r"^(\w+) is the highest-utilized pipeline \(([\d.]+)%\)")
#: A cuBLASLt kernel's name gives its tile first: nvjet_sm90_qqtst_128x128_128x6_...
_TILE = re.compile(r"_(\d+)x(\d+)_")


def promotion_costs(rows: list[dict], m: int, n: int, k: int, table: dict) -> None:
    """Gives each promoting row (way, ``us``) its promotion's cost per k-tile: its time
    over the same tile's fast kernel (ours: the config's ``:p0``; ``scaled_mm``:
    ``scaled_mm_fast``, its tile read from its kernel's name) per k-tile one SM runs
    (``k_tile_ns``), beside that fast kernel's time per k-tile (``k_tile_mma_ns``).
    ``table``: the shape's ``ways``."""
    by_way = {r["way"]: r for r in rows}
    for r in rows:
        spec, how = table[r["way"]]
        fast = by_way.get("scaled_mm_fast" if spec is None else f"{spec.config.name()}:p0")
        if spec is None:
            tile = _TILE.search(r.get("kernel", ""))
            cfg = GemmConfig(int(tile.group(1)), int(tile.group(2))) if tile else None
        else:
            cfg = spec.config
        promotes = how if spec is not None else not how
        if promotes and fast and cfg and "us" in r and "us" in fast:
            per_sm = k_tiles_per_sm(m, n, k, cfg)
            r["k_tile_ns"] = round((r["us"] - fast["us"]) * 1e3 / per_sm, 1)
            r["k_tile_mma_ns"] = round(fast["us"] * 1e3 / per_sm, 1)


def read_ncu(path: str, m: int, n: int, k: int, mode: str, table: dict | None = None) -> list[dict]:
    """The rows of an ``--ncu`` profile's CSV (one launch per way, in the order of
    ``table``, the shape's ``ways`` by default): way, kernel, duration (us), busiest
    pipeline and its share of the elapsed cycles, the ``_METRICS``, and for a way that
    promotes its cost per k-tile (``promotion_costs``)."""
    with open(path, newline="") as f:
        lines = [r for r in csv.reader(f) if r]
    start = next(i for i, r in enumerate(lines) if r[0] == "ID")
    header = lines[start]
    table = table or ways(m, n, k, mode)
    names = list(table)
    rows: dict[int, dict] = {}
    for values in lines[start + 1 :]:
        rec = dict(zip(header, values, strict=False))
        i = int(rec["ID"])
        row = rows.setdefault(i, {"way": names[i], "kernel": rec["Kernel Name"]})
        # The profile's launches must be the ways in order: our kernels name their config.
        ours = names[i].split(":")[0]
        if names[i].startswith("scaled_mm") == (ours in rec["Kernel Name"]):
            raise ValueError(f"launch {i} ran {rec['Kernel Name']!r}, not way {names[i]!r}: not an --ncu profile")
        if rec.get("Metric Name") == "Duration":
            unit = {"ns": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}[rec["Metric Unit"]]
            row["us"] = round(float(rec["Metric Value"].replace(",", "")) * unit, 3)
        elif rec.get("Metric Name") in _METRICS:
            row[_METRICS[rec["Metric Name"]]] = float(rec["Metric Value"].replace(",", ""))
        hit = _PIPE.match(rec.get("Rule Description", "")) if rec.get("Rule Name") == "HighPipeUtilization" else None
        if hit:
            row["pipe"], row["pipe_pct"] = hit.group(1), float(hit.group(2))
    out = [rows[i] for i in sorted(rows)]
    promotion_costs(out, m, n, k, table)
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="8192x8192x8192", help="MxNxK (default: %(default)s)")
    ap.add_argument("--mode", choices=("tensor", "row"), default="row", help="scale mode (default: %(default)s)")
    ap.add_argument("--ncu", action="store_true", help="run each way once inside cudaProfilerStart/Stop")
    ap.add_argument("--read-ncu", metavar="CSV", default=None, help="read an --ncu profile's CSV into rows")
    ap.add_argument("--json", metavar="PATH", default=None, help="where the timings are written")
    ap.add_argument("--sweep", action="store_true", help="time the leaders' rasterisations (sweep_ways)")
    ap.add_argument("--specs", metavar="PATH", default=None, help="append the ways' kernel specs (JSON lines) and stop")
    args = ap.parse_args(argv)
    m, n, k = (int(x) for x in args.shape.split("x"))
    table = (sweep_ways if args.sweep else ways)(m, n, k, args.mode)
    if args.specs:
        with open(args.specs, "a") as f:
            for spec, _ in table.values():
                if spec is not None:
                    f.write(spec.to_json() + "\n")
        return {"specs": sum(spec is not None for spec, _ in table.values())}
    if args.read_ncu:
        rows = read_ncu(args.read_ncu, m, n, k, args.mode, table)
        for row in rows:
            print(row)
        result = {"shape": [m, n, k], "mode": args.mode, "rows": rows}
        write_json(result, args.json)
        return result
    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to measure")
        return {}
    torch.manual_seed(0)
    a, b, sa, sb = operands(m, n, k, args.mode)
    ref = torch._scaled_mm(a, b, sa, sb, out_dtype=torch.float32).double()
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    fns = {}
    for name, (spec, how) in table.items():
        if spec is None:
            fns[name] = lambda fast=how: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast)
            continue
        kern = get_gemm(spec)
        out.fill_(float("nan"))
        kern(a, b, out, sa, sb)
        torch.cuda.synchronize()
        err = rel_err(out, ref)
        if not err < 1e-2:
            raise AssertionError(f"{name}: rel err {err:.3e} against _scaled_mm's fp32 result")
        fns[name] = lambda kern=kern: kern(a, b, out, sa, sb)
    if args.ncu:
        for name, fn in fns.items():
            bench(fn, rep=20)
            torch.cuda.synchronize()
            torch.cuda.profiler.start()
            fn()
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
            print(f"profiled {name}", flush=True)
        return {}
    bench(fns["scaled_mm"], rep=1000)  # the GPU at its steady clock
    # A whole balanced design over the sweep's ways is as many rounds as ways: too long for
    # one call. Three rounds of 50 ms of calls per way.
    if args.sweep:
        times = timed_side_by_side({w: (lambda fn=fn: fn) for w, fn in fns.items()}, 3, graphs=False, rep=50)
    else:
        times = side_by_side(fns, rounds=3)
    flops = 2 * m * n * k
    rows = [{"way": name, "us": round(ms * 1e3, 2), "tflops": round(flops / ms / 1e9, 1)} for name, ms in times.items()]
    promotion_costs(rows, m, n, k, table)  # ours only: no kernel names here
    for row in rows:
        print(row, flush=True)
    result = {"shape": [m, n, k], "mode": args.mode, "device": torch.cuda.get_device_name(), "rows": rows}
    write_json(result, args.json)
    return result


if __name__ == "__main__":
    main()
