"""Compile kernel specs to exported objects, in this process or in GPU-blind workers.

``cute.compile`` is not thread-safe, so parallel compilation uses worker
processes (``workers``). Each worker goes through the same :class:`KernelCache`,
so workers, xdist processes and later runs share one build per key.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from . import remote
from . import workers as workers_mod
from .cache import KernelCache
from .spec import KernelSpec

log = logging.getLogger("inductor_cutedsl.compile")

#: Wall seconds this process waited for kernel builds (``wait``).
stats = {"wait_s": 0.0}
_stats_lock = threading.Lock()

Built = tuple[Path, bool, float]  # (object path, compiled now, seconds)


def export_object(spec: KernelSpec, out_dir: Path, name: str) -> None:
    """Trace, compile and export ``spec`` to ``out_dir/name.o`` (no GPU needed)."""
    import cutlass.cute as cute

    from ..kernels.epilogue_math import EpilogueError
    from ..kernels.sm90_gemm import Sm90Gemm

    t0 = time.perf_counter()
    try:
        gemm = Sm90Gemm(
            spec.config,
            spec.ab_dtype,
            spec.out_dtype,
            spec.a_major,
            spec.b_major,
            spec.epilogue,
            spec.dual,
            spec.promote,
        )
        compiled = cute.compile(gemm.make_entry(), *gemm.fake_args())
    except Exception as exc:
        # The DSL may wrap an error of the epilogue's source in its own (coloured) one.
        cause = _find_cause(exc, EpilogueError)
        if cause is None or cause is exc:
            raise
        raise cause.with_traceback(cause.__traceback__) from None
    compiled.export_to_c(str(out_dir), name, function_prefix=spec.symbol())
    log.info("compiled %s in %.2fs", spec.describe(), time.perf_counter() - t0)


def _find_cause(exc: BaseException, kind: type) -> BaseException | None:
    """The first exception of type ``kind`` in ``exc``'s cause/context chain (itself included)."""
    seen = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        if isinstance(link, kind):
            return link
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    return None


def build(spec: KernelSpec, cache: KernelCache) -> tuple[Path, bool]:
    """Object path for ``spec`` from the cache (or the remote tier), compiling it on a miss."""
    key = spec.key()
    hit = cache.lookup(key) or _from_remote(key, cache, spec.describe())
    if hit is not None:
        return hit, False
    return _compile_into(spec, cache)


def _compile_into(spec: KernelSpec, cache: KernelCache) -> tuple[Path, bool]:
    """Compile ``spec`` into ``cache`` here (unless another process just did), publishing it."""
    path, built = cache.get_or_build(spec.key(), lambda d, n: export_object(spec, d, n), spec.describe())
    if built:
        _publish(spec.key(), cache)
    return path, built


def _from_remote(key: str, cache: KernelCache, what: str) -> Path | None:
    """``key``'s object from the remote tier, kept in ``cache``; None where it has none."""
    tier = remote.remote()
    data = tier.fetch(key) if tier is not None else None
    return None if data is None else cache.put(key, data, what)[0]


def _publish(key: str, cache: KernelCache) -> None:
    """Offer a kernel built here to the remote tier (where there is one)."""
    tier = remote.remote()
    if tier is not None:
        data = cache.read(key)
        if data is not None:
            tier.publish(key, data)


_inflight: dict[tuple[str, str], concurrent.futures.Future] = {}
_inflight_lock = threading.Lock()
_dispatcher: concurrent.futures.ThreadPoolExecutor | None = None
_dispatcher_size = 0


def _dispatch(workers: int) -> concurrent.futures.ThreadPoolExecutor:
    """Threads that hand specs to worker processes (one per worker: each blocks on one)."""
    global _dispatcher, _dispatcher_size
    if _dispatcher is None or _dispatcher_size < workers:
        _dispatcher = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="inductor_cutedsl_build")
        _dispatcher_size = workers
    return _dispatcher


def _build_in_worker(spec: KernelSpec, cache: KernelCache, workers: int) -> Built:
    path, built, secs = workers_mod.pool(workers).build(spec.to_json(), str(cache.root))
    if built:
        with _stats_lock:
            cache.count_build(spec.key())
        _publish(spec.key(), cache)
    return path, built, secs


def build_async(spec: KernelSpec, cache: KernelCache, workers: int) -> concurrent.futures.Future:
    """A future of ``spec``'s build (a ``Built``), started now.

    With ``workers`` > 1 and a persistent cache, the build runs in a worker process
    and one spec in flight is shared by every caller. Otherwise it runs here, before
    returning: ``cute.compile`` is not thread-safe, so it never runs in a thread.
    """
    key = spec.key()
    hit = cache.lookup(key) or _from_remote(key, cache, spec.describe())
    if hit is not None or workers <= 1 or not cache.persistent:
        done: concurrent.futures.Future = concurrent.futures.Future()
        if hit is not None:
            done.set_result((hit, False, 0.0))
            return done
        t0 = time.perf_counter()
        try:
            path, built = _compile_into(spec, cache)
            done.set_result((path, built, time.perf_counter() - t0))
        except Exception as exc:
            done.set_exception(exc)
        return done
    slot = (str(cache.root), key)
    with _inflight_lock:
        fut = _inflight.get(slot)
        if fut is not None:
            return fut
        fut = _dispatch(workers).submit(_build_in_worker, spec, cache, workers)
        _inflight[slot] = fut
    # Outside the lock: a build that is already done runs the callback here, at once.
    fut.add_done_callback(lambda done: _forget(slot, done))
    return fut


def _forget(slot: tuple[str, str], done: concurrent.futures.Future) -> None:
    with _inflight_lock:
        if _inflight.get(slot) is done:  # not a later build of the same key
            del _inflight[slot]


def wait_idle(timeout: float | None = None) -> int:
    """Wait until no build handed to a worker is in flight (speculative ones included),
    at most ``timeout`` seconds; returns how many were waited for. Builds take CPU
    from the process: anything timed on the host waits for them first."""
    with _inflight_lock:
        pending = list(_inflight.values())
    concurrent.futures.wait(pending, timeout=timeout)
    return len(pending)


def wait(futures: Iterable[concurrent.futures.Future]) -> list[Built]:
    """The builds' results (raising the first failure), counting the time spent waiting."""
    t0 = time.perf_counter()
    try:
        return [f.result() for f in futures]
    finally:
        with _stats_lock:
            stats["wait_s"] += time.perf_counter() - t0


def build_many(specs: Iterable[KernelSpec], cache: KernelCache, workers: int) -> dict[KernelSpec, Built]:
    """Build every spec (cache hits are free), ``workers`` at a time in worker processes.

    Returns spec -> (object path, compiled now, seconds). Raises if any spec failed.
    """
    specs = list(dict.fromkeys(specs))
    futures = [build_async(s, cache, workers) for s in specs]
    out = dict(zip(specs, wait(futures)))
    if any(built for _, built, _ in out.values()):
        log.info("built %d CuteDSL kernels", sum(built for _, built, _ in out.values()))
    return out
