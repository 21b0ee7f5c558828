"""Settings of the backend, each overridable by an environment variable.

    import inductor_cutedsl
    inductor_cutedsl.config.max_configs = 2
    with inductor_cutedsl.config.patch(enabled=False):
        ...

Environment variables are read when this module is imported.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import sys
from pathlib import Path
from typing import Any, Iterator

#: The token of ``max_autotune_gemm_backends`` that names this backend.
BACKEND_TOKEN = "CUTEDSL"


def _env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() not in ("0", "false", "no", "off", "")


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if not value:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r}: a whole number is expected") from None
    if number < 1:
        raise ValueError(f"{name}={value!r}: at least 1 is expected")
    return number


#: Offer CuteDSL candidates at all (``INDUCTOR_CUTEDSL_ENABLED``).
enabled: bool = _env_bool("INDUCTOR_CUTEDSL_ENABLED", True)
#: Kernel cache directory (``INDUCTOR_CUTEDSL_CACHE_DIR``); None means the per-user default.
cache_dir: str | None = os.environ.get("INDUCTOR_CUTEDSL_CACHE_DIR") or None
#: Most CuteDSL configs offered to the autotuner per GEMM (``INDUCTOR_CUTEDSL_MAX_CONFIGS``).
#: The shortlist (``kernels/config.py``) puts the likeliest winners first; each config
#: past the first few adds a compile and a benchmark for little chance of winning.
max_configs: int = _env_int("INDUCTOR_CUTEDSL_MAX_CONFIGS", 3)
#: Processes that compile candidates in parallel (``INDUCTOR_CUTEDSL_COMPILE_WORKERS``).
compile_workers: int = _env_int("INDUCTOR_CUTEDSL_COMPILE_WORKERS", min(8, os.cpu_count() or 1))

#: Fuse pointwise consumers into CuteDSL GEMM epilogues (``INDUCTOR_CUTEDSL_EPILOGUE_FUSION``).
#: Read by ``enable()``. Each undecided GEMM then takes whichever of its fused and
#: unfused ways measures fastest (``scheduler/selection.py``).
epilogue_fusion: bool = _env_bool("INDUCTOR_CUTEDSL_EPILOGUE_FUSION", True)

#: Fused epilogues TMA-load their first M x N input into shared memory ahead of the
#: epilogue (``EpilogueOperand.staged``; ``INDUCTOR_CUTEDSL_STAGED_OPERANDS``, on): that
#: costs the kernel less than loading it from global memory in the epilogue
#: (``benchmarks/results/h200-bias.json``).
staged_operands: bool = _env_bool("INDUCTOR_CUTEDSL_STAGED_OPERANDS", True)

#: Run a gated MLP's two GEMMs and product as one dual-GEMM kernel where it measures
#: faster than two GEMMs and a pointwise kernel (``INDUCTOR_CUTEDSL_DUAL_GEMM``; read
#: by ``enable()`` and when a graph is compiled; ``lowering/gated.py``).
dual_gemm: bool = _env_bool("INDUCTOR_CUTEDSL_DUAL_GEMM", True)

#: Offer CuteDSL candidates for fp8 ``torch._scaled_mm``, and fused fp8 outputs
#: (``INDUCTOR_CUTEDSL_FP8``). The switch exists because autotuning ranks candidates by
#: speed only: it stays for turning off a kernel family that a GPU test finds wrong.
fp8: bool = _env_bool("INDUCTOR_CUTEDSL_FP8", True)

#: In a compile without CUDA graphs, rank the GEMM choices that fair timing re-times by
#: the larger of their GPU time and their host launch time (``INDUCTOR_CUTEDSL_HOST_PACED``;
#: ``lowering/fair_timing.py``): there a step of short GEMMs is paced by the host, and a
#: cuBLASLt ``addmm`` costs several times the host time of a Triton or CuteDSL launch.
#: Off until measured on the model suite's no-CUDA-graph rows.
host_paced: bool = _env_bool("INDUCTOR_CUTEDSL_HOST_PACED", False)

_FIELDS = (
    "enabled", "cache_dir", "max_configs", "compile_workers", "epilogue_fusion", "staged_operands", "dual_gemm",
    "fp8", "host_paced",
)  # fmt: skip


def as_dict() -> dict[str, Any]:
    return {name: getattr(sys.modules[__name__], name) for name in _FIELDS}


@contextlib.contextmanager
def patch(**changes: Any) -> Iterator[None]:
    """Set some settings for the duration of a ``with`` block."""
    module = sys.modules[__name__]
    unknown = set(changes) - set(_FIELDS)
    if unknown:
        raise AttributeError(f"unknown inductor_cutedsl settings: {sorted(unknown)}")
    saved = as_dict()
    for name, value in changes.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)


@functools.lru_cache(maxsize=1)
def _source_digest() -> str:
    """A digest of this package's Python source (what our kernels and lowering are)."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def cache_key() -> tuple:
    """What our part of a compiled graph depends on, for Inductor's compile caches
    (the ``uuid()`` of our choices classes and of our pre-grad pass): this package's
    source and the settings read while compiling. Where settings change between
    compiles, a cached graph must not be reused."""
    settings = as_dict()
    for name in ("cache_dir", "compile_workers"):  # where and how fast, not what
        settings.pop(name)
    return ("inductor_cutedsl", _source_digest(), tuple(sorted(settings.items())))
