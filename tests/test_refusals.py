"""Every refusal rule of the lowering, the gated lowering, the fusion decision and the
translation, reached on the CPU with the reason it gives (duck-typed IR nodes, a fake
graph; no GPU, no compile).

A refused GEMM gets no CuteDSL candidate and a refused epilogue is not fused: a rule that
stops firing lets a kernel run on inputs it computes wrongly, so each is pinned here by
its reason text (and its rule name where it has one).
"""

from __future__ import annotations

import dataclasses
import math
import types

import pytest
import sympy
import torch
from test_dual_gemm import any_device  # noqa: F401  (the fixture)
from test_lowering import FakeNode
from torch._inductor import config as inductor_config
from torch._inductor.sizevars import SizeVarAllocator
from torch._inductor.virtualized import V, ops

from inductor_cutedsl import config
from inductor_cutedsl.errors import Unsupported
from inductor_cutedsl.kernels import GemmConfig, dual_shortlist
from inductor_cutedsl.kernels import epilogue as E
from inductor_cutedsl.lowering import gated
from inductor_cutedsl.lowering import gemm_choices as gc
from inductor_cutedsl.lowering.candidate import GemmCandidate
from inductor_cutedsl.lowering.template import GemmTemplateBuffer
from inductor_cutedsl.runtime import KernelSpec, reference
from inductor_cutedsl.scheduler import decisions
from inductor_cutedsl.scheduler import epilogue_translation as et
from inductor_cutedsl.scheduler.node_translation import loop_view, translate_nodes

BF16, F32, F64, E4M3 = torch.bfloat16, torch.float32, torch.float64, torch.float8_e4m3fn
M, N, K = 256, 128, 64
CUDA = torch.device("cuda", 0)


class Node(FakeNode):
    """A duck-typed IR input node on a device."""

    def __init__(self, size, stride, dtype=BF16, offset=0, device=CUDA):
        super().__init__(size, stride, dtype, offset)
        self.device = device

    def get_device(self):
        return self.device


def op_node(target, **kwargs) -> types.SimpleNamespace:
    """The FX node of the op being lowered, as far as the rules read it."""
    return types.SimpleNamespace(target=target, args=(), kwargs=kwargs, users=())


class Graph:
    """What the rules read of Inductor's graph being lowered: sizes, the wrapper kind,
    the op being lowered (``current_node``) and the buffers by name."""

    def __init__(self):
        self.sizevars = SizeVarAllocator()
        self.cpp_wrapper = False
        self.current_node = op_node(torch.ops.aten.mm.default)
        self.buffers: dict = {}

    def get_buffer(self, name):
        return self.buffers[name]

    def get_dtype(self, name):
        return self.buffers[name].get_dtype()


@pytest.fixture
def graph(monkeypatch):
    """A fake graph, a Hopper GPU as device 0, max-autotune with our backend on, and
    layouts that are never really frozen."""
    fake = Graph()
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(gc.ir_access, "freeze_layout", lambda node: None)
    with V.set_graph_handler(fake), inductor_config.patch(max_autotune=True, max_autotune_gemm_backends="ATEN,CUTEDSL"):
        yield fake


def refusal(fn, *args) -> Unsupported:
    with pytest.raises(Unsupported) as info:
        fn(*args)
    return info.value


# -- lowering/gemm_choices.py ----------------------------------------------------------


def gemm_inputs(a=None, b=None, c=None, out_dtype=BF16, alpha=1.0, beta=1.0, out_stride=(N, 1), n=N):
    """Inductor's KernelInputs of an mm (addmm with ``c``): A row-major, B column-major."""
    a = a or Node((M, K), (K, 1))
    b = b or Node((K, n), (1, K))
    nodes = [a, b] if c is None else [c, a, b]
    return types.SimpleNamespace(
        nodes=lambda: nodes,
        out_dtype=lambda: out_dtype,
        mnk_symbolic=lambda: (M, n, K),
        output_layout=lambda flexible: types.SimpleNamespace(size=[M, n], stride=list(out_stride)),
        get_scalar={"alpha": alpha, "beta": beta}.__getitem__,
    )


BIAS = Node((N,), (1,))


