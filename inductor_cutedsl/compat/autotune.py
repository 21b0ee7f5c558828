"""Autotuning: ATen's choices, benchmark requests, the feedback hook and the benchmark hook.

Read against torch 2.11 to 2.15 (``AlgorithmSelectorCache.benchmark_choices`` takes
``is_collective`` in each).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any


def aten_choice(op_name: str) -> Any:
    """Inductor's ATen (cuBLAS) ExternKernelChoice for a GEMM op."""
    from torch._inductor.kernel import bmm, mm, mm_plus_mm

    return {
        "mm": mm.aten_mm,
        "addmm": mm.aten_addmm,
        "bmm": bmm.aten_bmm,
        "baddbmm": bmm.aten_baddbmm,
        "mm_plus_mm": mm_plus_mm.aten_mm_plus_mm,
    }[op_name]


def aten_dtype_choice(op_name: str) -> Any:
    """ATen's ExternKernelChoice for mm / bmm with an ``out_dtype`` of their own."""
    from torch._inductor.kernel import bmm, mm

    return {"mm": mm.aten_mm_dtype, "bmm": bmm.aten_bmm_dtype}[op_name]


@contextlib.contextmanager
def feedback_saver(fn: Callable[..., None]) -> Iterator[None]:
    """Call ``fn(timings, name, input_nodes, choices, profile_fn, precompile_times)``
    after every autotuning benchmark inside the block."""
    from torch._inductor import select_algorithm

    cache = select_algorithm.get_algorithm_selector_cache()
    cache.add_feedback_saver(fn)
    try:
        yield
    finally:
        cache.feedback_saver_fns.remove(fn)


def is_extern_caller(choice: Any) -> bool:
    """Whether an autotuning choice is an ATen (extern kernel) call, cuBLAS for GEMMs."""
    from torch._inductor.select_algorithm import ExternKernelCaller

    return isinstance(choice, ExternKernelCaller)


def choice_run_fn(choice: Any) -> Callable[[], Any]:
    """A function running autotuning choice ``choice`` (ATen, Triton or ours) once, on
    random inputs and an output laid out as its own benchmark request's."""
    request = choice.bmreq
    inputs = [meta.to_tensor() for meta in request.input_tensor_meta]
    return request.make_run_fn(*inputs, out=request.output_tensor_meta.to_tensor())


def preserve_rng_state() -> contextlib.AbstractContextManager:
    """Random benchmark inputs must not move the user's RNG (as in Inductor's autotuning)."""
    from torch._dynamo.utils import preserve_rng_state as preserve

    return preserve()


def install_benchmark_hook(adjust: Callable[[dict, Callable[[Any], Callable[[], Any]]], dict]) -> Any:
    """Pass every autotuning pass's timings through ``adjust(timings, run_fn)``, where
    ``run_fn(choice)`` makes a function that runs one choice's kernel on the inputs
    Inductor timed it on (its benchmark request's run function; a choice with a
    ``benchmark_inputs()`` method gets those inputs instead). Returns what
    ``restore_benchmark_hook`` needs."""
    from torch._inductor.select_algorithm import AlgorithmSelectorCache

    original = AlgorithmSelectorCache.__dict__["benchmark_choices"]

    def benchmark_choices(cls, choices, autotune_args, is_collective=False):
        timings = original.__func__(cls, choices, autotune_args, is_collective)
        if is_collective:
            return timings

        def run_fn(choice):
            inputs, out = autotune_args.get_benchmark_tensors(cls._is_extern(choice)).unpack()
            own = getattr(choice, "benchmark_inputs", None)
            return choice.bmreq.make_run_fn(*(own() if own else inputs), out=out)

        return adjust(timings, run_fn)

    AlgorithmSelectorCache.benchmark_choices = classmethod(benchmark_choices)
    return original


def restore_benchmark_hook(original: Any) -> None:
    from torch._inductor.select_algorithm import AlgorithmSelectorCache

    AlgorithmSelectorCache.benchmark_choices = original


#: torch releases whose static autotuners drop a cached coordinate-descent result: from
#: 2.13 (read in its source) the warm path keeps it; 2.12's is unread, and the carry is a
#: no-op where the original already kept the result.
_DROPS_COORDESC_BEFORE = (2, 13)


