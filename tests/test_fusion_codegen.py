"""Inductor's generated code with our backend, for a faked H200 (no GPU needed).

See ``fake_hopper``: the lowering, candidate builds, fusion decisions and code
generation are ours and real; only device queries and timings are made up.
"""

from __future__ import annotations

import contextlib
import logging
import re

import pytest
import torch
import torch.nn.functional as F
from fake_hopper import fake_hopper, generated_code, generation, launched

from inductor_cutedsl.install import reenabled

M, N, K = 1000, 2048, 1024
MARK = "inductor_cutedsl.runtime.generated"


@contextlib.contextmanager
def backend(fusion: bool = True, max_configs: int = 2, measure_clear_calls: bool = True):
    """Our backend re-enabled with these settings (two candidates: autotuning leaves the
    GEMM undecided until fusion, the selection path), restored afterwards. The fake
    timings here often make ours clearly fastest; the selection is measured anyway
    unless a test asks for clear calls (``measure_clear_calls=False``, the default of
    the setting)."""
    with reenabled(epilogue_fusion=fusion, max_configs=max_configs, measure_clear_calls=measure_clear_calls):
        yield


@pytest.fixture(params=[True, False], ids=["fusion", "no_fusion"])
def fusion(request):
    with backend(fusion=request.param):
        yield request.param


def by_backend(ours: float, aten: float, triton: float):
    """Fake autotuning times (ms) by each choice's backend."""
    return lambda choice: {"GemmCaller": ours, "ExternKernelCaller": aten}.get(type(choice).__name__, triton)


def kernels(code: str) -> tuple[int, int]:
    """(CuteDSL kernel launches, Triton kernel launches) in the wrapper's ``call``."""
    calls = re.findall(r"^\s+(cutedsl|triton)_\w+\.run\(", code, flags=re.M)
    assert code.count(f"from {MARK} import launcher") >= (1 if "cutedsl" in calls else 0)
    return calls.count("cutedsl"), calls.count("triton")


def test_mm_relu(fusion):
    code = generated_code(lambda x, w: torch.relu(x @ w.t()), (M, K), (N, K))
    if fusion:
        assert kernels(code) == (1, 0)
        assert "relu(acc)" in code
        assert code.count("empty_strided_cuda((1000, 2048)") == 1, "the GEMM's own output is never allocated"
    else:
        assert kernels(code) == (1, 1)


def test_addmm_bias_gelu_composes_the_bias_epilogue(fusion):
    code = generated_code(lambda x, w, b: F.gelu(F.linear(x, w, b), approximate="tanh"), (M, K), (N, K), (N,))
    if fusion:
        assert kernels(code) == (1, 0)
        assert "_gemm_epilogue" in code and "tanh(" in code
    else:
        assert kernels(code) == (1, 1)


def test_kept_gemm_output_is_an_extra_output():
    with backend():
        code = generated_code(lambda x, w: (lambda y: (y, torch.sigmoid(y)))(x @ w.t()), (M, K), (N, K))
    assert kernels(code) == (1, 0)
    assert "kind='out'" in code
    assert code.count("empty_strided_cuda((1000, 2048)") == 2, "both outputs are allocated"


def test_single_candidate_fuses_without_autotuning():
    with backend(max_configs=1):
        code = generated_code(lambda x, w: torch.relu(x @ w.t()) * 2, (M, K), (N, K), fused_ms=9.9)
    assert kernels(code) == (1, 0), "our GEMM is the only implementation: fusing saves a kernel"


def test_fused_candidate_that_measures_slower_is_not_taken(caplog):
    with backend():
        with caplog.at_level(logging.INFO, logger="inductor_cutedsl.scheduler"):
            code = generated_code(lambda x, w: torch.relu(x @ w.t()), (M, K), (N, K), fused_ms=0.2)
    assert kernels(code) == (1, 1), "our GEMM unfused, the epilogue in Triton"
    assert any("GEMM unfused + epilogue kernel" in r.getMessage() for r in caplog.records)


def test_refused_consumer_is_logged_with_its_reason(caplog):
    with backend():
        with caplog.at_level(logging.INFO, logger="inductor_cutedsl.scheduler"):
            code = generated_code(lambda x, w: torch.softmax(x @ w.t(), dim=-1), (M, K), (N, K))
    assert kernels(code)[0] == 1 and kernels(code)[1] >= 1
    messages = [r.getMessage() for r in caplog.records]
    assert any("not fusing" in m and "reduction" in m for m in messages), messages


