"""Interleaved measurement order, and the benchmarks' side-by-side rounds (no GPU needed)."""

from __future__ import annotations

import collections

import pytest

from benchmarks import harness
from inductor_cutedsl import timing
from inductor_cutedsl.timing import balanced_rounds, interleaved_rounds, rotations


def test_rounds_follow_a_balanced_design_and_give_each_contender_its_own_rounds():
    order = []
    measures = {name: (lambda name=name: order.append(name) or len(order)) for name in "abc"}
    times = interleaved_rounds(measures, 3)
    assert order == list("abccbabca")
    # Each contender's three rounds, in order: a median of them is its figure.
    assert times == {"a": [1, 6, 9], "b": [2, 5, 7], "c": [3, 4, 8]}


@pytest.mark.parametrize("count", range(1, 8))
def test_each_contender_takes_every_position_and_follows_every_other_equally_often(count):
    names = [f"c{i}" for i in range(count)]
    rounds = list(rotations(names, balanced_rounds(count)))
    assert all(sorted(r) == names for r in rounds)
    positions = collections.Counter((i, name) for r in rounds for i, name in enumerate(r))
    assert set(positions.values()) == {len(rounds) // count}
    follows = collections.Counter(pair for r in rounds for pair in zip(r, r[1:], strict=False))
    assert len(follows) == count * (count - 1)
    assert len(set(follows.values())) <= 1
    # A longer run repeats the design.
    assert list(rotations(names, 2 * len(rounds))) == rounds + rounds


@pytest.mark.parametrize(("count", "asked", "run"), [(2, 5, 6), (3, 5, 6), (4, 5, 4), (4, 3, 4), (5, 3, 10)])
def test_side_by_side_runs_whole_designs(monkeypatch, count, asked, run):
    calls = []
    monkeypatch.setattr(timing, "bench", lambda fn, rep: calls.append(fn) or 1.0)
    harness.side_by_side({i: i for i in range(count)}, rounds=asked)
    assert len(calls) == count * run


def test_a_measurement_without_a_length_takes_one_from_its_replays_time(monkeypatch):
    """Side-by-side measurements last REPLAYS replays' worth of the kernel, between
    MIN_REP_MS and the maximum asked: a 10 us GEMM's decision must not cost a 1 ms one's."""
    asked = []
    monkeypatch.setattr(timing, "graphed_run", lambda make: make())
    monkeypatch.setattr(timing, "bench", lambda fn, rep, warmup: asked.append((rep, warmup)) or fn())
    for kernel_ms in (0.001, 0.02, 0.1, 5.0):
        monkeypatch.setattr(timing, "replay_ms", lambda replay, ms=kernel_ms: ms)
        assert timing.graph_median(lambda ms=kernel_ms: lambda: ms)() == kernel_ms
    assert asked == [
        (timing.MIN_REP_MS, timing.MIN_REP_MS),
        (6, 6),
        (30, timing.MAX_WARMUP_MS),
        (timing.MAX_REP_MS, timing.MAX_WARMUP_MS),
    ]
    timing.graph_median(lambda: lambda: 0, rep=7, warmup=2)()
    timing.graph_median(lambda: lambda: 0, max_ms=20)()
    assert asked[-2:] == [(7, 2), (20, 20)]


class FakeGpu:
    """``torch.cuda``'s calls that ``enqueue_each_ms`` makes: the GPU's sleep ends before
    the host's last call of an attempt where ``caught_up`` says so."""

    def __init__(self, caught_up: list[bool]) -> None:
        self.caught_up = caught_up
        self.sleeps: list[int] = []
        fake = self

        class Event:
            def record(self) -> None:
                pass

            def query(self) -> bool:
                return fake.caught_up[len(fake.sleeps) - 1]

        self.Event = Event

    def _sleep(self, cycles: int) -> None:
        self.sleeps.append(cycles)

    def synchronize(self) -> None:
        pass

    def current_device(self) -> int:
        return 0


@pytest.mark.parametrize("caught_up", [[False], [True, False], [True, True, True]])
def test_launch_paths_are_timed_behind_one_sleep_and_an_impure_attempt_again(monkeypatch, caught_up):
    """Every function's calls of an attempt are enqueued behind one GPU sleep; an attempt
    the GPU caught up with is taken again behind a sleep four times as long, and after
    the last retry nothing is returned (a figure that includes waiting is no launch
    path's)."""
    gpu = FakeGpu(caught_up)
    for name in ("Event", "_sleep", "synchronize", "current_device"):
        monkeypatch.setattr(timing.torch.cuda, name, getattr(gpu, name))
    monkeypatch.setattr(timing, "sleep_cycles_per_ms", lambda device: 1000.0)
    calls: collections.Counter = collections.Counter()
    fns = {name: (lambda name=name: calls.update([name])) for name in ("aten", "ours")}
    got = timing.enqueue_each_ms(fns, calls=5)
    attempts = len(gpu.sleeps)
    expected = caught_up.index(False) + 1 if False in caught_up else 1 + timing.IMPURE_RETRIES
    assert attempts == expected
    assert all(b == pytest.approx(4 * a, abs=4) for a, b in zip(gpu.sleeps, gpu.sleeps[1:], strict=False))
    # A first call, the guess's calls, then each attempt's.
    assert calls == {"aten": 1 + 5 + 5 * attempts, "ours": 1 + 5 + 5 * attempts}
    if caught_up[-1]:
        assert got is None
    else:
        assert set(got) == {"aten", "ours"} and all(0 <= ms < 1 for ms in got.values())
