"""Where a compiled block's host time goes without CUDA graphs: stock vs ours.

    python benchmarks/host_probe.py --blocks vit:prefill:inference,gpt2:small:inference --out DIR

Per block, stock and ours are compiled with ``max-autotune-no-cudagraphs`` (as the
model suite does) and then, for each backend:

- wall ms per call: N back-to-back calls then one sync (``GpuProbe.loop_ms``);
- enqueue us per call: calls queued behind a GPU sleep, so none waits for the GPU
  (``GpuProbe.host_us``);
- the CUDA runtime/driver calls one call makes, from the profiler's CPU events
  (``cudaLaunchKernel``, ``cuLaunchKernelEx``, synchronizations, allocations), with
  their counts and host us: a synchronizing call shows up here;
- the profiler's events that cost the most host time, by own time, from every thread
  (a training step's backward runs in autograd's device thread);
- a cProfile of calls (the Python frames of the calling thread that cost the most).

Writes ``DIR/host_probe.json`` and each backend's cProfile text and wrapper code.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
from collections import defaultdict

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import models  # noqa: E402  (the suite's blocks and helpers)

MODE = "max-autotune-no-cudagraphs"


def cpu_events(step, calls: int, top: int = 30) -> dict:
    """The profiler's CPU-side events per call, from every thread (a training step's
    backward runs in autograd's device thread, which cProfile does not see):
    ``api``: the CUDA runtime/driver calls by name, count and host us; ``self_cpu``: the
    ``top`` events by own host us (Python-level record_functions, aten ops, launches)."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            step()
        torch.cuda.synchronize()
    api: dict = defaultdict(lambda: [0, 0.0])
    for ev in prof.events():
        name = ev.name
        if name.startswith(("cuda", "cu")) and ev.device_type == torch.autograd.DeviceType.CPU:
            api[name][0] += 1
            api[name][1] += ev.cpu_time_total
    own = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:top]
    return {
        "api": {k: {"per_call": round(v[0] / calls, 2), "us_per_call": round(v[1] / calls, 2)}
                for k, v in sorted(api.items(), key=lambda kv: -kv[1][1])},
        "self_cpu": {e.key: {"per_call": round(e.count / calls, 2), "us_per_call": round(e.self_cpu_time_total / calls, 2)}
                     for e in own},
    }  # fmt: skip


def python_profile(step, calls: int, top: int = 40) -> str:
    torch.cuda.synchronize()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(calls):
        step()
    pr.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(top)
    return s.getvalue()


def probe(bid: models.BlockId, out_dir: str, calls: int) -> dict:
    block, x = models.make_block(bid.family, bid.size)
    params = list(block.parameters())
    if bid.run == "train":
        x.requires_grad_(True)
    target = models.target_of(block, bid.run)
    steps, codes = {}, {}
    for name in models.BACKENDS:
        codes[name] = []
        with models.backend(name):
            step = models.make_step(models.compile_block(target, MODE), x, bid.run, params)
            with models.captured_code(codes[name]):
                step()
            step()
            torch.cuda.synchronize()
            steps[name] = step
    probe_ = models.GpuProbe()
    result: dict = {"block": bid.name, "host_state": probe_.quiet()}
    wall = probe_.loop_ms(steps, calls=calls)
    host = probe_.host_us(steps, {name: 20 for name in steps})
    for name in steps:
        result[name] = {"wall_ms": wall[name], "enqueue_us": host[name], "gpu_busy": host["gpu_busy"]}
    for name, step in steps.items():
        result[name].update(cpu_events(step, 20))
        text = python_profile(step, calls)
        tag = bid.name.replace(":", "_")
        with open(os.path.join(out_dir, f"{tag}_{name}_cprofile.txt"), "w") as f:
            f.write(text)
        with open(os.path.join(out_dir, f"{tag}_{name}_wrapper.py"), "w") as f:
            f.write("\n\n# ----\n\n".join(codes[name]))
    return result


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blocks", default="vit:prefill:inference", help="FAMILY:SIZE:RUN, comma-separated")
    ap.add_argument("--out", default=".", help="directory for the results")
    ap.add_argument("--calls", type=int, default=200, help="calls per timed loop")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to probe")
        return
    os.makedirs(args.out, exist_ok=True)
    results = []
    for text in args.blocks.split(","):
        bid = models.BlockId.parse(text)
        results.append(probe(bid, args.out, args.calls))
        models.release()
        r = results[-1]
        print(json.dumps({k: ({kk: vv for kk, vv in v.items() if kk not in ("api", "self_cpu")}
                               if isinstance(v, dict) else v) for k, v in r.items()}), flush=True)  # fmt: skip
        for name in models.BACKENDS:
            print(name, "api", json.dumps(dict(list(r[name]["api"].items())[:12])), flush=True)
            print(name, "self_cpu", json.dumps(dict(list(r[name]["self_cpu"].items())[:15])), flush=True)
        with open(os.path.join(args.out, "host_probe.json"), "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