def test_bias_gemm_with_fused_residual_passes_every_operand_view(fusion):
    """addmm's own bias operand and the fused residual each get their view, in order."""

    fn = lambda x, w, b, r: (F.linear(x, w, b) * 0.5 + r).float()
    code = generated_code(fn, (M, K), (N, K), (N,), (M, N))
    if not fusion:
        assert kernels(code) == (1, 1)
        return
    assert kernels(code) == (1, 0)
    args = launched(code)
    assert args["scalars"] == ()
    assert args["views"] == (None, ((N, 1, 0), 0)), args["views"]
    spec = args["spec"]
    assert spec.out_dtype == "float32"
    # The bias is a row vector (its M stride compiled in as 0, one element per load);
    # the contiguous bf16 residual is staged through shared memory (or, where the
    # config cannot stage it, read two columns per load).
    flags = [(op.kind, op.pairs or op.staged, op.staged) for op in spec.epilogue.operands]
    assert flags == [("row", False, False), ("full", True, spec.config.stages_operands(4))], flags


def launched_spec(code: str):
    """The kernel spec of the first CuteDSL launcher in generated code."""
    return launched(code)["spec"]


def fused_operands(code: str) -> list:
    return list(launched_spec(code).epilogue.operands)


@pytest.mark.parametrize("setting", [True, False], ids=["staged_operands", "paired"])
def test_first_aligned_full_input_is_staged_when_set(setting):
    """With ``staged_operands`` the residual (contiguous bf16, 16-byte rows) is TMA-staged
    instead of paired; the bias stays a global row load; off, nothing is staged."""
    from inductor_cutedsl import config

    fn = lambda x, w, b, r: F.linear(x, w, b) * 0.5 + r
    with config.patch(staged_operands=setting), backend(max_configs=1):  # 128x256 cooperative
        code = generated_code(fn, (4 * M, K), (N, K), (N,), (4 * M, N))
    assert kernels(code) == (1, 0)
    flags = [(op.kind, op.pairs, op.staged) for op in fused_operands(code)]
    assert flags == [("row", False, False), ("full", not setting, setting)], flags


def test_fused_way_stages_the_input_in_whole_tile_store_buffers():
    """Autotuning's fastest has whole-tile store buffers: a residual of the output's
    dtype is staged in them (it keeps its 3 mainloop stages)."""
    from inductor_cutedsl import config

    def timing(choice):  # the whole-tile-buffers candidate fastest, the plain one next
        name = type(choice).__name__
        if name != "GemmCaller":
            return {"ExternKernelCaller": 0.105}.get(name, 0.12)
        return 0.099 if choice.candidate.spec.config.epi_buffers == 4 else 0.10

    fn = lambda x, w, r: torch.relu(x @ w.t()) + r
    with config.patch(staged_operands=True), backend():
        code = generated_code(fn, (4 * M, K), (N, K), (4 * M, N), candidate_ms=timing, fused_ms=0.09)
    assert kernels(code) == (1, 0)
    spec = launched_spec(code)
    assert spec.config.epi_buffers == 4
    assert [op.staged for op in spec.epilogue.operands] == [True]


def test_an_input_that_cannot_share_the_store_buffers_needs_room_of_its_own():
    """The fused way's rule (``fusion.stages``): an input of another dtype than the output
    takes buffers of its own, which whole-tile store buffers leave no room for."""
    from inductor_cutedsl.kernels import GemmConfig
    from inductor_cutedsl.scheduler import fusion

    plain = GemmConfig(128, 256, 2, 1, epi_n=64)
    whole = GemmConfig(128, 256, 2, 1, epi_n=64, epi_buffers=4)
    bf16, fp16 = torch.bfloat16, torch.float16
    assert fusion.stages(plain, bf16, bf16) and fusion.stages(whole, bf16, bf16)
    assert fusion.stages(plain, fp16, bf16) and not fusion.stages(whole, fp16, bf16)
    assert not fusion.stages(GemmConfig(128, 128, 2, 1, True), bf16, bf16)


