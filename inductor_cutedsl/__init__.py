"""inductor_cutedsl: CuTe DSL GEMMs for TorchInductor on Hopper.

``import inductor_cutedsl`` enables the backend (idempotent);
``inductor_cutedsl.disable()`` restores Inductor as it was. Settings live in
``inductor_cutedsl.config``.
"""
from . import config
from .lowering import disable, enable, is_enabled

__version__ = "0.1.0"
__all__ = ["config", "disable", "enable", "is_enabled"]

enable()
