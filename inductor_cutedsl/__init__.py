"""inductor_cutedsl: CuTe DSL GEMMs for TorchInductor on Hopper.

``import inductor_cutedsl`` enables the backend (idempotent) without importing
Inductor: its settings change as Inductor's config is imported, the rest installs when
the first compilation starts (``install``). ``inductor_cutedsl.disable()`` restores
Inductor as it was. Settings live in ``inductor_cutedsl.config``.
"""

import os
import sys

# First of all: every module of ours that imports cutlass runs after this package's
# __init__, so the target is pinned before the DSL reads it (arch.py).
from . import (
    arch,  # noqa: F401
    config,
)

__version__ = "0.1.0"


def _in_a_compile_worker() -> bool:
    """Whether this process is one of our compile workers (``runtime/compile_worker.py``:
    no Inductor, no torch) or one of Inductor's (``torch/_inductor/compile_worker``, which
    imports this package only to run a compile of ours, ``compat.coordesc_prefetch``):
    neither lowers a graph, so nothing is installed there."""
    if os.environ.get("INDUCTOR_CUTEDSL_WORKER") == "1":
        return True
    main = sys.argv[0] if sys.argv else ""
    return os.path.basename(os.path.dirname(os.path.abspath(main))) == "compile_worker" and main.endswith("__main__.py")


if not _in_a_compile_worker():
    from .compat import tuned_binaries as _tuned_binaries
    from .install import disable, enable, is_enabled
    from .runtime import artifacts as _artifacts
    from .runtime import records as _records

    _artifacts.register()
    _records.register()
    _tuned_binaries.register()

    __all__ = ["config", "disable", "enable", "is_enabled"]
    # A setting the environment spells wrongly is an error here, naming the variable:
    # except for the command line, whose --help must work whatever the environment says
    # (it reports the error itself once the arguments are parsed).
    _cli = sys.argv[:1] == ["-m"] or os.path.basename(sys.argv[0] if sys.argv else "") == "inductor-cutedsl"
    if not _cli:
        config.validate()
    if config.enabled and not config.errors:  # INDUCTOR_CUTEDSL_ENABLED=0: installed only by enable()
        enable()
