"""A warm start keeps the Triton configs that coordinate descent found cold.

Inductor saves each tuned kernel's winner in its autotune cache (a ``.best_config``
file beside the kernel, carried by torch's portable artifacts); a kernel loaded warm as a
static autotuner reads it back in ``CachingAutotuner.recheck_autotune_cache``. These
tests write the cache through Inductor's own ``AutotuneCache`` and run the real method
on an autotuner holding only what it reads, with the backend installed: on every torch
the kernel must end with the tuned config, marked as found by coordinate descent (else
its first call tunes again). On torch 2.11 that holds only through
``compat.autotune.carry_coordinate_descent``.
"""

from __future__ import annotations

import pickle
import types

import pytest

pytest.importorskip("triton")

from torch._inductor.runtime import triton_heuristics as th
from torch._inductor.runtime.autotune_cache import AutotuneCache
from triton import Config

from inductor_cutedsl.compat import autotune, releases

META = {"coordinate_descent_tuning": True, "autotune_local_cache": True}


class Autotuner:
    """What ``recheck_autotune_cache`` reads of a static autotuner; compiles are recorded."""

    _could_rblock_scale = False

    def __init__(self, filename: str, configs: list, meta: dict = META) -> None:
        self.filename = filename
        self.inductor_meta = dict(meta)
        self.compile_results = [types.SimpleNamespace(config=c) for c in configs]
        self.fn = types.SimpleNamespace(fn=object())
        self.compiled: list = []

    def is_statically_launchable(self) -> bool:
        return True

    def _precompile_config(self, cfg):
        self.compiled.append(cfg)
        return types.SimpleNamespace(config=cfg)


def cold(tmp_path, configs: list, best: Config, by_coordesc: bool = True) -> str:
    """A kernel file's path whose autotune cache holds ``best`` as the cold run saved it."""
    kernel = tmp_path / "ab" / "cabcdef0123456789.py"
    kernel.parent.mkdir(parents=True)
    kernel.write_text("# kernel\n")
    cache = AutotuneCache.create(META, str(kernel), th.hash_configs(configs))
    assert cache is not None
    cache.save(best, 1_000_000, found_by_coordesc=by_coordesc)
    return str(kernel)