def carry_coordinate_descent() -> Any:
    """Make a later compile keep the configs coordinate descent found; returns what
    ``restore_coordinate_descent`` needs (None where nothing was changed).

    With max-autotune, Inductor tunes each Triton pointwise and reduction kernel by
    coordinate descent at the graph's first call and saves the winner in its autotune
    cache, marked as found by it, so that a later compile of the same kernel runs the
    winner untuned. Three stock bugs tune it again, which costs compile time (coordinate
    descent is the largest phase of a cold compile, docs/findings.md) and, since the
    tuner's timings are the host's, leaves another config each time:

    * a kernel compiled in Inductor's compile workers reads the winner there and comes
      back pickled; ``triton.Config`` restores its own fields only, so the mark is lost
      (checked with torch 2.11 and triton 3.6, torch 2.14 and triton 3.8; neither sets
      it again on this path) and the first call tunes again from the winner: the mark is
      set again as the kernel is unpickled (``mark_cached_winner``);
    * a kernel loaded from the FX graph cache as a static autotuner reads the winner in
      ``recheck_autotune_cache``; on every release to 2.15 the autotuner was pickled
      with the kernel's path on the machine that compiled it, so it looks for the entry
      in that machine's cache directory, not in this one's, where torch's portable
      artifacts were loaded: the path is re-homed first (``rehome_kernel_path``);
    * before 2.13 that warm path takes the cached config only if it compiled several,
      and then without its mark; and a reduction whose cached winner uses many
      registers is scaled again (``_dynamic_scale_rblock``) and so tuned again.

    These are fixes of stock's, not a speed of ours: the benchmarks give fair stock the
    same fixes."""
    try:
        from torch._inductor.runtime import triton_heuristics
    except ImportError:  # no Triton: nothing is tuned
        return None

    from . import releases

    cls = triton_heuristics.CachingAutotuner
    originals = {}
    unpickle = cls.__dict__.get("restore_after_unpickle")
    if unpickle is not None and not getattr(unpickle, "carries_coordesc", False):

        def restore_after_unpickle(self: Any, *args: Any, **kwargs: Any) -> Any:
            out = unpickle(self, *args, **kwargs)
            try:
                mark_cached_winner(self)
            except Exception as exc:  # the kernel is left as stock leaves it: tuned again
                from ..errors import fallback

                fallback("tuned config", _kernel_name(self), exc)
            return out

        restore_after_unpickle.carries_coordesc = True  # type: ignore[attr-defined]
        cls.restore_after_unpickle = restore_after_unpickle
        originals["restore_after_unpickle"] = unpickle

    release = releases.torch_release()
    original = cls.__dict__.get("recheck_autotune_cache")
    if release is None or original is None or getattr(original, "carries_coordesc", False):
        return originals or None
    drops = release < _DROPS_COORDESC_BEFORE
    original_scale: Any = cls.__dict__.get("_dynamic_scale_rblock") if drops else None
    if drops and original_scale is None:
        return originals or None

    def recheck_autotune_cache(self: Any, reload_kernel_from_src: Callable[[], Any]) -> None:
        # The cache is keyed on the configs compiled cold, which the original may narrow.
        compiled = [result.config for result in self.compile_results]
        try:
            rehome_kernel_path(self)
        except Exception as exc:  # the entry is looked for where stock looks: tuned again
            _fell_back(self, exc)
        original(self, reload_kernel_from_src)
        if not drops:
            return
        try:
            keep_tuned_config(self, reload_kernel_from_src, compiled)
        except Exception as exc:  # the kernel is left as the original left it: tuned again
            _fell_back(self, exc)

    def _dynamic_scale_rblock(self: Any) -> None:
        # A reduction's cached winner was chosen cold among the scaled configs: scaling it
        # again would add a config, autotune the two and drop the winner's coordinate-
        # descent mark, so that it is tuned again (torch 2.13 on returns here too).
        if (getattr(self, "autotune_cache_info", None) or {}).get("autotune_cache_state") == "hit":
            return
        original_scale(self)

    recheck_autotune_cache.carries_coordesc = True  # type: ignore[attr-defined]
    cls.recheck_autotune_cache = recheck_autotune_cache
    originals["recheck_autotune_cache"] = original
    if drops:
        _dynamic_scale_rblock.carries_coordesc = True  # type: ignore[attr-defined]
        cls._dynamic_scale_rblock = _dynamic_scale_rblock
        originals["_dynamic_scale_rblock"] = original_scale
    return originals


