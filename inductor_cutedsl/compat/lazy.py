"""Inductor's modules and classes, imported on first use, and code run when a module is imported.

Importing Inductor costs more than a second (``torch._inductor.config`` alone pulls in
``torch._dynamo``), so nothing of ours imports it at import time: ``inductor_config``,
``V``, ``ir`` and ``ir_ops`` are stand-ins that import their module on first use, and
the classes our modules subclass load on first access (``__getattr__``).
``when_imported`` runs code right after a module is imported (how ``enable()`` at
import sets Inductor's settings without importing Inductor).

Read against torch 2.11 to 2.15: the class paths in ``_CLASSES`` are the same in each.
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys
import threading
from collections.abc import Callable
from typing import Any


class _Lazy:
    """Module ``module`` (or its attribute ``attr``), imported on first use; attribute
    reads and writes go to it."""

    def __init__(self, module: str, attr: str | None = None) -> None:
        object.__setattr__(self, "_where", (module, attr))
        object.__setattr__(self, "_target", None)

    def _resolve(self) -> Any:
        target = self._target
        if target is None:
            module, attr = self._where
            target = importlib.import_module(module)
            target = getattr(target, attr) if attr else target
            object.__setattr__(self, "_target", target)
        return target

    def __getattr__(self, name: str) -> Any:
        return getattr(self._resolve(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._resolve(), name, value)

    def __repr__(self) -> str:
        return f"<lazy {'.'.join(filter(None, self._where))}>"


inductor_config = _Lazy("torch._inductor.config")
ir = _Lazy("torch._inductor.ir")
V = _Lazy("torch._inductor.virtualized", "V")
ir_ops = _Lazy("torch._inductor.virtualized", "ops")  # Inductor's ops, for IR inner functions


# Classes our modules subclass: loaded when first asked for.
_CLASSES = {
    "CuteDSLTemplate": ("torch._inductor.codegen.cutedsl.cutedsl_template", "CuteDSLTemplate"),
    "CuteDSLTemplateCaller": ("torch._inductor.codegen.cutedsl.cutedsl_template", "CuteDSLTemplateCaller"),
    "CuteDSLTemplateBuffer": ("torch._inductor.ir", "CuteDSLTemplateBuffer"),
    "CuteDSLTemplateKernel": ("torch._inductor.codegen.cutedsl.cutedsl_kernel", "CuteDSLTemplateKernel"),
    "InductorChoices": ("torch._inductor.choices", "InductorChoices"),
    "OpsHandlerBase": ("torch._inductor.ops_handler", "DefaultHandler"),
}


def __getattr__(name: str) -> Any:
    if name not in _CLASSES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attr = _CLASSES[name]
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def loaded(name: str) -> bool:
    """Whether module ``name`` has been imported (and is not still executing)."""
    module = sys.modules.get(name)
    return module is not None and not getattr(getattr(module, "__spec__", None), "_initializing", False)


class _HookedLoader(importlib.abc.Loader):
    """Loads as ``loader`` does, then runs the hooks (the module keeps ``loader``)."""

    def __init__(self, loader: Any, fire: Callable[[], None]) -> None:
        self._loader, self._fire = loader, fire

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        module.__loader__ = self._loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        self._fire()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class _ImportHooks(importlib.abc.MetaPathFinder):
    """A ``sys.meta_path`` entry that finds nothing itself: for a watched module it takes
    the spec the other finders give and has its loader run the hooks after loading."""

    def __init__(self) -> None:
        self.hooks: dict[str, list[Callable[[], None]]] = {}
        self.lock = threading.RLock()

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in self.hooks:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None:
            spec.loader = _HookedLoader(spec.loader, lambda: self.fire(name))
        return spec

    def fire(self, name: str) -> None:
        with self.lock:
            hooks = self.hooks.pop(name, [])
            if not self.hooks and self in sys.meta_path:
                sys.meta_path.remove(self)
        for fn in hooks:
            fn()

    def add(self, name: str, fn: Callable[[], None]) -> None:
        with self.lock:
            self.hooks.setdefault(name, []).append(fn)
            if self not in sys.meta_path:
                sys.meta_path.insert(0, self)

    def remove(self, name: str, fn: Callable[[], None]) -> None:
        with self.lock:
            if fn in self.hooks.get(name, ()):
                self.hooks[name].remove(fn)
                if not self.hooks[name]:
                    del self.hooks[name]
            if not self.hooks and self in sys.meta_path:
                sys.meta_path.remove(self)


_import_hooks = _ImportHooks()


def when_imported(name: str, fn: Callable[[], None]) -> Any:
    """Call ``fn()`` now if module ``name`` is imported, else right after it is (before
    whatever imported it gets it back). Returns a handle for ``cancel_when_imported``,
    None if ``fn`` ran now."""
    if name in sys.modules:
        fn()
        return None
    handle = (name, fn)
    _import_hooks.add(name, fn)
    return handle


def cancel_when_imported(handle: Any) -> None:
    """``fn`` of ``when_imported`` will not run (if it has not yet)."""
    if handle is not None:
        _import_hooks.remove(*handle)