@pytest.mark.parametrize(
    "strides,offset,dtype,staged",
    [
        ((N, 1, 0), 0, torch.bfloat16, True),
        ((N + 8, 1, 0), 8, torch.float16, True),  # padded rows, 16-byte offset
        ((1004, 1, 0), 0, torch.bfloat16, False),  # 2008-byte rows
        ((N, 1, 0), 4, torch.bfloat16, False),  # 8 bytes into its storage
        ((0, 1, 0), 0, torch.bfloat16, False),  # one row for every m
        ((N, 1, 0), 0, torch.float32, False),
    ],
)
def test_only_inputs_tma_can_load_are_staged(strides, offset, dtype, staged):
    from inductor_cutedsl import config
    from inductor_cutedsl.kernels import GemmConfig
    from inductor_cutedsl.kernels import epilogue as E
    from inductor_cutedsl.runtime import KernelSpec
    from inductor_cutedsl.scheduler import fusion
    from inductor_cutedsl.scheduler.epilogue_translation import OperandRef, Translation

    name = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}[dtype]
    epi = E.Epilogue(
        "r", "def epilogue(acc, m, n, l, ops):\n    return acc + ops[0]\n", (E.EpilogueOperand("in0", "full", name),)
    )
    tr = Translation(epi, (OperandRef("buf1", strides, offset, dtype),), ("buf2",))
    coop, pingpong = (
        KernelSpec(GemmConfig(128, *c), "bfloat16", "bfloat16", "k", "k", epi) for c in ((256, 2, 1), (128, 2, 1, True))
    )
    with config.patch(staged_operands=True):
        assert fusion.staged(epi, 0, tr, coop).operands[0].staged is staged
        assert not fusion.staged(epi, 0, tr, pingpong).operands[0].staged


@pytest.mark.parametrize("bias_shape,kind", [((N,), "row"), ((M, 1), "col"), ((M, N), "full"), ((1, 1), "full")])
def test_addmm_bias_kind_follows_the_bias_layout(bias_shape, kind):
    with backend(fusion=False):
        code = generated_code(lambda x, w, b: torch.addmm(b, x, w.t()), (M, K), (N, K), bias_shape)
    spec = launched_spec(code)
    assert spec.epilogue.name == f"bias_{kind}"


def test_batched_gemm_epilogue(fusion):
    code = generated_code(lambda x, w: 30 * torch.tanh(torch.bmm(x, w) / 30), (4, 296, 128), (4, 128, 520))
    assert kernels(code) == ((1, 0) if fusion else (1, 1))


def test_gated_mlp_fuses_silu_times_gate_into_one_gemm(fusion):
    """silu(x W1ᵀ) * (x W3ᵀ): the product reads the other GEMM's output as an operand."""
    fn = lambda x, w1, w3: F.silu(x @ w1.t()) * (x @ w3.t())
    code = generated_code(fn, (M, K), (N, K), (N, K))
    assert kernels(code) == ((2, 0) if fusion else (2, 1))


def test_fused_candidate_beats_triton_and_cublas_alternatives():
    """Full backends: our fused GEMM is taken when it beats the Triton floor and
    cuBLAS + a separate epilogue."""

    timing = by_backend(ours=0.10, aten=0.105, triton=0.12)

    with backend():
        code = generated_code(
            lambda x, w: torch.relu(x @ w.t()),
            (M, K),
            (N, K),
            candidate_ms=timing,
            fused_ms=0.11,
            backends="ATEN,TRITON,CUTEDSL",
        )
    assert kernels(code) == (1, 0)
    assert "extern_kernels.mm" not in code


def test_faster_fused_triton_template_takes_the_gemm(caplog):
    """A Triton template with the epilogue fused measures fastest: the GEMM is
    finalized as that template, with the epilogue in it."""

    timing = by_backend(ours=0.10, aten=0.105, triton=0.102)

    with backend():
        with caplog.at_level(logging.INFO, logger="inductor_cutedsl.scheduler"):
            code = generated_code(
                lambda x, w: torch.relu(x @ w.t()),
                (M, K),
                (N, K),
                candidate_ms=timing,
                fused_ms=0.11,
                triton_fused_ms=0.103,
                backends="ATEN,TRITON,CUTEDSL",
            )
    assert any("Triton template takes it, fused" in r.getMessage() for r in caplog.records)
    assert kernels(code) == (0, 1), "one Triton template kernel with the epilogue fused"
    assert "extern_kernels.mm" not in code


def test_slower_fused_triton_template_is_not_taken_by_inductor_either(caplog):
    """Ours and Triton fused both lose to cuBLAS + the epilogue kernel: the GEMM stays
    unfused, whatever Inductor's own benchmark of the fused Triton kernel would say."""

    timing = by_backend(ours=0.10, aten=0.09, triton=0.102)

    with backend():
        with caplog.at_level(logging.INFO, logger="inductor_cutedsl.scheduler"):
            code = generated_code(
                lambda x, w: torch.relu(x @ w.t()),
                (M, K),
                (N, K),
                candidate_ms=timing,
                fused_ms=0.2,
                triton_fused_ms=0.18,
                epilogue_ms=0.01,
                backends="ATEN,TRITON,CUTEDSL",
            )
    assert any("GEMM unfused + epilogue kernel" in r.getMessage() for r in caplog.records)
    assert kernels(code) == (0, 1) and "extern_kernels.mm" in code, "cuBLAS, then the epilogue in Triton"