@pytest.mark.parametrize(
    "make,op,needle",
    [
        (lambda: gemm_inputs(a=Node((M, K), (K, 1), device=torch.device("cpu"))), "mm", "tensor on cpu, not a CUDA"),
        (lambda: gemm_inputs(a=Node((M, K), (K, 1), F32), b=Node((K, N), (1, K), F32)), "mm", "operand dtypes"),
        (lambda: gemm_inputs(b=Node((K, N), (1, K), torch.float16)), "mm", "dtypes torch.bfloat16/torch.float16"),
        (lambda: gemm_inputs(out_dtype=F64), "mm", "output dtype torch.float64"),
        (lambda: gemm_inputs(out_stride=(1, M)), "mm", "output layout [1, 256] is not row-major"),
        (lambda: gemm_inputs(out_stride=(2 * N, 2)), "mm", "output layout [256, 2] is not row-major"),
        (lambda: gemm_inputs(out_stride=(N + 4, 1)), "mm", "output layout [132, 1] is not row-major with 16-byte"),
        (lambda: gemm_inputs(c=Node((N,), (1,), F64)), "addmm", "bias dtype torch.float64"),
        (lambda: gemm_inputs(c=BIAS, beta=0.0), "addmm", "beta == 0"),
        (lambda: gemm_inputs(c=BIAS, beta=-0.0, alpha=3.0), "addmm", "beta == 0"),
    ],
    ids=[
        "cpu",
        "fp32",
        "mixed",
        "fp64_out",
        "col_major_out",
        "strided_out_rows",
        "unaligned_out_rows",
        "fp64_bias",
        "beta0",
        "beta-0",
    ],
)
def test_gemm_refusals(graph, make, op, needle):
    assert needle in refusal(gc.gemm_candidates, make(), op).reason


def test_a_gpu_that_is_not_hopper_is_refused(graph, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 9))
    assert "sm_89" in refusal(gc.gemm_candidates, gemm_inputs(), "mm").reason


def test_a_cpp_wrapper_graph_is_refused(graph):
    graph.cpp_wrapper = True
    assert "cpp_wrapper is on" in refusal(gc.gemm_candidates, gemm_inputs(), "mm").reason


@pytest.mark.parametrize("alpha,beta", [(1.0, 1.0), (0.5, 2.0), (-2.0, 0.25)])
def test_addmm_candidates_compute_torch_addmm(graph, alpha, beta):
    """What the lowering offers for addmm(c, a, b, beta=, alpha=) computes it: the
    scalars reach the epilogue in their places (evaluated with ``runtime.reference``)."""
    cands, _ = gc.gemm_candidates(gemm_inputs(c=BIAS, alpha=alpha, beta=beta), "addmm")
    assert cands
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(M, K, generator=gen).to(BF16)
    b = torch.randn(N, K, generator=gen).to(BF16).t()
    c = torch.randn(N, generator=gen).to(BF16)
    want = torch.addmm(c.double(), a.double(), b.double(), beta=beta, alpha=alpha)
    for cand in cands:
        out = torch.full((M, N), math.nan, dtype=F64)
        reference.run(cand.spec, a, b, out, [c], cand.scalars, cand.views, cand.out_view, dtype=F64)
        torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)


@pytest.fixture
def fp8(graph):
    graph.current_node = op_node(torch.ops.aten._scaled_mm.default)
    with config.patch(fp8=True):
        yield graph


def scaled_inputs(a=None, b=None, bias=None, out_dtype=BF16):
    a = a or Node((M, K), (K, 1), E4M3)
    b = b or Node((K, N), (1, K), E4M3)
    scales = [Node((M, 1), (1, 1), F32), Node((1, N), (N, 1), F32)]
    nodes = [a, b, *scales] + ([bias] if bias is not None else [])
    return types.SimpleNamespace(
        nodes=lambda: nodes,
        out_dtype=lambda: out_dtype,
        mnk_symbolic=lambda: (M, N, K),
        output_layout=lambda flexible: types.SimpleNamespace(size=[M, N], stride=[N, 1]),
    )


