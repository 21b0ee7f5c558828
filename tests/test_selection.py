"""The rule that lets our fused candidate take an autotuned GEMM (no GPU needed)."""
from __future__ import annotations

import math

from inductor_cutedsl.scheduler.selection import ours_fused_wins


def decide(ours_unfused, best_unfused, triton_floor, epilogue, fused, side=None):
    """The rule on autotuning figures and, unless ``side`` says otherwise, the same
    figures side by side (``side`` overrides some of them)."""
    calls = []

    def measured(name, value):
        def fn():
            calls.append(name)
            return value

        return fn

    other = best_unfused if best_unfused < ours_unfused else math.inf
    figures = {
        "ours": ours_unfused, "fused": fused, "other": other, "triton": triton_floor, "epilogue": epilogue,
    }  # fmt: skip
    won, times = ours_fused_wins(
        ours_unfused, best_unfused, triton_floor, measured("epilogue", epilogue),
        measured("side_by_side", figures | (side or {})),
    )  # fmt: skip
    return won, times, calls


def test_fused_wins_over_cublas_plus_epilogue_and_triton():
    won, times, calls = decide(0.36, 0.34, 0.39, 0.05, 0.37)
    assert won and calls == ["epilogue", "side_by_side"] and times["side_fused"] == 0.37


def test_loses_to_cublas_plus_separate_epilogue():
    won, _, _ = decide(0.36, 0.30, 0.39, 0.02, 0.35)  # 0.35 > 0.30 + 0.02
    assert not won


def test_loses_to_the_triton_floor():
    won, _, _ = decide(0.36, 0.34, 0.365, 0.05, 0.37)  # fused Triton may be as fast as 0.365
    assert not won


def test_side_by_side_figures_decide():
    """Autotuning read Triton 10% slow (timed later, on a hotter GPU); side by side it
    runs within 1% of cuBLAS, below our fused kernel: not taken."""
    side = {"ours": 1.68, "other": 1.69, "triton": 1.71, "fused": 1.76}
    won, times, _ = decide(1.39, 1.39, 1.53, 0.096, 1.42, side=side)
    assert not won and times["side_triton"] == 1.71
    # And the other way: fused beats both once measured side by side.
    won, _, _ = decide(0.36, 0.34, 0.39, 0.05, 0.37, side={"other": 0.35, "triton": 0.40, "fused": 0.38})
    assert won


def test_no_fused_compile_when_it_cannot_win():
    won, _, calls = decide(0.40, 0.34, 0.39, 0.05, 0.1)  # ours unfused already behind Triton
    assert not won and calls == []
    won, _, calls = decide(0.38, 0.30, math.inf, 0.05, 0.1)  # behind cuBLAS + epilogue
    assert not won and calls == ["epilogue"]


def test_cutedsl_only_backends():
    won, _, _ = decide(0.36, 0.36, math.inf, 0.05, 0.37)
    assert won


def test_a_failed_fused_candidate_never_wins():
    won, _, _ = decide(0.36, 0.34, 0.39, 0.05, math.inf)
    assert not won