def test_separate_way_runs_the_gemm_that_measured_fastest_side_by_side(caplog):
    """Autotuning rated ours fastest, but side by side cuBLAS + the epilogue kernel won:
    cuBLAS runs, not the autotuning favourite."""

    timing = by_backend(ours=0.10, aten=0.105, triton=0.12)

    side = {"ours_separate": 0.13, "other_separate": 0.12}
    with backend():
        with caplog.at_level(logging.INFO, logger="inductor_cutedsl.scheduler"):
            code = generated_code(
                lambda x, w: torch.relu(x @ w.t()),
                (M, K),
                (N, K),
                candidate_ms=timing,
                fused_ms=0.2,
                side_ms=side,
                backends="ATEN,TRITON,CUTEDSL",
            )
    assert any("GEMM unfused + epilogue kernel" in r.getMessage() for r in caplog.records)
    assert kernels(code) == (0, 1) and "extern_kernels.mm" in code
    # And with ours measured fastest, ours runs unfused.
    with backend():
        code = generated_code(
            lambda x, w: torch.relu(x @ w.t()),
            (M, K),
            (N, K),
            candidate_ms=timing,
            fused_ms=0.2,
            side_ms={"ours_separate": 0.12, "other_separate": 0.13},
            backends="ATEN,TRITON,CUTEDSL",
        )
    assert kernels(code) == (1, 1) and "extern_kernels.mm" not in code


def test_the_selections_modules_skip_coordinate_descent_that_the_graphs_kernels_keep():
    """With coordinate-descent tuning on (max-autotune's modes turn it on), a benchmark
    module's kernel would tune itself at its first timed run, compiling configs in the
    compiling thread for a kernel the graph never runs: the selection's modules are
    generated without it, the graph's own Triton kernels with it."""
    from torch._inductor import config as inductor_config

    timing = by_backend(ours=0.10, aten=0.105, triton=0.12)
    with backend(), inductor_config.patch(coordinate_descent_tuning=True):
        out = generation(
            lambda x, w: torch.relu(x @ w.t()) * 2,
            (M, K),
            (N, K),
            candidate_ms=timing,
            fused_ms=0.2,
            side_ms={"ours_separate": 0.13, "other_separate": 0.12},
            backends="ATEN,TRITON,CUTEDSL",
        )
    modules = [m for m in out["modules"] if "def get_args" in m]
    assert len(modules) == 2, "the epilogue kernel's module and the fused Triton template's"
    assert not any("coordinate_descent_tuning" in m for m in modules)
    assert kernels(out["code"]) == (0, 1), "cuBLAS, then the epilogue in Triton"
    assert "'coordinate_descent_tuning': True" in out["code"], "the graph's epilogue kernel keeps its tuning"
    assert not inductor_config.coordinate_descent_tuning, "the setting is as it was"


#: Host ms of a launch of each of the selection's ways: a separate way launches two
#: kernels, cuBLAS's through cuBLASLt's long host path.
LAUNCHES = {"fused": 0.008, "fused_alt": 0.008, "ours_separate": 0.016, "other_separate": 0.03, "triton_fused": 0.01}


def measured_way(cudagraphs: bool, scale: float = 1.0, **fake) -> tuple[dict, str]:
    """(the selection's record, the generated code) of relu(x @ w.t()) * 2 where cuBLAS
    and the epilogue's kernel run 5% faster on the GPU than ours fused (a GEMM of about
    10 us, short enough for launches to count; ``scale`` times the GPU figures)."""
    from torch._inductor import config as inductor_config

    from inductor_cutedsl.scheduler import selection

    before = len(selection.decisions)
    with inductor_config.patch({"triton.cudagraphs": cudagraphs}):
        out = generation(
            lambda x, w: torch.relu(x @ w.t()) * 2,
            (M, K),
            (N, K),
            candidate_ms=by_backend(ours=0.010 * scale, aten=0.0095 * scale, triton=0.012 * scale),
            fused_ms=0.0105 * scale,
            side_ms={"ours_separate": 0.013 * scale, "other_separate": 0.0100 * scale},
            backends="ATEN,TRITON,CUTEDSL",
            launch_ms=LAUNCHES.__getitem__,
            **fake,
        )
    (row,) = selection.decisions[before:] or [{}]
    return row, out["code"]


