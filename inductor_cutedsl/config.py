"""Settings of the backend, each overridable by an environment variable.

    import inductor_cutedsl
    inductor_cutedsl.config.max_configs = 2
    with inductor_cutedsl.config.patch(enabled=False):
        ...

Environment variables are read when this module is imported, and strictly: a boolean
takes 0/1/true/false/on/off/yes/no (any case), a count a positive whole number, and
anything else is an error naming the variable and what it accepts (``SettingError``,
raised by ``import inductor_cutedsl``; the command line reports it after ``--help``).
Assignments and ``patch`` are checked the same way: an unknown name or a value of the
wrong type is refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import os
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

#: The token of ``max_autotune_gemm_backends`` that names this backend.
BACKEND_TOKEN = "CUTEDSL"
ENV_PREFIX = "INDUCTOR_CUTEDSL_"

_TRUE = ("1", "true", "on", "yes")
_FALSE = ("0", "false", "off", "no")
ACCEPTED_BOOLEANS = "0/1/true/false/on/off/yes/no"


class SettingError(ValueError):
    """A setting's value is not one it accepts; the message names the variable."""


def parse_bool(name: str, text: str) -> bool:
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise SettingError(f"{name}={text!r}: expected one of {ACCEPTED_BOOLEANS}")


def parse_count(name: str, text: str) -> int:
    try:
        number = int(text.strip())
    except ValueError:
        raise SettingError(f"{name}={text!r}: a positive whole number is expected") from None
    if number < 1:
        raise SettingError(f"{name}={text!r}: a positive whole number is expected (at least 1)")
    return number


def parse_path(name: str, text: str) -> str | None:
    """A directory, made absolute now: compile workers and other processes that start
    in another directory must find the same one."""
    return os.path.abspath(os.path.expanduser(text)) if text.strip() else None


@dataclasses.dataclass(frozen=True)
class Setting:
    """One setting: its default, how its environment variable is read, and its type."""

    default: Any
    parse: Callable[[str, str], Any]
    kind: type | tuple[type, ...]
    doc: str

    def check(self, name: str, value: Any) -> Any:
        """``value`` if it fits this setting, else SettingError."""
        if self.kind is bool and not isinstance(value, bool):
            raise SettingError(f"config.{name} = {value!r}: a bool is expected")
        if self.kind is int and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise SettingError(f"config.{name} = {value!r}: a positive int is expected")
        if self.parse is parse_path:
            if value is not None and not isinstance(value, (str, os.PathLike)):
                raise SettingError(f"config.{name} = {value!r}: a path or None is expected")
            return None if value is None else os.path.abspath(os.fspath(value))
        return value


def _workers() -> int:
    return min(8, os.cpu_count() or 1)


SETTINGS: dict[str, Setting] = {
    "enabled": Setting(True, parse_bool, bool, "offer CuteDSL candidates at all"),
    "cache_dir": Setting(None, parse_path, str, "kernel cache directory (None: the per-user default)"),
    "max_configs": Setting(3, parse_count, int, "most CuteDSL configs offered to the autotuner per GEMM"),
    "compile_workers": Setting(_workers(), parse_count, int, "processes compiling kernels in parallel"),
    "epilogue_fusion": Setting(True, parse_bool, bool, "fuse pointwise consumers into our epilogues"),
    "staged_operands": Setting(True, parse_bool, bool, "TMA-stage a fused epilogue's first M x N input"),
    "dual_gemm": Setting(True, parse_bool, bool, "run gated MLPs as one dual-GEMM kernel where faster"),
    "fp8": Setting(True, parse_bool, bool, "offer candidates for fp8 torch._scaled_mm"),
    "fp8_dual": Setting(False, parse_bool, bool, "run fp8 gated MLPs as one fp8 dual-GEMM kernel where faster"),
    "host_paced": Setting(True, parse_bool, bool, "without CUDA graphs, rank GEMM decisions by GPU + host time"),
    "strict": Setting(False, parse_bool, bool, "raise on an internal failure instead of falling back"),
    "shared_cache": Setting(False, parse_bool, bool, "load kernels from a cache directory others may write"),
    "persist_decisions": Setting(True, parse_bool, bool, "reuse fusion and dual-GEMM decisions of earlier compiles"),
    "measure_clear_calls": Setting(False, parse_bool, bool, "measure fused vs unfused even where the call is clear"),
    "prune_triton": Setting(True, parse_bool, bool, "beside our candidates, only Triton's deepest-K mm configs"),
    "split_mm_plus_mm": Setting(True, parse_bool, bool, "lower a @ b + c @ d as mm, then addmm over its output"),
    "programmatic_launch": Setting(
        False, parse_bool, bool, "start our GEMMs while the previous kernel ends, prefetching the weight"
    ),
    "tune_fusion_benchmarks": Setting(
        True, parse_bool, bool, "coordinate-descent-tune the kernels of Inductor's own fusion benchmarks"
    ),
}


def env_name(name: str) -> str:
    return ENV_PREFIX + name.upper()


