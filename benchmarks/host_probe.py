"""Where a compiled block's host time goes: stock vs ours.

    python benchmarks/host_probe.py --blocks vit:prefill:inference,gpt2:small:inference --out DIR

Per block and mode (``--modes``: ``max-autotune-no-cudagraphs`` by default, as the model
suite profiles; ``max-autotune`` for CUDA graphs, where a training step stays host-bound),
stock and ours are compiled and then, for each backend:

- wall ms per call: N back-to-back calls then one sync (``GpuProbe.loop_ms``);
- enqueue us per call: calls queued behind a GPU sleep, so none waits for the GPU
  (``GpuProbe.host_us``);
- the CUDA runtime/driver calls one call makes, from the profiler's CPU events
  (``cudaLaunchKernel``, ``cuLaunchKernelEx``, synchronizations, allocations), with
  their counts and host us: a synchronizing call shows up here;
- the profiler's events that cost the most host time, by own time, from every thread
  (a training step's backward runs in autograd's device thread);
- a cProfile of calls (the Python frames of the calling thread that cost the most);
- the CPU budget of a call: wall us, CPU us of the whole process and of the calling
  thread, garbage collections and their us, and (training) the forward's and the
  backward's wall us apart: more process CPU than wall says another thread works
  meanwhile, more wall than CPU says a thread waits (the GIL, a lock, a sync);
- the Python threads alive, by name;
- the compiled graphs' CUDA graph skips (Inductor's counter): a skipped graph runs
  its kernels one launch at a time.

Writes ``DIR/host_probe.json`` (each backend's cProfile text in it) and, per block and
mode, both backends' wrapper code.
"""
from __future__ import annotations

import argparse
import cProfile
import json
import os
import statistics
import sys
import threading
import time
from collections import defaultdict

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import models  # noqa: E402  (the suite's blocks and helpers)
from inductor_cutedsl.timing import rotations  # noqa: E402



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


def cpu_budget(steps: dict, calls: int, rounds: int = 4, phases: dict | None = None) -> dict:
    """Per call, medians over interleaved rounds of ``calls`` calls each: wall us, process
    and calling-thread CPU us, GC runs and us; with ``phases`` ({name: (forward, backward)}
    callables of a training step) also each phase's wall us. Host-bound calls only (the
    GPU keeps up), so wall is host time."""
    out: dict = {name: defaultdict(list) for name in steps}
    for order in rotations(list(steps), rounds):
        for name in order:
            steps[name]()
            torch.cuda.synchronize()
            rec = out[name]
            with models.GcTimer() as gc_timer:
                w0, p0, t0 = time.perf_counter(), time.process_time(), time.thread_time()
                for _ in range(calls):
                    steps[name]()
                w1, p1, t1 = time.perf_counter(), time.process_time(), time.thread_time()
            torch.cuda.synchronize()
            rec["wall_us"].append((w1 - w0) / calls * 1e6)
            rec["process_cpu_us"].append((p1 - p0) / calls * 1e6)
            rec["thread_cpu_us"].append((t1 - t0) / calls * 1e6)
            rec["gc_runs"].append(sum(gc_timer.passes) / calls)
            rec["gc_full_runs"].append(gc_timer.passes[2] / calls)
            rec["gc_us"].append(gc_timer.seconds / calls * 1e6)
            if phases:
                forward, backward = phases[name]
                fw = bw = 0.0
                for _ in range(calls):
                    a = time.perf_counter()
                    loss = forward()
                    b = time.perf_counter()
                    backward(loss)
                    fw, bw = fw + b - a, bw + time.perf_counter() - b
                torch.cuda.synchronize()
                rec["forward_us"].append(fw / calls * 1e6)
                rec["backward_us"].append(bw / calls * 1e6)
    return {name: {k: round(statistics.median(v), 2) for k, v in rec.items()} for name, rec in out.items()}


def python_profile(step, calls: int, top: int = 40) -> str:
    torch.cuda.synchronize()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(calls):
        step()
    pr.disable()
    torch.cuda.synchronize()
    return models.profile_text(pr, ("tottime",), top)


