"""The selection's rule and screen (no GPU needed)."""
from __future__ import annotations

import math
import types

from inductor_cutedsl.lowering.template import GemmCaller
from inductor_cutedsl.scheduler import selection


def test_the_fastest_way_wins():
    times = {"fused": 0.41, "triton_fused": 0.446, "ours_separate": 0.47, "other_separate": 0.468}
    assert selection.fastest_way(times) == "fused"
    # A fused Triton template faster than ours fused and both separate ways takes it.
    assert selection.fastest_way(times | {"triton_fused": 0.40}) == "triton_fused"
    # Separate wins when the epilogue costs the fused kernel more than its own kernel.
    assert selection.fastest_way(times | {"fused": 0.50, "triton_fused": 0.49}) == "other_separate"


def test_failed_ways_never_win():
    times = dict.fromkeys(selection.WAYS, math.inf)
    assert selection.fastest_way(times) is None
    assert selection.fastest_way(times | {"ours_separate": 9.0}) == "ours_separate"


def test_every_way_stands_for_a_decision():
    assert set(selection.WAYS.values()) == {"cutedsl", "triton", "separate"}


def _buffer(timings: dict) -> types.SimpleNamespace:
    return types.SimpleNamespace(choice_timings=lambda: timings)


def _ours() -> GemmCaller:
    return GemmCaller.__new__(GemmCaller)  # only its type matters to the screen


def test_screen_measures_ours_only_when_it_is_close_to_the_fastest():
    ours, aten = _ours(), object()
    caller, timings = selection._candidates(_buffer({ours: 1.10, aten: 1.0, object(): math.inf}))
    assert caller is ours and len(timings) == 2, "within 15%: measured; inf timings dropped"
    caller, _ = selection._candidates(_buffer({ours: 1.2, aten: 1.0}))
    assert caller is None, "20% behind on autotuning's figures: not worth a fused build"
    caller, _ = selection._candidates(_buffer({aten: 1.0}))
    assert caller is None
