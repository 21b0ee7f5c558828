"""Never worse than stock: a failure planted at each stage of our path (lowering,
candidates, fusion decision, epilogue translation, codegen, kernel build, kernel load,
first launch) leaves the compile going with what stock Inductor does for that GEMM or
that fusion, logs one warning naming the stage, and is recorded for the report; under
``config.strict`` (on in our tests, ``lenient`` turns it off) the same failure raises.

Compiles run on a faked H200 (``fake_hopper``); the launcher's fallbacks run for real on
CPU tensors, through the torch reference of the kernel.
"""

from __future__ import annotations

import ast
import logging

import pytest
import torch
import torch.nn.functional as F
from fake_hopper import generated_code, launched
from helpers import calls_of, package_trees
from test_fusion_codegen import backend, by_backend, kernels
from test_gated import F4, B, D, T, llama_mlp

from inductor_cutedsl import errors
from inductor_cutedsl.compat import codegen, coordesc_prefetch
from inductor_cutedsl.kernels import epilogue as E
from inductor_cutedsl.kernels.config import GemmConfig
from inductor_cutedsl.lowering import choices, gated, gated_rewrite, gemm_choices
from inductor_cutedsl.runtime import generated
from inductor_cutedsl.runtime.spec import KernelSpec
from inductor_cutedsl.scheduler import decisions, scheduling, selection

M, N, K = 1000, 2048, 1024


class Planted(RuntimeError):
    """The planted failure: a bug of ours, not a refusal."""


def planted(*args, **kwargs):
    raise Planted("planted failure")


@pytest.fixture
def warnings_seen(caplog):
    """The fallback warnings logged while the test runs, as (stage, message)."""
    caplog.set_level(logging.WARNING, logger="inductor_cutedsl")
    before = len(errors.fallbacks)

    def seen() -> list[str]:
        return [r["stage"] for r in errors.fallbacks[before:]]

    yield seen
    for record in caplog.records:
        if "falling back to stock Inductor" in record.getMessage():
            assert "Planted: planted failure" in record.getMessage()


def relu_mm(x, w):
    return torch.relu(x @ w.t())


def test_candidates_failure_leaves_stock_choices(monkeypatch, lenient, warnings_seen):
    monkeypatch.setattr(gemm_choices, "gemm_candidates", planted)
    with backend(max_configs=1):
        code = generated_code(relu_mm, (M, K), (N, K), backends="CUTEDSL,ATEN")
    assert kernels(code) == (0, 1) and "extern_kernels.mm" in code
    assert warnings_seen() == ["candidates"]


def test_pruning_failure_keeps_tritons_configs(monkeypatch, lenient, warnings_seen):
    monkeypatch.setattr(choices, "deepest_k_only", planted)
    with backend(max_configs=1):
        code = generated_code(
            relu_mm, (M, K), (N, K), backends="CUTEDSL,TRITON", candidate_ms=by_backend(2.0, 2.0, 1.0)
        )
    assert kernels(code) == (0, 1) and "triton_tem" in code, "the compile went on, and Triton's template won"
    assert warnings_seen() == ["candidates"]


def test_every_fallback_stage_the_package_names_is_a_stage():
    """A fallback at a stage ``errors.fallback`` does not know raises where it should
    fall back: a crash on the rare path it guards. Every stage the package passes, as a
    literal or through a variable (each literal the file assigns to it), must be known."""
    named = []
    for path, tree in package_trees():
        assigned: dict[str, list[str]] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        assigned.setdefault(target.id, []).append(node.value.value)
        for node in calls_of(tree, "fallback"):
            stage, where = node.args[0], f"{path.name}:{node.lineno}"
            if isinstance(stage, ast.Name) and stage.id in assigned:
                named += [(value, where) for value in assigned[stage.id]]
            else:
                assert isinstance(stage, ast.Constant), f"{where}: a stage this test can read"
                named.append((stage.value, where))
    assert len(named) > 20, "the package's fallbacks were found"
    assert [(stage, where) for stage, where in named if stage not in errors.STAGES] == []


def test_lowering_failure_of_the_gated_op_lowers_the_graph_as_it_was(monkeypatch, lenient, warnings_seen):
    monkeypatch.setattr(gated, "candidates", planted)
    with backend():
        code = generated_code(llama_mlp, (B, T, D), (F4, D), (F4, D), (D, F4))
    assert "dual=True" not in code
    assert kernels(code) == (3, 0), "two GEMMs (the product fused into the second) and the down projection"
    assert warnings_seen() == ["lowering"]