def mark_cached_winner(autotuner: Any) -> None:
    """Mark a kernel's one config as found by coordinate descent where the kernel's
    autotune cache holds it as the winner coordinate descent found (the entry its
    compile read: ``autotune_cache_state`` "hit"), so that its first call runs it
    untuned, as the compile meant. Any other kernel is left as it is."""
    from torch._inductor.runtime.triton_heuristics import triton_config_to_hashable

    meta = autotuner.inductor_meta
    if not meta.get("coordinate_descent_tuning"):
        return
    if (getattr(autotuner, "autotune_cache_info", None) or {}).get("autotune_cache_state") != "hit":
        return
    results = getattr(autotuner, "compile_results", None) or []
    if len(results) != 1 or getattr(results[0].config, "found_by_coordesc", False):
        return
    # The hook is the entry's own AutotuneCache (``save``, bound), keyed on the configs
    # the kernel was generated with.
    cache = getattr(getattr(autotuner, "save_cache_hook", None), "__self__", None)
    if cache is None:
        return
    config = results[0].config
    best = cache.read_best(meta, [config])
    if best is None or not getattr(best, "found_by_coordesc", False):
        return
    wanted = triton_config_to_hashable(best)
    if triton_config_to_hashable(config) != wanted:
        return
    config.found_by_coordesc = True
    for launcher in getattr(autotuner, "launchers", None) or []:
        if triton_config_to_hashable(launcher.config) == wanted:
            launcher.config.found_by_coordesc = True


def _kernel_name(autotuner: Any) -> str:
    return str(autotuner.inductor_meta.get("kernel_name", "a Triton kernel"))


def _fell_back(autotuner: Any, exc: Exception) -> None:
    from ..errors import fallback

    fallback("warm start", _kernel_name(autotuner), exc)


def rehome_kernel_path(autotuner: Any) -> None:
    """Point a static autotuner's kernel path into this process's Inductor cache directory.

    Inductor keeps a kernel's source at ``CACHE_DIR/SUB/NAME.py`` (``codecache.get_path``)
    and its autotune entry beside it; the portable artifacts name the entry by ``SUB/FILE``
    alone and load it under this process's ``CACHE_DIR``. A path pickled elsewhere, under
    another user's or job's cache directory, would miss it. The last two parts are the
    source's hash, the same on every machine, so only the directory changes."""
    filename = autotuner.filename
    if not filename:
        return
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    sub, name = os.path.split(filename)
    local = os.path.join(cache_dir(), os.path.basename(sub), name)
    if local != filename:
        autotuner.filename = local


def restore_coordinate_descent(originals: Any) -> None:
    if originals:
        from torch._inductor.runtime import triton_heuristics

        cls = triton_heuristics.CachingAutotuner
        for name, original in originals.items():
            setattr(cls, name, original)


def keep_tuned_config(autotuner: Any, reload_kernel_from_src: Callable[[], Any], compiled: list[Any]) -> None:
    """After a static autotuner's cache check: where the autotune cache holds a config
    that coordinate descent found for the configs ``compiled`` cold, run with that
    config, marked as found, so the first call does not tune again; compile it if the
    autotuner has not (its compile results are the cold compile's, made before tuning)."""
    from torch._inductor.runtime import triton_heuristics as th

    if not autotuner.inductor_meta.get("coordinate_descent_tuning"):
        return
    if any(getattr(result.config, "found_by_coordesc", False) for result in autotuner.compile_results):
        return
    cached, _, _ = th.check_autotune_cache(list(compiled), autotuner.filename, autotuner.inductor_meta)
    if len(cached) != 1 or not getattr(cached[0], "found_by_coordesc", False):
        return
    best = cached[0]
    wanted = th.triton_config_to_hashable(best)
    for result in autotuner.compile_results:
        if th.triton_config_to_hashable(result.config) == wanted:
            result.config.found_by_coordesc = True
            autotuner.compile_results = [result]
            return
    from torch._dynamo.utils import dynamo_timed

    with dynamo_timed("CachingAutotuner.slow_precompile_config"):
        if autotuner.fn.fn is None:
            autotuner.fn = reload_kernel_from_src().fn
        autotuner.compile_results = [autotuner._precompile_config(best)]
