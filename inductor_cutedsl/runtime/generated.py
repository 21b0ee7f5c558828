"""The entry point that Inductor-generated code calls.

A generated kernel module does, at import::

    from inductor_cutedsl.runtime.generated import launcher, KernelSpec, GemmConfig, Epilogue, EpilogueOperand
    _launch = launcher(KernelSpec(...), scalars=(...), views=(...), out_view=..., layouts=...)

which loads the kernel (memo, disk cache, or compile), and then, per call,
``_launch(a, b, out, *tensor_operands, stream=stream)`` (a dual kernel's up weight as
``b_up=``). Shapes and strides are
read from the tensors, so one module serves every size of a dynamic graph; except
where ``layouts`` fixes them for a GEMM operand of a static graph, whose call then
passes the operand's storage buffer rather than a view rebuilt at every call. The spec
is written as the dataclasses' own constructor calls (``lowering.candidate``), whose
names this module exports.

The per-call host work is kept small: everything a launch passes besides addresses
and the stream is worked out once per (sizes, strides, device, operand address
alignment) and reused while those stay (``_Entries``); a call then reads the
tensors' sizes, strides and addresses and makes one C call.

Never worse than stock: in a generated module (``scope`` given), a kernel that fails to
build or to load, or fails at its first launch, is replaced by the same computation in
torch operations (``reference.run``), with one warning (``errors.fallback``; under
``config.strict`` the failure raises). Once the first launch succeeds, the module calls
the kernel's launcher directly: the guard costs nothing after it.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from ..compat import environment
from ..errors import fallback
from ..kernels.config import GemmConfig
from ..kernels.epilogue import Epilogue, EpilogueOperand
from . import artifacts, reference
from .compiler import build
from .launch import default_cache, get_gemm, is_loaded
from .spec import ALIGNMENT, GEMM_OPERANDS, KernelSpec
from .support import OUT_DTYPES, declaration_reason, declared_args

__all__ = ["launcher", "precompile", "KernelSpec", "GemmConfig", "Epilogue", "EpilogueOperand"]

#: A GEMM operand's fixed (sizes, strides), read from the start of the tensor passed.
Layout = tuple[tuple[int, ...], tuple[int, ...]]

log = logging.getLogger("inductor_cutedsl.launch")

# Bytes per element of an operand dtype (as ``EpilogueOperand.dtype`` names them).
_ITEMSIZE = {name: dtype.itemsize for dtype, name in OUT_DTYPES.items()}


def launcher(
    spec: KernelSpec,
    scalars: Sequence[float] = (),
    views: Sequence = (),
    out_view=None,
    scope: dict[str, Any] | None = None,
    name: str = "_launch",
    programmatic: bool = False,
    layouts: Mapping[str, Layout] | None = None,
) -> Callable[..., None]:
    """``scalars``: values of the epilogue's scalar operands, in declaration order;
    ``views``: per tensor operand, how to read it (see ``operand_args``); ``out_view``:
    how the output is written, where not as the GEMM's own (see ``CompiledGemm.launch``);
    ``programmatic``: launch as a programmatic dependent of the stream's previous kernel
    (``config.programmatic_launch`` when the graph's code was generated);
    ``layouts``: per GEMM operand (``a``, ``b``, ``b_up``) so named, the (sizes, strides)
    it is read through from the start of the tensor passed (``read_through``): the
    generated call passes the operand's buffer, and the launcher neither needs the
    view built nor keys on its shape (``compat.ir_access.bound_layout``).

    ``scope``: the globals of the generated module that binds the launcher to ``name``.
    Given, every failure falls back to ``reference.run`` (see the module's docstring);
    without it (timing a candidate), failures raise.

    In one of Inductor's compile workers nothing is built or loaded: from torch 2.14 on
    they import each CuteDSL module of a compiled graph only to check its entry points
    (``_worker_compile_pycodecache_kernel``), and the parent imports it again to run it.
    A load there would start a CUDA context in every such worker."""
    layouts = dict(layouts or {})
    if set(layouts) - set(GEMM_OPERANDS):
        raise ValueError(f"layouts name {sorted(set(layouts) - set(GEMM_OPERANDS))}, not GEMM operands {GEMM_OPERANDS}")
    if scope is None:
        return _launcher(spec, scalars, views, out_view, get_gemm(spec), programmatic, layouts)
    if environment.in_a_compile_worker():
        return _unlaunchable(spec)
    stage = "kernel build"
    try:
        path = None if is_loaded(spec) else build(spec, default_cache())[0]
        stage = "kernel load"
        fast = _launcher(spec, scalars, views, out_view, get_gemm(spec, path=path), programmatic, layouts)
    except Exception as exc:
        fallback(stage, spec.describe(), exc, log)
        return _reference_launcher(spec, scalars, views, out_view, layouts)
    try:  # for save_cache_artifacts(): a warm start elsewhere then builds nothing
        artifacts.record(spec.key())
    except Exception:  # a cache artifact missed costs another machine a build, nothing here
        log.warning("could not record %s for the portable cache artifacts", spec.describe(), exc_info=True)

    def first_launch(*args: Any, **kwargs: Any) -> None:
        try:
            fast(*args, **kwargs)
        except Exception as exc:
            fallback("first launch", spec.describe(), exc, log)
            scope[name] = _reference_launcher(spec, scalars, views, out_view, layouts)
            scope[name](*args, **kwargs)
        else:
            scope[name] = fast

    return first_launch


def _unlaunchable(spec: KernelSpec) -> Callable[..., None]:
    """The launch function of a module imported in a compile worker: it never runs there."""

    def launch(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError(f"{spec.describe()} was imported in a compile worker, which launches no kernel")

    return launch


def precompile(**shapes: Any) -> None:
    """A generated module's ``<kernel>_precompile``: Inductor's compile workers (torch
    2.14 on) call it with the kernel's shapes to compile it ahead of the parent. Nothing
    is left to do: the kernel was built when it was a candidate (or a fused way of one),
    and the parent builds any that is missing where it loads the module."""


def read_through(layouts: Mapping[str, Layout], a, b, b_up) -> tuple:
    """(a, b, b_up) as the kernel reads them: each that ``layouts`` names, the view of
    those sizes and strides from where the tensor passed starts, as the generated call
    would have built it (``reinterpret_tensor`` at offset 0)."""
    found = {"a": a, "b": b, "b_up": b_up}
    for name, (sizes, strides) in layouts.items():
        t = found[name]
        if t is not None:
            found[name] = t.as_strided(sizes, strides, t.storage_offset())
    return found["a"], found["b"], found["b_up"]


def _reference_launcher(
    spec: KernelSpec, scalars: Sequence[float], views: Sequence, out_view, layouts: Mapping[str, Layout] | None = None
) -> Callable[..., None]:
    """A launch function computing ``spec`` with torch operations (``reference.run``)."""
    layouts = dict(layouts or {})

    def launch(a, b, out, *tensors, stream=None, b_up=None) -> None:
        a, b, b_up = read_through(layouts, a, b, b_up)
        reference.run(spec, a, b, out, tensors, scalars, views, out_view, b_up=b_up)

    return launch


def _launcher(
    spec: KernelSpec,
    scalars: Sequence[float],
    views: Sequence,
    out_view,
    kernel,
    programmatic: bool,
    layouts: Mapping[str, Layout] | None = None,
) -> Callable[..., None]:
    """The fast launch function of loaded kernel ``kernel`` (see ``_Entries``)."""
    layouts = dict(layouts or {})
    unpaired_kernel = functools.cache(lambda: get_gemm(unpaired(spec)))  # keyed and loaded once
    scalars = tuple(float(s) for s in scalars)
    views = tuple(views) or (None,) * sum(op.is_tensor for op in spec.epilogue.operands)
    # Per operand: (is a tensor, its declaration, its view or its scalar value).
    t_views, s_values = iter(views), iter(scalars)
    plan = tuple(
        (True, op, next(t_views)) if op.is_tensor else (False, op, next(s_values)) for op in spec.epilogue.operands
    )

    def checked(a, b, tensors) -> tuple:
        """(the kernel to run, the operands' flat values) for these tensors: the
        unpaired kernel where one breaks a ``pairs`` or ``staged`` declaration."""
        batch = a.shape[0] if a.dim() == 3 else 1
        m, n = a.shape[-2], b.shape[-1]
        run, values, t = kernel, [], iter(tensors)
        for is_tensor, op, what in plan:
            if not is_tensor:
                values.append(what)
                continue
            tensor = next(t)
            args = declared_args(op, tensor, what, batch, m, n)
            if declaration_reason(op, args, batch, m, n, tensor.element_size()):
                run = unpaired_kernel()
            values += args
        return run, values

    if spec.config.stream_k:  # scratch buffers allocated per launch: nothing to reuse

        def launch_stream_k(
            a: torch.Tensor,
            b: torch.Tensor,
            out: torch.Tensor,
            *tensors: torch.Tensor,
            stream: int,
            b_up: torch.Tensor | None = None,
        ) -> None:
            a, b, b_up = read_through(layouts, a, b, b_up)
            run, values = checked(a, b, tensors)
            run.launch(a, b, out, values, stream, out_view, b_up=b_up, programmatic=programmatic)

        return launch_stream_k
    return _Entries(plan, out_view, checked, spec.dual, programmatic, layouts).launcher()


class _Entries:
    """Per-call values a launcher reuses, keyed by what they are computed from.

    Key: the sizes and strides of A and B (and a dual kernel's up weight's strides),
    except for those whose layout the launcher was given (fixed: nothing to key), the
    output's strides, A's device, and per tensor operand its sizes and strides (where it
    is read as Inductor's view, not a translated one) and, where it is declared for
    paired or staged loads, its address modulo 16 (the declarations' alignments divide
    16), so a tensor that breaks a declaration still gets the unpaired kernel. Entry:
    (the kernel's fast caller, bytes to add to the output's address, the values after
    the three pointers, the up weight's strides, the scalars before the first tensor
    operand, then per tensor operand the values after its address: its three strides
    and the scalars up to the next one). Dtypes are the spec's: not part of the key.
    """

    #: Entries kept per launcher; a dynamic graph seeing more sizes than this starts over.
    LIMIT = 4096

    def __init__(
        self,
        plan: tuple,
        out_view,
        checked: Callable,
        dual: bool,
        programmatic: bool,
        layouts: Mapping[str, Layout] | None = None,
    ) -> None:
        self.plan, self.out_view, self.checked, self.dual = plan, out_view, checked, dual
        self.programmatic = programmatic
        self.layouts = dict(layouts or {})
        self.table: dict = {}

    def miss(self, key: tuple, a, b, out, tensors, b_up) -> tuple:
        """Work the entry out as a launch without reuse would, and keep it."""
        a, b, b_up = read_through(self.layouts, a, b, b_up)
        run, values = self.checked(a, b, tensors)
        out_offset, sizes, up = run.layout(a, b, out, self.out_view, b_up, self.programmatic)
        lead: list = []
        segments: list[list] = []
        flat = iter(values)
        for is_tensor, _, _ in self.plan:
            if is_tensor:
                next(flat)  # the address: read per call
                segments.append([next(flat), next(flat), next(flat)])
            else:
                (segments[-1] if segments else lead).append(next(flat))
        if len(self.table) >= self.LIMIT:
            self.table.clear()
        entry = (run.call, out_offset, sizes, up, tuple(lead), *map(tuple, segments))
        self.table[key] = entry
        return entry

    def launcher(self) -> Callable[..., None]:
        """The launch function, written out for this plan: no loop over operands and
        no test of what the plan fixes (``source``)."""
        scope = {"table": self.table, "miss": self.miss, "current_stream": torch.cuda.current_stream}
        exec(compile(self.source(), "<inductor_cutedsl launcher>", "exec"), scope)
        return scope["launch"]

    def source(self) -> str:
        """``launch``'s text: it reads the key, looks the entry up (``miss`` on the
        first call with a new key) and calls the kernel's fast caller with the
        addresses read now and the entry's values between them."""
        ops = [(op, view) for is_tensor, op, view in self.plan if is_tensor]
        names = [f"t{i}" for i in range(len(ops))]
        params = "".join(f"{t}, " for t in names)
        key = [f"{t}.{attr}" for t in ("a", "b") if t not in self.layouts for attr in ("shape", "stride()")]
        key += ["out.stride()", "a.get_device()"]
        if self.dual:  # a missing up weight is refused at the miss (``layout``)
            key.append("b_up is None" if "b_up" in self.layouts else "None if b_up is None else b_up.stride()")
        lines = []
        for t, (op, view) in zip(names, ops):
            offset = 0 if view is None else view[1] * _ITEMSIZE[op.dtype]
            lines.append(f"    p{t} = {t}.data_ptr()" + (f" + {offset}" if offset else ""))
            if view is None:  # read as Inductor's view: its sizes and strides shape the entry
                key += [f"{t}.shape", f"{t}.stride()"]
            if op.pairs or op.staged:  # its alignment picks the kernel
                key.append(f"p{t} % {ALIGNMENT}")
        values = ["a.data_ptr()", "b.data_ptr()", "out.data_ptr()" + (" + e[1]" if self.out_view else ""), "*e[2]"]
        if self.dual:
            values += ["b_up.data_ptr()", "*e[3]"]
        if self.plan and not self.plan[0][0]:  # scalars before the first tensor operand
            values.append("*e[4]")
        for i, t in enumerate(names):
            values += [f"p{t}", f"*e[{5 + i}]"]
        return "\n".join(
            [
                f"def launch(a, b, out, {params}*ignored, stream, b_up=None):",
                *lines,
                f"    key = ({', '.join(key)})",
                "    e = table.get(key)",
                "    if e is None:",
                f"        e = miss(key, a, b, out, ({params}), b_up)",
                "    if stream is None:",
                "        stream = current_stream(a.device).cuda_stream",
                f"    e[0]({', '.join(values)}, stream)",
                "",
            ]
        )


def unpaired(spec: KernelSpec) -> KernelSpec:
    """``spec`` reading every operand one element per global load: what runs when a
    tensor does not meet a ``pairs`` or ``staged`` declaration made from Inductor's
    layouts (a misaligned graph input, another size of a dynamic graph)."""
    epi = spec.epilogue
    ops = tuple(dataclasses.replace(op, pairs=False, staged=False) for op in epi.operands)
    return dataclasses.replace(spec, epilogue=Epilogue(epi.name, epi.source, ops))
