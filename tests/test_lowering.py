"""Enable/disable, settings and refusal logic of the Inductor integration (no GPU)."""

from __future__ import annotations

import concurrent.futures
import logging
import types

import pytest
import sympy
import torch
from torch._inductor import config as inductor_config
from torch._inductor.sizevars import SizeVarAllocator
from torch._inductor.virtualized import V

import inductor_cutedsl
from inductor_cutedsl import config
from inductor_cutedsl.compat import environment, settings
from inductor_cutedsl.errors import Unsupported
from inductor_cutedsl.lowering import gemm_choices as gc
from inductor_cutedsl.lowering.choices import CuteDSLChoices


def test_import_enables_and_disable_restores_exactly():
    assert inductor_cutedsl.is_enabled()
    enabled_backends = inductor_config.max_autotune_gemm_backends
    assert "CUTEDSL" in enabled_backends.upper().split(",")
    assert issubclass(inductor_config.inductor_choices_class, CuteDSLChoices)
    assert isinstance(V.choices, CuteDSLChoices)
    inductor_cutedsl.disable()
    inductor_cutedsl.disable()  # idempotent
    try:
        assert not inductor_cutedsl.is_enabled()
        assert "CUTEDSL" not in inductor_config.max_autotune_gemm_backends.upper()
        assert inductor_config.inductor_choices_class is None
        assert not isinstance(V.choices, CuteDSLChoices)
    finally:
        inductor_cutedsl.enable()
        inductor_cutedsl.enable()  # idempotent
    assert inductor_config.max_autotune_gemm_backends == enabled_backends
    assert isinstance(V.choices, CuteDSLChoices)


def test_enable_keeps_a_user_token_and_restores_user_value():
    inductor_cutedsl.disable()
    try:
        with inductor_config.patch(max_autotune_gemm_backends="CUTEDSL"):
            inductor_cutedsl.enable()
            assert inductor_config.max_autotune_gemm_backends == "CUTEDSL"
            inductor_cutedsl.disable()
            assert inductor_config.max_autotune_gemm_backends == "CUTEDSL"
    finally:
        inductor_cutedsl.enable()


def test_config_patch_and_env(monkeypatch):
    before = config.as_dict()
    with config.patch(max_configs=1, enabled=False):
        assert config.max_configs == 1 and config.enabled is False
    assert config.as_dict() == before
    with pytest.raises(AttributeError):
        with config.patch(no_such_setting=1):
            pass
    assert config.parse_bool("X", " Off ") is False and config.parse_bool("X", "YES") is True
    assert config.parse_count("X", "3") == 3


class FakeNode:
    """Duck-typed IR node: just what the refusal checks read."""

    def __init__(self, size, stride, dtype=torch.bfloat16, offset=0):
        self._size, self._stride, self._dtype = list(size), list(stride), dtype
        self._layout = types.SimpleNamespace(offset=offset)

    def get_size(self):
        return self._size

    def get_stride(self):
        return self._stride

    def get_dtype(self):
        return self._dtype

    def get_layout(self):
        return self._layout


@pytest.fixture
def graph():
    fake = types.SimpleNamespace(sizevars=SizeVarAllocator(), cpp_wrapper=False)
    with V.set_graph_handler(fake):
        yield fake


s0 = sympy.Symbol("s0", integer=True, positive=True)


@pytest.mark.parametrize(
    "node,mode",
    [
        (FakeNode((128, 64), (64, 1)), "last"),
        (FakeNode((128, 64), (1, 128)), "first"),
        (FakeNode((s0, 64), (64, 1)), "last"),  # dynamic M, static K
        (FakeNode((128, 64), (8 * s0, 1)), "last"),  # symbolic, provably aligned
        (FakeNode((3, 128, 64), (8192, 64, 1)), "last"),
    ],
)
def test_contiguous_mode_accepts(graph, node, mode):
    assert gc._contiguous_mode("A", node) == mode


