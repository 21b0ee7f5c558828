"""Sustained GEMM speed and energy per GEMM, our configs against cuBLAS.

    python benchmarks/energy_probe.py --json energy.json

Session 9's nvidia-smi log of the epilogue benchmark showed the H200 at its 700 W
power limit through every GEMM-heavy stretch (throttle reason "SW power cap", SM
clock 1290-1600 MHz against 1980 MHz idle): GEMM speed here is energy per GEMM. A
do_bench burst that starts from a cooler, idle GPU runs partly at boost clocks, so
short timings also depend on what ran before. Here each contender runs back to back
long enough to reach the power limit's steady state, then is measured over a fixed
window: milliseconds and millijoules per GEMM (NVML's energy counter), average power
and the mean SM clock over the window (sampled every 20 ms; the committed session-9
run has one reading at the window's end). Contenders alternate in rotating rounds. Each of ours is
checked against cuBLAS's result first.
"""
from __future__ import annotations

import argparse
import ctypes
import dataclasses
import os
import statistics
import sys
import threading

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from inductor_cutedsl.bench.gemm import SHAPES, build_per_shape, linear_operands  # noqa: E402
from inductor_cutedsl.kernels.config import fitted_swizzle, shortlist  # noqa: E402
from inductor_cutedsl.runtime import get_gemm  # noqa: E402
from inductor_cutedsl.runtime.launch import default_cache, max_active_clusters  # noqa: E402
from inductor_cutedsl.bench.report import graphed, rel_err, report_row, run_info  # noqa: E402
from inductor_cutedsl.timing import rotations  # noqa: E402

ROUNDS = 2
WARM_S, WINDOW_S = 0.5, 0.6
CLOCK_SAMPLE_S = 0.02
NVML_CLOCK_SM = 1


class Nvml:
    """The few NVML calls needed, through the driver's own library (no Python package)."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        self._check(self.lib.nvmlInit_v2())
        self.handle = ctypes.c_void_p()
        index = torch.cuda.current_device()
        self._check(self.lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(self.handle)))

    @staticmethod
    def _check(rc: int) -> None:
        if rc != 0:
            raise RuntimeError(f"NVML error {rc}")

    def energy_mj(self) -> int:
        value = ctypes.c_ulonglong()
        self._check(self.lib.nvmlDeviceGetTotalEnergyConsumption(self.handle, ctypes.byref(value)))
        return value.value

    def sm_clock_mhz(self) -> int:
        value = ctypes.c_uint()
        self._check(self.lib.nvmlDeviceGetClockInfo(self.handle, NVML_CLOCK_SM, ctypes.byref(value)))
        return value.value


def contenders(m: int, n: int, k: int) -> list:
    """The shortlist's first config (128x256 cooperative) with its 2-CTA cluster along M
    (B multicast) and along N (A multicast), each in both raster orders, with and
    without whole-tile store buffers. Along M a 128x256 tile reads a fifth less from L2
    per MAC (session 10: the faster pair at every benchmark shape, by up to 3.5%)."""
    base = shortlist(m, n, k, limit=1)[0]
    out = []
    for cluster in ((2, 1), (1, 2)):
        for raster_m in (True, False):
            for buffers in (0, base.whole_tile_buffers()):
                cfg = dataclasses.replace(
                    base, cluster_m=cluster[0], cluster_n=cluster[1], raster_along_m=raster_m,
                    epi_buffers=buffers,
                )  # fmt: skip
                out.append(dataclasses.replace(cfg, swizzle=fitted_swizzle(cfg, m, n)))
    return [c for c in dict.fromkeys(out) if c.invalid_reason() is None]


def sustained(replay, per_replay: int, nvml: Nvml) -> dict:
    """Run ``replay`` (``per_replay`` GEMMs) for about WARM_S, then measure about
    WINDOW_S of it. Replays are counted from a timed first one: the host enqueues far
    faster than they run, so a loop on the host clock would queue minutes of work."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    replay()
    stop.record()
    stop.synchronize()
    once_s = start.elapsed_time(stop) / 1e3
    for _ in range(max(1, round(WARM_S / once_s))):
        replay()
    torch.cuda.synchronize()
    count = max(1, round(WINDOW_S / once_s))
    clocks: list[int] = []
    done = threading.Event()

    def sample() -> None:  # the SM clock through the window, not one reading at its end
        while not done.wait(CLOCK_SAMPLE_S):
            clocks.append(nvml.sm_clock_mhz())

    sampler = threading.Thread(target=sample)
    e0 = nvml.energy_mj()
    sampler.start()
    start.record()
    for _ in range(count):
        replay()
    stop.record()
    stop.synchronize()
    done.set()
    sampler.join()
    e1 = nvml.energy_mj()
    ms = start.elapsed_time(stop)
    gemms = count * per_replay
    mhz = statistics.mean(clocks) if clocks else nvml.sm_clock_mhz()
    return {"ms": ms / gemms, "mj": (e1 - e0) / gemms, "watts": (e1 - e0) / ms, "mhz": mhz}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    nvml, cache = Nvml(), default_cache()
    specs = build_per_shape(contenders)
    # CTAs a persistent launch keeps busy per cluster size: a 2x2 cluster's 4 CTAs must
    # fit in one GPC, which may leave SMs idle (a lead for why 2x2 runs slower). The
    # query needs the driver context that torch creates on first use.
    torch.zeros(1, device="cuda")
    active = {size: size * max_active_clusters(size, torch.cuda.current_device()) for size in (1, 2, 4)}
    result = {**run_info(), "active_ctas_by_cluster_size": active, "rows": []}
    print(f"active CTAs by cluster size: {active}", flush=True)
    for m, n, k in SHAPES:
        a, b = linear_operands(m, n, k)
        ref = torch.mm(a, b)
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        # About 20 ms of GEMMs per replay: the host loop never starves the GPU.
        per_replay = max(1, round(20 / (2 * m * n * k / 650e9)))
        runs, errors = {"cublas": lambda: torch.mm(a, b, out=out)}, {}
        for spec in specs[(m, n, k)]:
            name, kern = spec.config.name(), get_gemm(spec, cache)
            out.fill_(float("nan"))
            kern(a, b, out)
            errors[name] = float(f"{rel_err(out, ref):.3e}")
            if not errors[name] < 1e-2:
                raise AssertionError(f"{name} at {m}x{n}x{k}: rel err {errors[name]}")
            runs[name] = lambda kern=kern: kern(a, b, out)
        replays = {name: graphed(lambda fn=fn: [fn() for _ in range(per_replay)]) for name, fn in runs.items()}
        samples: dict = {name: [] for name in replays}
        for order in rotations(list(replays), ROUNDS):
            for name in order:
                samples[name].append(sustained(replays[name], per_replay, nvml))
        figures = {
            name: {key: round(statistics.mean(s[key] for s in runs_), 4) for key in runs_[0]}
            for name, runs_ in samples.items()
        }
        ours = min((name for name in figures if name != "cublas"), key=lambda name: figures[name]["ms"])
        row = {
            "shape": [m, n, k], "per_replay": per_replay, "figures": figures, "rel_err": errors,
            "best_ours": ours,
            "cublas_over_best_ms": round(figures["cublas"]["ms"] / figures[ours]["ms"], 4),
            "cublas_over_best_mj": round(figures["cublas"]["mj"] / figures[ours]["mj"], 4),
            "tflops": {name: round(2 * m * n * k / f["ms"] / 1e9, 1) for name, f in figures.items()},
        }  # fmt: skip
        report_row(result, row, args.json)


if __name__ == "__main__":
    main()
