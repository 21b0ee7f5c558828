"""Installing the backend into Inductor, and taking it out again.

The hook is Inductor's choices handler: our subclass adds CuteDSL candidates to
the mm/addmm/bmm/baddbmm template choices, beside Triton and ATen, so the
autotuner picks the fastest per shape (``lowering``); with epilogue fusion on, its
subclass also scores fusions our GEMMs take, and our CUDA scheduling fuses them
(``scheduler``). Enabling also adds the ``CUTEDSL`` token to
``max_autotune_gemm_backends``, and re-times our best candidate side by side with
the fastest other choice after each autotuning pass (``fair_timing``);
``disable()`` restores all of it exactly.

Two steps, so that ``import inductor_cutedsl`` does not import Inductor (more than a
second): the settings (the backends token, the choices class, the pre-grad pass) are
made as soon as ``torch._inductor.config`` is imported, or at once if it is; the rest
(our choices classes, the patches of Inductor's classes, the lowering of the gated
MLP op, the scheduling) is installed at once where Inductor is already imported, and
otherwise when the first compilation starts (or Inductor first makes its choices
handler, or runs the pre-grad passes, whichever comes first). Until then the choices
class is ``_choices``, which installs the rest and makes an instance of ours.

On a torch outside the supported range (``releases.SUPPORTED_TORCH``) ``enable()``
warns once and installs nothing: Inductor stays exactly as it is.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch

from . import config
from .compat import (
    autotune,
    codegen,
    coordesc_prefetch,
    environment,
    lazy,
    lowerings,
    releases,
    settings,
    tuned_binaries,
)
from .config import BACKEND_TOKEN
from .errors import fallback

log = logging.getLogger("inductor_cutedsl")

_saved: dict[str, Any] | None = None
_lock = threading.RLock()


def is_enabled() -> bool:
    return _saved is not None


def _choices_class() -> type:
    """Our choices class, as ``enable()`` found ``config.epilogue_fusion``."""
    assert _saved is not None, "installed only while enabled"
    if _saved["epilogue_fusion"]:
        from .scheduler.scheduling import CuteDSLFusionChoices

        return CuteDSLFusionChoices
    from .lowering.choices import CuteDSLChoices

    return CuteDSLChoices


def _choices() -> Any:
    """Inductor's choices handler, made from ``config.inductor_choices_class`` before the
    rest of the backend is installed: installs it, then makes ours."""
    _install_rest()
    cls = settings.choices_class()
    if cls is _choices or cls is None:  # disabled meanwhile: Inductor's own
        return settings.stock_choices()
    return cls()


def _rewrite_gated(graph: torch.fx.Graph) -> None:
    """The pre-grad pass: the gated MLP rewritten into our op (``lowering.gated``)."""
    if not is_enabled():  # a thread still holding our settings after disable()
        settings.sync_thread_settings()
        return
    _install_rest()
    if not is_enabled():  # its install failed: the graph stays as written
        return
    from .lowering import gated_rewrite

    gated_rewrite.rewrite(graph)


def _compile_starts() -> None:
    _install_rest()
    # The compiling thread may have made its choices handler while we were off, or (with
    # per-thread settings, torch 2.14 on) never seen our settings: autograd's device
    # thread, where a training step's backward compiles.
    settings.sync_thread_settings()
    # Compile workers are not started here but by the first build that misses the kernel
    # cache (``runtime.compiler``): a compile that builds nothing (a warm start from the
    # FX graph or AOT caches, a warm kernel cache) starts none, and one that builds loses
    # little, as its first build is asked for at lowering. Started here, they spent their
    # DSL imports beside Dynamo's tracing in every compile (docs/findings.md).


def enable() -> None:
    """Install the backend (idempotent): all of it at once where Inductor is imported;
    else its settings as soon as Inductor's config is imported and the rest when the
    first compilation starts. On a torch outside the supported range: a warning (once)
    and nothing else."""
    global _saved
    with _lock:
        if _saved is not None or not releases.check_torch():
            return
        # What enable() reads of our config, kept for the rest of the install.
        _saved = {"epilogue_fusion": config.epilogue_fusion, "dual_gemm": config.dual_gemm}
        inductor = lazy.loaded("torch._inductor.config")
        hooks = (
            ("settings_hook", "torch._inductor.config", _install_settings),
            ("start_hook", "torch._dynamo.callback", _install_start_hook),
        )
        for key, module, step in hooks:
            # Run inside the module's import where it is not imported yet: a failure of
            # ours there must not fail the import.
            handle = lazy.when_imported(module, functools.partial(_undoing_failure, step))
            if _saved is None:  # it ran now, failed and was undone
                return
            _saved[key] = handle
        if inductor:
            _install_rest()


def _install_settings() -> None:
    """Inductor's settings (its config module only: this may run inside its import)."""
    with _lock:
        if _saved is None or "backends" in _saved:
            return
        prior_cls = settings.choices_class()
        if prior_cls is not None and not getattr(prior_cls, "__module__", "").startswith(__package__):
            log.warning("replacing inductor_choices_class %r with ours", prior_cls)
        _saved.update(backends=settings.autotune_backends(), choices_class=prior_cls)
        if not settings.backend_enabled(BACKEND_TOKEN):
            settings.set_autotune_backends(f"{_saved['backends']},{BACKEND_TOKEN}")
        settings.set_choices_class(_choices, live=False)  # Inductor makes its handler from it
        if _saved["dual_gemm"]:
            _saved["pre_grad_pass"] = lowerings.install_pre_grad_pass(_rewrite_gated, config.cache_key)


