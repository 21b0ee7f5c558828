"""Interleaved measurement order (no GPU needed)."""
from __future__ import annotations

from inductor_cutedsl.timing import interleaved


def test_rounds_rotate_so_no_contender_is_always_first():
    order = []
    measures = {name: (lambda name=name: order.append(name) or len(order)) for name in "abc"}
    times = interleaved(measures, 3)
    assert order == list("abcbcacab")
    # Each contender's median over its own three rounds.
    assert times == {"a": 6, "b": 4, "c": 5}
