"""A pool of compile worker processes (``compile_worker``), one job per worker at a time.

Workers are plain subprocesses with their own entry point, as Inductor's compile
workers are: ``multiprocessing``'s spawn would re-import the user's main script
in every worker and so re-run an unguarded script. They import only the DSL and
our kernels (no torch). The pool starts with the first build asked of it, so a
process that builds nothing starts no worker.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

from ..arch import ARCH

log = logging.getLogger("inductor_cutedsl.compile")


class WorkerError(RuntimeError):
    pass


class _Worker:
    def __init__(self) -> None:
        env = {
            **os.environ,
            "CUTE_DSL_ARCH": os.environ.get("CUTE_DSL_ARCH", ARCH),
            "INDUCTOR_CUTEDSL_WORKER": "1",
            "CUDA_VISIBLE_DEVICES": "",  # compiling needs no GPU; never open a context
        }
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "inductor_cutedsl.runtime.compile_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
            bufsize=1,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None  # both pipes, above
        self.requests: IO[str] = self.proc.stdin
        self.replies: IO[str] = self.proc.stdout
        self.ready = False

    def _read(self) -> dict:
        line = self.replies.readline()
        if not line:
            raise WorkerError(f"compile worker exited with status {self.proc.wait()}")
        return json.loads(line)

    def run(self, spec_json: str, root: str) -> dict:
        if not self.ready:
            self._read()  # {"ready": true}
            self.ready = True
        self.requests.write(json.dumps({"spec": spec_json, "root": root}) + "\n")
        self.requests.flush()
        return self._read()

    def close(self) -> None:
        _stop([self])


class WorkerPool:
    def __init__(self, size: int) -> None:
        self.size = 0
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._all: list[_Worker] = []
        self.closed = False
        self.grow(size)

    def grow(self, size: int) -> None:
        """Add workers up to ``size`` (the running ones keep their jobs)."""
        for _ in range(size - self.size):
            worker = _Worker()
            self._all.append(worker)
            self._idle.put(worker)
        self.size = max(self.size, size)

    def build(self, spec_json: str, root: str) -> tuple[Path, bool, float]:
        """Build one spec in a free worker; a worker that dies is replaced."""
        worker = self._idle.get()
        try:
            reply = worker.run(spec_json, root)
        except (WorkerError, OSError, ValueError) as exc:
            worker.close()
            if not self.closed:  # not when it was stopped on purpose
                self._all.remove(worker)
                worker = _Worker()
                self._all.append(worker)
            raise WorkerError(str(exc)) from exc
        finally:
            self._idle.put(worker)
        for rec in reply.get("logs", ()):
            logging.getLogger(rec["name"]).log(rec["level"], "%s", rec["msg"])
        if "error" in reply:
            log.debug("worker traceback:\n%s", reply.get("trace", ""))
            raise WorkerError(reply["error"])
        return Path(reply["path"]), reply["built"], reply["secs"]

    def close(self) -> None:
        self.closed = True
        _stop(self._all)


def _stop(workers: list[_Worker], grace_s: float = 1.0, term_s: float = 5.0) -> None:
    """End the workers' processes. An idle worker exits at the end of its input; one
    still busy after ``grace_s`` gets SIGTERM, on which it removes its build dir and
    lock file and exits; only one still running after ``term_s`` more is killed."""
    workers = list(workers)  # the pool's list may change meanwhile
    for w in workers:
        with contextlib.suppress(OSError):
            w.requests.close()
    for signal_them, wait_s in ((False, grace_s), (True, term_s)):
        running = [w for w in workers if w.proc.poll() is None]
        if signal_them:
            for w in running:
                with contextlib.suppress(OSError):
                    w.proc.terminate()
        deadline = time.monotonic() + wait_s
        for w in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                w.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    for w in workers:
        if w.proc.poll() is None:
            w.proc.kill()
            w.proc.wait()
        with contextlib.suppress(OSError):
            w.replies.close()  # its replies' pipe: left open, it warns at exit (ResourceWarning)


_pool: WorkerPool | None = None
_lock = threading.Lock()


def started() -> bool:
    """Whether this process has started its compile workers."""
    return _pool is not None


def pool(size: int) -> WorkerPool:
    """The process's pool, with at least ``size`` workers (started on first use)."""
    global _pool
    with _lock:
        if _pool is None:
            _pool = WorkerPool(size)
        elif _pool.size < size:
            _pool.grow(size)
        return _pool


@atexit.register
def _shutdown() -> None:
    if _pool is not None:
        _pool.close()
