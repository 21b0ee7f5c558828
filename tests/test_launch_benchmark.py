"""benchmarks/launch.py without a GPU: the command line, the reading of generated code,
the timing loop and the JSON it writes (the GPU's part faked)."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks import launch

OURS = """
def call(args):
    arg0_1, arg1_1 = args
    with torch.cuda._DeviceGuard(0):
        buf0 = empty_strided_cuda((16, 4096), (4096, 1), torch.bfloat16)
        cutedsl_fused_mm_0.run(arg0_1, reinterpret_tensor(arg1_1, (4096, 4096), (1, 4096), 0), buf0, stream=stream0)
    return (buf0, )
"""
TRITON = """
def call(args):
    with torch.cuda._DeviceGuard(0):
        buf0 = empty_strided_cuda((128, 128), (128, 1), torch.bfloat16)
        triton_tem_fused_mm_0.run(arg0_1, arg1_1, buf0, 1, 1, 1, stream=stream0)
        triton_poi_fused_add_1.run(buf0, 16384, stream=stream0)
    return (buf0, )
"""
ATEN = """
def call(args):
    with torch.cuda._DeviceGuard(0):
        buf0 = empty_strided_cuda((16, 4096), (4096, 1), torch.bfloat16)
        extern_kernels.mm(arg0_1, reinterpret_tensor(arg1_1, (4096, 4096), (1, 4096), 0), out=buf0)
    return (buf0, )
"""


def test_arguments():
    args = launch.parse_args([])
    assert args.shapes == list(launch.SHAPES) and args.json is None and args.calls > 0 and args.rounds > 0
    args = launch.parse_args(["--shapes", "decode", "--json", "x.json", "--calls", "50", "--rounds", "3"])
    assert (args.shapes, args.json, args.calls, args.rounds) == (["decode"], "x.json", 50, 3)
    with pytest.raises(SystemExit):
        launch.parse_args(["--shapes", "huge"])
    with pytest.raises(SystemExit):
        launch.parse_args(["--calls", "0"])


def test_shapes_are_tma_legal_and_one_is_decode_sized():
    for _, n, k, op in launch.SHAPES.values():
        assert n * 2 % 16 == 0 and k * 2 % 16 == 0 and op in ("matmul", "linear")
    assert any(m <= 64 for m, _, _, _ in launch.SHAPES.values())


def test_kernel_kinds_read_from_generated_code():
    counts = {name: launch.kernel_counts(code) for name, code in (("ours", OURS), ("triton", TRITON), ("aten", ATEN))}
    assert counts["ours"] == {"cutedsl": 1, "triton_template": 0, "triton_other": 0, "aten": 0}
    assert counts["triton"] == {"cutedsl": 0, "triton_template": 1, "triton_other": 1, "aten": 0}
    assert counts["aten"] == {"cutedsl": 0, "triton_template": 0, "triton_other": 0, "aten": 1}
    assert all(launch.ran_expected(name, c) for name, c in counts.items())
    assert not launch.ran_expected("ours", counts["aten"])  # a refused GEMM falls back to ATen


def test_without_a_gpu_it_says_so_and_exits_0(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert launch.main(["--json", str(tmp_path / "out.json")]) == 0
    assert "no CUDA GPU" in capsys.readouterr().out
    assert not (tmp_path / "out.json").exists()


class FakeEvent:
    def __init__(self, **kwargs):
        pass

    def record(self):
        pass

    def query(self):  # the sleep outlasted every window
        return False


def test_timing_windows_alternate_and_never_sync(monkeypatch):
    calls, syncs = [], []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: syncs.append(len(calls)))
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: None)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    fns = {name: (lambda *a, name=name: calls.append(name)) for name in ("ours", "triton", "aten")}
    samples, busy = launch.host_us(fns, (), calls=5, rounds=3, cycles_per_ms=1000.0)
    assert busy and all(len(v) == 3 and all(x > 0 for x in v) for v in samples.values())
    windows = [calls[i] for i in range(0, len(calls), 5)]
    assert windows == ["ours", "triton", "aten", "triton", "aten", "ours", "aten", "ours", "triton"]
    assert all(calls[i : i + 5] == [calls[i]] * 5 for i in range(0, len(calls), 5))
    assert all(n % 5 == 0 for n in syncs)  # syncs only between windows


def test_run_writes_rows_and_summary(tmp_path, monkeypatch):
    """A whole run with the GPU's part faked: each row holds the three host times, the
    ratio, the kernels seen; the summary the worst ratio."""
    codes = {"ours": OURS, "triton": TRITON, "aten": ATEN}
    host = {"ours": 20.0, "triton": 25.0, "aten": 18.0}

    def compile_for(backend, fn, args):
        return (lambda *a, b=backend: fn(*a)), launch.kernel_counts(codes[backend]), 1.0

    def host_us(fns, args, calls, rounds, cycles_per_ms):
        return {name: [host[name] * (1 + 0.01 * r) for r in range(rounds)] for name in fns}, True

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "fake", raising=False)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(launch, "sleep_cycles_per_ms", lambda device: 1e6)
    monkeypatch.setattr(launch, "compile_for", compile_for)
    monkeypatch.setattr(launch, "host_us", host_us)
    monkeypatch.setattr(launch, "breakdown", lambda *a: {"host_us_launcher": 5.0})
    cpu_operands = (lambda a, b: a @ b), (torch.ones(4, 4), torch.eye(4))
    monkeypatch.setattr(launch, "operands", lambda m, n, k, op: cpu_operands)
    out = tmp_path / "launch.json"
    assert launch.main(["--json", str(out), "--rounds", "3"]) == 0
    result = json.loads(out.read_text())
    assert [r["shape"] for r in result["rows"]] == list(launch.SHAPES)
    row = result["rows"][0]
    assert (row["host_us_ours"], row["host_us_triton"], row["host_us_aten"]) == (20.2, 25.25, 18.18)
    assert row["launch_ratio_vs_triton"] == 0.8 and row["ran_expected"] == {"ours": True, "triton": True, "aten": True}
    assert row["breakdown_ours"] == {"host_us_launcher": 5.0}
    assert result["launch_ratio_vs_triton_max"] == 0.8 and result["ours_ran_cutedsl"] is True
    assert result["device"] == "fake" and result["gpu_stayed_busy"] is True and result["rel_err_max"] == 0
    assert launch.summarize([])["launch_ratio_vs_triton_max"] is None
