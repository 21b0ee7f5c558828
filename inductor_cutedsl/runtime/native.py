"""Exported kernels loaded and launched through the CuTe DSL's C runtime, without importing the DSL.

Importing the DSL (``cutlass``) costs a process 0.4-0.6 s of GIL-bound Python, and a
kernel load through it (``cute.runtime.load_module``) needs that import. A warm start,
whose kernels all come from the caches, would spend most of what it spends on us
there. The DSL's runtime library (``libcute_dsl_runtime.so``, the one its own loader
uses) has a C API for exactly this, documented in the DSL's ``CuteDSLRuntime.h``:

* ``CuteDSLRT_Module_Create_From_Bytes``: link an exported object file in memory;
* ``CuteDSLRT_Module_Get_Function``: the entry of a symbol prefix, its CUDA library
  loaded on every device;
* ``CuteDSLRT_Function_Run(func, args, n)``: call the entry with ``args``, the packed
  arguments as the exported C wrapper passes them (a pointer to each parameter's value,
  then a pointer to the int32 CUDA result that the call writes); it returns non-zero
  when that result is.

Loading a kernel then costs ~2 ms and no import. The argument slots are those of the
DSL path (``fast_call``), whose layout a CPU test checks byte for byte against the DSL's
own marshalling.

Which runtime library: the one the DSL would pick. Where the DSL is already imported,
its own answer; else ``CUTE_DSL_LIBS`` where set; else the newest toolkit flavour
installed (``nvidia_cutlass_dsl/cu{N}/lib``, with its ``_cutlass_ir.cu{N}`` module)
that the driver supports, as the DSL's import selects it.

Rules: anything that fails here raises ``NativeLoadError``; the caller then loads
through the DSL (``launch.CompiledGemm``), so the worst a broken runtime library costs
is the import this module saves.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import re
import struct
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .fast_call import FORMATS, slot_arguments

RUNTIME_LIB = "libcute_dsl_runtime.so"
_FLAVOUR = re.compile(r"^_cutlass_ir\.cu(\d+)\..*\.so$")


class NativeLoadError(RuntimeError):
    """The runtime library, or a kernel through it, could not be loaded."""


def _driver_major() -> int | None:
    """The CUDA major version the driver supports, or None without a driver."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int(0)
        if libcuda.cuDriverGetVersion(ctypes.byref(version)) == 0:
            return version.value // 1000
    except (OSError, AttributeError):
        pass
    return None


def find_runtime_library() -> Path:
    """The runtime library the DSL loads kernels with, found without importing it."""
    if "cutlass" in sys.modules:  # the DSL's own answer, as its loader uses it
        from cutlass.runtime import find_runtime_libraries

        for path in find_runtime_libraries(enable_tvm_ffi=False):
            if path.endswith(RUNTIME_LIB) and os.path.exists(path):
                return Path(path)
    for path in os.environ.get("CUTE_DSL_LIBS", "").split(os.pathsep):
        if path.endswith(RUNTIME_LIB) and os.path.exists(path):
            return Path(path)
    spec = importlib.util.find_spec("cutlass")
    if spec is None or not spec.submodule_search_locations:
        raise NativeLoadError("the CuTe DSL (package cutlass) is not installed")
    package = Path(next(iter(spec.submodule_search_locations)))
    root = next((p for p in package.parents if p.name == "nvidia_cutlass_dsl"), None)
    libs_dir = package / "_mlir" / "_mlir_libs"
    if root is None or not libs_dir.is_dir():
        raise NativeLoadError(f"no nvidia_cutlass_dsl install around {package}")
    flavours = {}
    for entry in libs_dir.iterdir():
        m = _FLAVOUR.match(entry.name)
        lib = root / f"cu{m.group(1)}" / "lib" / RUNTIME_LIB if m else None
        if lib is not None and lib.exists():
            flavours[int(m.group(1))] = lib  # type: ignore[union-attr]
    major = _driver_major()
    usable = sorted((v for v in flavours if major is None or v <= major), reverse=True)
    if not usable:
        found = sorted(flavours)
        raise NativeLoadError(f"no runtime library under {root} for a driver of CUDA {major} (found {found})")
    return flavours[usable[0]]


@functools.cache
def runtime() -> ctypes.CDLL:
    """The runtime library, opened once per process with its C API's types declared."""
    try:
        lib = ctypes.CDLL(str(find_runtime_library()))
        lib.CuteDSLRT_Module_Create_From_Bytes.argtypes = [
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.c_char_p,
            ctypes.c_size_t,
            ctypes.POINTER(ctypes.c_char_p),
            ctypes.c_size_t,
        ]
        lib.CuteDSLRT_Module_Get_Function.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_char_p]
        # Function_Run is called with ctypes objects only (``NativeCaller``): no argtypes,
        # so that ctypes converts nothing per launch.
        for fn in (
            lib.CuteDSLRT_Module_Create_From_Bytes,
            lib.CuteDSLRT_Module_Get_Function,
            lib.CuteDSLRT_Function_Run,
        ):
            fn.restype = ctypes.c_int
        lib.CuteDSLRT_GetErrorString.argtypes = [ctypes.c_int]
        lib.CuteDSLRT_GetErrorString.restype = ctypes.c_char_p
    except (OSError, AttributeError) as exc:
        raise NativeLoadError(f"cannot open the CuTe DSL runtime library: {exc}") from exc
    return lib


