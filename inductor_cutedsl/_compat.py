"""Every use of torch-private (``torch._inductor``) API, and every difference between
the torch releases we support (``SUPPORTED_TORCH``).

Keeping them here makes a torch upgrade a one-file review: widen ``SUPPORTED_TORCH``
(and setup.py's ``install_requires``, which states the same range) only after the CPU
suite passes on the new release.

Importing Inductor costs more than a second (``torch._inductor.config`` alone pulls in
``torch._dynamo``), so nothing here imports it at import time: ``inductor_config``,
``V``, ``ir`` and ``ir_ops`` are stand-ins that import their module on first use,
and the classes our modules subclass load on first access (``__getattr__``).
``when_imported`` runs code right after a module is imported (how ``enable()`` at
import sets Inductor's settings without importing Inductor).
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import math
import os
import re
import sys
import threading
import warnings
from typing import Any, Callable, Iterator, Sequence

import torch

__all__ = [
    "CuteDSLTemplate",
    "CuteDSLTemplateBuffer",
    "CuteDSLTemplateCaller",
    "InductorChoices",
    "OpsHandlerBase",
    "caches_disabled",
    "aten_choice",
    "aten_dtype_choice",
    "autotune_backend_tokens",
    "autotune_backends",
    "choices_class",
    "codegen_blocked",
    "compile_uses_cudagraphs",
    "feedback_saver",
    "freeze_layout",
    "kernel_out_dtype",
    "max_autotune_on",
    "multiple_of",
    "offset_of",
    "set_autotune_backends",
    "set_choices_class",
    "size_hint",
    "stock_choices",
    "torch_supported",
    "when_imported",
]


# -- the torch releases we support -----------------------------------------------------

#: torch releases (major, minor) whose Inductor this module is written against: from the
#: first (included) up to the second (excluded). setup.py's ``install_requires`` states
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


# -- running code when a module is imported ------------------------------------------


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


def autotune_backends() -> str:
    return inductor_config.max_autotune_gemm_backends


def set_autotune_backends(value: str, hold: bool = True) -> None:
    """Set ``max_autotune_gemm_backends``: ``hold``, the backend's value while it is
    installed (``sync_thread_settings``); else the value it restores."""
    _set_setting("max_autotune_gemm_backends", value, hold)


# -- settings held in every compiling thread ------------------------------------------
#
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
    if unset is None or not isinstance(getattr(entry, "user_override", None), contextvars.ContextVar):
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


def kernel_out_dtype(kernel_inputs: Any) -> Any:
    """The output dtype a GEMM's ``KernelInputs`` asks for of its own (``mm``/``bmm``
    with ``out_dtype``), else None."""
    return getattr(kernel_inputs, "_out_dtype", None)


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


def codegen_blocked() -> str | None:
    """Why the current graph cannot take a CuteDSL kernel call, if it cannot."""
    if V.aot_compilation:
        return "AOT compilation (no Python wrapper to call the kernel from)"
    if V.graph.cpp_wrapper:
        return "cpp_wrapper is on (CuteDSL kernels are called from the Python wrapper)"
    return None


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
    ``inductor_choices_class`` makes now (a factory that is not a class is trusted)."""
    cls = inductor_config.inductor_choices_class
    if cls is None:
        from torch._inductor.choices import InductorChoices

        return type(handler) is InductorChoices
    return not isinstance(cls, type) or type(handler) is cls


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
    """The choices handler ``inductor_choices_class`` = ``cls`` stands for."""
    from torch._inductor.choices import InductorChoices

    return cls() if cls is not None else InductorChoices()


def set_choices_class(cls: Any, live: bool = True, hold: bool = True) -> None:
    """Install ``cls`` for new threads (config) and, with ``live``, for this thread (the
    live handler, where one may exist: Inductor makes it from the config on first use);
    ``hold``: as ``set_autotune_backends``."""
    _set_setting("inductor_choices_class", cls, hold)
    if live and loaded("torch._inductor.choices"):
        V.set_choices_handler(_made_by(cls))


def size_hint(expr: Any) -> int:
    """A concrete value of ``expr`` to size a kernel for (adds no guard). Newer releases
    dropped ``size_hint`` for ``optimization_hint``."""
    sizevars = V.graph.sizevars
    hint = getattr(sizevars, "size_hint", None) or sizevars.optimization_hint
    return int(hint(expr, fallback=inductor_config.unbacked_symint_fallback))


