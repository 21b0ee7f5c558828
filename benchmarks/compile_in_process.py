"""Why a compile is slow in a long-lived process: the same block compiled first in a
fresh process and after other blocks, with stock max-autotune and with ours (issue 17).

    python benchmarks/compile_in_process.py --target vit:small:inference \\
        --before gpt2:small:inference,llama:small:inference,phi3:small:inference --json OUT.json

Per backend, two fresh processes with every cache empty (Inductor's caches off, new
Inductor, Triton and kernel cache directories, as ``models.py --cold``): one compiles
``--target`` alone, the other the ``--before`` blocks and then the target, as the
suite's process does. ``slowdown`` is the target's late compile over its fresh one:
the part of it both backends show is Inductor's (or the process's), what only ours
shows is ours. Each compile records what could explain it: garbage-collector passes
and their seconds (``gc.callbacks``), tracked Python objects, resident memory,
threads and child processes (worker pools left running) before it starts. With
``--sample PATH`` each compile's thread is sampled in wall time (``wall_sampler``, as
``models.py --sample``: the report appended to PATH, the folded stacks to
PATH.folded.gz, one member per compile, headed by backend, block and fresh/late) and
every Triton compile recorded (``precompile_probe``): a record then carries which
threads compiled what, and whether template choices were compiled again in the
compiling thread.
"""
from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # models.py
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BACKENDS = ("stock", "ours")


def process_state() -> dict:
    """What a process carries into its next compile."""
    pid = os.getpid()
    children = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    children += int(f.read().rsplit(")", 1)[1].split()[1]) == pid
            except (OSError, ValueError, IndexError):
                continue
    with open("/proc/self/statm") as f:
        rss_mb = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    return {"gc_objects": len(gc.get_objects()), "rss_mb": round(rss_mb), "threads": threading.active_count(),
            "children": children}  # fmt: skip


def compile_seconds(block_name: str, backend: str, mode: str) -> float:
    """One block's first call (its compile) under ``backend``, on the GPU."""
    import torch

    import models

    bid = models.BlockId.parse(block_name)
    with models.backend(backend):
        block, x = models.make_block(bid.family, bid.size)
        if bid.run == "train":
            x.requires_grad_(True)
        fn = torch.compile(models.target_of(block, bid.run), options=models.compile_options(mode))
        step = models.make_step(fn, x, bid.run, list(block.parameters()), models.uses_cudagraphs(mode))
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        return time.perf_counter() - t0


def smoke_seconds(block_name: str, backend: str, mode: str) -> float:
    """A tiny CPU compile in place of a block (checks the mechanics without a GPU)."""
    import torch

    torch._dynamo.reset()
    width = 8 + 8 * sum(map(ord, block_name)) % 32
    fn = torch.compile(lambda x: torch.relu(x @ x.t()) + 1)
    t0 = time.perf_counter()
    fn(torch.randn(width, width))
    return time.perf_counter() - t0


def worker(blocks: list[str], backend: str, mode: str, smoke: bool, sample: str | None = None) -> dict:
    """Compile ``blocks`` in order in this process; one record per compile."""
    import contextlib

    import models
    import precompile_probe
    from wall_sampler import WallSampler

    if sample:
        precompile_probe.install()
    measure = smoke_seconds if smoke else compile_seconds
    records = []
    for i, name in enumerate(blocks):
        state = process_state()
        first_event = len(precompile_probe.EVENTS)
        sampler = WallSampler() if sample else None
        with models.GcTimer() as timer, sampler or contextlib.nullcontext():
            seconds = measure(name, backend, mode)
        records.append({"block": name, "seconds": round(seconds, 2), "gc_passes": timer.passes,
                        "gc_s": round(timer.seconds, 2), "before": state})  # fmt: skip
        if sampler is not None:
            records[-1]["triton_compiles"] = precompile_probe.summary(precompile_probe.EVENTS[first_event:])
            when = "fresh" if len(blocks) == 1 else f"late {i + 1} of {len(blocks)}"
            sampler.append_to(sample, f"{backend} {name} ({when}): {seconds:.2f} s")
        if not smoke:
            models.release()  # as the suite does between blocks
    return {"backend": backend, "compiles": records}


def run_worker(blocks: list[str], backend: str, mode: str, smoke: bool, timeout: float, sample: str | None) -> dict:
    """``worker`` in a fresh process with every cache empty."""
    import models
    from inductor_cutedsl.job.run import json_process

    with tempfile.TemporaryDirectory(prefix="compile-in-process-", ignore_cleanup_errors=True) as tmp:
        env = {key: os.path.join(tmp, key) for key in models.COLD_CACHE_DIRS}
        env["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"
        args = [os.path.abspath(__file__), "--worker", ",".join(blocks), "--backend", backend, "--mode", mode]
        args += ["--smoke"] if smoke else []
        return json_process(args + (["--sample", sample] if sample else []), env, timeout)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="vit:small:inference", help="FAMILY:SIZE:RUN, the block timed fresh and late")
    ap.add_argument("--before", default="gpt2:small:inference,llama:small:inference,phi3:small:inference",
                    help="blocks compiled before the target in the long-lived process (comma-separated)")
    ap.add_argument("--mode", default="max-autotune-no-cudagraphs", help="torch.compile mode (default: %(default)s)")
    ap.add_argument("--json", default=None, help="where the results are written")
    ap.add_argument("--backends", default=",".join(BACKENDS),
                    help="comma-separated, in this order (default: %(default)s)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per process (default: %(default)s)")
    ap.add_argument("--smoke", action="store_true", help="tiny CPU compiles instead of blocks (no GPU)")
    ap.add_argument("--sample", metavar="PATH", default=None,
                    help="sample each compile's thread and record every Triton compile (see above)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--backend", choices=BACKENDS, default="stock", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker is not None:
        print(json.dumps(worker(args.worker.split(","), args.backend, args.mode, args.smoke, args.sample)))
        return {}
    before = [b for b in args.before.split(",") if b]
    result: dict = {"target": args.target, "before": before, "mode": args.mode, "smoke": args.smoke}
    backends = args.backends.split(",")
    if not set(backends) <= set(BACKENDS):
        ap.error(f"--backends: each of {', '.join(BACKENDS)}")
    for backend in backends:
        run = functools.partial(run_worker, backend=backend, mode=args.mode, smoke=args.smoke, timeout=args.timeout,
                                sample=args.sample)  # fmt: skip
        fresh, late = run([args.target]), run([*before, args.target])
        first, last = fresh["compiles"][0], late["compiles"][-1]
        result[backend] = {"fresh": fresh["compiles"], "late": late["compiles"],
                           "slowdown": round(last["seconds"] / first["seconds"], 3)}  # fmt: skip
        print(f"{backend}: {args.target} fresh {first['seconds']} s, after {len(before)} blocks "
              f"{last['seconds']} s ({result[backend]['slowdown']}x; gc {last['gc_s']} s, "
              f"{last['before']['children']} child processes before it)", flush=True)  # fmt: skip
        if args.json:  # after each backend: a call's time limit can stop the next one
            os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
            with open(args.json, "w") as f:
                json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
