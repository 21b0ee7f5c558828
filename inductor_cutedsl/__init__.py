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
from .compat import environment as _environment

__version__ = "0.1.0"


# Nothing is installed in a compile worker, ours or Inductor's: neither lowers a graph.
if not _environment.in_a_compile_worker():
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
