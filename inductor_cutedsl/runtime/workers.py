"""A pool of compile worker processes (``compile_worker``), one job per worker at a time.

Workers are plain subprocesses with their own entry point, as Inductor's compile
workers are: ``multiprocessing``'s spawn would re-import the user's main script
in every worker and so re-run an unguarded script. They import only the DSL and
our kernels (no torch), and can be started ahead of time (``start``) so that the
imports overlap whatever the program does before its first compile.
"""
from __future__ import annotations

import atexit
import json
import logging
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

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
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True, bufsize=1,
        )  # fmt: skip
        self.ready = False

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise WorkerError(f"compile worker exited with status {self.proc.wait()}")
        return json.loads(line)

    def run(self, spec_json: str, root: str) -> dict:
        if not self.ready:
            self._read()  # {"ready": true}
            self.ready = True
        self.proc.stdin.write(json.dumps({"spec": spec_json, "root": root}) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class WorkerPool:
    def __init__(self, size: int) -> None:
        self.size = 0
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._all: list[_Worker] = []
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
            self._all.remove(worker)
            worker = _Worker()
            self._all.append(worker)
            raise WorkerError(str(exc)) from exc
        finally:
            self._idle.put(worker)
        if "error" in reply:
            log.debug("worker traceback:\n%s", reply.get("trace", ""))
            raise WorkerError(reply["error"])
        return Path(reply["path"]), reply["built"], reply["secs"]

    def close(self) -> None:
        for w in self._all:
            w.close()


_pool: WorkerPool | None = None
_lock = threading.Lock()


def pool(size: int) -> WorkerPool:
    """The process's pool, with at least ``size`` workers (started on first use)."""
    global _pool
    with _lock:
        if _pool is None:
            _pool = WorkerPool(size)
        elif _pool.size < size:
            _pool.grow(size)
        return _pool


def start(size: int) -> None:
    """Start the workers now (they import in the background); no-op if running."""
    if size > 1:
        pool(size)


@atexit.register
def _shutdown() -> None:
    if _pool is not None:
        _pool.close()
