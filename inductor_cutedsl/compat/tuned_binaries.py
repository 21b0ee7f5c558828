"""Coordinate descent's winning Triton binaries, carried in torch's portable artifacts.

With max-autotune, Inductor tunes each Triton pointwise and reduction kernel by
coordinate descent at the graph's first call, after the compiled graph and its bundle of
Triton binaries were written to the FX graph cache. The winner's config reaches the
autotune cache, which ``save_cache_artifacts()`` carries; its binary stays in this
machine's Triton cache. A warm start from the artifacts therefore compiles every tuned
kernel's winner again from source, in the compiling thread
(``CachingAutotuner.slow_precompile_config``, or the serial load of a kernel that is not
statically launchable): 1.6-5.1 s of 4.5-12.2 s warm starts on the H200
(docs/findings.md). Read against torch 2.11 and 2.15: 2.15's bundler keeps autotuning
winners (``TritonBundler.put_winner``), but only while a graph compiles, never at its
first call. No release carries them, so this is a speed of ours, not a stock fix.

So each binary coordinate descent picks is recorded as an artifact of type
``inductor_cutedsl_triton``: key = its directory in Triton's cache (the launcher's
``cache_hash``, a digest of the kernel's source, options, target and toolchain), content
= a header naming each file with its size and SHA-256, then the files. Loading writes
the directory where this process's Triton cache looks, so the warm start's compile of
the winner is a cache hit; a toolchain that keys differently simply misses it.

Rules:

* A blob is native code: it is kept only if its key and file names are plain names
  (never paths) and every file matches its recorded digest; anything else is refused
  with a warning and the kernel compiles as stock's would. As with Inductor's own
  artifacts, whoever supplies them must be as trusted as the code (docs/design.md).
* Triton's metadata names its files by absolute path: the directory is written as a
  placeholder and put back as this machine's on loading.
* A directory Triton already holds is left alone; a new one appears whole or not at all
  (written beside it, then renamed).
* Recording never changes what the tuner picks or returns.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import tempfile
import types
from typing import Any

from . import artifacts as compat_artifacts
from .coordesc_prefetch import never_tuned

log = logging.getLogger("inductor_cutedsl.artifacts")

ARTIFACT_TYPE = "inductor_cutedsl_triton"
_MAGIC = b"inductor_cutedsl triton binaries 1\n"
#: What stands for the kernel's directory inside Triton's metadata files.
_PLACEHOLDER = b"<inductor_cutedsl:triton-dir>"
#: A Triton cache key (base32 or base64 of a digest) or a file name in its directory.
_PLAIN = re.compile(r"[A-Za-z0-9_=-][A-Za-z0-9_.=-]*")


class BinaryArtifactError(ValueError):
    """A carried Triton binary that is not kept (its reason in the message)."""


def _plain(name: str) -> bool:
    return bool(_PLAIN.fullmatch(name)) and name not in (".", "..")


def kernel_directory(device: int | None, cache_hash: str) -> str:
    from torch._inductor.runtime.cache_dir_utils import triton_cache_dir

    return os.path.join(triton_cache_dir(device), cache_hash)


def pack(directory: str, device: int | None) -> bytes:
    """The artifact content of one Triton cache directory."""
    files = []
    payloads = []
    marker = directory.encode()
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if not os.path.isfile(path) or not _plain(name):
            continue
        with open(path, "rb") as f:
            data = f.read()
        if name.endswith(".json"):
            if _PLACEHOLDER in data:
                raise BinaryArtifactError(f"{name} already holds the directory placeholder")
            data = data.replace(marker, _PLACEHOLDER)
        files.append({"name": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
        payloads.append(data)
    if not files:
        raise BinaryArtifactError(f"{directory} holds no files")
    return compat_artifacts.framed(_MAGIC, {"device": device, "files": files}, b"".join(payloads))


def unpack(key: str, content: bytes) -> tuple[int | None, dict[str, bytes]]:
    """(device, {file name: bytes with the placeholder}) of an artifact, checked; the
    device is None where one rank compiled for all."""
    if not _plain(key):
        raise BinaryArtifactError(f"{key!r} is not a Triton cache key")
    try:
        info, rest = compat_artifacts.unframed(_MAGIC, content)
        device = None if info["device"] is None else int(info["device"])
        listed = [(str(f["name"]), int(f["size"]), str(f["sha256"])) for f in info["files"]]
    except (ValueError, TypeError, KeyError) as exc:
        raise BinaryArtifactError(f"Triton binary artifact: {exc}") from None
    if (device is not None and device < 0) or not listed:
        raise BinaryArtifactError("no device or no files recorded")
    if sum(size for _, size, _ in listed) != len(rest):
        raise BinaryArtifactError(f"{len(rest)} bytes of files, {sum(s for _, s, _ in listed)} recorded (truncated)")
    out: dict[str, bytes] = {}
    at = 0
    for name, size, digest in listed:
        if not _plain(name) or name in out:
            raise BinaryArtifactError(f"{name!r} is not a plain file name")
        data = rest[at : at + size]
        at += size
        if hashlib.sha256(data).hexdigest() != digest:
            raise BinaryArtifactError(f"{name} does not match its recorded SHA-256 (altered)")
        out[name] = data
    return device, out


def populate(key: str, content: bytes) -> None:
    """Write a loaded artifact's files into this process's Triton cache (refusing a bad
    one, leaving a directory Triton already holds)."""
    try:
        device, files = unpack(key, content)
    except BinaryArtifactError as exc:
        log.warning("Triton binary artifact %s refused: %s; the kernel compiles if needed", key[:64], exc)
        return
    directory = kernel_directory(device, key)
    if os.path.isdir(directory) and os.listdir(directory):
        return
    base = os.path.dirname(directory)
    os.makedirs(base, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f"tmp.{key[:16]}.", dir=base)
    try:
        for name, data in files.items():
            if name.endswith(".json"):
                data = data.replace(_PLACEHOLDER, directory.encode())
            with open(os.path.join(staging, name), "wb") as f:
                f.write(data)
        try:
            os.replace(staging, directory)
        except OSError:  # another process put it there first (a non-empty directory)
            pass
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def record(autotuner: Any, launcher: Any) -> bool:
    """Record the binary of ``launcher`` if coordinate descent found its config; whether
    one was recorded."""
    if ARTIFACT_TYPE not in compat_artifacts._registered:
        return False
    config = getattr(launcher, "config", None)
    cache_hash = getattr(launcher, "cache_hash", None)
    if not getattr(config, "found_by_coordesc", False) or not cache_hash or not _plain(cache_hash):
        return False
    # None where one rank compiles for all (``compile_on_one_rank``): torch keys Triton's
    # cache directory by it as it is, and so does the artifact.
    device = autotuner.triton_meta.get("device", 0)
    device = None if device is None else int(device)
    directory = kernel_directory(device, cache_hash)
    if not os.path.isdir(directory):
        return False
    compat_artifacts.record(ARTIFACT_TYPE, cache_hash, pack(directory, device))
    return True


def register() -> bool:
    """Register the artifact type (at the package's import, as ``runtime.artifacts``)."""
    return compat_artifacts.register(ARTIFACT_TYPE, populate)


def install() -> Any:
    """Record each kernel's winner as coordinate descent returns it; returns what
    ``restore`` needs, or None where nothing was changed."""
    try:
        from torch._inductor.runtime import triton_heuristics
    except ImportError:  # no Triton: nothing is tuned
        return None
    cls = triton_heuristics.CachingAutotuner
    tuning = getattr(cls, "coordinate_descent_tuning", None)
    if tuning is None or getattr(tuning, "records_binaries", False):
        return None

    untuned = never_tuned()

    def coordinate_descent_tuning(self: Any, launcher: Any, *args: Any, **kwargs: Any) -> Any:
        best = tuning(self, launcher, *args, **kwargs)
        if self.heuristic_type in untuned:  # asked at each launch of a template: nothing to record
            # Later launches go to the tuner itself (``coordesc_prefetch``'s rule), unless
            # a wrapper inside already bound the original there.
            self.__dict__.setdefault("coordinate_descent_tuning", types.MethodType(tuning, self))
            return best
        try:
            record(self, best)
        except Exception as exc:  # only a warm start elsewhere loses: it compiles the winner
            from ..errors import fallback

            fallback("warm start", str(self.inductor_meta.get("kernel_name", "a Triton kernel")), exc)
        return best

    coordinate_descent_tuning.records_binaries = True  # type: ignore[attr-defined]
    cls.coordinate_descent_tuning = coordinate_descent_tuning
    return tuning


def restore(original: Any) -> None:
    if original is not None:
        from torch._inductor.runtime import triton_heuristics

        triton_heuristics.CachingAutotuner.coordinate_descent_tuning = original