def multiple_of(expr: Any, n: int) -> bool:
    """True only when ``expr`` is provably a multiple of ``n`` (adds no guard)."""
    import sympy

    return bool(V.graph.sizevars.statically_known_multiple_of(sympy.sympify(expr), n))


def is_one(expr: Any) -> bool:
    return bool(V.graph.sizevars.statically_known_equals(expr, 1))


def offset_of(node: Any) -> Any:
    """Storage offset (elements) of an input node's layout."""
    return node.get_layout().offset


def freeze_layout(node: Any) -> None:
    """Fix a flexible input layout so that the strides our kernel was picked for hold."""
    ir.ExternKernel.realize_input(node)
    layout = node.get_layout()
    if isinstance(layout, ir.FlexibleLayout):
        node.freeze_layout()


def device_of(node: Any) -> torch.device:
    return node.get_device()


def aten_choice(op_name: str) -> Any:
    """Inductor's ATen (cuBLAS) ExternKernelChoice for a GEMM op."""
    from torch._inductor.kernel import bmm, mm

    return {
        "mm": mm.aten_mm,
        "addmm": mm.aten_addmm,
        "bmm": bmm.aten_bmm,
        "baddbmm": bmm.aten_baddbmm,
    }[op_name]


def aten_dtype_choice(op_name: str) -> Any:
    """ATen's ExternKernelChoice for mm / bmm with an ``out_dtype`` of their own."""
    from torch._inductor.kernel import bmm, mm

    return {"mm": mm.aten_mm_dtype, "bmm": bmm.aten_bmm_dtype}[op_name]


@contextlib.contextmanager
def feedback_saver(fn: Callable[..., None]) -> Iterator[None]:
    """Call ``fn(timings, name, input_nodes, choices, profile_fn, precompile_times)``
    after every autotuning benchmark inside the block."""
    from torch._inductor import select_algorithm

    cache = select_algorithm.get_algorithm_selector_cache()
    cache.add_feedback_saver(fn)
    try:
        yield
    finally:
        cache.feedback_saver_fns.remove(fn)


def caches_disabled() -> contextlib.AbstractContextManager:
    """Inductor with every cache off (FX graph, autotuning): a truly cold compile."""
    return inductor_config.patch(force_disable_caches=True)


def compile_phase_seconds() -> dict[str, float]:
    """Seconds this process spent in each of Dynamo's and Inductor's timed compile phases
    (``dynamo_timed``), summed over compiles: where a cold compile's time went."""
    from torch._dynamo.utils import compilation_time_metrics

    return {name: sum(times) for name, times in compilation_time_metrics.items()}


def compile_pool_ready() -> bool:
    """Whether Inductor's compile subprocesses are up. Until then Inductor compiles Triton
    kernels in this process: autotuning choices in threads, and a benchmark module's
    kernels (``Scheduler.compile_kernel``) at the module's first run."""
    from torch._inductor.async_compile import AsyncCompile

    ready = AsyncCompile._ready_future
    return ready is not None and ready.done()


class EnvChange:
    """A variable this process set in its environment (``name`` = ``value``): ``undo()``
    removes it again, if still so, and runs ``after_undo``."""

    def __init__(self, name: str, value: str, after_undo: Callable[[], None] = lambda: None) -> None:
        self.name, self.value, self._after_undo = name, value, after_undo

    def undo(self) -> None:
        if os.environ.get(self.name) == self.value:
            del os.environ[self.name]
        self._after_undo()


def align_triton_ptxas() -> EnvChange | None:
    """Make this process key its Triton compiles on the ptxas that Inductor's compile
    workers use; returns the change to the environment (None where there was none).

    A Triton kernel's on-disk cache key holds the ptxas version, which Triton reads once
    per process (``get_ptxas_version`` is memoized). Inductor's workers point Triton at
    torch's own ptxas (``_set_triton_ptxas_path``, where torch ships one, of another CUDA
    release than Triton's bundled one) before compiling; this process does only at its
    first Triton compile outside the workers, but autotuning's threads compile Inductor's
    template choices at lowering, before that, with Triton's bundled ptxas, and the
    memoized version then stays. A kernel whose worker result this process uses (a
    compiled graph's) is unaffected, but one it compiles itself after a worker did (a
    template choice at its first benchmark, precompiled by the workers where its GEMM was
    lowered after they came up: every choice of every graph in a long-lived process) was
    never found in the cache and was compiled again here, in the compiling thread.
    docs/performance.md has the figures."""
    try:
        from torch._inductor.runtime.compile_tasks import _set_triton_ptxas_path
        from triton.backends.nvidia import compiler as nvidia
    except ImportError:  # no CUDA Triton: nothing to align
        return None
    name = "TRITON_PTXAS_PATH"
    before = os.environ.get(name)
    # torch caches the setter (it runs once per process): called through the cache, an
    # install after disable() undid the path would leave it unset, and the parent would
    # key on the bundled ptxas again (every template choice of every later graph
    # compiled twice).
    getattr(_set_triton_ptxas_path, "__wrapped__", _set_triton_ptxas_path)()
    after = os.environ.get(name)
    forget = getattr(nvidia.get_ptxas_version, "cache_clear", lambda: None)
    forget()  # read again, from the ptxas the path now names
    return None if after == before else EnvChange(name, after, forget)


