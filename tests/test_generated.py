"""The launcher Inductor-generated code calls (no GPU: kernels are stand-ins)."""

from __future__ import annotations

import pytest
import torch

from inductor_cutedsl.kernels import GemmConfig
from inductor_cutedsl.kernels import epilogue as E
from inductor_cutedsl.runtime import KernelSpec, generated
from inductor_cutedsl.runtime import launch as runtime_launch

PAIRED = E.Epilogue(
    "residual",
    "def epilogue(acc, m, n, l, ops):\n    return acc + ops[0]\n",
    (E.EpilogueOperand("r", "full", "bfloat16", pairs=True),),
)
SPEC = KernelSpec(GemmConfig(128, 256, 2, 1), "bfloat16", "bfloat16", "k", "k", PAIRED)
HEAD = 15  # the entry's values before the epilogue operands: 3 pointers, sizes, strides, clusters, programmatic


@pytest.fixture
def ran(monkeypatch) -> list:
    """(the launched spec, the entry's values) per launch, of stand-in kernels: real
    ``CompiledGemm`` argument code, no loaded binary (its C call is recorded)."""
    launches = []

    def stand_in(spec):
        kernel = runtime_launch.CompiledGemm.__new__(runtime_launch.CompiledGemm)
        kernel.spec = spec
        kernel.call = lambda *values: launches.append((spec, list(values)))
        return kernel

    monkeypatch.setattr(generated, "get_gemm", stand_in)
    monkeypatch.setattr(runtime_launch, "max_active_clusters", lambda cluster_size, device: 66)
    return launches


def test_operands_that_break_a_pairs_declaration_run_the_unpaired_kernel(ran):
    launch = generated.launcher(SPEC, (), (((128, 1, 0), 0),))
    a, b, out = torch.empty(64, 32), torch.empty(32, 128), torch.empty(64, 128)
    aligned = torch.empty(64 * 128 + 2, dtype=torch.bfloat16)
    launch(a, b, out, aligned, stream=0)
    launch(a, b, out, aligned[1:], stream=0)  # the view starts 2 bytes in
    base = aligned.data_ptr()
    assert [(spec.epilogue.operands[0].pairs, values[HEAD:-1]) for spec, values in ran] == [
        (True, [base, 128, 1, 0]),
        (False, [base + 2, 128, 1, 0]),
    ]
    assert generated.unpaired(SPEC).epilogue.fingerprint() != SPEC.epilogue.fingerprint()
    assert generated.unpaired(SPEC).epilogue.source == SPEC.epilogue.source


@pytest.mark.parametrize("stream_k", [False, True])
def test_a_programmatic_launcher_asks_for_a_programmatic_launch_every_time(ran, monkeypatch, stream_k):
    """A launcher made ``programmatic`` passes 1 in the entry's programmatic slot (the
    value before the epilogue operands) at its every launch, on the reused path and the
    stream-K one, and one made without passes 0; a stream-K launch's scratch is still
    sized for the resident clusters (the grid's)."""
    scratch = []  # the resident clusters each stream-K launch's scratch is sized for

    def buffers(cfg, clusters, device, stream):
        scratch.append(clusters)
        return torch.empty(1), torch.empty(1), 5

    monkeypatch.setattr(runtime_launch, "stream_k_buffers", buffers)
    spec = KernelSpec(GemmConfig(128, 64, 1, 1, stream_k=stream_k), "bfloat16", "bfloat16", "k", "k", E.IDENTITY)
    on, off = generated.launcher(spec, programmatic=True), generated.launcher(spec)
    for m in (64, 48, 64):  # a new entry, then a reused one
        a, b, out = torch.empty(m, 32), torch.empty(32, 128), torch.empty(m, 128)
        on(a, b, out, stream=0)
        off(a, b, out, stream=0)
    assert [values[HEAD - 1] for _, values in ran] == [1, 0] * 3
    assert scratch == ([66] * 6 if stream_k else [])


def test_the_generated_code_says_whether_its_gemms_launch_programmatically():
    """``config.programmatic_launch`` is read as a graph's code is generated, and the
    code carries it: a compile with it on is a module of its own (Inductor's code cache
    would otherwise hand the second compile the first one's module), and its launcher,
    made from that code, launches programmatically."""
    from inductor_cutedsl import config
    from inductor_cutedsl.lowering.candidate import GemmCandidate

    candidate = GemmCandidate(SPEC, ("c", "a", "b"), ("c",))
    plain = candidate.launcher_source()
    with config.patch(programmatic_launch=True):
        programmatic = candidate.launcher_source()
    assert "programmatic" not in plain and programmatic == plain + ", programmatic=True"
    made = []
    scope = {"launcher": lambda *args, **kwargs: made.append(kwargs.get("programmatic", False))}
    for source in (plain, programmatic):
        exec(f"launcher({source})", {**vars(generated), **scope})
    assert made == [False, True]


