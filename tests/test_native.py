"""Kernels loaded through the DSL's C runtime (``runtime.native``), checked without a GPU.

What a CPU shows: the runtime library found without importing the DSL is the one the DSL
itself picks; it links our exported objects (and refuses altered ones); the caller hands
the entry exactly the packed arguments the C runtime reads (a pointer per parameter
slot, then the CUDA result). Launching needs the GPU (``test_native_gpu.py``).
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from pathlib import Path

import pytest
import torch
from helpers import fresh_json

from inductor_cutedsl.kernels import GemmConfig
from inductor_cutedsl.kernels import epilogue as E
from inductor_cutedsl.runtime import KernelCache, KernelSpec, native
from inductor_cutedsl.runtime.compiler import build
from inductor_cutedsl.runtime.fast_call import F32, I32, I64, PTR
from inductor_cutedsl.runtime.launch import entry_kinds, entry_signature

no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="shows the runtime's answer without a device")


def test_the_runtime_library_is_the_dsls_own_choice_found_without_importing_it():
    """Found in a fresh interpreter without the DSL, then again once the DSL is imported
    (its own ``find_runtime_libraries``): the same file, and the first search imported
    nothing of the DSL."""
    out = fresh_json(
        """
        import json, sys
        from inductor_cutedsl.runtime import native
        ours = str(native.find_runtime_library().resolve())
        imported = sorted(m for m in sys.modules if m == "cutlass" or m.startswith("cutlass."))
        from pathlib import Path
        from cutlass.runtime import find_runtime_libraries
        theirs = [str(Path(p).resolve()) for p in find_runtime_libraries(enable_tvm_ffi=False)]
        print(json.dumps({"ours": ours, "theirs": theirs, "imported": imported}))
        """
    )
    assert out["imported"] == []
    assert out["theirs"] == [out["ours"]]
    assert out["ours"].endswith(native.RUNTIME_LIB)


def test_cute_dsl_libs_names_the_runtime_library(tmp_path):
    fake = tmp_path / native.RUNTIME_LIB
    fake.write_bytes(b"")
    out = fresh_json(
        """
        import json
        from inductor_cutedsl.runtime import native
        print(json.dumps({"path": str(native.find_runtime_library())}))
        """,
        CUTE_DSL_LIBS=f"/nowhere/libother.so{os.pathsep}{fake}",
    )
    assert out["path"] == str(fake)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[KernelSpec, bytes]:
    spec = KernelSpec(GemmConfig(128, 64, 1, 1), "bfloat16", "bfloat16", "k", "k", E.bias_activation("relu", "row"))
    path, _ = build(spec, KernelCache(tmp_path_factory.mktemp("native")))
    return spec, Path(path).read_bytes()


def _create(data: bytes) -> int:
    lib = native.runtime()
    module = ctypes.c_void_p()
    return lib.CuteDSLRT_Module_Create_From_Bytes(ctypes.byref(module), data, len(data), None, 0)


def test_the_runtime_links_our_object_and_refuses_an_altered_one(built):
    """Linking needs no device. A truncated object is refused by the runtime, and
    ``NativeKernel`` raises for it. (The runtime is no integrity check: the cache's
    digest is, before any load.)"""
    spec, data = built
    assert _create(data) == 0
    truncated = data[: len(data) // 3]
    assert _create(truncated) != 0
    with pytest.raises(native.NativeLoadError, match="linking the object"):
        native.NativeKernel(truncated, spec.symbol())


@no_gpu
def test_without_a_device_the_entry_load_fails_as_a_native_load_error(built):
    spec, data = built
    with pytest.raises(native.NativeLoadError, match="loading the entry " + spec.symbol()):
        native.NativeKernel(data, spec.symbol())


@no_gpu
def test_loading_through_the_runtime_imports_nothing_of_the_dsl(built, tmp_path):
    """The whole native load, in a fresh interpreter: no ``cutlass`` module is imported
    (the link succeeds; on this machine the entry's load then reports the missing
    device, which is the runtime's answer, not the DSL's)."""
    spec, data = built
    obj = tmp_path / "k.o"
    obj.write_bytes(data)
    out = fresh_json(
        f"""
        import json, sys
        from inductor_cutedsl.runtime import native
        try:
            native.NativeKernel(open({str(obj)!r}, "rb").read(), {spec.symbol()!r})
            error = None
        except native.NativeLoadError as exc:
            error = str(exc)
        print(json.dumps({{"error": error, "dsl": [m for m in sys.modules if m.split(".")[0] == "cutlass"]}}))
        """
    )
    assert out["dsl"] == []
    assert out["error"] is not None and out["error"].startswith("loading the entry")


_KIND_CTYPES = {PTR: ctypes.c_uint64, I32: ctypes.c_int32, I64: ctypes.c_int64, F32: ctypes.c_float}


class _Recorder:
    """Stands in for ``CuteDSLRT_Function_Run``: reads each parameter through its pointer
    as the entry would, and writes ``code`` into the result slot (the last pointer)."""

    def __init__(self, kinds: list[str], code: int = 0) -> None:
        self.kinds, self.code, self.calls = kinds, code, []
        proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
        self.fn = proto(self._run)

    def _run(self, function, args, n) -> int:
        time.sleep(0)  # lets another launching thread run between this launch's packing and its read
        ptrs = ctypes.cast(args, ctypes.POINTER(ctypes.c_void_p))
        values = [_KIND_CTYPES[k].from_address(ptrs[i]).value for i, k in enumerate(self.kinds)]
        self.calls.append((function, n, values, threading.get_ident()))
        ctypes.c_int32.from_address(ptrs[n - 1]).value = self.code
        return 1 if self.code else 0


def _caller(kinds: list[str], code: int = 0) -> tuple[native.NativeCaller, _Recorder]:
    recorder = _Recorder(kinds, code)
    kernel = native.NativeKernel.__new__(native.NativeKernel)
    kernel.function = ctypes.c_void_p(0x1234)
    kernel.run = recorder.fn
    return native.NativeCaller(kernel, kinds), recorder


def _values(kinds: list[str], seed: int) -> list:
    out = []
    for i, kind in enumerate(kinds):
        if kind == PTR:
            out.append(0x7F00_0000_0000 + 256 * (i + seed))
        elif kind == I32:
            out.append(-(i + seed) if i % 2 else 2**31 - 1 - seed)
        elif kind == I64:
            out.append(2**40 + i * 3 + seed)
        else:
            out.append(0.5 + i + seed)
    return out


@pytest.mark.parametrize("dual,stream_k", [(False, False), (True, False), (False, True)])
def test_the_caller_hands_each_parameter_and_the_result_slot_by_pointer(dual, stream_k):
    """Every kind of parameter our entries take (pointers, int32 sizes, int64 strides,
    float scalars), read back through the packed pointers as the entry reads them;
    the count passed includes the result slot; a second call with other values is read
    anew (the slots are reused, not stale)."""
    epi = E.bias_activation("gelu_tanh", "row")
    spec = KernelSpec(GemmConfig(128, 128, 1, 1, stream_k=stream_k), "bfloat16", "bfloat16", "k", "k", epi, dual)
    kinds = entry_kinds(spec)
    caller, recorder = _caller(kinds)
    for seed in (1, 7):
        caller(*_values(kinds, seed))
    assert [(f, n) for f, n, _, _ in recorder.calls] == [(0x1234, len(kinds) + 1)] * 2
    assert [v for _, _, v, _ in recorder.calls] == [_values(kinds, 1), _values(kinds, 7)]


def test_a_failed_launch_raises_with_the_cuda_error():
    kinds = [PTR, I32, PTR]
    caller, _ = _caller(kinds, code=700)
    with pytest.raises(RuntimeError, match="CUDA error 700"):
        caller(*_values(kinds, 0))


def test_each_thread_launches_from_its_own_slots():
    """Two threads calling at once must not read each other's arguments."""
    kinds = [PTR, I64, I32, PTR]
    caller, recorder = _caller(kinds)
    barrier = threading.Barrier(2)

    def work(seed: int) -> None:
        barrier.wait()
        for _ in range(200):
            caller(*_values(kinds, seed))

    threads = [threading.Thread(target=work, args=(s,)) for s in (3, 11)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    by_thread: dict[int, set] = {}
    for _, _, values, tid in recorder.calls:
        by_thread.setdefault(tid, set()).add(tuple(values))
    own = {tuple(_values(kinds, 3)), tuple(_values(kinds, 11))}
    assert len(by_thread) == 2 and all(len(seen) == 1 for seen in by_thread.values())
    assert set().union(*by_thread.values()) == own


def test_the_entry_kinds_are_the_dsl_signatures():
    """``entry_kinds`` (no DSL) and ``entry_signature`` (the DSL's pointer types) agree,
    and every pointer has its type."""
    epi = E.bias_activation("gelu_tanh", "row")
    for dual, stream_k in [(False, False), (True, False), (False, True), (True, True)]:
        spec = KernelSpec(GemmConfig(128, 128, 1, 1, stream_k=stream_k), "bfloat16", "bfloat16", "k", "k", epi, dual)
        kinds, ptrs = entry_signature(spec)
        assert kinds == entry_kinds(spec)
        assert sorted(ptrs) == [i for i, k in enumerate(kinds[:-1]) if k == PTR]
