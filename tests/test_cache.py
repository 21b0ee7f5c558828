"""The on-disk kernel cache: races, corruption, key sensitivity, fallbacks (no GPU)."""

from __future__ import annotations

import dataclasses
import json
import logging
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from helpers import RaceLog

from inductor_cutedsl.kernels import GemmConfig
from inductor_cutedsl.kernels import epilogue as E
from inductor_cutedsl.runtime import KernelCache, KernelSpec
from inductor_cutedsl.runtime import cache as cache_mod
from inductor_cutedsl.runtime import spec as spec_mod
from inductor_cutedsl.runtime.compiler import build, build_many

SPEC = KernelSpec(GemmConfig(128, 64, 1, 1), "bfloat16", "bfloat16", "k", "k", E.IDENTITY)


def fake_build():
    def _build(out_dir: Path, name: str) -> None:
        (out_dir / f"{name}.o").write_bytes(b"\x7fELF" + b"x" * 1000)

    return _build


def _race_worker(root: str, log: str, real: bool) -> bool:
    # The first build holds until the seven others wait for the key's lock (RaceLog).
    RaceLog(log).install(hold=7)
    cache = KernelCache(root)
    if real:
        return build(SPEC, cache)[1]
    return cache.get_or_build(SPEC.key(), fake_build())[1]


@pytest.mark.parametrize("real", [False, True], ids=["fake-build", "real-compile"])
def test_eight_racing_processes_build_a_key_once(tmp_path, real):
    """Eight processes ask for one key: one builds it while the seven others wait on its
    lock (the log shows each asking during the build and holding the lock only after),
    and they then use its entry."""
    ctx = multiprocessing.get_context("spawn")
    log = RaceLog(tmp_path / "events")
    with ctx.Pool(8) as pool:
        built = pool.starmap(_race_worker, [(str(tmp_path / "cache"), log.path, real) for _ in range(8)])
    assert sum(built) == 1, built
    builder, waited = log.raced(SPEC.key())
    assert len(waited) == 7 and builder not in waited, log.events()
    assert [e for _, e, _ in log.events()].count("build") == 1
    assert KernelCache(tmp_path / "cache").lookup(SPEC.key()) is not None


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
        assert cache.lookup("k") is None
        _, built = cache.get_or_build("k", fake_build(), "gemm damaged")
    assert built
    corrupt = [r.getMessage() for r in caplog.records if "corrupt" in r.getMessage()]
    assert len(corrupt) == 1 and "gemm damaged" in corrupt[0], corrupt
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


def _fallback_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "not writable" in r.getMessage()]


@pytest.fixture
def fresh_warnings(monkeypatch):
    """The fallback warning is once per directory per process: start each test afresh."""
    monkeypatch.setattr(cache_mod, "_warned_unwritable", set())


@pytest.mark.parametrize("how", ["not-a-directory", "writable=False"])
def test_unwritable_dir_falls_back_at_the_first_needed_write(tmp_path, caplog, how, fresh_warnings):
    """Opening and looking up write and warn nothing; the first miss falls back, with
    one warning that names the kernel; the next misses stay quiet."""
    if how == "not-a-directory":
        blocker = tmp_path / "file"
        blocker.write_text("not a directory")
        opened = lambda: KernelCache(blocker / "cache")
    else:
        opened = lambda: KernelCache(tmp_path / "shared", writable=False)
    with caplog.at_level(logging.WARNING, logger="inductor_cutedsl.cache"):
        cache = opened()
        assert cache.lookup("k") is None and cache._private is None
        assert not cache.persistent and cache._private is None
        assert _fallback_warnings(caplog) == []
        path, built = cache.get_or_build("k", fake_build(), "gemm 128x64 bf16")
        assert built and path.exists() and path.parent == cache.root
        cache.get_or_build("k2", fake_build(), "gemm other")
        opened().get_or_build("k3", fake_build(), "gemm third")  # a second cache on the dir
    warnings = _fallback_warnings(caplog)
    assert len(warnings) == 1 and "gemm 128x64 bf16" in warnings[0] and "gemm other" not in warnings[0], warnings
    assert not (tmp_path / "shared").exists()
    cache.close()
    assert not path.parent.exists()


def test_a_worker_cache_never_falls_back(tmp_path):
    """A compile worker's private dir would die with its job: it raises instead."""
    cache = KernelCache(tmp_path / "shared", writable=False, fallback=False)
    with pytest.raises(PermissionError, match="not writable.*cannot store gemm x"):
        cache.get_or_build("k", fake_build(), "gemm x")