@pytest.fixture(autouse=True)
def cache_dir_here(tmp_path, monkeypatch):
    """Inductor's cache directory is the test's: a kernel path under it is at home."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))


@pytest.fixture
def carried():
    saved = autotune.carry_coordinate_descent()
    try:
        yield saved
    finally:
        autotune.restore_coordinate_descent(saved)


def recheck(autotuner: Autotuner) -> None:
    th.CachingAutotuner.recheck_autotune_cache(autotuner, lambda: pytest.fail("no reload: fn is loaded"))


def only_config(autotuner: Autotuner):
    assert len(autotuner.compile_results) == 1
    return autotuner.compile_results[0].config


def test_a_tuned_config_apart_from_the_compiled_one_is_compiled_and_marked(tmp_path, carried):
    start = Config({"XBLOCK": 128}, num_warps=4, num_stages=1)
    tuned = Config({"XBLOCK": 512}, num_warps=8, num_stages=1)
    tuner = Autotuner(cold(tmp_path, [start], tuned), [start])
    recheck(tuner)
    got = only_config(tuner)
    assert got.kwargs == {"XBLOCK": 512} and got.num_warps == 8
    assert getattr(got, "found_by_coordesc", False), "the first call would tune again"
    assert len(tuner.compiled) == 1


def test_a_tuned_config_among_several_compiled_is_taken_marked_without_a_compile(tmp_path, carried):
    configs = [Config({"XBLOCK": 128}, num_warps=4, num_stages=1), Config({"XBLOCK": 256}, num_warps=4, num_stages=1)]
    tuned = Config({"XBLOCK": 256}, num_warps=4, num_stages=1)
    tuner = Autotuner(cold(tmp_path, configs, tuned), configs)
    recheck(tuner)
    got = only_config(tuner)
    assert got.kwargs == {"XBLOCK": 256}
    assert getattr(got, "found_by_coordesc", False)
    assert tuner.compiled == []


def test_a_config_not_found_by_coordinate_descent_is_not_marked(tmp_path, carried):
    start = Config({"XBLOCK": 128}, num_warps=4, num_stages=1)
    tuner = Autotuner(cold(tmp_path, [start], start, by_coordesc=False), [start])
    recheck(tuner)
    assert not getattr(only_config(tuner), "found_by_coordesc", False)
    assert tuner.compiled == []


def test_without_coordinate_descent_nothing_changes(tmp_path, carried):
    start = Config({"XBLOCK": 128}, num_warps=4, num_stages=1)
    tuned = Config({"XBLOCK": 512}, num_warps=8, num_stages=1)
    path = cold(tmp_path, [start], tuned)
    tuner = Autotuner(path, [start], {"autotune_local_cache": True})
    recheck(tuner)
    assert only_config(tuner).kwargs == {"XBLOCK": 128}
    assert tuner.compiled == []


def test_stock_torch_before_2_13_tunes_again_without_the_carry(tmp_path):
    """The bug the carry fixes, on stock: a planted no-op carry leaves it."""
    import inductor_cutedsl

    if releases.torch_release() >= (2, 13):
        pytest.skip("torch 2.13 on keeps the tuned config itself (the tests above check it)")
    start = Config({"XBLOCK": 128}, num_warps=4, num_stages=1)
    tuned = Config({"XBLOCK": 512}, num_warps=8, num_stages=1)
    tuner = Autotuner(cold(tmp_path, [start], tuned), [start])
    inductor_cutedsl.disable()
    try:
        recheck(tuner)
    finally:
        inductor_cutedsl.enable()
    assert not getattr(only_config(tuner), "found_by_coordesc", False)


def test_the_backend_install_carries_where_torch_drops_the_result_and_disable_restores():
    import inductor_cutedsl
    from inductor_cutedsl import install

    inductor_cutedsl.disable()
    try:
        before = th.CachingAutotuner.recheck_autotune_cache
        scale_before = th.CachingAutotuner._dynamic_scale_rblock
        unpickle_before = th.CachingAutotuner.restore_after_unpickle
        assert not getattr(before, "carries_coordesc", False)
        assert not getattr(unpickle_before, "carries_coordesc", False)
        inductor_cutedsl.enable()
        install._install_rest()
        # Every release re-homes the kernel path; before 2.13 the scaling is carried too.
        assert getattr(th.CachingAutotuner.recheck_autotune_cache, "carries_coordesc", False)
        assert getattr(th.CachingAutotuner.restore_after_unpickle, "carries_coordesc", False)
        assert autotune.carry_coordinate_descent() is None  # installed once
        scales = getattr(th.CachingAutotuner._dynamic_scale_rblock, "carries_coordesc", False)
        assert scales == (releases.torch_release() < (2, 13))
        inductor_cutedsl.disable()
        assert th.CachingAutotuner.recheck_autotune_cache is before
        assert th.CachingAutotuner._dynamic_scale_rblock is scale_before
        assert th.CachingAutotuner.restore_after_unpickle is unpickle_before
    finally:
        inductor_cutedsl.enable()


class Unpickled:
    """A kernel as it comes back from a compile worker: what ``restore_after_unpickle``
    and ``mark_cached_winner`` read. Its one config went through a pickle; its cache hook
    is the worker's ``AutotuneCache.save``, bound, as Inductor pickles it."""

    def __init__(self, path: str, generated: list, config: Config, state: str = "hit", meta: dict = META) -> None:
        self.inductor_meta = dict(meta)
        self.autotune_cache_info = {"autotune_cache_state": state}
        self.compile_results = [types.SimpleNamespace(config=pickle.loads(pickle.dumps(config)))]
        cache = AutotuneCache.create(META, path, th.hash_configs(generated))
        assert cache is not None
        self.save_cache_hook = pickle.loads(pickle.dumps(cache.save))
        self.fn = types.SimpleNamespace()
        self.launchers: list = []


def unpickled_config(tuner: Unpickled):
    th.CachingAutotuner.restore_after_unpickle(tuner, None)
    return only_config(tuner)


def test_a_triton_config_loses_its_mark_in_a_pickle():
    """The stock bug the carry works around: a winner read in a compile worker comes back
    to the compiling process without its mark."""
    tuned = Config({"XBLOCK": 512}, num_warps=8, num_stages=1)
    tuned.found_by_coordesc = True
    assert not getattr(pickle.loads(pickle.dumps(tuned)), "found_by_coordesc", False)


