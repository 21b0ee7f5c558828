"""The selection's rule and screen (no GPU needed)."""

from __future__ import annotations

import math
import types

import pytest

from inductor_cutedsl.lowering.template import GemmCaller
from inductor_cutedsl.scheduler import selection


def test_the_fastest_way_wins():
    times = {"fused": 0.41, "triton_fused": 0.446, "ours_separate": 0.47, "other_separate": 0.468}
    assert selection.fastest_way(times) == "fused"
    # A fused Triton template faster than ours fused and both separate ways takes it.
    assert selection.fastest_way(times | {"triton_fused": 0.40}) == "triton_fused"
    # Separate wins when the epilogue costs the fused kernel more than its own kernel.
    assert selection.fastest_way(times | {"fused": 0.50, "triton_fused": 0.49}) == "other_separate"


def test_failed_ways_never_win():
    times = dict.fromkeys(selection.WAYS, math.inf)
    assert selection.fastest_way(times) is None
    assert selection.fastest_way(times | {"ours_separate": 9.0}) == "ours_separate"


def test_every_way_stands_for_a_decision():
    assert set(selection.WAYS.values()) == {"cutedsl", "triton", "separate"}


def _buffer(timings: dict) -> types.SimpleNamespace:
    return types.SimpleNamespace(choice_timings=lambda: timings)


def _ours() -> GemmCaller:
    return GemmCaller.__new__(GemmCaller)  # only its type matters to the screen


def test_screen_measures_ours_only_when_it_is_close_to_the_fastest():
    ours, aten = _ours(), object()
    caller, timings = selection._candidates(_buffer({ours: 1.10, aten: 1.0, object(): math.inf}))
    assert caller is ours and len(timings) == 2, "within 15%: measured; inf timings dropped"
    caller, _ = selection._candidates(_buffer({ours: 1.2, aten: 1.0}))
    assert caller is None, "20% behind on autotuning's figures: not worth a fused build"
    caller, _ = selection._candidates(_buffer({aten: 1.0}))
    assert caller is None


def test_benchmark_modules_compile_in_inductors_threads_until_its_subprocesses_are_up(monkeypatch):
    """``Scheduler.compile_kernel`` starts no compile before Inductor's compile
    subprocesses are up; the module's kernels then compile in Inductor's compile threads
    (each once, off the compiling thread), not at the module's first run in it."""
    import threading

    from torch._inductor import async_compile
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    from inductor_cutedsl.compat import codegen

    class Kernel(CachingAutotuner):
        def __init__(self):  # none of the real set-up: only precompile is called
            self.threads = []

        def precompile(self, *args, **kwargs):
            self.threads.append(threading.get_ident())

    first, second = Kernel(), Kernel()
    module = types.SimpleNamespace(triton_a=first, triton_b=second, get_args=lambda: [])
    template = types.SimpleNamespace(node=None)
    scheduler = types.SimpleNamespace(compile_kernel=lambda nodes: (None, module))
    future, got = codegen.nodes_module(scheduler, [template])
    assert got is module and future is not None
    future.result()
    for kernel in (first, second):
        assert len(kernel.threads) == 1 and kernel.threads[0] != threading.get_ident()
    # Subprocesses up: their compile's future, untouched.
    pooled = object()
    scheduler.compile_kernel = lambda nodes: (pooled, module)
    assert codegen.nodes_module(scheduler, [template])[0] is pooled
    # No kernel in the module, or one compile thread only: nothing started.
    assert codegen.precompile_in_threads(types.SimpleNamespace(get_args=lambda: [])) is None
    monkeypatch.setattr(async_compile, "get_compile_threads", lambda: 1)
    assert codegen.precompile_in_threads(module) is None


def test_a_module_that_fails_to_compile_fails_its_ways_alone():
    """The wait for the benchmark modules waits for each, and does not raise for one
    that failed: its ways are still made, and fail, inside the side-by-side
    measurement, which records them as inf."""
    import concurrent.futures
    import threading

    from inductor_cutedsl.compat import codegen

    failed: concurrent.futures.Future = concurrent.futures.Future()
    failed.set_exception(RuntimeError("out of resource: shared memory"))
    pending: concurrent.futures.Future = concurrent.futures.Future()
    threading.Timer(0.2, pending.set_result, ("compiled",)).start()
    module = types.SimpleNamespace(get_args=lambda: [])
    selection.await_modules([(failed, module), (None, module), (pending, module)])
    assert pending.done()
    with pytest.raises(RuntimeError, match="shared memory"):
        codegen.module_run_fn(failed, module)


def test_a_decision_measures_only_once_every_early_module_has_compiled(monkeypatch):
    """Modules started early for later decisions compile in this process's threads
    while Inductor's subprocesses are not up: the first decision waits for them all,
    so that no compile takes the GIL during its measurements."""
    import concurrent.futures
    import threading

    later = [concurrent.futures.Future() for _ in range(2)]
    for i, future in enumerate(later):
        threading.Timer(0.1 * (i + 1), future.set_result, (None,)).start()
    early = {("later", i): (f, object()) for i, f in enumerate(later)}
    own: concurrent.futures.Future = concurrent.futures.Future()
    own.set_result(None)
    selection.await_modules_before_measuring([(own, object())], early)
    assert all(f.done() for f in later)
