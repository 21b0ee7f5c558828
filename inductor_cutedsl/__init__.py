"""inductor_cutedsl: CuTe DSL GEMMs for TorchInductor on Hopper.

``import inductor_cutedsl`` enables the backend (idempotent) without importing
Inductor: its settings change as Inductor's config is imported, the rest installs when
the first compilation starts (``install``). ``inductor_cutedsl.disable()`` restores
Inductor as it was. Settings live in ``inductor_cutedsl.config``.
"""
import os

from . import config

__version__ = "0.1.0"

# Compile workers (runtime/compile_worker.py) only build kernels: no Inductor, no torch.
if os.environ.get("INDUCTOR_CUTEDSL_WORKER") != "1":
    from .install import disable, enable, is_enabled

    __all__ = ["config", "disable", "enable", "is_enabled"]
    if config.enabled:  # INDUCTOR_CUTEDSL_ENABLED=0: installed only by an explicit enable()
        enable()
