"""The remote tier of the kernel cache: Inductor's Redis cache, behind the local disk cache.

With Inductor's remote caches on (``compat.remote.enabled``), a kernel missing from the
local cache is looked up remotely before it is built, and a kernel built here is
published, so a cluster builds each kernel once. Entries are artifacts' blobs
(``artifacts.pack``): a remote object is kept only if its key is a cache key and it
matches the digest recorded with it; a damaged one is refused with a warning, built here
and published again over it. A remote cache runs code in every process that reads it: it
must be as trusted as the code (docs/design.md).

Never worse than stock: any failure of the remote tier (no ``redis`` package, a server
gone away, a timeout) costs a local build, with one warning per process; the remote tier
is then left alone for the rest of the process.
"""

from __future__ import annotations

import logging
import threading

from ..compat import remote as compat_remote
from .artifacts import ARTIFACT_TYPE, ArtifactError, pack, unpack

log = logging.getLogger("inductor_cutedsl.cache")

CACHE_ID = ARTIFACT_TYPE


def remote_key(key: str) -> str:
    """The kernel's key in the remote store (Inductor's ``pt2:<cache id>::<key>:c<version>`` form)."""
    return f"pt2:{CACHE_ID}::{key}:c1"


class RemoteKernels:
    """Objects by cache key in a remote store (``backend``: ``get(key) -> bytes | None``,
    ``put(key, bytes)``)."""

    def __init__(self, backend) -> None:
        self._backend = backend
        self.broken: str | None = None  # why the remote tier is left alone
        self.fetched = 0  # objects taken from the remote store (for reports and tests)
        self.published = 0

    def _failed(self, what: str, exc: BaseException) -> None:
        if self.broken is None:
            self.broken = f"{what}: {type(exc).__name__}: {exc}"
            log.warning("remote kernel cache left alone for this process (%s); kernels are built here", self.broken)

    def fetch(self, key: str) -> bytes | None:
        """The object stored for ``key``, checked (None where absent, refused or unreachable)."""
        if self.broken is not None:
            return None
        try:
            blob = self._backend.get(remote_key(key))
        except Exception as exc:
            self._failed("get", exc)
            return None
        if blob is None:
            return None
        try:
            data = unpack(key, blob)
        except ArtifactError as exc:
            log.warning("remote kernel %s refused: %s; building it here", key, exc)
            return None
        self.fetched += 1
        return data

    def publish(self, key: str, data: bytes) -> None:
        if self.broken is not None:
            return
        try:
            self._backend.put(remote_key(key), pack(data))
        except Exception as exc:
            self._failed("put", exc)
            return
        self.published += 1


_lock = threading.Lock()
_remote: RemoteKernels | None = None
_unavailable = False


def remote() -> RemoteKernels | None:
    """The process's remote tier, or None where Inductor's remote caches are off or the
    backend cannot be made (one warning)."""
    global _remote, _unavailable
    if _unavailable or not compat_remote.enabled():
        return None
    with _lock:
        if _remote is None and not _unavailable:
            try:
                _remote = RemoteKernels(compat_remote.redis_backend(CACHE_ID))
            except Exception as exc:
                _unavailable = True
                log.warning("remote kernel cache unavailable (%s: %s); kernels are built here", type(exc).__name__, exc)
        return _remote


def reset() -> None:
    """Forget the process's remote tier (tests; a changed server)."""
    global _remote, _unavailable
    with _lock:
        _remote, _unavailable = None, False