def node_ranges(node: Any) -> tuple[list[Any], list[Any]]:
    """(loop sizes, reduction sizes) of a scheduler node."""
    var_sizes, reduce_sizes = node.get_ranges()
    return list(var_sizes), list(reduce_sizes)


def replay_node(node: Any, index_vars: list[Any], handler: Any) -> None:
    """Run a scheduler node's loop body once under ``handler`` (an ops handler)."""
    with V.set_ops_handler(handler):
        node._body(index_vars, [])


def simplify_with_ranges(expr: Any, ranges: dict) -> Any:
    return V.graph.sizevars.simplify_with_ranges(expr, ranges)


def install_cuda_scheduling(scheduling_cls: Any) -> Any:
    """Make ``scheduling_cls`` Inductor's "cuda" scheduling (from the next graph on).

    Returns the previous registration, for ``restore_cuda_scheduling``.
    """
    from torch._inductor.codegen import common

    common.init_backend_registration()
    prior = common.device_codegens["cuda"]
    common.register_backend_for_device(
        "cuda",
        scheduling_cls,
        prior.wrapper_codegen,
        prior.cpp_wrapper_codegen,
        prior.fx_wrapper_codegen,
    )
    return prior


def restore_cuda_scheduling(prior: Any) -> None:
    from torch._inductor.codegen import common

    common.device_codegens["cuda"] = prior


def cuda_combined_scheduling() -> Any:
    from torch._inductor.codegen.cuda_combined_scheduling import CUDACombinedScheduling

    return CUDACombinedScheduling


def template_kernel(input_nodes: list, output_node: Any) -> Any:
    """A CuteDSL template kernel to render with (the name is filled in at define time)."""
    from torch._inductor.codegen.cutedsl.cutedsl_kernel import CuteDSLTemplateKernel
    from torch._inductor.utils import Placeholder

    return CuteDSLTemplateKernel(
        kernel_name=str(Placeholder.KERNEL_NAME), input_nodes=input_nodes, output_node=output_node
    )


def tensor_box(buffer: Any) -> Any:
    """The TensorBox a ChoiceCaller's ``output_node`` returns for its IR buffer."""
    return ir.TensorBox.create(buffer)


def buffer_users_outside(scheduler: Any, name: str, inside: set) -> bool:
    """Whether anything but the nodes named in ``inside`` (or the graph output) reads ``name``."""
    if name in V.graph.get_output_names():
        return True
    buf = scheduler.name_to_buf.get(name)
    users = buf.users if buf is not None else []
    return any(getattr(u.node, "get_name", lambda: None)() not in inside for u in users)


def is_multi_template_buffer(node: Any) -> bool:
    return isinstance(node, ir.MultiTemplateBuffer)


def is_triton_template_caller(choice: Any) -> bool:
    return isinstance(choice, ir.TritonTemplateCallerBase)


def is_extern_caller(choice: Any) -> bool:
    """Whether an autotuning choice is an ATen (extern kernel) call, cuBLAS for GEMMs."""
    from torch._inductor.select_algorithm import ExternKernelCaller

    return isinstance(choice, ExternKernelCaller)


def benchmark_gpu(fn: Callable[[], Any]) -> float:
    """Milliseconds of ``fn`` on Inductor's own GPU benchmarker (as its candidates are timed)."""
    from torch._inductor.runtime.benchmarking import benchmarker

    return benchmarker.benchmark_gpu(fn)


