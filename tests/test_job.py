"""The main job's pieces that run without a GPU."""

from __future__ import annotations

import json
import sys

import pytest
import torch

from inductor_cutedsl.cli import run as job
from inductor_cutedsl.cli.block import BlockSize, LlamaBlock, make_block
from inductor_cutedsl.cli.report import GemmTuning

SMALL = BlockSize(batch=1, seq=16, hidden=64, heads=4, mlp=128)


def test_block_runs_and_lists_its_gemms():
    block, x = make_block(SMALL, device="cpu")
    assert block(x).shape == x.shape
    linears = {n: m for n, m in block.named_modules() if isinstance(m, torch.nn.Linear)}
    for name, m, n, k in SMALL.gemms():
        assert (linears[name].out_features, linears[name].in_features) == (n, k)
        assert m == SMALL.tokens
    assert len(SMALL.gemms()) == len(linears)
    assert isinstance(block, LlamaBlock)


def synthetic_result():
    def tuning(winner, ms):
        return GemmTuning(
            "mm", [[8192, 4096], [4096, 14336]], {"aten": 1, "cutedsl": 4}, {"aten": 1.5, "cutedsl": ms}, winner, ms
        )

    gemms = job.gemm_table([tuning("aten", 1.5)], [tuning("cutedsl", 1.4)])
    return {
        "device": "test",
        "gemms": gemms,
        "model_ms": {"eager": 9.0, "stock": 8.0, "ours": 7.5},
        "model_speedup_vs_max_autotune": 8.0 / 7.5,
        "compile_s": {
            "stock_cold": 60.0,
            "ours_cold": 66.0,
            "ours_warm": 50.0,
            "ours_cold_waiting_for_kernel_builds": 4.0,
            "ours_cold_benchmarking_cutedsl": 2.0,
        },
        "compile_ratio_vs_max_autotune": 1.1,
        "cold_cutedsl_compiles": 16,
        "warm_cutedsl_compiles": 0,
        "warm_rebuilt": [],
        "epilogue_fusion": True,
        "fused_epilogues": [{"gemm": "buf3", "size": [8192, 14336], "ops": ["mul", "silu"], "kept": []}],
        "kernels_ms_per_block": {
            "stock": [{"kernel": "triton_tem_fused_mm_0", "launches": 2.0, "ms": 2.9}],
            "ours": [
                {"kernel": "kernel_cutlass_gemm", "launches": 2.0, "ms": 2.6},
                {"kernel": "triton_poi_fused_mul_silu_1", "launches": 1.0, "ms": 0.16},
            ],
        },
    }


def test_gemm_table_report_and_plot(tmp_path, capsys):
    result = synthetic_result()
    row = result["gemms"][0]
    assert row["shape"] == [8192, 14336, 4096] and row["winner"] == "cutedsl"
    assert row["stock_winner"] == "aten"
    job.print_report(result)
    out = capsys.readouterr().out
    assert "8192x14336x4096" in out and "1.067x" in out and "0 CuteDSL compiles" in out
    assert "buf3" in out and "mul, silu" in out
    assert "triton_tem_fused_mm_0" in out and "triton_poi_fused_mul_silu_1" in out
    json.dumps(result)


def test_plot_is_drawn_with_matplotlib(tmp_path):
    pytest.importorskip("matplotlib")
    assert job.plot(synthetic_result(), str(tmp_path / "p.png"))
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_plot_without_matplotlib_says_how_to_get_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # an import of it fails
    assert not job.plot(synthetic_result(), str(tmp_path / "p.png"))
    assert "pip install 'inductor-cutedsl[plot]'" in capsys.readouterr().out
    assert not (tmp_path / "p.png").exists()


def test_rel_err():
    from inductor_cutedsl.cli.report import rel_err

    a = torch.ones(4, 4)
    assert rel_err(a, a) == 0.0
    assert rel_err(a * float("nan"), a) == float("inf")


@pytest.mark.skipif(torch.cuda.is_available(), reason="exercises the no-GPU path")
def test_main_without_gpu_precompiles_the_block(tmp_path, capsys):
    from inductor_cutedsl import __main__ as entry
    from inductor_cutedsl import config

    with config.patch(cache_dir=str(tmp_path), max_configs=1):
        entry.main(["--workers", "2"])
        out = capsys.readouterr().out
        assert "no CUDA GPU" in out and "compiled now" in out
        assert "[1/" in out and "compiled in" in out  # each kernel as it is built, i of n
        entry.main(["--workers", "2"])  # second run: everything cached
        assert "kernels for the block's GEMMs are cached" in capsys.readouterr().out  # nothing built again
    assert list(tmp_path.glob("*.o"))


def test_stock_and_our_compiles_of_one_block_stay_two(monkeypatch):
    """The job times both compiled blocks after compiling both: the stock one must not
    be shared with ours, nor recompile later under our settings."""
    from torch._dynamo.utils import counters

    import inductor_cutedsl

    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)  # CPU tensors here
    m, x = torch.nn.Linear(8, 8), torch.randn(4, 8)
    counters.clear()
    inductor_cutedsl.disable()
    try:
        stock, _, _, _ = job.compile_cold(m, x)
        assert "CUTEDSL" not in job.compile_options()["max_autotune_gemm_backends"]
    finally:
        inductor_cutedsl.enable()
    assert "CUTEDSL" in job.compile_options()["max_autotune_gemm_backends"]
    ours, _, _, _ = job.compile_cold(m, x)
    assert counters["stats"]["unique_graphs"] == 2
    with torch.no_grad():
        stock(x), ours(x), stock(x)
    assert counters["stats"]["unique_graphs"] == 2, "a compiled block recompiled"


def test_our_kernels_are_recognised_in_a_profile():
    from inductor_cutedsl.cli.report import ran_cutedsl

    assert ran_cutedsl(
        [{"kernel": "nvjet_sm90_tst_256x128"}, {"kernel": "kernel_cutlass_kernel_inductor_cutedslkernel_0"}]
    )
    assert not ran_cutedsl([{"kernel": "nvjet_sm90_tst_256x128"}, {"kernel": "triton_poi_fused_add_0"}])


def test_result_files_hold_the_same_json_a_line_per_summary_key_and_per_row(tmp_path):
    """The results are compact (they travel to the GPU machine with the tree) and still
    read and diff by line: one per top-level key, one per row."""
    from inductor_cutedsl.cli.report import write_json

    result = {
        "device": "NVIDIA H200",
        "geomean": 1.0512,
        "nested": {"a": [1, 2.5, None], "b": {"c": "d"}},
        "rows": [{"row": "gpt2", "ms": [0.1, 0.2]}, {"row": "bert", "ms": []}],
        "empty": [],
        "names": ["x", "y"],
    }
    path = tmp_path / "out" / "r.json"
    write_json(result, str(path))
    text = path.read_text()
    assert json.loads(text) == result
    lines = text.splitlines()
    assert lines[0] == "{" and lines[-1] == "}" and len(lines) == 2 + 6 + 3
    assert lines[1] == '"device": "NVIDIA H200",' and lines[2] == '"geomean": 1.0512,'
    assert '{"row":"bert","ms":[]}' in lines and '"names": ["x","y"]' in lines
    assert len(text) < len(json.dumps(result, indent=2))