def _from_environment() -> tuple[dict[str, Any], list[str]]:
    """Every setting's value (the default where its variable is unset or wrong), and one
    message per variable that holds a value its setting does not accept."""
    values, errors = {}, []
    for name, setting in SETTINGS.items():
        text = os.environ.get(env_name(name))
        values[name] = setting.default
        if text is None:
            continue
        try:
            values[name] = setting.parse(env_name(name), text)
        except SettingError as exc:
            errors.append(str(exc))
    return values, errors


_values, errors = _from_environment()
#: Offer CuteDSL candidates at all (``INDUCTOR_CUTEDSL_ENABLED``).
enabled: bool = _values["enabled"]
#: Kernel cache directory, absolute (``INDUCTOR_CUTEDSL_CACHE_DIR``); None means the per-user default.
cache_dir: str | None = _values["cache_dir"]
#: Most CuteDSL configs offered to the autotuner per GEMM (``INDUCTOR_CUTEDSL_MAX_CONFIGS``).
#: The shortlist (``kernels/config.py``) puts the likeliest winners first; each config
#: past the first few adds a compile and a benchmark for little chance of winning.
max_configs: int = _values["max_configs"]
#: Processes that compile candidates in parallel (``INDUCTOR_CUTEDSL_COMPILE_WORKERS``).
compile_workers: int = _values["compile_workers"]
#: Fuse pointwise consumers into CuteDSL GEMM epilogues (``INDUCTOR_CUTEDSL_EPILOGUE_FUSION``).
#: Read by ``enable()``. Each undecided GEMM then takes whichever of its fused and
#: unfused ways measures fastest (``scheduler/selection.py``).
epilogue_fusion: bool = _values["epilogue_fusion"]
#: Fused epilogues TMA-load their first M x N input into shared memory ahead of the
#: epilogue (``EpilogueOperand.staged``; ``INDUCTOR_CUTEDSL_STAGED_OPERANDS``): that costs
#: the kernel less than loading it from global memory in the epilogue.
staged_operands: bool = _values["staged_operands"]
#: Run a gated MLP's two GEMMs and product as one dual-GEMM kernel where it measures
#: faster than two GEMMs and a pointwise kernel (``INDUCTOR_CUTEDSL_DUAL_GEMM``; read
#: by ``enable()`` and when a graph is compiled; ``lowering/gated.py``).
dual_gemm: bool = _values["dual_gemm"]
#: Offer CuteDSL candidates for fp8 ``torch._scaled_mm``, and fused fp8 outputs
#: (``INDUCTOR_CUTEDSL_FP8``). Autotuning ranks candidates by speed only: the switch
#: turns off a kernel family that a GPU test finds wrong.
fp8: bool = _values["fp8"]
#: Run an fp8 gated MLP (two ``torch._scaled_mm`` of one quantized input, an activation
#: and a product) as one fp8 dual-GEMM kernel where it measures faster
#: (``INDUCTOR_CUTEDSL_FP8_DUAL``; with ``dual_gemm`` and ``fp8``). Off by default: its
#: GPU tests (``tests/test_gated_fp8_gpu.py``) pass, but whether a model gains from it
#: (and what its candidates add to a compile) is unmeasured: it turns on once
#: ``benchmarks.fp8``'s fused dual row and fp8 blocks show a gain.
fp8_dual: bool = _values["fp8_dual"]
#: In a compile without CUDA graphs, rank the GEMM choices that fair timing re-times, the
#: ways of a GEMM's epilogue and the gated MLP's by the sum of their GPU time and their
#: host launch time (``INDUCTOR_CUTEDSL_HOST_PACED``; ``lowering/fair_timing.py``): ranked
#: by GPU time alone, cuBLASLt won GEMMs whose launches host-bound steps then paid for,
#: where stock's own pass picks Triton.
host_paced: bool = _values["host_paced"]
#: An internal failure raises instead of falling back to stock Inductor for that GEMM
#: (``INDUCTOR_CUTEDSL_STRICT``): on in the project's own tests and fuzz, so that they see
#: every failure a user's compile would silently step around (``errors.fallback``).
strict: bool = _values["strict"]
#: Load kernels from a cache directory that other users may write
#: (``INDUCTOR_CUTEDSL_SHARED_CACHE``). A kernel object is native code run in this
#: process: by default the cache directory must be owned by this user and writable by
#: no one else (``runtime/cache.py``).
shared_cache: bool = _values["shared_cache"]
#: Reuse the fusion and dual-GEMM decisions that earlier compiles measured, kept in the
#: kernel cache (``INDUCTOR_CUTEDSL_PERSIST_DECISIONS``; ``runtime/records.py``).
persist_decisions: bool = _values["persist_decisions"]
#: Measure the fused and unfused ways of a GEMM + epilogue even where the call is clear
#: (``INDUCTOR_CUTEDSL_MEASURE_CLEAR_CALLS``): ours autotuned clearly fastest and the
#: epilogue reads no M x N input, so fused does strictly less work than any other way
#: (``scheduler/selection.clear_call``). Off: such calls are decided without measuring.
measure_clear_calls: bool = _values["measure_clear_calls"]
#: Where a GEMM gets our candidates, Triton's ``mm`` template is offered only its
#: configs of the deepest K block in its list (``INDUCTOR_CUTEDSL_PRUNE_TRITON``;
#: ``lowering/choices.py``): each Triton choice is a compile in Inductor's workers, the
#: largest part of a max-autotune compile's CPU time, and beside ours every Triton win
#: in the measured autotunings was one of those configs (docs/findings.md).
prune_triton: bool = _values["prune_triton"]
#: Lower the sum of two same-shaped matmuls, which Inductor's max-autotune patterns give
#: to ``mm_plus_mm`` (ATen's two cuBLAS calls or one Triton template, none of ours), as
#: a GEMM and an addmm over its output (``INDUCTOR_CUTEDSL_SPLIT_MM_PLUS_MM``;
#: ``lowering/mm_plus_mm.py``): each GEMM then gets our candidates, and the add runs in
#: the second GEMM (our epilogue, Triton's, or cuBLAS's beta), never as a kernel of its own.
split_mm_plus_mm: bool = _values["split_mm_plus_mm"]
#: Launch our GEMMs as programmatic dependents of the stream's previous kernel
#: (``INDUCTOR_CUTEDSL_PROGRAMMATIC_LAUNCH``; read as a graph's code is generated,
#: ``lowering/candidate.GemmCandidate.launcher_source``, and at each call of
#: ``runtime.gemm``): a kernel's CTAs may start as the previous
#: kernel's end, prefetch their first weight k-tiles to L2 and wait for it there
#: (``Sm90Gemm.kernel``). A decode step's GEMMs are short enough that the gap between
#: kernels counts. Off until the decode benchmark gains from it: a profiler then counts
#: the wait in our kernels' time.
programmatic_launch: bool = _values["programmatic_launch"]
#: Where Inductor's own rule measures a fusion (a pair our backend did not decide), the
#: kernel it times alone is tuned by coordinate descent first, as stock does
#: (``INDUCTOR_CUTEDSL_TUNE_FUSION_BENCHMARKS``). Off: it is timed as generated, which
#: saves seconds of compile (a config at a time compiled in the compiling thread for a
#: kernel the graph never runs) but overstates the unfused way, since the graph's own
#: kernel is tuned; measured that way, the compiled models ran slower (docs/findings.md,
#: Compile time). On until the rule can compare tuned to tuned
#: (``compat.codegen.stock_fusion_rule``).
tune_fusion_benchmarks: bool = _values["tune_fusion_benchmarks"]
del _values


