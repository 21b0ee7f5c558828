"""Compile kernel specs to exported objects, in this process or in GPU-blind workers.

``cute.compile`` is not thread-safe, so parallel compilation uses processes
(spawned, with ``CUTE_DSL_ARCH`` pinned so they never look for a GPU). Each
worker goes through the same :class:`KernelCache`, so workers, xdist processes
and later runs share one build per key.
"""
from __future__ import annotations

import atexit
import concurrent.futures
import logging
import multiprocessing
import os
import threading
import time
from pathlib import Path
from typing import Iterable

from ..arch import ARCH
from .cache import KernelCache
from .spec import KernelSpec

log = logging.getLogger("inductor_cutedsl.compile")


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


_pool: concurrent.futures.ProcessPoolExecutor | None = None
_pool_size = 0
_pool_lock = threading.Lock()


def _worker_pool(workers: int) -> concurrent.futures.ProcessPoolExecutor:
    """One pool for the process's lifetime: spawning workers (each imports torch and the
    DSL) costs seconds, so every GEMM a model lowers shares them."""
    global _pool, _pool_size
    with _pool_lock:
        if _pool is None or _pool_size < workers:
            if _pool is not None:
                _pool.shutdown(wait=True)
            _pool = concurrent.futures.ProcessPoolExecutor(
                max_workers=workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_worker_init,
            )
            _pool_size = workers
        return _pool


@atexit.register
def _shutdown_pool() -> None:
    if _pool is not None:
        _pool.shutdown(wait=False, cancel_futures=True)


def _worker_init() -> None:
    os.environ["CUTE_DSL_ARCH"] = os.environ.get("CUTE_DSL_ARCH", ARCH)


def _worker_build(spec: KernelSpec, root: str) -> tuple[str, bool, float]:
    t0 = time.perf_counter()
    path, built = build(spec, KernelCache(root))
    return str(path), built, time.perf_counter() - t0


def build_many(
    specs: Iterable[KernelSpec], cache: KernelCache, workers: int
) -> dict[KernelSpec, tuple[Path, bool, float]]:
    """Build every spec (cache hits are free); ``workers`` > 1 compiles in processes.

    Returns spec -> (object path, compiled now, seconds).
    """
    specs = list(dict.fromkeys(specs))
    misses = [s for s in specs if cache.lookup(s.key()) is None]
    out: dict[KernelSpec, tuple[Path, bool, float]] = {
        s: (cache.object_path(s.key()), False, 0.0) for s in specs if s not in misses
    }
    if workers <= 1 or len(misses) <= 1 or not cache.persistent:
        for s in misses:
            t0 = time.perf_counter()
            path, built = build(s, cache)
            out[s] = (path, built, time.perf_counter() - t0)
        return out
    pool = _worker_pool(workers)
    futures = {pool.submit(_worker_build, s, str(cache.root)): s for s in misses}
    for fut in concurrent.futures.as_completed(futures):
        path, built, secs = fut.result()
        out[futures[fut]] = (Path(path), built, secs)
        cache.builds += int(built)
    return out
