"""The kernel cache's remote tier (``runtime/remote.py``) against a real Redis server.

The fixture starts Debian's ``redis-server`` on a free port (``.ci/run`` installs it and
the ``redis`` client, and sets ``INDUCTOR_CUTEDSL_TEST_REDIS=required`` so that CI fails
rather than skips without them). Kernel objects are stand-in bytes: the compile step is
replaced by one that writes them, or by one that fails, to show a process built nothing.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from torch._inductor import config as inductor_config

from inductor_cutedsl.kernels import epilogue as E
from inductor_cutedsl.kernels.config import GemmConfig
from inductor_cutedsl.runtime import artifacts, compiler, remote
from inductor_cutedsl.runtime.cache import KernelCache
from inductor_cutedsl.runtime.spec import KernelSpec

ROOT = Path(__file__).resolve().parents[1]
SPEC = KernelSpec(GemmConfig(128, 128), "bfloat16", "bfloat16", "k", "k", E.IDENTITY)
OTHER = KernelSpec(GemmConfig(128, 192), "bfloat16", "bfloat16", "k", "k", E.IDENTITY)
REQUIRED = os.environ.get("INDUCTOR_CUTEDSL_TEST_REDIS") == "required"


def _missing() -> str | None:
    if shutil.which("redis-server") is None:
        return "redis-server is not installed"
    try:
        import redis  # noqa: F401
    except ImportError:
        return "the redis package is not installed"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, tmp: Path) -> None:
        self.port = _free_port()
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            cwd=tmp,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        import redis

        self.client = redis.Redis(host="127.0.0.1", port=self.port)
        for _ in range(200):
            try:
                self.client.ping()
                return
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


@pytest.fixture
def server(tmp_path, monkeypatch):
    why = _missing()
    if why is not None:
        if REQUIRED:
            pytest.fail(f"INDUCTOR_CUTEDSL_TEST_REDIS=required but {why}")
        pytest.skip(why)
    srv = Server(tmp_path)
    monkeypatch.setenv("TORCHINDUCTOR_REDIS_HOST", "127.0.0.1")
    monkeypatch.setenv("TORCHINDUCTOR_REDIS_PORT", str(srv.port))
    monkeypatch.delenv("TORCHINDUCTOR_REDIS_URL", raising=False)
    remote.reset()
    with inductor_config.patch(fx_graph_remote_cache=True):
        yield srv
    remote.reset()
    srv.stop()


def _object(spec: KernelSpec) -> bytes:
    return b"\x7fELF stand-in for " + spec.key().encode() * 40


@pytest.fixture
def compiles(monkeypatch):
    """Builds write stand-in objects; the list holds the keys compiled in this process."""
    done: list[str] = []

    def export_object(spec, out_dir, name):
        done.append(spec.key())
        (out_dir / f"{name}.o").write_bytes(_object(spec))

    monkeypatch.setattr(compiler, "export_object", export_object)
    return done


def test_off_unless_inductors_remote_caches_are_on(tmp_path, compiles, monkeypatch):
    remote.reset()
    monkeypatch.setattr(remote.compat_remote, "redis_backend", lambda _: pytest.fail("no backend may be made"))
    with inductor_config.patch(fx_graph_remote_cache=None, autotune_remote_cache=None):
        assert remote.remote() is None
        assert compiler.build(SPEC, KernelCache(tmp_path))[1] and compiles == [SPEC.key()]


def test_a_backend_that_cannot_be_made_costs_a_local_build(tmp_path, compiles, monkeypatch, caplog):
    remote.reset()

    def no_redis(_):
        raise RuntimeError("redis not available but required for remote cache")

    monkeypatch.setattr(remote.compat_remote, "redis_backend", no_redis)
    with inductor_config.patch(autotune_remote_cache=True), caplog.at_level(logging.WARNING):
        assert compiler.build(SPEC, KernelCache(tmp_path / "a"))[1]
        assert compiler.build(OTHER, KernelCache(tmp_path / "b"))[1]
    remote.reset()
    assert caplog.text.count("remote kernel cache unavailable") == 1


_WARM = r"""
import hashlib, json, sys
from torch._inductor import config as inductor_config
from inductor_cutedsl.kernels import epilogue as E
from inductor_cutedsl.kernels.config import GemmConfig
from inductor_cutedsl.runtime import compiler, remote
from inductor_cutedsl.runtime.cache import KernelCache
from inductor_cutedsl.runtime.spec import KernelSpec

def no_compile(*args):
    raise AssertionError("this process must build nothing")