def test_a_kernel_back_from_a_compile_worker_keeps_its_cached_winners_mark(tmp_path, carried):
    """The worker read the winner (a hit) and compiled it alone: the parent marks it again,
    so the first call runs it untuned; its launchers, where it has some, too. Stock
    leaves it unmarked: the first call tunes again, from the winner."""
    import inductor_cutedsl

    start = Config({"XBLOCK": 128}, num_warps=4, num_stages=1)
    tuned = Config({"XBLOCK": 512}, num_warps=8, num_stages=1)
    path = cold(tmp_path, [start], tuned)
    tuner = Unpickled(path, [start], tuned)
    tuner.launchers = [types.SimpleNamespace(config=tuner.compile_results[0].config)]
    got = unpickled_config(tuner)
    assert got.kwargs == {"XBLOCK": 512} and getattr(got, "found_by_coordesc", False)
    assert getattr(tuner.launchers[0].config, "found_by_coordesc", False)
    inductor_cutedsl.disable()
    try:
        assert not getattr(unpickled_config(Unpickled(path, [start], tuned)), "found_by_coordesc", False)
    finally:
        inductor_cutedsl.enable()


@pytest.mark.parametrize("case", ["not by coordinate descent", "a miss", "another config", "no coordinate descent"])
def test_only_a_cached_coordinate_descent_winner_is_marked(tmp_path, carried, case):
    """The mark says the config is what coordinate descent found for these generated
    configs: a winner autotuning picked among several, a kernel whose compile missed the
    cache, a config other than the cached one, a kernel not tuned by coordinate descent
    stay as they came."""
    start = Config({"XBLOCK": 128}, num_warps=4, num_stages=1)
    tuned = Config({"XBLOCK": 512}, num_warps=8, num_stages=1)
    path = cold(tmp_path, [start], tuned, by_coordesc=case != "not by coordinate descent")
    tuner = Unpickled(
        path,
        [start],
        start if case == "another config" else tuned,
        state="miss" if case == "a miss" else "hit",
        meta={"autotune_local_cache": True} if case == "no coordinate descent" else META,
    )
    assert not getattr(unpickled_config(tuner), "found_by_coordesc", False)


def test_a_failure_marking_the_winner_leaves_the_kernel_as_stock_left_it(tmp_path, carried, lenient, monkeypatch):
    from inductor_cutedsl import errors

    start = Config({"XBLOCK": 128}, num_warps=4, num_stages=1)
    tuned = Config({"XBLOCK": 512}, num_warps=8, num_stages=1)
    tuner = Unpickled(cold(tmp_path, [start], tuned), [start], tuned)

    def broken(*args, **kwargs):
        raise RuntimeError("planted")

    monkeypatch.setattr(autotune, "mark_cached_winner", broken)
    before = len(errors.fallbacks)
    got = unpickled_config(tuner)
    assert got.kwargs == {"XBLOCK": 512} and not getattr(got, "found_by_coordesc", False)
    assert tuner.fn._hash_lock is not None, "the original restore ran"
    assert errors.fallbacks[before:] and errors.fallbacks[-1]["stage"] == "tuned config"


class Reduction:
    """What ``_dynamic_scale_rblock`` reads first, recording that it read further."""

    deterministic_mode = False
    inductor_meta: dict = {}
    heuristic_type = None  # read by torch 2.11 after the device; no scaling follows

    def __init__(self, state: str) -> None:
        self.autotune_cache_info = {"autotune_cache_state": state}
        self.read: list[str] = []

    @property
    def device_props(self):  # torch 2.11 reads it first
        self.read.append("device_props")
        return types.SimpleNamespace(type="cpu", major=None, regs_per_multiprocessor=None)

    @property
    def _could_rblock_scale(self):  # torch 2.13 on
        self.read.append("could_rblock_scale")
        return False


def test_a_reduction_with_a_cached_winner_is_not_scaled_again(carried):
    hit, miss = Reduction("hit"), Reduction("miss")
    th.CachingAutotuner._dynamic_scale_rblock(hit)
    th.CachingAutotuner._dynamic_scale_rblock(miss)
    assert hit.read == [], "a cached winner is final: scaling it adds a config to autotune and tune again"
    assert miss.read, "a cold compile still scales"


