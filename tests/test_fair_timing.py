"""Our candidates' autotuning times, put on the scale of the other choices' (no GPU)."""
from __future__ import annotations

import itertools
import types

import pytest
import torch
from torch._inductor.select_algorithm import AlgorithmSelectorCache, AutotuneArgs

import inductor_cutedsl
from inductor_cutedsl.lowering import fair_timing
from inductor_cutedsl.lowering.template import GemmCaller


class Other:
    """A non-CuteDSL choice (ATen or Triton) as the autotuner sees it."""

    def __init__(self, name: str) -> None:
        self.name = name


def ours(name: str) -> GemmCaller:
    caller = GemmCaller.__new__(GemmCaller)
    caller.name = name
    return caller


@pytest.fixture(autouse=True)
def no_cuda_graphs(monkeypatch):
    """Each run function here returns its own time; the timer just calls it."""
    monkeypatch.setattr(fair_timing, "graph_median", lambda make_run: make_run())


def test_ours_take_the_side_by_side_ratio_to_the_fastest_other():
    aten, triton, mine, mine2, broken = Other("aten"), Other("triton"), ours("a"), ours("b"), ours("c")
    timings = {aten: 1.17, triton: 1.40, mine: 1.49, mine2: 1.60, broken: float("inf")}
    # Side by side, ours runs 1% faster than ATen; drift moves both a little each round.
    drift = itertools.count()
    steady = {aten: 1.37, mine: 1.3563}
    measured = []

    def run_fn(choice):
        def run():
            measured.append(choice)
            return steady[choice] * (1 + 0.001 * next(drift))

        return run

    out = fair_timing.rescale(timings, run_fn)
    # Interleaved, each round starting one contender later.
    assert sorted(map(id, measured)) == sorted(map(id, [aten, mine] * fair_timing.ROUNDS))
    assert measured[:4] == [aten, mine, mine, aten]
    assert out[aten] == 1.17 and out[triton] == 1.40 and out[broken] == float("inf")
    assert out[mine] == pytest.approx(1.17 * 1.3563 / 1.37, rel=2e-3)
    assert out[mine] < out[aten]  # the fair verdict: ours wins
    assert out[mine2] / out[mine] == pytest.approx(1.60 / 1.49)  # our own order kept


def test_nothing_is_measured_without_both_sides():
    def run_fn(choice):
        raise AssertionError("measured")

    only_ours = {ours("a"): 1.0, ours("b"): 2.0}
    assert fair_timing.rescale(only_ours, run_fn) == only_ours
    aten = Other("aten")
    no_ours = {aten: 1.0, ours("a"): float("inf")}
    assert fair_timing.rescale(no_ours, run_fn) == no_ours


def test_a_failed_second_timing_keeps_the_first(caplog):
    aten, mine = Other("aten"), ours("a")
    timings = {aten: 1.0, mine: 1.2}

    def run_fn(choice):
        raise RuntimeError("capture failed")

    assert fair_timing.rescale(timings, run_fn) == timings
    assert "side-by-side timing" in caplog.text


def test_inductors_benchmark_pass_goes_through_the_rescale():
    """The installed hook gets Inductor's timings and makes run functions from each
    choice's benchmark request, on Inductor's autotuning inputs (ours on its own
    inputs); disable() removes it."""
    assert inductor_cutedsl.is_enabled()
    a, out = torch.randn(4, 4), torch.empty(4, 4)
    args = AutotuneArgs.from_choice_args([a], [a], out, out, None)
    aten, mine = Other("aten"), ours("a")
    seen, made = [], []
    aten.benchmark = lambda *x, out: (seen.append("aten"), 1.0)[1]
    mine.benchmark = lambda *x, out: (seen.append("ours"), 2.0)[1]
    mine.benchmark_inputs = lambda: ("own",)

    def request(name, ms):
        def make_run_fn(*inputs, out):
            made.append((name, inputs[0] is a or inputs[0]))
            return lambda: ms

        return types.SimpleNamespace(make_run_fn=make_run_fn)

    aten.bmreq, mine.bmreq = request("aten", 1.0), request("ours", 2.0)
    timings = AlgorithmSelectorCache.benchmark_choices([aten, mine], args)
    assert seen == ["aten", "ours"]
    assert made == [("aten", True), ("ours", "own")]
    assert timings == {aten: 1.0, mine: 2.0}  # a constant ratio changes nothing
    inductor_cutedsl.disable()
    try:
        seen.clear()
        AlgorithmSelectorCache.benchmark_choices([aten, mine], args)
        assert seen == ["aten", "ours"]
    finally:
        inductor_cutedsl.enable()
