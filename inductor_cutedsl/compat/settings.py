"""Inductor's settings and choices handler as the backend holds them, in every compiling thread.

Read against torch 2.11 to 2.15: settings are global in 2.11-2.13 and per thread
(a ContextVar per entry) from 2.14 on; ``benchmark_epilogue_fusion`` is renamed
``benchmark_template_fusion`` in newer releases.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from .lazy import V, inductor_config, loaded


def autotune_backends() -> str:
    return inductor_config.max_autotune_gemm_backends


def set_autotune_backends(value: str, hold: bool = True) -> None:
    """Set ``max_autotune_gemm_backends``: ``hold``, the backend's value while it is
    installed (``sync_thread_settings``); else the value it restores."""
    _set_setting("max_autotune_gemm_backends", value, hold)


# Newer torch (2.14 and 2.15; not 2.11) keeps each of Inductor's settings per thread (a
# ContextVar): a thread other than the one that installed the backend, such as
# autograd's device thread, where a training step's backward compiles, starts from the
# defaults. The settings the backend holds are recorded, and each compiling thread
# takes them at its compile start where it has not set them itself (a user's own value
# in that thread stands); after disable(), a thread still holding one of ours gets the
# restored value back when it next meets our code. Where settings are global there is
# nothing to catch up on.
_held: dict[str, Any] = {}  # name -> the value the backend holds now
_ours: dict[str, list] = {}  # name -> every value the backend held
_released: dict[str, Any] = {}  # name -> the value disable() restored


def _set_setting(name: str, value: Any, hold: bool) -> None:
    setattr(inductor_config, name, value)
    if hold:
        _held[name] = value
        if value not in _ours.setdefault(name, []):
            _ours[name].append(value)
        _released.pop(name, None)
    else:
        _held.pop(name, None)
        if name in _ours:
            _released[name] = value


def _thread_settings() -> tuple[dict, Any] | None:
    """(Inductor's config entries, the value of an entry not set in this thread) where
    each setting is per thread (torch 2.14 on), else None."""
    import contextvars

    from torch.utils import _config_module

    entries = getattr(inductor_config, "_config", None)
    entry = entries.get("max_autotune") if isinstance(entries, dict) else None
    unset = getattr(_config_module, "_UNSET_SENTINEL", None)
    if unset is None or not isinstance(entries, dict):
        return None
    if not isinstance(getattr(entry, "user_override", None), contextvars.ContextVar):
        return None
    return entries, unset


def sync_thread_settings() -> Any:
    """This thread's Inductor settings as the backend's state says (per-thread settings
    only), then its live choices handler likewise (``sync_choices_handler``), which it
    returns (None before Inductor is imported)."""
    if not loaded("torch._inductor.config"):
        return None
    found = _thread_settings()
    if found is not None:
        entries, unset = found
        for name, value in _held.items():
            mine = entries[name].user_override.get()  # this thread's own value
            if (mine is unset or mine in _ours[name]) and mine is not value:
                setattr(inductor_config, name, value)
        for name, value in _released.items():
            if entries[name].user_override.get() in _ours[name]:
                setattr(inductor_config, name, value)
    return sync_choices_handler()


def autotune_backend_tokens() -> list[str]:
    """The backends named in ``max_autotune_gemm_backends``, upper-case (Inductor's own
    parsing), empty entries left out."""
    return [x for x in (t.strip() for t in autotune_backends().upper().split(",")) if x]


def backend_enabled(token: str) -> bool:
    """Whether ``token`` is in ``max_autotune_gemm_backends``."""
    return token.upper() in autotune_backend_tokens()


def benchmark_fusion_setting() -> str:
    """The name of Inductor's setting that times a template's fusions (on every
    supported release): newer releases renamed ``benchmark_epilogue_fusion``, keeping
    the old name as a deprecated alias."""
    if hasattr(inductor_config, "benchmark_template_fusion"):
        return "benchmark_template_fusion"
    return "benchmark_epilogue_fusion"


def max_autotune_on() -> bool:
    return bool(inductor_config.max_autotune or inductor_config.max_autotune_gemm)


def compile_uses_cudagraphs() -> bool:
    """Whether the graph compiling in this thread will run as CUDA graphs (``mode=
    "max-autotune"`` sets ``triton.cudagraphs`` for its compile; ``-no-cudagraphs`` not)."""
    return bool(inductor_config.triton.cudagraphs)


def choices_class() -> Any:
    return inductor_config.inductor_choices_class


_stock_choices_class: Any = None


def stock_choices() -> Any:
    """A handler with Inductor's own heuristics, usable as ``inductor_choices_class``'s
    product on every supported release (newer Inductor asks it for ``uuid()``, a part
    of its compile cache's key, and its base class has none)."""
    global _stock_choices_class
    if _stock_choices_class is None:
        from torch._inductor.choices import InductorChoices

        class StockChoices(InductorChoices):
            def uuid(self) -> Any:
                return "inductor_cutedsl.stock"

        _stock_choices_class = StockChoices
    return _stock_choices_class()


def handler_is_current(handler: Any) -> bool:
    """Whether ``handler``, a thread's live choices handler, is what
    ``inductor_choices_class`` makes now (a factory that is not a class is trusted).

    torch 2.15 composes the handler of the class's and every handler registered with
    ``register_inductor_choices``, the class's first: a composed handler is current
    where it holds the class's and one per registration."""
    from torch._inductor import choices

    cls = inductor_config.inductor_choices_class
    if cls is not None and not isinstance(cls, type):
        return True
    composed = getattr(choices, "_ComposedInductorChoices", None)
    parts = list(handler._choices) if composed is not None and isinstance(handler, composed) else [handler]
    registered = len(getattr(choices, "registered_inductor_choices", tuple)())
    if len(parts) != max(registered + (cls is not None), 1):
        return False
    if cls is None:
        return registered > 0 or type(handler) is choices.InductorChoices
    return type(parts[0]) is cls


def sync_choices_handler() -> Any:
    """This thread's live choices handler, made anew from ``inductor_choices_class``
    where it is stale (None before Inductor's choices are imported). Inductor makes one
    handler per thread, on the thread's first use, and keeps it: a thread that lowered
    before the class changed (autograd's device thread, where a training step's
    backward compiles) would go on with the old one."""
    if not loaded("torch._inductor.choices"):
        return None
    handler = V.choices
    if not handler_is_current(handler):
        handler = _made_by(inductor_config.inductor_choices_class)
        V.set_choices_handler(handler)
    return handler


def _made_by(cls: Any) -> Any:
    """The choices handler ``inductor_choices_class`` = ``cls`` stands for: as Inductor
    makes it, with the handlers registered beside it where the release has them (2.15)."""
    from torch._inductor import choices

    create = getattr(choices, "create_inductor_choices", None)
    if create is not None:
        return create(cls)
    return cls() if cls is not None else choices.InductorChoices()


def set_choices_class(cls: Any, live: bool = True, hold: bool = True) -> None:
    """Install ``cls`` for new threads (config) and, with ``live``, for this thread (the
    live handler, where one may exist: Inductor makes it from the config on first use);
    ``hold``: as ``set_autotune_backends``."""
    _set_setting("inductor_choices_class", cls, hold)
    if live and loaded("torch._inductor.choices"):
        V.set_choices_handler(_made_by(cls))


def caches_disabled() -> contextlib.AbstractContextManager:
    """Inductor with every cache off (FX graph, autotuning): a truly cold compile."""
    return inductor_config.patch(force_disable_caches=True)


def on_compile_start(fn: Callable[[], None]) -> Any:
    """Call ``fn()`` whenever a torch.compile compilation starts (a training step's
    lazily compiled backward included); returns the handle for
    ``remove_compile_start_hook``.

    ``torch._dynamo.reset()`` (and ``torch.compiler.reset()``) clears every start
    callback, but the backend stays installed: its hook must too, or a backward that
    compiles after a reset, in autograd's device thread, keeps that thread's stale
    choices handler. So the handler's ``clear`` is wrapped, on the instance, to register
    the hook again after clearing."""
    from torch._dynamo.callback import callback_handler

    hook = callback_handler.register_start_callback(lambda args: fn())
    own = callback_handler.__dict__.get("clear")  # another wrapper's, or None
    original = callback_handler.clear

    def clear() -> None:
        original()
        callback_handler.register_start_callback(hook)

    callback_handler.clear = clear
    return hook, clear, own


def remove_compile_start_hook(handle: Any) -> None:
    from torch._dynamo.callback import callback_handler

    hook, clear, own = handle
    if hook in callback_handler.start_callbacks:
        callback_handler.remove_start_callback(hook)
    if callback_handler.__dict__.get("clear") is clear:  # not wrapped again since
        if own is None:
            del callback_handler.clear
        else:
            callback_handler.clear = own
