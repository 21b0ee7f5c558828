"""Kernel correctness on the GPU against a float64 reference."""

from __future__ import annotations

import pytest
import torch
from helpers import matrix, poisoned, rel_err

from inductor_cutedsl.kernels import GemmConfig
from inductor_cutedsl.kernels import epilogue as E

pytestmark = pytest.mark.gpu

# bf16/fp16 operands, fp32 accumulate: rounding the output dominates (~2e-3).
TOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3, torch.float32: 2e-3}

CONFIGS = [
    GemmConfig(128, 256, 2, 1, False, True, 1),
    GemmConfig(128, 128, 1, 2, True, False, 1),
    GemmConfig(256, 128, 2, 2, False, False, 8, 64),
    GemmConfig(64, 256, 2, 1, True, True, 8),
    GemmConfig(128, 256, 1, 2, False, False, 8, 64, 4),  # a whole tile of store buffers
    GemmConfig(128, 256, 2, 1, False, False, 8, 64, stream_k=True),
]
STREAM_K = CONFIGS[-1]
SHAPES = [  # (M, N, K): odd, tiny, non-multiples and multiples of 4096
    (1, 4096, 4096),
    (17, 1000, 4095),
    (1000, 17, 4096),
    (4095, 4096, 1000),
    (4096, 4095, 17),
    (4096, 1, 8192),
    (1000, 1000, 1),
    (8192, 4096, 4096),
    # A last row of tiles with 4 rows: its second warpgroup's rows all past M (it
    # skips its wgmmas) in 128- and 256-row tiles alike.
    (4100, 264, 520),
]
MAJORS = [(True, True), (True, False), (False, True), (False, False)]


def reference(a, b, *, batch=False):
    return torch.matmul(a.double(), b.double())


def expected_refusal(m, n, k, a_row, b_row) -> bool:
    """The 16-byte rule, worked out independently of the kernel's own check."""
    a_ld = k if a_row else m
    b_ld = n if b_row else k
    return a_ld % 8 != 0 or b_ld % 8 != 0 or n % 8 != 0


def run_case(m, n, k, a_row, b_row, cfg, dtype=torch.bfloat16, out_dtype=None, batch=None):
    from inductor_cutedsl.runtime import gemm, gemm_reason

    out_dtype = out_dtype or dtype
    a = matrix(m, k, a_row, dtype, batch)
    b = matrix(k, n, b_row, dtype, batch)
    out = poisoned((*(() if batch is None else (batch,)), m, n), out_dtype)
    reason = gemm_reason(a, b, out)
    if expected_refusal(m, n, k, a_row, b_row):
        assert reason is not None, "misaligned input was not refused"
        with pytest.raises(ValueError, match="cannot run"):
            gemm(a, b, out=out, config=cfg)
        return
    assert reason is None, reason
    gemm(a, b, out=out, config=cfg)
    torch.cuda.synchronize()
    err = rel_err(out, reference(a, b))
    assert err < TOL[out_dtype], f"rel err {err:.2e}"


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.name())
@pytest.mark.parametrize("a_row,b_row", MAJORS, ids=lambda x: "row" if x else "col")
@pytest.mark.parametrize("m,n,k", SHAPES, ids=lambda x: str(x))
def test_gemm_shapes_majors(m, n, k, a_row, b_row, cfg):
    run_case(m, n, k, a_row, b_row, cfg)


@pytest.mark.parametrize(
    "dtype,out_dtype",
    [
        (torch.float16, torch.float16),
        (torch.bfloat16, torch.float32),
        (torch.float16, torch.float32),
        (torch.float16, torch.bfloat16),
    ],
)
@pytest.mark.parametrize("cfg", CONFIGS[:2], ids=lambda c: c.name())
def test_gemm_dtypes(dtype, out_dtype, cfg):
    run_case(1000, 4096, 4096, True, False, cfg, dtype, out_dtype)
    run_case(4095, 1000, 4096, False, True, cfg, dtype, out_dtype)


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.name())
@pytest.mark.parametrize("a_row,b_row", MAJORS, ids=lambda x: "row" if x else "col")
def test_gemm_batched(a_row, b_row, cfg):
    run_case(1000, 1024, 512, a_row, b_row, cfg, batch=3)
    run_case(128, 4096, 4096, a_row, b_row, cfg, batch=5)


