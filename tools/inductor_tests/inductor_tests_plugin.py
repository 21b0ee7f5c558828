"""pytest plugin for ``tools/inductor_tests``: Inductor's own tests with the CuteDSL
backend on.

Loaded only for the "ours" run (``-p inductor_tests_plugin``, with its folder on
``PYTHONPATH``). At load time it:

* imports ``inductor_cutedsl``, which installs the backend and adds ``CUTEDSL`` to the
  default ``max_autotune_gemm_backends``;
* makes every later assignment of ``max_autotune_gemm_backends`` (``config.patch``, a
  decorator or a plain ``config.x = ...``: the config module's ``patch`` and
  ``__setattr__``) keep ``CUTEDSL`` in the list. A test that hard-patches the backends
  to ``"TRITON"`` then runs with ``"TRITON,CUTEDSL"``.

An empty value is left empty: it asks for no GEMM backend at all, and the tests that
set it check exactly that (Inductor must find no choice).
"""

from __future__ import annotations

from torch._inductor import config as inductor_config

import inductor_cutedsl  # noqa: F401  (installs the backend)
from inductor_cutedsl.config import BACKEND_TOKEN

SETTING = "max_autotune_gemm_backends"


def with_token(value: object) -> object:
    """``value`` with ``CUTEDSL`` added, unless it is empty, not a string, or has it."""
    if not isinstance(value, str) or not value.strip():
        return value
    tokens = [t.strip().upper() for t in value.split(",")]
    if BACKEND_TOKEN in tokens:
        return value
    return f"{value},{BACKEND_TOKEN}"


def install() -> None:
    """Wrap the config module class's ``__setattr__`` and ``patch`` (once) for Inductor's
    config only. ``patch`` too: newer torch releases patch some config modules by setting
    stored values directly, not through ``__setattr__``."""
    cls = type(inductor_config)
    if getattr(cls.__setattr__, "_cutedsl_adds_token", False):
        return
    original, original_patch = cls.__setattr__, cls.patch

    def __setattr__(self, name, value):
        if self is inductor_config and name == SETTING:
            value = with_token(value)
        original(self, name, value)

    def patch(self, arg1=None, arg2=None, **kwargs):
        if self is inductor_config:
            if arg1 == SETTING and arg2 is not None:
                arg2 = with_token(arg2)
            elif isinstance(arg1, dict) and SETTING in arg1:
                arg1 = {**arg1, SETTING: with_token(arg1[SETTING])}
            if SETTING in kwargs:
                kwargs[SETTING] = with_token(kwargs[SETTING])
        return original_patch(self, arg1, arg2, **kwargs)

    __setattr__._cutedsl_adds_token = True  # type: ignore[attr-defined]
    cls.__setattr__ = __setattr__
    cls.patch = patch
    # The value already in force (the environment's, or the default) gets it too.
    setattr(inductor_config, SETTING, getattr(inductor_config, SETTING))


install()


def pytest_report_header(config):
    return f"inductor_cutedsl on: {SETTING}={getattr(inductor_config, SETTING)!r}"