@pytest.mark.parametrize("cudagraphs", [False, True])
def test_without_cuda_graphs_each_way_is_charged_its_launches(cudagraphs):
    """Without CUDA graphs, cuBLAS and the epilogue's kernel (0.0100 + 0.03 ms of host) lose
    to ours fused (0.0105 + 0.008): a host-bound step pays each launch. Under CUDA graphs the
    replays drop the host time and the GPU ranking stands."""
    with backend():
        row, code = measured_way(cudagraphs)
    if cudagraphs:
        assert row["way"] == "other_separate" and "host_ms" not in row
        assert kernels(code) == (0, 1), "cuBLAS, then the epilogue in Triton"
    else:
        assert row["way"] == "fused" and row["host_ms"]["other_separate"] == 0.03
        assert kernels(code) == (1, 0), "ours, fused"


def test_a_long_gemms_ways_are_not_charged_their_launches():
    """At 100 us and more the GPU paces the step whatever the launches cost: no launch
    is timed, and the GPU ranking stands without CUDA graphs too."""
    with backend():
        row, code = measured_way(cudagraphs=False, scale=10.0)
    assert row["way"] == "other_separate" and "host_ms" not in row
    assert kernels(code) == (0, 1)


def test_a_host_paced_way_is_not_replayed_under_cuda_graphs(tmp_path):
    """A decision kept in the kernel cache says what it depends on: one taken with the
    launches' host time counted must not decide a compile with CUDA graphs."""
    from inductor_cutedsl import config

    with backend(), config.patch(persist_decisions=True, cache_dir=str(tmp_path)):
        paced, _ = measured_way(cudagraphs=False)
        replayed, code = measured_way(cudagraphs=True)
    assert (paced.get("way"), replayed.get("way")) == ("fused", "other_separate")
    assert kernels(code) == (0, 1)


@pytest.mark.parametrize(
    ("what", "fn", "timing", "clear"),
    [
        ("ours clearly fastest, a bias row", lambda x, w, b: torch.relu(x @ w.t() + b), (0.100, 0.105, 0.12), True),
        ("an M x N input", lambda x, w, r: torch.relu(x @ w.t()) + r, (0.100, 0.105, 0.12), False),
        # cuBLAS then the epilogue's kernel: at least 0.099 + 0.00264 ms (a kernel's gap and
        # 8.2 MB at 5 TB/s), which ours is within autotuning's misordering of.
        ("inside autotuning's misordering", lambda x, w, b: torch.relu(x @ w.t() + b), (0.100, 0.099, 0.12), False),
        ("Triton autotuned faster", lambda x, w, b: torch.relu(x @ w.t() + b), (0.100, 0.120, 0.09), False),
        # Ours autotuned slower than cuBLAS, by less than the epilogue's own kernel takes.
        ("a bias row, cuBLAS faster by less", lambda x, w, b: torch.relu(x @ w.t() + b), (0.0108, 0.0104, 0.12), True),
        # A Triton template takes the epilogue behind its own GEMM: no kernel's cost added.
        ("Triton fuses, a bias row", lambda x, w, b: torch.relu(x @ w.t() + b), (0.0108, 0.12, 0.0109), False),
        # Ours clearly fastest, but the chain quantizes to an 8-bit output: measured.
        (
            "an e4m3 output, a bias row",
            lambda x, w, b: ((x @ w.t() + b) * 2).clamp(-448, 448).to(torch.float8_e4m3fn),
            (0.100, 0.105, 0.12),
            False,
        ),
    ],
    ids=["clear", "mxn-input", "close", "triton-faster", "separate-costs-more", "triton-fuses", "fp8-output"],
)
def test_a_clear_call_is_decided_fused_without_measuring(what, fn, timing, clear, caplog):
    """Where ours autotuned clearly fastest and the chain reads no M x N input, fused
    does strictly less work than every other way: it is taken without building the
    other ways or measuring them. Anything closer is measured."""
    from inductor_cutedsl.scheduler import selection

    third = (N,) if "bias" in what or "misordering" in what or "Triton" in what else (M, N)
    assert (M, N) == (1000, 2048), "the cases' figures are for this output's bytes"
    before = (len(selection.decisions), selection.stats["clear"])
    with backend(measure_clear_calls=False), caplog.at_level(logging.INFO, logger="inductor_cutedsl.scheduler"):
        out = generation(
            fn,
            (M, K),
            (N, K),
            third,
            candidate_ms=by_backend(*timing),
            fused_ms=0.2,
            side_ms={"ours_separate": 0.13, "other_separate": 0.12},
            backends="ATEN,TRITON,CUTEDSL",
        )
    measured = len(selection.decisions) - before[0]
    if clear:
        assert measured == 0 and selection.stats["clear"] == before[1] + 1, what
        assert not [m for m in out["modules"] if "def get_args" in m], "no benchmark module was generated"
        assert kernels(out["code"]) == (1, 0), "ours, fused"
        assert any("a clear call" in r.getMessage() for r in caplog.records)
    else:
        assert measured == 1 and selection.stats["clear"] == before[1], what
        assert selection.decisions[-1]["m_by_n_inputs"] == (1 if "M x N" in what else 0), what


