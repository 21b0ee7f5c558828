"""Coordinate descent's first neighbours, compiled ahead in Inductor's compile workers.

With max-autotune, Inductor tunes each Triton pointwise and reduction kernel at the
graph's first call (``CachingAutotuner.coordinate_descent_tuning``): it compiles a
neighbour of the best config so far, times it and moves on, one config after another in
the calling thread. The compiles are most of it, and coordinate descent is the largest
phase of a cold max-autotune compile on both sides (docs/findings.md). Read against
torch 2.11 to 2.15: the tuner is serial in each.

Which configs the tuner tries first is known as soon as a kernel has loaded with the one
config it starts from: each tunable field one step either way (its first round). Those
compiles go to Inductor's compile workers at once, which fill Triton's on-disk cache;
when the tuner reaches one, its compile waits for that worker's, then is a cache hit.
Each config the tuner tries is one step from its best so far (``CoordescTuner.autotune``:
after an improvement the remaining fields, then whole rounds, step from the new best), so
when a config improves on the best, the untried neighbours of the new best are submitted
too (``follow_improvements``): every later compile of the tuning was then started ahead.
What the tuner tries, times and picks is untouched: only where and when a compile runs.
A failure anywhere here loses the head start and nothing else.
"""

from __future__ import annotations

import copy
import functools
import logging
import os
import types
from typing import Any

log = logging.getLogger("inductor_cutedsl.compile")

#: How long a tuner's compile waits for a worker compiling the same config, seconds
#: (Triton compiles a config in about a second; a job may queue behind the others).
#: Past it, or on any failure, the compile runs here as it would have, and this process
#: prefetches and waits no more (``_stalled``): stuck workers cost one wait, not one a config.
WAIT_S = 30.0
_stalled = False


