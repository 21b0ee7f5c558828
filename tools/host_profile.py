"""Where a compiled step's host time goes, stock against ours: a probe for host-time
regressions (a training step's autograd, the generated wrapper, our launch path).

    python -m tools.host_profile --block hf-qwen2:small:train
    python -m tools.host_profile --block gpt2:prefill:train --json $OUT/host-profile.json

A block of ``benchmarks.models`` is compiled by stock and by ours in one process (as the
model suite does) and run until warm. Its host time per step is measured as the model
suite measures it (``GpuProbe.host_us``: steps enqueued behind a GPU sleep, as many as the
launch queue holds), then the same enqueueing runs under cProfile, the sides interleaved
in rounds. Printed: the host microseconds per step, and per side the functions with the
most own time per step under the profiler; then the functions whose time per step grew
most from stock to ours. cProfile slows every Python call alike, so its figures rank where
the time goes; the unprofiled microseconds are the measurement.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

#: Profiled rounds of each side, interleaved.
ROUNDS = 4
SIDES = ("stock", "ours")


def function_times(profile: cProfile.Profile, steps: int) -> dict[str, float]:
    """Own (not cumulative) microseconds per step of each function under ``profile``."""
    stats = pstats.Stats(profile)
    out = {}
    for (path, line, name), (_, _, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        out[f"{path}:{line}({name})"] = tottime * 1e6 / steps
    return out


def top(times: dict[str, float], n: int) -> list[tuple[str, float]]:
    return sorted(times.items(), key=lambda kv: -kv[1])[:n]


def growth(stock: dict[str, float], ours: dict[str, float], n: int) -> list[tuple[str, float, float]]:
    """The ``n`` functions whose own time per step grew most from stock to ours:
    (function, stock us, ours us)."""
    names = set(stock) | set(ours)
    rows = [(name, stock.get(name, 0.0), ours.get(name, 0.0)) for name in names]
    return sorted(rows, key=lambda r: -(r[2] - r[1]))[:n]


def wrappers(profile: cProfile.Profile) -> dict[str, str]:
    """The sources of the generated wrapper modules whose ``call`` ran under ``profile``,
    by path: what a side's step runs on the host, to be read side by side (which views it
    rebuilds with ``reinterpret_tensor``, which launches it makes)."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    root = cache_dir()
    stats = pstats.Stats(profile)
    paths = {path for (path, _, name) in stats.stats if name == "call" and path.startswith(root)}  # type: ignore[attr-defined]
    out = {}
    for path in sorted(paths):
        with open(path) as f:
            out[path] = f.read()
    return out


def calls_per_step(profile: cProfile.Profile, steps: int) -> dict[str, float]:
    """How often each built-in the wrapper calls ran per step (``reinterpret_tensor``,
    ``empty_strided``, launches): counts, where own times only rank."""
    stats = pstats.Stats(profile)
    out = {}
    for (path, _, name), (_, ncalls, _, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        if path == "~":
            out[name] = round(ncalls / steps, 2)
    return out


def main(argv: list[str] | None = None) -> dict | None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--block", default="hf-qwen2:small:train", help="FAMILY:SIZE:RUN (default: %(default)s)")
    ap.add_argument("--mode", default="max-autotune-no-cudagraphs", help="torch.compile mode (default: %(default)s)")
    ap.add_argument("--top", type=int, default=25, help="functions listed per table (default: %(default)s)")
    ap.add_argument("--json", metavar="PATH", help="write the tables here")
    args = ap.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("tools.host_profile needs a CUDA GPU: nothing measured")
        return None
    from benchmarks import models
    from benchmarks.harness import stock_on_torch_ptxas
    from inductor_cutedsl.timing import enqueue_ms

    stock_on_torch_ptxas()

    bid = models.BlockId.parse(args.block)
    block, x = models.make_block(bid.family, bid.size)
    if bid.run == "train":
        x.requires_grad_(True)
    target, params = models.target_of(block, bid.run, x), list(block.parameters())
    steps = {}
    marks = models.decision_marks()
    for side in SIDES:
        t0 = time.perf_counter()
        with models.backend(side):
            fn = models.compile_block(target, args.mode)
            steps[side] = models.make_step(fn, x, bid.run, params, models.uses_cudagraphs(args.mode))
            for _ in range(3):
                steps[side]()
        # Printed as each result comes: a call's time limit may stop the probe before its end.
        print(f"{side}: compiled and warm in {time.perf_counter() - t0:.1f} s", flush=True)
    probe = models.GpuProbe()
    profiled = probe.profile(steps)
    launches = {side: sum(k["launches"] for k in prof["kernels"]) for side, prof in profiled.items()}
    host = probe.host_us(steps, launches)
    print(f"launches per step {launches}; host us per step {host}", flush=True)
    profiles = {side: cProfile.Profile() for side in SIDES}
    for i in range(ROUNDS):
        for side in SIDES if i % 2 == 0 else SIDES[::-1]:
            profiles[side].enable()
            enqueue_ms(steps[side], host["calls"][side])
            profiles[side].disable()
    # enqueue_ms runs the step 2 * calls + 1 times: a first call, a guess, the timed calls.
    profiled_steps = {side: ROUNDS * (2 * host["calls"][side] + 1) for side in SIDES}
    times = {side: function_times(profiles[side], profiled_steps[side]) for side in SIDES}
    builtins = {side: calls_per_step(profiles[side], profiled_steps[side]) for side in SIDES}
    result = {
        "block": bid.name,
        "mode": args.mode,
        "host_us": host,
        "top": {side: [(name, round(us, 2)) for name, us in top(times[side], args.top)] for side in SIDES},
        "growth": [(name, round(s, 2), round(o, 2)) for name, s, o in growth(times["stock"], times["ours"], args.top)],
        # Which kernels each side launches and what ours' autotunings measured: a host
        # figure above stock's is often a choice (an ATen GEMM's launch), not a path.
        "kernels": {side: prof["kernels"] for side, prof in profiled.items()},
        "decisions": models.decisions_since(marks),
        # Built-ins whose count per step differs between the sides: the wrapper's views
        # and allocations, where a host excess with no more launches comes from.
        "builtin_calls": {
            name: {side: builtins[side].get(name, 0.0) for side in SIDES}
            for name in sorted(set(builtins["stock"]) | set(builtins["ours"]))
            if builtins["stock"].get(name) != builtins["ours"].get(name)
        },
        "wrappers": {side: wrappers(profiles[side]) for side in SIDES},
    }
    print(f"{bid.name} {args.mode}: host us per step {host}")
    for side in SIDES:
        print(f"\n{side}: own us per step (profiled)")
        for name, us in result["top"][side]:
            print(f"{us:10.2f}  {name}")
    for side in SIDES:
        print(f"\n{side}: kernels per step (launches, GPU us)")
        for k in result["kernels"][side]:
            print(f"{k['launches']:6.1f} {k['us']:8.1f}  {k['kernel'][:100]}")
    print("\nbuilt-in calls per step that differ (stock -> ours)")
    for name, counts in result["builtin_calls"].items():
        print(f"{counts['stock']:10.2f} -> {counts['ours']:10.2f}  {name}")
    print("\ngrew most from stock to ours (stock us -> ours us)")
    for name, s, o in result["growth"]:
        print(f"{s:10.2f} -> {o:10.2f}  {name}")
    from inductor_cutedsl.cli.report import write_json

    write_json(result, args.json)
    return result


if __name__ == "__main__":
    main()