def test_a_failing_measurement_leaves_the_choice_to_inductor(monkeypatch, caplog, lenient):
    import inductor_cutedsl.scheduler.selection as selection

    def broken(*args, **kwargs):
        raise RuntimeError("benchmark crashed")

    monkeypatch.setattr(selection, "side_by_side_runs", broken)
    with backend():
        with caplog.at_level(logging.WARNING, logger="inductor_cutedsl.scheduler"):
            code = generated_code(lambda x, w: torch.relu(x @ w.t()), (M, K), (N, K))
    assert kernels(code) == (1, 1), "compiled anyway: our GEMM unfused, the epilogue in Triton"
    assert any("benchmark crashed" in r.getMessage() for r in caplog.records)


def test_the_selection_builds_each_way_from_the_chain(caplog):
    """The selection's epilogue kernel and fused Triton template are generated from the
    chain (compiling and timing them are faked), and every way is measured."""

    timing = by_backend(ours=0.10, aten=0.105, triton=0.12)

    fn = lambda x, w: torch.relu(x @ w.t()) * 2
    with backend(), caplog.at_level(logging.INFO, logger="inductor_cutedsl.scheduler"):
        with fake_hopper(candidate_ms=timing, epilogue_ms=0.0421, backends="ATEN,TRITON,CUTEDSL") as out:
            from torch._inductor.compile_fx import compile_fx
            from torch._subclasses.fake_tensor import FakeTensorMode

            with FakeTensorMode():
                args = [torch.empty(s, device="cuda", dtype=torch.bfloat16) for s in ((M, K), (N, K))]
            with contextlib.suppress(Exception):  # the harness stops at the wrapper code
                compile_fx(torch.fx.symbolic_trace(fn), args)
    decisions = [r.getMessage() for r in caplog.records if "CuteDSL takes it" in r.getMessage()]
    assert len(decisions) == 1, decisions
    # Ours (0.10 ms) and cuBLAS (0.105 ms) each followed by the 0.0421 ms epilogue kernel.
    assert "ours_separate 0.142" in decisions[0] and "other_separate 0.147" in decisions[0], decisions
    assert "triton_fused 0.2000 ms" in decisions[0], decisions
    epilogue = [m for m in out["modules"] if "def get_args" in m and "tl.dot" not in m and "maximum" in m]
    triton_fused = [m for m in out["modules"] if "tl.dot" in m and "maximum" in m]
    assert epilogue and triton_fused, "the epilogue kernel and the fused Triton template were generated"
    assert kernels(out["code"]) == (1, 0)
    # The record keeps what autotuning said before the measurement and what the chain
    # reads (a constant: no tensor input), for rules checked against measured decisions.
    from inductor_cutedsl.scheduler import selection

    record = selection.decisions[-1]
    # Ours' 0.10 ms plus the harness's 1e-5 ms per choice ahead of it in the list.
    assert record["autotune_ms"]["ours"] == pytest.approx(0.10, abs=5e-4) and record["way"] == "fused"
    assert record["autotune_ms"]["other"] == 0.105
    assert record["m_by_n_inputs"] == 0 and record["kept"] == 0


def test_fused_builds_start_before_the_first_decision(monkeypatch):
    """The selection's fused kernel is already building, and its benchmark modules (the
    epilogue kernel, the fused Triton template) compiling, when the decision needs
    them, so several GEMMs' builds and compiles overlap instead of queueing; each
    module is compiled once."""
    import concurrent.futures

    import inductor_cutedsl.scheduler.selection as selection
    from inductor_cutedsl.compat import codegen

    events = []
    nodes_module = codegen.nodes_module

    def compiled(scheduler, nodes, triton_choice=None):
        events.append(("module", tuple(n.get_name() for n in nodes), triton_choice is not None))
        return nodes_module(scheduler, nodes, triton_choice)

    monkeypatch.setattr(codegen, "nodes_module", compiled)

    def build_async(spec, cache, workers):
        events.append(("build", spec.key()))
        done = concurrent.futures.Future()
        done.set_result((None, False, 0.0))
        return done

    decide = selection.decide
    monkeypatch.setattr(selection.compiler, "build_async", build_async)
    monkeypatch.setattr(selection, "decide", lambda *a: (events.append(("decide", None)), decide(*a))[1])
    with backend():
        code = generated_code(lambda x, w: torch.relu(x @ w.t()) * 2, (M, K), (N, K), backends="ATEN,TRITON,CUTEDSL")
    assert kernels(code) == (1, 0)
    fused_key = launched_spec(code).key()
    # Candidate builds at lowering, then the fused one before the decision (and again,
    # a cache hit, when the fused kernel is generated).
    decided = events.index(("decide", None))
    assert events.index(("build", fused_key)) < decided, events
    modules = [e for e in events if e[0] == "module"]
    assert len(modules) == 2 and len(set(modules)) == 2, events  # the epilogue, the fused Triton template
    epilogue, triton = sorted(modules, key=lambda m: m[2])
    assert not epilogue[2] and triton[2]
    # The epilogue needs no timings: it compiles ahead. The fused Triton template is the
    # fastest Triton choice's, known once the GEMM has autotuned, at its decision.
    assert events.index(epilogue) < decided < events.index(triton), events