def test_operands_that_break_a_staged_declaration_run_the_global_load_kernel(ran):
    epi = E.Epilogue(PAIRED.name, PAIRED.source, (E.EpilogueOperand("r", "full", "bfloat16", staged=True),))
    spec = KernelSpec(GemmConfig(128, 256, 2, 1), "bfloat16", "bfloat16", "k", "k", epi)
    launch = generated.launcher(spec, (), (((128, 1, 0), 0),))
    a, b, out = torch.empty(64, 32), torch.empty(32, 128), torch.empty(64, 128)
    storage = torch.empty(64 * 128 + 8, dtype=torch.bfloat16)
    assert storage.data_ptr() % 16 == 0
    for r in (storage[: 64 * 128], storage[8:], storage[1 : 64 * 128 + 1]):  # 0, 16 and 2 bytes in
        launch(a, b, out, r, stream=0)
    assert [spec.epilogue.operands[0].staged for spec, _ in ran] == [True, True, False]


def test_reused_launch_values_follow_the_alignment_of_each_call(ran):
    """The launcher reuses what it worked out per key; an operand's address alignment
    is part of the key, so a misaligned call between aligned ones (and back) runs the
    unpaired kernel exactly for that call."""
    launch = generated.launcher(SPEC, (), (((128, 1, 0), 0),))
    a, b, out = torch.empty(64, 32), torch.empty(32, 128), torch.empty(64, 128)
    storage = torch.empty(64 * 128 + 16, dtype=torch.bfloat16)
    offsets = [0, 1, 0, 2, 8, 1, 0]  # elements: 0, 2, 0, 4, 16, 2, 0 bytes in
    for i in offsets:
        launch(a, b, out, storage[i:], stream=0)
    assert [spec.epilogue.operands[0].pairs for spec, _ in ran] == [i % 2 == 0 for i in offsets]
    assert [values[HEAD] for _, values in ran] == [storage.data_ptr() + 2 * i for i in offsets]


def _tensors(m: int, n: int, k: int, batch: int | None = None):
    lead = () if batch is None else (batch,)
    a = torch.empty(*lead, m, k, dtype=torch.bfloat16)
    b = torch.empty(*lead, n, k, dtype=torch.bfloat16).transpose(-1, -2)  # column-major B
    return a, b, torch.empty(*lead, m, n, dtype=torch.bfloat16)


MIXED = E.Epilogue(
    "mixed",
    "def epilogue(acc, m, n, l, ops):\n    return ops[0] * acc + ops[1] + ops[2] * ops[3]\n",
    (
        E.EpilogueOperand("s0", "scalar"),
        E.EpilogueOperand("bias", "row", "bfloat16"),
        E.EpilogueOperand("s1", "scalar"),
        E.EpilogueOperand("r", "full", "bfloat16", staged=True),
    ),
)
CASES = {
    "plain": (E.IDENTITY, (), (), None, False),
    "plain_out_view": (E.IDENTITY, (), (), ((256, 1, 0), 64), False),
    "scalars_between_operands": (MIXED, (0.5, 2.0), (), None, False),
    "dual_with_a_bias": (E.bias("row"), (), (), None, True),
}


def _operands(epi: E.Epilogue, m: int, n: int, batch: int | None, shift: int = 0) -> list:
    lead = () if batch is None else (batch,)
    made = []
    for op in epi.operands:
        if op.kind == "row":
            made.append(torch.empty(n, dtype=torch.bfloat16))
        elif op.is_tensor:  # full: ``shift`` elements into its storage
            storage = torch.empty(m * n * (batch or 1) + 8, dtype=torch.bfloat16)
            made.append(storage[shift:][: m * n * (batch or 1)].view(*lead, m, n))
    return made


