"""Kernel builds with a line per kernel as it finishes, and the main job without a GPU:
the default block's CuteDSL kernels compiled ahead of time into the kernel cache."""
from __future__ import annotations

import functools
import threading
import time
from typing import Callable, Iterable

from .. import config
from ..kernels import IDENTITY
from ..runtime import KernelCache, KernelSpec, compiler
from ..runtime.launch import default_cache
from .block import BlockSize


def build_with_progress(
    specs: Iterable[KernelSpec], cache: KernelCache, workers: int, out: Callable[[str], None] = print
) -> dict[KernelSpec, compiler.Built]:
    """``compiler.build_many`` that reports each kernel compiled now (or failed) as it
    finishes, with how many of the whole have finished; cache hits are counted, not named."""
    specs = list(dict.fromkeys(specs))
    finished = 0
    lock = threading.Lock()

    def report(spec: KernelSpec, future) -> None:  # in whichever thread finished the build
        nonlocal finished
        error = future.exception()
        with lock:
            finished += 1
            if error is not None:
                out(f"  [{finished}/{len(specs)}] {spec.describe()}: failed ({type(error).__name__})")
            elif future.result()[1]:
                out(f"  [{finished}/{len(specs)}] {spec.describe()}: compiled in {future.result()[2]:.1f}s")

    futures = []
    for spec in specs:  # a build in this process (one worker) finishes before the next starts
        future = compiler.build_async(spec, cache, workers)
        future.add_done_callback(functools.partial(report, spec))
        futures.append(future)
    return dict(zip(specs, compiler.wait(futures)))


def block_specs(size: BlockSize) -> list[KernelSpec]:
    """The CuteDSL candidates autotuning offers for the block's GEMMs."""
    from ..lowering.gemm_choices import candidate_specs  # loads Inductor

    return list(dict.fromkeys(
        spec
        for _, m, n, k in size.gemms()
        for spec in candidate_specs((m, n, k, 1), "bfloat16", "bfloat16", "k", "k", IDENTITY)
    ))  # fmt: skip


def precompile_block(size: BlockSize, workers: int) -> None:
    """Build the CuteDSL candidates of the block's GEMMs into the kernel cache."""
    specs = block_specs(size)
    cache = default_cache()
    if not cache.persistent:
        raise SystemExit(f"the kernel cache directory {cache.read_only or config.cache_dir or ''} is not "
                         "writable: nothing compiled now would be kept (set INDUCTOR_CUTEDSL_CACHE_DIR)")  # fmt: skip
    print(f"kernel cache {cache.root}: {len(specs)} kernels for the block's GEMMs, {workers} workers", flush=True)
    t0 = time.perf_counter()
    built = build_with_progress(specs, cache, workers, out=functools.partial(print, flush=True))
    fresh = sum(now for _, now, _ in built.values())
    print(f"kernel cache {cache.root}: {fresh} compiled now, {len(specs) - fresh} already cached, "
          f"{time.perf_counter() - t0:.1f}s")  # fmt: skip