@pytest.mark.parametrize(
    "make,needle",
    [
        (lambda: scaled_inputs(b=Node((K, N), (N, 1), E4M3)), "fp8 operands must both be K-major"),
        (lambda: scaled_inputs(a=Node((M, K), (1, M), E4M3)), "fp8 operands must both be K-major"),
        (lambda: scaled_inputs(a=Node((M, K), (K, 1), BF16)), "operand dtypes"),
        (lambda: scaled_inputs(out_dtype=torch.int32), "output dtype torch.int32"),
        (lambda: scaled_inputs(bias=Node((N,), (1,), torch.float8_e4m3fn)), "bias torch.float8_e4m3fn of 1 dims"),
        (lambda: scaled_inputs(bias=Node((1, N), (N, 1), BF16)), "bias torch.bfloat16 of 2 dims"),
    ],
    ids=["b_n_major", "a_m_major", "bf16", "int_out", "fp8_bias", "2d_bias"],
)
def test_scaled_mm_refusals(fp8, make, needle):
    assert needle in refusal(gc.gemm_candidates, make(), gc.SCALED_OP).reason


def test_scaled_mm_refusals_of_the_op(fp8):
    fp8.current_node = op_node(torch.ops.aten._scaled_mm.default, scale_result=object())
    assert "scale_result" in refusal(gc.gemm_candidates, scaled_inputs(), gc.SCALED_OP).reason
    # F.scaled_mm's op asks under the same name (torch 2.14 on), with other arguments.
    fp8.current_node = op_node(torch.ops.aten._scaled_mm_v2.default)
    assert "_scaled_mm_v2" in refusal(gc.gemm_candidates, scaled_inputs(), gc.SCALED_OP).reason
    fp8.current_node = op_node(torch.ops.aten._scaled_mm.default)
    with config.patch(fp8=False):
        assert "INDUCTOR_CUTEDSL_FP8=1" in refusal(gc.gemm_candidates, scaled_inputs(), gc.SCALED_OP).reason
    cands, _ = gc.gemm_candidates(scaled_inputs(bias=Node((N,), (1,), BF16)), gc.SCALED_OP)
    assert cands and all(c.spec.epilogue.name == "scaled_row_row_bias_bfloat16" for c in cands)


# -- lowering/gated.py -----------------------------------------------------------------


def gated_args(x=None, wg=None, wu=None, bg=None, bu=None, n=N):
    """(x2, w_gate, w_up, b_gate, b_up) as the dual candidates take them: x (M, K) and the
    weights (N, K), row-major."""
    return (x or Node((M, K), (K, 1)), wg or Node((n, K), (K, 1)), wu or Node((n, K), (K, 1)), bg, bu)


@pytest.mark.parametrize(
    "args,needle",
    [
        (gated_args(x=Node((M, K), (K, 1), device=torch.device("cpu"))), "tensor on cpu, not a CUDA device"),
        (gated_args(x=Node((M, K), (K, 1), F32)), "dtypes torch.float32/torch.bfloat16/torch.bfloat16"),
        (gated_args(wu=Node((N, K), (K, 1), torch.float16)), "dtypes torch.bfloat16/torch.bfloat16/torch.float16"),
        (gated_args(bg=Node((N,), (1,), F64)), "bias dtype torch.float64"),
        (gated_args(bu=Node((N,), (1,), torch.int64)), "bias dtype torch.int64"),
        (gated_args(wu=Node((N, K), (1, N))), "the two weights are laid out differently"),
        (gated_args(wg=Node((N, K), (1, N)), wu=Node((N, K), (1, N))), "w_gate strides [1, 128] are not contiguous"),
        (gated_args(x=Node((M, K), (K + 4, 1))), "x rows or offset are not 16-byte aligned"),
        (gated_args(x=Node((M, K), (K, 1), offset=4)), "x rows or offset are not 16-byte aligned"),
        (gated_args(n=1004), "output width 1004 is not a multiple of 16 bytes"),
    ],
    ids=[
        "cpu",
        "fp32_x",
        "fp16_up",
        "fp64_bias",
        "int_bias",
        "weights_differ",
        "k_major_weights",
        "x_rows",
        "x_offset",
        "width",
    ],
)
def test_dual_candidate_refusals(graph, args, needle):
    assert needle in refusal(gated.candidates, *args, "silu", False).reason


FP8 = torch.float8_e4m3fn


