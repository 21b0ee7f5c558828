"""The CPU compile sweep of the fuzz's programs (tools/fake_compile_sweep.py)."""

from __future__ import annotations

import fake_hopper
import torch

from benchmarks import fuzz
from tools import fake_compile_sweep as sweep


def test_the_traced_function_passes_each_input_by_its_name():
    """A program called through its positional wrapper computes what it computes on the
    dict of its inputs (a swapped pair of inputs would not)."""
    program = fuzz.make_program(0)
    inputs = program.inputs("cpu")
    names = sorted(inputs)
    run = fake_hopper.traced_function(program, names)
    expected = program.forward(inputs)
    got = run(*(inputs[n] for n in names))
    assert len(got) == len(expected)
    assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))
    traced = torch.fx.symbolic_trace(run)
    assert all(torch.equal(a, b) for a, b in zip(traced(*(inputs[n] for n in names)), expected, strict=True))


def test_a_cuda_refusal_outside_our_code_is_no_crash_and_inside_it_is():
    err = RuntimeError("CUDA error: CUDA driver version is insufficient for CUDA runtime version")
    assert sweep.needs_a_gpu(err, 'File "/site/torch/_functorch/aot_autograd.py", line 1')
    assert not sweep.needs_a_gpu(err, 'File "/repo/inductor_cutedsl/runtime/launch.py", line 1')
    assert not sweep.needs_a_gpu(ValueError("bad"), "")


def test_programs_with_inputs_of_several_dtypes_are_skipped():
    fp8 = next(p for p in (fuzz.make_model_program(i) for i in range(100)) if p.kind == "scaled")
    assert len({t.dtype for t in fp8.inputs("cpu").values()}) > 1
    assert sweep.compile_one(fp8).startswith("skipped")


def test_numerics_reports_a_wrong_value_and_fails_the_sweep(monkeypatch, capsys):
    """``--numerics``: a program whose wrapper computes a value off float64 is reported
    and fails the sweep; one that keeps a Triton kernel is compiled, not judged."""
    monkeypatch.setenv("INDUCTOR_CUTEDSL_STRICT", "0")  # main sets it: restored after the test
    monkeypatch.setenv("INDUCTOR_CUTEDSL_PERSIST_DECISIONS", "0")
    answers = iter([("code", {(None, 0, 0): (1.0, "value 0: rel err 1.0")}), ("code", None), ("code", {})])
    monkeypatch.setattr(fake_hopper, "fuzz_program_on_cpu", lambda p: next(answers))
    assert sweep.main(["--numerics", "--programs", "1"]) == 1
    assert "WRONG value 0: rel err 1.0" in capsys.readouterr().out
    assert sweep.compute_one(fuzz.make_program(1)) == (
        "ok (a Triton kernel stays in the wrapper: compiled, not run)",
        False,
    )
    assert sweep.compute_one(fuzz.make_program(2)) == ("ok, computed on CPU within tolerance", False)