@pytest.mark.parametrize(
    "node,needle",
    [
        (FakeNode((128, 17), (17, 1)), "leading stride"),
        (FakeNode((128, 64), (s0, 1)), "leading stride"),  # not provably aligned
        (FakeNode((128, 64), (128, 2)), "unit-stride"),
        (FakeNode((128, 64), (64, 1), offset=3), "storage offset"),
        (FakeNode((3, 128, 64), (8195, 64, 1)), "batch stride"),
        (FakeNode((3, 128, 64), (0, 64, 1)), "broadcast batch"),
    ],
)
def test_contiguous_mode_refuses(graph, node, needle):
    with pytest.raises(Unsupported, match=needle):
        gc._contiguous_mode("A", node)


def test_gate_refusals_are_logged(caplog):
    inputs = types.SimpleNamespace(nodes=lambda: [])
    with caplog.at_level(logging.INFO, logger="inductor_cutedsl.lowering"):
        with inductor_config.patch(max_autotune_gemm_backends="ATEN,TRITON", max_autotune=True):
            assert gc.gemm_choices(inputs, "mm") == []
        with inductor_config.patch(
            max_autotune_gemm_backends="ATEN,CUTEDSL", max_autotune=False, max_autotune_gemm=False
        ):
            assert gc.gemm_choices(inputs, "mm") == []
    messages = [r.getMessage() for r in caplog.records]
    assert any("CUTEDSL is not in max_autotune_gemm_backends" in m for m in messages)
    assert any("max-autotune is off" in m for m in messages)
    assert gc.gemm_choices(inputs, "mm_plus_mm") == []  # not one of ours: silent


def test_disabled_setting_offers_nothing():
    with config.patch(enabled=False):
        assert gc.gemm_choices(types.SimpleNamespace(), "mm") == []


@pytest.mark.parametrize("has_c", [False, True])
def test_template_renders_valid_python_calling_our_launcher(has_c):
    import jinja2

    from inductor_cutedsl.kernels import GemmConfig
    from inductor_cutedsl.kernels import epilogue as E
    from inductor_cutedsl.lowering.candidate import GemmCandidate
    from inductor_cutedsl.lowering.template import SOURCE, gemm_template
    from inductor_cutedsl.runtime import KernelSpec, generated

    assert gemm_template() is gemm_template()

    def def_kernel(*names):  # what Inductor's hook emits: signature plus renames
        params = ", ".join(f"arg_{n}" for n in names)
        renames = "".join(f"\n    {n} = arg_{n}" for n in names)
        return f"def k_main({params}, out_ptr0, stream):{renames}"

    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    epilogue = E.addmm(True, "row") if has_c else E.IDENTITY
    spec = KernelSpec(GemmConfig(), "bfloat16", "bfloat16", "k", "k", epilogue)
    names, operands = (("c", "a", "b"), ("c",)) if has_c else (("a", "b"), ())
    candidate = GemmCandidate(spec, names, operands, scalars=(0.5, 2.0) if has_c else ())
    code = env.from_string(SOURCE).render(
        candidate=candidate, kernel_name="k", def_kernel=def_kernel, get_output=lambda: "out_ptr0", input_nodes=()
    )
    compile(code, "<rendered>", "exec")
    assert "from inductor_cutedsl.runtime.generated import launcher" in code
    assert "\nk_precompile = precompile\n" in code, "the entry torch 2.14 on calls in its compile workers"
    assert ("_launch(a, b, out_ptr0, c, stream=stream)" in code) == has_c
    # The launcher's arguments rebuild the very candidate, typed (no JSON, no literals parsed).
    call = next(line for line in code.splitlines() if line.startswith("_launch = launcher("))
    captured = {}
    namespace = {name: getattr(generated, name) for name in generated.__all__}
    namespace["launcher"] = lambda spec, **kw: captured.update(spec=spec, **kw)
    exec(call, namespace)
    assert captured.pop("scope") is namespace, "the launcher rebinds the module's own `_launch`"
    # No input nodes here, so no operand is passed as its buffer (test_bound_operands.py).
    assert captured == {"spec": spec, "scalars": candidate.scalars, "views": candidate.views, "out_view": None}


