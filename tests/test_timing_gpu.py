"""Timing on the GPU: CUDA graph replays keep what they touch alive; launch paths timed alone."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from inductor_cutedsl.timing import enqueue_each_ms, enqueue_ms, graphed_run

pytestmark = pytest.mark.gpu


def test_graph_replay_keeps_the_captured_tensors_alive():
    """A run function that owns its tensors (as Inductor's benchmark run functions do)
    is dropped by the caller; the replay must keep them, or it writes freed memory."""
    refs = {}

    def make():
        x = torch.randn(1 << 20, device="cuda")
        y = torch.empty_like(x)
        refs["x"], refs["y"] = weakref.ref(x), weakref.ref(y)
        return lambda: torch.mul(x, 2.0, out=y)

    replay = graphed_run(make)
    gc.collect()
    torch.cuda.empty_cache()
    assert refs["x"]() is not None and refs["y"]() is not None
    replay()
    torch.cuda.synchronize()
    assert torch.equal(refs["y"](), refs["x"]() * 2.0)
    del replay
    gc.collect()
    assert refs["y"]() is None, "released with the replay"


def test_enqueue_time_is_the_launch_path_alone():
    """A launch times as host microseconds with the GPU still asleep; a call that waits
    for the GPU (a sync) is flagged as not pure; a slower launch path reads slower."""
    a = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(a)
    ms, pure = enqueue_ms(lambda: torch.mm(a, a, out=out))
    assert pure and 0 < ms < 1
    slow, pure_slow = enqueue_ms(lambda: [torch.mm(a, a, out=out) for _ in range(8)])
    assert pure_slow and slow > 3 * ms
    _, pure_sync = enqueue_ms(torch.cuda.synchronize, calls=3)
    assert not pure_sync


def test_launch_paths_timed_behind_one_sleep_read_as_timed_alone():
    """``enqueue_each_ms`` times several launch paths behind one sleep: each reads about
    what ``enqueue_ms`` reads for it alone, in the same order; a sync is never pure."""
    a = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(a)
    one, eight = (lambda: torch.mm(a, a, out=out)), (lambda: [torch.mm(a, a, out=out) for _ in range(8)])
    together = enqueue_each_ms({"one": one, "eight": eight})
    assert together is not None and 0 < together["one"] < 1
    assert together["eight"] > 3 * together["one"]
    alone, pure = enqueue_ms(one)
    assert pure and 0.3 < together["one"] / alone < 3
    assert enqueue_each_ms({"one": one, "sync": torch.cuda.synchronize}, calls=3) is None