def test_rewrite_failure_leaves_the_product_as_written(monkeypatch, lenient, warnings_seen):
    monkeypatch.setattr(gated_rewrite, "_fake_value", planted)
    gm = torch.fx.symbolic_trace(llama_mlp)
    with torch._inductor.config.patch(max_autotune=True):
        assert gated_rewrite.rewrite(gm.graph) == 0
    gm.recompile()
    assert "gated_mm" not in gm.code
    args = [
        torch.randn(4, 8, dtype=torch.float64),
        *(torch.randn(s, dtype=torch.float64) for s in [(6, 8)] * 2),
        torch.randn(8, 6, dtype=torch.float64),
    ]
    torch.testing.assert_close(gm(*args), llama_mlp(*args))
    assert warnings_seen() == ["lowering"]


def test_fusion_decision_failure_lets_inductor_decide(monkeypatch, lenient, warnings_seen):
    monkeypatch.setattr(selection, "decide", planted)
    with backend(max_configs=2):  # two candidates: the GEMM is undecided until fusion
        code = generated_code(relu_mm, (M, K), (N, K))
    assert "relu(acc)" not in code, "nothing of ours was fused"
    assert warnings_seen() == ["fusion decision"]


def test_a_failure_pairing_through_a_view_leaves_inductors_rule(monkeypatch, lenient, warnings_seen):
    """A pair only our view rule forms (here: Inductor's own rule made to refuse GPT-2's
    MLP read through a (B, T, N) view): a failure in that rule's check of the nodes
    between the two leaves the consumer unfused."""
    from inductor_cutedsl import install

    monkeypatch.setattr(codegen, "computed_between", planted)
    b, t = 2, M // 2
    fn = lambda x, w, bias, r: F.gelu(F.linear(x, w, bias), approximate="tanh") + r
    with backend(max_configs=1):
        # Restored before the backend is: leaving it reinstalls the saved rule as Inductor's.
        with monkeypatch.context() as inside:
            inside.setitem(install._saved["fusion_hooks"], "can_fuse_vertical", lambda *a, **k: False)
            code = generated_code(fn, (b, t, K), (N, K), (N,), (b, t, N))
    assert kernels(code) == (1, 1), "our GEMM, then the consumer as Inductor's own kernel"
    assert set(warnings_seen()) == {"fusion decision"}


def test_translation_failure_leaves_the_consumer_unfused(monkeypatch, lenient, warnings_seen):
    monkeypatch.setattr(decisions, "translate_nodes", planted)
    with backend(max_configs=1):
        code = generated_code(relu_mm, (M, K), (N, K))
    assert kernels(code) == (1, 1), "our GEMM, then the relu as Inductor's own kernel"
    assert set(warnings_seen()) == {"epilogue translation"}


def test_codegen_failure_emits_the_gemm_and_its_consumers_unfused(monkeypatch, lenient, warnings_seen):
    monkeypatch.setattr(scheduling, "fuse", planted)
    with backend(max_configs=1):
        code = generated_code(relu_mm, (M, K), (N, K))
    assert kernels(code) == (1, 1) and "relu(acc)" not in code
    assert "empty_strided_cuda((1000, 2048)" in code, "the GEMM's own output is allocated again"
    assert warnings_seen() == ["codegen"]


@pytest.mark.parametrize(
    "stage,inject",
    [
        ("candidates", lambda mp: mp.setattr(gemm_choices, "gemm_candidates", planted)),
        ("codegen", lambda mp: mp.setattr(scheduling, "fuse", planted)),
        ("epilogue translation", lambda mp: mp.setattr(decisions, "translate_nodes", planted)),
    ],
    ids=["candidates", "codegen", "translation"],
)
def test_strict_raises_what_would_fall_back(monkeypatch, stage, inject):
    inject(monkeypatch)
    with backend(max_configs=1), pytest.raises(Exception, match=f"{stage} failed for .*Planted"):
        generated_code(relu_mm, (M, K), (N, K), backends="CUTEDSL,ATEN")


# -- the launcher: kernel build, kernel load, first launch ---------------------------------


SPEC = KernelSpec(GemmConfig(), "bfloat16", "bfloat16", "k", "n", E.addmm(True, "row"))


def _operands():
    torch.manual_seed(0)
    a = torch.randn(40, 64, dtype=torch.bfloat16)
    b = torch.randn(64, 24, dtype=torch.bfloat16)
    c = torch.randn(24, dtype=torch.bfloat16)
    out = torch.full((40, 24), float("nan"), dtype=torch.bfloat16)
    return a, b, c, out