def test_gemm_strided_views():
    """Sub-matrix views (leading stride larger than the width) run correctly."""
    from inductor_cutedsl.runtime import gemm

    big_a = torch.randn(3000, 5000, device="cuda", dtype=torch.bfloat16)
    big_b = torch.randn(4096, 2048, device="cuda", dtype=torch.bfloat16)
    a = big_a[8:2008, 16:4016]  # 2000 x 4000, ld 5000
    b = big_b[:4000, 40:1040]  # 4000 x 1000, ld 2048
    out_full = poisoned((2000, 1024), torch.bfloat16)
    out = out_full[:, :1000]
    gemm(a, b, out=out, config=CONFIGS[0])
    torch.cuda.synchronize()
    assert rel_err(out, reference(a, b)) < 1e-2
    assert out_full[:, 1000:].isnan().all(), "kernel wrote past N"


EPILOGUES = [
    ("bias_row", E.bias("row"), lambda acc, ops: acc + ops[0]),
    ("bias_col", E.bias("col"), lambda acc, ops: acc + ops[0]),
    (
        "bias_row_gelu_tanh",
        E.bias_activation("gelu_tanh"),
        lambda acc, ops: torch.nn.functional.gelu(acc + ops[0], approximate="tanh"),
    ),
    ("bias_row_relu", E.bias_activation("relu"), lambda acc, ops: torch.relu(acc + ops[0])),
    ("bias_col_silu", E.bias_activation("silu", "col"), lambda acc, ops: torch.nn.functional.silu(acc + ops[0])),
    (
        "bias_row_gelu_erf_fp32",
        E.bias_activation("gelu_erf", "row", "float32"),
        lambda acc, ops: torch.nn.functional.gelu(acc + ops[0]),
    ),
    ("addmm_full", E.addmm(True, "full"), lambda acc, ops: ops[1] * acc + ops[2] * ops[0]),
]


def operand_for(decl, m, n, batch):
    dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[decl.dtype]
    shape = {"row": (n,), "col": (m, 1), "full": (m, n)}[decl.kind]
    return torch.randn(*shape, device="cuda").to(dtype)


@pytest.mark.parametrize("name,epi,ref_fn", EPILOGUES, ids=[e[0] for e in EPILOGUES])
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.name())
@pytest.mark.parametrize("m,n,k", [(1000, 4095 + 1, 1000), (4095, 1000, 4096)], ids=str)
def test_epilogues(name, epi, ref_fn, cfg, m, n, k):
    from inductor_cutedsl.runtime import gemm

    a = matrix(m, k, True, torch.bfloat16)
    b = matrix(k, n, False, torch.bfloat16)
    ops = [operand_for(d, m, n, 1) if d.is_tensor else (0.75 if d.name == "alpha" else -1.5) for d in epi.operands]
    out = poisoned((m, n), torch.bfloat16)
    gemm(a, b, *ops, out=out, config=cfg, epilogue=epi)
    torch.cuda.synchronize()
    ref = ref_fn(reference(a, b), [o.double() if torch.is_tensor(o) else o for o in ops])
    assert rel_err(out, ref) < 1e-2