def nodes_module(scheduler: Any, nodes: Sequence[Any], triton_choice: Any = None) -> tuple[Any, Any]:
    """(compile future or None, module) of ``nodes`` generated as one Inductor kernel's
    benchmark module (random arguments of its own), its compile started in Inductor's
    worker pool. ``nodes`` may start with a MultiTemplateBuffer's node, rendered as
    ``triton_choice`` (as ``Scheduler.speedup_by_fusion`` does).

    Until Inductor's compile subprocesses are up, ``Scheduler.compile_kernel`` starts no
    compile, and the module's kernels would compile at its first run, in the compiling
    thread; they are then compiled in Inductor's compile threads instead, as its
    autotuning compiles its Triton choices while the subprocesses are not up."""
    template = nodes[0].node
    with template.swap_as_triton_caller(triton_choice) if triton_choice is not None else contextlib.nullcontext():
        future, module = scheduler.compile_kernel(list(nodes))
    if future is None:
        future = precompile_in_threads(module)
    return future, module


def precompile_in_threads(module: Any) -> Any:
    """A future of the Triton kernels of ``module`` compiled (and their launchers made)
    in Inductor's compile threads, on this thread's CUDA device; None where Inductor
    compiles in one thread only, or the module has no kernel."""
    from torch._inductor.async_compile import AsyncCompile, get_compile_threads
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    kernels = [k for k in vars(module).values() if isinstance(k, CachingAutotuner)]
    if not kernels or get_compile_threads() <= 1:
        return None
    device = torch.cuda.current_device() if torch.cuda.is_initialized() else None

    def compile_all() -> None:
        with torch.cuda.device(device) if device is not None else contextlib.nullcontext():
            for kernel in kernels:
                kernel.precompile()  # under the kernel's lock: a first run meanwhile waits

    return AsyncCompile.pool().submit(compile_all)


def module_run_fn(future: Any, module: Any) -> Callable[[], Any]:
    """A function running ``nodes_module``'s kernel on arguments of its own, again on
    the same ones each call.

    Not ``Scheduler.benchmark_fused_nodes``: that times a kernel which updates a buffer
    in place as (copy + kernel) - copy, and the copy leaves the buffer in L2, so a large
    in-place epilogue can read faster than memory bandwidth allows. The pointwise
    chains we fuse index linearly, so the kernel can simply run again on the same
    arguments.
    """
    if future is not None:
        future.result()
    args = module.get_args()
    return lambda: module.call(list(args))  # ``call`` may empty its list


def choice_run_fn(choice: Any) -> Callable[[], Any]:
    """A function running autotuning choice ``choice`` (ATen, Triton or ours) once, on
    random inputs and an output laid out as its own benchmark request's."""
    request = choice.bmreq
    inputs = [meta.to_tensor() for meta in request.input_tensor_meta]
    return request.make_run_fn(*inputs, out=request.output_tensor_meta.to_tensor())


def preserve_rng_state() -> contextlib.AbstractContextManager:
    """Random benchmark inputs must not move the user's RNG (as in Inductor's autotuning)."""
    from torch._dynamo.utils import preserve_rng_state as preserve

    return preserve()


def install_fusion_hooks(
    verdict: Callable[[Any, Any], bool | None], pairs_through_view: Callable[[Any, Any, Any], bool]
) -> dict:
    """Patch the scheduler's fusion rules for our GEMMs; returns what ``restore_fusion_hooks``
    needs.

    ``Scheduler.speedup_by_fusion`` answers ``verdict(node1, node2)`` at once where it is
    not None: there our backend has already measured the ways to run the pair.
    ``Scheduler.can_fuse_vertical`` also passes a pair that it refuses only because
    ``node2`` reads ``node1``'s output with other loops than ``node1`` writes it (a
    (B, T, N) view of a (B*T, N) GEMM) where ``pairs_through_view(scheduler, node1,
    node2)``: our translation proves that indexing itself, and nothing ``node2`` reads
    may be computed from ``node1`` by a node between them."""
    from torch._inductor.scheduler import FusionResult, Scheduler

    saved = {"speedup_by_fusion": Scheduler.speedup_by_fusion, "can_fuse_vertical": Scheduler.can_fuse_vertical}

    def speedup_by_fusion(self, node1, node2, **kwargs):
        decided = verdict(node1, node2)
        if decided is not None:
            return FusionResult.fuse(decided)
        return saved["speedup_by_fusion"](self, node1, node2, **kwargs)

    # Some releases pass keyword arguments (2.14: ``index_equivalent_dep_names``): they go
    # through to Inductor's rule unchanged.
    def can_fuse_vertical(self, node1, node2, **kwargs):
        if saved["can_fuse_vertical"](self, node1, node2, **kwargs):
            return True
        return pairs_through_view(self, node1, node2) and not _computed_between(self, node1, node2)

    can_fuse_vertical.__wrapped__ = saved["can_fuse_vertical"]
    Scheduler.speedup_by_fusion = speedup_by_fusion
    Scheduler.can_fuse_vertical = can_fuse_vertical
    return saved


