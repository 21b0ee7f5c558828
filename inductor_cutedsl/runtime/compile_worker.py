"""A GPU-blind compile worker: ``python -m inductor_cutedsl.runtime.compile_worker``.

Reads one job per line on stdin (``{"spec": <KernelSpec JSON>, "root": <cache dir>}``)
and answers one JSON line per job on the stdout it was started with:
``{"path", "built", "secs"}`` or ``{"error"}``, with ``"logs"``: the job's
warnings, for the parent to log. Anything the DSL prints goes to
stderr, so it can never corrupt a reply. Runs with ``INDUCTOR_CUTEDSL_WORKER=1``:
the package then skips patching Inductor and torch is never imported.

The job's cache dir is the parent's, and writable: a worker never falls back to a
private directory (it would be removed with the job, before the parent loads the
object). SIGTERM ends the worker at once, removing the build dir and lock file of its job.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
import traceback


def _terminate(signum, frame) -> None:
    # Not an exception: raised inside one of the DSL's callbacks from C++, it aborts
    # the process. Remove what the build in progress wrote, then exit at once.
    cache = sys.modules.get(__package__ + ".cache")
    if cache is not None:
        cache.abandon_builds()
    os._exit(128 + signum)


class _Collect(logging.Handler):
    """Keeps the job's warnings for its reply: the parent logs them through its own
    logging setup (once, there), instead of the worker printing them bare."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[dict] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append({"name": record.name, "level": record.levelno, "msg": record.getMessage()})


def serve() -> None:
    signal.signal(signal.SIGTERM, _terminate)
    collect = _Collect()
    ours = logging.getLogger("inductor_cutedsl")
    ours.addHandler(collect)
    ours.propagate = False
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    sys.stdout = sys.stderr
    from ..kernels import sm90_gemm  # noqa: F401  (the DSL import, paid before the first job)
    from .cache import KernelCache
    from .compiler import build
    from .spec import KernelSpec

    replies.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        job = json.loads(line)
        t0 = time.perf_counter()
        collect.records.clear()
        try:
            path, built = build(KernelSpec.from_json(job["spec"]), KernelCache(job["root"], fallback=False))
            reply = {"path": str(path), "built": built, "secs": time.perf_counter() - t0}
        except Exception as exc:  # reported to the parent, which decides
            reply = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
        replies.write(json.dumps({**reply, "logs": collect.records}) + "\n")


if __name__ == "__main__":
    serve()