def validate() -> None:
    """SettingError naming every environment variable that holds a value its setting
    does not accept (those settings keep their defaults until then)."""
    if errors:
        raise SettingError("; ".join(errors))


def as_dict() -> dict[str, Any]:
    return {name: getattr(sys.modules[__name__], name) for name in SETTINGS}


@contextlib.contextmanager
def patch(**changes: Any) -> Iterator[None]:
    """Set some settings for the duration of a ``with`` block (each checked as an
    assignment is)."""
    module = sys.modules[__name__]
    unknown = set(changes) - set(SETTINGS)
    if unknown:
        raise AttributeError(f"unknown inductor_cutedsl settings: {sorted(unknown)}")
    checked = {name: SETTINGS[name].check(name, value) for name, value in changes.items()}
    saved = as_dict()
    for name, value in checked.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)


class _ConfigModule(types.ModuleType):
    """This module, whose settings are checked when assigned."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in SETTINGS:
            value = SETTINGS[name].check(name, value)
        elif not name.startswith("_") and name not in self.__dict__:
            raise AttributeError(f"unknown inductor_cutedsl setting: {name!r} (known: {', '.join(SETTINGS)})")
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _ConfigModule

#: The package's sources that shape what a compile generates (kernels, their runtime,
#: the lowering, the scheduler and the torch adapters): a compiled graph cached by
#: Inductor is stale when one of them changes, and only then. The command line, the
#: install and the tools are not among them.
SHAPING_SOURCES = ("kernels", "runtime", "lowering", "scheduler", "compat", "arch.py", "config.py", "errors.py")


@functools.lru_cache(maxsize=1)
def _source_digest() -> str:
    """A digest of ``SHAPING_SOURCES``."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for entry in SHAPING_SOURCES:
        paths = sorted((root / entry).rglob("*.py")) if (root / entry).is_dir() else [root / entry]
        for path in paths:
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def cache_key() -> tuple:
    """What our part of a compiled graph depends on, for Inductor's compile caches
    (the ``uuid()`` of our choices classes and of our pre-grad pass): the sources that
    shape it and the settings read while compiling. Where settings change between
    compiles, a cached graph must not be reused."""
    settings = as_dict()
    for name in ("cache_dir", "compile_workers", "strict", "shared_cache"):  # where, how fast or how loud: not what
        settings.pop(name)
    return ("inductor_cutedsl", _source_digest(), tuple(sorted(settings.items())))