def test_candidate_refuses_inconsistent_operands():
    from inductor_cutedsl.kernels import GemmConfig
    from inductor_cutedsl.kernels import epilogue as E
    from inductor_cutedsl.lowering.candidate import GemmCandidate
    from inductor_cutedsl.runtime import KernelSpec

    spec = KernelSpec(GemmConfig(), "bfloat16", "bfloat16", "k", "k", E.addmm(True, "row"))
    with pytest.raises(ValueError, match="tensor operands"):
        GemmCandidate(spec, ("a", "b"), ())
    with pytest.raises(ValueError, match="scalars"):
        GemmCandidate(spec, ("c", "a", "b"), ("c",))
    with pytest.raises(ValueError, match="views"):
        GemmCandidate(spec, ("c", "a", "b"), ("c",), views=(None, None), scalars=(1.0, 1.0))


def test_operand_args_read_translated_strides():
    from inductor_cutedsl.runtime.support import operand_args

    base = torch.arange(100.0)
    # Row-major 4x5 starting at element 3; one value per row, shared by batches.
    assert operand_args(base, ((5, 1, 0), 3), 1, 4, 5) == (base.data_ptr() + 3 * 4, 5, 1, 0)
    assert operand_args(base, ((1, 0, 0), 0), 2, 4, 5) == (base.data_ptr(), 1, 0, 0)


def test_epilogue_fusion_setting_installs_and_restores_the_scheduling():
    from torch._inductor.codegen import common
    from torch._inductor.scheduler import Scheduler

    from inductor_cutedsl.scheduler.scheduling import CuteDSLFusionScheduling

    inductor_cutedsl.disable()
    prior = common.device_codegens.get("cuda")
    prior_speedup, prior_vertical = Scheduler.speedup_by_fusion, Scheduler.can_fuse_vertical
    prior_bef = getattr(inductor_config, settings.benchmark_fusion_setting())
    try:
        with config.patch(epilogue_fusion=True):
            inductor_cutedsl.enable()
            assert common.device_codegens["cuda"].scheduling is CuteDSLFusionScheduling
            assert Scheduler.speedup_by_fusion is not prior_speedup
            assert Scheduler.can_fuse_vertical is not prior_vertical
            # Inductor's epilogue benchmarking stays on: our candidates join it.
            assert getattr(inductor_config, settings.benchmark_fusion_setting()) == prior_bef
            inductor_cutedsl.disable()
        restored = common.device_codegens.get("cuda")
        assert restored is not None and restored.scheduling is not CuteDSLFusionScheduling
        if prior is not None:
            assert restored is prior
        assert Scheduler.speedup_by_fusion is prior_speedup
        assert Scheduler.can_fuse_vertical is prior_vertical
    finally:
        inductor_cutedsl.enable()


def test_installing_keeps_a_custom_cuda_pass_and_codegen_config_registered():
    """Registering our CUDA scheduling goes through ``register_backend_for_device``,
    which also sets the device's custom graph pass and codegen config (to None unless
    given): a user's or vendor's must be passed on, and still be there after disable()."""
    import torch._dynamo.config as other_config
    from torch._inductor.codegen import common

    def custom_pass(graph):
        return graph

    inductor_cutedsl.disable()
    prior = common.custom_backend_passes.get("cuda"), common.custom_backend_codegen_configs.get("cuda")
    common.custom_backend_passes["cuda"] = custom_pass
    common.custom_backend_codegen_configs["cuda"] = other_config
    try:
        inductor_cutedsl.enable()
        assert common.device_codegens["cuda"].scheduling.__module__.startswith("inductor_cutedsl")
        assert common.custom_backend_passes["cuda"] is custom_pass
        assert common.custom_backend_codegen_configs["cuda"] is other_config
        inductor_cutedsl.disable()
        assert common.custom_backend_passes["cuda"] is custom_pass
        assert common.custom_backend_codegen_configs["cuda"] is other_config
    finally:
        common.custom_backend_passes["cuda"], common.custom_backend_codegen_configs["cuda"] = prior
        inductor_cutedsl.enable()


