"""The torch releases the backend supports, and its refusal to touch any other.

Read against torch 2.11 to 2.15.
"""

from __future__ import annotations

import re
import warnings

import torch

#: torch releases (major, minor) whose Inductor this module is written against: from the
#: first (included) up to the second (excluded). pyproject.toml's ``dependencies`` states
#: the same range; ``tests/test_torch_range.py`` checks that the two agree.
SUPPORTED_TORCH: tuple[tuple[int, int], tuple[int, int]] = ((2, 11), (2, 16))


def supported_range_text() -> str:
    (lo_major, lo_minor), (hi_major, hi_minor) = SUPPORTED_TORCH
    return f"torch>={lo_major}.{lo_minor},<{hi_major}.{hi_minor}"


def torch_release(version: str | None = None) -> tuple[int, int] | None:
    """(major, minor) of ``version`` (default: the imported torch's), None if it does not
    start with two numbers. Local and pre-release tags count as their release
    (``2.15.0+cpu`` and ``2.16.0a0+git1234`` are 2.15 and 2.16)."""
    text = str(torch.__version__ if version is None else version)
    match = re.match(r"\s*(\d+)\.(\d+)", text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def torch_supported(version: str | None = None) -> bool:
    release = torch_release(version)
    return release is not None and SUPPORTED_TORCH[0] <= release < SUPPORTED_TORCH[1]


_torch_warned = False


def check_torch() -> bool:
    """Whether the imported torch is one we support; if not, warn (once per process).

    Outside the range Inductor's private API may have moved, so the backend must not
    touch Inductor at all: a user's ``torch.compile`` has to keep working."""
    global _torch_warned
    if torch_supported():
        return True
    if not _torch_warned:
        _torch_warned = True
        warnings.warn(
            f"inductor_cutedsl supports {supported_range_text()}, not torch {torch.__version__}: "
            "the CuteDSL backend stays off and Inductor is left as it is "
            f"(install a torch in that range to use it: pip install '{supported_range_text()}')",
            RuntimeWarning,
            stacklevel=3,
        )
    return False