def test_cache_dir_env_override_is_made_absolute_at_import(tmp_path):
    """A relative INDUCTOR_CUTEDSL_CACHE_DIR names the directory where the process
    started: compile workers and other processes starting elsewhere find the same one."""
    code = (
        "import os, inductor_cutedsl\nfrom inductor_cutedsl.runtime.cache import KernelCache\n"
        "os.chdir('/')\nprint(inductor_cutedsl.config.cache_dir, KernelCache().root)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "INDUCTOR_CUTEDSL_CACHE_DIR": "rel/cache"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(tmp_path / "rel" / "cache")] * 2


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


def test_default_cache_follows_config_and_opens_once(tmp_path, caplog, fresh_warnings):
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
            assert _fallback_warnings(caplog) == []  # nothing needed writing yet
            default_cache().get_or_build("k", fake_build(), "gemm y")
            default_cache().get_or_build("k2", fake_build(), "gemm z")
    assert len(_fallback_warnings(caplog)) == 1


def test_read_only_warm_cache_is_still_used(tmp_path, monkeypatch, caplog, fresh_warnings):
    """A shared cache opened read-only: its entries are found, with no warning and no
    write anywhere; a miss builds into a private directory, removed with the cache."""
    warm = tmp_path / "warm"
    KernelCache(warm).get_or_build("hit", fake_build())
    before = sorted(p.name for p in warm.iterdir())
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    with caplog.at_level(logging.WARNING, logger="inductor_cutedsl.cache"):
        cache = KernelCache(warm, writable=False)
        path, built = cache.get_or_build("hit", fake_build())
        assert not built and path == warm / "hit.o"
        assert caplog.records == [] and list(tmp.iterdir()) == []
        assert cache.read_only == warm and not cache.persistent
        path, built = cache.get_or_build("miss", fake_build(), "gemm miss")
    assert built and path.parent == cache.root and path.parent.parent == tmp
    assert cache.lookup("miss") == path and cache.lookup("hit") == warm / "hit.o"
    assert sorted(p.name for p in warm.iterdir()) == before, "nothing written into the shared dir"
    cache.close()
    assert list(tmp.iterdir()) == []


def test_corrupt_entry_warning_names_the_kernel_once(tmp_path, monkeypatch, caplog):
    """Through the compile path (build_async looks up, get_or_build looks up twice):
    one warning, naming the kernel, not its hash."""
    from inductor_cutedsl.runtime import compiler

    monkeypatch.setattr(compiler, "export_object", lambda spec, d, n: fake_build()(d, n))
    cache = KernelCache(tmp_path)
    obj, _ = compiler.build(SPEC, cache)
    obj.write_bytes(b"truncated")
    with caplog.at_level(logging.DEBUG, logger="inductor_cutedsl.cache"):
        ((path, built, _),) = compiler.wait([compiler.build_async(SPEC, cache, workers=1)])
    assert built and cache.lookup(SPEC.key()) == path
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and SPEC.describe() in warnings[0] and SPEC.key() not in warnings[0], warnings


def _leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.suffix == ".lock" or p.name.startswith((".build", ".probe")))


def test_no_lock_file_outlives_its_build(tmp_path):
    cache = KernelCache(tmp_path)
    cache.get_or_build("ok", fake_build())

    def broken(out_dir, name):
        (out_dir / f"{name}.o").write_bytes(b"partial")
        raise RuntimeError("compiler crashed")

    with pytest.raises(RuntimeError, match="crashed"):
        cache.get_or_build("bad", broken)
    assert _leftovers(tmp_path) == []
    # A process killed while building leaves its lock file: the next build takes it over.
    (tmp_path / "stale.lock").touch()
    assert cache.get_or_build("stale", fake_build())[1]
    assert _leftovers(tmp_path) == []


