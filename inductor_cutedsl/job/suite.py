"""``python -m inductor_cutedsl --suite``: one block of each model family, stock vs ours.

The blocks and their measurement live in ``benchmarks/models.py`` (benchmarks stay
outside the package); the suite runs that file's small size of every family,
inference, in both modes: the quick cut of the model suite.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

MODELS = Path(__file__).resolve().parents[2] / "benchmarks" / "models.py"
MODULE = "inductor_cutedsl_models"


def models() -> ModuleType:
    """``benchmarks/models.py`` of this checkout, imported (once) by its path."""
    if MODULE in sys.modules:
        return sys.modules[MODULE]
    if not MODELS.is_file():
        raise FileNotFoundError(f"{MODELS} not found: --suite runs from a source checkout of inductor_cutedsl")
    spec = importlib.util.spec_from_file_location(MODULE, MODELS)
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE] = module  # before it runs: its dataclasses look their module up
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[MODULE]
        raise
    return module


def suite_args(json_path: str) -> list[str]:
    """The model suite's command line for the quick cut."""
    m = models()
    return ["--blocks", ",".join(f"{family}:small" for family in m.FAMILIES), "--runs", "inference",
            "--json", json_path]  # fmt: skip


def run_suite(json_path: str) -> dict | None:
    return models().main(suite_args(json_path))
