"""A GPU-blind compile worker: ``python -m inductor_cutedsl.runtime.compile_worker``.

Reads one job per line on stdin (``{"spec": <KernelSpec JSON>, "root": <cache dir>}``)
and answers one JSON line per job on the stdout it was started with:
``{"path", "built", "secs"}`` or ``{"error"}``. Anything the DSL prints goes to
stderr, so it can never corrupt a reply. Runs with ``INDUCTOR_CUTEDSL_WORKER=1``:
the package then skips patching Inductor and torch is never imported.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback


def serve() -> None:
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    sys.stdout = sys.stderr
    from .cache import KernelCache
    from .compiler import build
    from .spec import KernelSpec

    from ..kernels import sm90_gemm  # noqa: F401  (the DSL import, paid before the first job)

    replies.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        job = json.loads(line)
        t0 = time.perf_counter()
        try:
            path, built = build(KernelSpec.from_json(job["spec"]), KernelCache(job["root"]))
            reply = {"path": str(path), "built": built, "secs": time.perf_counter() - t0}
        except Exception as exc:  # reported to the parent, which decides
            reply = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
        replies.write(json.dumps(reply) + "\n")


if __name__ == "__main__":
    serve()
