"""The fuzz's generators (tests/test_fuzz_gpu.py) on CPU: deterministic, enough cases,
every operand kind, major, dtype and layout feature covered, and the runtime's own
checks accept exactly the cases meant to run."""
from __future__ import annotations

import collections

import pytest
import torch

import test_fuzz_gpu as fuzz
from inductor_cutedsl.runtime import support

ALL_CASES = [case for index in range(len(fuzz.SPECS)) for case in fuzz.cases_for(index)]


def test_cases_are_deterministic():
    assert [fuzz.make_case(i, 7) for i in range(len(fuzz.SPECS))] == [c for c in ALL_CASES if c.number == 7]
    assert fuzz.make_program(3) == fuzz.PROGRAM_LIST[3]


def test_specs_are_few_distinct_and_cover_every_kind_major_and_dtype():
    specs = [s.kernel_spec() for s in fuzz.SPECS]
    assert len(set(specs)) == len(specs) <= 24
    assert {(s.a_major, s.b_major) for s in specs} == {("k", "n"), ("k", "k"), ("m", "n"), ("m", "k")}
    assert {s.ab_dtype for s in specs} == {"bfloat16", "float16", "float8_e4m3fn"}
    assert {s.out_dtype for s in specs} == {"bfloat16", "float16", "float32", "float8_e4m3fn"}
    assert {s.promote for s in specs if s.ab_dtype == "float8_e4m3fn"} == {0, 1}
    ops = [op for s in specs for op in s.epilogue.operands]
    assert {op.kind for op in ops} == {"row", "col", "full", "scalar", "out"}
    assert any(op.pairs for op in ops) and any(op.staged for op in ops)
    assert any(s.config.stream_k for s in specs) and any(s.config.pingpong for s in specs)


def test_specs_build_kernels():
    """Each spec passes the kernel's own checks (config, staging, epilogue source)
    without compiling."""
    from inductor_cutedsl.kernels.sm90_gemm import Sm90Gemm

    for s in fuzz.SPECS:
        Sm90Gemm(s.config, s.ab_dtype, s.out_dtype, s.a_major, s.b_major, s.epilogue, promote=s.promote)


def test_enough_cases_and_layout_coverage():
    ok = [c for c in ALL_CASES if c.expect_ok]
    assert len(ok) >= 1000
    per_spec = collections.Counter(c.spec_index for c in ok)
    assert min(per_spec.values()) >= fuzz.MIN_CHECKED_FRACTION * fuzz.CASES_PER_SPEC
    assert any(c.m % 2 and c.k % 2 for c in ok), "odd sizes"  # N: whole 16-byte rows
    assert all(c.n * fuzz.TORCH_DTYPES[c.spec.out_dtype].itemsize % 16 == 0 for c in ok)
    assert any(min(c.m, c.k) == 1 for c in ok)
    assert {c.batch for c in ok} >= {None, 1, 2, 3, 4}
    assert any(c.a.stride[-2 if c.spec.a_major == "k" else -1] > c.a.size[-1 if c.spec.a_major == "k" else -2]
               for c in ok), "padded leading dims"  # fmt: skip
    assert any(c.out.offset and c.a.offset and c.b.offset for c in ok), "storage offsets"
    operands = [op for c in ok for op in c.operands if op.view is not None]
    assert any(0 in op.view.stride[:-2] or len(op.view.size) < 3 for op in operands if op.kind == "full")
    assert any(op.view.stride[-1] > 1 for op in operands if op.kind == "row"), "strided row operand"
    assert any(op.view.stride[-2] == 1 for op in operands if op.kind == "full"), "column-major operand"
    assert {c.why_bad for c in ALL_CASES} >= {"", "a ld", "b base", "out base", "out width"}
    programs = fuzz.PROGRAM_LIST
    assert len(programs) >= 20
    assert {p.gemm for p in programs} == set(fuzz.GEMMS) and {p.dtype for p in programs} == {"bfloat16", "float16"}
    assert any(p.second for p in programs) and any("keep" in p.ops for p in programs)


