"""Coordinate descent's first round compiles ahead in Inductor's compile workers
(``compat.coordesc_prefetch``): the configs are the ones the real tuner tries first, the
tuner's compile of each waits for its worker, and nothing is prefetched where the kernel
will not be tuned."""

from __future__ import annotations

import os
import re
import sys
import types
from concurrent.futures import Future

import pytest

pytest.importorskip("triton")

from torch._inductor.runtime import triton_heuristics as th
from torch._inductor.runtime.coordinate_descent_tuner import CoordescTuner
from torch._inductor.runtime.hints import HeuristicType
from triton import Config

import inductor_cutedsl  # noqa: F401  (installs the backend the tests read)
from inductor_cutedsl.compat import coordesc_prefetch as cp
from inductor_cutedsl.compat import environment

META = {"coordinate_descent_tuning": True, "kernel_name": "triton_poi_fused_sin_0"}


def tuner(size_hints: dict, meta: dict = META) -> CoordescTuner:
    return CoordescTuner(name="k", size_hints=size_hints, inductor_meta=dict(meta))


def tried_first(t: CoordescTuner, start: Config) -> list:
    """The configs the real tuner tries from ``start`` when none improves on it (so it
    stops after its first round)."""
    seen = []

    def bench(cfg) -> float:
        seen.append(th.triton_config_to_hashable(cfg))
        return 2.0

    t.autotune(bench, start, 1.0)
    return seen


@pytest.mark.parametrize(
    "size_hints,start",
    [
        ({"x": 1 << 20}, Config({"XBLOCK": 256}, num_warps=4, num_stages=1)),
        ({"x": 4096, "r0_": 4096}, Config({"XBLOCK": 8, "R0_BLOCK": 128}, num_warps=8, num_stages=1)),
        ({"x": 64}, Config({"XBLOCK": 64}, num_warps=1, num_stages=1)),
    ],
    ids=["pointwise", "reduction", "at-the-bounds"],
)
def test_the_first_round_is_what_the_tuner_tries_first(size_hints, start):
    t = tuner(size_hints)
    ours = [th.triton_config_to_hashable(c) for c in cp.first_round(t, start)]
    assert ours and ours == tried_first(t, start)


class Pool:
    """Inductor's process pool, as far as the prefetch uses it: jobs are recorded."""

    def __init__(self) -> None:
        self.jobs: list[tuple] = []

    def submit(self, fn, *args):
        self.jobs.append((fn, args))
        future: Future = Future()
        future.set_result(None)
        return future


def autotuner(tmp_path, start: Config, **overrides) -> types.SimpleNamespace:
    source = tmp_path / "cxyz.py"
    source.write_text("# the kernel's module\n")
    fields = {
        "inductor_meta": dict(META),
        "heuristic_type": HeuristicType.POINTWISE,
        "deterministic_mode": False,
        "launchers": [types.SimpleNamespace(config=start)],
        "filename": str(source),
        "coordesc_tuner": tuner({"x": 1 << 20}),
    }
    return types.SimpleNamespace(**(fields | overrides))


@pytest.fixture
def pool(monkeypatch):
    from torch._inductor.async_compile import AsyncCompile

    jobs = Pool()
    monkeypatch.setattr(AsyncCompile, "use_process_pool", classmethod(lambda cls: True))
    monkeypatch.setattr(AsyncCompile, "process_pool", staticmethod(lambda: jobs))
    return jobs


def test_a_kernel_to_be_tuned_has_its_first_round_submitted_and_its_compiles_wait_for_them(tmp_path, pool, monkeypatch):
    monkeypatch.setattr(cp, "_stalled", False)
    start = Config({"XBLOCK": 256}, num_warps=4, num_stages=1)
    k = autotuner(tmp_path, start)
    cp.prefetch(k)
    first = cp.first_round(k.coordesc_tuner, start)
    assert [args[2] for fn, args in pool.jobs] == [[c] for c in first]
    module = (META["kernel_name"], "# the kernel's module\n")
    assert all(fn is cp.compile_configs and args[:2] == module for fn, args in pool.jobs)
    cp.prefetch(k)  # once per kernel
    assert len(pool.jobs) == len(first)
    # The tuner's compile of a prefetched config takes its job first, once.
    waited = []
    for key, job in k._prefetched.items():
        job.result = lambda timeout=None, key=key: waited.append((key, timeout))
    cp._await(k, first[0])
    cp._await(k, first[0])
    cp._await(k, start)  # not prefetched: nothing to wait for
    assert waited == [(th.triton_config_to_hashable(first[0]), cp.WAIT_S)]


