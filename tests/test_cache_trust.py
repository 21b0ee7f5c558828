"""What the kernel cache loads: native code only from a directory and objects of this
user's that no one else can write, unless the user opts in to a shared cache; a
failed or partial write never leaves an entry that loads."""

from __future__ import annotations

import logging
import os

import pytest

from inductor_cutedsl import config
from inductor_cutedsl.runtime import cache as cache_mod
from inductor_cutedsl.runtime.cache import KernelCache, trust_reason


def fake_build(payload: bytes = b"\x7fELF object"):
    def build(out_dir, name):
        (out_dir / f"{name}.o").write_bytes(payload)

    return build


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(cache_mod, "_warned_unwritable", set())


def _warm(path) -> KernelCache:
    """A cache at ``path`` holding the entry ``hit``, built by this user."""
    cache = KernelCache(path)
    cache.get_or_build("hit", fake_build())
    return cache


def test_a_cache_dir_of_ours_made_here_is_private_and_trusted(tmp_path):
    cache = _warm(tmp_path / "new")
    assert oct((tmp_path / "new").stat().st_mode & 0o777) == "0o700"
    assert trust_reason(tmp_path / "new") is None and cache.lookup("hit") is not None


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o757], ids=["world", "group", "others"])
def test_a_dir_others_can_write_is_not_read(tmp_path, caplog, mode):
    warm = tmp_path / "warm"
    _warm(warm)
    warm.chmod(mode)
    with caplog.at_level(logging.WARNING, logger="inductor_cutedsl.cache"):
        cache = KernelCache(warm)
        assert cache.lookup("hit") is None, "an object others could have replaced is not loaded"
        path, built = cache.get_or_build("hit", fake_build())
    assert built and path.parent != warm and not cache.persistent
    (message,) = [r.getMessage() for r in caplog.records if "is not used" in r.getMessage()]
    assert "writable by other users" in message and "INDUCTOR_CUTEDSL_SHARED_CACHE" in message


def test_a_dir_of_another_user_is_not_read(tmp_path, monkeypatch):
    warm = tmp_path / "warm"
    _warm(warm)
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(warm).st_uid + 1)
    assert "not to this user" in trust_reason(warm)
    assert KernelCache(warm).lookup("hit") is None


def test_a_shared_cache_is_read_when_the_user_opts_in(tmp_path, monkeypatch):
    warm = tmp_path / "warm"
    _warm(warm)
    warm.chmod(0o777)
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(warm).st_uid + 1)
    with config.patch(shared_cache=True):
        assert KernelCache(warm).lookup("hit") is not None


def test_an_object_others_can_write_is_rebuilt(tmp_path, caplog):
    cache = _warm(tmp_path / "warm")
    obj = cache.lookup("hit")
    obj.chmod(0o666)
    fresh = KernelCache(tmp_path / "warm")
    assert fresh.lookup("hit") is None
    with caplog.at_level(logging.WARNING, logger="inductor_cutedsl.cache"):
        path, built = fresh.get_or_build("hit", fake_build())
    assert built and trust_reason(path) is None
    assert any("writable by other users" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("fail_at", ["build", "manifest", "rename"])
def test_a_failed_or_partial_write_leaves_no_entry(tmp_path, monkeypatch, fail_at):
    """Disk full in the build, while writing the manifest, or at the object's rename: no
    entry loads afterwards, and the next build of the key succeeds."""
    cache = KernelCache(tmp_path / "c")

    def partial(out_dir, name):
        (out_dir / f"{name}.o").write_bytes(b"\x7fELF half")
        if fail_at == "build":
            raise OSError(28, "No space left on device")

    real_replace = os.replace

    def replace(src, dst):
        if (fail_at == "rename" and str(dst).endswith(".o")) or (fail_at == "manifest" and str(dst).endswith(".json")):
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OSError, match="No space left"):
        cache.get_or_build("k", partial)
    monkeypatch.setattr(os, "replace", real_replace)
    assert KernelCache(tmp_path / "c").lookup("k") is None
    assert not [p for p in (tmp_path / "c").iterdir() if p.name.startswith(".build")], "no build dir left"
    path, built = KernelCache(tmp_path / "c").get_or_build("k", fake_build())
    assert built and path.read_bytes() == b"\x7fELF object"
