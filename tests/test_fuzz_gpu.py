"""The fuzz's short seeded slice on the GPU (``benchmarks/fuzz.py`` holds the
generators and checks; ``python -m benchmarks.fuzz`` is the long run).

* ``test_fuzz_runtime``: ``SLICE_CASES_PER_SPEC`` runtime cases of every hand-picked
  corner spec and of one drawn spec per entry (``gemm``, ``gated_gemm``,
  ``scaled_gemm``), against float64, outputs inside NaN-poisoned buffers.
* ``test_fuzz_program`` / ``test_fuzz_model_program``: random programs and
  model-shaped programs (gated MLPs, attention, bmm, fp8, backward, dynamic token
  counts, CUDA graphs) compiled with max-autotune, against float64.

A refusal fails a test unless it names a rule the case or program was drawn to meet.
Build the runtime specs' kernels ahead of time, on any machine, into the tests' cache
(``tests/conftest.py``'s ``INDUCTOR_CUTEDSL_CACHE_DIR``) with
``python -m benchmarks.fuzz --precompile --cache-dir <that dir>``.
"""

from __future__ import annotations

import re

import pytest
import torch

from benchmarks import fuzz

pytestmark = pytest.mark.gpu


def _id(label: str) -> str:
    return re.sub(r"[^\w.=-]+", "-", label).strip("-")


def _report(outcome: fuzz.Outcome) -> str:
    lines = [f"{outcome.key}: {outcome.checked}/{outcome.cases} checked, refused {outcome.refused}"]
    lines += [f"  {f['kind']}: {f['what']}\n    {f['detail']}" for f in outcome.failures]
    return "\n".join(lines)


@pytest.mark.parametrize("spec_index", fuzz.slice_runtime_specs(), ids=lambda i: fuzz.SPECS[i].id())
def test_fuzz_runtime(spec_index):
    torch.manual_seed(fuzz.SEED + spec_index)
    outcome = fuzz.check_runtime(spec_index, range(fuzz.SLICE_CASES_PER_SPEC))
    print(_report(outcome))
    assert outcome.ok and outcome.checked, _report(outcome)


@pytest.fixture
def fuzz_backend():
    """The backend as the long run compiles: epilogue fusion on, one config per GEMM
    (the runtime cases cover the configs), every buffer of a compiled program NaN
    first; strict, as all of our tests (tests/conftest.py)."""
    from inductor_cutedsl.install import reenabled

    with reenabled(epilogue_fusion=True, max_configs=1), fuzz.nan_poisoned_allocations():
        yield
    torch.compiler.reset()


def _check(program, category: str) -> None:
    outcome = fuzz.check_program(program, category)
    print(program.label, _report(outcome), outcome.info)
    assert outcome.ok and not outcome.stock_failures, _report(outcome)


@pytest.mark.usefixtures("fuzz_backend")
@pytest.mark.parametrize("index", fuzz.slice_programs(), ids=lambda i: _id(fuzz.make_program(i).label))
def test_fuzz_program(index):
    _check(fuzz.make_program(index), "program")


@pytest.mark.usefixtures("fuzz_backend")
@pytest.mark.parametrize("index", fuzz.slice_model_programs(), ids=lambda i: _id(fuzz.make_model_program(i).label))
def test_fuzz_model_program(index):
    _check(fuzz.make_model_program(index), "model")
