"""On-disk cache of exported kernel objects, safe across processes.

Entry ``<root>/<key>.o`` plus ``<root>/<key>.json`` (size and sha256 of the
object). The JSON is renamed into place last, so its presence marks a complete
entry; an entry whose object does not match it is treated as absent and rebuilt.
A per-key ``filelock`` (``_key_lock``) makes N racing processes build a key once: the
first builds, the rest wait and then find the entry.

Only a miss writes. A cache directory that cannot be written (a shared warm cache
on a read-only mount, or one opened with ``writable=False``) is still read; the
first kernel it lacks falls back to a private directory removed at exit, with one
warning naming that kernel.

An object file is native code that this process loads and runs: it is loaded only from
a directory owned by this user and writable by no one else, and only if the object
itself is (``trust_reason``). A shared cache (a warm cache on a read-only mount owned
by another user, a team's directory) is used only with ``config.shared_cache``
(``INDUCTOR_CUTEDSL_SHARED_CACHE=1``): its owners must be as trusted as the code
itself. An untrusted directory is not read at all, and builds go to a private one.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path

import filelock

from .. import config

log = logging.getLogger("inductor_cutedsl.cache")

ENV_CACHE_DIR = "INDUCTOR_CUTEDSL_CACHE_DIR"
LOCK_TIMEOUT_S = 600
PRIVATE_PREFIX = "inductor_cutedsl_mem_"  # private build dirs, under tempfile.gettempdir()

_building: dict[int, Path] = {}  # what this process's builds in progress wrote (abandon_builds)
_warned_unwritable: set[Path] = set()  # dirs whose fallback was announced (once per process)
_warned_lock = threading.Lock()


def _warn_once_per_dir(path: Path, msg: str, *args: object) -> None:
    """Log ``msg`` as a warning the first time this process says it of ``path``, after
    that at debug level: a directory's fallback is announced once, not per kernel."""
    with _warned_lock:
        first = path not in _warned_unwritable
        _warned_unwritable.add(path)
    (log.warning if first else log.debug)(msg, *args)


def default_cache_dir() -> Path:
    """``config.cache_dir`` (absolute since the settings were read), else the per-user default."""
    if config.cache_dir:
        return Path(config.cache_dir)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "inductor_cutedsl"