@pytest.mark.parametrize("k", [64, 512, 1000], ids=lambda k: f"k{k}")
def test_epilogue_batched_full_operand(k):
    """A full (L, M, N) residual indexes the batch correctly, whether its L2 prefetch
    is issued at the first k-tile (K of one or eight k-tiles) or later."""
    from inductor_cutedsl.runtime import gemm

    epi = E.Epilogue(
        "residual",
        "def epilogue(acc, m, n, l, ops):\n    return acc + ops[0]\n",
        (E.EpilogueOperand("r", "full", "bfloat16"),),
    )
    a = matrix(1000, k, True, torch.bfloat16, batch=3)
    b = matrix(k, 1024, True, torch.bfloat16, batch=3)
    r = torch.randn(3, 1000, 1024, device="cuda").to(torch.bfloat16)
    out = poisoned((3, 1000, 1024), torch.bfloat16)
    gemm(a, b, r, out=out, config=CONFIGS[1], epilogue=epi)
    torch.cuda.synchronize()
    assert rel_err(out, reference(a, b) + r.double()) < 1e-2


def paired(expr: str, dtype: str = "bfloat16") -> E.Epilogue:
    return E.Epilogue(
        f"paired_{dtype}",
        f"def epilogue(acc, m, n, l, ops):\n    return {expr}\n",
        (E.EpilogueOperand("r", "full", dtype, pairs=True),),
    )


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.name())
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("batch", [None, 3], ids=["2d", "batched"])
def test_paired_operand_loads(cfg, dtype, batch):
    """Operands read two columns per load: odd M, N not a tile multiple, rows padded
    (an M stride above N), the batch indexed; elements past M/N never read wrongly."""
    check_silu_gate(paired, cfg, dtype, batch, 999, 1000, 520)


def check_silu_gate(declare, cfg, dtype, batch, m, n, k):
    """silu(A @ B) * gate against float64, the gate's rows padded (an M stride above N)
    and declared by ``declare(expression, dtype name)``; the output poisoned first."""
    from inductor_cutedsl.runtime import gemm

    a = matrix(m, k, True, dtype, batch=batch)
    b = matrix(k, n, False, dtype, batch=batch)
    lead = () if batch is None else (batch,)
    r = torch.randn(*lead, m, n + 24, device="cuda").to(dtype)[..., :n]
    out = poisoned((*lead, m, n), dtype)
    epi = declare("silu(acc) * ops[0]", {torch.bfloat16: "bfloat16", torch.float16: "float16"}[dtype])
    gemm(a, b, r, out=out, config=cfg, epilogue=epi)
    torch.cuda.synchronize()
    assert rel_err(out, torch.nn.functional.silu(reference(a, b)) * r.double()) < 1e-2


def test_launcher_runs_the_unpaired_kernel_for_a_misaligned_operand():
    """Generated code declares pairs from Inductor's layouts; a tensor that breaks the
    declaration at run time (here a view 2 bytes into its storage) still computes right."""
    check_launcher_falls_back(paired("acc + ops[0]"), CONFIGS[0])


def check_launcher_falls_back(epi: E.Epilogue, cfg: GemmConfig) -> None:
    """A residual 0 and 2 bytes into its storage, through the generated-code launcher:
    both computed right (the second by the kernel that reads it one element per load)."""
    from inductor_cutedsl.runtime import KernelSpec, generated

    m, n, k = 512, 1024, 256
    a, b = matrix(m, k, True, torch.bfloat16), matrix(k, n, True, torch.bfloat16)
    storage = torch.randn(m * n + 1, device="cuda").to(torch.bfloat16)
    spec = KernelSpec(cfg, "bfloat16", "bfloat16", "k", "n", epi)
    launch = generated.launcher(spec, (), (((n, 1, 0), 0),))
    for r in (storage[: m * n], storage[1:]):
        out = poisoned((m, n), torch.bfloat16)
        launch(a, b, out, r, stream=torch.cuda.current_stream().cuda_stream)
        torch.cuda.synchronize()
        assert rel_err(out, reference(a, b) + r.view(m, n).double()) < 1e-2