def scaled_gated_args(x=None, wg=None, wu=None, sx=None, sg=None, su=None, bg=None, bu=None):
    """(x, w_gate, w_up, scale_x, scale_gate, scale_up, b_gate, b_up) as the fp8 dual
    candidates take them: x (M, K) row-major, the weights (K, N) K-major, row-wise scales."""
    k_major = Node((K, N), (1, K), FP8)
    return (
        x or Node((M, K), (K, 1), FP8),
        wg or k_major,
        wu or k_major,
        sx or Node((M, 1), (1, 1), F32),
        sg or Node((1, N), (N, 1), F32),
        su or Node((1, N), (N, 1), F32),
        bg,
        bu,
    )


@pytest.mark.parametrize(
    "args,out_dtype,needle",
    [
        (scaled_gated_args(x=Node((M, K), (K, 1))), BF16, "dtypes torch.bfloat16/torch.float8_e4m3fn"),
        (scaled_gated_args(), FP8, "output dtype torch.float8_e4m3fn"),
        (scaled_gated_args(bg=Node((N, 1), (1, 1), BF16)), BF16, "bias dtype torch.bfloat16 of 2 dims"),
        (scaled_gated_args(wu=Node((K, N), (N, 1), FP8)), BF16, "the two weights are laid out differently"),
        (
            scaled_gated_args(wg=Node((K, N), (N, 1), FP8), wu=Node((K, N), (N, 1), FP8)),
            BF16,
            "w_gate strides [128, 1] are not contiguous along mode 0",
        ),
        (scaled_gated_args(su=Node((1,), (1,), F32)), BF16, "the two weights' scales differ in mode"),
        (scaled_gated_args(sx=Node((M, 2), (2, 1), F32)), BF16, "CuteDSL takes fp32 scales"),
    ],
    ids=["bf16_x", "fp8_out", "bias_2d", "weights_differ", "n_major_weights", "scale_modes", "block_scale"],
)
def test_fp8_dual_candidate_refusals(graph, args, out_dtype, needle):
    assert needle in refusal(gated.scaled_candidates, *args, "silu", out_dtype, False).reason


def test_fp8_dual_candidates_promote_as_their_configs_allow(graph):
    cands, modes = gated.scaled_candidates(*scaled_gated_args(), "silu", BF16, False)
    assert modes == ("row", "row") and cands
    assert all(c.spec.dual and c.spec.promote and c.spec.config.promotion_reason(c.spec.promote) is None for c in cands)
    fast, _ = gated.scaled_candidates(*scaled_gated_args(), "silu", BF16, True)
    assert fast and all(not c.spec.promote for c in fast)
    assert fast[0].input_names == ("a", "b", "b_up", "scale_a", "scale_gate", "scale_up")


def test_dual_candidates_refuse_a_graph_without_our_backend_or_with_a_cpp_wrapper(graph):
    with inductor_config.patch(max_autotune_gemm_backends="ATEN,TRITON"):
        assert "CUTEDSL is not in" in refusal(gated.candidates, *gated_args(), "silu", False).reason
    graph.cpp_wrapper = True
    assert "cpp_wrapper" in refusal(gated.candidates, *gated_args(), "silu", False).reason
    graph.cpp_wrapper = False
    cands = gated.candidates(*gated_args(bg=Node((N,), (1,))), "gelu_erf", True)
    assert cands and {c.spec.epilogue.name for c in cands} == {"gated_gelu_erf_bias_gate_keep_pairs_round_bfloat16"}


@pytest.mark.parametrize(
    "measured,reason,rule",
    [
        (None, "no dual config fits", "dual-config"),
        ("slower", "two GEMMs and a pointwise kernel measured faster", "measured-slower"),
    ],
)
def test_dual_lowering_refusals(graph, monkeypatch, measured, reason, rule):
    x, wg, wu, _, _ = gated_args()
    monkeypatch.setattr(gated.ir_access, "realized", lambda node: node)
    monkeypatch.setattr(gated, "candidates", lambda *args: [] if measured is None else ["a candidate"])
    monkeypatch.setattr(gated, "decide", lambda *args: None)
    why = refusal(gated._dual, x, wg, wu, None, None, "silu", False, False, [M], N)
    assert (why.reason, why.rule) == (reason, rule)


