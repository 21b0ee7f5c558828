"""Compile kernel specs to exported objects, in this process or in GPU-blind workers.

``cute.compile`` is not thread-safe, so parallel compilation uses worker
processes (``workers``). Each worker goes through the same :class:`KernelCache`,
so workers, xdist processes and later runs share one build per key.
"""
from __future__ import annotations

import concurrent.futures
import logging
import time
from pathlib import Path
from typing import Iterable

from . import workers as workers_mod
from .cache import KernelCache
from .spec import KernelSpec

log = logging.getLogger("inductor_cutedsl.compile")

#: Wall seconds this process spent waiting in ``build_many`` and kernels it compiled.
stats = {"wait_s": 0.0, "compiled": 0}


def export_object(spec: KernelSpec, out_dir: Path, name: str) -> None:
    """Trace, compile and export ``spec`` to ``out_dir/name.o`` (no GPU needed)."""
    from .. import arch  # noqa: F401  (pins CUTE_DSL_ARCH before cutlass)
    import cutlass.cute as cute

    from ..kernels.sm90_gemm import Sm90Gemm

    t0 = time.perf_counter()
    gemm = Sm90Gemm(
        spec.config, spec.ab_dtype, spec.out_dtype, spec.a_major, spec.b_major, spec.epilogue
    )
    compiled = cute.compile(gemm.make_entry(), *gemm.fake_args())
    compiled.export_to_c(str(out_dir), name, function_prefix=spec.symbol())
    log.info("compiled %s in %.2fs", spec.describe(), time.perf_counter() - t0)


def build(spec: KernelSpec, cache: KernelCache) -> tuple[Path, bool]:
    """Object path for ``spec`` from the cache, compiling it on a miss."""
    return cache.get_or_build(spec.key(), lambda d, n: export_object(spec, d, n))


def build_many(
    specs: Iterable[KernelSpec], cache: KernelCache, workers: int
) -> dict[KernelSpec, tuple[Path, bool, float]]:
    """Build every spec (cache hits are free); ``workers`` > 1 compiles in worker processes.

    Returns spec -> (object path, compiled now, seconds). Raises if any spec failed.
    """
    specs = list(dict.fromkeys(specs))
    misses = [s for s in specs if cache.lookup(s.key()) is None]
    out: dict[KernelSpec, tuple[Path, bool, float]] = {
        s: (cache.object_path(s.key()), False, 0.0) for s in specs if s not in misses
    }
    t0 = time.perf_counter()
    try:
        if workers <= 1 or len(misses) <= 1 or not cache.persistent:
            for s in misses:
                t1 = time.perf_counter()
                path, built = build(s, cache)
                out[s] = (path, built, time.perf_counter() - t1)
            return out
        pool = workers_mod.pool(workers)
        with concurrent.futures.ThreadPoolExecutor(min(workers, len(misses))) as threads:
            futures = {threads.submit(pool.build, s.to_json(), str(cache.root)): s for s in misses}
            for fut in concurrent.futures.as_completed(futures):
                path, built, secs = fut.result()
                out[futures[fut]] = (path, built, secs)
                cache.builds += int(built)
        return out
    finally:
        if misses:
            stats["wait_s"] += time.perf_counter() - t0
            stats["compiled"] += sum(1 for s in misses if s in out and out[s][1])
            log.info("built %d CuteDSL kernels in %.2fs", len(misses), time.perf_counter() - t0)