def trust_reason(path: Path) -> str | None:
    """Why code under ``path`` (a directory or an object file) must not be loaded, or
    None: it must belong to this user and be writable by no one else (anyone who could
    write it could run code in this process), unless ``config.shared_cache`` is on. A
    path that does not exist holds nothing to load."""
    if config.shared_cache:
        return None
    try:
        st = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        return f"{path} cannot be checked ({exc})"
    if st.st_uid != os.geteuid():
        return f"{path} belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()})"
    if st.st_mode & 0o022:
        return f"{path} is writable by other users (mode {oct(st.st_mode & 0o777)})"
    return None


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@contextlib.contextmanager
def _key_lock(path: Path, what: str, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold the exclusive cross-process lock of one key (a ``filelock`` on ``path``).

    Rule: a lock file exists only while a build holds it. The holder removes it
    before releasing, whether the entry was written or the build failed, so no
    lock file outlives its build. This is sound because filelock takes a lock only
    on a file that still has a name: a waiter that locks the removed file lets go
    and starts over on the current path. Whoever gets the lock then looks the entry
    up again: waiters of a finished build use its entry, waiters of a failed one
    build it themselves. A process killed while building leaves its file behind;
    the kernel released its lock, so the next build of that key takes the file over
    and removes it.
    """
    lock = filelock.FileLock(path, timeout=timeout, thread_local=False, is_singleton=False)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise TimeoutError(f"waited {timeout:.0f}s for another process building {what} (lock {path})") from None
    try:
        yield
    finally:
        try:
            with contextlib.suppress(OSError):
                os.unlink(path)  # while still held: see the rule above
        finally:
            lock.release()


@contextlib.contextmanager
def _in_progress(path: Path) -> Iterator[None]:
    token = object()
    _building[id(token)] = path
    try:
        yield
    finally:
        del _building[id(token)]


def abandon_builds() -> None:
    """Remove the build dirs and lock files of this process's builds in progress,
    newest first (a build dir before its lock). For a process about to end without
    unwinding (``os._exit`` in a signal handler); never raises."""
    for path in reversed(list(_building.values())):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(path)


def _sweep_private_dirs() -> None:
    """Remove the private build dirs of processes that died without cleaning up.

    A live owner holds an ``flock`` on its dir's ``.owner`` file for its lifetime
    (the file appears only once locked), and the kernel drops that lock when the
    process ends, however it ends: a lock we can take marks a dead owner's dir."""
    for path in Path(tempfile.gettempdir()).glob(PRIVATE_PREFIX + "*"):
        try:
            fd = os.open(path / ".owner", os.O_RDONLY)
        except OSError:
            continue  # being made, or not ours to judge
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # owner alive
        else:
            shutil.rmtree(path, ignore_errors=True)
        finally:
            os.close(fd)


def _make_private_dir() -> tuple[Path, int]:
    """A fresh private build dir and the fd of its held ``.owner`` lock."""
    _sweep_private_dirs()
    path = Path(tempfile.mkdtemp(prefix=PRIVATE_PREFIX))
    fd = os.open(path / ".owner.new", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(path / ".owner.new", path / ".owner")  # visible to sweepers only once locked
    return path, fd


def _remove_private_dir(path: Path, fd: int, pid: int) -> None:
    if os.getpid() != pid:
        return  # a forked child exiting: the dir is its parent's
    shutil.rmtree(path, ignore_errors=True)
    with contextlib.suppress(OSError):
        os.close(fd)


class KernelCache:
    """Object files by key.

    ``dir`` is the cache directory; ``root`` is where new builds go: ``dir``, or
    after a fallback a private temporary directory removed with the cache (or at
    exit). Entries in ``dir`` are used either way. ``writable=False`` never writes
    into ``dir`` (a shared warm cache); ``fallback=False`` raises instead of
    falling back (a compile worker, whose private dir would die with the job).
    """

    def __init__(self, root: Path | str | None = None, *, writable: bool = True, fallback: bool = True) -> None:
        self.dir = Path(root) if root is not None else default_cache_dir()
        self.root = self.dir
        self.read_only: Path | None = None if writable else self.dir  # set once known unwritable
        self._writable: bool | None = None if writable else False  # None: not probed yet
        self._why_unwritable = "" if writable else "opened read-only"
        self._fallback = fallback
        self._private: weakref.finalize | None = None
        self._corrupt: dict[str, str] = {}  # key -> why its entry was rejected (warned on rebuild)
        self.builds = 0  # compiles run by this process (for reports and tests)
        self.built: list[str] = []  # their keys, in order
        self._mutex = threading.Lock()
        self._distrust: str | None = None  # why ``dir`` is not read, once checked
        self._trust_checked = False

    def _dir_trusted(self) -> bool:
        """Whether objects in ``dir`` may be loaded (checked once; warned once per dir)."""
        if not self._trust_checked:
            self._trust_checked = True
            self._distrust = trust_reason(self.dir)
            if self._distrust is not None:
                self._writable, self._why_unwritable, self.read_only = False, self._distrust, self.dir
                _warn_once_per_dir(
                    self.dir,
                    "kernel cache dir %s is not used: %s. Kernels are built in a temporary directory instead; "
                    "set %s to a directory of your own, or %s=1 to use a cache shared with others (its owners "
                    "can run code in this process)",
                    self.dir,
                    self._distrust,
                    ENV_CACHE_DIR,
                    "INDUCTOR_CUTEDSL_SHARED_CACHE",
                )
        return self._distrust is None

    @property
    def persistent(self) -> bool:
        """Whether kernels built now are kept in ``dir`` for later processes."""
        return self._private is None and self._probe()

    def _probe(self) -> bool:
        """Whether ``dir`` can be written (tried once, leaving nothing behind)."""
        if self._writable is None and self._dir_trusted():
            try:
                # Made private: what is written here is loaded as code.
                self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
                fd, probe = tempfile.mkstemp(dir=self.dir, prefix=".probe")
                os.close(fd)
                os.unlink(probe)
                self._writable = True
            except OSError as exc:
                self._writable = False
                self._why_unwritable = str(exc)
                self.read_only = self.dir
        return bool(self._writable)

    def why_not_persistent(self) -> str:
        """Why kernels built now would not be kept in ``dir`` ("" where they would)."""
        return "" if self.persistent else (self._why_unwritable or "builds go to a temporary directory")

    def close(self) -> None:
        """Remove what this cache keeps only for this process (nothing when persistent)."""
        if self._private is not None:
            self._private()

    def object_path(self, key: str) -> Path:
        return self.root / f"{key}.o"

    def _meta_path(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def lookup(self, key: str) -> Path | None:
        """The object of a complete, intact entry (in ``dir`` first, then in the
        private dir where there is one), else None. Writes nothing, warns nothing: a
        rejected entry is reported once, by the build that replaces it. ``dir`` is read
        only where it is trusted (``trust_reason``)."""
        found = self._find(key)
        return None if found is None else found[0]

    def _find(self, key: str) -> tuple[Path, bytes] | None:
        """(path, bytes) of ``key``'s intact object, as ``lookup`` finds it."""
        roots = [self.dir] if self._dir_trusted() else []
        if self.root != self.dir:
            roots.append(self.root)
        for root in roots:
            data = self._intact(root / f"{key}.o", root / f"{key}.json", key)
            if data is not None:
                return root / f"{key}.o", data
        return None

    def _intact(self, obj: Path, meta: Path, key: str) -> bytes | None:
        """The object's bytes, read once, where its manifest and trust check pass."""
        try:
            text = meta.read_text()
        except (FileNotFoundError, NotADirectoryError):
            return None  # no manifest: no entry (it is renamed into place last)
        except OSError as exc:
            log.debug("cache entry %s is unreadable (%s)", meta, exc)
            return None
        try:
            info = json.loads(text)
            data = obj.read_bytes()
            if len(data) != info["size"] or hashlib.sha256(data).hexdigest() != info["sha256"]:
                raise ValueError("object does not match its manifest")
            distrust = trust_reason(obj)
            if distrust is not None:
                raise ValueError(distrust)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.debug("cache entry %s is corrupt (%s)", meta, exc)
            self._corrupt[key] = f"{meta.parent}: {exc}"
            return None
        return data

    def _build_root(self, what: str) -> Path:
        """Where a build of ``what`` goes: ``dir``, or the private dir when ``dir``
        cannot be written (made, and announced once per dir, here: a write is needed)."""
        if self._private is None and not self._probe():
            msg = f"kernel cache dir {self.dir} is not writable ({self._why_unwritable})"
            if not self._fallback:
                raise PermissionError(f"{msg}: cannot store {what}")
            path, fd = _make_private_dir()
            self._private = weakref.finalize(self, _remove_private_dir, path, fd, os.getpid())
            self.root = path
            _warn_once_per_dir(
                self.dir,
                "%s; compiling %s, and any other kernel missing there, in a temporary directory "
                "removed at exit: kernels cached there are still used, new ones are not kept "
                "(set %s to a writable directory to keep them)",
                msg,
                what,
                ENV_CACHE_DIR,
            )
        return self.root

    def get_or_build(
        self, key: str, build: Callable[[Path, str], None], what: str | None = None, *, compiles: bool = True
    ) -> tuple[Path, bool]:
        """Path of the object for ``key`` and whether this call wrote it.

        ``build(dir, name)`` must write ``dir/name.o``. ``what`` names the kernel in
        messages (``KernelSpec.describe()``; the key when not given). ``compiles``:
        whether ``build`` compiles (counted in ``builds``) or copies an object built
        elsewhere (``put``).
        """
        hit = self.lookup(key)
        if hit is not None:
            return hit, False
        what = what or key
        with self._mutex:
            root = self._build_root(what)
            lock = root / f"{key}.lock"
            with _key_lock(lock, what), _in_progress(lock):
                hit = self.lookup(key)
                if hit is not None:
                    return hit, False
                why = self._corrupt.pop(key, None)
                if why is not None:
                    log.warning("kernel cache entry of %s is corrupt (%s); rebuilding it", what, why)
                self._build_entry(key, build)
                if compiles:
                    self.count_build(key)
                return self.object_path(key), True

    def read(self, key: str) -> bytes | None:
        """The object of ``key``'s intact entry (as ``lookup`` finds it), else None: the
        bytes its check read, not read again."""
        found = self._find(key)
        return None if found is None else found[1]

    def put(self, key: str, data: bytes, what: str | None = None) -> tuple[Path, bool]:
        """Keep ``data``, an object built elsewhere, as ``key``'s entry, as a build
        would (under the key's lock, manifest last); an intact entry already there
        stays. Returns (object path, whether this call wrote it)."""

        def write(directory: Path, name: str) -> None:
            (directory / f"{name}.o").write_bytes(data)

        return self.get_or_build(key, write, what, compiles=False)

    def count_build(self, key: str) -> None:
        """Count a compile this process ran (here or in one of its workers)."""
        self.builds += 1
        self.built.append(key)

    def _build_entry(self, key: str, build: Callable[[Path, str], None]) -> None:
        # Recorded before it exists, so a stop at any point removes it (abandon_builds).
        # Only the key's lock holder uses this name: one left there is a dead process's.
        tmp = self.root / f".build-{key}-{os.getpid()}"
        with _in_progress(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
            try:
                build(tmp, "kernel")
                obj = tmp / "kernel.o"
                meta = tmp / "kernel.json"
                meta.write_text(json.dumps({"size": obj.stat().st_size, "sha256": _sha256(obj)}))
                # Object first, manifest last: a reader never sees a manifest without its object.
                os.replace(obj, self.object_path(key))
                os.replace(meta, self._meta_path(key))
            finally:
                shutil.rmtree(tmp, ignore_errors=True)


_default_cache: KernelCache | None = None
_default_cache_for: str | None = None  # the config.cache_dir it was opened for


def default_cache() -> KernelCache:
    """The process's cache, at ``inductor_cutedsl.config.cache_dir`` (reopened if that changes)."""
    global _default_cache, _default_cache_for
    if _default_cache is None or config.cache_dir != _default_cache_for:
        _default_cache = KernelCache(config.cache_dir)
        _default_cache_for = config.cache_dir
    return _default_cache