def test_launcher_reuse_across_sizes_alignments_and_a_cuda_graph():
    """One launcher, as a generated module holds it, reuses what it worked out per
    (sizes, strides, operand alignment): other sizes of a dynamic graph and a residual
    2 bytes into its storage (the unpaired kernel) between aligned ones compute right,
    and so do replays of its launch captured in a CUDA graph, on new data."""
    from inductor_cutedsl.runtime import KernelSpec, generated

    n, k = 1024, 256
    spec = KernelSpec(CONFIGS[0], "bfloat16", "bfloat16", "k", "n", paired("acc + ops[0]"))
    launch = generated.launcher(spec)  # the residual read as given: its sizes and strides are keyed
    b = matrix(k, n, True, torch.bfloat16)
    for m, shift in [(512, 0), (300, 0), (512, 1), (300, 1), (512, 0), (300, 0)]:
        a = matrix(m, k, True, torch.bfloat16)
        r = torch.randn(m * n + 1, device="cuda").to(torch.bfloat16)[shift : shift + m * n].view(m, n)
        out = poisoned((m, n), torch.bfloat16)
        launch(a, b, out, r, stream=torch.cuda.current_stream().cuda_stream)
        torch.cuda.synchronize()
        assert rel_err(out, reference(a, b) + r.double()) < 1e-2, (m, shift)
    a, r = matrix(512, k, True, torch.bfloat16), matrix(512, n, True, torch.bfloat16)
    out = poisoned((512, n), torch.bfloat16)
    check_graph_replays(
        lambda: launch(a, b, out, r, stream=torch.cuda.current_stream().cuda_stream),
        (a, r),
        out,
        lambda: reference(a, b) + r.double(),
    )


