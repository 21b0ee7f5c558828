"""The fuzzer's random programs (``benchmarks.fuzz.make_program``: one GEMM of each kind,
a chain of pointwise consumers, kept values, a second GEMM) compiled for a faked H200 and
run on CPU through their whole generated wrapper (``fake_hopper.run_on_cpu``: each of our
launches computed by the launcher's torch fallback), against float64 with the fuzzer's
own tolerances. On CPU this checks the lowering, the fusion's translation of each
consumer into the epilogue, and the wrapper's calls, where the GPU fuzz checks the
kernels too."""

from __future__ import annotations

import pytest
from fake_hopper import fuzz_program_on_cpu

from benchmarks import fuzz

#: Programs our kernels compute whole here (the others keep a Triton kernel, which does not
#: run on CPU: a consumer refused by rule, a reduction, a layout Inductor pads): one or
#: more of every GEMM kind, fp16 and bf16, kept values, second GEMMs and odd sizes. A
#: program leaving this set means a consumer that used to fuse no longer does.
WHOLE = (0, 1, 2, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14, 15, 16, 18, 20, 21, 22)


@pytest.mark.parametrize("index", WHOLE)
def test_a_fuzz_program_computes_through_its_generated_wrapper(index):
    p = fuzz.make_program(index)
    _, bad = fuzz_program_on_cpu(p)
    assert bad is not None, f"{p.label}: a consumer stayed a Triton kernel"
    assert not bad, f"{p.label}: {list(bad.values())}"
