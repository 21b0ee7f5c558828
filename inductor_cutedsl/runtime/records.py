"""Measured decisions kept beside the kernels, so that a later compile reuses them.

Our selection (fused or not, which way) and the dual-GEMM gate time their contenders side
by side on the GPU: seconds of compile time each. What they decided depends only on what
was compared and where, so it is kept in the kernel cache directory (``records/KIND/``,
one small JSON file per decision, named by a digest of its key), and a later process
with the same key takes it instead of measuring again: a model compiled after another
with the same GEMMs and epilogues measures none of them.

Rules:

* A record's key holds everything its outcome depends on (the callers' keys) and the
  context here: the device's name, torch's and Triton's releases, our kernel sources'
  digest (through the kernel keys in the callers' keys). A record is only a preference
  among ways that compute the same result: a wrong one costs speed, never a wrong number.
  Callers check a record's value against what they can do and ignore one that does not fit.
* Records are read and written only where the kernel cache is persistent (a trusted,
  writable directory of this user), each written whole (a temporary file renamed into
  place). Any failure here is a miss, logged at debug level.
* ``config.persist_decisions`` turns reading and writing off.
* Records travel with torch's portable cache artifacts (type ``inductor_cutedsl_decision``,
  key ``KIND/DIGEST``): each one read or written is recorded for
  ``save_cache_artifacts()``, and one loaded is kept as if written here.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from .. import config
from ..compat import artifacts as compat_artifacts
from .cache import default_cache

log = logging.getLogger("inductor_cutedsl.cache")

ARTIFACT_TYPE = "inductor_cutedsl_decision"
_ARTIFACT_KEY = re.compile(r"(selection|gated)/[0-9a-f]{40}")


@functools.cache
def _context(device: str) -> str:
    import torch

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = "none"
    name = torch.cuda.get_device_properties(torch.device(device)).name if device.startswith("cuda") else device
    return f"{name}|torch {torch.__version__}|triton {triton_version}"


def _name(kind: str, key: str, device: str) -> str:
    """``KIND/DIGEST``: the record's file under ``records/`` (less ``.json``) and artifact key."""
    digest = hashlib.sha256("\0".join((_context(device), kind, key)).encode()).hexdigest()
    return f"{kind}/{digest[:40]}"


def _root() -> Path | None:
    cache = default_cache()
    if not config.persist_decisions or not cache.persistent:
        return None
    return cache.dir / "records"


def _path(kind: str, key: str, device: str) -> Path | None:
    root = _root()
    return None if root is None else root / f"{_name(kind, key, device)}.json"


def _keep(path: Path, content: bytes) -> None:
    """Write ``content`` to ``path`` whole (a temporary file renamed into place)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".record-")
    with os.fdopen(fd, "wb") as f:
        f.write(content)
    os.replace(tmp, path)


def read(kind: str, key: str, device: str) -> Any | None:
    """The value recorded for ``key`` (a string holding the decision's whole key), or None."""
    try:
        path = _path(kind, key, device)
        if path is None or not path.exists():
            return None
        content = path.read_bytes()
        record = json.loads(content)
        if record.get("key") != key:
            return None
        compat_artifacts.record(ARTIFACT_TYPE, _name(kind, key, device), content)
        return record["value"]
    except Exception as exc:  # a miss: the decision is measured
        log.debug("decision record %s unreadable: %s", kind, exc)
        return None


def write(kind: str, key: str, device: str, value: Any) -> None:
    """Keep ``value`` for ``key`` (nothing where the cache is not persistent)."""
    try:
        path = _path(kind, key, device)
        if path is None:
            return
        content = json.dumps({"key": key, "value": value}).encode()
        _keep(path, content)
        compat_artifacts.record(ARTIFACT_TYPE, _name(kind, key, device), content)
    except Exception as exc:
        log.debug("decision record %s not written: %s", kind, exc)


def populate(name: str, content: bytes) -> None:
    """Keep a loaded artifact's record (refusing a name that is not ``KIND/DIGEST`` or
    content that is not a record)."""
    root = _root()
    if root is None:
        return
    if not _ARTIFACT_KEY.fullmatch(name):
        log.warning("decision artifact %r refused: not a record's name", name[:80])
        return
    record = json.loads(content)
    if not isinstance(record, dict) or not isinstance(record.get("key"), str) or "value" not in record:
        log.warning("decision artifact %s refused: not a record", name)
        return
    _keep(root / f"{name}.json", content)


def register() -> bool:
    """Register the record artifact type (at the package's import, as the kernels')."""
    return compat_artifacts.register(ARTIFACT_TYPE, populate)
