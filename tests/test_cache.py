"""The on-disk kernel cache: races, corruption, key sensitivity, fallbacks (no GPU)."""
from __future__ import annotations

import dataclasses
import json
import logging
import multiprocessing
import tempfile
import time
from pathlib import Path

import pytest

from inductor_cutedsl.kernels import GemmConfig
from inductor_cutedsl.kernels import epilogue as E
from inductor_cutedsl.runtime import KernelCache, KernelSpec, spec as spec_mod
from inductor_cutedsl.runtime.compiler import build, build_many

SPEC = KernelSpec(GemmConfig(128, 64, 1, 1), "bfloat16", "bfloat16", "k", "k", E.IDENTITY)


def fake_build(delay: float = 0.0):
    def _build(out_dir: Path, name: str) -> None:
        time.sleep(delay)
        (out_dir / f"{name}.o").write_bytes(b"\x7fELF" + b"x" * 1000)

    return _build


def _race_worker(root: str, key: str, start: float, real: bool) -> bool:
    time.sleep(max(0.0, start - time.time()))
    cache = KernelCache(root)
    if real:
        return build(SPEC, cache)[1]
    return cache.get_or_build(key, fake_build(0.3))[1]


@pytest.mark.parametrize("real", [False, True], ids=["slow-fake-build", "real-compile"])
def test_eight_racing_processes_build_a_key_once(tmp_path, real):
    ctx = multiprocessing.get_context("spawn")
    start = time.time() + (20.0 if real else 3.0)  # all start together, after imports
    with ctx.Pool(8) as pool:
        built = pool.starmap(
            _race_worker, [(str(tmp_path), SPEC.key(), start, real) for _ in range(8)]
        )
    assert sum(built) == 1, built
    assert KernelCache(tmp_path).lookup(SPEC.key()) is not None


def test_hit_after_build_and_memo_of_counts(tmp_path):
    cache = KernelCache(tmp_path)
    path, built = cache.get_or_build("k1", fake_build())
    assert built and path.exists() and cache.builds == 1
    path2, built2 = cache.get_or_build("k1", fake_build())
    assert (path2, built2) == (path, False) and cache.builds == 1


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete-object", "bad-manifest"])
def test_corrupt_entry_is_detected_and_rebuilt(tmp_path, damage, caplog):
    cache = KernelCache(tmp_path)
    obj, _ = cache.get_or_build("k", fake_build())
    meta = tmp_path / "k.json"
    if damage == "truncate":
        obj.write_bytes(obj.read_bytes()[:100])
    elif damage == "flip":
        data = bytearray(obj.read_bytes())
        data[500] ^= 0xFF
        obj.write_bytes(bytes(data))
    elif damage == "delete-object":
        obj.unlink()
    else:
        meta.write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="inductor_cutedsl.cache"):
        assert cache.lookup("k") is None
        _, built = cache.get_or_build("k", fake_build())
    assert built
    assert cache.lookup("k") == obj
    assert json.loads(meta.read_text())["size"] == obj.stat().st_size


def test_failed_build_leaves_no_entry(tmp_path):
    cache = KernelCache(tmp_path)

    def broken(out_dir, name):
        (out_dir / f"{name}.o").write_bytes(b"partial")
        raise RuntimeError("compiler crashed")

    with pytest.raises(RuntimeError, match="crashed"):
        cache.get_or_build("k", broken)
    assert cache.lookup("k") is None
    assert not list(tmp_path.glob("k.o")) and not list(tmp_path.glob(".build-*"))