def test_no_gemm_is_autotuned_ahead_of_its_own_decision(monkeypatch):
    """Early work reads no timings: a GEMM not yet autotuned is autotuned by its own
    decision (or after fusion, as stock does), not at the graph's first fusion check,
    where its autotuning would wait for every precompile queued. Its fused build still
    starts at that first check, ahead of the first decision."""
    import concurrent.futures

    from torch._inductor.ir import MultiTemplateBuffer

    import inductor_cutedsl.scheduler.selection as selection

    events = []
    timings = MultiTemplateBuffer.choice_timings

    def choice_timings(self, *args, **kwargs):
        if None not in self._choice_timings:
            events.append(("autotune", self.get_name()))
        return timings(self, *args, **kwargs)

    def build_async(spec, cache, workers):
        if spec.epilogue.name != "identity":
            events.append(("fused build", spec.key()))
        done = concurrent.futures.Future()
        done.set_result((None, False, 0.0))
        return done

    decide = selection.decide
    monkeypatch.setattr(MultiTemplateBuffer, "choice_timings", choice_timings)
    monkeypatch.setattr(selection.compiler, "build_async", build_async)

    def deciding(*args):
        events.append(("decide", args[1].node.get_name()))
        return decide(*args)

    monkeypatch.setattr(selection, "decide", deciding)

    def two(x, w1, w2, r):
        return torch.relu(x @ w1.t()) + r, torch.sigmoid(x @ w2.t()) * r

    with backend():
        code = generated_code(two, (M, K), (N, K), (N, K), (M, N), backends="ATEN,TRITON,CUTEDSL")
    assert kernels(code)[0] == 2, code
    decides = [name for kind, name in events if kind == "decide"]
    assert len(decides) == 2, events
    first = events.index(("decide", decides[0]))
    assert [e for e in events[:first] if e[0] == "autotune"] == [], events
    assert ("autotune", decides[1]) in events[first:], events
    builds = {name for kind, name in events[:first] if kind == "fused build"}
    assert len(builds) == 2, f"both GEMMs' fused builds start before the first decision: {events}"


def test_our_other_schedule_fused_can_take_the_gemm(caplog):
    """Fused, our fastest candidate of the other consumer schedule (pingpong against
    cooperative: one warpgroup's epilogue overlaps the other's mainloop) measures
    faster than our fastest candidate, and is the one rendered."""
    from inductor_cutedsl import config
    from inductor_cutedsl.kernels.config import shortlist

    # Paired loads: with the residual staged, ``fused`` would be the fastest cooperative
    # candidate (the one that can stage it) and ``fused_alt`` the pingpong fastest.
    with config.patch(staged_operands=False), backend(max_configs=3):
        with caplog.at_level(logging.INFO, logger="inductor_cutedsl.scheduler"):
            code = generated_code(
                lambda x, w, r: torch.relu(x @ w.t()) + r,
                (M, K),
                (N, K),
                (M, N),
                fused_ms=0.2,
                side_ms={"fused_alt": 0.12},
            )
    decisions = [r.getMessage() for r in caplog.records if "CuteDSL takes it" in r.getMessage()]
    assert len(decisions) == 1 and "fused_alt 0.1200 ms" in decisions[0], decisions
    assert kernels(code) == (1, 0)
    spec = launched_spec(code)
    fastest = shortlist(M, N, K, limit=3)[0]  # the fake autotuning rates them in this order
    assert spec.config.pingpong != fastest.pingpong and spec.epilogue.operands, spec


B, T = 2, M // 2  # a model's (batch, tokens): its Linear layers run (B*T, K) GEMMs