class FailingKernel:
    """A loaded kernel whose launch fails (as a driver error surfaces in Python)."""

    def layout(self, *args, **kwargs):
        raise Planted("planted failure")


@pytest.mark.parametrize(
    "stage,inject",
    [
        ("kernel build", lambda mp: mp.setattr(generated, "build", planted)),
        (
            "kernel load",
            lambda mp: (
                mp.setattr(generated, "build", lambda spec, cache: ("k.o", True)),
                mp.setattr(generated, "get_gemm", planted),
            ),
        ),
        (
            "first launch",
            lambda mp: (
                mp.setattr(generated, "build", lambda spec, cache: ("k.o", True)),
                mp.setattr(generated, "get_gemm", lambda spec, path=None: FailingKernel()),
            ),
        ),
    ],
)
def test_launcher_falls_back_to_the_reference_computation(monkeypatch, lenient, warnings_seen, stage, inject):
    inject(monkeypatch)
    scope: dict = {}
    scope["_launch"] = generated.launcher(SPEC, scalars=(0.5, 2.0), scope=scope)
    a, b, c, out = _operands()
    scope["_launch"](a, b, out, c, stream=None)
    expected = torch.addmm(c.double(), a.double(), b.double(), alpha=0.5, beta=2.0)
    assert ((out.double() - expected).norm() / expected.norm()).item() < 1e-2
    assert warnings_seen() == [stage]
    # From then on the module calls the reference directly: no guard, no second warning.
    scope["_launch"](a, b, out, c, stream=None)
    assert warnings_seen() == [stage]


def test_first_launch_that_succeeds_replaces_its_guard(monkeypatch):
    calls = []

    class Kernel:
        call = staticmethod(lambda *values: calls.append(values))

        def layout(self, a, b, out, out_view, b_up, programmatic):
            return 0, (a.shape[0], b.shape[1], a.shape[1], 1, 64, 24, 24, 0, 0, 0, 132, int(programmatic)), ()

    monkeypatch.setattr(generated, "build", lambda spec, cache: ("k.o", True))
    monkeypatch.setattr(generated, "get_gemm", lambda spec, path=None: Kernel())
    scope: dict = {}
    guard = scope["_launch"] = generated.launcher(SPEC, scalars=(0.5, 2.0), scope=scope)
    a, b, c, out = _operands()
    scope["_launch"](a, b, out, c, stream=7)
    assert len(calls) == 1 and calls[0][-1] == 7
    assert scope["_launch"] is not guard, "after a good first launch the module calls the kernel directly"


def test_strict_launcher_raises(monkeypatch):
    monkeypatch.setattr(generated, "build", planted)
    with pytest.raises(errors.StrictFailure, match="kernel build failed"):
        generated.launcher(SPEC, scalars=(0.5, 2.0), scope={})


def test_unknown_stage_is_refused_under_strict():
    with pytest.raises(ValueError, match="unknown fallback stage"):
        errors.fallback("somewhere", "x", RuntimeError())


def test_unknown_stage_still_falls_back_in_a_users_compile(lenient, warnings_seen):
    """A misnamed stage is a bug of ours: it must not turn a fallback into a crash."""
    errors.fallback("somewhere", "x", Planted("planted failure"))
    assert warnings_seen() == ["somewhere"]


def test_a_failure_listing_the_unfused_consumers_keeps_the_fused_kernel(monkeypatch, lenient, warnings_seen):
    """The report of the consumers left outside a GEMM's epilogue runs while the kernel is
    emitted: its failure costs the report, not the kernel."""
    monkeypatch.setattr(decisions, "consumers", planted)
    fn = lambda x, w: (torch.relu(x @ w.t()), (x @ w.t()).sum(0))
    with backend(max_configs=1):
        code = generated_code(fn, (M, K), (N, K))
    assert "relu(acc)" in code, "the relu is still fused"
    assert "fusion decision" in warnings_seen()


