"""Compile the default block with stock max-autotune and with inductor_cutedsl, side by side.

Compile times come from fresh processes (``compile_once``): stock cold, ours cold
(Inductor's caches off, our kernel cache empty), then ours again with our cache
warm, counting CuteDSL compiles. Correctness, the per-GEMM autotuning table and
the block's speed come from both compiled in this process, timed on the same tensors.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import itertools
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any, NoReturn

import torch

from .. import config, disable, enable
from ..compat import settings
from ..install import launch_environment
from ..scheduler import scheduling
from ..timing import Maker, side_by_side
from .block import BlockSize, make_block
from .report import GemmTuning, kernel_times, ran_cutedsl, record_gemm_tuning, rel_err, run_info, write_json

MODE = "max-autotune-no-cudagraphs"
TOLERANCE = 2e-2  # bf16 block vs eager, relative Frobenius norm


def compile_options(mode: str = MODE) -> dict:
    """``mode``'s options with the GEMM backends as now configured spelled out.

    Two compiles of one block in one process must stay two: dynamo shares a cache
    entry between equal torch.compile backends, and torch.compiler.reset() between
    them would make the first recompile, under the second's settings, when it is
    next called. With the backends in the options, stock and ours differ."""
    return {**torch._inductor.list_mode_options(mode), "max_autotune_gemm_backends": settings.autotune_backends()}


def compile_cold(block, x) -> tuple[Any, torch.Tensor, float, list[GemmTuning]]:
    """torch.compile the block with every Inductor cache off; time the first call."""
    with settings.caches_disabled(), record_gemm_tuning() as rows:
        compiled = torch.compile(block, options=compile_options())
        t0 = time.perf_counter()
        with torch.no_grad():
            out = compiled(x)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
    return compiled, out, seconds, rows


def compile_in_fresh_process(size: BlockSize, backend: str, cache_dir: str) -> dict:
    """Cold-compile the block in a new process (``compile_once``) and return its report."""
    arg = json.dumps({"size": dataclasses.asdict(size), "backend": backend})
    return json_process(["-m", "inductor_cutedsl.cli.compile_once", arg], {"INDUCTOR_CUTEDSL_CACHE_DIR": cache_dir})


def json_process(args: list[str], env: dict, timeout: float = 3600) -> dict:
    """Run ``python ARGS`` in a new process with ``env`` added to this one's
    environment as it would be without our install (``launch_environment``: a stock
    process must not start with what ours set); its report is the last line it prints,
    one JSON object (``print_report_and_exit``).

    The child runs in a session of its own, its output in files, not pipes: its compile
    workers (Inductor's, ours) inherit that output and outlive it by seconds, and a pipe
    would hold this process until the last of them closed it. Once the child has
    exited, whatever it left in its session is ended."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            [sys.executable, *args],
            env={**launch_environment(), **env},
            stdout=out,
            stderr=err,
            text=True,
            start_new_session=True,
        )
        try:
            returncode = proc.wait(timeout)
        finally:
            end_session(proc.pid)
            proc.wait()
        out.seek(0)
        err.seek(0)
        return report_of(args, returncode, out.read(), err.read())


def report_of(args: list[str], returncode: int, stdout: str, stderr: str) -> dict:
    """The report of a ``json_process`` child that ran ``args``, given how it ended."""
    if returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed (status {returncode}):\n{stderr[-4000:]}")
    return json.loads(stdout.strip().splitlines()[-1])