def test_key_lock_excludes_while_lock_files_are_removed(tmp_path):
    """Holders remove the lock file on release while others wait on it: still at most
    one holder at a time (flock is per open file, so threads contend like processes)."""
    import threading

    path, inside, overlaps = tmp_path / "k.lock", [0], []

    def hammer():
        for _ in range(200):
            with cache_mod._key_lock(path, "k"):
                inside[0] += 1
                overlaps.append(inside[0])
                time.sleep(0.0002)
                inside[0] -= 1

    threads = [threading.Thread(target=hammer) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(overlaps) == 1200 and max(overlaps) == 1
    assert not path.exists()


def _flaky_worker(root: str, log: str) -> tuple[int, int]:
    """Builds "k"; the first attempt across all processes fails, once the seven others
    wait for the key's lock. Returns (built, failed)."""
    RaceLog(log).install(hold=7)

    def build_once(out_dir: Path, name: str) -> None:
        try:
            fd = os.open(os.path.join(root, "failed-once"), os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            (out_dir / f"{name}.o").write_bytes(b"\x7fELF" + b"x" * 1000)
            with open(os.path.join(root, "builds"), "a") as f:
                f.write("1")
            return
        os.close(fd)
        raise RuntimeError("first build fails")

    try:
        return int(KernelCache(root).get_or_build("k", build_once)[1]), 0
    except RuntimeError:
        return 0, 1


def test_waiters_of_a_failed_build_recheck_and_build_once(tmp_path):
    """Eight processes race on a key whose first build fails while the seven others wait
    on its lock: the failure is that one process's, one of the waiters then builds the
    key, the rest use its entry, and no lock file is left."""
    ctx = multiprocessing.get_context("spawn")
    log = RaceLog(tmp_path / "events")
    root = tmp_path / "cache"
    root.mkdir()
    with ctx.Pool(8) as pool:
        results = pool.starmap(_flaky_worker, [(str(root), log.path) for _ in range(8)])
    assert [sum(r) for r in zip(*results)] == [1, 1], results
    failed, waited = log.raced("k")
    assert len(waited) == 7 and failed not in waited, log.events()
    events = log.events()
    assert [e for _, e, _ in events].count("failed") == 1 and [e for _, e, _ in events].count("built") == 1
    second = next(pid for pid, event, _ in events if event == "built")
    assert second in waited, "a process that waited on the failed build built the key"
    assert (root / "builds").read_text() == "1"
    assert KernelCache(root).lookup("k") is not None
    assert _leftovers(root) == []


# A program that uses a read-only warm cache, builds a miss (real compiles in worker
# processes when REAL is set), and has a build fail; argv: cache dir, writable flag, real.
PROGRAM = r"""
import logging, sys
logging.basicConfig(level=logging.WARNING, format="WARNING %(message)s")
from pathlib import Path
from inductor_cutedsl.runtime import KernelCache
from inductor_cutedsl.runtime.compiler import build_many

warm, writable, real = Path(sys.argv[1]), sys.argv[2] == "1", sys.argv[3] == "1"
cache = KernelCache(warm, writable=writable)
assert cache.get_or_build("hit", lambda d, n: 1 / 0)[1] is False
def build(d, n): (d / (n + ".o")).write_bytes(b"\x7fELF" + b"y" * 100)
def broken(d, n): (d / (n + ".o")).write_bytes(b"partial"); raise RuntimeError("crash")
assert cache.get_or_build("miss", build, "gemm MISS")[1]
try:
    cache.get_or_build("bad", broken, "gemm BAD")
except RuntimeError:
    print("FAILED-AS-EXPECTED")
if real:
    from test_workers import SPEC, BROKEN
    from inductor_cutedsl.runtime.compiler import build_async, wait
    out = build_many([SPEC], KernelCache(sys.argv[5]), workers=2)
    try:
        wait([build_async(BROKEN, KernelCache(sys.argv[5]), 2)])
    except RuntimeError:
        print("WORKER-FAILED-AS-EXPECTED")
print("PRIVATE", cache.root != warm, flush=True)
"""


def _left_in_tmp(tmp: Path) -> list[Path]:
    """What is left under ``tmp``, less the CuTe DSL's own per-user JIT cache dir
    (``$TMPDIR/$USER/cutlass_python_cache``, made at its import and reused by every
    run, as Inductor's ``/tmp/torchinductor_$USER`` is): not ours, and not one per run."""
    import getpass

    dsl = tmp / (os.getenv("USER") or getpass.getuser())
    return sorted(p for p in tmp.rglob("*") if p not in (dsl, dsl / "cutlass_python_cache"))


def _run_program(tmp_path: Path, warm: Path, writable: bool, real: bool = False, wrap: list[str] = ()):
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    repo = Path(__file__).resolve().parents[1]
    # The repository (the package) and the tests (test_workers' specs), as pytest sees them.
    path = os.pathsep.join([str(repo), str(repo / "tests"), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": path}
    args = [str(warm), "1" if writable else "0", "1" if real else "0", str(repo / "tests"), str(tmp_path / "rw")]
    command = [*wrap, sys.executable, str(script), *args]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done, tmp


def _warm(tmp_path: Path) -> tuple[Path, list[str]]:
    warm = tmp_path / "warm"
    KernelCache(warm).get_or_build("hit", fake_build())
    return warm, sorted(p.name for p in warm.iterdir())


def test_read_only_program_leaves_nothing_in_tmp(tmp_path):
    """A whole process on a cache opened read-only: one fallback warning naming the
    kernel, the shared dir untouched, and after exit nothing in $TMPDIR, failed build
    and compile workers included (real compiles, so the DSL's own files count too)."""
    warm, before = _warm(tmp_path)
    done, tmp = _run_program(tmp_path, warm, writable=False, real=True)
    assert "FAILED-AS-EXPECTED" in done.stdout and "WORKER-FAILED-AS-EXPECTED" in done.stdout
    assert "PRIVATE True" in done.stdout
    warnings = [line for line in done.stderr.splitlines() if "not writable" in line]
    assert len(warnings) == 1 and "gemm MISS" in warnings[0], done.stderr[-3000:]
    assert sorted(p.name for p in warm.iterdir()) == before
    assert _left_in_tmp(tmp) == []
    assert _leftovers(tmp_path / "rw") == []


@pytest.mark.skipif(shutil.which("unshare") is None or shutil.which("mount") is None, reason="needs unshare")
def test_read_only_mount(tmp_path):
    """The same on a real read-only bind mount (writes fail with EROFS even as root),
    opened with the default settings: found unwritable at the first miss, not before."""
    warm, before = _warm(tmp_path)
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no user+mount namespaces here: {probe.stderr.decode()[-200:]}")
    remount = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
    wrap = ["unshare", "-rm", "sh", "-c", remount, str(warm)]
    done, tmp = _run_program(tmp_path, warm, writable=True, wrap=wrap)
    assert "FAILED-AS-EXPECTED" in done.stdout and "PRIVATE True" in done.stdout
    warnings = [line for line in done.stderr.splitlines() if "not writable" in line]
    assert len(warnings) == 1 and "gemm MISS" in warnings[0] and "Read-only file system" in warnings[0], done.stderr
    assert sorted(p.name for p in warm.iterdir()) == before
    assert _left_in_tmp(tmp) == []


def test_private_dirs_of_dead_processes_are_swept(tmp_path, monkeypatch, fresh_warnings):
    """A process killed outright cannot clean up: the next fallback removes its dir
    (its owner lock is free), never a live process's."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    code = (
        "import os, sys, tempfile; tempfile.tempdir = sys.argv[1]\n"
        "from inductor_cutedsl.runtime import KernelCache\n"
        "c = KernelCache(sys.argv[1] + '/nope', writable=False)\n"
        "c.get_or_build('k', lambda d, n: (d / (n + '.o')).write_bytes(b'x'))\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, capture_output=True)
    dead = list(tmp_path.glob(cache_mod.PRIVATE_PREFIX + "*"))
    assert len(dead) == 1
    alive = KernelCache(tmp_path / "nope", writable=False)
    alive.get_or_build("k", fake_build())
    assert list(tmp_path.glob(cache_mod.PRIVATE_PREFIX + "*")) == [alive.root]
    KernelCache(tmp_path / "nope", writable=False).get_or_build("k", fake_build())  # sweeps again
    assert alive.root.exists()
    alive.close()
    assert list(tmp_path.glob(cache_mod.PRIVATE_PREFIX + "*")) == []


def test_stopping_a_busy_worker_cleans_its_build(tmp_path):
    """A worker stopped mid-compile (pool shut down) removes its build dir and lock."""
    import threading

    from inductor_cutedsl.runtime import workers

    pool = workers.WorkerPool(1)
    result = {}
    thread = threading.Thread(
        target=lambda: result.setdefault("r", _catch(lambda: pool.build(SPEC.to_json(), str(tmp_path))))
    )
    thread.start()
    # Mid-compile: its build dir exists (made once the key's lock is held and recorded;
    # a worker stopped while still taking the lock may leave the lock file, which the
    # next build of that key takes over).
    deadline = time.time() + 120
    while not list(tmp_path.glob(".build-*")) and time.time() < deadline:
        time.sleep(0.01)
    assert list(tmp_path.glob(".build-*")), "the worker never started building"
    (worker,) = pool._all
    pool.closed = True
    workers._stop(pool._all, grace_s=0.0)  # no grace: the compile is still running
    thread.join()
    assert isinstance(result["r"], Exception)
    # Its SIGTERM handler ended it (a worker that ignored the signal is killed: -SIGKILL).
    assert worker.proc.returncode == 128 + signal.SIGTERM and pool._all == [worker]
    # Stopped mid-compile, or (where the DSL swallowed the signal) once the build ended.
    assert _leftovers(tmp_path) == []


def _catch(fn):
    try:
        return fn()
    except Exception as exc:
        return exc


def test_corrupt_entry_rebuilt_by_a_worker_is_reported_once_here(tmp_path, caplog):
    """A worker's warnings come back in its reply and are logged by this process."""
    cache = KernelCache(tmp_path)
    ((obj, built, _),) = build_many([SPEC], cache, workers=2).values()
    assert built
    obj.write_bytes(obj.read_bytes()[:-1])
    with caplog.at_level(logging.WARNING):
        ((path, built, _),) = build_many([SPEC], cache, workers=2).values()
    assert built and path == obj and cache.lookup(SPEC.key()) == obj
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and warnings[0].name == "inductor_cutedsl.cache", warnings
    assert SPEC.describe() in warnings[0].getMessage() and SPEC.key() not in warnings[0].getMessage()
