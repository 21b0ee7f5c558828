"""Our kernels as torch's portable compile-cache artifacts.

Stock Inductor's ``torch.compiler.save_cache_artifacts()`` carries compiled graphs
and autotuning results to another machine, whose ``load_cache_artifacts()`` then
compiles no Triton kernel. A graph of ours also needs its CuteDSL objects there, or
every one is built again through MLIR. So each kernel that a generated module loads
is recorded as an artifact of type ``inductor_cutedsl_kernel``: key = the kernel's
cache key (a digest of its spec, the sources that shape it, the DSL release and the
arch, ``KernelSpec.key``), content = a header with the object's size and SHA-256,
then the object. Loading one writes it into the kernel cache as a build would.

Rules:

* A blob is native code. It is kept only if its key is a cache key (32 hex digits,
  so never a path) and its object matches the digest recorded with it; anything else
  is refused with a warning, and the kernel is built when first needed. The digest
  catches a truncated or altered blob, not a forged one: artifacts, like Inductor's
  own, must be as trusted as the code (docs/design.md).
* The kernel cache's own rules hold: entries go into the configured directory only
  where it is trusted and writable (``cache.trust_reason``), else into the process's
  private one.
* Loading never raises into torch's loop over the other artifacts (``compat.artifacts``).
"""

from __future__ import annotations

import hashlib
import logging
import re

from ..compat import artifacts as compat_artifacts
from .cache import default_cache

log = logging.getLogger("inductor_cutedsl.artifacts")

ARTIFACT_TYPE = "inductor_cutedsl_kernel"
_MAGIC = b"inductor_cutedsl kernel 1\n"
_KEY = re.compile(r"[0-9a-f]{32}")


class ArtifactError(ValueError):
    """A kernel artifact that is not kept (its reason in the message)."""


def pack(data: bytes) -> bytes:
    """An object's artifact content: the header line (its size and SHA-256), then it."""
    return compat_artifacts.framed(_MAGIC, {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}, data)


def unpack(key: str, content: bytes) -> bytes:
    """The object in ``content``, checked against ``key`` and its header."""
    if not _KEY.fullmatch(key):
        raise ArtifactError(f"{key!r} is not a kernel cache key")
    try:
        info, data = compat_artifacts.unframed(_MAGIC, content)
        size, digest = info["size"], info["sha256"]
    except (ValueError, KeyError) as exc:
        raise ArtifactError(f"kernel artifact: {exc}") from None
    if len(data) != size:
        raise ArtifactError(f"object of {len(data)} bytes, {size} recorded (truncated)")
    if hashlib.sha256(data).hexdigest() != digest:
        raise ArtifactError("object does not match its recorded SHA-256 (altered)")
    return data


def populate(key: str, content: bytes) -> None:
    """Keep a loaded artifact's object in the kernel cache (refusing a bad one)."""
    try:
        data = unpack(key, content)
    except ArtifactError as exc:
        log.warning("kernel artifact %s refused: %s; the kernel will be built if needed", key[:64], exc)
        return
    default_cache().put(key, data, f"kernel artifact {key}")


def record(key: str) -> None:
    """Record ``key``'s cached object for ``save_cache_artifacts()`` (nothing where the
    object is not in the cache, or torch has no artifacts)."""
    if ARTIFACT_TYPE not in compat_artifacts._registered:
        return
    data = default_cache().read(key)
    if data is not None:
        compat_artifacts.record(ARTIFACT_TYPE, key, pack(data))


def register() -> bool:
    """Register the artifact type: at the package's import, enabled or not, so that a
    process that loads artifacts holding our kernels keeps the blob (``compat.artifacts``)."""
    return compat_artifacts.register(ARTIFACT_TYPE, populate)