def install() -> Any:
    """Wrap ``CachingAutotuner.precompile`` (where a loaded kernel gets its launchers) and
    ``_precompile_config`` (where the tuner compiles a config); returns what ``restore``
    needs, or None where nothing was changed."""
    try:
        from torch._inductor.runtime import triton_heuristics
    except ImportError:  # no Triton: nothing is tuned
        return None
    cls = triton_heuristics.CachingAutotuner
    precompile = cls.__dict__.get("precompile")
    precompile_config = cls.__dict__.get("_precompile_config")
    tuning = cls.__dict__.get("coordinate_descent_tuning")
    if None in (precompile, precompile_config, tuning) or getattr(precompile, "prefetches", False):
        return None

    def wrapped_precompile(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = precompile(self, *args, **kwargs)
        warm_cache_only = kwargs.get("warm_cache_only", args[0] if args else False)
        if not warm_cache_only:  # a compile worker's own precompile: nothing is tuned there
            _try(prefetch, self)
        return out

    def wrapped_precompile_config(self: Any, cfg: Any, *args: Any, **kwargs: Any) -> Any:
        _await(self, cfg)
        return precompile_config(self, cfg, *args, **kwargs)

    untuned = never_tuned()

    def wrapped_tuning(self: Any, launcher: Any, *args: Any, **kwargs: Any) -> Any:
        # ``run`` asks a template kernel at every launch (its config is never marked as
        # found by the tuner), and the tuner answers at once: so must this, or each
        # launch of a Triton GEMM pays for the checks below. ``run`` looks the tuner up on
        # the kernel first: bound there, its later launches call the tuner itself, past
        # every wrapper (the kernel is no longer pickled once it launches).
        if self.heuristic_type in untuned:
            self.coordinate_descent_tuning = types.MethodType(tuning, self)
            return tuning(self, launcher, *args, **kwargs)
        # A kernel that loaded with several configs starts from the one autotuning picked
        # at this first call: its first round is known only now.
        _try(prefetch, self)
        _try(follow_improvements, self)
        try:
            return tuning(self, launcher, *args, **kwargs)
        finally:
            _try(stop_following, self)

    wrapped_precompile.prefetches = True  # type: ignore[attr-defined]
    cls.precompile = wrapped_precompile
    cls._precompile_config = wrapped_precompile_config
    cls.coordinate_descent_tuning = wrapped_tuning
    return precompile, precompile_config, tuning


def restore(originals: Any) -> None:
    if originals is not None:
        from torch._inductor.runtime import triton_heuristics

        cls = triton_heuristics.CachingAutotuner
        cls.precompile, cls._precompile_config, cls.coordinate_descent_tuning = originals


def _try(fn: Any, autotuner: Any, *args: Any) -> None:
    try:
        fn(autotuner, *args)
    except Exception as exc:  # only a head start
        log.debug("no coordinate-descent prefetch for %s: %s", _name(autotuner), exc)


def _name(autotuner: Any) -> str:
    return str(autotuner.inductor_meta.get("kernel_name", "a Triton kernel"))


def will_tune(autotuner: Any) -> bool:
    """Whether the kernel's first call will run coordinate descent from its one config
    (the tuner's own conditions, ``CachingAutotuner.run`` and
    ``coordinate_descent_tuning``)."""
    meta = autotuner.inductor_meta
    if not meta.get("coordinate_descent_tuning") or not _eligible(autotuner):
        return False
    launchers = getattr(autotuner, "launchers", None) or []
    return len(launchers) == 1 and not getattr(launchers[0].config, "found_by_coordesc", False)


def _eligible(autotuner: Any) -> bool:
    """Whether the tuner would tune this kind of kernel: its own rule where the release
    has one (``CachingAutotuner._should_coordesc_tune``, 2.14 on, which also leaves
    reductions under strict numerics alone), else 2.11's checks. The rule's function
    is called, not the cached property read: reading it would store the answer on the
    kernel, which is pickled later."""
    from torch._inductor.runtime.hints import HeuristicType
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    rule = CachingAutotuner.__dict__.get("_should_coordesc_tune")
    if isinstance(rule, functools.cached_property):
        return bool(rule.func(autotuner))
    kind = autotuner.heuristic_type
    if kind in never_tuned():
        return False
    reductions = (HeuristicType.REDUCTION, HeuristicType.PERSISTENT_REDUCTION, HeuristicType.SPLIT_SCAN)
    return not (getattr(autotuner, "deterministic_mode", False) and kind in reductions)


@functools.cache
def never_tuned() -> frozenset:
    """The kinds of kernel the tuner returns untouched in every release from 2.11 to 2.15
    (``coordinate_descent_tuning``; 2.14 on through ``_should_coordesc_tune``): a wrapper
    of the tuner passes them straight through."""
    from torch._inductor.runtime.hints import HeuristicType

    return frozenset((HeuristicType.TEMPLATE, HeuristicType.USER_AUTOTUNE, HeuristicType.FIXED))


def first_round(tuner: Any, start: Any) -> list[Any]:
    """The configs coordinate descent tries first from ``start``: each tunable field moved
    to each of its neighbour values, the others kept (``CoordescTuner.autotune``)."""
    from torch._inductor.runtime.coordinate_descent_tuner import get_field, set_field

    out = []
    for name in tuner.tunable_fields:
        value = get_field(start, name)
        if value is None:
            continue
        for neighbour in tuner.get_neighbour_values(name, value):
            cfg = copy.deepcopy(start)
            set_field(cfg, name, neighbour)
            if tuner.is_valid_config(cfg):
                out.append(cfg)
    return out


def fusion_benchmark_kernel(autotuner: Any) -> bool:
    """Whether the kernel is one Inductor generated to time a fusion (``benchmark_fused_nodes``):
    its name is still the placeholder a graph's kernel has replaced by its own."""
    from torch._inductor.utils import Placeholder

    return autotuner.inductor_meta.get("kernel_name") == str(Placeholder.DESCRIPTIVE_NAME)


def prefetch(autotuner: Any) -> None:
    """Submit the compiles of the kernel's first coordinate-descent round to Inductor's
    compile workers, where it will be tuned and they are up.

    A fusion benchmark's kernel is tuned as stock tunes it: Inductor's fusion benchmark
    (``speedup_by_fusion``) has just filled the workers with its fused templates'
    compiles, and a compile queued behind them waits longer than the tuning thread takes
    to compile it (docs/findings.md, Compile time)."""
    if _stalled or not will_tune(autotuner) or getattr(autotuner, "_prefetched", None) is not None:
        return
    if fusion_benchmark_kernel(autotuner):
        return
    from torch._inductor.async_compile import AsyncCompile
    from torch._inductor.runtime.triton_heuristics import triton_config_to_hashable

    filename = autotuner.filename
    if not filename or not os.path.exists(filename) or not AsyncCompile.use_process_pool():
        return
    with open(filename) as f:
        source = f.read()
    start = autotuner.launchers[0].config
    autotuner._prefetched = {}
    autotuner._prefetch_source = source
    autotuner._prefetch_seen = {triton_config_to_hashable(start)}  # compiled already
    _submit_neighbours(autotuner, start)


def _submit_neighbours(autotuner: Any, best: Any) -> None:
    """Submit the compiles of ``best``'s neighbours (``first_round``) not submitted or
    compiled for this kernel yet."""
    from torch._inductor.async_compile import AsyncCompile
    from torch._inductor.runtime.triton_heuristics import triton_config_to_hashable

    pool = AsyncCompile.process_pool()
    env, settings = worker_settings()
    seen, jobs = autotuner._prefetch_seen, autotuner._prefetched
    submitted = 0
    for cfg in first_round(autotuner.coordesc_tuner, best):
        key = triton_config_to_hashable(cfg)
        if key in seen:
            continue
        seen.add(key)
        jobs[key] = pool.submit(compile_configs, _name(autotuner), autotuner._prefetch_source, [cfg], env, settings)
        submitted += 1
    log.debug("%s: %d coordinate-descent configs compiling ahead", _name(autotuner), submitted)


def follow_improvements(autotuner: Any) -> None:
    """Make the kernel's tuner submit the untried neighbours of each config that improves
    on its best (a prefetched kernel's only: one the prefetch skipped is tuned as stock
    tunes it). The tuner's ``compare_config`` is wrapped on this tuner alone."""
    tuner = getattr(autotuner, "coordesc_tuner", None)
    if tuner is None or getattr(autotuner, "_prefetched", None) is None or "compare_config" in vars(tuner):
        return
    compare = tuner.compare_config

    def compare_config(func: Any, candidate: Any, best: Any, best_timing: float) -> Any:
        better, timing = compare(func, candidate, best, best_timing)
        if better and not _stalled:
            _try(_submit_neighbours, autotuner, candidate)
        return better, timing

    tuner.compare_config = compare_config


def stop_following(autotuner: Any) -> None:
    """Undo ``follow_improvements`` once the tuning has ended (a kernel may be pickled
    later, and a closure would not pickle)."""
    tuner = getattr(autotuner, "coordesc_tuner", None)
    if tuner is not None:
        vars(tuner).pop("compare_config", None)


#: What Inductor passes its workers with each Triton compile (``AsyncCompile.triton``), so
#: that they key and place the compile as this process would.
_WORKER_ENV = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TRITON_LIBDEVICE_PATH")


def worker_settings() -> tuple[dict[str, str | None], dict[str, Any]]:
    """(environment, Inductor settings) for a compile in the workers, as Inductor's own.

    torch 2.11's worker sets each variable it is given, so only those set here are sent.
    From 2.14 on the worker removes one sent as None, and compares each job's cache
    variables with the job before it, clearing its caches where they differ: every
    variable is sent, None where unset, as Inductor sends them, or each switch between
    Inductor's jobs and ours would clear the worker's caches."""
    from torch._inductor import async_compile
    from torch._inductor import config as inductor_config
    from torch._inductor.runtime import compile_tasks

    set_libdevice = getattr(async_compile, "_set_triton_libdevice_path", None)  # torch 2.14 on
    if set_libdevice is not None:
        set_libdevice()
    env: dict[str, str | None]
    if hasattr(compile_tasks, "_apply_subprocess_env_and_clear_caches"):
        env = {v: os.environ.get(v) for v in _WORKER_ENV}
    else:
        env = {v: os.environ[v] for v in _WORKER_ENV if v in os.environ}
    return env, {"use_static_triton_launcher": inductor_config.use_static_triton_launcher}


def _await(autotuner: Any, cfg: Any) -> None:
    jobs = getattr(autotuner, "_prefetched", None)
    if not jobs:
        return
    from torch._inductor.runtime.triton_heuristics import triton_config_to_hashable

    global _stalled
    job = jobs.pop(triton_config_to_hashable(cfg), None)
    if job is None or _stalled:
        return
    try:
        job.result(timeout=WAIT_S)
    except Exception as exc:  # compiled here, as it would have been
        _stalled = True
        jobs.clear()
        log.warning("%s: a compile ahead of coordinate descent failed (%s); no more are made", _name(autotuner), exc)


def compile_configs(
    kernel_name: str, source: str, configs: list[Any], env: dict[str, str | None], settings: dict[str, Any]
) -> None:
    """In a compile worker: compile kernel ``kernel_name`` of module ``source`` for
    ``configs`` as Inductor's workers compile a kernel (``_worker_compile_triton``), which
    leaves them in Triton's on-disk cache. A config that does not compile (too many
    registers or too much shared memory, as coordinate descent meets) is no failure of the
    job: the tuner's own compile of it fails the same way, and the tuner skips it."""
    from torch._inductor.runtime.compile_tasks import _worker_compile_triton

    def load() -> Any:
        from torch._inductor.codecache import _load_triton_kernel_from_source

        kernel = _load_triton_kernel_from_source(kernel_name, source)
        kernel.configs = list(configs)
        kernel.compile_results = []
        return kernel

    try:
        _worker_compile_triton(load, env, settings)
    except Exception as exc:
        log.debug("%s: a config did not compile ahead: %s", kernel_name, exc)