def restore_fusion_hooks(saved: dict) -> None:
    from torch._inductor.scheduler import Scheduler

    for name, original in saved.items():
        setattr(Scheduler, name, original)


def _computed_between(scheduler: Any, node1: Any, node2: Any) -> bool:
    """Whether ``node2`` reads a buffer (not ``node1``'s) made by a node that depends on
    ``node1``: fusing them would run ``node2`` before its input exists."""
    own, ops = node1.get_buffer_names(), node1.get_operation_names()
    for dep in node2.unmet_dependencies:
        name = scheduler.mutation_renames.get(dep.name, dep.name)
        if name in own:
            continue
        op_name = scheduler.name_to_buf[name].defining_op_name()
        if ops & scheduler.name_to_fused_node[op_name].ancestors:
            return True
    return False


def stock_pairs(scheduler: Any, node1: Any, node2: Any) -> bool:
    """Whether Inductor's own rules pair ``node2`` with ``node1``: their memory
    dependencies match (what a Triton template's epilogue codegen relies on)."""
    from torch._inductor.scheduler import Scheduler

    stock = getattr(Scheduler.can_fuse_vertical, "__wrapped__", Scheduler.can_fuse_vertical)
    return scheduler.score_fusion_memory(node1, node2) > 0 and stock(scheduler, node1, node2)


def prefer_choice(buffer: Any, choice: Any) -> None:
    """Make ``choice`` MultiTemplateBuffer ``buffer``'s fastest unfused choice, the one
    ``Scheduler.finalize_multi_template_buffers`` renders it as (its cached timings
    are edited in place: nothing else reads them after the fusion decision)."""
    timings = buffer.choice_timings()
    fastest = min(timings.values())
    if timings[choice] > fastest:
        timings[choice] = math.nextafter(fastest, 0.0)


def finalize_as_triton(buffer: Any, choice: Any) -> None:
    """Render MultiTemplateBuffer ``buffer`` as Triton template ``choice`` (as Inductor
    does when a fused Triton template wins its epilogue benchmark)."""
    buffer.finalize_as_triton_caller(choice)


def install_benchmark_hook(adjust: Callable[[dict, Callable[[Any], Callable[[], Any]]], dict]) -> Any:
    """Pass every autotuning pass's timings through ``adjust(timings, run_fn)``, where
    ``run_fn(choice)`` makes a function that runs one choice's kernel on the inputs
    Inductor timed it on (its benchmark request's run function; a choice with a
    ``benchmark_inputs()`` method gets those inputs instead). Returns what
    ``restore_benchmark_hook`` needs."""
    from torch._inductor.select_algorithm import AlgorithmSelectorCache

    original = AlgorithmSelectorCache.__dict__["benchmark_choices"]

    def benchmark_choices(cls, choices, autotune_args, is_collective=False):
        timings = original.__func__(cls, choices, autotune_args, is_collective)
        if is_collective:
            return timings

        def run_fn(choice):
            inputs, out = autotune_args.get_benchmark_tensors(cls._is_extern(choice)).unpack()
            own = getattr(choice, "benchmark_inputs", None)
            return choice.bmreq.make_run_fn(*(own() if own else inputs), out=out)

        return adjust(timings, run_fn)

    AlgorithmSelectorCache.benchmark_choices = classmethod(benchmark_choices)
    return original


def restore_benchmark_hook(original: Any) -> None:
    from torch._inductor.select_algorithm import AlgorithmSelectorCache

    AlgorithmSelectorCache.benchmark_choices = original


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


# -- lowering a custom op (the gated MLP's dual GEMM) ---------------------------------


def lowering(op: Any) -> Callable[..., Any]:
    """Inductor's lowering of aten ``op`` (called with IR values)."""
    from torch._inductor.lowering import lowerings

    return lowerings[op]


