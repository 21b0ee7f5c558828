"""Refusal logic that needs no GPU, and the epilogue hook definitions."""

from __future__ import annotations

import pytest
import torch

from inductor_cutedsl.kernels import epilogue as E
from inductor_cutedsl.runtime import gemm_reason, operands_reason, support


def cpu(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape).to(dtype)


@pytest.mark.parametrize(
    "a,b,needle",
    [
        (cpu(64, 64), cpu(64, 64), "not a CUDA device"),
        (cpu(64, 64, dtype=torch.float32), cpu(64, 64, dtype=torch.float32), "dtypes"),
        (cpu(64, 64, dtype=torch.float64), cpu(64, 64, dtype=torch.float64), "dtypes"),
        (cpu(64, 64), cpu(64, 64, dtype=torch.float16), "dtypes"),
        (cpu(64, 32), cpu(64, 64), "inner sizes"),
        (cpu(2, 64, 64), cpu(3, 64, 64), "batch sizes"),
        (cpu(64), cpu(64, 64), "ranks"),
        (cpu(0, 64), cpu(64, 64), "empty"),
    ],
)
def test_refusals_without_gpu(a, b, needle):
    reason = gemm_reason(a, b)
    assert reason is not None and needle in reason


def test_non_hopper_gpu_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    reason = support.device_reason(torch.device("cuda", 0))
    assert reason and "sm_80" in reason
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (10, 0))
    assert "sm_100" in support.device_reason(torch.device("cuda", 0))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert support.device_reason(torch.device("cuda", 0)) is None


@pytest.mark.parametrize(
    "t,major",
    [
        (cpu(64, 32), "k"),
        (cpu(32, 64).t(), "m"),
        (cpu(64, 64)[:, ::2], None),
        (cpu(1, 32), "k"),
    ],
)
def test_a_major(t, major):
    assert support.a_major(t) == major


def test_b_major():
    assert support.b_major(cpu(64, 32)) == "n"
    assert support.b_major(cpu(32, 64).t()) == "k"
    assert support.b_major(cpu(64, 64)[::2, ::2]) is None


def test_operands_reason():
    epi = E.bias("row")
    assert operands_reason(epi, [cpu(128)], 1, 64, 128) and "CUDA" in operands_reason(epi, [cpu(128)], 1, 64, 128)
    assert "not a row vector" in operands_reason(epi, [cpu(64, 128)], 1, 64, 128)
    assert "does not broadcast" in operands_reason(epi, [cpu(100)], 1, 64, 128)
    assert "must be a bfloat16" in operands_reason(epi, [cpu(128, dtype=torch.float16)], 1, 64, 128)
    assert "takes 1 operands" in operands_reason(epi, [], 1, 64, 128)
    assert "not a col vector" in operands_reason(E.bias("col"), [cpu(128)], 1, 64, 128)
    assert "is a scalar" in operands_reason(E.addmm(True, "full"), [cpu(64, 128)] * 3, 1, 64, 128)
    keep = E.Epilogue(
        "keep",
        "def epilogue(acc, m, n, l, ops):\n    return acc, acc\n",
        (E.EpilogueOperand("pre", "out", "bfloat16"),),
    )
    assert "is broadcast" in operands_reason(keep, [cpu(128)], 1, 64, 128)
    assert "is broadcast" in operands_reason(keep, [cpu(64, 128)], 2, 64, 128)
    assert "CUDA" in operands_reason(keep, [cpu(64, 128)], 1, 64, 128)


def test_epilogue_definitions():
    assert E.IDENTITY.is_identity
    with pytest.raises(ValueError):
        E.EpilogueOperand("x", "diagonal")
    with pytest.raises(ValueError):
        E.bias_activation("softplus")
    fps = {e.fingerprint() for e in (E.IDENTITY, E.bias("row"), E.bias("col"), E.addmm(True, "row"))}
    assert len(fps) == 4


