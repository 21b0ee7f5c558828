"""Targeted mutation run: plant known bugs in the package, one at a time, and check that the
CPU tests meant to catch each one fail.

Each bug is a small textual patch of one file of the package, the benchmarks' harness or
the tools (``old`` -> ``new``, ``old`` found exactly once). It is applied to a temporary
copy of the repository (the checkout's tracked and unignored files, as they are now), the
bug's test files run there with ``-x -q`` and a timeout, and the file is restored before the
next bug: nothing is ever written to the checkout. A bug is *killed* when its tests fail (a
timeout counts, marked as such), and *survives* when they pass.

Before any bug, the tests of the selection run once on the unpatched copy: a kill only
means something if they pass there.

    python tools/mutation.py              # every CPU bug; exits 1 if one survives
    python tools/mutation.py --jobs 2     # two bugs at a time (one repository copy each)
    python tools/mutation.py --only sin-is-cos beta-zero-accepted
    python tools/mutation.py --list       # the bugs and their tests
    python tools/mutation.py --gpu        # on a machine with an sm_90 GPU: the gpu_only bugs too

Bugs marked ``gpu_only`` change what only a GPU shows (the kernel's own code, DSL types);
their tests are the GPU tests that catch them, and a CPU run lists them as not run. Bugs
with ``torch_before`` are ones only older torch releases can show (a newer one does the
same itself): under a newer torch they are listed as not run.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import os
import py_compile
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Kernels built by the runs, kept between runs: a patch of a kernel source changes the
#: keys of what it builds, so an unpatched kernel is built once for every run.
CACHE_DIR = Path(tempfile.gettempdir()) / f"inductor_cutedsl_mutation_cache_{os.getuid()}"


@dataclasses.dataclass(frozen=True)
class Bug:
    name: str
    path: str  # the patched file, from the repository root
    old: str
    new: str
    tests: tuple[str, ...]  # test files (or node ids) meant to catch it
    what: str = ""
    gpu_only: bool = False
    #: A bug in the cache itself may write entries that mislead later runs: it gets a
    #: kernel cache of its own.
    own_cache: bool = False
    #: (major, minor): a bug that only releases of torch before this one can show (a later
    #: one does the same thing itself); on those it is listed as not run.
    torch_before: tuple[int, int] | None = None


def torch_release() -> tuple[int, int]:
    """The (major, minor) release of the torch the tests run on (this interpreter's)."""
    from importlib.metadata import version

    major, minor = version("torch").split(".")[:2]
    return int(major), int(minor)


#: What a run without ``--gpu`` says of a gpu_only bug.
GPU_ONLY = "gpu only, not run"


def not_run_reason(bug: Bug, gpu: bool, release: tuple[int, int]) -> str | None:
    """Why ``bug`` is not run here (``gpu``: the gpu_only bugs are; ``release``: the torch
    the tests run on), or None where it is."""
    if bug.gpu_only and not gpu:
        return GPU_ONLY
    if bug.torch_before is not None and release >= bug.torch_before:
        return f"torch<{'.'.join(map(str, bug.torch_before))} only"
    return None


VALUES = "tests/test_epilogue_values.py"
REFUSALS = "tests/test_refusals.py"
CACHE_RACE = "tests/test_cache.py::test_eight_racing_processes_build_a_key_once"

BUGS = [
    # -- epilogue math (kernels/epilogue.py builders, kernels/epilogue_math.py helpers)
    Bug(
        "addmm-alpha-beta-swapped",
        "inductor_cutedsl/kernels/epilogue.py",
        "return ops[1] * acc + ops[2] * ops[0]",
        "return ops[2] * acc + ops[1] * ops[0]",
        (VALUES, REFUSALS),
        "alpha and beta swapped in the addmm epilogue",
    ),
    Bug(
        "gelu-tanh-constant",
        "inductor_cutedsl/kernels/epilogue_math.py",
        "Float32(0.044715)",
        "Float32(0.44715)",
        (VALUES,),
        "gelu_tanh's 0.044715 written as 0.44715",
    ),
    Bug(
        "gelu-erf-constant",
        "inductor_cutedsl/kernels/epilogue_math.py",
        "_INV_SQRT_2 = 1.0 / math.sqrt(2.0)",
        "_INV_SQRT_2 = 1.0 / math.sqrt(3.0)",
        (VALUES,),
    ),
    Bug(
        "sigmoid-sign",
        "inductor_cutedsl/kernels/epilogue_math.py",
        "cute.math.exp(-x, fastmath=True)",
        "cute.math.exp(x, fastmath=True)",
        (VALUES,),
    ),
    Bug(
        "silu-drops-x",
        "inductor_cutedsl/kernels/epilogue_math.py",
        "return x * sigmoid(x)",
        "return sigmoid(x)",
        (VALUES,),
    ),
    Bug(
        "fdiv-inverted",
        "inductor_cutedsl/kernels/epilogue_math.py",
        "return a * reciprocal(b)",
        "return b * reciprocal(a)",
        (VALUES,),
    ),
    Bug(
        "select-swapped",
        "inductor_cutedsl/kernels/epilogue_math.py",
        "cutlass.select_(cond, Float32(if_value), Float32(else_value))",
        "cutlass.select_(cond, Float32(else_value), Float32(if_value))",
        (VALUES,),
    ),
    Bug(
        "scale-result-multiplies",
        "inductor_cutedsl/kernels/epilogue.py",
        'result = f"fdiv({result}, ops[{len(ops)}])"',
        'result = f"({result}) * ops[{len(ops)}]"',
        (VALUES,),
    ),
    Bug(
        "gated-up-bias-on-gate",
        "inductor_cutedsl/kernels/epilogue.py",
        'for name, dtype in (("gate", bias_gate), ("up", bias_up)):',
        'for name, dtype in (("gate", bias_gate), ("gate", bias_up)):',
        (VALUES,),
    ),
    # -- translation (scheduler/epilogue_translation.py, scheduler/fusion.py)
    Bug(
        "sin-is-cos",
        "inductor_cutedsl/scheduler/epilogue_translation.py",
        '"sin": "cute.math.sin({})"',
        '"sin": "cute.math.cos({})"',
        (VALUES,),
        "sin translated as cos",
    ),
    Bug(
        "relu-is-identity",
        "inductor_cutedsl/scheduler/epilogue_translation.py",
        '"relu": "relu({})"',
        '"relu": "({})"',
        (VALUES,),
        "relu translated as identity",
    ),
    Bug(
        "lt-is-le",
        "inductor_cutedsl/scheduler/epilogue_translation.py",
        '_COMPARE = {"lt": "<",',
        '_COMPARE = {"lt": "<=",',
        (VALUES,),
    ),
    Bug(
        "truediv-swapped",
        "inductor_cutedsl/scheduler/epilogue_translation.py",
        '"truediv": "fdiv({}, {})"',
        '"truediv": "fdiv({1}, {0})"',
        (VALUES,),
    ),
    Bug(
        "sub-swapped",
        "inductor_cutedsl/scheduler/epilogue_translation.py",
        '"sub": "({} - {})"',
        '"sub": "({1} - {0})"',
        (VALUES,),
    ),
    Bug(
        "cast-does-not-round",
        "inductor_cutedsl/scheduler/epilogue_translation.py",
        'return self._emit(f"round_to({x.name}, {STORE_DTYPES[dtype]!r})", dtype)',
        "return Value(x.name, dtype)",
        (VALUES,),
    ),
    Bug(
        "constant-truncated",
        "inductor_cutedsl/scheduler/epilogue_translation.py",
        "literal = repr(value) if math.isfinite(value) else",
        "literal = repr(float(int(value))) if math.isfinite(value) else",
        (VALUES,),
    ),
    Bug(
        "pow-one-factor-short",
        "inductor_cutedsl/scheduler/epilogue_translation.py",
        '" * ".join([x.name] * int(exponent))',
        '" * ".join([x.name] * (int(exponent) - 1))',
        (VALUES,),
    ),
    Bug(
        "compose-skips-gemm-rounding",
        "inductor_cutedsl/scheduler/fusion.py",
        'if gemm_out_dtype != "float32":',
        "if False:",
        (VALUES, "tests/test_fusion_compose.py"),
    ),
    Bug(
        "compose-passes-gemm-operands-to-chain",
        "inductor_cutedsl/scheduler/fusion.py",
        "_fused_epilogue(acc, m, n, l, ops[{k}:])",
        "_fused_epilogue(acc, m, n, l, ops)",
        (VALUES,),
    ),
    # -- refusals (lowering, scheduler, runtime.support)
    Bug(
        "beta-zero-accepted",
        "inductor_cutedsl/lowering/gemm_choices.py",
        "if beta == 0.0:",
        "if False:",
        (REFUSALS,),
        "the beta == 0 refusal removed",
    ),
    Bug(
        "bias-dtype-unchecked",
        "inductor_cutedsl/lowering/gemm_choices.py",
        "if c.get_dtype() not in OUT_DTYPES:",
        "if False:",
        (REFUSALS,),
    ),
    Bug(
        "column-major-output-accepted",
        "inductor_cutedsl/lowering/gemm_choices.py",
        "if not ir_access.is_one(out_stride[-1]) or not",
        "if not",
        (REFUSALS,),
    ),
    Bug(
        "gated-weights-layout-unchecked",
        "inductor_cutedsl/lowering/gated.py",
        "if list(w_gate.get_stride()) != list(w_up.get_stride()):",
        "if False:",
        (REFUSALS,),
    ),
    Bug(
        "three-kept-outputs-fused",
        "inductor_cutedsl/scheduler/decisions.py",
        "if len(tr.kept) > MAX_KEPT_OUTPUTS:",
        "if len(tr.kept) > MAX_KEPT_OUTPUTS + 1:",
        (REFUSALS,),
    ),
    Bug(
        "fp8-output-fused-when-off",
        "inductor_cutedsl/scheduler/decisions.py",
        "if out.get_dtype() not in OUT_DTYPES and not config.fp8:",
        "if out.get_dtype() not in OUT_DTYPES and config.fp8:",
        (REFUSALS,),
    ),
    Bug(
        "negative-stride-read",
        "inductor_cutedsl/scheduler/epilogue_translation.py",
        "if min(strides) < 0 or offset < 0:",
        "if offset < 0:",
        (REFUSALS,),
    ),
    Bug(
        "reduction-translated",
        "inductor_cutedsl/scheduler/node_translation.py",
        "if reduce_sizes:",
        "if False:",
        (REFUSALS,),
    ),
    Bug(
        "broadcast-batch-accepted",
        "inductor_cutedsl/runtime/support.py",
        "if t.stride(0) == 0:",
        "if t.stride(0) < 0:",
        (REFUSALS,),
    ),
    Bug(
        "misaligned-pairs-accepted",
        "inductor_cutedsl/runtime/support.py",
        "if address % 4:",
        "if address % 2:",
        ("tests/test_support.py",),
    ),
    # -- cache integrity (runtime/cache.py)
    Bug(
        "sha256-unchecked",
        "inductor_cutedsl/runtime/cache.py",
        'if len(data) != info["size"] or hashlib.sha256(data).hexdigest() != info["sha256"]:',
        'if len(data) != info["size"]:',
        ("tests/test_cache.py::test_corrupt_entry_is_detected_and_rebuilt",),
        "the sha256 check dropped",
        own_cache=True,
    ),
    Bug(
        "key-lock-dropped",
        "inductor_cutedsl/runtime/cache.py",
        "with _key_lock(lock, what), _in_progress(lock):",
        "with contextlib.nullcontext(), _in_progress(lock):",
        (f"{CACHE_RACE}[fake-build]",),
        own_cache=True,
    ),
    Bug(
        "no-recheck-under-lock",
        "inductor_cutedsl/runtime/cache.py",
        "    hit = self.lookup(key)\n                if hit is not None:\n                    return hit, False\n"
        "                why",
        "    why",
        (f"{CACHE_RACE}[fake-build]",),
        own_cache=True,
    ),
    Bug(
        "lock-file-left",
        "inductor_cutedsl/runtime/cache.py",
        "os.unlink(path)  # while still held",
        "pass  # while still held",
        ("tests/test_cache.py::test_no_lock_file_outlives_its_build",),
        own_cache=True,
    ),
    # -- portable cache artifacts (runtime/artifacts.py)
    Bug(
        "artifact-digest-unchecked",
        "inductor_cutedsl/runtime/artifacts.py",
        "if hashlib.sha256(data).hexdigest() != digest:",
        "if False:",
        ("tests/test_cache_artifacts.py",),
        "a loaded kernel artifact kept without its SHA-256 check",
        own_cache=True,
    ),
    Bug(
        "artifact-key-as-path",
        "inductor_cutedsl/runtime/artifacts.py",
        "if not _KEY.fullmatch(key):",
        "if not key:",
        ("tests/test_cache_artifacts.py",),
        "a loaded artifact's key used as a file name unchecked",
        own_cache=True,
    ),
    Bug(
        "remote-blob-unchecked",
        "inductor_cutedsl/runtime/remote.py",
        "            data = unpack(key, blob)\n",
        "            data = blob[blob.index(b'\\n', 27) + 1 :]\n",
        ("tests/test_remote_cache.py",),
        "a remote kernel kept without the artifact checks",
        own_cache=True,
    ),
    Bug(
        "built-kernel-not-published",
        "inductor_cutedsl/runtime/compiler.py",
        "    if built:\n        _publish(spec.key(), cache)\n    return path, built\n",
        "    return path, built\n",
        ("tests/test_remote_cache.py",),
        "a kernel built here never reaches the remote tier",
        own_cache=True,
    ),
    # -- launch arguments (runtime/launch.py, runtime/generated.py, runtime/support.py)
    Bug(
        "lda-of-the-other-major",
        "inductor_cutedsl/runtime/launch.py",
        'lda = leading_stride(a, spec.a_major == "k")',
        'lda = leading_stride(a, spec.a_major != "k")',
        ("tests/test_generated.py",),
    ),
    Bug(
        "out-view-offset-in-elements",
        "inductor_cutedsl/runtime/launch.py",
        "out_offset = offset * out.element_size()",
        "out_offset = offset",
        ("tests/test_generated.py",),
    ),
    Bug(
        "operand-view-offset-in-elements",
        "inductor_cutedsl/runtime/support.py",
        "return t.data_ptr() + offset * t.element_size(), s_m, s_n, s_l",
        "return t.data_ptr() + offset, s_m, s_n, s_l",
        ("tests/test_lowering.py::test_operand_args_read_translated_strides", VALUES),
    ),
    Bug(
        "staged-single-batch-l-stride-zero",
        "inductor_cutedsl/runtime/support.py",
        "if decl.staged and batch == 1 and args[3] == 0:",
        "if decl.staged and batch == 1 and args[3] < 0:",
        ("tests/test_generated.py",),
    ),
    Bug(
        "alignment-not-in-launch-key",
        "inductor_cutedsl/runtime/generated.py",
        'key.append(f"p{t} % {ALIGNMENT}")',
        "pass",
        ("tests/test_generated.py",),
    ),
    Bug(
        "operand-strides-shifted",
        "inductor_cutedsl/runtime/generated.py",
        'values += [f"p{t}", f"*e[{5 + i}]"]',
        'values += [f"p{t}", f"*e[{4 + i}]"]',
        ("tests/test_generated.py",),
    ),
    Bug(
        "benchmark-modules-tune-coordinates",
        "inductor_cutedsl/compat/codegen.py",
        "inductor_config.patch(coordinate_descent_tuning=False),",
        "contextlib.nullcontext(),",
        ("tests/test_fusion_codegen.py",),
        "the selection's benchmark modules tune themselves at their first run (compile time)",
    ),
    Bug(
        "clear-call-ignores-m-by-n-inputs",
        "inductor_cutedsl/scheduler/selection.py",
        "return s_m != 0 and s_n != 0",
        "return False",
        ("tests/test_fusion_codegen.py",),
        "an epilogue reading an M x N input decided fused without measuring",
    ),
    Bug(
        "fp8-output-is-a-clear-call",
        "inductor_cutedsl/scheduler/selection.py",
        "get_dtype() in FP8_DTYPES for name in tr.outputs",
        "get_dtype() in () for name in tr.outputs",
        ("tests/test_fusion_codegen.py",),
        "a quantizing epilogue is fused into our kernel unmeasured, where cuBLAS and a separate kernel ran faster",
    ),
    Bug(
        "clear-call-without-margin",
        "inductor_cutedsl/scheduler/selection.py",
        "timings[caller] <= CLEAR_MARGIN * min(least)",
        "timings[caller] <= 1.05 * min(least)",
        ("tests/test_fusion_codegen.py",),
    ),
    Bug(
        "host-pacing-takes-the-larger",
        "inductor_cutedsl/lowering/fair_timing.py",
        "paced = {i: side[i] + host.get(i, 0.0) for i in side}",
        "paced = {i: max(side[i], host.get(i, 0.0)) for i in side}",
        ("tests/test_fair_timing.py",),
        "a choice with a short launch path but slower kernel loses to cuBLASLt's longer launch",
    ),
    Bug(
        "fair-timing-anchored-at-the-fastest",
        "inductor_cutedsl/lowering/fair_timing.py",
        "    if templates:\n",
        "    if templates and False:\n",
        ("tests/test_fair_timing.py",),
        "cuBLAS takes the fastest template's figure: Inductor's epilogue benchmark then fuses into a slower template",
    ),
    Bug(
        "fair-timing-template-reads-above-the-fastest",
        "inductor_cutedsl/lowering/fair_timing.py",
        "factor = min(factor, others[close[i]] / paced[i])",
        "factor = others[close[i]] / paced[i]",
        ("tests/test_fair_timing.py",),
        "the re-timed winner reads above choices never re-timed, which can then win unmeasured",
    ),
    Bug(
        "impure-launch-timing-kept",
        "inductor_cutedsl/timing.py",
        "        pure = not slept.query()\n",
        "        pure = True\n",
        ("tests/test_timing.py",),
        "launch paths timed while the GPU had caught up (waiting counted as host time) are kept",
    ),
    Bug(
        "host-pacing-keeps-impure-rounds",
        "inductor_cutedsl/lowering/fair_timing.py",
        "            for key, ms in (got or {}).items():",
        "            for key, ms in (got or {k: 0.0 for k in runs}).items():",
        ("tests/test_fair_timing.py",),
    ),
    Bug(
        "autotune-key-without-regime",
        "inductor_cutedsl/lowering/template.py",
        'return f"{self.candidate.key()}@{regime()}"',
        "return self.candidate.key()",
        ("tests/test_lowering.py",),
        "a compile without CUDA graphs reuses a ranking timed as replays",
    ),
    Bug(
        "gated-decision-ignores-launches",
        "inductor_cutedsl/lowering/gated.py",
        "paced = {name: t + host.get(name, 0.0) for name, t in times.items()}",
        "paced = dict(times)",
        ("tests/test_gated.py",),
    ),
    Bug(
        "gated-record-without-regime",
        "inductor_cutedsl/lowering/gated.py",
        "key = (*key, tuple(c.spec.key() for c in cands), fair_timing.regime())",
        "key = (*key, tuple(c.spec.key() for c in cands))",
        ("tests/test_gated.py",),
    ),
    Bug(
        "host-pacing-for-long-gemms",
        "inductor_cutedsl/lowering/fair_timing.py",
        "return host_paced() and fastest_gpu_ms < HOST_BOUND_MS",
        "return host_paced()",
        ("tests/test_fair_timing.py",),
        "a GEMM the GPU paces is charged its launches, and its compile times them",
    ),
    Bug(
        "selection-ignores-launches",
        "inductor_cutedsl/scheduler/selection.py",
        "way = fastest_way({name: t + host.get(name, 0.0) for name, t in times.items()})",
        "way = fastest_way(times)",
        ("tests/test_fusion_codegen.py",),
        "without CUDA graphs, a separate way's second launch costs a host-bound step nothing",
    ),
    Bug(
        "selection-record-without-regime",
        "inductor_cutedsl/scheduler/selection.py",
        "record = repr((key, fair_timing.regime()))",
        "record = repr(key)",
        ("tests/test_fusion_codegen.py",),
    ),
    # GEMM operands passed as their buffers: the launcher must read each through its layout,
    # only views from the buffer's start may be passed so, and only the operands the render
    # gave layouts.
    Bug(
        "bound-operand-read-as-passed",
        "inductor_cutedsl/runtime/generated.py",
        "            found[name] = t.as_strided(sizes, strides, t.storage_offset())",
        "            found[name] = t",
        ("tests/test_bound_operands.py",),
    ),
    Bug(
        "offset-view-passed-as-its-buffer",
        "inductor_cutedsl/compat/ir_access.py",
        "if not all(isinstance(v, (int, sympy.Integer)) for v in values) or int(layout.offset) != 0:",
        "if not all(isinstance(v, (int, sympy.Integer)) for v in values):",
        ("tests/test_bound_operands.py",),
    ),
    Bug(
        "every-view-passed-as-its-buffer",
        "inductor_cutedsl/lowering/template.py",
        "            if any(names.get(name) is node for name in bound):",
        "            if True:",
        ("tests/test_bound_operands.py",),
    ),
    # The generated wrapper's wiring, which only a whole wrapper run shows on CPU.
    Bug(
        "template-calls-b-as-a",
        "inductor_cutedsl/lowering/template.py",
        "    _launch(a, b, {{get_output()}}",
        "    _launch(b, a, {{get_output()}}",
        ("tests/test_generated_wrappers.py",),
    ),
    Bug(
        "addmm-scalars-swapped-at-lowering",
        "inductor_cutedsl/lowering/gemm_choices.py",
        "epilogue, scalars = E.addmm(True, kind, bias_dtype), (alpha, beta)",
        "epilogue, scalars = E.addmm(True, kind, bias_dtype), (beta, alpha)",
        ("tests/test_generated_wrappers.py",),
    ),
    Bug(
        "cos-is-sin",
        "inductor_cutedsl/scheduler/epilogue_translation.py",
        '"cos": "cute.math.cos({})"',
        '"cos": "cute.math.sin({})"',
        ("tests/test_fuzz_wrappers_cpu.py",),
        "cos translated as sin: the fuzzer's programs through their wrappers on CPU",
    ),
    Bug(
        "template-tuner-left-wrapped",
        "inductor_cutedsl/compat/coordesc_prefetch.py",
        "            self.coordinate_descent_tuning = types.MethodType(tuning, self)\n",
        "",
        ("tests/test_coordesc_prefetch.py", "tests/test_tuned_binaries.py"),
    ),
    # The dtype table a kernel's operands, its epilogue's roundings and the loaded entry's
    # pointers read: on a GPU a wrong entry shows as wrong results; on CPU the table's tests.
    Bug(
        "fp16-is-bf16-in-the-dsl-table",
        "inductor_cutedsl/kernels/dtypes.py",
        '"float16": cutlass.Float16,',
        '"float16": cutlass.BFloat16,',
        ("tests/test_support.py",),
        "fp16 operands, roundings and pointers typed as bf16",
    ),
    Bug(
        "fp8-is-e5m2-in-the-dsl-table",
        "inductor_cutedsl/kernels/dtypes.py",
        '"float8_e4m3fn": cutlass.Float8E4M3FN,',
        '"float8_e4m3fn": cutlass.Float8E5M2,',
        ("tests/test_support.py",),
    ),
    Bug(
        "launch-reads-its-own-dtype-table",
        "inductor_cutedsl/runtime/launch.py",
        "from ..kernels.dtypes import DSL_TYPES as dt",
        'dt = {"bfloat16": cutlass.BFloat16, "float16": cutlass.BFloat16, "float32": cutlass.Float32}',
        ("tests/test_support.py",),
        "the loaded entry's pointer types apart from the kernel's",
    ),
    Bug(
        "gated-pass-drops-unread-writes",
        "inductor_cutedsl/lowering/gated_rewrite.py",
        "    _erase_unread(graph, replaced)",
        "    graph.eliminate_dead_code()",
        ("tests/test_gated.py",),
        "the gated-MLP pass cleans up with FX's dead-code elimination (in-place writes dropped)",
    ),
    Bug(
        "warm-start-path-not-rehomed",
        "inductor_cutedsl/compat/autotune.py",
        "        autotuner.filename = local",
        "        pass",
        ("tests/test_coordesc_carry.py",),
        "a static autotuner looks for its carried tuning under the compiling machine's cache directory",
    ),
    Bug(
        "native-run-without-result-slot",
        "inductor_cutedsl/runtime/native.py",
        "packed, ctypes.c_size_t(self._n + 1))",
        "packed, ctypes.c_size_t(self._n))",
        ("tests/test_native.py",),
        "the runtime is told one argument fewer than the entry's parameters and result slot",
    ),
    Bug(
        "native-slots-shared-by-threads",
        "inductor_cutedsl/runtime/native.py",
        "        self._tls = threading.local()",
        '        self._tls = type("Shared", (), {})()',
        ("tests/test_native.py",),
        "threads launching one kernel pack their arguments into the same slots",
    ),
    Bug(
        "compiling-process-imports-the-dsl",
        "inductor_cutedsl/runtime/launch.py",
        "from . import native\n",
        "from . import native\nimport cutlass.cute  # noqa: F401\n",
        ("tests/test_import_time.py",),
        "the compiling process imports the DSL with our launch module",
        # From 2.14 on, Inductor's own CUDA scheduling imports the DSL in that process.
        torch_before=(2, 14),
    ),
    Bug(
        "triton-pruned-without-our-candidates",
        "inductor_cutedsl/lowering/choices.py",
        "_asking.prune = bool(offered) and config.prune_triton",
        "_asking.prune = config.prune_triton",
        ("tests/test_lowering_codegen.py",),
        "Triton's configs are pruned for a GEMM we offer nothing for",
    ),
    Bug(
        "build-callback-under-the-inflight-lock",
        "inductor_cutedsl/runtime/compiler.py",
        """        _inflight[slot] = fut
    # Outside the lock: a build that is already done runs the callback here, at once.
    fut.add_done_callback(lambda done: _forget(slot, done))""",
        """        _inflight[slot] = fut
        fut.add_done_callback(lambda done: _forget(slot, done))""",
        ("tests/test_workers.py",),
        "a build that is done before its bookkeeping deadlocks on the in-flight lock",
    ),
    Bug(
        "triton-binary-digest-unchecked",
        "inductor_cutedsl/compat/tuned_binaries.py",
        "        if hashlib.sha256(data).hexdigest() != digest:",
        "        if False:",
        ("tests/test_tuned_binaries.py",),
        "a carried Triton binary is kept without matching its recorded digest",
    ),
    Bug(
        "triton-binary-dir-not-relocated",
        "inductor_cutedsl/compat/tuned_binaries.py",
        "                data = data.replace(_PLACEHOLDER, directory.encode())",
        "                pass",
        ("tests/test_tuned_binaries.py",),
        "a carried Triton binary's metadata keeps the placeholder for its directory",
    ),
    Bug(
        "triton-binary-recorded-untuned",
        "inductor_cutedsl/compat/tuned_binaries.py",
        'if not getattr(config, "found_by_coordesc", False) or not cache_hash',
        "if not cache_hash",
        ("tests/test_tuned_binaries.py",),
        "a binary coordinate descent did not pick is carried",
    ),
    Bug(
        "template-launch-records",
        "inductor_cutedsl/compat/tuned_binaries.py",
        "        if self.heuristic_type in untuned:  # asked at each launch",
        "        if False:  # asked at each launch",
        ("tests/test_tuned_binaries.py",),
        "every launch of a Triton GEMM goes through the binary recorder",
    ),
    Bug(
        "template-launch-prefetches",
        "inductor_cutedsl/compat/coordesc_prefetch.py",
        "        if self.heuristic_type in untuned:\n",
        "        if False:\n",
        ("tests/test_coordesc_prefetch.py",),
        "every launch of a Triton GEMM runs the prefetch's checks",
    ),
    Bug(
        "clear-call-charges-a-fusing-triton-template-a-kernel",
        "inductor_cutedsl/scheduler/selection.py",
        "        t if triton and ir_access.is_triton_template_caller(c) else t + floor_ms\n",
        "        t + floor_ms\n",
        ("tests/test_fusion_codegen.py",),
        "a Triton template that could take the epilogue is counted as running it in a kernel of its own",
    ),
    Bug(
        "clear-call-ignores-the-separate-kernel",
        "inductor_cutedsl/scheduler/selection.py",
        "    return KERNEL_GAP_MS + nbytes / PEAK_BYTES_PER_MS\n",
        "    return 0.0\n",
        ("tests/test_fusion_codegen.py",),
        "a separate epilogue kernel is counted as free, so close calls are measured that need not be",
    ),
    Bug(
        "fusion-benchmark-kernels-prefetched",
        "inductor_cutedsl/compat/coordesc_prefetch.py",
        "    if fusion_benchmark_kernel(autotuner):\n        return\n",
        "",
        ("tests/test_coordesc_prefetch.py",),
        "a fusion benchmark's kernel has its compiles queued behind the benchmark's own",
    ),
    Bug(
        "mm-plus-mm-kept",
        "inductor_cutedsl/lowering/mm_plus_mm.py",
        "        if kept is not None:\n",
        "        if True:\n",
        ("tests/test_lowering_codegen.py",),
        "a sum of two matmuls stays with mm_plus_mm, beyond our candidates",
    ),
    Bug(
        "mm-plus-mm-split-unchecked",
        "inductor_cutedsl/lowering/mm_plus_mm.py",
        "        check_plain_gemm(mats[0], mats[1])\n        check_plain_gemm(mats[2], mats[3])\n",
        "        pass\n",
        ("tests/test_lowering_codegen.py",),
        "a sum of matmuls our kernel cannot take (or with our backend off) is split, losing Triton's template",
    ),
    Bug(
        "mm-plus-mm-second-pair-unchecked",
        "inductor_cutedsl/lowering/mm_plus_mm.py",
        "        check_plain_gemm(mats[2], mats[3])\n",
        "",
        ("tests/test_lowering_codegen.py",),
        "a sum is split though our kernel cannot take its second GEMM",
    ),
    Bug(
        "mm-plus-mm-split-unguarded",
        "inductor_cutedsl/lowering/mm_plus_mm.py",
        "            summed = _split(mat1, mat2, mat3, mat4)\n        except Exception as exc:",
        "            summed = _split(mat1, mat2, mat3, mat4)\n        except Unsupported as exc:",
        ("tests/test_lowering_codegen.py",),
        "a failure in the split's own lowering reaches the user's compile",
    ),
    Bug(
        "mm-plus-mm-split-adds-apart",
        "inductor_cutedsl/lowering/mm_plus_mm.py",
        "    return lowerings[aten.addmm](lowerings[aten.mm](mat1, mat2), mat3, mat4)\n",
        "    return lowerings[aten.add](lowerings[aten.mm](mat1, mat2), lowerings[aten.mm](mat3, mat4))\n",
        ("tests/test_lowering_codegen.py",),
        "where cuBLAS wins both GEMMs of a split sum, the add is a third kernel stock does not run",
    ),
    Bug(
        "fp8-dual-up-scaled-by-the-gate-scale",
        "inductor_cutedsl/kernels/epilogue.py",
        'lines += ["    gate = gate * ops[0] * ops[1]", "    up = up * ops[0] * ops[2]"]',
        'lines += ["    gate = gate * ops[0] * ops[1]", "    up = up * ops[0] * ops[1]"]',
        (VALUES,),
        "an fp8 dual kernel scales the up product by the gate weight's scale",
    ),
    Bug(
        "fp8-dual-inputs-alike-by-op-alone",
        "inductor_cutedsl/lowering/gated_rewrite.py",
        "    return type(p) is type(q) and p == q\n",
        "    return True\n",
        ("tests/test_gated_fp8.py",),
        "two _scaled_mm of differently quantized inputs become one dual kernel over the gate's input",
    ),
    Bug(
        "fp8-dual-inputs-alike-across-a-write",
        "inductor_cutedsl/lowering/gated_rewrite.py",
        '        if _written(min(_chain_start(gate["a"]), _chain_start(up["a"])), mul):\n',
        "        if False:\n",
        ("tests/test_gated_fp8.py",),
        "an input written in place between its two quantizations is read by both as the first",
    ),
    Bug(
        "gated-op-reads-inputs-written-after-the-linears",
        "inductor_cutedsl/lowering/gated_rewrite.py",
        "        if _written(min(gate_src, other), mul):\n",
        "        if False:\n",
        ("tests/test_gated.py",),
        "an input written in place after the gate Linear read it reaches the dual kernel's gate GEMM",
    ),
    Bug(
        "gated-graph-form-failure-crashes-the-compile",
        "inductor_cutedsl/lowering/gated.py",
        '    except Exception as exc:\n        fallback("lowering", f"{op} as the graph\'s ops", exc, log)\n',
        '    except KeyError as exc:\n        fallback("lowering", f"{op} as the graph\'s ops", exc, log)\n',
        ("tests/test_gated.py", "tests/test_gated_fp8.py"),
        "a failure of ours lowering a gated product's graph form crashes the compile instead of running the op",
    ),
    Bug(
        "unfused-consumers-report-crashes-the-compile",
        "inductor_cutedsl/scheduler/decisions.py",
        "    try:\n        found = consumers(template)\n    except Exception as exc:\n",
        "    try:\n        found = consumers(template)\n    except KeyError as exc:\n",
        ("tests/test_fallback.py",),
        "a failure listing the consumers left outside a GEMM's epilogue crashes the compile",
    ),
    Bug(
        "unknown-fallback-stage-crashes-the-compile",
        "inductor_cutedsl/errors.py",
        "    if config.strict:\n        if stage not in STAGES:\n",
        "    if stage not in STAGES:\n        raise ValueError(stage)\n    if config.strict:\n        if False:\n",
        ("tests/test_fallback.py",),
        "a fallback at a misnamed stage raises in a user's compile instead of falling back",
    ),
    Bug(
        "install-failure-crashes-the-compile",
        "inductor_cutedsl/install.py",
        "    except Exception as exc:\n        disable()\n",
        "    except KeyError as exc:\n        disable()\n",
        ("tests/test_fallback.py",),
        "a failure installing the backend at the first compile crashes it instead of leaving Inductor stock",
    ),
    Bug(
        "failed-install-keeps-the-gated-lowerings",
        "inductor_cutedsl/install.py",
        '        if saved.get("gated_lowerings"):\n',
        '        if "rest" in saved and saved.get("gated_lowerings"):\n',
        ("tests/test_fallback.py",),
        "an install that failed after registering the gated MLP's lowerings leaves them registered",
    ),
    Bug(
        "gated-rewrite-after-a-failed-install",
        "inductor_cutedsl/install.py",
        "    if not is_enabled():  # its install failed: the graph stays as written\n        return\n",
        "",
        ("tests/test_fallback.py",),
        "the gated MLP is rewritten into our op after the install that pass started failed",
    ),
    Bug(
        "settings-install-failure-fails-the-import",
        "inductor_cutedsl/install.py",
        "            handle = lazy.when_imported(module, functools.partial(_undoing_failure, step))\n",
        "            handle = lazy.when_imported(module, step)\n",
        ("tests/test_fallback.py",),
        "a failure installing our settings fails enable() or the import of Inductor's config",
    ),
    Bug(
        "fp8-dual-graph-form-reads-the-gated-op",
        "inductor_cutedsl/lowering/gated.py",
        "        with ir_access.lowering_op(aten._scaled_mm.default, scale_result=None, use_fast_accum=fast):\n",
        "        if True:\n",
        ("tests/test_gated_fp8.py",),
        "where two _scaled_mm measure faster, their choices read the gated op's arguments as theirs",
    ),
    Bug(
        "fp8-dual-weights-scales-either-mode",
        "inductor_cutedsl/runtime/support.py",
        "        if len({scale_mode(s.shape, s.dtype, 1, n) for s in scale_bs}) != 1:\n",
        "        if False:\n",
        ("tests/test_fp8_kernel.py",),
        "an fp8 dual kernel takes a tensor-wise and a row-wise weight scale and reads both as one mode",
    ),
    Bug(
        "tensor-wise-scale-strided-at-launch",
        "inductor_cutedsl/kernels/sm90_gemm.py",
        '                0 if op.kind in ("col", "one") else s_n,\n',
        '                0 if op.kind == "col" else s_n,\n',
        ("tests/test_fp8_kernel.py",),
        "a tensor-wise scale is loaded once per accumulator column instead of once per thread",
    ),
    Bug(
        "single-value-operand-unchecked",
        "inductor_cutedsl/runtime/support.py",
        '        if decl.kind == "one" and any(',
        "        if False and any(",
        ("tests/test_fuzz_cases.py",),
        "a tensor of many values passed as one value is read at its first element only",
    ),
    Bug(
        "stream-k-ranked-by-launch-host-time",
        "inductor_cutedsl/lowering/fair_timing.py",
        "    if not settings.compile_uses_cudagraphs():\n        return []\n    streamed",
        "    if True:\n        return []\n    streamed",
        ("tests/test_fair_timing.py",),
        "under CUDA graphs a stream-K candidate is ranked with its launch's host work read as kernel time",
    ),
    Bug(
        "stream-k-replay-timed-without-graphs",
        "inductor_cutedsl/lowering/fair_timing.py",
        "    if not settings.compile_uses_cudagraphs():\n        return []\n    streamed",
        "    if False:\n        return []\n    streamed",
        ("tests/test_fair_timing.py",),
        "without CUDA graphs a stream-K candidate is ranked by a replay that skips the host work each call pays",
    ),
    Bug(
        "stream-k-publishes-whole-tile",
        "inductor_cutedsl/kernels/sm90_gemm.py",
        "        for j in cutlass.range_constexpr(cute.size(acc) // 4):  # as in ``_add_peers``\n"
        "            if coords[4 * j][0] < size_m:\n",
        "        for j in cutlass.range_constexpr(cute.size(acc) // 4):  # as in ``_add_peers``\n"
        "            if True:\n",
        ("tests/test_epilogue_sass.py",),
        "a decode-sized stream-K GEMM moves its tiles' empty rows' partial sums through memory",
    ),
    Bug(
        "stream-k-reads-whole-tile",
        "inductor_cutedsl/kernels/sm90_gemm.py",
        "                    if peers[d] & (coords[4 * j][0] < size_m):\n",
        "                    if peers[d]:\n",
        ("tests/test_epilogue_sass.py",),
        "a decode-sized stream-K GEMM reads its peers' empty rows' partial sums",
    ),
    Bug(
        "stream-k-flag-left-set",
        "inductor_cutedsl/kernels/sm90_gemm.py",
        "                cute.arch.store(flag, Int64(0))\n",
        "",
        ("tests/test_gemm_gpu.py::test_stream_k_flags_holding_garbage_or_a_past_launch_are_not_taken_for_ready",),
        "a replayed graph's stream-K owner reads the partial sums before this replay wrote them",
        gpu_only=True,
    ),
    Bug(
        "stream-k-any-flag-is-ready",
        "inductor_cutedsl/kernels/sm90_gemm.py",
        "            while ready != token:\n",
        "            while ready == 0:\n",
        ("tests/test_gemm_gpu.py::test_stream_k_flags_holding_garbage_or_a_past_launch_are_not_taken_for_ready",),
        "a stream-K owner takes garbage in its peer's flag for the peer's partial sums",
        gpu_only=True,
    ),
    Bug(
        "stream-k-peers-read-in-turn",
        "inductor_cutedsl/kernels/sm90_gemm.py",
        "        if cutlass.const_expr(window * runs <= _STREAM_K_LOADS_IN_FLIGHT):\n",
        "        if cutlass.const_expr(False):\n",
        ("tests/test_epilogue_sass.py",),
        "a decode-sized stream-K owner pays an L2 round trip per peer for their partial sums",
    ),
    Bug(
        "stream-k-peer-window-short",
        "inductor_cutedsl/kernels/sm90_gemm.py",
        "        window = _STREAM_K_MAX_PARTS\n",
        "        window = _STREAM_K_MAX_PARTS - 1\n",
        ("tests/test_epilogue_sass.py",),
        "a stream-K owner whose tile meets five shares leaves its fourth peer's partial sums out",
    ),
    Bug(
        "programmatic-launch-never-waits",
        "inductor_cutedsl/kernels/sm90_gemm.py",
        "        cute.arch.griddepcontrol_wait()\n",
        "",
        ("tests/test_epilogue_sass.py",),
        "a GEMM launched as a programmatic dependent reads its input before the kernel writing it has finished",
    ),
    Bug(
        "programmatic-launch-consumers-wait",
        "inductor_cutedsl/kernels/sm90_gemm.py",
        "        cute.arch.griddepcontrol_wait()\n        cute.arch.griddepcontrol_launch_dependents()\n"
        "        pipeline_init_wait(cluster_shape_mn=self.cluster_shape_mn)\n\n"
        "        wg_idx = cute.arch.make_warp_uniform(tidx // _WG_THREADS)\n"
        "        if wg_idx == 0:\n",
        "        cute.arch.griddepcontrol_launch_dependents()\n"
        "        pipeline_init_wait(cluster_shape_mn=self.cluster_shape_mn)\n\n"
        "        wg_idx = cute.arch.make_warp_uniform(tidx // _WG_THREADS)\n"
        "        if wg_idx != 0:\n            cute.arch.griddepcontrol_wait()\n"
        "        if wg_idx == 0:\n",
        ("tests/test_epilogue_sass.py",),
        "a programmatic dependent's producer TMA-loads A before the previous kernel has finished writing it",
    ),
    Bug(
        "programmatic-setting-ignored",
        "inductor_cutedsl/lowering/candidate.py",
        'programmatic = ", programmatic=True" if config.programmatic_launch else ""',
        'programmatic = ""',
        ("tests/test_generated.py",),
        "INDUCTOR_CUTEDSL_PROGRAMMATIC_LAUNCH=1 launches every GEMM of a compiled graph plainly",
    ),
    Bug(
        "programmatic-launcher-reuses-plain-values",
        "inductor_cutedsl/runtime/generated.py",
        "run.layout(a, b, out, self.out_view, b_up, self.programmatic)",
        "run.layout(a, b, out, self.out_view, b_up)",
        ("tests/test_generated.py",),
        "a programmatic graph's GEMMs launch plainly but for stream-K ones",
    ),
    Bug(
        "stream-k-scratch-sized-by-flag",
        "inductor_cutedsl/runtime/launch.py",
        "            clusters = max_active_clusters(self.spec.config.cluster_size, a.device.index)",
        "            clusters = 1",
        ("tests/test_generated.py",),
        "a stream-K launch's scratch holds one CTA's partial sums (or none), whatever the grid",
    ),
    Bug(
        "decode-tail-wave-gets-no-stream-k",
        "inductor_cutedsl/kernels/config.py",
        "tiles - SMS <= SMS // 2",
        "tiles - SMS < 0",
        ("tests/test_compile.py",),
        "a decode GEMM with a few tiles past a whole wave runs them alone on a few SMs",
    ),
    Bug(
        "dual-stream-k-output-coordinates",
        "inductor_cutedsl/kernels/sm90_gemm.py",
        "                tCcD = tiled_mma.get_slice(etidx).partition_C(self._mma_coords(cD, tc))\n",
        "                tCcD = tiled_mma.get_slice(etidx).partition_C(cD[(None, None, tc[0], tc[1])])\n",
        ("tests/test_dual_gemm_gpu.py::test_decode_sized_gated_gemm_in_stream_k",),
        "a stream-K dual kernel reads its tile's output coordinates as a plain kernel's, twice as wide",
        gpu_only=True,
    ),
    Bug(
        "dual-stream-k-not-offered",
        "inductor_cutedsl/kernels/config.py",
        "    for cfg in skinny + (wide + narrow if tiles >= sms // 2 else narrow + wide):",
        "    for cfg in wide + narrow if tiles >= sms // 2 else narrow + wide:",
        ("tests/test_dual_gemm.py",),
        "a decode-sized gated product gets no stream-K dual tile",
    ),
    Bug(
        "mm-plus-mm-views-unrealized",
        "inductor_cutedsl/lowering/mm_plus_mm.py",
        "                mat1, mat2, mat3, mat4 = (ir_access.realized(m) for m in (mat1, mat2, mat3, mat4))\n",
        "                pass\n",
        ("tests/test_lowering_codegen.py",),
        "a training step's input gradient through two projections is never split into our GEMMs",
    ),
    Bug(
        "idle-warpgroup-multiplies",
        "inductor_cutedsl/kernels/sm90_gemm.py",
        "        multiplies = self.pingpong or tc[0] * self.tile_shape_mnk[0] + 64 * wg < size_m\n",
        "        multiplies = True\n",
        ("tests/test_epilogue_sass.py",),
        "a decode-sized GEMM's second warpgroup multiplies the zero rows past M",
    ),
    Bug(
        "idle-warpgroup-commit-outside",
        "inductor_cutedsl/kernels/sm90_gemm.py",
        "                    cute.gemm(tiled_mma, part, tCrA[blk], tCrB[blk], part)\n"
        "                cute.nvgpu.warpgroup.commit_group()\n",
        "                    cute.gemm(tiled_mma, part, tCrA[blk], tCrB[blk], part)\n"
        "            cute.nvgpu.warpgroup.commit_group()\n",
        ("tests/test_epilogue_sass.py",),
        "every k-tile commits a placeholder wgmma group after its batch, which the pipelined wait then waits out",
    ),
    Bug(
        "decode-sites-share-dynamo",
        "benchmarks/decode.py",
        '    by then."""\n    release()\n',
        '    by then."""\n',
        ("tests/test_benchmarks.py",),
        "past dynamo's recompile limit, later decode sites time their GEMM run eagerly",
    ),
    Bug(
        "early-start-forces-autotuning",
        "inductor_cutedsl/scheduler/selection.py",
        "    if not ir_access.timings_ready(template.node):",
        "    if False:",
        ("tests/test_fusion_codegen.py",),
        "the early start autotunes every GEMM at the first fusion check, ahead of its decision",
    ),
    Bug(
        "coordesc-prefetch-not-awaited",
        "inductor_cutedsl/compat/coordesc_prefetch.py",
        "        _await(self, cfg)\n",
        "        pass\n",
        ("tests/test_coordesc_prefetch.py",),
        "the tuner compiles a config itself while a worker is still compiling it",
    ),
    Bug(
        "view-pairs-reach-triton",
        "inductor_cutedsl/scheduler/decisions.py",
        "        if node1.is_template() and not codegen.stock_pairs(scheduler, node1, node2):",
        "        if False:",
        ("tests/test_fusion_codegen.py",),
        "a pair only our view rule forms is handed to Inductor's Triton rule",
    ),
    Bug(
        "child-workers-outlive-it",
        "inductor_cutedsl/cli/run.py",
        "            end_session(proc.pid)",
        "            pass",
        ("tests/test_cli.py",),
        "a measured child's compile workers are left running after its report",
    ),
    Bug(
        "results-indented",
        "inductor_cutedsl/cli/report.py",
        "            f.write(results_text(result))",
        "            json.dump(result, f, indent=2)",
        ("tests/test_job.py",),
        "result files are written indented, three times their compact size",
    ),
    Bug(
        "zygote-child-keeps-servers-environment",
        "benchmarks/zygote.py",
        "    os.environ.clear()",
        "    pass",
        ("tests/test_zygote.py",),
        "a forked benchmark child keeps what the server's environment held beside its own",
    ),
    Bug(
        "warm-start-resumes-by-warm-count",
        "benchmarks/warm_start.py",
        '.get(s, {}).get("cold", [])) <= i]',
        '.get(s, {}).get("warm", [])) <= i]',
        ("tests/test_benchmarks.py",),
        "with several warm starts per cold compile, a resumed run skips pairs it never ran",
    ),
    Bug(
        "runtime-gpu-ratio-swapped",
        "benchmarks/compile.py",
        '"step_gpu_ms", 4) for s in (FAIR_STOCK, OURS))),',
        '"step_gpu_ms", 4) for s in (OURS, FAIR_STOCK))),',
        ("tests/test_benchmarks.py",),
        "the compile benchmark's kernel-time ratio reads ours / stock, so slower kernels read as faster",
    ),
    Bug(
        "epilogue-case-ignores-compile-first",
        "benchmarks/epilogue.py",
        "for label in sorted(BACKENDS, key=lambda b: b != first):",
        "for label in BACKENDS:",
        ("tests/test_benchmarks.py",),
        "--compile-first changes nothing: every row compiles stock first",
    ),
    Bug(
        "training-loss-is-the-output-norm",
        "benchmarks/models.py",
        "        return (out.float() * self.direction).sum()",
        "        return out.float().square().mean()",
        ("tests/test_models_suite.py",),
        "a training row's loss that the final norm fixes: every other gradient is rounding noise",
    ),
    Bug(
        "resumed-suite-rows-lose-their-card",
        "benchmarks/harness.py",
        "    run = {key: result[key] for key in keys if result.get(key)}",
        "    run = {key: result.get(key) for key in keys}",
        ("tests/test_models_suite.py",),
        "a partial file that names no card erases the card an earlier file's rows ran on",
    ),
    Bug(
        "suite-rows-name-no-card",
        "benchmarks/models.py",
        '        row = {**describe(bid, measure_kw.get("scale", 1)), "device": info.get("device")}',
        '        row = describe(bid, measure_kw.get("scale", 1))',
        ("tests/test_models_suite.py",),
        "a suite resumed on another card says nothing of which card each row ran on",
    ),
    Bug(
        "resumed-decode-rows-take-the-new-card",
        "benchmarks/decode.py",
        '            rows = [r for r in stamped(json.load(f), ROW_RUN_KEYS) if "error" not in r]',
        '            rows = [r for r in json.load(f)["rows"] if "error" not in r]',
        ("tests/test_benchmarks.py",),
        "a decode run resumed on another card reads its earlier rows as the new card's",
    ),
    Bug(
        "decode-rows-name-no-card",
        "benchmarks/decode.py",
        "            row = {**{key: info.get(key) for key in ROW_RUN_KEYS}, **row,",
        "            row = {**row,",
        ("tests/test_benchmarks.py",),
        "a decode row says nothing of the card and copy bandwidth its fractions were measured against",
    ),
    Bug(
        "host-interval-takes-the-inner-order-statistics",
        "benchmarks/harness.py",
        "    return (xs[k - 1], xs[n - k]) if k else None",
        "    return (xs[k], xs[n - k - 1]) if k else None",
        ("tests/test_models_suite.py",),
        "a host ratio's interval is narrower than 95%, and noise reads as host time ours added",
    ),
    Bug(
        "tuned-config-marked-without-a-cache-hit",
        "inductor_cutedsl/compat/autotune.py",
        """    if (getattr(autotuner, "autotune_cache_info", None) or {}).get("autotune_cache_state") != "hit":
        return
    results""",
        """    results""",
        ("tests/test_coordesc_carry.py",),
        "a kernel whose compile missed the cache is marked as tuned from an entry written later",
    ),
    Bug(
        "tuned-config-marked-though-autotuning-picked-it",
        "inductor_cutedsl/compat/autotune.py",
        '    if best is None or not getattr(best, "found_by_coordesc", False):',
        "    if best is None:",
        ("tests/test_coordesc_carry.py",),
        "a config autotuning picked among several is marked as coordinate descent's: it is never tuned",
    ),
    Bug(
        "tuned-config-marks-another-config",
        "inductor_cutedsl/compat/autotune.py",
        "    if triton_config_to_hashable(config) != wanted:\n        return\n",
        "",
        ("tests/test_coordesc_carry.py",),
        "a kernel's config other than the cached winner is marked as tuned",
    ),
    Bug(
        "stock-keeps-tuned-configs-only-while-ours-is-on",
        "benchmarks/harness.py",
        "    with ours_out():  # ours' own carry out first: a later disable() would take it out\n"
        "        return carry_coordinate_descent()\n",
        "    return carry_coordinate_descent()\n",
        ("tests/test_benchmarks.py",),
        "a benchmark's stock side tunes its Triton kernels again while ours keeps its configs",
    ),
    Bug(
        "timeline-busy-counts-an-overlap-twice",
        "tools/timeline_compare.py",
        "            busy += stop - end",
        "            busy += stop - start",
        ("tests/test_timeline_compare.py",),
        "the GPU's busy time counts a kernel that started before the previous ended from its start",
    ),
    Bug(
        "timeline-predecessor-is-the-kernel-itself",
        "tools/timeline_compare.py",
        '            before.setdefault(item["kernel"], Counter())[timeline[i - 1]["kernel"]] += 1',
        '            before.setdefault(item["kernel"], Counter())[timeline[i]["kernel"]] += 1',
        ("tests/test_timeline_compare.py",),
        "a slow kernel is reported as running after itself, hiding what it waited on",
    ),
    Bug(
        "wall-rounds-keep-the-long-default-window",
        "benchmarks/models.py",
        "        rounds = side_by_side_rounds(steps, self.wall_rounds, self.wall_rep_ms)\n",
        "        rounds = side_by_side_rounds(steps, self.wall_rounds)\n",
        ("tests/test_models_suite.py",),
        "the wall figure's rounds run 200 ms windows, four times the time the suite budgets for them",
    ),
    Bug(
        "gated-one-row-product-rewritten",
        "inductor_cutedsl/lowering/gated_rewrite.py",
        "    return bool(inductor_config.coordinate_descent_tuning) and _one_row(args[0])\n",
        "    return False\n",
        ("tests/test_gated.py",),
        "a decode step at batch 1 runs its MLP's GEMMs as GEMMs where stock fuses them into one reduction",
    ),
    Bug(
        "gated-product-left-at-any-row-count",
        "inductor_cutedsl/lowering/gated_rewrite.py",
        "    return bool(inductor_config.coordinate_descent_tuning) and _one_row(args[0])\n",
        "    return bool(inductor_config.coordinate_descent_tuning)\n",
        ("tests/test_gated.py",),
        "no gated MLP becomes a dual kernel under max-autotune",
    ),
    Bug(
        "one-row-reads-the-last-dim",
        "inductor_cutedsl/lowering/gated_rewrite.py",
        "all(type(d) is int and d == 1 for d in shape[:-1])",
        "all(type(d) is int and d == 1 for d in shape[1:])",
        ("tests/test_gated.py",),
        "a one-token decode step of batch 2 is taken for one row",
    ),
    Bug(
        "bound-reads-the-first-modes-wrapper",
        "benchmarks/models.py",
        "with captured_code(codes[name]) if mode == profiled else",
        "with captured_code(codes[name]) if mode == order[0] else",
        ("tests/test_models_suite.py",),
        "the bound's kernels are named from the mode compiled first, not the profiled one",
    ),
    Bug(
        "fp8-profile-costs-against-cublas",
        "tools/fp8_profile.py",
        'fast = by_way.get("scaled_mm_fast" if spec is None else f"{spec.config.name()}:p0")',
        'fast = by_way.get("scaled_mm_fast")',
        ("tests/test_fp8_profile.py",),
        "our promotion's cost per k-tile is read against cuBLASLt's fast kernel, not the same tile's",
    ),
    Bug(
        "fp8-sweep-padded-swizzles",
        "tools/fp8_profile.py",
        "unpadded = (cfg for cfg in rasterised if fitted_swizzle(cfg, m, n) == cfg.swizzle)",
        "unpadded = rasterised",
        ("tests/test_fp8_profile.py",),
        "the rasterisation sweep times swizzles the scheduler would pad, configs no shortlist runs",
    ),
    Bug(
        "row-decisions-from-the-first-mode",
        "benchmarks/models.py",
        "if mode == profiled:  # (plain JSON",
        "if mode == order[0]:  # (plain JSON",
        ("tests/test_models_suite.py",),
        "a row's fused epilogues and decisions are the mode compiled first's, not the profiled one's",
    ),
    Bug(
        "tuned-apart-sums-every-same-source-kernel",
        "tools/timeline_compare.py",
        'sum(r["ours_us"] - r["stock_us"] for r in rows if r["one_shape"] == one_shape)',
        'sum(r["ours_us"] - r["stock_us"] for r in rows)',
        ("tests/test_timeline_compare.py",),
        "a row's difference in kernels tuned apart counts those that ran one config too",
    ),
    Bug(
        "same-source-matches-kernels-by-name-only",
        "tools/timeline_compare.py",
        "        if len(sources[0]) != 1 or sources[0] != sources[1]:\n",
        "        if len(sources[0]) != 1:\n",
        ("tests/test_timeline_compare.py",),
        "two sides' kernels of one name but different code count as one source, a shape difference blamed on tuning",
    ),
    Bug(
        "same-source-shape-compares-a-side-with-itself",
        "tools/timeline_compare.py",
        '                "one_shape": stock["launches"] == ours["launches"],\n',
        '                "one_shape": stock["launches"] == stock["launches"],\n',
        ("tests/test_timeline_compare.py",),
        "every same-source kernel reads as one launch shape on both sides, hiding a tuning difference",
    ),
    Bug(
        "timeline-gap-from-the-previous-start",
        "benchmarks/models.py",
        '        gap = start - (out[-1]["start_us"] + out[-1]["us"]) if out else 0.0',
        '        gap = start - out[-1]["start_us"] if out else 0.0',
        ("tests/test_models_suite.py",),
        "a timeline reads a kernel's predecessor's run as idle time before it",
    ),
    Bug(
        "timeline-keeps-the-hosts-events",
        "benchmarks/models.py",
        '        if e.get("ph") == "X" and e.get("cat") in GPU_TRACE_CATEGORIES',
        '        if e.get("ph") == "X"',
        ("tests/test_models_suite.py",),
        "a timeline mixes the host's operators with the GPU's kernels",
    ),
    Bug(
        "timeline-launch-drops-the-grid",
        "benchmarks/models.py",
        """    dims = " ".join(f"{key} {','.join(str(v) for v in args[key])}" for key in ("grid", "block"))""",
        """    dims = " ".join(f"{key} {','.join(str(v) for v in args[key])}" for key in ("block",))""",
        ("tests/test_models_suite.py",),
        "two configs of one source that differ only in their grid read as one launch shape",
    ),
    Bug(
        "timeline-launches-keep-only-the-usual-shape",
        "tools/timeline_compare.py",
        '        entry["launches"] = [shape for shape, _ in shapes[name].most_common()] if name in shapes else []',
        '        entry["launches"] = [shape for shape, _ in shapes[name].most_common(1)] if name in shapes else []',
        ("tests/test_timeline_compare.py",),
        "a kernel the autotuner ran with two configs shows one, hiding the choice that differed",
    ),
    Bug(
        "round-ratio-is-the-ratio-of-medians",
        "benchmarks/models.py",
        "                ratios[mode] = round(statistics.median(rounds), 4)",
        "                ratios[mode] = ratio(times.get(numerator), times.get(denominator))",
        ("tests/test_models_suite.py",),
        "a host ratio or wall speed-up is the ratio of the sides' medians, which can fall far from every round's ratio",
    ),
    Bug(
        "wall-speedup-read-as-ours-over-stock",
        "benchmarks/models.py",
        'ROUND_FIGURES = (("host_ratio", "host_us", "ours"), ("wall_speedup", "wall_ms", "stock"))',
        'ROUND_FIGURES = (("host_ratio", "host_us", "ours"), ("wall_speedup", "wall_ms", "ours"))',
        ("tests/test_models_suite.py",),
        "a wall time kept without its rounds reads as ours / stock: a faster ours shows as slower",
    ),
    Bug(
        "wall-interval-high-min-is-the-highest",
        "benchmarks/models.py",
        '        "wall_speedup_interval_high_min_cudagraphs": _min(wall_high[CUDAGRAPHS]),',
        '        "wall_speedup_interval_high_min_cudagraphs": max(wall_high[CUDAGRAPHS], default=None),',
        ("tests/test_models_suite.py",),
        "the suite's lowest wall interval reads its highest, hiding a row slower than stock beyond noise",
    ),
    Bug(
        "perf-doc-wall-cell-takes-the-host-interval",
        "tools/perf_doc.py",
        '    interval = row.get(f"{figure}_interval", {}).get(mode)\n    return f"{fmt(value)}',
        '    interval = row.get("host_ratio_interval", {}).get(mode)\n    return f"{fmt(value)}',
        ("tests/test_benchmarks.py",),
        "the performance page prints a wall speed-up with its host ratio's interval",
    ),
    Bug(
        "host-interval-low-max-is-the-lowest",
        "benchmarks/models.py",
        '        "host_ratio_interval_low_max": max(host_low) if host_low else None,',
        '        "host_ratio_interval_low_max": min(host_low) if host_low else None,',
        ("tests/test_models_suite.py",),
        "the summary hides a row whose host time is above stock beyond its rounds' spread",
    ),
    Bug(
        "host-interval-counts-failed-rows",
        "benchmarks/models.py",
        '    host_low = [low for r in ok for low, _ in r.get("host_ratio_interval", {}).values()]',
        '    host_low = [low for r in rows for low, _ in r.get("host_ratio_interval", {}).values()]',
        ("tests/test_models_suite.py",),
        "a failed row's host rounds count in the suite's host interval figure",
    ),
    Bug(
        "distributed-loss-is-the-output-norm",
        "benchmarks/distributed.py",
        "        loss = (widened(out) * direction).sum()",
        "        loss = widened(out).square().mean()",
        ("tests/test_benchmarks.py",),
        "the distributed benchmark's loss fixed by the final norm: its gradients are rounding noise",
    ),
    Bug(
        "numerics-sweep-ignores-wrong-values",
        "tools/fake_compile_sweep.py",
        "                if off:\n",
        "                if False:\n",
        ("tests/test_fake_compile_sweep.py",),
        "the CPU sweep's --numerics reports a wrong value but passes",
    ),
    Bug(
        "fp8-accuracy-reference-drops-row-scales",
        "benchmarks/fp8.py",
        "    return (a.double() * sa.double()) @ (b.double() * sb.double())",
        "    return a.double() @ (b.double() * sb.double())",
        ("tests/test_benchmarks.py",),
        "the fp8 accuracy reference ignores A's row-wise scales",
    ),
    Bug(
        "coordesc-prefetch-ignores-improvements",
        "inductor_cutedsl/compat/coordesc_prefetch.py",
        "        if better and not _stalled:",
        "        if False:",
        ("tests/test_coordesc_prefetch.py",),
        "the tuner's steps past its first round compile in the calling thread again",
    ),
    Bug(
        "coordesc-prefetch-tuner-left-wrapped",
        "inductor_cutedsl/compat/coordesc_prefetch.py",
        '        vars(tuner).pop("compare_config", None)',
        "        pass",
        ("tests/test_coordesc_prefetch.py",),
        "a tuned kernel keeps a closure on its tuner and no longer pickles",
    ),
    Bug(
        "coordesc-prefetch-unwraps-only-on-success",
        "inductor_cutedsl/compat/coordesc_prefetch.py",
        """        try:
            return tuning(self, launcher, *args, **kwargs)
        finally:
            _try(stop_following, self)""",
        """        out = tuning(self, launcher, *args, **kwargs)
        _try(stop_following, self)
        return out""",
        ("tests/test_coordesc_prefetch.py",),
        "a tuning that raises leaves its tuner wrapped",
    ),
    Bug(
        "coordesc-prefetch-following-raises",
        "inductor_cutedsl/compat/coordesc_prefetch.py",
        "            _try(_submit_neighbours, autotuner, candidate)",
        "            _submit_neighbours(autotuner, candidate)",
        ("tests/test_coordesc_prefetch.py",),
        "a failure while submitting an improvement's neighbours fails the user's compile",
    ),
    Bug(
        "fusion-benchmarks-tuned",
        "inductor_cutedsl/compat/codegen.py",
        "    if config.tune_fusion_benchmarks:\n        return contextlib.nullcontext()",
        "    if True:\n        return contextlib.nullcontext()",
        ("tests/test_scheduling.py",),
        "tune_fusion_benchmarks off still tunes Inductor's own fusion benchmarks' kernels",
    ),
    Bug(
        "fusion-benchmarks-never-tuned",
        "inductor_cutedsl/compat/codegen.py",
        "    if config.tune_fusion_benchmarks:\n        return contextlib.nullcontext()",
        "    if False:\n        return contextlib.nullcontext()",
        ("tests/test_scheduling.py",),
        "Inductor's own fusion benchmarks time untuned kernels by default, unlike stock",
    ),
    Bug(
        "fusion-benchmarks-untuned-by-default",
        "inductor_cutedsl/config.py",
        '        True, parse_bool, bool, "coordinate-descent-tune the kernels of Inductor\'s own fusion benchmarks"',
        '        False, parse_bool, bool, "coordinate-descent-tune the kernels of Inductor\'s own fusion benchmarks"',
        ("tests/test_scheduling.py",),
        "the default times Inductor's own fusion benchmarks untuned, overstating the unfused way",
    ),
    Bug(
        "generated-loads-in-compile-workers",
        "inductor_cutedsl/runtime/generated.py",
        "    if environment.in_a_compile_worker():\n        return _unlaunchable(spec)",
        "    if False:\n        return _unlaunchable(spec)",
        ("tests/test_generated.py",),
        "a generated module imported in Inductor's compile workers builds and loads its kernel there",
    ),
    Bug(
        "cuda-scheduling-clears-custom-pass",
        "inductor_cutedsl/compat/codegen.py",
        '        common.custom_backend_passes.get("cuda"),\n'
        '        common.custom_backend_codegen_configs.get("cuda"),\n',
        "",
        ("tests/test_lowering.py",),
        "installing our CUDA scheduling clears a custom CUDA graph pass and codegen config",
    ),
    Bug(
        "tuned-binary-device-always-int",
        "inductor_cutedsl/compat/tuned_binaries.py",
        "    device = None if device is None else int(device)",
        "    device = int(device)",
        ("tests/test_tuned_binaries.py",),
        "a kernel compiled on one rank for all (no Triton device) fails to record its binary",
    ),
]


def repository_files() -> list[str]:
    """The checkout's tracked and unignored files, as they are now (deleted ones left out)."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    return sorted({f for f in listed if f and (ROOT / f).is_file()})


def copy_repository(dest: Path) -> Path:
    for name in repository_files():
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    return dest


def patched(bug: Bug, text: str) -> str:
    """``text`` with ``bug`` planted; ValueError unless ``old`` occurs exactly once."""
    count = text.count(bug.old)
    if count != 1:
        raise ValueError(f"{bug.name}: {bug.old!r} occurs {count} times in {bug.path}, not once")
    return text.replace(bug.old, bug.new)


def check(bugs: list[Bug]) -> list[str]:
    """Problems with the list itself: duplicate names, patches that do not apply or do
    not compile, test files that do not exist."""
    problems = []
    names = [b.name for b in bugs]
    problems += [f"{n}: named twice" for n in sorted({n for n in names if names.count(n) > 1})]
    for bug in bugs:
        try:
            text = patched(bug, (ROOT / bug.path).read_text())
        except (ValueError, OSError) as exc:
            problems.append(str(exc))
            continue
        with tempfile.TemporaryDirectory() as tmp:
            probe = Path(tmp) / "probe.py"
            probe.write_text(text)
            try:
                py_compile.compile(str(probe), doraise=True)
            except py_compile.PyCompileError as exc:
                problems.append(f"{bug.name}: the patched file does not compile: {exc.msg}")
        for test in bug.tests:
            if not (ROOT / test.split("::")[0]).is_file():
                problems.append(f"{bug.name}: no test file {test}")
    return problems


def environment(copy: Path, cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    # The copy's package, before any installed one; no bytecode, so that a patched file
    # and its restored original are never mistaken for each other.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(copy), env.get("PYTHONPATH")]))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["INDUCTOR_CUTEDSL_CACHE_DIR"] = str(cache)
    return env


def run_tests(copy: Path, tests: tuple[str, ...], cache: Path, timeout: float, stop_first: bool = True):
    """(return code, or None on a timeout; the output's tail) of pytest on ``tests`` in ``copy``."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *(["-x"] if stop_first else []), *tests]
    proc = subprocess.Popen(
        command,
        cwd=copy,
        env=environment(copy, cache),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out[-3000:]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return None, (out or "")[-3000:]


def uses_copy(copy: Path, cache: Path) -> None:
    """The tests in ``copy`` import the copy's package (not an installed one)."""
    code = "import inductor_cutedsl; print(inductor_cutedsl.__file__)"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=copy, env=environment(copy, cache), capture_output=True, text=True, check=True
    ).stdout.strip()
    if not Path(out).resolve().is_relative_to(copy.resolve()):
        raise SystemExit(f"the copy's tests would import {out}, not the copy's package")


def caught_by(out: str) -> str:
    """The first test the output names as failed (or erroring)."""
    for line in out.splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            return line.split(" ", 1)[1].split(" - ", 1)[0].split("tests/", 1)[-1]
    return ""


def mutate(bug: Bug, copy: Path, timeout: float) -> tuple[str, float, str]:
    """(result, seconds, output tail) of planting ``bug`` in ``copy`` and running its tests."""
    target = copy / bug.path
    original = target.read_text()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mutation_cache_") as own:
        try:
            target.write_text(patched(bug, original))
            rc, out = run_tests(copy, bug.tests, Path(own) if bug.own_cache else CACHE_DIR, timeout)
        finally:
            target.write_text(original)
    result = "killed (timeout)" if rc is None else "survived" if rc == 0 else "killed"
    if rc is not None and rc not in (0, 1):  # 2-5: interrupted, internal, usage, no tests
        result = f"error (pytest exit {rc})"
    return result, time.monotonic() - t0, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="+", metavar="BUG", help="run these bugs only (default: all)")
    ap.add_argument("--jobs", type=int, default=1, help="bugs run at a time, each in its own copy (default 1)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per bug's test run (default 600)")
    ap.add_argument("--gpu", action="store_true", help="also run the gpu_only bugs (needs an sm_90 GPU)")
    ap.add_argument("--no-baseline", action="store_true", help="skip the unpatched run of the selected tests")
    ap.add_argument("--list", action="store_true", help="list the bugs and their tests, and exit")
    args = ap.parse_args(argv)

    problems = check(BUGS)
    if problems:
        print("the bug list is broken:\n  " + "\n  ".join(problems))
        return 2
    known = {b.name for b in BUGS}
    if args.only and not set(args.only) <= known:
        print(f"unknown bugs: {sorted(set(args.only) - known)}")
        return 2
    selected = [b for b in BUGS if not args.only or b.name in args.only]
    if args.list:
        for bug in selected:
            print(f"{bug.name:40} {bug.path:50} {' '.join(bug.tests)}{'  (gpu only)' if bug.gpu_only else ''}")
        return 0
    release = torch_release()
    skipped = {b.name: why for b in selected if (why := not_run_reason(b, args.gpu, release)) is not None}
    to_run = [b for b in selected if b.name not in skipped]
    CACHE_DIR.mkdir(parents=True, exist_ok=True)

    with tempfile.TemporaryDirectory(prefix="mutation_") as tmp:
        copies = [copy_repository(Path(tmp) / f"repo{i}") for i in range(max(1, args.jobs))]
        uses_copy(copies[0], CACHE_DIR)
        if not args.no_baseline and to_run:
            tests = tuple(dict.fromkeys(t for b in to_run for t in b.tests))
            print(f"baseline: {len(tests)} test selections on the unpatched copy ...", flush=True)
            rc, out = run_tests(copies[0], tests, CACHE_DIR, args.timeout * 2, stop_first=False)
            if rc != 0:
                print(out)
                print("the tests fail without any bug planted: no kill would mean anything")
                return 2
        free = list(copies)
        results: dict[str, tuple[str, float, str]] = {}

        def job(bug: Bug) -> None:
            copy = free.pop()
            try:
                results[bug.name] = mutate(bug, copy, args.timeout)
            finally:
                free.append(copy)
            result, secs, _ = results[bug.name]
            print(f"  {bug.name}: {result} ({secs:.0f} s)", flush=True)

        with concurrent.futures.ThreadPoolExecutor(len(copies)) as pool:
            for future in [pool.submit(job, b) for b in to_run]:
                future.result()

    width = max(len(b.name) for b in selected)
    print(f"\n{'bug':{width}}  {'file':34}  {'result':17}  {'seconds':>7}  first failing test")
    for bug in selected:
        if bug.name in skipped:
            print(f"{bug.name:{width}}  {bug.path.removeprefix('inductor_cutedsl/'):34}  {skipped[bug.name]:17}")
            continue
        result, secs, out = results[bug.name]
        print(
            f"{bug.name:{width}}  {bug.path.removeprefix('inductor_cutedsl/'):34}  {result:17}  {secs:7.1f}  "
            f"{caught_by(out) if result.startswith('killed') else ''}"
        )
    killed = [b for b in to_run if results[b.name][0].startswith("killed")]
    failed = [b for b in to_run if not results[b.name][0].startswith("killed")]
    rate = 100.0 * len(killed) / len(to_run) if to_run else 100.0
    gpu_skipped = sum(why == GPU_ONLY for why in skipped.values())
    print(
        f"\nkill rate: {len(killed)}/{len(to_run)} ({rate:.0f}%)"
        + (f"; {gpu_skipped} gpu-only bugs not run (--gpu runs them)" if gpu_skipped else "")
        + (
            f"; {len(skipped) - gpu_skipped} not run on torch {'.'.join(map(str, release))}"
            if len(skipped) > gpu_skipped
            else ""
        )
    )
    for bug in failed:
        print(f"\n{bug.name} {results[bug.name][0]} ({bug.what or bug.path}); its tests said:\n{results[bug.name][2]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