def _install_start_hook() -> None:
    with _lock:
        if _saved is not None and "compile_start_hook" not in _saved:
            _saved["compile_start_hook"] = settings.on_compile_start(_compile_starts)


def _install_rest() -> None:
    """What needs Inductor imported (idempotent; nothing once disabled)."""
    with _lock:
        if _saved is None or "rest" in _saved:
            return
        _undoing_failure(_install_rest_steps)


def _undoing_failure(step: Callable[[], None]) -> None:
    """Run ``step`` of the install; a failure of ours undoes all that is installed, with
    one warning, and this process compiles as stock does (strict: it raises)."""
    try:
        step()
    except Exception as exc:
        disable()
        fallback("install", "the backend", exc, log)


def _install_rest_steps() -> None:
    """The rest of the install, its caller holding ``_lock``."""
    assert _saved is not None
    _install_settings()
    from .lowering.fair_timing import rescale

    if settings.choices_class() is _choices:
        settings.set_choices_class(_choices_class())
    # Before any Triton compile of this compilation: the kernels Inductor's workers
    # compile must be found by this process, not compiled again in it.
    _saved["ptxas"] = environment.align_triton_ptxas()
    # A warm start must not tune again what its artifacts carry (a stock fix, given to
    # fair stock in the compile benchmarks too).
    _saved["coordesc"] = autotune.carry_coordinate_descent()
    # Coordinate descent's first compiles run ahead in Inductor's workers (ours only:
    # a speed, not a fix).
    _saved["coordesc_prefetch"] = coordesc_prefetch.install()
    # The winners' binaries travel with the artifacts (ours only: no release carries
    # them). Wraps the tuner after the prefetch: restored before it.
    _saved["tuned_binaries"] = tuned_binaries.install()
    _saved["benchmark_hook"] = autotune.install_benchmark_hook(rescale)
    from .lowering import mm_plus_mm

    _saved["mm_plus_mm"] = mm_plus_mm.install()
    if _saved["dual_gemm"]:
        from .lowering import gated

        _saved["gated_lowerings"] = True
        lowerings.register_lowering(torch.ops.inductor_cutedsl.gated_mm.default, gated.lower)
        lowerings.register_lowering(torch.ops.inductor_cutedsl.gated_scaled_mm.default, gated.lower_scaled)
    from .scheduler import scheduling

    # With or without epilogue fusion: our GEMMs must not reach Inductor's CuteDSL
    # scheduling's horizontal-fusion rule, which raises (``CuteDSLScheduling``).
    fusing = _saved["epilogue_fusion"]
    cls = scheduling.CuteDSLFusionScheduling if fusing else scheduling.CuteDSLScheduling
    _saved["scheduling"] = codegen.install_cuda_scheduling(cls)
    if fusing:
        # A GEMM whose epilogue we measured is decided already: Inductor's own
        # benchmark of the fusion (Triton candidates only) must not overrule it.
        _saved["fusion_hooks"] = codegen.install_fusion_hooks(scheduling.fusion_verdict, scheduling.pairs_through_view)
    _saved["rest"] = True


def disable() -> None:
    """Restore Inductor's settings as they were before ``enable()`` (idempotent)."""
    global _saved
    with _lock:
        if _saved is None:
            return
        saved, _saved = _saved, None
        lazy.cancel_when_imported(saved.get("settings_hook"))
        lazy.cancel_when_imported(saved.get("start_hook"))
        if "backends" in saved:
            settings.set_autotune_backends(saved["backends"], hold=False)
            settings.set_choices_class(saved["choices_class"], hold=False)
        if "compile_start_hook" in saved:
            settings.remove_compile_start_hook(saved["compile_start_hook"])
        if "pre_grad_pass" in saved:
            lowerings.restore_pre_grad_pass(saved["pre_grad_pass"])
        if "benchmark_hook" in saved:
            autotune.restore_benchmark_hook(saved["benchmark_hook"])
        if saved.get("ptxas") is not None:
            saved["ptxas"].undo()
        autotune.restore_coordinate_descent(saved.get("coordesc"))
        tuned_binaries.restore(saved.get("tuned_binaries"))
        coordesc_prefetch.restore(saved.get("coordesc_prefetch"))
        if saved.get("mm_plus_mm") is not None:
            from .lowering import mm_plus_mm

            mm_plus_mm.restore(saved["mm_plus_mm"])
        if saved.get("gated_lowerings"):
            lowerings.unregister_lowering(torch.ops.inductor_cutedsl.gated_mm.default)
            lowerings.unregister_lowering(torch.ops.inductor_cutedsl.gated_scaled_mm.default)
        if "scheduling" in saved:
            codegen.restore_cuda_scheduling(saved["scheduling"])
        if "fusion_hooks" in saved:
            codegen.restore_fusion_hooks(saved["fusion_hooks"])


def launch_environment() -> dict[str, str]:
    """This process's environment less what the install set in it: where a new process
    should start from to run as it would without us. A stock Inductor process started
    with our ``TRITON_PTXAS_PATH`` would be spared Inductor's recompiles (slow cold
    compiles, ``environment.align_triton_ptxas``) that it has on its own; one of ours aligns
    itself again as it installs."""
    env = dict(os.environ)
    with _lock:
        change = (_saved or {}).get("ptxas")
    if change is not None and env.get(change.name) == change.value:
        del env[change.name]
    return env


@contextlib.contextmanager
def reenabled(**changes: Any) -> Iterator[None]:
    """The backend reinstalled under ``config`` changes that ``enable()`` reads (such as
    ``epilogue_fusion``); on exit, reinstalled under the settings as they were."""
    disable()
    try:
        with config.patch(**changes):
            enable()
            yield
    finally:
        disable()
        enable()