def test_epilogue_sources_materialize():
    from inductor_cutedsl.kernels.epilogue_math import materialize

    assert materialize(E.IDENTITY) is None
    for act in E.ACTIVATIONS:
        assert callable(materialize(E.bias_activation(act)))
    with pytest.raises(ValueError, match="no `epilogue`"):
        materialize(E.Epilogue("bad", "def other(acc, m, n, l, ops):\n    return acc\n"))


def residual(**flags: bool) -> E.Epilogue:
    return E.Epilogue(
        "residual",
        "def epilogue(acc, m, n, l, ops):\n    return acc + ops[0]\n",
        (E.EpilogueOperand("r", "full", "bfloat16", **flags),),
    )


PAIRED, STAGED = residual(pairs=True), residual(staged=True)


@pytest.mark.parametrize("flag", ["pairs", "staged"])
def test_load_declarations(flag):
    refused = [("row", "bfloat16"), ("full", "float32"), ("out", "float32")]
    refused += [("out", "bfloat16")] if flag == "staged" else []  # pairs: 4-byte stores
    for kind, dtype in refused:
        with pytest.raises(ValueError, match=flag):
            E.EpilogueOperand("x", kind, dtype, **{flag: True})
    if flag == "pairs":
        assert E.EpilogueOperand("x", "out", "float16", pairs=True).align_bytes == 4
    assert len({residual().fingerprint(), PAIRED.fingerprint(), STAGED.fingerprint()}) == 3
    assert (PAIRED.operands[0].align_bytes, STAGED.operands[0].align_bytes) == (4, 16)


@pytest.mark.parametrize(
    "view,needle",
    [
        (cpu(1, 64, 256)[:, :, ::2], "N stride"),
        (cpu(1, 64, 129)[:, :, :128], "M or L stride is odd"),
        (cpu(1, 64 * 128 + 1)[:, 1:].view(1, 64, 128), "not 4-byte aligned"),
        (cpu(1, 64, 130)[:, :, :127], "N (127) is odd"),
    ],
)
def test_pairs_reasons(view, needle):
    args = support.operand_args(view, None, *view.shape)
    assert needle in (support.pairs_reason(args, view.shape[2]) or "")
    assert needle in (operands_reason(PAIRED, [view[0]], 1, view.shape[1], view.shape[2]) or "")


def test_pairs_accepted_layouts():
    assert support.pairs_reason(support.operand_args(cpu(3, 64, 128), None, 3, 64, 128), 128) is None
    padded = cpu(64, 130)[:, :128]  # padded rows, broadcast over two batches
    assert support.pairs_reason(support.operand_args(padded, None, 2, 64, 128), 128) is None


@pytest.mark.parametrize(
    "view,needle",
    [
        (cpu(1, 64, 256)[:, :, ::2], "N stride"),
        (cpu(1, 64, 132)[:, :, :128], "multiple of 16 bytes"),
        (cpu(1, 64 * 128 + 4)[:, 4:].view(1, 64, 128), "not 16-byte aligned"),
    ],
)
def test_staged_reasons(view, needle):
    args = support.operand_args(view, None, *view.shape)
    assert needle in (support.staged_reason(args, *view.shape, 2) or "")
    assert needle in (operands_reason(STAGED, [view[0]], 1, view.shape[1], view.shape[2]) or "")


def test_staged_operands_are_never_broadcast_and_get_a_tma_batch_stride():
    row = support.operand_args(cpu(1, 128), None, 1, 64, 128)  # one row for every m
    assert "broadcast" in (support.staged_reason(row, 1, 64, 128, 2) or "")
    shared = support.operand_args(cpu(64, 128), None, 3, 64, 128)  # one matrix for 3 batches
    assert "broadcast" in (support.staged_reason(shared, 3, 64, 128, 2) or "")
    padded = cpu(64, 136)[:, :127]  # rows padded, odd N
    single = support.operand_args(padded, None, 1, 64, 127)
    assert single[3] == 0 and support.staged_reason(single, 1, 64, 127, 2) is None
    # The single batch's L stride is never read, but a TMA descriptor needs it non-zero.
    decl = STAGED.operands[0]
    assert support.declared_args(decl, padded, None, 1, 64, 127) == (*single[:3], 64 * 136)
    assert support.declared_args(E.EpilogueOperand("r", "full", "bfloat16"), padded, None, 1, 64, 127) == single
    three = cpu(3, 64, 136)[:, :, :127]
    batched = support.operand_args(three, None, 3, 64, 127)
    assert support.staged_reason(batched, 3, 64, 127, 2) is None
    assert support.declared_args(decl, three, None, 3, 64, 127) == batched