def test_a_failure_keeping_the_tuned_config_leaves_the_kernel_as_stock_left_it(tmp_path, carried, lenient, monkeypatch):
    """Never worse than stock: the kernel ends as stock's recheck leaves it (tuned again
    where stock tunes again), with a warning, not a raise out of the user's warm start."""
    import inductor_cutedsl
    from inductor_cutedsl import errors

    start = Config({"XBLOCK": 128}, num_warps=4, num_stages=1)
    tuned = Config({"XBLOCK": 512}, num_warps=8, num_stages=1)
    path = cold(tmp_path, [start], tuned)
    stock = Autotuner(path, [start])
    inductor_cutedsl.disable()
    try:
        recheck(stock)
    finally:
        inductor_cutedsl.enable()

    def broken(*args, **kwargs):
        raise RuntimeError("planted")

    monkeypatch.setattr(autotune, "keep_tuned_config", broken)
    monkeypatch.setattr(autotune, "rehome_kernel_path", broken)
    tuner = Autotuner(path, [start])
    before = len(errors.fallbacks)
    recheck(tuner)
    assert only_config(tuner).kwargs == only_config(stock).kwargs
    assert errors.fallbacks[before:] and errors.fallbacks[-1]["stage"] == "warm start"


def artifacts_of_a_cold_machine(tmp_path, monkeypatch, configs: list, best: Config) -> tuple[str, bytes]:
    """A kernel compiled and tuned under one cache directory: its path there, and torch's
    portable artifacts of the tuning (``save_cache_artifacts()``), made the way Inductor
    makes them. The directory is then gone, as on another machine."""
    import shutil

    import torch
    from torch.compiler._cache import CacheArtifactManager

    cold_dir = tmp_path / "cold-machine"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(cold_dir))
    CacheArtifactManager.clear()
    kernel = cold(cold_dir, configs, best)
    saved = torch.compiler.save_cache_artifacts()
    assert saved is not None and saved[1].artifacts.get("autotune"), "the tuning was not recorded"
    shutil.rmtree(cold_dir)
    return kernel, saved[0]


@pytest.mark.parametrize("compiled", ["one config", "several"])
def test_a_warm_start_under_another_cache_directory_finds_what_the_artifacts_carry(
    tmp_path, monkeypatch, carried, compiled
):
    """The autotuner, pickled where it was compiled, names its kernel under that machine's
    cache directory; the artifacts load the tuning under this one's. The kernel must still
    start from the tuned config, marked (else the first call tunes it again)."""
    import torch
    from torch.compiler._cache import CacheArtifactManager

    start = Config({"XBLOCK": 128}, num_warps=4, num_stages=1)
    tuned = Config({"XBLOCK": 256}, num_warps=8, num_stages=1)
    configs = [start] if compiled == "one config" else [start, Config({"XBLOCK": 256}, num_warps=8, num_stages=1)]
    path, blob = artifacts_of_a_cold_machine(tmp_path, monkeypatch, configs, tuned)
    warm_dir = tmp_path / "warm-machine"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(warm_dir))
    CacheArtifactManager.clear()
    assert torch.compiler.load_cache_artifacts(blob) is not None
    tuner = Autotuner(path, configs)
    recheck(tuner)
    got = only_config(tuner)
    assert got.kwargs == {"XBLOCK": 256} and got.num_warps == 8
    assert getattr(got, "found_by_coordesc", False), "the first call would tune again"
    assert tuner.filename == str(warm_dir / "ab" / "cabcdef0123456789.py")


def test_stock_misses_the_carried_tuning_under_another_cache_directory(tmp_path, monkeypatch):
    """The bug the re-homing fixes, on stock (the backend off): the same warm start finds
    no cached config, so its kernel is tuned again."""
    import torch
    from torch.compiler._cache import CacheArtifactManager

    import inductor_cutedsl

    start = Config({"XBLOCK": 128}, num_warps=4, num_stages=1)
    configs = [start, Config({"XBLOCK": 256}, num_warps=8, num_stages=1)]
    path, blob = artifacts_of_a_cold_machine(tmp_path, monkeypatch, configs, configs[1])
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "warm-machine"))
    CacheArtifactManager.clear()
    assert torch.compiler.load_cache_artifacts(blob) is not None
    tuner = Autotuner(path, configs)
    inductor_cutedsl.disable()
    try:
        recheck(tuner)
    finally:
        inductor_cutedsl.enable()
    assert len(tuner.compile_results) == 2, "stock found the entry: the re-homing tests nothing"
