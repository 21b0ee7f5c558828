"""What a process pays the first time it loads a CuteDSL kernel, and whether that cost
can overlap Python work in another thread: a probe for warm starts (a warm start of ours
builds nothing but pays this first load inside the compile).

    python -m tools.dsl_load_probe --json $OUT/dsl-load.json

One kernel is built into a fresh cache directory by this process; then fresh child
processes, each with CUDA already initialised (as a compile's process has it), time:

* ``alone``: ``import cutlass.cute``, the runtime's libraries (``find_runtime_libraries``),
  ``load_module`` of the object, the entry's lookup, the first launch, and then a second
  kernel object's load for comparison; the first load is also run under cProfile and its
  functions with the most own time are listed;
* ``overlap``: the same first load in a background thread while the main thread runs
  pure-Python work (``BUSY_S`` seconds alone): how much the load finishes behind, and how
  much it slows the main thread. A load that releases the GIL hides behind tracing.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time

#: Seconds of pure-Python work in the overlap child's main thread, measured alone first.
BUSY_S = 3.0


def _busy(seconds: float) -> int:
    """Pure-Python work for about ``seconds`` (calibrated by the caller): iterations done."""
    end, n = time.perf_counter() + seconds, 0
    while time.perf_counter() < end:
        sum(i * i for i in range(200))
        n += 1
    return n


def _busy_n(n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        sum(i * i for i in range(200))
    return time.perf_counter() - t0


def _first_load(specs: list, paths: list[str]) -> dict[str, float]:
    """Time each stage of the first kernel load in this process; the seconds per stage."""
    import torch

    out: dict[str, float] = {}
    t = time.perf_counter()
    import cutlass.cute as cute
    from cutlass import runtime as dsl_runtime

    out["import_cute_s"] = time.perf_counter() - t
    t = time.perf_counter()
    try:
        import ctypes

        for lib in dsl_runtime.find_runtime_libraries(enable_tvm_ffi=False):
            if os.path.exists(lib):
                ctypes.CDLL(lib)
    except Exception as exc:  # the probe reports, it does not fail on a DSL detail
        out["libraries_error"] = repr(exc)  # type: ignore[assignment]
    out["runtime_libraries_s"] = time.perf_counter() - t
    t = time.perf_counter()
    module = cute.runtime.load_module(paths[0])
    out["load_module_s"] = time.perf_counter() - t
    t = time.perf_counter()
    getattr(module, specs[0].symbol())
    out["entry_lookup_s"] = time.perf_counter() - t
    from inductor_cutedsl.runtime.launch import get_gemm

    t = time.perf_counter()
    gemm = get_gemm(specs[0], path=paths[0])
    out["get_gemm_s"] = time.perf_counter() - t
    a = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16).t().contiguous().t()
    c = torch.empty(256, 256, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    t = time.perf_counter()
    gemm(a, b, c)
    torch.cuda.synchronize()
    out["first_launch_s"] = time.perf_counter() - t
    if len(specs) > 1:
        t = time.perf_counter()
        get_gemm(specs[1], path=paths[1])
        out["second_kernel_load_s"] = time.perf_counter() - t
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in out.items()}


def child(mode: str, blob: str) -> dict:
    import torch

    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    with open(blob, "rb") as f:
        specs, paths = pickle.load(f)
    if mode == "alone":
        return {"stages": _first_load(specs, paths)}
    if mode == "profile":
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        _first_load(specs, paths)
        prof.disable()
        stats = pstats.Stats(prof)
        rows = sorted(
            ((f"{p}:{ln}({fn})", tt) for (p, ln, fn), (_, _, tt, _, _) in stats.stats.items()),  # type: ignore[attr-defined]
            key=lambda r: -r[1],
        )[:25]
        return {"own_s": [(name, round(s, 4)) for name, s in rows]}
    # overlap: calibrate the busy loop alone, then run it beside a thread loading
    import threading

    n = _busy(BUSY_S)
    alone_s = _busy_n(n)
    done: dict = {}

    def load() -> None:
        t = time.perf_counter()
        done["stages"] = _first_load(specs, paths)
        done["thread_s"] = time.perf_counter() - t

    t0 = time.perf_counter()
    th = threading.Thread(target=load)
    th.start()
    beside_s = _busy_n(n)
    main_done = time.perf_counter() - t0
    th.join()
    return {
        "busy_alone_s": round(alone_s, 3),
        "busy_beside_load_s": round(beside_s, 3),
        "load_thread_s": round(done["thread_s"], 3),
        "both_done_s": round(max(main_done, time.perf_counter() - t0), 3),
        "stages": done["stages"],
    }


def build_kernels(root: str) -> tuple[list, list[str]]:
    """Build two small bf16 kernels (two configs) into the cache at ``root``."""
    import torch

    from inductor_cutedsl.kernels.config import shortlist
    from inductor_cutedsl.runtime.cache import KernelCache
    from inductor_cutedsl.runtime.compiler import build
    from inductor_cutedsl.runtime.launch import spec_for

    a = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16).t().contiguous().t()
    cache = KernelCache(root)
    specs, paths = [], []
    for config in shortlist(256, 256, 256, 1)[:2]:
        spec = spec_for(a, b, torch.bfloat16, config)
        path, _ = build(spec, cache)
        specs.append(spec)
        paths.append(str(path))
    return specs, paths


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--child", nargs=2, metavar=("MODE", "BLOB"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child)))
        return {}
    report: dict = {}
    with tempfile.TemporaryDirectory(prefix="dsl-load-") as root:
        t = time.perf_counter()
        specs, paths = build_kernels(root)
        report["build_s"] = round(time.perf_counter() - t, 2)
        blob = os.path.join(root, "specs.pkl")
        with open(blob, "wb") as f:
            pickle.dump((specs, paths), f)
        for mode in ("alone", "overlap", "profile", "alone"):
            t = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, "-m", "tools.dsl_load_probe", "--child", mode, blob],
                capture_output=True,
                text=True,
                timeout=300,
            )
            wall = round(time.perf_counter() - t, 2)
            if proc.returncode:
                report.setdefault("errors", []).append({mode: proc.stderr[-3000:]})
                continue
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            result["process_s"] = wall
            report.setdefault(mode, []).append(result)
            print(mode, json.dumps(result, indent=1), flush=True)
    from inductor_cutedsl.cli.report import write_json

    write_json(report, args.json)
    return report


if __name__ == "__main__":
    main()