def test_the_gated_chunk_program_that_crashed_compiles(lenient, warnings_seen):
    """A gated MLP written as one gate_up Linear, ``chunk(2, -1)``, then
    ``gelu(gate) * up + residual``, float16 (the program that once crashed the compile)."""

    def fn(x, w, r):
        gate, up = F.linear(x, w).chunk(2, -1)
        return F.gelu(gate) * up + r

    with backend():
        code = generated_code(fn, (1, 669, 496), (2 * 2432, 496), (1, 669, 2432), dtype=torch.float16)
    assert "def call(" in code
    spec = launched(code, 0)["spec"]
    assert spec.dual and "round_" in spec.epilogue.name and "gelu_erf" in spec.epilogue.source
    assert [op.kind for op in spec.epilogue.operands] == ["full"], "the residual is fused too"
    assert warnings_seen() == [], "compiled without falling back"
    # The kernel takes the fused spec (it refused a staged operand in a dual kernel).
    from inductor_cutedsl.kernels.sm90_gemm import Sm90Gemm

    Sm90Gemm(
        spec.config, spec.ab_dtype, spec.out_dtype, spec.a_major, spec.b_major, spec.epilogue, spec.dual, spec.promote
    )


@pytest.fixture
def backend_out(monkeypatch):
    """Our backend taken out for a test that installs it again; afterwards the test's
    patches are undone first, and the backend installed as the suite runs it."""
    import inductor_cutedsl

    inductor_cutedsl.disable()
    yield
    monkeypatch.undo()
    inductor_cutedsl.disable()
    inductor_cutedsl.enable()


def inductor_state() -> tuple:
    """What our install changes in Inductor: the GEMM backends, the choices class, the
    CUDA scheduling and whether the gated MLP's op has a lowering."""
    from torch._inductor.codegen import common
    from torch._inductor.lowering import lowerings

    from inductor_cutedsl.compat import settings

    common.init_backend_registration()
    return (
        settings.autotune_backends(),
        settings.choices_class(),
        common.device_codegens["cuda"],
        torch.ops.inductor_cutedsl.gated_mm.default in lowerings,
    )


@pytest.mark.parametrize(
    "module,step",
    [(coordesc_prefetch, "install"), (codegen, "install_cuda_scheduling")],
    ids=["prefetch", "scheduling"],
)
def test_a_failure_installing_leaves_inductor_as_stock(monkeypatch, lenient, warnings_seen, backend_out, module, step):
    """The rest of the install runs at the first compile (here at once: Inductor is
    imported). A failure there undoes what it had installed, the gated MLP's lowerings
    included (registered before the scheduling): Inductor's settings are stock's again."""
    import inductor_cutedsl
    from inductor_cutedsl import install

    stock = inductor_state()
    assert not stock[-1], "stock has no lowering of the gated op"
    monkeypatch.setattr(module, step, planted)
    inductor_cutedsl.enable()
    assert warnings_seen() == ["install"] and not install.is_enabled()
    assert inductor_state() == stock


def test_the_gated_rewrite_leaves_the_graph_when_the_install_it_starts_fails(monkeypatch):
    """The pre-grad pass can be the first to need the rest of the install: where that
    fails (and undoes the backend), the graph stays as written for stock to lower."""
    import inductor_cutedsl
    from inductor_cutedsl import install

    rewritten = []
    monkeypatch.setattr(gated_rewrite, "rewrite", rewritten.append)
    monkeypatch.setattr(install, "_install_rest", inductor_cutedsl.disable)
    try:
        install._rewrite_gated(torch.fx.Graph())
        assert rewritten == [] and not install.is_enabled()
    finally:
        monkeypatch.undo()
        inductor_cutedsl.enable()


@pytest.mark.parametrize("when", ["at once", "at the import"])
def test_a_failure_installing_the_settings_leaves_inductor_as_stock(
    monkeypatch, lenient, warnings_seen, backend_out, when
):
    """Our settings install as Inductor's config is imported, or at once where it is: a
    failure there undoes the backend and fails neither ``enable()`` nor the import."""
    import inductor_cutedsl
    from inductor_cutedsl import install
    from inductor_cutedsl.compat import lazy, lowerings

    stock = inductor_state()
    monkeypatch.setattr(lowerings, "install_pre_grad_pass", planted)  # the settings' last step
    deferred = {}
    if when == "at the import":
        monkeypatch.setattr(lazy, "loaded", lambda name: False)
        monkeypatch.setattr(lazy, "when_imported", lambda name, fn: (name, deferred.setdefault(name, fn)))
    inductor_cutedsl.enable()
    if when == "at the import":
        assert install.is_enabled() and warnings_seen() == []
        deferred["torch._inductor.config"]()  # what the import runs once the module has loaded
    assert warnings_seen() == ["install"] and not install.is_enabled()
    assert inductor_state() == stock