def check_graph_replays(run, inputs, out, expected, replays: int = 3) -> None:
    """``run()`` captured in a CUDA graph; each replay, on new ``inputs``, writes ``out``
    as ``expected()`` says."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    for _ in range(replays):
        for t in inputs:
            t.copy_(torch.randn_like(t, dtype=torch.float32))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert rel_err(out, expected()) < 1e-2


def staged(expr: str, dtype: str = "bfloat16", *extra: E.EpilogueOperand) -> E.Epilogue:
    return E.Epilogue(
        f"staged_{dtype}",
        f"def epilogue(acc, m, n, l, ops):\n    return {expr}\n",
        (E.EpilogueOperand("r", "full", dtype, staged=True), *extra),
    )


# Operands of the output's dtype: staged in the store buffers (whole-tile buffers too).
STAGED_CONFIGS = [c for c in CONFIGS if c.stages_operands(shared=True)]


@pytest.mark.parametrize("cfg", STAGED_CONFIGS, ids=lambda c: c.name())
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("batch", [None, 3], ids=["2d", "batched"])
@pytest.mark.parametrize("m,n,k", [(999, 1000, 520), (4095, 4096, 64), (8192, 4096, 4096)], ids=str)
def test_staged_operand(cfg, dtype, batch, m, n, k):
    """An operand TMA-loaded into shared memory by the producer and read with ldmatrix:
    odd M, N not a tile multiple, rows padded, one k-tile, several tiles per CTA (the
    buffers cycle across tiles), the batch indexed; every element written."""
    check_silu_gate(staged, cfg, dtype, batch, m, n, k)


@pytest.mark.parametrize(
    "in_dtype,op_dtype,out_dtype",
    [(torch.bfloat16, torch.bfloat16, torch.float32), (torch.bfloat16, torch.float16, torch.bfloat16)],
    ids=["fp32_out", "fp16_operand"],
)
@pytest.mark.parametrize("m,n,k", [(999, 1000, 520), (8192, 4096, 4096)], ids=str)
def test_staged_operand_of_another_dtype_than_the_output(in_dtype, op_dtype, out_dtype, m, n, k):
    """An operand whose dtype differs from the output's cannot share the store buffers:
    it gets sub-tile buffers of its own (one mainloop stage fewer)."""
    from inductor_cutedsl.runtime import gemm

    cfg = STAGED_CONFIGS[0]
    assert cfg.stages_operands(out_dtype.itemsize)
    a, b = matrix(m, k, True, in_dtype), matrix(k, n, False, in_dtype)
    r = torch.randn(m, n + 24, device="cuda").to(op_dtype)[:, :n]
    out = poisoned((m, n), out_dtype)
    epi = staged("silu(acc) * ops[0]", {torch.bfloat16: "bfloat16", torch.float16: "float16"}[op_dtype])
    gemm(a, b, r, out=out, config=cfg, epilogue=epi)
    torch.cuda.synchronize()
    assert rel_err(out, torch.nn.functional.silu(reference(a, b)) * r.double()) < 1e-2


def test_staged_operand_beside_a_bias_and_a_kept_output():
    """The staged operand with a row bias read from global memory and an extra output."""
    from inductor_cutedsl.runtime import gemm

    epi = staged(
        "(relu(acc + ops[1]) + ops[0], acc + ops[1])",
        "bfloat16",
        E.EpilogueOperand("bias", "row", "bfloat16"),
        E.EpilogueOperand("pre", "out", "bfloat16"),
    )
    m, n, k = 1000, 2048, 1000
    a, b = matrix(m, k, True, torch.bfloat16), matrix(k, n, False, torch.bfloat16)
    r = torch.randn(m, n, device="cuda").to(torch.bfloat16)
    bias = torch.randn(n, device="cuda").to(torch.bfloat16)
    pre, out = poisoned((m, n), torch.bfloat16), poisoned((m, n), torch.bfloat16)
    gemm(a, b, r, bias, pre, out=out, config=STAGED_CONFIGS[0], epilogue=epi)
    torch.cuda.synchronize()
    ref_pre = reference(a, b) + bias.double()
    assert rel_err(pre, ref_pre) < 1e-2
    assert rel_err(out, torch.relu(ref_pre) + r.double()) < 1e-2


def test_staged_operand_misaligned_is_refused_and_the_launcher_falls_back():
    """A view 2 bytes into its storage cannot be TMA-loaded: the runtime API refuses
    it, generated code runs the kernel that reads it from global memory instead."""
    from inductor_cutedsl.runtime import gemm

    epi = staged("acc + ops[0]")
    a, b = matrix(512, 256, True, torch.bfloat16), matrix(256, 1024, True, torch.bfloat16)
    misaligned = torch.randn(512 * 1024 + 1, device="cuda").to(torch.bfloat16)[1:].view(512, 1024)
    with pytest.raises(ValueError, match="TMA staging"):
        gemm(a, b, misaligned, config=STAGED_CONFIGS[0], epilogue=epi)
    check_launcher_falls_back(epi, STAGED_CONFIGS[0])


# With 2-CTA clusters of 256 x 256 output on the H200's 66 cluster slots: the last
# wave's tiles (R of them) split over the slots, at most 4 shares per tile. R = 50
# with 64 k-tiles; R = 1 (4 shares of 16 k-tiles, 62 idle slots); one k-tile per
# tile (shares of 0 or 1 whole tiles); odd sizes; a batch; fp16 with fp32 out.
STREAM_K_CASES = [
    (8192, 4096, 4096, None, torch.bfloat16, torch.bfloat16),
    (256 * 67, 256, 4096, None, torch.bfloat16, torch.bfloat16),
    (8192, 4096, 64, None, torch.bfloat16, torch.bfloat16),
    (8191, 4088, 4088, None, torch.bfloat16, torch.bfloat16),
    (2048, 4096, 1000, 3, torch.bfloat16, torch.bfloat16),
    (8192, 4096, 1000, None, torch.float16, torch.float32),
]


@pytest.mark.parametrize("m,n,k,batch,dtype,out_dtype", STREAM_K_CASES, ids=str)
def test_stream_k_tail(m, n, k, batch, dtype, out_dtype):
    """Every element is right on every launch (the flags are fresh each time)."""
    from inductor_cutedsl.runtime import gemm

    a = matrix(m, k, True, dtype, batch=batch)
    b = matrix(k, n, False, dtype, batch=batch)
    ref = reference(a, b)
    lead = () if batch is None else (batch,)
    for _ in range(3):
        out = poisoned((*lead, m, n), out_dtype)
        gemm(a, b, out=out, config=STREAM_K)
        torch.cuda.synchronize()
        assert rel_err(out, ref) < TOL[out_dtype]


# Decode: a few rows (M <= 64, inside one 128-row tile) against a weight of few
# output tiles, the stream-K tile the shortlist offers there under CUDA graphs. Its
# partial sums travel only for the rows inside M: odd M, M across the 8-row runs of
# the accumulator, a whole 64 rows; K of a few and many k-tiles. The 2560-wide weight
# has 40 tiles, more than a quarter of the 132 slots: shares are not aligned with its
# tiles, some of which meet five (an owner with four peers, its window's last read),
# and K = 2104 ends in a partial k-tile.
DECODE_STREAM_K_CASES = [(m, n, k) for m in (1, 5, 16, 33, 64) for n, k in ((2048, 2048), (512, 8192), (2560, 2104))]


@pytest.mark.parametrize("m,n,k", DECODE_STREAM_K_CASES, ids=str)
def test_decode_stream_k(m, n, k):
    """x @ w.t() + bias, then a residual, at decode sizes, in the stream-K config the
    shortlist offers there: every element right on every launch."""
    from inductor_cutedsl.kernels import shortlist
    from inductor_cutedsl.runtime import gemm

    (cfg,) = [c for c in shortlist(m, n, k, graphs=True) if c.stream_k]
    a, b = matrix(m, k, True, torch.bfloat16), matrix(k, n, False, torch.bfloat16)
    bias = torch.randn(n, device="cuda").to(torch.bfloat16)
    residual = torch.randn(m, n, device="cuda").to(torch.bfloat16)
    epi = E.Epilogue(
        "bias_residual",
        "def epilogue(acc, m, n, l, ops):\n    return acc + ops[0] + ops[1]\n",
        (E.EpilogueOperand("bias", "row", "bfloat16"), E.EpilogueOperand("r", "full", "bfloat16")),
    )
    ref = reference(a, b) + bias.double() + residual.double()
    for _ in range(2):
        out = poisoned((m, n), torch.bfloat16)
        gemm(a, b, bias, residual, out=out, config=cfg, epilogue=epi)
        torch.cuda.synchronize()
        assert rel_err(out, ref) < TOL[torch.bfloat16]


def test_stream_k_epilogue_runs_once_on_the_summed_tile():
    """A nonlinear epilogue (bias + GELU) applied to partial sums would be wrong."""
    from inductor_cutedsl.runtime import gemm

    m, n, k = 8192, 4096, 4096
    a, b = matrix(m, k, True, torch.bfloat16), matrix(k, n, False, torch.bfloat16)
    bias = torch.randn(n, device="cuda").to(torch.bfloat16)
    out = poisoned((m, n), torch.bfloat16)
    gemm(a, b, bias, out=out, config=STREAM_K, epilogue=E.bias_activation("gelu_tanh"))
    torch.cuda.synchronize()
    ref = torch.nn.functional.gelu(reference(a, b) + bias.double(), approximate="tanh")
    assert rel_err(out, ref) < 1e-2


def test_stream_k_replays_in_a_cuda_graph():
    """A replayed graph keeps its token and its flags' memory: each replay must find the
    flags the last one cleared."""
    from inductor_cutedsl.runtime import gemm

    m, n, k = 8192, 4096, 1000
    a, b = matrix(m, k, True, torch.bfloat16), matrix(k, n, False, torch.bfloat16)
    out = poisoned((m, n), torch.bfloat16)
    gemm(a, b, out=out, config=STREAM_K)  # load and first launch outside the capture
    torch.cuda.synchronize()
    check_graph_replays(lambda: gemm(a, b, out=out, config=STREAM_K), (a, b), out, lambda: reference(a, b))


def _fixed_stream_k_scratch(monkeypatch, flags_fill):
    """Make every stream-K launch use the same scratch and token, as a replayed graph
    does, with its flags first filled by ``flags_fill(flags, token)``; returns the
    scratch (partials, flags, token)."""
    from inductor_cutedsl.runtime import launch

    held: dict = {}
    real = launch.stream_k_buffers

    def fixed(cfg, clusters, device, stream):
        if not held:
            partials, flags, token = real(cfg, clusters, device, stream)
            flags_fill(flags, token)
            held.update(partials=partials, flags=flags, token=token)
        return held["partials"], held["flags"], held["token"]

    monkeypatch.setattr(launch, "stream_k_buffers", fixed)
    return held


@pytest.mark.parametrize("m,n,k", [(16, 2048, 2048), (8191, 4088, 4088)], ids=str)
def test_stream_k_flags_holding_garbage_or_a_past_launch_are_not_taken_for_ready(monkeypatch, m, n, k):
    """The flags' memory is never zeroed: random garbage in it must not read as this
    launch's token, and the same memory and token launched again (a graph's replay)
    must wait for this launch's partial sums: between launches the partial sums are
    poisoned with NaN, which an owner reading them early would add to its tile."""
    from inductor_cutedsl.kernels import shortlist
    from inductor_cutedsl.runtime import gemm

    def garbage(flags, token):
        flags.random_(-(2**62), 2**62)
        flags[flags == token] = 0

    held = _fixed_stream_k_scratch(monkeypatch, garbage)
    cfg = next(c for c in shortlist(m, n, k, graphs=True) if c.stream_k) if m <= 64 else STREAM_K
    a, b = matrix(m, k, True, torch.bfloat16), matrix(k, n, False, torch.bfloat16)
    ref = reference(a, b)
    for _ in range(3):
        out = poisoned((m, n), torch.bfloat16)
        gemm(a, b, out=out, config=cfg)
        torch.cuda.synchronize()
        assert rel_err(out, ref) < TOL[torch.bfloat16]
        assert not (held["flags"] == held["token"]).any(), "a flag read by its owner was left set"
        held["partials"].fill_(float("nan"))


# Programmatic dependent launch: a decode-sized stream-K chain (its scratch may be the
# memory the previous GEMM of the chain just gave back) and plain clustered tiles.
PROGRAMMATIC_CASES = [(16, 2048, 2048, None), (1000, 1024, 1032, CONFIGS[0])]
RESIDUAL = E.Epilogue(
    "residual",
    "def epilogue(acc, m, n, l, ops):\n    return acc + ops[0]\n",
    (E.EpilogueOperand("r", "full", "bfloat16"),),
)


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize("m,n,k,cfg", PROGRAMMATIC_CASES, ids=lambda x: str(x) if isinstance(x, int) else "")
def test_programmatic_launches_wait_for_the_kernels_writing_their_inputs(m, n, k, cfg, graph):
    """With ``config.programmatic_launch`` each GEMM of ours may start while the kernel
    before it still runs. A chain in which each kernel reads what the ones just before
    it wrote: elementwise kernels write A and then the residual; our GEMM reads both;
    a second GEMM of ours reads the first's output (poisoned with NaN before the
    round) as its A, launched early by the first's trigger. Every output right in
    every round, run eagerly and replayed from a CUDA graph."""
    from inductor_cutedsl import config
    from inductor_cutedsl.kernels import shortlist
    from inductor_cutedsl.runtime import gemm

    if cfg is None:
        cfg = next(c for c in shortlist(m, n, k, graphs=True) if c.stream_k)
    src, src_r = torch.empty(m, k, device="cuda"), torch.empty(m, n, device="cuda")
    a = torch.empty(m, k, device="cuda", dtype=torch.bfloat16)
    residual = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    w1, w2 = matrix(k, n, False, torch.bfloat16), matrix(n, n, False, torch.bfloat16)
    h, out = poisoned((m, n), torch.bfloat16), poisoned((m, n), torch.bfloat16)

    def chain():
        a.copy_(torch.cumsum(src, dim=1) / k)  # a scan, then the write of A
        torch.mul(src_r, 0.5, out=residual)  # the kernel right before the GEMM
        gemm(a, w1, residual, out=h, config=cfg, epilogue=RESIDUAL)
        gemm(h, w2, out=out, config=cfg)

    def fresh():
        src.normal_()
        src_r.normal_()
        h.fill_(float("nan"))
        out.fill_(float("nan"))

    with config.patch(programmatic_launch=True):
        fresh()
        chain()  # loads the kernels outside any capture
        torch.cuda.synchronize()
        replay = chain
        if graph:
            captured = torch.cuda.CUDAGraph()
            with torch.cuda.graph(captured):
                chain()
            replay = captured.replay
        for _ in range(3):
            fresh()
            replay()
            torch.cuda.synchronize()
            assert rel_err(h, reference(a, w1) + residual.double()) < TOL[torch.bfloat16]
            assert rel_err(out, reference(h, w2)) < TOL[torch.bfloat16]


KEEP_PRE = E.Epilogue(
    "bias_gelu_keep_pre",
    "def epilogue(acc, m, n, l, ops):\n    pre = round_to(acc + ops[0], 'bfloat16')\n    return gelu_tanh(pre), pre\n",
    (E.EpilogueOperand("bias", "row", "bfloat16"), E.EpilogueOperand("pre", "out", "bfloat16")),
)


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.name())
@pytest.mark.parametrize("batch", [None, 3], ids=["2d", "batched"])
def test_extra_output_operand(cfg, batch):
    """An ``out`` operand receives its value everywhere in (L, M, N), and nowhere else."""
    from inductor_cutedsl.runtime import gemm

    m, n, k = 1000, 1032, 520
    a = matrix(m, k, True, torch.bfloat16, batch=batch)
    b = matrix(k, n, False, torch.bfloat16, batch=batch)
    bias = torch.randn(n, device="cuda").to(torch.bfloat16)
    lead = () if batch is None else (batch,)
    out = poisoned((*lead, m, n), torch.bfloat16)
    pre_full = poisoned((*lead, m, n + 8), torch.bfloat16)  # a strided view: pad columns untouched
    pre = pre_full[..., :n]
    gemm(a, b, bias, pre, out=out, config=cfg, epilogue=KEEP_PRE)
    torch.cuda.synchronize()
    ref_pre = reference(a, b) + bias.double()
    assert rel_err(pre, ref_pre) < 1e-2
    assert rel_err(out, torch.nn.functional.gelu(ref_pre, approximate="tanh")) < 1e-2
    assert pre_full[..., n:].isnan().all(), "wrote outside the output view"


def test_refusals_on_gpu():
    from inductor_cutedsl.runtime import gemm_reason

    a = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
    flat = torch.randn(256 * 256 + 8, device="cuda", dtype=torch.bfloat16)
    cases = {
        "base pointer": (flat[1 : 256 * 256 + 1].view(256, 256), a),
        "broadcast batch": (a.expand(3, 256, 256), a.expand(3, 256, 256).contiguous()),
        "leading stride": (
            torch.randn(64, 17, device="cuda", dtype=torch.bfloat16),
            torch.randn(17, 64, device="cuda", dtype=torch.bfloat16),
        ),
        "unit-stride": (a[:, ::2], a[:128]),
        "dtypes": (a.float(), a.float()),
        "not row-major": None,
    }
    for want, pair in cases.items():
        if pair is None:
            reason = gemm_reason(a, a, torch.empty(256, 256, device="cuda").t())
        else:
            reason = gemm_reason(*pair)
        assert reason is not None and want in reason, (want, reason)


def test_launch_reuses_loaded_kernel():
    from inductor_cutedsl.runtime import get_gemm, spec_for

    a = matrix(256, 256, True, torch.bfloat16)
    spec = spec_for(a, a, torch.bfloat16, CONFIGS[0])
    assert get_gemm(spec) is get_gemm(spec)