@pytest.mark.parametrize(
    "shape,target",
    [((128,), (2, 64, 128)), ((64, 1), (1, 64, 128)), ((3, 1, 128), (3, 64, 128)), ((64, 128), (1, 64, 128))],
)
def test_operand_args_broadcast_as_expand_does(shape, target):
    t = cpu(*shape)
    view = t.expand(*target)
    address, s_m, s_n, s_l = support.operand_args(t, None, *target)
    assert address == t.data_ptr()
    # A size-1 mode's stride is never used (expand gives new ones a nonzero stride).
    for dim, stride in ((0, s_l), (1, s_m), (2, s_n)):
        assert stride == view.stride(dim) or target[dim] == 1


def test_operand_args_refuse_what_does_not_broadcast():
    for shape in ((64, 127), (2, 1, 64, 128), (2, 64, 128)):
        with pytest.raises(ValueError, match="broadcast"):
            support.operand_args(cpu(*shape), None, 3, 64, 128)


def test_each_dtype_name_maps_to_the_dsl_type_of_the_same_format():
    """The one table the kernel's operand types, the epilogue's roundings and a loaded
    entry's pointer types read: each name's DSL type is torch's dtype of that name, in
    width and in format (bfloat16 and float16 share a width), and every dtype a kernel
    spec may name is in it."""
    from inductor_cutedsl.kernels import sm90_gemm
    from inductor_cutedsl.kernels.dtypes import DSL_TYPES

    for name, dsl in DSL_TYPES.items():
        dtype = getattr(torch, name)
        assert dsl.width == dtype.itemsize * 8, name
        assert dsl.__name__.lower() == name.replace("_", ""), (name, dsl.__name__)
    assert set(support.OUT_DTYPES.values()) | set(sm90_gemm.AB_DTYPES) <= set(DSL_TYPES)
    assert sm90_gemm.DTYPES is DSL_TYPES


def test_a_loaded_entrys_pointers_are_typed_as_the_kernel_reads_them():
    """The generic path of a loaded entry wraps each address as a pointer of the kernel's
    own element type (``kernels.dtypes``): A and B as the operands' dtype, D as the
    output's, each epilogue tensor as its declaration's; scalars are passed as floats."""
    import cutlass

    from inductor_cutedsl.kernels.config import GemmConfig
    from inductor_cutedsl.kernels.epilogue import Epilogue, EpilogueOperand
    from inductor_cutedsl.runtime.fast_call import F32, PTR
    from inductor_cutedsl.runtime.launch import entry_signature
    from inductor_cutedsl.runtime.spec import KernelSpec

    epi = Epilogue(
        "bias_scale",
        "def epilogue(acc, m, n, l, ops):\n    return acc * ops[1] + ops[0]\n",
        (EpilogueOperand("bias", "row", "bfloat16"), EpilogueOperand("alpha", "scalar", "float32")),
    )
    spec = KernelSpec(GemmConfig(128, 64), "float16", "float32", "k", "k", epi)
    kinds, ptrs = entry_signature(spec)
    assert [ptrs[i][0] for i in (0, 1, 2)] == [cutlass.Float16, cutlass.Float16, cutlass.Float32]
    bias = kinds.index(PTR, 3)
    assert ptrs[bias][0] is cutlass.BFloat16 and kinds[bias + 4] == F32 and kinds[-1] == PTR
    assert set(ptrs) == {0, 1, 2, bias}