def test_consumer_of_a_3d_view_fuses_with_its_residual():
    """GPT-2's MLP: gelu(x @ W^T + b) + r with x, r of shape (B, T, .): Inductor sees
    the GEMM's (B*T, N) output read through the consumer's (B, T, N) loops, and our
    translation proves it element-for-element; the kernel writes the (B, T, N) buffer."""
    fn = lambda x, w, b, r: F.gelu(F.linear(x, w, b), approximate="tanh") + r
    with backend():
        code = generated_code(fn, (B, T, K), (N, K), (N,), (B, T, N))
    assert kernels(code) == (1, 0)
    args = launched(code)
    assert args["views"] == (None, ((N, 1, 0), 0))
    assert args["out_view"] == ((N, 1, 0), 0)
    assert f"empty_strided_cuda(({B}, {T}, {N})" in code and f"empty_strided_cuda(({M}, {N})" not in code


def test_consumer_in_a_head_view_fuses():
    """A gate read in the (B, T, H, D) view of the output: a pure reshape of (B*T, N)."""
    fn = lambda x, w, g: F.silu((x @ w.t()).view(B, T, 16, N // 16)) * g
    with backend():
        code = generated_code(fn, (B, T, K), (N, K), (B, T, 16, N // 16))
    assert kernels(code) == (1, 0)
    assert launched(code)["views"] == (((N, 1, 0), 0),)


def test_view_that_is_no_reshape_is_refused_with_its_reason(caplog):
    """Heads moved before tokens ((B, H, T, D) from a (B*T, N) GEMM) is not a reshape of
    the output's rows: the consumer stays a Triton kernel, and the log says why."""
    fn = lambda x, w, y: (x @ w.t()).view(B, T, 16, N // 16).transpose(1, 2) + y
    with caplog.at_level(logging.INFO, logger="inductor_cutedsl.scheduler"), backend():
        code = generated_code(fn, (B, T, K), (N, K), (B, 16, T, N // 16))
    assert kernels(code) == (1, 1)
    messages = [r.getMessage() for r in caplog.records if "not fusing" in r.getMessage()]
    assert any(re.search("pure reshape|element-for-element|not linear", m) for m in messages), messages


def test_the_layers_of_a_model_measure_each_gemm_and_epilogue_once(monkeypatch):
    """Two layers of one graph with the same GEMM and epilogue: the first layer's GEMM is
    measured, the second takes its way (both fused); a GEMM with another epilogue is
    measured on its own."""
    import inductor_cutedsl.scheduler.selection as selection

    measured = []
    real = selection.side_by_side_runs

    def counted(scheduler, template, *args):
        measured.append(template.node.get_name())
        return real(scheduler, template, *args)

    monkeypatch.setattr(selection, "side_by_side_runs", counted)

    def layers(x, w1, w2, w3):
        h = torch.relu(x @ w1.t())
        h = torch.relu(h @ w2.t())  # the same GEMM and epilogue as the first layer's
        return torch.sigmoid(h @ w3.t())  # another epilogue

    reused = selection.stats["reused"]
    with backend():
        code = generated_code(layers, (M, K), (K, K), (K, K), (K, K), fused_ms=0.05)
    assert len(measured) == 2 and selection.stats["reused"] == reused + 1, measured
    # Three fused launches; the two layers' kernels share one definition (one source).
    assert kernels(code) == (3, 0) and "relu(acc)" in code and "sigmoid" in code


def test_a_view_pair_our_translation_refuses_is_never_handed_to_a_triton_template():
    """Rotary embedding on a projection's heads: the consumer reads the GEMM output
    through a transposing view and at another column (rotate_half). Inductor's own rules
    do not pair it; our view rule admits it for our translation, which refuses it here.
    It must then stay unfused: a Triton template's epilogue reads the consumer's loads
    of the GEMM output as its accumulator at the same element, so fused it computes
    ``-acc`` where rotate_half reads the other half's column (a wrong number)."""
    timing = by_backend(ours=0.118, aten=0.10, triton=0.104)  # ours outside the screen
    t, h, d = 256, 16, 64

    def rope(x, w, cos, sin):
        q = (x @ w.t()).view(t, h, d).transpose(0, 1)
        rotated = torch.cat((-q.narrow(-1, d // 2, d // 2), q.narrow(-1, 0, d // 2)), -1)
        return q * cos + rotated * sin

    with backend():
        out = generation(
            rope,
            (t, 1024),
            (h * d, 1024),
            (t, d),
            (t, d),
            candidate_ms=timing,
            triton_fused_ms=0.05,  # Inductor's benchmark would take the fused template
            epilogue_ms=0.02,
            backends="ATEN,TRITON,CUTEDSL",
        )
    fused_templates = re.findall(r"def (triton_tem_fused\w*)\(", out["code"])
    assert not any("cat" in name or "mul" in name for name in fused_templates), fused_templates