def test_failed_compile_offers_no_candidate(monkeypatch, caplog, lenient):
    from inductor_cutedsl.kernels import GemmConfig
    from inductor_cutedsl.kernels import epilogue as E
    from inductor_cutedsl.lowering.candidate import GemmCandidate
    from inductor_cutedsl.runtime import KernelSpec

    spec = KernelSpec(GemmConfig(), "bfloat16", "bfloat16", "k", "k", E.IDENTITY)
    monkeypatch.setattr(gc, "gemm_candidates", lambda inputs, op: ([GemmCandidate(spec)], None))

    def broken(*args, **kwargs):
        failed = concurrent.futures.Future()
        failed.set_exception(OSError("disk full"))
        return failed

    monkeypatch.setattr(gc.compiler, "build_async", broken)
    with caplog.at_level(logging.WARNING, logger="inductor_cutedsl.lowering"):
        assert gc.gemm_choices(types.SimpleNamespace(nodes=lambda: []), "mm") == []
    assert any(
        "kernel build failed for mm candidate" in r.getMessage() and "OSError: disk full" in r.getMessage()
        for r in caplog.records
    )


def test_precompile_loads_a_built_kernel_where_kernels_run_and_leaves_a_running_build(monkeypatch):
    """Inductor's precompile threads load our kernel as they load Triton's: the process's
    first load (the DSL runtime's set-up) then stays out of the timed benchmarks. A
    compile for a fake GPU loads nothing; a failed build fails the precompile; a build
    still running is not waited for (Inductor benchmarks nothing until every precompile
    returns), and the benchmark waits for it and loads."""
    import contextlib

    from inductor_cutedsl.kernels import GemmConfig
    from inductor_cutedsl.kernels import epilogue as E
    from inductor_cutedsl.lowering.candidate import GemmCandidate
    from inductor_cutedsl.lowering.template import GemmCaller
    from inductor_cutedsl.runtime import KernelSpec, launch

    spec = KernelSpec(GemmConfig(), "bfloat16", "bfloat16", "k", "k", E.IDENTITY)
    caller = GemmCaller.__new__(GemmCaller)
    caller.candidate, caller.layout = GemmCandidate(spec), types.SimpleNamespace(device=torch.device("cuda", 1))
    caller.build = concurrent.futures.Future()
    caller.build.set_result(("/cache/k.o", True, 1.5))
    loaded, devices = [], []
    monkeypatch.setattr(launch, "get_gemm", lambda spec, path=None: loaded.append((spec, path)))
    monkeypatch.setattr(torch.cuda, "device", lambda d: devices.append(d) or contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    caller.precompile()
    assert loaded == []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    caller.precompile()
    assert loaded == [(spec, "/cache/k.o")] and devices == [torch.device("cuda", 1)]
    caller.build = concurrent.futures.Future()
    caller.build.set_exception(OSError("disk full"))
    with pytest.raises(OSError):
        caller.precompile()
    assert len(loaded) == 1
    caller.build = concurrent.futures.Future()
    caller.precompile()  # returns at once
    assert len(loaded) == 1
    caller.build.set_result(("/cache/k2.o", True, 1.5))
    monkeypatch.setattr(
        caller, "bmreq", types.SimpleNamespace(benchmark=lambda *a, out: 0.01, input_tensor_meta=[]), raising=False
    )
    assert caller.benchmark(out=None) == 0.01
    assert loaded[-1] == (spec, "/cache/k2.o")


def test_candidate_hash_key_is_stable_per_kernel():
    """Inductor's autotuning cache keys choices by hash_key: a repeated GEMM (same kernel,
    same inputs) must map to the same key, another kernel to another key."""
    from inductor_cutedsl.kernels import GemmConfig
    from inductor_cutedsl.kernels import epilogue as E
    from inductor_cutedsl.lowering.candidate import GemmCandidate
    from inductor_cutedsl.lowering.template import GemmCaller
    from inductor_cutedsl.runtime import KernelSpec

    def caller(tile_n, name):
        c = GemmCaller.__new__(GemmCaller)
        c.name = name
        c.candidate = GemmCandidate(KernelSpec(GemmConfig(tile_n=tile_n), "bfloat16", "bfloat16", "k", "k", E.IDENTITY))
        return c

    assert caller(256, "cutedsl_gemm_3").hash_key() == caller(256, "cutedsl_gemm_17").hash_key()
    assert caller(256, "x").hash_key() != caller(128, "x").hash_key()


def test_candidate_hash_key_tells_how_choices_are_timed(monkeypatch):
    """Fair timing ranks by GPU plus host time without CUDA graphs and by GPU time with
    them, and Inductor's autotune cache keeps a pass's timings by hash_key across
    compiles of one process: one key for both would let a compile without CUDA graphs
    reuse a ranking that left out the launches' host time."""
    from inductor_cutedsl import config
    from inductor_cutedsl.compat import settings
    from inductor_cutedsl.kernels import GemmConfig
    from inductor_cutedsl.kernels import epilogue as E
    from inductor_cutedsl.lowering.candidate import GemmCandidate
    from inductor_cutedsl.lowering.template import GemmCaller
    from inductor_cutedsl.runtime import KernelSpec

    c = GemmCaller.__new__(GemmCaller)
    c.candidate = GemmCandidate(KernelSpec(GemmConfig(), "bfloat16", "bfloat16", "k", "k", E.IDENTITY))
    keys = {}
    for graphs, paced in ((True, True), (True, False), (False, True), (False, False)):
        monkeypatch.setattr(settings, "compile_uses_cudagraphs", lambda graphs=graphs: graphs)
        with config.patch(host_paced=paced):
            keys[graphs, paced] = c.hash_key()
    assert keys[True, True] == keys[True, False]
    assert len({keys[True, True], keys[False, True], keys[False, False]}) == 3


def test_compile_workers_start_with_the_first_build_not_with_the_compilation(monkeypatch, tmp_path):
    """A compilation's start starts no worker (a warm start builds nothing, and the DSL
    imports must not run beside Dynamo's tracing); a build that hits the kernel cache
    starts none either; the first build that misses it starts the pool."""
    from torch._dynamo.callback import CallbackArgs, CallbackTrigger, callback_handler

    from inductor_cutedsl.kernels import GemmConfig
    from inductor_cutedsl.kernels import epilogue as E
    from inductor_cutedsl.runtime import KernelCache, KernelSpec, compiler, workers

    started = []

    class Pool:
        def build(self, spec_json, root):
            return tmp_path / "built.o", True, 0.0

    monkeypatch.setattr(workers, "pool", lambda size: started.append(size) or Pool())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    inductor_cutedsl.disable()
    before = list(callback_handler.start_callbacks)
    inductor_cutedsl.enable()
    added = [cb for cb in callback_handler.start_callbacks if cb not in before]
    assert len(added) == 1
    added[0](CallbackArgs(CallbackTrigger.DYNAMO, "0/0"))
    assert started == []

    cache = KernelCache(tmp_path / "cache")
    held = KernelSpec(GemmConfig(128, 64, 1, 1), "bfloat16", "bfloat16", "k", "k", E.IDENTITY)
    missing = KernelSpec(GemmConfig(128, 128, 1, 1), "bfloat16", "bfloat16", "k", "k", E.IDENTITY)
    cache.put(held.key(), b"an object built earlier")
    assert compiler.build_async(held, cache, 4).result()[1] is False
    assert started == []
    assert compiler.build_async(missing, cache, 4).result()[1] is True
    assert started == [4]
    inductor_cutedsl.disable()
    assert callback_handler.start_callbacks == before
    inductor_cutedsl.enable()


def test_a_process_started_by_ours_starts_from_the_environment_without_our_install(monkeypatch):
    """What the install set in the environment (the ptxas alignment) does not pass to a
    process it starts: a stock compile started so would run without Inductor's
    memoized-ptxas recompiles, which a stock process has on its own (the cold-compile
    benchmarks' children did, once the parent had installed). A user's own value passes."""
    import os

    from inductor_cutedsl.cli.run import json_process

    monkeypatch.delenv("TRITON_PTXAS_PATH", raising=False)

    def align():  # as torch's setter does where torch ships a ptxas
        os.environ["TRITON_PTXAS_PATH"] = "/ours/ptxas"
        return environment.EnvChange("TRITON_PTXAS_PATH", "/ours/ptxas")

    monkeypatch.setattr(environment, "align_triton_ptxas", align)
    child = ["-c", "import json, os; print(json.dumps(os.environ.get('TRITON_PTXAS_PATH')))"]
    inductor_cutedsl.disable()
    try:
        inductor_cutedsl.enable()  # Inductor is imported: the whole install, the alignment with it
        assert os.environ["TRITON_PTXAS_PATH"] == "/ours/ptxas"
        assert json_process(child, {}) is None
        assert json_process(child, {"TRITON_PTXAS_PATH": "/given"}) == "/given"
        inductor_cutedsl.disable()
        assert "TRITON_PTXAS_PATH" not in os.environ
        monkeypatch.setenv("TRITON_PTXAS_PATH", "/users/ptxas")  # the user's: set before the install
        monkeypatch.setattr(environment, "align_triton_ptxas", lambda: None)  # torch's setter keeps a set path
        inductor_cutedsl.enable()
        assert json_process(child, {}) == "/users/ptxas"
    finally:
        inductor_cutedsl.disable()
        monkeypatch.undo()
        inductor_cutedsl.enable()


def test_disable_after_a_dynamo_reset():
    """torch.compiler.reset() drops dynamo's callbacks, our compile-start hook too."""
    inductor_cutedsl.disable()
    inductor_cutedsl.enable()
    torch.compiler.reset()
    inductor_cutedsl.disable()
    assert not inductor_cutedsl.is_enabled()
    inductor_cutedsl.enable()


def test_operand_layouts_freeze_only_for_a_gemm_we_take(graph, monkeypatch):
    frozen = []
    monkeypatch.setattr(gc.ir_access, "freeze_layout", frozen.append)
    monkeypatch.setattr(gc, "_device_reason", lambda node: None)

    def inputs(n):
        a, b = FakeNode((256, 64), (64, 1)), FakeNode((64, n), (1, 64))
        return (
            a,
            b,
            types.SimpleNamespace(
                nodes=lambda: [a, b],
                out_dtype=lambda: torch.bfloat16,
                mnk_symbolic=lambda: (256, n, 64),
                output_layout=lambda flexible: types.SimpleNamespace(size=[256, n], stride=[1008, 1]),
            ),
        )

    with inductor_config.patch(max_autotune=True, max_autotune_gemm_backends="ATEN,CUTEDSL"):
        *_, refused = inputs(1001)
        with pytest.raises(Unsupported, match="output width"):
            gc.gemm_candidates(refused, "mm")
        assert frozen == []  # Inductor may still pad or re-lay a refused GEMM's operands
        a, b, taken = inputs(1008)
        candidates, _ = gc.gemm_candidates(taken, "mm")
        assert candidates and frozen == [a, b]


@pytest.mark.parametrize(
    "size,stride,kind",
    [
        ((2048,), (1,), "row"),  # addmm's bias as given (newer Inductor's ATen ask)
        ((1000, 2048), (0, 1), "row"),  # expanded
        ((1, 2048), (2048, 1), "row"),
        ((1000, 1), (1, 1), "col"),
        ((1000, 2048), (1, 0), "col"),
        ((1000, 2048), (2048, 1), "full"),
        ((1, 1), (1, 1), "full"),  # one value: a full operand with zero strides
        ((s0, 2048), (2048, 1), "full"),  # M symbolic: not provably 1
    ],
)
def test_bias_kind_from_sizes_and_strides(graph, size, stride, kind):
    assert gc.bias_kind(size, stride) == kind


def _in_a_thread_around(change, before, after):
    """``before()`` in a new thread, then ``change()`` here, then ``after()`` in that
    thread: what each returned. Inductor keeps one choices handler per thread."""
    import threading

    out, made, changed = {}, threading.Event(), threading.Event()

    def thread():
        try:
            out["before"] = before()
            made.set()
            changed.wait(30)
            out["after"] = after()
        finally:
            made.set()

    t = threading.Thread(target=thread)
    t.start()
    made.wait(30)
    change()
    changed.set()
    t.join(30)
    return out


def _compile_starts():
    """What a thread's lazy backward compile sees at its start: the choices class."""
    from torch._dynamo.callback import CallbackTrigger, callback_handler

    with callback_handler.install_callbacks(CallbackTrigger.LAZY_BACKWARD, "0/0"):
        return type(V.choices), inductor_config.max_autotune_gemm_backends


def test_a_thread_that_lowered_while_we_were_off_gets_ours_when_it_compiles():
    """Autograd's device thread compiles a training step's backward: if it made its
    handler while we were off (a stock compile first), or (torch 2.14 on, where
    Inductor's settings are per thread) never saw our settings, its next compile must
    be ours."""
    inductor_cutedsl.disable()
    try:
        out = _in_a_thread_around(inductor_cutedsl.enable, lambda: type(V.choices), _compile_starts)
    finally:
        inductor_cutedsl.enable()
    assert not issubclass(out["before"], CuteDSLChoices)
    assert out["after"] == (inductor_config.inductor_choices_class, inductor_config.max_autotune_gemm_backends)
    assert issubclass(out["after"][0], CuteDSLChoices) and "CUTEDSL" in out["after"][1]


def test_a_thread_that_lowered_while_we_were_off_gets_ours_after_a_dynamo_reset():
    """``torch.compiler.reset()`` clears Dynamo's compile-start callbacks; the backend
    stays installed, so its hook is back for the next compile: a backward compiling
    after a reset, in a thread whose handler a stock compile made, is still ours (the
    GPU test ``test_backward_after_a_stock_compile_gets_our_candidates`` failed so)."""
    from torch._dynamo.callback import callback_handler

    inductor_cutedsl.disable()
    try:
        out = _in_a_thread_around(
            lambda: (inductor_cutedsl.enable(), torch.compiler.reset()), lambda: type(V.choices), _compile_starts
        )
    finally:
        inductor_cutedsl.enable()
    assert not issubclass(out["before"], CuteDSLChoices)
    assert issubclass(out["after"][0], CuteDSLChoices)
    # disable() takes the hook and the wrapper away; a reset then leaves no hook of ours.
    hooks = len(callback_handler.start_callbacks)
    inductor_cutedsl.disable()
    assert "clear" not in callback_handler.__dict__ and len(callback_handler.start_callbacks) == hooks - 1
    torch.compiler.reset()
    assert callback_handler.start_callbacks == []
    inductor_cutedsl.enable()
    torch.compiler.reset()
    assert len(callback_handler.start_callbacks) == 1


def test_a_thread_that_made_ours_offers_nothing_after_disable(monkeypatch):
    """The other way: a thread's handler made while we were on (and, torch 2.14 on, its
    settings), asked for a GEMM's choices after disable(), answers as Inductor's (and
    is replaced by it)."""
    import inductor_cutedsl.lowering.choices as choices_mod

    asked = []
    monkeypatch.setattr(choices_mod, "gemm_choices", lambda ki, op: asked.append(op) or [])
    inputs = types.SimpleNamespace(nodes=lambda: [object(), object()], output_layout=lambda *a, **k: None)

    def ask():
        handler = V.choices
        return handler.get_template_configs(inputs, [], "mm"), type(V.choices)

    try:
        out = _in_a_thread_around(inductor_cutedsl.disable, _compile_starts, ask)
    finally:
        inductor_cutedsl.enable()
    assert issubclass(out["before"][0], CuteDSLChoices)
    assert out["after"][0] == [] and asked == [] and not issubclass(out["after"][1], CuteDSLChoices)


def test_choices_registered_beside_ours_are_kept_in_every_thread():
    """torch 2.15 composes the choices handler of ``inductor_choices_class``'s and every
    handler registered with ``register_inductor_choices``: bringing a thread's handler in
    line with ours keeps the registered ones (composed after ours), makes no new handler
    while it is current, and after disable() keeps them beside Inductor's."""
    from torch._inductor import choices

    register = getattr(choices, "register_inductor_choices", None)
    if register is None:
        pytest.skip("this torch has no registered choices handlers (before 2.15)")

    class Registered(choices.InductorChoices):
        def uuid(self):
            return "test.registered"

    def parts(handler):
        return [type(h) for h in getattr(handler, "_choices", (handler,))]

    register("test.registered", Registered)
    try:
        V.set_choices_handler(CuteDSLChoices())  # a thread's handler made before the registration
        handler = settings.sync_choices_handler()
        assert parts(handler) == [inductor_config.inductor_choices_class, Registered]
        assert settings.sync_choices_handler() is handler, "current: not made again"
        inductor_cutedsl.disable()
        try:
            assert Registered in parts(settings.sync_choices_handler())
            assert not any(issubclass(t, CuteDSLChoices) for t in parts(V.choices))
        finally:
            inductor_cutedsl.enable()
        assert parts(settings.sync_choices_handler()) == [inductor_config.inductor_choices_class, Registered]
    finally:
        choices.unregister_inductor_choices("test.registered")
        V.set_choices_handler(settings._made_by(inductor_config.inductor_choices_class))
    assert isinstance(V.choices, CuteDSLChoices)


def test_a_threads_own_setting_stands_at_its_compile_start():
    """Only what a thread has not set itself is brought in line: a value it patched
    (as torch.compile's options are) stands."""

    def own():
        with inductor_config.patch(max_autotune_gemm_backends="ATEN"):
            return _compile_starts()[1]

    assert _in_a_thread_around(lambda: None, lambda: None, own)["after"] == "ATEN"


def test_small_problems_offer_one_config_and_the_rest_keep_their_list():
    """At 65-256 rows and under one wave of tiles, one 16-bit config is offered (its
    builds never won there); decode-sized, larger and fp8 GEMMs keep ``max_configs``."""
    from inductor_cutedsl import config
    from inductor_cutedsl.kernels import epilogue as E
    from inductor_cutedsl.kernels.config import shortlist
    from inductor_cutedsl.lowering.gemm_choices import candidate_specs

    def offered(m, n, k, dtype="bfloat16", batch=1):
        return candidate_specs((m, n, k, batch), dtype, "bfloat16", "k", "n", E.IDENTITY)

    assert config.max_configs >= 2
    for m, n, k in ((256, 2048, 2048), (256, 2048, 8192), (65, 4096, 4096), (200, 8192, 4096)):
        specs = offered(m, n, k)
        assert len(specs) == 1, (m, n, k)
        assert specs[0].config == shortlist(m, n, k)[0]  # the likeliest winner stays
        assert len(offered(m, n, k, "float16")) == 1
    assert len(offered(256, 4096, 4096, batch=8)) == config.max_configs  # 256 tiles: not small
    assert len(offered(2048, 4096, 4096)) == config.max_configs
    assert len(offered(200, 14336, 4096)) == config.max_configs  # 224 tiles
    assert len(offered(1000, 2048, 1024)) == config.max_configs  # 128 tiles, but 1000 rows: unmeasured
    assert len(offered(64, 4096, 4096)) == config.max_configs  # decode-sized
    assert len(offered(256, 4096, 4096, "float8_e4m3fn")) > 1  # fp8: not measured there
