"""On-disk cache of exported kernel objects, safe across processes.

Entry ``<root>/<key>.o`` plus ``<root>/<key>.json`` (size and sha256 of the
object). The JSON is renamed into place last, so its presence marks a complete
entry; an entry whose object does not match it is treated as absent and rebuilt.
A per-key ``filelock`` makes N racing processes build a key once: the first
builds, the rest wait and then find the entry.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Callable

import filelock

log = logging.getLogger("inductor_cutedsl.cache")

ENV_CACHE_DIR = "INDUCTOR_CUTEDSL_CACHE_DIR"
LOCK_TIMEOUT_S = 600


def default_cache_dir() -> Path:
    env = os.environ.get(ENV_CACHE_DIR)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "inductor_cutedsl"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class KernelCache:
    """Object files by key. Where ``root`` is unwritable (a shared, read-only warm
    cache), its entries are still used, and new builds go to a private temporary
    directory removed when the cache is."""

    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root) if root is not None else default_cache_dir()
        self.persistent = True
        self.read_only: Path | None = None  # the unwritable root, still looked up
        self._private: weakref.finalize | None = None
        self.builds = 0  # compiles run by this process (for reports and tests)
        self._mutex = threading.Lock()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            probe = tempfile.NamedTemporaryFile(dir=self.root, prefix=".probe", delete=True)
            probe.close()
        except OSError as exc:
            self.read_only = self.root if self.root.is_dir() else None
            self.root = Path(tempfile.mkdtemp(prefix="inductor_cutedsl_mem_"))
            self.persistent = False
            # Removed with the cache, or at exit: no temporary directory is left behind.
            self._private = weakref.finalize(self, shutil.rmtree, self.root, ignore_errors=True)
            log.warning(
                "kernel cache dir is not writable (%s); %snew kernels are built in a temporary "
                "directory and not reused across processes (set %s to a writable directory)",
                exc,
                "kernels cached there are used, " if self.read_only else "",
                ENV_CACHE_DIR,
            )

    def close(self) -> None:
        """Remove what this cache keeps only for this process (nothing when persistent)."""
        if self._private is not None:
            self._private()

    def object_path(self, key: str) -> Path:
        return self.root / f"{key}.o"

    def _meta_path(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def lookup(self, key: str) -> Path | None:
        """The object of a complete, intact entry (in the read-only root first, where
        there is one), else None."""
        if self.read_only is not None:
            hit = self._entry(self.read_only / f"{key}.o", self.read_only / f"{key}.json", key)
            if hit is not None:
                return hit
        return self._entry(self.object_path(key), self._meta_path(key), key)

    def _entry(self, obj: Path, meta: Path, key: str) -> Path | None:
        try:
            info = json.loads(meta.read_text())
            if obj.stat().st_size != info["size"] or _sha256(obj) != info["sha256"]:
                raise ValueError("object does not match its manifest")
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("cache entry %s is corrupt (%s); rebuilding", key, exc)
            return None
        return obj

    def get_or_build(self, key: str, build: Callable[[Path, str], None]) -> tuple[Path, bool]:
        """Path of the object for ``key`` and whether this call compiled it.

        ``build(dir, name)`` must write ``dir/name.o``.
        """
        hit = self.lookup(key)
        if hit is not None:
            return hit, False
        lock = filelock.FileLock(str(self.root / f"{key}.lock"), timeout=LOCK_TIMEOUT_S)
        with self._mutex, lock:
            hit = self.lookup(key)
            if hit is not None:
                return hit, False
            self._build_entry(key, build)
            self.builds += 1
            return self.object_path(key), True

    def _build_entry(self, key: str, build: Callable[[Path, str], None]) -> None:
        with tempfile.TemporaryDirectory(dir=self.root, prefix=f".build-{key[:8]}-") as tmp:
            build(Path(tmp), "kernel")
            obj = Path(tmp) / "kernel.o"
            meta = Path(tmp) / "kernel.json"
            meta.write_text(json.dumps({"size": obj.stat().st_size, "sha256": _sha256(obj)}))
            # Object first, manifest last: a reader never sees a manifest without its object.
            os.replace(obj, self.object_path(key))
            os.replace(meta, self._meta_path(key))
