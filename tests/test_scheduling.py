"""What the CUDA scheduling we install answers that Inductor's would get wrong for our
GEMMs, and what a GEMM-only backend setting still compiles (programs the fuzz found)."""

from __future__ import annotations

import contextlib
import types

import pytest
import torch
from fake_hopper import generated_code
from test_fusion_codegen import backend

from inductor_cutedsl.compat.lazy import CuteDSLTemplateBuffer
from inductor_cutedsl.install import reenabled
from inductor_cutedsl.scheduler import scheduling


def scheduler_node(buffer) -> types.SimpleNamespace:
    node = types.SimpleNamespace(node=buffer)
    node.get_nodes = lambda: [node]
    return node


def test_our_gemms_never_fuse_horizontally(monkeypatch):
    """Inductor hands a pair holding a CuteDSL template to its CuteDSL scheduling, whose
    horizontal rule raises NotImplementedError (a training step's backward met it)."""
    ours = scheduler_node(object.__new__(CuteDSLTemplateBuffer))
    other = scheduler_node(object())
    asked = []
    monkeypatch.setattr(
        scheduling.codegen.cuda_combined_scheduling(), "can_fuse_horizontal", lambda self, a, b: asked.append(1) or True
    )
    sched = object.__new__(scheduling.CuteDSLScheduling)
    assert sched.can_fuse_horizontal(ours, other) is False
    assert sched.can_fuse_horizontal(other, ours) is False
    fused = types.SimpleNamespace(get_nodes=lambda: [other, ours])  # a template with its epilogue
    assert sched.can_fuse_horizontal(other, fused) is False
    assert asked == []
    assert sched.can_fuse_horizontal(other, other) is True and asked == [1], "Inductor's rule for the rest"


def test_the_scheduling_is_installed_with_or_without_epilogue_fusion():
    from torch._inductor.codegen import common

    for fusion, cls in ((False, scheduling.CuteDSLScheduling), (True, scheduling.CuteDSLFusionScheduling)):
        with reenabled(epilogue_fusion=fusion):
            torch.compile(lambda x: x + 1, backend="eager")(torch.ones(2))  # the rest installs at a compile
            assert common.device_codegens["cuda"].scheduling is cls


@pytest.mark.parametrize("split", [True, False])
def test_mm_plus_mm_with_cutedsl_the_only_backend(split):
    """``a @ b + c @ d`` is one mm_plus_mm GEMM for Inductor, which our kernel does not
    take: split (``config.split_mm_plus_mm``), it runs as two of our GEMMs; kept whole,
    with CUTEDSL the only backend, it gets ATen's, as a refused mm does."""
    from inductor_cutedsl import config

    with backend(max_configs=1), config.patch(split_mm_plus_mm=split):
        code = generated_code(
            lambda a, b, c, d: a @ b + c @ d, (256, 512), (512, 256), (256, 512), (512, 256), pattern_matcher=True
        )
    whole = "extern_kernels._mm_plus_mm(arg0_1, arg1_1, arg2_1, arg3_1" in code
    launches = [line for line in code.splitlines() if line.strip().startswith("cutedsl_") and ".run(" in line]
    assert (whole, len(launches)) == ((False, 2) if split else (True, 0))


def test_a_template_fusion_inductor_refused_is_not_benchmarked_again(monkeypatch):
    """Inductor's benchmark of (template, consumer) answers "no" without a callable in
    some rounds and is asked again every fusion round; the hooked rule asks it once per
    scheduler and pair. Accepted pairs, callables and non-template pairs still go through."""
    import types

    from torch._inductor.scheduler import FusionResult, Scheduler

    from inductor_cutedsl.compat import codegen

    asked = []
    answers = {"mm+relu": FusionResult.fuse(False), "mm+exp": FusionResult(callable_fn=lambda: True)}

    def stock(self, node1, node2, **kwargs):
        asked.append((node1.get_name(), node2.get_name()))
        return answers.get(f"{node1.get_name()}+{node2.get_name()}", FusionResult.fuse(False))

    def node(name, template):
        return types.SimpleNamespace(get_name=lambda: name, is_template=lambda: template)

    class Sched:  # Inductor's Scheduler, as far as the hook keeps it (weakly)
        pass

    monkeypatch.setattr(Scheduler, "speedup_by_fusion", stock)
    saved = codegen.install_fusion_hooks(lambda n1, n2: None, lambda s, n1, n2: False)
    try:
        sched, other = Sched(), Sched()
        mm, relu, exp, add = node("mm", True), node("relu", False), node("exp", False), node("add", False)
        for _ in range(3):  # three fusion rounds
            assert Scheduler.speedup_by_fusion(sched, mm, relu).should_fuse is False
            assert Scheduler.speedup_by_fusion(sched, mm, exp).callable_fn is not None
            assert Scheduler.speedup_by_fusion(sched, relu, add).should_fuse is False
        Scheduler.speedup_by_fusion(other, mm, relu)  # another graph's scheduler asks afresh
    finally:
        codegen.restore_fusion_hooks(saved)
    assert asked.count(("mm", "relu")) == 2 and asked.count(("mm", "exp")) == 3 and asked.count(("relu", "add")) == 3
    assert Scheduler.speedup_by_fusion is stock  # restored (monkeypatch restores ours after)


@pytest.mark.parametrize("tune", [None, False, True], ids=["default", "untuned", "tuned"])
def test_inductors_own_fusion_benchmark_tunes_as_stock_unless_asked(tune):
    """Where Inductor's rule measures a fusion (a Triton template and its consumer), the
    consumer's kernel timed alone is tuned by coordinate descent first, as stock does (by
    default: untuned it overstates the unfused way against the graph's tuned kernels);
    ``config.tune_fusion_benchmarks`` off generates it untuned. The graph's own kernels
    keep their tuning either way."""
    from unittest import mock

    from fake_hopper import _Generated, fake_hopper
    from torch._inductor import config as inductor_config
    from torch._inductor.compile_fx import compile_fx
    from torch._subclasses.fake_tensor import FakeTensorMode

    from inductor_cutedsl import config

    timed = []

    def benchmark_fused_nodes(self, nodes):
        source = self.generate_kernel_code_from_nodes(nodes, benchmark_kernel=True)
        timed.append(TUNED in source)
        return 0.05, ""

    def f(x, w):
        return torch.relu(x @ w.t()) * 2, x.sin()

    with (
        fake_hopper(backends="TRITON") as out,
        mock.patch("torch._inductor.scheduler.Scheduler.benchmark_fused_nodes", benchmark_fused_nodes),
        inductor_config.patch(coordinate_descent_tuning=True),
        config.patch(tune_fusion_benchmarks=tune) if tune is not None else contextlib.nullcontext(),
    ):
        with FakeTensorMode():
            args = [torch.empty(s, device="cuda", dtype=torch.bfloat16) for s in ((512, 768), (1024, 768))]
        with pytest.raises(Exception) as raised:
            compile_fx(torch.fx.symbolic_trace(f), args)
        assert isinstance(raised.value, _Generated) or "_Generated" in repr(raised.value)
    assert timed == [tune is not False], "Inductor timed the GEMM's consumer once, untuned only when asked"
    assert TUNED in out["code"], "the graph's own kernels (x.sin()) are tuned as stock tunes them"


#: What a Triton kernel that coordinate descent will tune carries in its metadata.
TUNED = "'coordinate_descent_tuning': True"
