"""Coordinate descent's winning Triton binaries travel with torch's portable cache
artifacts (``compat/tuned_binaries.py``): a kernel compiled for sm_90 here (no GPU needed)
is recorded as the tuner returns it, saved, loaded under another Triton cache directory,
and then compiled there without running one compile stage; a blob that is truncated,
altered or named as a path is refused, and nothing is recorded that the tuner did not
find."""

from __future__ import annotations

import json
import logging
import os
import types

import pytest

pytest.importorskip("triton.backends.nvidia.compiler")

import torch
import triton
import triton.language as tl
from torch._inductor.runtime.hints import HeuristicType
from torch._inductor.runtime.runtime_utils import triton_hash_to_path_key
from torch.compiler._cache import CacheArtifactManager
from triton.backends.compiler import GPUTarget
from triton_stages import STAGES_RUN, count_stages

from inductor_cutedsl.compat import artifacts as compat_artifacts
from inductor_cutedsl.compat import tuned_binaries as tb


@triton.jit
def _winner(x, n: tl.constexpr):
    tl.store(x + tl.arange(0, n), tl.arange(0, n) * 7 + 1)


@pytest.fixture(autouse=True)
def fresh_artifacts():
    assert tb.register()
    with CacheArtifactManager.with_fresh_cache():
        yield


@pytest.fixture
def stages():
    """How many compile stages Triton's CUDA backend runs (0: found in its on-disk cache)."""
    STAGES_RUN[0] = 0
    undo = count_stages()
    yield STAGES_RUN
    undo()


