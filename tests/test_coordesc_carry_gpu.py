"""On the GPU: a Triton kernel compiled again in one process runs the config coordinate
descent found the first time, untuned, where it comes back from a compile worker
(``compat.autotune.carry_coordinate_descent``: the worker's pickle drops the mark).
Without it, every compile tunes the kernel again from host-bound timings and may run
another config (docs/findings.md, Timing)."""

from __future__ import annotations

import time

import pytest
import torch

pytestmark = pytest.mark.gpu


def _pool_ready(async_compile, timeout_s: float = 120.0) -> bool:
    """Whether Inductor's compile workers take jobs (they start in the background)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if async_compile.AsyncCompile.use_process_pool():
            return True
        time.sleep(0.5)
    return False


def test_a_kernel_compiled_again_runs_its_tuned_config_untuned(tmp_path, monkeypatch):
    from torch._inductor import async_compile
    from torch._inductor import config as inductor_config
    from torch._inductor.runtime import triton_heuristics as th
    from torch._inductor.runtime.coordinate_descent_tuner import CoordescTuner

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    tuned: list[str] = []
    tune = CoordescTuner.autotune

    def counted(self, *args, **kwargs):
        tuned.append(self.name)
        return tune(self, *args, **kwargs)

    monkeypatch.setattr(CoordescTuner, "autotune", counted)
    # An odd size no other test compiles: the first compile misses every cache.
    x = torch.randn(3001, 1999, device="cuda")

    def fn(t):
        return torch.sin(t * 1.5) + torch.cos(t) * 0.25

    options = {"coordinate_descent_tuning": True, "fx_graph_cache": False, "max_autotune_pointwise": True}
    with inductor_config.patch(compile_threads=4):
        assert _pool_ready(async_compile), "the compile workers did not start: nothing here goes through them"
        outs, tunings = [], []
        for _ in range(2):
            torch._dynamo.reset()
            outs.append(torch.compile(fn, options=options)(x))
            torch.cuda.synchronize()
            tunings.append(list(tuned))
    first, both = tunings
    reference = fn(x.double())
    for out in outs:
        assert torch.linalg.norm(out.double() - reference) / torch.linalg.norm(reference) < 1e-5
    assert first, "the first compile tuned nothing: the test shows nothing"
    assert both == first, "the second compile tuned its kernels again"
    # The winner came back from a worker (stock's pickle drops its mark): our fix is
    # what kept it, not an in-process compile.
    assert getattr(th.CachingAutotuner.restore_after_unpickle, "carries_coordesc", False)