def test_the_tuners_compile_waits_for_the_prefetch_before_compiling(tmp_path, monkeypatch):
    """``_precompile_config`` as installed: the wait comes first, then the compile."""
    order = []
    monkeypatch.setattr(cp, "_await", lambda k, cfg: order.append("wait"))
    k = autotuner(tmp_path, Config({"XBLOCK": 256}, num_warps=4, num_stages=1))
    with pytest.raises(AttributeError):  # the real compile reads more than this stand-in has
        th.CachingAutotuner._precompile_config(k, k.launchers[0].config)
    assert order == ["wait"], "installed with the backend"


@pytest.mark.parametrize(
    "change",
    [
        "tuning off",
        "a template",
        "several configs",
        "tuned already",
        "deterministic reduction",
        "no pool",
        "no source",
        "a fusion benchmark's kernel",
    ],
)
def test_nothing_is_prefetched_for_a_kernel_not_to_be_tuned_or_a_fusion_benchmarks(tmp_path, pool, monkeypatch, change):
    start = Config({"XBLOCK": 256}, num_warps=4, num_stages=1)
    k = autotuner(tmp_path, start)
    if change == "a fusion benchmark's kernel":
        from torch._inductor.utils import Placeholder

        k.inductor_meta["kernel_name"] = str(Placeholder.DESCRIPTIVE_NAME)
    elif change == "tuning off":
        k.inductor_meta["coordinate_descent_tuning"] = False
    elif change == "a template":
        k.heuristic_type = HeuristicType.TEMPLATE
    elif change == "several configs":
        k.launchers = k.launchers * 2
    elif change == "tuned already":
        start.found_by_coordesc = True
    elif change == "deterministic reduction":
        k.heuristic_type, k.deterministic_mode = HeuristicType.REDUCTION, True
    elif change == "no pool":
        from torch._inductor.async_compile import AsyncCompile

        monkeypatch.setattr(AsyncCompile, "use_process_pool", classmethod(lambda cls: False))
    else:
        k.filename = str(tmp_path / "gone.py")
    cp.prefetch(k)
    assert pool.jobs == []


@pytest.mark.parametrize("kind", ["TEMPLATE", "USER_AUTOTUNE", "FIXED"])
def test_a_kernel_the_tuner_never_tunes_goes_straight_to_the_tuner(tmp_path, monkeypatch, kind):
    """``run`` asks a template kernel's tuner at every launch, and the tuner returns at
    once: the installed wrapper neither prefetches nor follows there, so a Triton GEMM's
    launch costs what it costs in stock."""
    calls = []

    def tuner(self, launcher, *a):
        return launcher

    monkeypatch.setattr(th.CachingAutotuner, "coordinate_descent_tuning", tuner)
    monkeypatch.setattr(th.CachingAutotuner, "precompile", lambda self, *a, **k: None)
    monkeypatch.setattr(th.CachingAutotuner, "_precompile_config", lambda self, cfg: None)
    monkeypatch.setattr(cp, "_try", lambda fn, autotuner, *args: calls.append(fn.__name__))
    originals = cp.install()
    try:
        k = autotuner(tmp_path, Config({"XBLOCK": 256}, num_warps=4, num_stages=1))
        k.heuristic_type = getattr(HeuristicType, kind)
        launcher = k.launchers[0]
        assert th.CachingAutotuner.coordinate_descent_tuning(k, launcher, 1, 2) is launcher
        assert calls == []
        # Its later launches call the tuner itself: no wrapper is left on their path.
        assert vars(k)["coordinate_descent_tuning"].__func__ is tuner
        assert k.coordinate_descent_tuning(launcher, 1, 2) is launcher
        tuned = autotuner(tmp_path, Config({"XBLOCK": 256}, num_warps=4, num_stages=1))
        tuned.heuristic_type = HeuristicType.POINTWISE
        assert th.CachingAutotuner.coordinate_descent_tuning(tuned, launcher, 1, 2) is launcher
        assert calls == ["prefetch", "follow_improvements", "stop_following"], "a tuned kernel still prefetches"
        assert "coordinate_descent_tuning" not in vars(tuned), "a tuned kernel keeps the wrapper"
    finally:
        cp.restore(originals)