def _single_batch_stride(rows: int, ld: int) -> int:
    """The L stride passed for one batch of bf16 rows: never read, but TMA wants it
    non-zero and whole 16-byte units (8 elements)."""
    return -(-rows * ld // 8) * 8


def _entry_values(epi, scalars, views, out_view, a, b, out, *tensors, b_up=None, stream) -> list:
    """What the kernel's entry takes for this launch (``Sm90Gemm.make_entry``'s
    parameters), read off the tensors themselves: row-major A, column-major B."""
    batch = a.shape[0] if a.dim() == 3 else 1
    (m, k), n = a.shape[-2:], b.shape[-1]
    lda, ldb = a.stride(-2), b.stride(-1)

    def l_stride(t, rows, ld):
        return t.stride(0) if t.dim() == 3 else _single_batch_stride(rows, ld)

    out_ptr, ldd, out_l = out.data_ptr(), out.stride(-2), l_stride(out, m, out.stride(-2))
    if out_view is not None:
        (ldd, _, out_l), offset = out_view
        out_ptr += offset * out.element_size()
        out_l = out_l if batch > 1 else _single_batch_stride(m, ldd)
    values = [
        a.data_ptr(),
        b.data_ptr(),
        out_ptr,
        m,
        n,
        k,
        batch,
        lda,
        ldb,
        ldd,
        l_stride(a, m, lda),
        l_stride(b, n, ldb),
        out_l,
        66,
        0,  # not a programmatic launch (``config.programmatic_launch`` off)
    ]
    if b_up is not None:
        values += [b_up.data_ptr(), b_up.stride(-1), l_stride(b_up, n, b_up.stride(-1))]
    tensors, scalars = iter(tensors), iter(scalars)
    assert not views, "the cases read every operand as given (no translated view)"
    for op in epi.operands:
        if not op.is_tensor:
            values.append(next(scalars))
            continue
        t = next(tensors)
        full = t.expand(batch, m, n)  # broadcast as the kernel reads it: zero strides
        s_l, s_m, s_n = (0 if size == 1 else stride for size, stride in zip(full.shape, full.stride(), strict=True))
        if op.staged and batch == 1:
            s_l = _single_batch_stride(m, s_m)
        values += [t.data_ptr(), s_m, s_n, s_l]
    return values + [stream]


@pytest.mark.parametrize("case", sorted(CASES))
def test_reused_launch_values_are_each_calls_own(ran, case):
    """One launcher serving every size of a dynamic graph (and alignment of its
    operands) passes, call for call, the values of that call's own tensors; so does a
    launcher that has seen nothing else."""
    epi, scalars, views, out_view, dual = CASES[case]
    spec = KernelSpec(GemmConfig(128, 256, 2, 1), "bfloat16", "bfloat16", "k", "k", epi, dual)
    calls = []
    for m, n, k, batch, shift in [
        (64, 128, 32, None, 0),
        (48, 256, 64, None, 0),
        (64, 128, 32, 3, 0),
        (64, 128, 32, None, 1),
        (64, 128, 32, None, 0),
        (48, 256, 64, None, 1),
    ]:
        a, b, out = _tensors(m, n, k, batch)
        kwargs = {"b_up": _tensors(m, n, k, batch)[1]} if dual else {}
        calls.append(((a, b, out, *_operands(epi, m, n, batch, shift)), kwargs))
    reused = generated.launcher(spec, scalars, views, out_view)
    for args, kwargs in calls:
        reused(*args, stream=7, **kwargs)
        generated.launcher(spec, scalars, views, out_view)(*args, stream=7, **kwargs)
    assert len(ran) == 2 * len(calls)
    expected = [_entry_values(epi, scalars, views, out_view, *args, **kwargs, stream=7) for args, kwargs in calls]
    assert [values for _, values in ran[0::2]] == expected
    assert [values for _, values in ran[1::2]] == expected
    assert ran[0::2] == ran[1::2]  # the same kernels too (paired, staged or not)
    if case == "scalars_between_operands":  # s0, bias (4 values), s1, r (4 values): declaration order
        values = ran[0][1]
        assert [values[HEAD], values[HEAD + 5]] == [0.5, 2.0]
        assert [spec.epilogue.operands[3].staged for spec, _ in ran[0::2]] == [True, True, True, False, True, False]


def test_dual_launch_needs_the_up_weight(ran):
    spec = KernelSpec(GemmConfig(128, 256, 2, 1), "bfloat16", "bfloat16", "k", "k", E.IDENTITY, True)
    a, b, out = _tensors(64, 128, 32)
    with pytest.raises(ValueError, match="up weight"):
        generated.launcher(spec)(a, b, out, stream=0)


def test_launcher_keeps_a_bounded_number_of_entries(ran, monkeypatch):
    monkeypatch.setattr(generated._Entries, "LIMIT", 2)
    launch = generated.launcher(KernelSpec(GemmConfig(128, 256, 2, 1), "bfloat16", "bfloat16", "k", "k", E.IDENTITY))
    for m in (16, 32, 48, 16):
        launch(*_tensors(m, 128, 32), stream=0)
    assert [values[3] for _, values in ran] == [16, 32, 48, 16]
    assert len(launch.__globals__["table"]) <= 2


def test_a_module_imported_in_a_compile_worker_builds_and_loads_nothing(monkeypatch):
    """torch 2.14 on imports each CuteDSL module of a compiled graph in its compile
    workers, only to check its entry points: the module's launcher must not build or
    load the kernel there (a load starts a CUDA context in the worker), and is never
    launched there."""
    from inductor_cutedsl.compat import environment

    def must_not(*args, **kwargs):
        raise AssertionError("built or loaded in a compile worker")

    monkeypatch.setattr(generated, "build", must_not)
    monkeypatch.setattr(generated, "get_gemm", must_not)
    monkeypatch.setattr(generated.artifacts, "record", must_not)
    monkeypatch.setattr(environment, "in_a_compile_worker", lambda: True)
    launch = generated.launcher(SPEC, (), (None,), scope={})
    with pytest.raises(RuntimeError, match="compile worker"):
        launch(None, None, None, None, stream=0)
    assert generated.precompile(a=[128, 64], b=[64, 256], output=[128, 256]) is None
