"""Our kernels travel with torch's portable cache artifacts (``runtime/artifacts.py``):
saved where they were built, loaded into an empty kernel cache elsewhere, refused when
a blob is truncated, altered or keyed as a path. The objects here are stand-in bytes:
the cache keeps bytes by key and digest, whatever they hold."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.compiler._cache import CacheArtifactManager

from inductor_cutedsl import config
from inductor_cutedsl.runtime import artifacts
from inductor_cutedsl.runtime.cache import KernelCache

ROOT = Path(__file__).resolve().parents[1]
KEY = "0123456789abcdef0123456789abcdef"
OTHER = "fedcba9876543210fedcba9876543210"


def _built(root: Path, key: str = KEY, data: bytes = b"\x7fELF stand-in object " * 50) -> bytes:
    cache = KernelCache(root)
    cache.get_or_build(key, lambda d, n: (d / f"{n}.o").write_bytes(data))
    return data


def _saved(cache_dir: Path, *keys: str, others: tuple[str, ...] = ()) -> bytes:
    """What save_cache_artifacts() returns after our launchers recorded ``keys`` (and
    ``others`` were recorded some other way)."""
    with config.patch(cache_dir=str(cache_dir)):
        for key in keys:
            artifacts.record(key)
    saved = torch.compiler.save_cache_artifacts()
    assert saved is not None
    blob, info = saved
    assert sorted(getattr(info, f"{artifacts.ARTIFACT_TYPE}_artifacts")) == sorted(keys + others)
    return blob


@pytest.fixture(autouse=True)
def fresh_artifacts():
    with CacheArtifactManager.with_fresh_cache():
        yield


def test_a_saved_kernel_loads_into_an_empty_cache_without_a_build(tmp_path):
    data = _built(tmp_path / "built")
    blob = _saved(tmp_path / "built", KEY)
    target = tmp_path / "fresh"
    with config.patch(cache_dir=str(target)):
        from inductor_cutedsl.runtime.launch import default_cache

        info = torch.compiler.load_cache_artifacts(blob)
        assert info is not None and getattr(info, f"{artifacts.ARTIFACT_TYPE}_artifacts") == [KEY]
        cache = default_cache()
        assert cache.read(KEY) == data and cache.builds == 0  # kept, not compiled
    # An intact entry, as a build leaves it: a cache opened later finds it.
    assert KernelCache(target).lookup(KEY) == target / f"{KEY}.o"


def test_only_what_the_cache_holds_is_recorded(tmp_path):
    _built(tmp_path)
    with config.patch(cache_dir=str(tmp_path)):
        artifacts.record(OTHER)  # never built here
    assert torch.compiler.save_cache_artifacts() is None


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda c: c[:-7], id="truncated"),
        pytest.param(lambda c: c[:-1] + bytes([c[-1] ^ 1]), id="altered"),
        pytest.param(lambda c: b"not ours" + c, id="foreign"),
    ],
)
def test_a_damaged_blob_is_refused_and_the_others_still_load(tmp_path, caplog, damage):
    good = _built(tmp_path / "built", OTHER, b"another object")
    CacheArtifactManager.record_artifact(
        artifacts.ARTIFACT_TYPE, KEY, damage(artifacts.pack(b"\x7fELF stand-in object"))
    )
    blob = _saved(tmp_path / "built", OTHER, others=(KEY,))  # the damaged one first
    target = tmp_path / "fresh"
    with config.patch(cache_dir=str(target)), caplog.at_level(logging.WARNING, "inductor_cutedsl.artifacts"):
        assert torch.compiler.load_cache_artifacts(blob) is not None
    assert f"kernel artifact {KEY} refused" in caplog.text
    assert not (target / f"{KEY}.o").exists() and KernelCache(target).lookup(KEY) is None
    assert KernelCache(target).read(OTHER) == good


@pytest.mark.parametrize("key", ["../escape", KEY.upper(), KEY + "0", ""])
def test_a_key_that_is_not_a_cache_key_is_refused(tmp_path, key):
    with pytest.raises(artifacts.ArtifactError, match="not a kernel cache key"):
        artifacts.unpack(key, artifacts.pack(b"x"))
    with config.patch(cache_dir=str(tmp_path / "c")):
        artifacts.populate(key, artifacts.pack(b"x"))
    assert not list(tmp_path.rglob("*.o"))  # "../escape" would land here, beside the cache dir


def test_an_untrusted_cache_dir_gets_no_loaded_kernel(tmp_path, caplog):
    """The kernel cache's trust rule holds for loaded artifacts as for builds: a
    directory others can write is not written (the object goes to a private one)."""
    _built(tmp_path / "built")
    blob = _saved(tmp_path / "built", KEY)
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o777)
    with config.patch(cache_dir=str(shared)), caplog.at_level(logging.WARNING):
        torch.compiler.load_cache_artifacts(blob)
        from inductor_cutedsl.runtime.launch import default_cache

        assert default_cache().read(KEY) is not None  # this process has it, privately
    assert not list(shared.iterdir())


def test_pack_and_unpack_agree():
    data = bytes(range(256)) * 3
    assert artifacts.unpack(KEY, artifacts.pack(data)) == data
    header = artifacts.pack(data).split(b"\n")[1]
    assert json.loads(header)["size"] == len(data)


@pytest.mark.parametrize("enabled", ["1", "0"])
def test_a_fresh_process_that_imports_us_loads_the_kernels(tmp_path, enabled):
    """Registered at import, enabled or not: torch drops a whole blob that holds an
    artifact of an unknown type."""
    data = _built(tmp_path / "built")
    (tmp_path / "blob").write_bytes(_saved(tmp_path / "built", KEY))
    code = (
        "import sys, torch, inductor_cutedsl\n"
        "from inductor_cutedsl.runtime.cache import KernelCache\n"
        f"info = torch.compiler.load_cache_artifacts(open({str(tmp_path / 'blob')!r}, 'rb').read())\n"
        f"sys.stdout.buffer.write(KernelCache({str(tmp_path / 'fresh')!r}).read({KEY!r}))\n"
    )
    env = {**os.environ, "INDUCTOR_CUTEDSL_CACHE_DIR": str(tmp_path / "fresh"), "INDUCTOR_CUTEDSL_ENABLED": enabled}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stdout == data


def test_a_generated_modules_launcher_records_its_kernel(tmp_path, monkeypatch):
    from inductor_cutedsl.kernels import epilogue as E
    from inductor_cutedsl.kernels.config import GemmConfig
    from inductor_cutedsl.runtime import generated
    from inductor_cutedsl.runtime.spec import KernelSpec

    spec = KernelSpec(GemmConfig(128, 128), "bfloat16", "bfloat16", "k", "k", E.IDENTITY)
    _built(tmp_path, spec.key(), b"the spec's object")
    monkeypatch.setattr(generated, "get_gemm", lambda spec, path=None: object())
    monkeypatch.setattr(generated, "_launcher", lambda *args: lambda *a, **k: None)
    with config.patch(cache_dir=str(tmp_path)):
        generated.launcher(spec, scope={})
    blob = torch.compiler.save_cache_artifacts()
    assert blob is not None
    assert getattr(blob[1], f"{artifacts.ARTIFACT_TYPE}_artifacts") == [spec.key()]


# --- on the GPU: a warm start from artifacts builds and measures nothing ------------------

_WARM_START = r"""
import json, sys, torch
import torch.nn.functional as F
from triton.backends.nvidia.compiler import CUDABackend
import inductor_cutedsl
from inductor_cutedsl import config
from inductor_cutedsl.compat import tuned_binaries
from inductor_cutedsl.runtime.launch import default_cache
from inductor_cutedsl.scheduler import selection