def test_a_strict_sum_reduction_is_prefetched_only_where_the_tuner_tunes_it(tmp_path, pool, monkeypatch):
    """torch 2.14 on leaves a reduction under strict numerics untuned
    (``CachingAutotuner._should_coordesc_tune``; its metadata key is ``strict_sum_rblock``
    in 2.14, ``strict_reduction_rblock`` in 2.15): its neighbours are not compiled for
    nothing. 2.11 tunes it, so there they are. The rule's answer is not stored on the
    kernel, which is pickled later."""
    monkeypatch.setattr(cp, "_stalled", False)
    k = autotuner(tmp_path, Config({"XBLOCK": 1, "R0_BLOCK": 256}, num_warps=4, num_stages=1))
    k.heuristic_type = HeuristicType.REDUCTION
    strict = {"strict_sum_rblock": True, "strict_reduction_rblock": True}
    k.inductor_meta.update(strict)
    k.coordesc_tuner = tuner({"x": 1 << 12, "r0_": 1 << 12})
    tuner_has_the_rule = "_should_coordesc_tune" in vars(th.CachingAutotuner)
    cp.prefetch(k)
    assert (pool.jobs == []) == tuner_has_the_rule
    assert "_should_coordesc_tune" not in vars(k)
    for key in strict:
        k.inductor_meta.pop(key)
    assert cp.will_tune(k)