def register_lowering(op: Any, fn: Callable[..., Any]) -> None:
    """Make ``fn`` Inductor's lowering of ``op`` (arguments as the graph passes them)."""
    from torch._inductor.lowering import register_lowering as register

    register(op, type_promotion_kind=None)(fn)


def unregister_lowering(op: Any) -> None:
    from torch._inductor.lowering import lowerings

    lowerings.pop(op, None)


class _PreGradPasses:
    """A user's pre-grad pass (if any) and then ours. A module-level class, not a
    closure: Inductor pickles its config for its compile cache's key, and an
    unpicklable pass turns that cache off for every compile.

    Registered as Inductor's ``CustomGraphPass``, with ``uuid()``: newer Inductor runs a
    custom pre-grad pass that has one after its compile cache's lookup (and keys the
    cache on it), and logs a warning on every process for a pass without one. ``uuid()``
    is None (the pass runs before the lookup, as on older releases) where a user's pass
    has none of its own."""

    def __init__(self, prior: Any, fn: Callable[[Any], Any], key: Callable[[], Any]) -> None:
        self.prior, self.fn, self.key = prior, fn, key

    def __call__(self, graph: Any) -> None:
        for prior in _graph_passes(self.prior):
            prior(graph)
        self.fn(graph)

    def uuid(self) -> Any:
        priors = []
        for prior in _graph_passes(self.prior):
            uuid = getattr(prior, "uuid", None)
            key = uuid() if callable(uuid) else None
            if key is None:
                return None
            priors.append(key)
        return ("inductor_cutedsl.pre_grad", tuple(priors), self.key())


def _graph_passes(value: Any) -> tuple:
    """The passes a ``pre_grad_custom_pass`` setting holds (newer releases also take a
    list or tuple of them)."""
    if value is None:
        return ()
    return tuple(value) if isinstance(value, (list, tuple)) else (value,)


def install_pre_grad_pass(fn: Callable[[Any], Any], key: Callable[[], Any]) -> Any:
    """Run ``fn`` (a module-level function: it is pickled) on each graph before
    autograd, after a user's own pre-grad pass; ``key()`` (module-level too) says what
    ``fn`` does, for Inductor's compile cache. Returns what ``restore_pre_grad_pass``
    needs."""
    from torch._inductor.custom_graph_pass import CustomGraphPass

    CustomGraphPass.register(_PreGradPasses)
    prior = inductor_config.pre_grad_custom_pass
    _set_setting("pre_grad_custom_pass", _PreGradPasses(prior, fn, key), hold=True)
    return prior


def restore_pre_grad_pass(prior: Any) -> None:
    _set_setting("pre_grad_custom_pass", prior, hold=False)


def lowering_site() -> tuple[Any, Any] | None:
    """(the graph being lowered, the FX node it is lowering), or None outside a lowering."""
    try:
        graph = V.graph
        node = graph.current_node
    except (AttributeError, AssertionError):  # no graph handler installed
        return None
    return (graph, node) if isinstance(node, torch.fx.Node) else None


def current_node_arg(name: str, index: int, default: Any) -> Any:
    """Argument ``name`` (positional ``index``) of the op being lowered, else ``default``."""
    node = V.graph.current_node
    if name in node.kwargs:
        return node.kwargs[name]
    return node.args[index] if len(node.args) > index else default


def current_node_output_used(index: int) -> bool:
    """Whether the graph reads output ``index`` of the op being lowered."""
    import operator

    node = V.graph.current_node
    return any(u.target is operator.getitem and u.args[1] == index for u in node.users)


def realized(node: Any) -> Any:
    """``node`` as a realized buffer or view of one (what a template takes as input)."""
    return ir.ExternKernel.realize_input(node)


def empty_buffer(size: list, dtype: torch.dtype, device: torch.device) -> Any:
    """A new contiguous buffer (a kernel's extra output)."""
    from torch._inductor.lowering import empty_strided

    return empty_strided(size, None, dtype=dtype, device=device)


def fixed_layout(size: list, dtype: torch.dtype, device: torch.device) -> Any:
    return ir.FixedLayout(device, dtype, list(size), ir.FlexibleLayout.contiguous_strides(size))


def pointwise(device: torch.device, dtype: torch.dtype, inner_fn: Callable, ranges: list) -> Any:
    """A pointwise IR node computing ``inner_fn(index)`` (with ``V.ops``) per element."""
    return ir.Pointwise.create(device=device, dtype=dtype, inner_fn=inner_fn, ranges=list(ranges))