# Triton compile stages run in this process (0: every kernel found in Triton's cache).
stages = [0]
add_stages = CUDABackend.add_stages
def counted_stages(self, table, *args, **kwargs):
    add_stages(self, table, *args, **kwargs)
    for name, stage in list(table.items()):
        def counted(*a, _stage=stage, **k):
            stages[0] += 1
            return _stage(*a, **k)
        table[name] = counted
CUDABackend.add_stages = counted_stages

phase, blob_path = sys.argv[1], sys.argv[2]
if phase == "load":
    torch.compiler.load_cache_artifacts(open(blob_path, "rb").read())
torch.manual_seed(0)
x = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
w = torch.randn(1024, 512, device="cuda", dtype=torch.bfloat16) / 512**0.5
bias = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
# The norm is a Triton reduction that coordinate descent tunes at the first call.
fn = torch.compile(
    lambda x: F.layer_norm(F.gelu(F.linear(x, w, bias), approximate="tanh"), (1024,)),
    mode="max-autotune-no-cudagraphs",
)
stages[0] = 0
out = fn(x)
ref = F.layer_norm(F.gelu(F.linear(x.double(), w.double(), bias.double()), approximate="tanh"), (1024,))
err = ((out.double() - ref).norm() / ref.norm()).item()
tuned = 0
if phase == "save":
    blob, info = torch.compiler.save_cache_artifacts()
    open(blob_path, "wb").write(blob)
    tuned = len(getattr(info, f"{tuned_binaries.ARTIFACT_TYPE}_artifacts"))
print(json.dumps({"builds": default_cache().builds, "decisions": len(selection.decisions), "err": err,
                  "tuned_binaries": tuned, "triton_stages": stages[0]}))
"""


@pytest.mark.gpu
@pytest.mark.long
def test_artifacts_carry_a_compile_to_a_fresh_machine_without_builds_or_measurements(tmp_path):
    """A fresh process with every cache empty but the saved artifacts loaded (a
    machine fed by another) compiles the same program with no CuteDSL build, none of
    our measurements, and no Triton compile in the compiling thread: the binary that
    coordinate descent picked for the norm travelled too (``compat.tuned_binaries``)."""
    blob = tmp_path / "artifacts.bin"
    reports = {}
    for phase in ("save", "load"):
        caches = {
            name: str(tmp_path / phase / name)
            for name in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "INDUCTOR_CUTEDSL_CACHE_DIR")
        }
        env = {**os.environ, **caches, "TORCHINDUCTOR_MAX_AUTOTUNE_GEMM_BACKENDS": "CUTEDSL"}
        done = subprocess.run(
            [sys.executable, "-c", _WARM_START, phase, str(blob)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        reports[phase] = json.loads(done.stdout.strip().splitlines()[-1])
    assert reports["save"]["builds"] > 0, reports  # a cold compile of ours
    assert reports["save"]["tuned_binaries"] > 0, reports  # the norm was tuned
    assert reports["load"]["builds"] == 0 and reports["load"]["decisions"] == 0, reports
    assert reports["load"]["triton_stages"] == 0, reports
    assert reports["load"]["err"] < 1e-2 and reports["save"]["err"] < 1e-2, reports