def test_a_workers_caches_are_not_cleared_between_inductors_jobs_and_ours(monkeypatch):
    """torch 2.14 on: a compile worker compares each job's cache variables with the job
    before it and clears its caches where they differ, and Inductor sends every variable,
    None where unset. Ours are sent the same way; torch 2.11's worker sets each variable
    it is given, so there only those set are sent."""
    from torch._inductor.runtime import compile_tasks

    monkeypatch.setenv("TRITON_CACHE_DIR", "/tmp/triton-cache")
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    ours, _ = cp.worker_settings()
    apply = getattr(compile_tasks, "_apply_subprocess_env_and_clear_caches", None)
    if apply is None:
        assert None not in ours.values() and ours["TRITON_CACHE_DIR"] == "/tmp/triton-cache"
        return
    inductors = {v: os.environ.get(v) for v in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TRITON_LIBDEVICE_PATH")}
    cleared = []
    monkeypatch.setattr(compile_tasks, "clear_caches", lambda: cleared.append(1))
    monkeypatch.setattr(compile_tasks, "apply_subprocess_env", lambda env: None)
    monkeypatch.setattr(compile_tasks, "_last_applied_cache_env", None)
    for env in (inductors, ours, inductors, ours):
        apply(env)
    assert cleared == [1], "cleared once, by the first job"


def test_a_worker_compiles_the_kernel_of_its_source_for_the_configs_given(monkeypatch):
    """``compile_configs`` on a real generated kernel module: the kernel it hands to
    Inductor's worker compile is that module's, with exactly the configs given."""
    import torch
    from fake_hopper import fake_hopper, generated_code
    from torch._inductor.runtime import compile_tasks

    code = generated_code(lambda x: torch.sin(x) + 1, (1000,))
    name, source = re.search(r"async_compile\.triton\('(\w+)', '''(.*?)''', device_str", code, re.S).groups()
    handed = {}

    def compile_triton(load, env, settings):
        handed.update(kernel=load(), env=env, settings=settings)

    monkeypatch.setattr(compile_tasks, "_worker_compile_triton", compile_triton)
    from torch._inductor.runtime import triton_helpers

    monkeypatch.setattr(triton_helpers, "set_driver_to_gpu", lambda: None)  # no driver here
    cfg = Config({"XBLOCK": 512}, num_warps=8, num_stages=1)
    with fake_hopper():  # the module's import asks Triton for its GPU backend
        cp.compile_configs(name, source, [cfg], {"TRITON_CACHE_DIR": "/x"}, {"use_static_triton_launcher": True})
    kernel = handed["kernel"]
    assert isinstance(kernel, th.CachingAutotuner) and kernel.fn.__name__ == name
    assert kernel.configs == [cfg] and kernel.compile_results == []
    assert handed["env"] == {"TRITON_CACHE_DIR": "/x"} and handed["settings"] == {"use_static_triton_launcher": True}


@pytest.mark.parametrize(
    "argv,worker",
    [
        (["/site/torch/_inductor/compile_worker/__main__.py", "--kind=fork"], True),
        (["train.py"], False),
        (["/home/me/compile_worker/run.py"], False),
        ([], False),
    ],
)
def test_nothing_is_installed_in_inductors_compile_workers(monkeypatch, argv, worker):
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.delenv("INDUCTOR_CUTEDSL_WORKER", raising=False)
    assert environment.in_a_compile_worker() is worker


def test_a_stuck_or_failed_worker_stops_the_waiting_and_the_prefetching(tmp_path, pool, monkeypatch):
    """Never worse than stock by more than one wait: after a prefetched compile fails or
    times out, the tuner compiles here and nothing more is prefetched or waited for."""
    monkeypatch.setattr(cp, "_stalled", False)
    start = Config({"XBLOCK": 256}, num_warps=4, num_stages=1)
    k = autotuner(tmp_path, start)
    cp.prefetch(k)
    first = cp.first_round(k.coordesc_tuner, start)
    calls = []

    def stuck(timeout=None):
        calls.append(timeout)
        raise TimeoutError

    for job in k._prefetched.values():
        job.result = stuck
    cp._await(k, first[0])
    cp._await(k, first[1])
    assert calls == [cp.WAIT_S] and cp._stalled
    other = autotuner(tmp_path, start)
    submitted = len(pool.jobs)
    cp.prefetch(other)
    assert len(pool.jobs) == submitted


def test_a_kernel_autotuned_at_its_first_call_prefetches_from_the_config_picked(tmp_path, pool, monkeypatch):
    """Loaded with several configs, a kernel is not prefetched at load; at its first call,
    when autotuning has left one, the tuner's entry submits that config's first round."""
    monkeypatch.setattr(cp, "_stalled", False)
    picked = Config({"XBLOCK": 1024}, num_warps=4, num_stages=1)
    k = autotuner(tmp_path, Config({"XBLOCK": 256}, num_warps=4, num_stages=1))
    k.launchers = k.launchers * 2
    cp.prefetch(k)
    assert pool.jobs == []
    k.launchers = [types.SimpleNamespace(config=picked)]
    with pytest.raises(AttributeError):  # the real tuning reads more than this stand-in has
        th.CachingAutotuner.coordinate_descent_tuning(k, k.launchers[0])
    first = cp.first_round(k.coordesc_tuner, picked)
    assert [args[2] for _, args in pool.jobs] == [[c] for c in first]
    assert "compare_config" not in vars(k.coordesc_tuner), "the tuner is unwrapped however its tuning ends"


def test_a_config_that_does_not_compile_is_no_failure_of_its_job(monkeypatch):
    """Coordinate descent meets configs that need too many registers; the tuner skips
    them. Their job ends quietly, so that prefetching goes on (only a stuck or broken
    worker stops it)."""
    from torch._inductor.runtime import compile_tasks

    def out_of_resources(load, env, settings):
        raise RuntimeError("No valid triton configs. OutOfResources: out of resource: shared memory")

    monkeypatch.setattr(compile_tasks, "_worker_compile_triton", out_of_resources)
    assert cp.compile_configs("k", "# module\n", [Config({"XBLOCK": 4096}, num_warps=32)], {}, {}) is None


def test_every_config_the_tuner_tries_was_submitted_before_it_got_there(tmp_path, pool, monkeypatch):
    """After an improvement the tuner steps from the new best: following its
    improvements, the prefetch has submitted each config before the real tuner tries it,
    each once, and the tuner itself is left as it was."""
    monkeypatch.setattr(cp, "_stalled", False)
    start = Config({"XBLOCK": 64}, num_warps=4, num_stages=1)
    k = autotuner(tmp_path, start)
    cp.prefetch(k)
    cp.follow_improvements(k)
    submitted = lambda: [th.triton_config_to_hashable(args[2][0]) for _, args in pool.jobs]
    tried, early = [], []

    def bench(cfg) -> float:  # larger blocks and fewer warps run faster, to a point
        key = th.triton_config_to_hashable(cfg)
        tried.append(key)
        early.append(key in submitted())
        return abs(cfg.kwargs["XBLOCK"] - 1024) + 10 * abs(cfg.num_warps - 2) + 1.0

    best = k.coordesc_tuner.autotune(bench, start, bench(start))
    assert best.kwargs["XBLOCK"] == 1024 and best.num_warps == 2
    assert len(tried) > 1 + len(cp.first_round(k.coordesc_tuner, start)), "it went past its first round"
    assert all(early[1:]), [t for t, e in zip(tried, early) if not e]
    assert len(submitted()) == len(set(submitted()))
    cp.stop_following(k)
    assert "compare_config" not in vars(k.coordesc_tuner)


@pytest.mark.parametrize("why", ["stalled", "not to be tuned"])
def test_a_kernel_not_prefetched_is_tuned_as_stock_tunes_it(tmp_path, pool, monkeypatch, why):
    """No prefetch at load (a stuck worker earlier, or a kernel the tuner leaves alone), no
    following either: the tuner is not wrapped and nothing is submitted."""
    monkeypatch.setattr(cp, "_stalled", why == "stalled")
    k = autotuner(tmp_path, Config({"XBLOCK": 64}, num_warps=4, num_stages=1))
    if why == "not to be tuned":
        k.inductor_meta["coordinate_descent_tuning"] = False
    cp.prefetch(k)
    cp.follow_improvements(k)
    assert "compare_config" not in vars(k.coordesc_tuner) and pool.jobs == []


def test_a_failure_while_following_leaves_the_tuning_as_stock_runs_it(tmp_path, pool, monkeypatch):
    """Working out or submitting an improvement's neighbours may fail: the tuner goes on
    and returns the same best, nothing of the failure reaches the compile."""
    monkeypatch.setattr(cp, "_stalled", False)
    start = Config({"XBLOCK": 64}, num_warps=4, num_stages=1)
    k = autotuner(tmp_path, start)
    cp.prefetch(k)
    cp.follow_improvements(k)
    submitted = len(pool.jobs)

    def broken(tuner, best):
        raise RuntimeError("a tuner of another shape")

    monkeypatch.setattr(cp, "first_round", broken)
    bench = lambda cfg: abs(cfg.kwargs["XBLOCK"] - 1024) + 10 * abs(cfg.num_warps - 2) + 1.0
    best = k.coordesc_tuner.autotune(bench, start, bench(start))
    assert best.kwargs["XBLOCK"] == 1024 and best.num_warps == 2 and len(pool.jobs) == submitted


def test_inductor_names_a_fusion_benchmarks_kernel_with_the_placeholder():
    """What ``fusion_benchmark_kernel`` reads: Inductor generates every Triton kernel with
    the placeholder as its name (``TritonKernel.codegen_kernel``), and replaces it only
    where it defines the kernel for a graph (``define_kernel``); ``benchmark_fused_nodes``
    loads the generated source as it is. A release that names them otherwise fails here."""
    import inspect

    from torch._inductor.codegen import triton

    assert '"kernel_name": str(Placeholder.DESCRIPTIVE_NAME)' in inspect.getsource(triton.TritonKernel.codegen_kernel)
    assert "src_code.replace(str(Placeholder.DESCRIPTIVE_NAME), kernel_name)" in inspect.getsource(triton)
    assert "benchmark_kernel=True" in inspect.getsource(triton.TritonScheduling.benchmark_fused_nodes)