def end_session(sid: int) -> None:
    """Kill every process left in session ``sid`` (a child started with
    ``start_new_session``, whose id is its pid)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(sid, signal.SIGKILL)


def print_report_and_exit(report: dict) -> NoReturn:
    """A ``json_process`` child's end: the report as its last line, then an exit without
    the interpreter's teardown. The report is all the parent reads; the teardown would
    only shut down worker pools and the CUDA context, seconds of the parent's wall time
    per child, and the parent ends what the child leaves running."""
    print(json.dumps(report), flush=True)
    sys.stderr.flush()
    os._exit(0)


def gemm_table(stock: list[GemmTuning], ours: list[GemmTuning]) -> list[dict]:
    rows = []
    for s, o in zip(stock, ours):
        shapes = o.shapes[-2:]  # (.., M, K), (.., K, N): addmm/baddbmm put C first
        m, k, n = shapes[0][-2], shapes[0][-1], shapes[1][-1]
        rows.append(
            {
                "op": o.op,
                "shape": [m, n, k],
                "candidates": o.candidates,
                "winner": o.winner,
                "winner_ms": round(o.winner_ms, 4),
                "best_ms": {b: round(t, 4) for b, t in o.best_ms.items()},
                "stock_winner": s.winner,
                "stock_ms": round(s.winner_ms, 4),
            }
        )
    return rows


def print_report(result: dict) -> None:
    print(f"\n{'op':>8} {'M x N x K':>18} {'candidates':>28} {'winner':>8} {'ms':>8} {'stock':>14}")
    for r in result["gemms"]:
        cands = " ".join(f"{b}:{n}" for b, n in sorted(r["candidates"].items()))
        shape = "x".join(map(str, r["shape"]))
        print(
            f"{r['op']:>8} {shape:>18} {cands:>28} {r['winner']:>8} {r['winner_ms']:>8.4f} "
            f"{r['stock_winner']:>6} {r['stock_ms']:.4f}"
        )
    if result.get("epilogue_fusion"):
        print("\nepilogue fusion: fused into CuteDSL GEMMs")
        for f in result["fused_epilogues"]:
            kept = f" (also writes {', '.join(f['kept'])})" if f["kept"] else ""
            print(f"  {f['gemm']:>8} {'x'.join(map(str, f['size'])):>12}: {', '.join(f['ops'])}{kept}")
        if not result["fused_epilogues"]:
            print("  none")
    print("\nGPU time per block by kernel (torch.profiler), stock | ours:")
    k = result["kernels_ms_per_block"]
    for i in range(max(len(k["stock"]), len(k["ours"]))):
        cells = [
            f"{r['ms']:8.4f} x{r['launches']:<4g} {r['kernel'][:44]:<44}" if r else " " * 59
            for r in (k[side][i] if i < len(k[side]) else None for side in ("stock", "ours"))
        ]
        print(" | ".join(cells))
    t = result["model_ms"]
    print(
        f"\nblock time: eager {t['eager']:.3f} ms, stock max-autotune {t['stock']:.3f} ms, "
        f"inductor_cutedsl {t['ours']:.3f} ms -> {result['model_speedup_vs_max_autotune']:.3f}x"
    )
    c = result["compile_s"]
    print(
        f"cold compile (fresh processes): stock {c['stock_cold']:.1f} s, ours {c['ours_cold']:.1f} s "
        f"({result['compile_ratio_vs_max_autotune']:.2f}x; {result['cold_cutedsl_compiles']} CuteDSL kernels "
        f"built, {c['ours_cold_waiting_for_kernel_builds']:.1f} s waiting for builds, "
        f"{c['ours_cold_benchmarking_cutedsl']:.1f} s benchmarking CuteDSL candidates); "
        f"warm {c['ours_warm']:.1f} s with {result['warm_cutedsl_compiles']} CuteDSL compiles "
        f"({len(result['warm_rebuilt'])} of kernels the cold process had built)"
    )


def plot(result: dict, path: str) -> bool:
    """Draw the per-GEMM and block times to ``path``; False (and one line saying how to
    get the plot) where matplotlib, an optional extra, is not installed."""
    try:
        import matplotlib
    except ImportError:
        print(f"no plot written to {path}: matplotlib is not installed (pip install 'inductor-cutedsl[plot]')")
        return False

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gemms = result["gemms"]
    labels = [f"{g['op']}\n{'x'.join(map(str, g['shape']))}" for g in gemms] + ["block"]
    stock = [g["stock_ms"] for g in gemms] + [result["model_ms"]["stock"]]
    ours = [g["winner_ms"] for g in gemms] + [result["model_ms"]["ours"]]
    xs = range(len(labels))
    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(labels)), 4))
    ax.bar([x - 0.2 for x in xs], stock, 0.4, label="stock max-autotune")
    ax.bar([x + 0.2 for x in xs], ours, 0.4, label="with inductor_cutedsl")
    ax.set_xticks(list(xs), labels, fontsize=7)
    ax.set_ylabel("ms (lower is better)")
    ax.set_title(f"LLaMA block, {result['device']}: {result['model_speedup_vs_max_autotune']:.3f}x")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


def steps(total: int) -> Callable[[str], None]:
    """A printer for ``total`` long steps: each call announces the next, as i of ``total``."""
    count = itertools.count(1)
    return lambda what: print(f"[{next(count)}/{total}] {what}", flush=True)


def run(size: BlockSize, json_path: str, png_path: str) -> dict:
    # Compile times: each cold compile in its own fresh process, then ours once more
    # with our kernel cache warm (it must compile no CuteDSL kernel).
    cache_dir = tempfile.mkdtemp(prefix="inductor_cutedsl_job_")
    # Kernels loaded from it stay loaded: the directory goes when the process ends.
    atexit.register(shutil.rmtree, cache_dir, ignore_errors=True)
    step = steps(5)
    step("stock max-autotune, cold compile in a fresh process")
    stock_cold = compile_in_fresh_process(size, "stock", cache_dir)
    step("inductor_cutedsl, cold compile in a fresh process (CuteDSL kernels built)")
    ours_cold = compile_in_fresh_process(size, "ours", cache_dir)
    step("inductor_cutedsl, compile in a fresh process with the kernel cache warm")
    ours_warm = compile_in_fresh_process(size, "ours", cache_dir)

    # Correctness, autotuning tables and speed: both compiled here, on the same tensors.
    step("both compiled in this process and checked against eager")
    block, x = make_block(size)
    with torch.no_grad():
        ref = block(x)
    disable()
    try:
        stock_fn, stock_out, _, stock_rows = compile_cold(block, x)
    finally:
        enable()
    fused_before = len(scheduling.fused_epilogues)
    with config.patch(cache_dir=cache_dir):
        ours_fn, ours_out, _, ours_rows = compile_cold(block, x)
    fused = scheduling.fused_epilogues[fused_before:]
    errors = {"stock": rel_err(stock_out, ref), "ours": rel_err(ours_out, ref)}
    for name, err in errors.items():
        if not err < TOLERANCE:
            raise AssertionError(f"{name} output differs from eager: rel err {err:.3e}")
    step("eager, stock and ours timed side by side, then profiled")
    with torch.no_grad():
        calls = {"eager": lambda: block(x), "stock": lambda: stock_fn(x), "ours": lambda: ours_fn(x)}
        makers: dict[str, Maker] = {name: functools.partial(lambda fn: fn, fn) for name, fn in calls.items()}
        times = side_by_side(makers, 5, graphs=False, whole_designs=True)
        kernels = {"stock": kernel_times(lambda: stock_fn(x)), "ours": kernel_times(lambda: ours_fn(x))}
    if ran_cutedsl(kernels["stock"]):
        raise AssertionError("the stock block ran CuteDSL kernels: the comparison would be void")

    result = {
        **run_info(),
        "model": dataclasses.asdict(size),
        "rel_err_vs_eager": errors,
        "model_ms": times,
        "model_speedup_vs_max_autotune": round(times["stock"] / times["ours"], 4),
        "compile_s": {
            "stock_cold": round(stock_cold["compile_s"], 1),
            "ours_cold": round(ours_cold["compile_s"], 1),
            "ours_cold_waiting_for_kernel_builds": round(ours_cold["waiting_for_builds_s"], 1),
            "ours_cold_benchmarking_cutedsl": round(ours_cold["benchmarking_cutedsl_s"], 1),
            "ours_warm": round(ours_warm["compile_s"], 1),
        },
        "compile_ratio_vs_max_autotune": round(ours_cold["compile_s"] / stock_cold["compile_s"], 3),
        "cold_cutedsl_compiles": ours_cold["cutedsl_compiles"],
        "warm_cutedsl_compiles": ours_warm["cutedsl_compiles"],
        # Kernels the warm process built again although the cold one had built them:
        # the cache's promise is that this is empty. Its other compiles are kernels
        # the cold process never needed (its autotuning picked other GEMMs to fuse into).
        "warm_rebuilt": sorted(set(ours_warm["cutedsl_built"]) & set(ours_cold["cutedsl_built"])),
        "gemms": gemm_table(stock_rows, ours_rows),
        "epilogue_fusion": config.epilogue_fusion,
        "fused_epilogues": fused,
        "kernels_ms_per_block": kernels,
    }
    print_report(result)
    write_json(result, json_path)
    print(f"wrote {json_path}")
    if plot(result, png_path):
        print(f"wrote {png_path}")
    assert math.isfinite(result["model_speedup_vs_max_autotune"])
    return result
