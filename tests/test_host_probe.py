"""benchmarks/host_probe.py's CPU budget of a call, on CPU steps (the probe itself needs a GPU)."""
from __future__ import annotations

import gc
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import host_probe  # noqa: E402
import models  # noqa: E402


def test_cpu_budget_tells_work_in_another_thread_from_waiting(monkeypatch):
    """Busy work in a helper thread shows as process CPU above wall; a sleep as wall above
    CPU; a forced collection as a GC run; the phases of a training step are timed apart."""
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)

    def spin(seconds: float) -> None:  # CPU seconds of this thread, however loaded the box is
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass

    def helped() -> None:  # the calling thread waits on a helper that computes
        t = threading.Thread(target=spin, args=(0.004,))
        t.start()
        t.join()

    def collects() -> None:
        time.sleep(0.004)
        gc.collect(0)  # the youngest generation: a full collection takes ~0.2 s with torch loaded

    phases = {name: (lambda: time.sleep(0.004) or "loss", lambda loss: time.sleep(0.001))
              for name in ("helped", "collects")}  # fmt: skip
    out = host_probe.cpu_budget({"helped": helped, "collects": collects}, calls=3, rounds=2, phases=phases)
    helper, sleeper = out["helped"], out["collects"]
    assert helper["process_cpu_us"] > 3000 and helper["thread_cpu_us"] < 0.5 * helper["process_cpu_us"]
    assert sleeper["wall_us"] > 4000 > sleeper["process_cpu_us"] and sleeper["gc_runs"] >= 1
    assert sleeper["gc_us"] > 0
    for rec in out.values():
        assert rec["forward_us"] >= 4000 and 1000 <= rec["backward_us"] < rec["forward_us"]


def test_train_phases_drop_old_gradients_and_run_forward_then_backward():
    w = torch.nn.Parameter(torch.ones(3))
    x = torch.ones(3, requires_grad=True)
    x.grad, w.grad = torch.zeros(3), torch.zeros(3)
    forward, backward = models.train_phases(lambda t: (t * w).sum(), x, [w])
    loss = forward()
    assert x.grad is None and w.grad is None
    backward(loss)
    assert torch.equal(w.grad, torch.ones(3)) and torch.equal(x.grad, torch.ones(3))


def test_train_phases_begin_a_cuda_graph_step_only_under_cuda_graphs(monkeypatch):
    """Under CUDA graphs each step's forward starts a new graph-tree step (else the tree
    keeps the previous step's outputs alive and re-records); without, it starts none."""
    begun = []
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: begun.append(1))
    x = torch.ones(2, requires_grad=True)
    for cudagraphs, expected in ((False, 0), (True, 2)):
        begun.clear()
        step = models.make_step(lambda t: t.sum(), x, "train", [], cudagraphs)
        step()
        forward, _ = models.train_phases(lambda t: t.sum(), x, [], cudagraphs)
        forward()
        assert len(begun) == expected
