"""What the install changes in this process's environment, and how to undo it; and
which kind of process this is.

Read against torch 2.11 to 2.15 and the Triton each pins (3.6 with 2.11, 3.9 with 2.15):
torch ships its own ptxas in 2.11-2.13 only (2.14 and 2.15 ship none, and the alignment
is then a no-op), and Triton 3.9 compiles sm_90 with its ``ptxas-blackwell``, named by
``TRITON_PTXAS_BLACKWELL_PATH``, which Inductor does not set: the variable Inductor sets
then changes nothing for sm_90, and there is nothing to align.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable


def in_a_compile_worker() -> bool:
    """Whether this process is one of our compile workers (``runtime/compile_worker.py``:
    no Inductor, no torch) or one of Inductor's (``torch/_inductor/compile_worker``, which
    imports this package to run a compile of ours, ``compat.coordesc_prefetch``, and from
    torch 2.14 on to check a generated module, ``runtime.generated``): neither lowers a
    graph nor launches a kernel."""
    if os.environ.get("INDUCTOR_CUTEDSL_WORKER") == "1":
        return True
    main = sys.argv[0] if sys.argv else ""
    return os.path.basename(os.path.dirname(os.path.abspath(main))) == "compile_worker" and main.endswith("__main__.py")


class EnvChange:
    """A variable this process set in its environment (``name`` = ``value``): ``undo()``
    removes it again, if still so, and runs ``after_undo``."""

    def __init__(self, name: str, value: str, after_undo: Callable[[], None] = lambda: None) -> None:
        self.name, self.value, self._after_undo = name, value, after_undo

    def undo(self) -> None:
        if os.environ.get(self.name) == self.value:
            del os.environ[self.name]
        self._after_undo()


def keys_sm90_on_ptxas_path() -> bool:
    """Whether Triton compiles (and keys its cache of) sm_90 kernels with the ptxas that
    ``TRITON_PTXAS_PATH`` names: the variable Inductor's compile workers set. Triton 3.6
    does; 3.9 takes another tool for sm_90 and later."""
    from triton import knobs
    from triton.backends.nvidia import compiler as nvidia

    return nvidia.get_ptxas(90).path == knobs.nvidia.ptxas.path


def align_triton_ptxas() -> EnvChange | None:
    """Make this process key its Triton compiles on the ptxas that Inductor's compile
    workers use; returns the change to the environment (None where there was none).

    A Triton kernel's on-disk cache key holds the ptxas version, which Triton reads once
    per process (``get_ptxas_version`` is memoized). Inductor's workers point Triton at
    torch's own ptxas (``_set_triton_ptxas_path``, where torch ships one, of another CUDA
    release than Triton's bundled one) before compiling; this process does only at its
    first Triton compile outside the workers, but autotuning's threads compile Inductor's
    template choices at lowering, before that, with Triton's bundled ptxas, and the
    memoized version then stays. A kernel whose worker result this process uses (a
    compiled graph's) is unaffected, but one it compiles itself after a worker did (a
    template choice at its first benchmark, precompiled by the workers where its GEMM was
    lowered after they came up: every choice of every graph in a long-lived process) was
    never found in the cache and was compiled again here, in the compiling thread.
    docs/findings.md has the measurements."""
    try:
        from torch._inductor.runtime.compile_tasks import _set_triton_ptxas_path
        from triton.backends.nvidia import compiler as nvidia
    except ImportError:  # no CUDA Triton: nothing to align
        return None
    name = "TRITON_PTXAS_PATH"
    if not keys_sm90_on_ptxas_path():
        return None
    before = os.environ.get(name)
    # torch caches the setter (it runs once per process): called through the cache, an
    # install after disable() undid the path would leave it unset, and the parent would
    # key on the bundled ptxas again (every template choice of every later graph
    # compiled twice).
    getattr(_set_triton_ptxas_path, "__wrapped__", _set_triton_ptxas_path)()
    after = os.environ.get(name)
    forget = getattr(nvidia.get_ptxas_version, "cache_clear", lambda: None)
    forget()  # read again, from the ptxas the path now names
    return None if after is None or after == before else EnvChange(name, after, forget)
