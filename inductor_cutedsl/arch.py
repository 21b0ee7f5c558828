"""The one target this package builds for, pinned before cutlass is imported.

CuTe DSL reads ``CUTE_DSL_ARCH`` once, at import; without it a GPU-less machine
falls back to sm_100a and Hopper ops fail at trace time. The package's ``__init__``
imports this module before anything else, and every module of ours runs after it.
"""

from __future__ import annotations

import os
import sys

ARCH = "sm_90a"
SM_MAJOR, SM_MINOR = 9, 0

if "cutlass" not in sys.modules:
    os.environ.setdefault("CUTE_DSL_ARCH", ARCH)


def dsl_arch() -> str:
    """The arch the DSL compiles for in this process."""
    return os.environ.get("CUTE_DSL_ARCH", ARCH)