def test_runtime_accepts_exactly_the_cases_meant_to_run(monkeypatch):
    """The runtime's refusal checks (all but the device's) on CPU tensors laid out as
    on the GPU; each case's tensors make the fuzz's spec, so cases share kernels."""
    from inductor_cutedsl.runtime import gemm_reason, operands_reason, spec_for

    monkeypatch.setattr(support, "device_reason", lambda device: None)
    wrong = []
    for case in ALL_CASES:
        a, b, out, values, _ = fuzz.case_tensors(case, "cpu", fill="empty")
        spec = case.spec
        assert spec_for(a, b, out.dtype, spec.config, spec.epilogue, promote=spec.promote) == spec.kernel_spec(), case
        batch = a.shape[0] if a.dim() == 3 else 1
        reason = gemm_reason(a, b, out) or operands_reason(spec.epilogue, values, batch, case.m, case.n)
        if (reason is None) != case.expect_ok:
            wrong.append((case.spec_index, case.number, case.why_bad, reason))
    assert not wrong, wrong[:5]


def test_program_references_run_on_cpu():
    """Each program's eager float64 reference runs (the GPU test compiles the same code)."""
    for program in fuzz.PROGRAM_LIST:
        t = {name: v.double() for name, v in program.inputs("cpu").items()}
        outs = program.run(t)
        assert all(torch.isfinite(o).all() for o in outs) and len(outs) == 1 + program.ops.count("keep")


@pytest.mark.parametrize("index", [0])
def test_a_case_reference_runs_on_cpu(index):
    """The reference path of the GPU check on CPU tensors, for every spec's epilogue."""
    for spec_index in range(len(fuzz.SPECS)):
        case = fuzz.make_case(spec_index, index)
        a, b, out, values, outputs = fuzz.case_tensors(case, "cpu")
        acc = torch.matmul(a.double(), b.double())
        ops = [None if op.kind == "out" else v.double() if torch.is_tensor(v) else v
               for op, v in zip(case.operands, values)]  # fmt: skip
        expected = case.spec.fuzz_epilogue.reference(acc, ops)
        assert len(expected) == len(outputs)
        assert all(e.expand(o[1].shape).shape == o[1].shape for e, o in zip(expected, outputs))


def emulated_gemm(corrupt: str = ""):
    """``runtime.gemm`` computed on CPU from the fuzz's references (the runtime's
    refusals kept), optionally ``corrupt``: "nan" (one element left
    unwritten), "outside" (a write into the output's row padding) or "value" (20% off
    everywhere, beyond every output dtype's tolerance, fp8's 7% included: the relative
    norm error misses a single wrong element in a large output, the NaN poison an
    unwritten one)."""
    from inductor_cutedsl.runtime import gemm_reason, operands_reason

    references = {s.epilogue: s.fuzz_epilogue.reference for s in fuzz.SPECS}

    def gemm(a, b, *values, out, config, epilogue, promote=0):
        batch = a.shape[0] if a.dim() == 3 else 1
        reason = gemm_reason(a, b, out) or operands_reason(epilogue, values, batch, a.shape[-2], b.shape[-1])
        if reason:
            raise ValueError(reason)
        acc = torch.matmul(a.double(), b.double())
        ops = [None if d.is_output else v.double() if torch.is_tensor(v) else v
               for d, v in zip(epilogue.operands, values)]  # fmt: skip
        targets = [out] + [v for d, v in zip(epilogue.operands, values) if d.is_output]
        for target, value in zip(targets, references[epilogue](acc, ops)):
            target.copy_(value.expand(target.shape))
        if corrupt == "value":
            out.copy_(out.double() * 1.2)
        elif corrupt == "nan":
            out[(0,) * out.dim()] = float("nan")
        elif corrupt == "outside":
            out.as_strided((1,), (1,), out.storage_offset() + out.shape[-1]).fill_(0)
        return out

    return gemm


@pytest.mark.parametrize("corrupt", ["", "value", "nan", "outside"])
def test_the_gpu_check_passes_right_results_and_catches_wrong_ones(monkeypatch, corrupt):
    from inductor_cutedsl.runtime import launch

    monkeypatch.setattr(support, "device_reason", lambda device: None)
    monkeypatch.setattr(launch, "gemm", emulated_gemm(corrupt))
    cases = [fuzz.make_case(i, n) for i in range(len(fuzz.SPECS)) for n in (0, 1)]
    cases = [c for c in cases if c.expect_ok and c.m > 1 and c.out.stride[-2] > c.n]  # room to write outside
    assert len(cases) > 5
    for case in cases:
        if corrupt == "":
            assert fuzz.check_case(case, "cpu") is None
        else:
            with pytest.raises(AssertionError):
                fuzz.check_case(case, "cpu")
    bad = next(c for c in fuzz.cases_for(0) if not c.expect_ok)
    assert fuzz.check_case(bad, "cpu").startswith("refused: ")