def compile_winner(cache_dir, monkeypatch) -> str:
    """Compile the kernel for sm_90 with Triton's cache at ``cache_dir``; its cache key."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache_dir))
    src = triton.compiler.ASTSource(fn=_winner, signature={"x": "*fp32", "n": "constexpr"}, constexprs={"n": 32})
    binary = triton.compile(src, target=GPUTarget("cuda", 90, 32))
    return triton_hash_to_path_key(binary.hash)


def tuned(cache_hash: str, found: bool = True, device: int | None = 0):
    """(autotuner, launcher) as the tuner hands them back (``device`` None: one rank
    compiling for all, ``compile_on_one_rank``)."""
    config = triton.Config({"XBLOCK": 32}, num_warps=1, num_stages=1)
    config.found_by_coordesc = found
    autotuner = types.SimpleNamespace(
        triton_meta={"device": device},
        inductor_meta={"kernel_name": "triton_poi_k"},
        heuristic_type=HeuristicType.POINTWISE,
    )
    return autotuner, types.SimpleNamespace(config=config, cache_hash=cache_hash)


def saved() -> bytes:
    out = torch.compiler.save_cache_artifacts()
    assert out is not None
    return out[0]


def test_a_tuned_winner_compiles_from_the_artifacts_without_a_stage(tmp_path, monkeypatch, stages):
    key = compile_winner(tmp_path / "cold", monkeypatch)
    assert stages[0] > 0
    assert tb.record(*tuned(key))
    blob = saved()

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "warm"))
    info = torch.compiler.load_cache_artifacts(blob)
    assert info is not None and getattr(info, f"{tb.ARTIFACT_TYPE}_artifacts") == [key]
    # The metadata names this machine's directory, never the one it was compiled in.
    here = tmp_path / "warm" / key
    metadata = b"".join(p.read_bytes() for p in here.glob("*.json"))
    assert str(here).encode() in metadata and b"cold" not in metadata
    before = stages[0]
    assert compile_winner(tmp_path / "warm", monkeypatch) == key
    assert stages[0] == before  # a cache hit: nothing compiled


def test_a_winner_compiled_on_one_rank_for_all_is_carried_too(tmp_path, monkeypatch, stages):
    """With ``compile_on_one_rank`` a kernel's Triton device is None; torch keys Triton's
    cache directory by it as it is, and the artifact carries it the same way."""
    key = compile_winner(tmp_path / "cold", monkeypatch)
    assert tb.record(*tuned(key, device=None))
    blob = saved()
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "warm"))
    info = torch.compiler.load_cache_artifacts(blob)
    assert info is not None and getattr(info, f"{tb.ARTIFACT_TYPE}_artifacts") == [key]
    before = stages[0]
    assert compile_winner(tmp_path / "warm", monkeypatch) == key
    assert stages[0] == before


def test_without_the_artifact_the_warm_cache_compiles_the_winner_again(tmp_path, monkeypatch, stages):
    """The control: what the artifact saves is a real compile."""
    compile_winner(tmp_path / "cold", monkeypatch)
    before = stages[0]
    compile_winner(tmp_path / "warm", monkeypatch)
    assert stages[0] > before


def test_a_config_the_tuner_did_not_find_is_not_recorded(tmp_path, monkeypatch):
    key = compile_winner(tmp_path / "cold", monkeypatch)
    assert not tb.record(*tuned(key, found=False))
    assert not tb.record(*tuned("../" + key))
    assert not tb.record(*tuned("NOSUCHKEY"))
    assert torch.compiler.save_cache_artifacts() is None


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda c: c[:-5], id="truncated"),
        pytest.param(lambda c: c[:-1] + bytes([c[-1] ^ 1]), id="altered"),
        pytest.param(lambda c: b"x" + c, id="foreign"),
    ],
)
def test_a_damaged_blob_is_refused_and_the_kernel_compiles(tmp_path, monkeypatch, caplog, damage):
    key = compile_winner(tmp_path / "cold", monkeypatch)
    content = tb.pack(str(tmp_path / "cold" / key), 0)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "warm"))
    with caplog.at_level(logging.WARNING, logger="inductor_cutedsl.artifacts"):
        tb.populate(key, damage(content))
    assert "refused" in caplog.text
    assert not (tmp_path / "warm" / key).exists()


def _with_header(content: bytes, edit) -> bytes:
    head, _, rest = content[len(tb._MAGIC) :].partition(b"\n")
    info = json.loads(head)
    edit(info)
    return tb._MAGIC + json.dumps(info).encode() + b"\n" + rest


@pytest.mark.parametrize(
    "key,edit",
    [
        pytest.param("../escape", None, id="key-a-path"),
        pytest.param(None, lambda i: i["files"][0].update(name="../../evil.so"), id="file-a-path"),
        pytest.param(None, lambda i: i["files"][1].update(name=i["files"][0]["name"]), id="file-twice"),
    ],
)
def test_names_that_are_paths_are_refused(tmp_path, monkeypatch, caplog, key, edit):
    real = compile_winner(tmp_path / "cold", monkeypatch)
    content = tb.pack(str(tmp_path / "cold" / real), 0)
    if edit is not None:
        content = _with_header(content, edit)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "warm"))
    with caplog.at_level(logging.WARNING, logger="inductor_cutedsl.artifacts"):
        tb.populate(key or real, content)
    assert "refused" in caplog.text
    assert not (tmp_path / "warm").exists() or not any((tmp_path / "warm").rglob("*"))
    assert not (tmp_path / "evil.so").exists()


def test_a_directory_triton_holds_is_left_alone(tmp_path, monkeypatch):
    key = compile_winner(tmp_path / "cold", monkeypatch)
    content = tb.pack(str(tmp_path / "cold" / key), 0)
    held = tmp_path / "warm" / key
    held.mkdir(parents=True)
    (held / "mine").write_bytes(b"kept")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "warm"))
    tb.populate(key, content)
    assert sorted(os.listdir(held)) == ["mine"]
    assert [p.name for p in (tmp_path / "warm").iterdir()] == [key]  # no staging left behind


def test_the_tuner_records_what_it_returns_and_returns_it_unchanged(tmp_path, monkeypatch):
    """Through the installed wrapper of ``CachingAutotuner.coordinate_descent_tuning``."""
    from torch._inductor.runtime import triton_heuristics as th

    key = compile_winner(tmp_path / "cold", monkeypatch)
    autotuner, best = tuned(key)
    calls = []

    def tuning(self, launcher, *args, **kwargs):
        calls.append((self, launcher, args, kwargs))
        return best

    monkeypatch.setattr(th.CachingAutotuner, "coordinate_descent_tuning", tuning)
    original = tb.install()
    try:
        assert original is tuning and tb.install() is None  # once
        start = types.SimpleNamespace(config=triton.Config({"XBLOCK": 8}))
        assert th.CachingAutotuner.coordinate_descent_tuning(autotuner, start, 1, k=2) is best
        assert calls == [(autotuner, start, (1,), {"k": 2})]
    finally:
        tb.restore(original)
    assert th.CachingAutotuner.coordinate_descent_tuning is tuning
    out = torch.compiler.save_cache_artifacts()
    assert out is not None and getattr(out[1], f"{tb.ARTIFACT_TYPE}_artifacts") == [key]


@pytest.mark.parametrize("kind", ["TEMPLATE", "USER_AUTOTUNE", "FIXED"])
def test_a_kernel_the_tuner_never_tunes_passes_through_without_a_record(monkeypatch, kind):
    """``run`` asks a template kernel's tuner at every launch: the wrapper must add no
    work there (each launch of a Triton GEMM would pay for it)."""
    from torch._inductor.runtime import triton_heuristics as th

    autotuner, launcher = tuned("0" * 52, found=False)
    autotuner.heuristic_type = getattr(HeuristicType, kind)
    asked = []

    def tuner(self, launcher):
        return launcher

    monkeypatch.setattr(th.CachingAutotuner, "coordinate_descent_tuning", tuner)
    monkeypatch.setattr(tb, "record", lambda *args: asked.append(args))
    original = tb.install()
    try:
        assert th.CachingAutotuner.coordinate_descent_tuning(autotuner, launcher) is launcher
        assert asked == []
        # Its later launches call the tuner itself, past the wrapper.
        assert vars(autotuner)["coordinate_descent_tuning"].__func__ is tuner
        other, _ = tuned("0" * 52, found=False)
        other.heuristic_type = HeuristicType.POINTWISE
        assert th.CachingAutotuner.coordinate_descent_tuning(other, launcher) is launcher
        assert asked == [(other, launcher)], "a kernel the tuner tunes is still recorded"
        assert "coordinate_descent_tuning" not in vars(other)
    finally:
        tb.restore(original)


def test_a_template_launch_calls_the_tuner_itself_once_both_wrappers_are_installed(monkeypatch):
    """With the prefetch's wrapper inside and the recorder outside (the install's order),
    a template kernel's second launch asks the tuner itself: the one bound on the kernel
    is the tuner both wrappers wrap, not the inner wrapper."""
    from torch._inductor.runtime import triton_heuristics as th

    from inductor_cutedsl.compat import coordesc_prefetch as cp

    def tuner(self, launcher):
        return launcher

    monkeypatch.setattr(th.CachingAutotuner, "coordinate_descent_tuning", tuner)
    monkeypatch.setattr(th.CachingAutotuner, "precompile", lambda self, *a, **k: None)
    monkeypatch.setattr(th.CachingAutotuner, "_precompile_config", lambda self, cfg: None)
    inner = cp.install()
    outer = tb.install()
    try:
        assert inner is not None and outer is not None, "both wrappers are installed here"
        autotuner, launcher = tuned("0" * 52, found=False)
        autotuner.heuristic_type = HeuristicType.TEMPLATE
        assert th.CachingAutotuner.coordinate_descent_tuning(autotuner, launcher) is launcher
        assert vars(autotuner)["coordinate_descent_tuning"].__func__ is tuner
    finally:
        tb.restore(outer)
        cp.restore(inner)


def test_a_failure_to_record_is_a_fallback_and_the_winner_is_returned(tmp_path, monkeypatch, lenient):
    from torch._inductor.runtime import triton_heuristics as th

    from inductor_cutedsl import errors

    key = compile_winner(tmp_path / "cold", monkeypatch)
    autotuner, best = tuned(key)
    before = len(errors.fallbacks)
    monkeypatch.setattr(th.CachingAutotuner, "coordinate_descent_tuning", lambda self, launcher: best)
    monkeypatch.setattr(tb, "pack", lambda *a: 1 / 0)
    original = tb.install()
    try:
        assert th.CachingAutotuner.coordinate_descent_tuning(autotuner, None) is best
    finally:
        tb.restore(original)
    assert [f["stage"] for f in errors.fallbacks[before:]] == ["warm start"]


def test_the_backend_install_wraps_the_tuner_and_disable_restores():
    from torch._inductor.runtime import triton_heuristics as th

    import inductor_cutedsl
    from inductor_cutedsl import install

    assert tb.ARTIFACT_TYPE in compat_artifacts._registered
    was_enabled = inductor_cutedsl.is_enabled()
    inductor_cutedsl.disable()
    stock = th.CachingAutotuner.coordinate_descent_tuning
    assert not getattr(stock, "records_binaries", False)
    try:
        inductor_cutedsl.enable()
        install._install_rest()
        assert getattr(th.CachingAutotuner.coordinate_descent_tuning, "records_binaries", False)
    finally:
        inductor_cutedsl.disable()
        assert th.CachingAutotuner.coordinate_descent_tuning is stock
        if was_enabled:
            inductor_cutedsl.enable()