def cudagraph_skips() -> dict:
    """Inductor's count of CUDA graph skips by reason, this process so far."""
    from torch._dynamo.utils import counters

    return dict(counters["inductor"].get("cudagraph_skips", {}) or {})


def probe(bid: models.BlockId, out_dir: str, calls: int, mode: str = models.NO_CUDAGRAPHS) -> dict:
    cudagraphs = models.uses_cudagraphs(mode)
    block, x = models.make_block(bid.family, bid.size)
    params = list(block.parameters())
    if bid.run == "train":
        x.requires_grad_(True)
    target = models.target_of(block, bid.run)
    steps, codes, phases, skips = {}, {}, {}, {}
    for name in models.BACKENDS:
        codes[name] = []
        with models.backend(name):
            before = cudagraph_skips()
            fn = models.compile_block(target, mode)
            step = models.make_step(fn, x, bid.run, params, cudagraphs)
            if bid.run == "train":
                phases[name] = models.train_phases(fn, x, params, cudagraphs)
            with models.captured_code(codes[name]):
                step()
            for _ in range(3):  # a CUDA graph tree records on a later call than the first
                step()
            torch.cuda.synchronize()
            steps[name] = step
            skips[name] = {k: v - before.get(k, 0) for k, v in cudagraph_skips().items() if v > before.get(k, 0)}
    probe_ = models.GpuProbe()
    result: dict = {"block": bid.name, "mode": mode, "host_state": probe_.quiet()}
    wall = probe_.loop_ms(steps, calls=calls)
    host = probe_.host_us(steps, {name: 20 for name in steps})
    budget = cpu_budget(steps, max(1, calls // 5), phases=phases or None)
    for name in steps:
        result[name] = {"wall_ms": wall[name], "enqueue_us": host[name], "gpu_busy": host["gpu_busy"],
                        "cpu_budget": budget[name], "cudagraph_skips": skips[name]}  # fmt: skip
    result["threads"] = sorted(t.name for t in threading.enumerate())
    for name, step in steps.items():
        result[name].update(cpu_events(step, 20))
        result[name]["cprofile"] = python_profile(step, calls)
    # One file per block and mode: the device returns at most 8 files a call.
    tag = f"{bid.name}_{'cg' if cudagraphs else 'nocg'}".replace(":", "_")
    with open(os.path.join(out_dir, f"{tag}_wrappers.py"), "w") as f:
        f.write("\n\n".join(f"# ==== {name}\n\n" + "\n\n# ----\n\n".join(codes[name]) for name in steps))
    return result


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blocks", default="vit:prefill:inference", help="FAMILY:SIZE:RUN, comma-separated")
    ap.add_argument("--out", default=".", help="directory for the results")
    ap.add_argument("--calls", type=int, default=200, help="calls per timed loop")
    ap.add_argument("--modes", default=models.NO_CUDAGRAPHS, help="compile modes, comma-separated")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to probe")
        return
    os.makedirs(args.out, exist_ok=True)
    results = []
    for text, mode in [(t, m) for t in args.blocks.split(",") for m in args.modes.split(",")]:
        bid = models.BlockId.parse(text)
        results.append(probe(bid, args.out, args.calls, mode))
        models.release()
        r = results[-1]
        print(json.dumps({k: ({kk: vv for kk, vv in v.items() if kk not in ("api", "self_cpu", "cprofile")}
                               if isinstance(v, dict) else v) for k, v in r.items()}), flush=True)  # fmt: skip
        for name in models.BACKENDS:
            print(name, "api", json.dumps(dict(list(r[name]["api"].items())[:12])), flush=True)
            print(name, "self_cpu", json.dumps(dict(list(r[name]["self_cpu"].items())[:15])), flush=True)
            print(name, "cprofile", "\n".join(r[name]["cprofile"].splitlines()[:16]), flush=True)
        with open(os.path.join(args.out, "host_probe.json"), "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