def _check(lib: ctypes.CDLL, err: int, what: str) -> None:
    if err != 0:
        raise NativeLoadError(f"{what}: {lib.CuteDSLRT_GetErrorString(err).decode(errors='replace')} ({err})")


# Loads are serialized: ctypes releases the GIL, and Inductor loads kernels from several
# threads at once, while the runtime's in-memory linker is not documented as reentrant
# (the DSL's own loader runs it under the GIL). A load takes ~2 ms.
_load_lock = threading.Lock()


class NativeKernel:
    """An exported object's entry of symbol prefix ``prefix``, loaded through the runtime
    library (module and function live as long as the process)."""

    def __init__(self, object_bytes: bytes, prefix: str) -> None:
        lib = runtime()
        self._module = ctypes.c_void_p()
        self.function = ctypes.c_void_p()
        with _load_lock:
            err = lib.CuteDSLRT_Module_Create_From_Bytes(
                ctypes.byref(self._module), object_bytes, len(object_bytes), None, 0
            )
            _check(lib, err, f"linking the object of {prefix}")
            err = lib.CuteDSLRT_Module_Get_Function(ctypes.byref(self.function), self._module, prefix.encode())
            _check(lib, err, f"loading the entry {prefix}")
        self.run = lib.CuteDSLRT_Function_Run


class NativeCaller:
    """Calls a ``NativeKernel`` with plain ints and floats, one per parameter, of the
    kinds ``kinds`` (``fast_call``'s), in a buffer of 8-byte slots packed by one
    ``struct.pack_into``. Per thread: the slots, the CUDA result, and the packed
    argument array pointing at them."""

    def __init__(self, kernel: NativeKernel, kinds: Sequence[str]) -> None:
        self.kernel = kernel
        self._n = len(kinds)
        self._layout = struct.Struct("<" + "".join(FORMATS[k] for k in kinds))
        self._tls = threading.local()

    def _state(self) -> tuple:
        buffer, packed = slot_arguments(self._n, 1)
        result = ctypes.c_int32(0)
        packed[self._n] = ctypes.addressof(result)
        # The whole C call bound once: a launch then converts no argument (0.3 us here,
        # against 0.56 us converting three per call).
        call = functools.partial(self.kernel.run, self.kernel.function, packed, ctypes.c_size_t(self._n + 1))
        state = (self._layout.pack_into, buffer, result, call)
        self._tls.state = state
        return state

    def __call__(self, *values) -> None:
        try:
            pack, buffer, result, call = self._tls.state
        except AttributeError:
            pack, buffer, result, call = self._state()
        pack(buffer, 0, *values)
        if call() != 0:
            raise RuntimeError(f"CuTe DSL kernel launch failed with CUDA error {result.value}")

    def repeat_last(self) -> Callable[[], Any]:
        """The C call alone, on this thread's last arguments (a launch benchmark's floor)."""
        return self._tls.state[3]


# An empty kernel, for the occupancy query below: the driver compiles it from PTX (ISA
# 7.8, the first with sm_90), so no DSL compile is needed to get a function handle.
_EMPTY_KERNEL = b"inductor_cutedsl_occupancy_probe"
_EMPTY_PTX = b".version 7.8\n.target sm_90\n.address_size 64\n.visible .entry %s()\n{\n\tret;\n}\n\0" % _EMPTY_KERNEL


def resident_clusters(cluster_size: int) -> int:
    """How many clusters of ``cluster_size`` CTAs the current device keeps resident at
    once when each CTA takes a whole SM (all of its shared memory): the persistent
    kernels' grid. The driver's cluster occupancy of an empty kernel given 128 threads
    and the most dynamic shared memory a block may take, the same question the DSL's
    ``HardwareInfo.get_max_active_clusters`` asks (a GPU test compares the two). Call
    with the device's context current (torch's, under ``torch.cuda.device``)."""
    from cuda.bindings import driver as cu

    def ok(result: tuple):
        if result[0] != cu.CUresult.CUDA_SUCCESS:
            raise NativeLoadError(f"occupancy query failed: {result[0]!r}")
        return result[1] if len(result) == 2 else None

    if not 1 <= cluster_size <= 32:
        raise ValueError(f"cluster size {cluster_size} is outside 1-32")
    device = ok(cu.cuCtxGetDevice())
    module = ok(cu.cuModuleLoadData(_EMPTY_PTX))
    try:
        kernel = ok(cu.cuModuleGetFunction(module, _EMPTY_KERNEL))
        smem_optin = ok(
            cu.cuDeviceGetAttribute(cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device)
        )
        attr = cu.CUfunction_attribute
        ok(cu.cuFuncSetAttribute(kernel, attr.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem_optin))
        ok(cu.cuFuncSetAttribute(kernel, attr.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1))
        smem = ok(cu.cuOccupancyAvailableDynamicSMemPerBlock(kernel, 1, 1))
        blocks_per_sm = ok(cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(kernel, 1, smem))
        cluster = cu.CUlaunchAttribute()
        cluster.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        cluster.value.clusterDim.x, cluster.value.clusterDim.y, cluster.value.clusterDim.z = cluster_size, 1, 1
        config = cu.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = cluster_size, blocks_per_sm, 1
        config.blockDimX, config.blockDimY, config.blockDimZ = 128, 1, 1
        config.sharedMemBytes = smem
        config.attrs = [cluster]
        config.numAttrs = 1
        return int(ok(cu.cuOccupancyMaxActiveClusters(kernel, config)))
    finally:
        cu.cuModuleUnload(module)
