"""The one exception for "we don't handle this", and the rule for every other failure.

``Unsupported`` is a refusal: the input is valid, our kernel does not take it, and the
reason says which rule refused it. A refused GEMM simply gets no CuteDSL candidate, a
refused epilogue is not fused: stock Inductor's choices are untouched.

Any other exception raised inside our code is a bug of ours, and a user's compile must
not pay for it: ``fallback`` logs one warning naming the stage and the reason, records
it for the report, and the caller goes on as stock Inductor would for that GEMM or that
fusion. With ``config.strict`` (``INDUCTOR_CUTEDSL_STRICT=1``, on in the project's own
tests) it raises instead, so that tests and the fuzz see every failure.
"""

from __future__ import annotations

import logging
import threading

from . import config

#: The stages where an internal failure falls back, in the order a compile meets them.
STAGES = (
    # Installing into Inductor at the first compile (``install``): the process compiles as
    # stock does.
    "install",
    "lowering",
    "candidates",
    "fusion decision",
    "epilogue translation",
    "codegen",
    "kernel build",
    "kernel load",
    "first launch",
    # Keeping a Triton kernel's cached coordinate-descent config on a warm start, or
    # through a compile worker (``compat.autotune.carry_coordinate_descent``): stock then
    # tunes it again.
    "warm start",
    "tuned config",
)


#: The rules a refusal names (``Unsupported.rule``): what kind of input our kernels do not take.
RULES = (
    "backend-off",
    "max-autotune-off",
    "codegen-blocked",
    "device",
    "dtype",
    "layout",
    "tma-alignment",
    "broadcast-batch",
    "beta-zero",
    "fp8-off",
    "fp8-layout",
    "scale-mode",
    "scale-result",
    "scaled-mm-v2",
    "kept-outputs",
    "reduction",
    "not-pointwise",
    "loops",
    "indexing",
    "unsupported-op",
    "store-mode",
    "chain-shape",
    "dual-config",
    "measured-slower",
    "not-paired",
)


class Unsupported(ValueError):
    """This input is not one our kernels take; ``reason`` says why, ``rule`` names the
    rule that refused it (one of ``RULES``, for reports and the fuzz)."""

    def __init__(self, reason: str, rule: str) -> None:
        if rule not in RULES:
            raise ValueError(f"unknown refusal rule {rule!r} (known: {', '.join(RULES)})")
        super().__init__(reason)
        self.reason = reason
        self.rule = rule


class StrictFailure(RuntimeError):
    """An internal failure under ``config.strict``: what would have fallen back."""


#: One record per fallback in this process: {"stage", "what", "reason"} (for reports).
fallbacks: list[dict] = []
_lock = threading.Lock()


def fallback(stage: str, what: str, exc: BaseException, logger: logging.Logger | None = None) -> None:
    """Handle an internal failure ``exc`` at ``stage`` (one of ``STAGES``) for ``what``:
    under ``config.strict`` raise ``StrictFailure`` from it; else warn once and record
    it, and the caller falls back to what stock Inductor does. A stage not in ``STAGES``
    is our bug too: strict raises ``ValueError`` for it, a user's compile still falls back."""
    reason = f"{type(exc).__name__}: {exc}"
    if config.strict:
        if stage not in STAGES:
            raise ValueError(f"unknown fallback stage {stage!r}") from exc
        raise StrictFailure(f"{stage} failed for {what}: {reason}") from exc
    with _lock:
        fallbacks.append({"stage": stage, "what": what, "reason": reason})
    (logger or logging.getLogger("inductor_cutedsl")).warning(
        "inductor_cutedsl: %s failed for %s, falling back to stock Inductor: %s", stage, what, reason
    )
