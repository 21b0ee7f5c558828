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
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from .. import config
from .cache import default_cache

log = logging.getLogger("inductor_cutedsl.cache")


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


def _path(kind: str, key: str, device: str) -> Path | None:
    cache = default_cache()
    if not config.persist_decisions or not cache.persistent:
        return None
    digest = hashlib.sha256(f"{_context(device)}\0{kind}\0{key}".encode()).hexdigest()[:40]
    return cache.dir / "records" / kind / f"{digest}.json"


def read(kind: str, key: str, device: str) -> Any | None:
    """The value recorded for ``key`` (a string holding the decision's whole key), or None."""
    try:
        path = _path(kind, key, device)
        if path is None or not path.exists():
            return None
        record = json.loads(path.read_text())
        return record["value"] if record.get("key") == key else None
    except Exception as exc:  # a miss: the decision is measured
        log.debug("decision record %s unreadable: %s", kind, exc)
        return None


def write(kind: str, key: str, device: str, value: Any) -> None:
    """Keep ``value`` for ``key`` (nothing where the cache is not persistent)."""
    try:
        path = _path(kind, key, device)
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".record-")
        with os.fdopen(fd, "w") as f:
            json.dump({"key": key, "value": value}, f)
        os.replace(tmp, path)
    except Exception as exc:
        log.debug("decision record %s not written: %s", kind, exc)