# -- scheduler/decisions.py ------------------------------------------------------------


class SchedulerNode:
    def __init__(self, name, node=None, reduction=False, template=False, extern=False, mutation=False):
        self.name, self.node = name, node
        self.kinds = {"reduction": reduction, "template": template, "extern": extern, "mutation": mutation}

    def get_name(self):
        return self.name

    def is_reduction(self):
        return self.kinds["reduction"]

    def is_template(self):
        return self.kinds["template"]

    def is_extern(self):
        return self.kinds["extern"]

    def has_aliasing_or_mutation(self):
        return self.kinds["mutation"]


class Buffer(FakeNode):
    """A buffer of the graph: what the rules read of the fused kernel's output."""

    def __init__(self, name, size, stride, dtype=BF16):
        super().__init__(size, stride, dtype)
        self.name = name
        self._layout.stride = list(stride)

    def get_name(self):
        return self.name


ms, ns, ls = sympy.symbols("m n l", integer=True, nonnegative=True)


def relu_translation() -> et.Translation:
    """relu of the GEMM output buf0, stored to buf1."""
    tr = et.EpilogueTranslator("buf0", (ms, ns, ls), (M, N, 1), {"buf0": BF16, "buf1": BF16}.__getitem__)
    with V.set_ops_handler(tr):
        ops.store("buf1", N * ms + ns, ops.relu(ops.load("buf0", N * ms + ns)))
    return et.finish(tr, "relu")


@pytest.fixture
def chain(graph, monkeypatch):
    """A GEMM template node and its output buf0, a consumer buf1 (what the chain
    translates to is set by the test), and the graph's buffers."""
    translation = {"t": relu_translation()}
    monkeypatch.setattr(decisions, "translate_nodes", lambda *args, **kwargs: translation["t"])
    graph.buffers["buf0"] = Buffer("buf0", (M, N), (N, 1))
    graph.buffers["buf1"] = Buffer("buf1", (M, N), (N, 1))
    template = SchedulerNode("op0", node=graph.buffers["buf0"], template=True)
    return types.SimpleNamespace(graph=graph, template=template, translation=translation)


def decide(chain, *nodes):
    return decisions.translate_chain(None, chain.template, list(nodes) or [SchedulerNode("op1")])


@pytest.mark.parametrize(
    "node,reason,rule",
    [
        (SchedulerNode("op1", reduction=True), "op1 is a reduction", "reduction"),
        (SchedulerNode("op1", template=True), "op1 is not a plain pointwise node", "not-pointwise"),
        (SchedulerNode("op1", extern=True), "op1 is not a plain pointwise node", "not-pointwise"),
        (SchedulerNode("op1", mutation=True), "op1 is not a plain pointwise node", "not-pointwise"),
    ],
    ids=["reduction", "template", "extern", "mutation"],
)
def test_chain_nodes_that_are_no_pointwise_consumer(chain, node, reason, rule):
    why = refusal(decide, chain, SchedulerNode("op2"), node)
    assert (why.reason, why.rule) == (reason, rule)


def test_a_gemm_that_writes_extra_outputs_fuses_nothing(chain):
    keep = E.gated("silu", keep="bfloat16")
    cand = GemmCandidate(
        KernelSpec(GemmConfig(), "bfloat16", "bfloat16", "k", "k", keep, True),
        ("a", "b", "b_up", "gate", "up"),
        ("gate", "up"),
    )
    buffer = GemmTemplateBuffer.__new__(GemmTemplateBuffer)
    buffer.candidate, buffer.inputs = cand, []
    chain.template.node = buffer
    why = refusal(decide, chain)
    assert (why.reason, why.rule) == ("op0 already writes extra outputs", "kept-outputs")