def test_unwritable_dir_degrades_to_memory_with_one_warning(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with caplog.at_level(logging.WARNING, logger="inductor_cutedsl.cache"):
        cache = KernelCache(blocker / "cache")
    warnings = [r for r in caplog.records if "not writable" in r.getMessage()]
    assert len(warnings) == 1
    assert not cache.persistent
    path, built = cache.get_or_build("k", fake_build())
    assert built and path.exists()


def test_cache_dir_env_override(tmp_path, monkeypatch):
    monkeypatch.setenv("INDUCTOR_CUTEDSL_CACHE_DIR", str(tmp_path / "env"))
    assert KernelCache().root == tmp_path / "env"


def test_key_changes_with_everything_that_changes_the_binary(monkeypatch):
    base = SPEC.key()
    variants = [
        dataclasses.replace(SPEC, config=GemmConfig(128, 128, 1, 1)),
        dataclasses.replace(SPEC, config=GemmConfig(128, 64, 2, 1)),
        dataclasses.replace(SPEC, config=GemmConfig(128, 64, 1, 1, swizzle=8)),
        dataclasses.replace(SPEC, ab_dtype="float16"),
        dataclasses.replace(SPEC, out_dtype="float32"),
        dataclasses.replace(SPEC, a_major="m"),
        dataclasses.replace(SPEC, b_major="n"),
        dataclasses.replace(SPEC, epilogue=E.bias("row")),
        dataclasses.replace(SPEC, epilogue=E.bias("row", "float32")),
        dataclasses.replace(SPEC, epilogue=E.bias_activation("relu")),
    ]
    keys = {v.key() for v in variants}
    assert base not in keys and len(keys) == len(variants)
    # Same content, same key (the key is a pure function of the spec).
    assert dataclasses.replace(SPEC).key() == base

    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_100a")
    assert SPEC.key() != base
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_90a")
    assert SPEC.key() == base

    monkeypatch.setattr(spec_mod, "dsl_version", lambda: "9.9.9")
    assert SPEC.key() != base
    monkeypatch.undo()

    monkeypatch.setattr(spec_mod, "kernel_source_digest", lambda: "edited")
    assert SPEC.key() != base


def test_build_many_compiles_in_worker_processes(tmp_path):
    specs = [SPEC, dataclasses.replace(SPEC, a_major="m")]
    cache = KernelCache(tmp_path)
    out = build_many(specs, cache, workers=2)
    assert all(built for _, built, _ in out.values()) and cache.builds == 2
    again = build_many(specs, KernelCache(tmp_path), workers=2)
    assert not any(built for _, built, _ in again.values())


def test_default_cache_follows_config_and_opens_once(tmp_path, caplog):
    from inductor_cutedsl import config
    from inductor_cutedsl.runtime.launch import default_cache

    with config.patch(cache_dir=str(tmp_path / "a")):
        first = default_cache()
        assert first is default_cache() and first.root == tmp_path / "a"
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with caplog.at_level(logging.WARNING, logger="inductor_cutedsl.cache"):
        with config.patch(cache_dir=str(blocker / "c")):
            memory_only = default_cache()
            assert not memory_only.persistent and default_cache() is memory_only
    assert sum("not writable" in r.getMessage() for r in caplog.records) == 1


def test_read_only_warm_cache_is_still_used(tmp_path, monkeypatch):
    """A shared cache that this process cannot write (e.g. a read-only mount): its
    entries are found; a miss builds into a private directory, removed with the cache."""
    warm = tmp_path / "warm"
    KernelCache(warm).get_or_build("hit", fake_build())
    real_temp = tempfile.NamedTemporaryFile

    def unwritable(*args, dir=None, **kwargs):  # root ignores permissions: refuse the probe
        if dir is not None and Path(dir) == warm:
            raise PermissionError(13, "Read-only file system")
        return real_temp(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", unwritable)
    cache = KernelCache(warm)
    assert not cache.persistent and cache.read_only == warm
    path, built = cache.get_or_build("hit", fake_build())
    assert not built and path == warm / "hit.o"
    path, built = cache.get_or_build("miss", fake_build())
    assert built and path.parent == cache.root and not (warm / "miss.o").exists()
    cache.close()
    assert not cache.root.exists()
