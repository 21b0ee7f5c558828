"""Low-overhead calls into an exported CuTe DSL host function.

The DSL's generic ``__call__`` re-marshals every argument through its adapter
registry, which costs a launch more host time than a small GEMM's kernel takes. Our
entry takes only pointers and scalars, so after one generic call we keep our own
argument buffer (one 8-byte slot per parameter, filled by a single
``struct.pack_into``) and packed argument array, and call the C entry directly. The
first call checks, byte by byte, that our slots hold exactly what the DSL marshalled;
if anything differs (a DSL change), every call stays on the generic path.
"""

from __future__ import annotations

import ctypes
import logging
import struct
import threading
from collections.abc import Sequence
from typing import Any

log = logging.getLogger("inductor_cutedsl.launch")

# Slot kinds, in the order of the entry's parameters.
PTR, I32, I64, F32 = "ptr", "i32", "i64", "f32"
# Each kind's bytes in its 8-byte slot (little-endian, as the host ABI reads them).
FORMATS = {PTR: "Q", I32: "i4x", I64: "q", F32: "f4x"}
SLOT = 8


def slot_arguments(count: int, extra: int) -> tuple[ctypes.Array, ctypes.Array]:
    """(a buffer of ``count`` 8-byte slots, a packed argument array pointing at each slot
    in order, with ``extra`` entries after them for the caller to fill): what an exported
    entry is called with, whichever path calls it."""
    buffer = ctypes.create_string_buffer(SLOT * count)
    packed = (ctypes.c_void_p * (count + extra))()
    base = ctypes.addressof(buffer)
    for i in range(count):
        packed[i] = base + SLOT * i
    return buffer, packed


class FastCaller:
    """Call ``fn`` (a loaded JitCompiledFunction) with plain ints/floats."""

    def __init__(self, fn: Any, kinds: Sequence[str], to_dsl_args) -> None:
        self._fn = fn
        self._kinds = list(kinds)
        self._layout = struct.Struct("<" + "".join(FORMATS[k] for k in self._kinds))
        self._to_dsl_args = to_dsl_args  # plain values -> DSL objects, for the generic path
        self._tls = threading.local()
        self._generic_only = False

    def __call__(self, *values) -> None:
        try:
            pack, buffer, packed, capi, result = self._tls.state  # this thread's, after its first call
        except AttributeError:
            self._generic_call(values)
            return
        pack(buffer, 0, *values)
        capi(packed)
        if result is not None and result.value != 0:
            raise RuntimeError(f"CuTe DSL kernel launch failed with CUDA error {result.value}")

    def repeat_last(self) -> Any:
        """The C call alone, on this thread's last arguments (a launch benchmark's floor)."""
        _, _, packed, capi, _ = self._tls.state
        return lambda: capi(packed)

    def _generic_call(self, values) -> None:
        # exe_args holds raw addresses into these objects: keep them alive until the call returns.
        dsl_args = self._to_dsl_args(values)
        exe_args, _adapted = self._fn.generate_execution_args(*dsl_args)
        self._fn.run_compiled_program(exe_args)
        if not self._generic_only:
            state = self._build_fast_state(exe_args, values)
            if state is None:
                self._generic_only = True
            else:
                self._tls.state = (self._layout.pack_into, *state)

    def _build_fast_state(self, exe_args, values):
        executor = getattr(self._fn, "_default_executor", None)
        if executor is None or len(exe_args) != len(self._kinds):
            log.warning("fast launch path unavailable (DSL argument layout changed)")
            return None
        n = len(self._kinds) + executor._num_extra_args
        buffer, packed = slot_arguments(len(self._kinds), executor._num_extra_args)
        self._layout.pack_into(buffer, 0, *values)
        for i, arg in enumerate(exe_args):
            addr = (arg.value or 0) if isinstance(arg, ctypes.c_void_p) else int(arg)
            size = 4 if self._kinds[i] in (I32, F32) else 8
            theirs = ctypes.string_at(addr, size)
            if theirs != ctypes.string_at(packed[i], size):
                log.warning(
                    "fast launch path unavailable: argument %d (%s) marshals as %s, not %r",
                    i,
                    self._kinds[i],
                    theirs.hex(),
                    values[i],
                )
                return None
        dsl_packed = executor._get_invoke_packed_args(exe_args)
        for i in range(len(self._kinds), n):
            packed[i] = dsl_packed[i]
        return buffer, packed, executor.capi_func, executor.cuda_result