@pytest.mark.parametrize(
    "kept,out,fp8,reason,rule",
    [
        (
            ("buf0", "buf2", "buf3"),
            None,
            False,
            "3 of its buffers are read elsewhere (buf0, buf2, buf3)",
            "kept-outputs",
        ),
        ((), Buffer("buf1", (M, N), (N, 1), F64), False, "output dtype torch.float64", "dtype"),
        ((), Buffer("buf1", (M, N), (N, 1), E4M3), False, "an torch.float8_e4m3fn output is off", "fp8-off"),
        ((), Buffer("buf1", (M, N), (1, M)), False, "output layout [1, 256] is not row-major", "tma-alignment"),
        ((), Buffer("buf1", (2, M, N), (M * N + 4, N, 1)), False, "is not row-major with 16-byte", "tma-alignment"),
        ((), Buffer("buf1", (M, 1048), (1152, 1), E4M3), True, "output width 1048 is not provably", "tma-alignment"),
    ],
    ids=["three_kept", "fp64", "fp8_off", "col_major", "unaligned_batch", "fp8_width"],
)
def test_what_the_fused_kernel_cannot_write(chain, kept, out, fp8, reason, rule):
    chain.translation["t"] = dataclasses.replace(chain.translation["t"], kept=kept)
    if out is not None:
        chain.graph.buffers["buf1"] = out
    with config.patch(fp8=fp8):
        why = refusal(decide, chain)
    assert reason in why.reason and why.rule == rule


def test_a_chain_the_rules_accept(chain):
    chain.translation["t"] = dataclasses.replace(chain.translation["t"], kept=("buf0", "buf2"))
    assert decide(chain) is chain.translation["t"]
    with config.patch(fp8=True):
        chain.graph.buffers["buf1"] = Buffer("buf1", (M, N), (N, 1), E4M3)
        assert decide(chain) is chain.translation["t"]


# -- scheduler/epilogue_translation.py and node_translation.py -------------------------

OWN = N * ms + ns
DTYPES = {"acc": BF16, "r": BF16, "i": torch.int32, "out": BF16}


def translate(body, keep=()):
    tr = et.EpilogueTranslator("acc", (ms, ns, ls), (M, N, 1), DTYPES.__getitem__)
    with V.set_ops_handler(tr):
        body(tr)
    return et.finish(tr, "t", keep)


def load(name, index):
    return ops.load(name, index)


TRANSLATION_REFUSALS = [
    ("depends on ['tmp0']", lambda tr: ops.store("out", OWN, load("r", sympy.Symbol("tmp0")))),
    ("is not polynomial", lambda tr: ops.store("out", OWN, load("r", sympy.floor(ns / 3)))),
    ("is not linear in (m, n, l)", lambda tr: ops.store("out", OWN, load("r", ms * ns))),
    ("has non-integer coefficients", lambda tr: ops.store("out", OWN, load("r", ns / 2))),
    (
        "op 'bitwise_xor' has no CuteDSL epilogue translation",
        lambda tr: ops.store("out", OWN, ops.bitwise_xor(load("acc", OWN), load("acc", OWN))),
    ),
    ("indirect indexing", lambda tr: ops.indirect_indexing(load("acc", OWN), N)),
    ("acc is accessed at", lambda tr: ops.store("out", OWN, load("acc", OWN + 1))),
    ("load of i with dtype torch.int32", lambda tr: ops.store("out", OWN, ops.add(load("acc", OWN), load("i", OWN)))),
    (
        "r is read with a negative stride or offset",
        lambda tr: ops.store("out", OWN, ops.add(load("acc", OWN), load("r", N * (M - 1 - ms) + ns))),
    ),
    (
        "r is read transposed (stride 256 along n)",
        lambda tr: ops.store("out", OWN, ops.add(load("acc", OWN), load("r", ms + M * ns))),
    ),
    ("store mode 'atomic_add'", lambda tr: ops.store("out", OWN, load("acc", OWN), "atomic_add")),
    ("out is stored at", lambda tr: ops.store("out", ms + M * ns, load("acc", OWN))),
    ("cast to torch.float64", lambda tr: ops.store("out", OWN, ops.to_dtype(load("acc", OWN), F64))),
    ("the epilogue stores nothing", lambda tr: load("acc", OWN)),
    ("the chain does not read the GEMM output", lambda tr: ops.store("out", OWN, load("r", OWN))),
]


@pytest.mark.parametrize("needle,body", TRANSLATION_REFUSALS, ids=[n.split(" (")[0] for n, _ in TRANSLATION_REFUSALS])
def test_translation_refusals(needle, body):
    assert needle in refusal(translate, body).reason


