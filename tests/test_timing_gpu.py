"""CUDA graph replays used for timing keep what they touch alive."""
from __future__ import annotations

import gc
import weakref

import pytest
import torch

from inductor_cutedsl.timing import graphed_run

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
