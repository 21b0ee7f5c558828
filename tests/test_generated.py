"""The launcher Inductor-generated code calls (no GPU: kernels are stand-ins)."""
from __future__ import annotations

import pytest
import torch

from inductor_cutedsl.kernels import GemmConfig
from inductor_cutedsl.kernels import epilogue as E
from inductor_cutedsl.runtime import KernelSpec, generated

PAIRED = E.Epilogue("residual", "def epilogue(acc, m, n, l, ops):\n    return acc + ops[0]\n",
                    (E.EpilogueOperand("r", "full", "bfloat16", pairs=True),))  # fmt: skip
SPEC = KernelSpec(GemmConfig(128, 256, 2, 1), "bfloat16", "bfloat16", "k", "k", PAIRED)


@pytest.fixture
def ran(monkeypatch) -> list:
    """(the launched spec's first operand, its values) per launch, of stand-in kernels."""
    launches = []

    class Kernel:
        def __init__(self, spec):
            self.spec = spec

        def launch(self, a, b, out, values, stream, out_view=None, b_up=None):
            launches.append((self.spec.epilogue.operands[0], values))

    monkeypatch.setattr(generated, "get_gemm", Kernel)
    return launches


def test_operands_that_break_a_pairs_declaration_run_the_unpaired_kernel(ran):
    launch = generated.launcher(SPEC, (), (((128, 1, 0), 0),))
    a, b, out = torch.empty(64, 32), torch.empty(32, 128), torch.empty(64, 128)
    aligned = torch.empty(64 * 128 + 2, dtype=torch.bfloat16)
    launch(a, b, out, aligned, stream=0)
    launch(a, b, out, aligned[1:], stream=0)  # the view starts 2 bytes in
    base = aligned.data_ptr()
    assert [(op.pairs, values) for op, values in ran] == [(True, [base, 128, 1, 0]), (False, [base + 2, 128, 1, 0])]
    assert generated.unpaired(SPEC).epilogue.fingerprint() != SPEC.epilogue.fingerprint()
    assert generated.unpaired(SPEC).epilogue.source == SPEC.epilogue.source


def test_operands_that_break_a_staged_declaration_run_the_global_load_kernel(ran):
    epi = E.Epilogue(PAIRED.name, PAIRED.source, (E.EpilogueOperand("r", "full", "bfloat16", staged=True),))
    spec = KernelSpec(GemmConfig(128, 256, 2, 1), "bfloat16", "bfloat16", "k", "k", epi)
    launch = generated.launcher(spec, (), (((128, 1, 0), 0),))
    a, b, out = torch.empty(64, 32), torch.empty(32, 128), torch.empty(64, 128)
    storage = torch.empty(64 * 128 + 8, dtype=torch.bfloat16)
    assert storage.data_ptr() % 16 == 0
    for r in (storage[: 64 * 128], storage[8:], storage[1 : 64 * 128 + 1]):  # 0, 16 and 2 bytes in
        launch(a, b, out, r, stream=0)
    assert [op.staged for op, _ in ran] == [True, True, False]