def test_a_node_anchored_to_nothing_of_the_chain_is_refused():
    """Each node must read the GEMM output or a buffer of the chain element-for-element:
    that is what pins its loops to the output's coordinates."""
    tr = et.EpilogueTranslator("acc", (ms, ns, ls), (M, N, 1), DTYPES.__getitem__)
    with V.set_ops_handler(tr):
        tr.begin_node("op1", tr.coords)
        ops.store("buf1", OWN, ops.relu(load("acc", OWN)))
        tr.end_node()
        tr.begin_node("op2", tr.coords)
        ops.store("out", OWN, ops.relu(load("r", OWN)))
        with pytest.raises(Unsupported, match="op2 reads neither the GEMM output nor a buffer of the chain"):
            tr.end_node()


def test_a_kept_buffer_of_a_dtype_no_epilogue_writes_is_refused():
    def body(tr):
        ops.store("out", OWN, ops.relu(load("acc", OWN)))

    DTYPES_I = {**DTYPES, "acc": torch.int32}
    tr = et.EpilogueTranslator("acc", (ms, ns, ls), (M, N, 1), DTYPES_I.__getitem__)
    with V.set_ops_handler(tr):
        body(tr)
    with pytest.raises(Unsupported, match="acc has dtype torch.int32"):
        et.finish(tr, "t", ("acc",))


@pytest.mark.parametrize(
    "loops,sizes,needle",
    [
        ([M], (M, N, 1), "cover less than"),
        ([M, 2 * N], (M, N, 1), "do not tile"),  # more iterations than elements
        ([4, 6], (6, 4, 1), "do not tile"),  # as many, but rows of 6 cut across rows of 4
    ],
)
def test_loops_that_do_not_cover_the_output(loops, sizes, needle):
    with pytest.raises(Unsupported, match=needle):
        loop_view(loops, sizes)


def test_a_reduction_node_is_refused(graph):
    node = types.SimpleNamespace(get_ranges=lambda: ([M], [N]), get_name=lambda: "op3")
    with pytest.raises(Unsupported, match="op3 is a reduction"):
        translate_nodes("buf0", (M, N, 1), [node], graph.get_dtype)


# -- runtime/support.py: the refusals no other test reaches ------------------------------


def bf16(*shape):
    return torch.randn(*shape).to(BF16)


@pytest.mark.parametrize(
    "make,needle",
    [
        (lambda: (bf16(3, 64, 32), bf16(1, 32, 64).expand(3, 32, 64)), "b has a broadcast batch (batch stride 0)"),
        (
            lambda: (bf16(3 * 2052).as_strided((3, 64, 32), (2052, 32, 1)), bf16(3, 32, 64)),
            "a batch stride 2052 is not a multiple of 16 bytes",
        ),
        (lambda: (bf16(64, 32), torch.empty(32, 64, dtype=BF16, device="meta")), "a, b are on different devices"),
        (lambda: (bf16(64, 64)[::2, ::2], bf16(32, 64)), "a has no unit-stride matrix mode (strides (128, 2))"),
        (lambda: (bf16(64, 32), bf16(64, 128)[::2, ::2]), "b has no unit-stride matrix mode (strides (256, 2))"),
    ],
    ids=["broadcast_batch", "batch_stride", "devices", "a_strided", "b_strided"],
)
@pytest.mark.usefixtures("any_device")
def test_gemm_reason_refusals(make, needle):
    from inductor_cutedsl.runtime.support import gemm_reason

    assert needle in (gemm_reason(*make()) or "")


@pytest.mark.parametrize("m,offered", [(64, "list"), (65, "one"), (256, "one"), (257, "list"), (2048, "list")])
def test_dual_candidates_of_a_small_product_are_the_shortlists_first_config(graph, m, offered):
    """65-256 rows: the first config only (it won every gate measurement there); decode
    sizes and larger products keep the list."""
    n, k = 8192, 2048
    x = Node((m, k), (k, 1))
    weights = [Node((n, k), (k, 1)) for _ in range(2)]
    cands = gated.candidates(x, *weights, None, None, "silu", False)
    full = dual_shortlist(m, n, k, limit=config.max_configs)
    assert len(full) > 1, "the planted list must have more than one config to shorten"
    assert [c.spec.config for c in cands] == (full[:1] if offered == "one" else full)
