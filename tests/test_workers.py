"""The compile worker processes (real compiles for sm_90a, no GPU needed)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from inductor_cutedsl.kernels import GemmConfig
from inductor_cutedsl.kernels import epilogue as E
from inductor_cutedsl.runtime import KernelCache, KernelSpec
from inductor_cutedsl.runtime.compiler import build_async, build_many, wait

SPEC = KernelSpec(GemmConfig(128, 64, 1, 1), "bfloat16", "bfloat16", "k", "k", E.IDENTITY)
BROKEN = KernelSpec(
    GemmConfig(128, 64, 1, 1),
    "bfloat16",
    "bfloat16",
    "k",
    "k",
    E.Epilogue("broken", "def epilogue(acc, m, n, l, ops):\n    return no_such_name(acc)\n"),
)


def test_a_failed_build_is_reported_and_the_pool_keeps_working(tmp_path):
    cache = KernelCache(tmp_path)
    bad, good = build_async(BROKEN, cache, 2), build_async(SPEC, cache, 2)
    with pytest.raises(RuntimeError, match="no_such_name"):
        wait([bad])
    ((path, built, _),) = wait([good])
    assert built and path.exists() and cache.builds == 1
    assert build_async(SPEC, cache, 2).result()[1] is False, "a cache hit builds nothing"


def test_a_build_done_before_its_bookkeeping_neither_hangs_nor_stays_in_flight(tmp_path, monkeypatch):
    """A worker's build can be done by the time ``build_async`` files it (another
    process built it a moment ago): that must not deadlock on the in-flight lock."""
    import concurrent.futures
    import threading

    from inductor_cutedsl.runtime import compiler, workers

    class Pool:
        def build(self, spec_json, root):
            return tmp_path / "built.o", True, 0.0

    class AtOnce:
        def submit(self, fn, *args):
            fut = concurrent.futures.Future()
            fut.set_result(fn(*args))
            return fut

    monkeypatch.setattr(workers, "pool", lambda size: Pool())
    monkeypatch.setattr(compiler, "_dispatch", lambda size: AtOnce())
    got = []
    filing = threading.Thread(target=lambda: got.append(build_async(SPEC, KernelCache(tmp_path), 2)), daemon=True)
    filing.start()
    filing.join(timeout=30)
    assert not filing.is_alive(), "build_async deadlocked"
    assert got[0].result()[1] is True
    # Forgotten once done (this build's slot: other tests of the process may have builds
    # of their own in flight).
    assert (str(tmp_path), SPEC.key()) not in compiler._inflight


def test_one_spec_in_flight_is_shared(tmp_path):
    cache = KernelCache(tmp_path)
    first, second = build_async(SPEC, cache, 2), build_async(SPEC, cache, 2)
    assert first is second
    wait([first])
    assert cache.builds == 1


def test_workers_never_rerun_the_main_script(tmp_path):
    """Spawned multiprocessing workers re-import __main__; ours must not run the
    caller's unguarded script again."""
    script = tmp_path / "unguarded.py"
    script.write_text(
        textwrap.dedent(f"""
        from inductor_cutedsl.runtime import KernelCache, KernelSpec
        from inductor_cutedsl.runtime.compiler import build_many
        from inductor_cutedsl.kernels import GemmConfig, IDENTITY
        print("MAIN-RAN", flush=True)
        specs = [KernelSpec(GemmConfig(128, 64, 1, 1), "bfloat16", "bfloat16", m, "k", IDENTITY)
                 for m in ("k", "m")]
        out = build_many(specs, KernelCache({str(tmp_path / "cache")!r}), 2)
        print("BUILT", sum(b for _, b, _ in out.values()), flush=True)
    """)
    )
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # installed or not
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("MAIN-RAN") == 1 and "BUILT 2" in done.stdout


def test_build_many_reports_every_spec(tmp_path):
    specs = [SPEC, SPEC]  # duplicates collapse
    out = build_many(specs, KernelCache(tmp_path), workers=2)
    assert list(out) == [SPEC]
