"""Where a compiled block's GPU time goes: device time per kernel under torch.profiler.

Diagnostic only (the job's figures come from ``side_by_side``): it shows which
kernels differ between the stock and our compiled block.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile


def kernel_times(
    fn: Callable[[], object], calls: int = 10, top: int | None = 12, name_chars: int | None = 90
) -> list[dict]:
    """The ``top`` GPU kernels of one call of ``fn`` (all of them if None), longest
    first: name (its first ``name_chars`` characters; whole if None), launches per call
    and device milliseconds per call."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    rows = [
        {"kernel": e.key[:name_chars], "launches": e.count / calls,
         "ms": round(e.self_device_time_total / calls / 1e3, 4)}  # fmt: skip
        for e in prof.key_averages()
        if e.device_type == DeviceType.CUDA and e.self_device_time_total > 0
    ]
    return sorted(rows, key=lambda r: -r["ms"])[:top]


#: In the GPU names of our kernels (see Sm90Gemm.device_name).
CUTEDSL_KERNEL = "inductor_cutedsl"


def ran_cutedsl(rows: list[dict]) -> bool:
    """Whether ``kernel_times`` rows include one of our kernels."""
    return any(CUTEDSL_KERNEL in row["kernel"] for row in rows)
