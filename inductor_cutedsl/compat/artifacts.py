"""torch's portable compile-cache artifacts ("mega-cache"): ``torch.compiler.save_cache_artifacts()``
collects what each cache recorded while compiling, ``load_cache_artifacts()`` hands
each artifact back to its type's ``populate_cache`` in another process.

Read against ``torch/compiler/_cache.py`` of torch 2.11 and 2.15 (the same API):
``CacheArtifact`` is a frozen dataclass (``key``, ``content``: bytes) whose subclasses
name a unique ``type()``; ``CacheArtifactFactory.register`` admits a type once per
process; ``CacheArtifactManager.record_artifact`` records one (deduplicated by key and
content). Rules this module keeps:

* An artifact type must be registered before ``load_cache_artifacts`` meets it, or
  torch drops the whole blob (its deserializer fails on an unknown type): registering
  happens when the package is imported.
* ``populate_cache`` runs inside torch's loop over every artifact: one that raises
  stops the rest from loading, so the callback given here must not raise (``register``
  wraps it).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

log = logging.getLogger("inductor_cutedsl.artifacts")

#: type name -> the registered class (this process).
_registered: dict[str, type] = {}


def register(artifact_type: str, populate: Callable[[str, bytes], None]) -> bool:
    """Make ``artifact_type`` an artifact type whose loading calls ``populate(key,
    content)``. False where this torch has no portable cache artifacts."""
    if artifact_type in _registered:
        return True
    try:
        from torch.compiler._cache import CacheArtifact, CacheArtifactFactory
    except ImportError:
        return False

    class _Artifact(CacheArtifact):
        @staticmethod
        def type() -> str:
            return artifact_type

        def populate_cache(self) -> None:
            try:
                populate(self.key, self.content)
            except Exception:  # one bad artifact must not stop torch loading the others
                log.warning("could not load the %s artifact %s", artifact_type, self.key, exc_info=True)

    _Artifact.__name__ = _Artifact.__qualname__ = f"CacheArtifact_{artifact_type}"
    if artifact_type not in CacheArtifactFactory._artifact_types:
        CacheArtifactFactory.register(_Artifact)
        _registered[artifact_type] = _Artifact
    else:  # registered by an earlier import of this package (a reloaded module): keep that class
        _registered[artifact_type] = CacheArtifactFactory._artifact_types[artifact_type]
    return True


def record(artifact_type: str, key: str, content: bytes) -> None:
    """Record an artifact for the next ``save_cache_artifacts()`` (a no-op where the type
    is not registered)."""
    if artifact_type not in _registered:
        return
    from torch.compiler._cache import CacheArtifactManager

    CacheArtifactManager.record_artifact(artifact_type, key, content)


def framed(magic: bytes, header: dict, payload: bytes) -> bytes:
    """An artifact's content as ours are laid out: ``magic`` (a line naming the type and
    its format), a one-line JSON header, then the payload."""
    return magic + json.dumps(header).encode() + b"\n" + payload


def unframed(magic: bytes, content: bytes) -> tuple[dict, bytes]:
    """(header, payload) of ``framed`` content; ValueError where it is not of this format
    or its header does not read as a JSON object."""
    if not content.startswith(magic):
        raise ValueError("not an artifact of this format")
    header, sep, payload = content[len(magic) :].partition(b"\n")
    try:
        info = json.loads(header if sep else b"")
    except ValueError as exc:
        raise ValueError(f"unreadable header ({exc})") from None
    if not isinstance(info, dict):
        raise ValueError("unreadable header (not an object)")
    return info, payload