compiler.export_object = no_compile
inductor_config.fx_graph_remote_cache = True
spec = KernelSpec(GemmConfig(128, 128), "bfloat16", "bfloat16", "k", "k", E.IDENTITY)
cache = KernelCache(sys.argv[1])
path, built = compiler.build(spec, cache)
print(json.dumps({"built": built, "sha": hashlib.sha256(path.read_bytes()).hexdigest(),
                  "fetched": remote.remote().fetched, "builds": cache.builds}))
"""


def test_many_processes_warm_start_from_one_populated_server(server, tmp_path, compiles):
    path, built = compiler.build(SPEC, KernelCache(tmp_path / "builder"))
    assert built and compiles == [SPEC.key()] and remote.remote().published == 1
    env = {**os.environ, "INDUCTOR_CUTEDSL_CACHE_DIR": str(tmp_path / "unused")}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WARM, str(tmp_path / f"fresh{i}")],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    import json

    want = hashlib.sha256(_object(SPEC)).hexdigest()
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
        report = json.loads(out.strip().splitlines()[-1])
        assert report == {"built": False, "sha": want, "fetched": 1, "builds": 0}, report


def test_a_server_gone_away_costs_a_local_build_and_nothing_fails(server, tmp_path, compiles, caplog):
    compiler.build(SPEC, KernelCache(tmp_path / "builder"))
    server.stop()
    with caplog.at_level(logging.WARNING):
        path, built = compiler.build(SPEC, KernelCache(tmp_path / "fresh"))  # on the server, now gone
        assert built and path.read_bytes() == _object(SPEC)
        assert compiler.build(OTHER, KernelCache(tmp_path / "fresh"))[1]
    assert compiles == [SPEC.key(), SPEC.key(), OTHER.key()]


@pytest.mark.parametrize("damage", [lambda b: b[:-9], lambda b: b[:-1] + bytes([b[-1] ^ 0x40])], ids=["cut", "bit"])
def test_a_damaged_blob_is_refused_rebuilt_and_replaced(server, tmp_path, compiles, caplog, damage):
    good = artifacts.pack(_object(SPEC))
    server.client.set(remote.remote_key(SPEC.key()), damage(good))
    with caplog.at_level(logging.WARNING):
        path, built = compiler.build(SPEC, KernelCache(tmp_path))
    assert built and compiles == [SPEC.key()] and path.read_bytes() == _object(SPEC)
    assert f"remote kernel {SPEC.key()} refused" in caplog.text
    assert server.client.get(remote.remote_key(SPEC.key())) == good  # the rebuilt one replaced it


_WRITER = r"""
import json, os, sys, time
from inductor_cutedsl.runtime import artifacts, remote
from torch._inductor.remote_cache import RedisRemoteCacheBackend

key, tag, go = sys.argv[1], sys.argv[2], sys.argv[3]
tier = remote.RemoteKernels(RedisRemoteCacheBackend(remote.CACHE_ID))
open(go + "." + tag, "w").close()  # ready
while not os.path.exists(go):
    time.sleep(0.001)
start = time.time()
i = 0
while time.time() < start + 1.0:  # a second of puts, blobs of distinct sizes
    tier.publish(key, (tag * (1000 + i % 5000)).encode())
    i += 1
print(json.dumps({"start": start, "end": time.time(), "published": tier.published, "puts": i}))
"""


def test_two_writers_racing_on_one_key_leave_a_whole_blob(server, tmp_path):
    import json

    key, go = SPEC.key(), tmp_path / "go"
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, key, tag, str(go)],
            cwd=ROOT,
            env=dict(os.environ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for tag in ("a", "b")
    ]
    deadline = time.time() + 120
    while not all(Path(f"{go}.{tag}").exists() for tag in ("a", "b")):  # both imported and waiting
        assert time.time() < deadline and all(w.poll() is None for w in writers), "a writer did not start"
        time.sleep(0.01)
    go.touch()
    reader = remote.RemoteKernels(remote.compat_remote.redis_backend(remote.CACHE_ID))
    reads = 0
    while any(w.poll() is None for w in writers):
        data = reader.fetch(key)  # every read is one writer's whole blob
        if data is not None:
            assert set(data.decode()) in ({"a"}, {"b"}) and len(data) >= 1000
            reads += 1
    assert reads > 0
    spans = []
    for w in writers:
        out, err = w.communicate(timeout=60)
        assert w.returncode == 0, err[-2000:]
        report = json.loads(out.strip().splitlines()[-1])
        assert report["published"] == report["puts"] > 0
        spans.append((report["start"], report["end"]))
    # The two writers' puts overlapped in time: the race happened.
    assert max(s for s, _ in spans) < min(e for _, e in spans), spans
    final = reader.fetch(key)
    assert final is not None and set(final.decode()) in ({"a"}, {"b"})
