"""What the device runs, checked here first (no GPU): every config the benchmarks and
the probe would build is valid, so no device time is lost to a typo."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from inductor_cutedsl.bench.gemm import SHAPES, plan_specs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import kernel_probe  # noqa: E402
import timing_probe  # noqa: E402


def test_gemm_benchmark_plans_valid_specs_with_stream_k_candidates():
    plan = plan_specs()
    assert sorted(plan) == sorted(SHAPES)
    for specs in plan.values():
        assert specs and all(s.config.invalid_reason() is None for s in specs)
        assert any(s.config.stream_k for s in specs)


def test_probe_configs_are_valid_and_twins_differ_only_as_named():
    for cfg in kernel_probe.VARIANTS:
        assert cfg.invalid_reason() is None, cfg.name()
    for shape in SHAPES:
        twins = kernel_probe.twins(*shape)
        assert set(twins) == {"stream_k", "whole_tile_staging"}
        for base, variant in twins.values():
            assert base.invalid_reason() is None and variant.invalid_reason() is None
            assert base != variant and base.tile_m == variant.tile_m and base.swizzle == variant.swizzle
    fused = kernel_probe.FUSED
    assert sorted(name.removesuffix("_pairs") for name in fused) == sorted(
        ["relu_residual", "relu_residual", "silu_gate", "silu_gate"]
    )
    assert {e.operands[0].pairs for e in fused.values()} == {False, True}


def test_probe_operand_layouts_meet_the_paired_declaration():
    """The probe hands its residual straight to the kernel (no launcher check): it
    must be contiguous with an even N, as the pairs declaration assumes."""
    from inductor_cutedsl.runtime.support import operand_args, pairs_reason

    for m, n, _ in kernel_probe.FUSED_SHAPES:
        residual = torch.empty(m, n, dtype=torch.bfloat16)
        assert pairs_reason(operand_args(residual, None, 1, m, n), n) is None


def test_timing_probe_protocols_time_both_gemms():
    for order in timing_probe.PROTOCOLS.values():
        assert {"ours", "cublas"} <= set(order) and len(set(order)) == len(order)
    assert {shortlist_shape[:2] for shortlist_shape in timing_probe.SHAPES} <= {s[:2] for s in SHAPES}


def test_fp8_benchmark_plans_kernels_that_can_be_built():
    pytest.importorskip("cutlass")
    import fp8

    from inductor_cutedsl.kernels.sm90_gemm import Sm90Gemm

    for shape in fp8.SHAPES:
        for mode in fp8.MODES:
            for promote in (False, True):
                specs = fp8.candidate_specs(*shape, mode, promote, limit=6)
                # Promoting: each config in each promotion mode it has the registers
                # for, side by side, the trial configs among them.
                assert specs and len(specs) <= (3 * (6 + len(fp8.TRIAL)) if promote else 6)
                trial = {(c.tile_m, c.tile_n, c.pingpong) for c in fp8.TRIAL}
                assert not promote or trial <= {(s.config.tile_m, s.config.tile_n, s.config.pingpong) for s in specs}
                assert {s.promote for s in specs} == ({1, 2, 3} if promote else {0})
                for s in specs:  # the kernel's own checks, without compiling it
                    Sm90Gemm(s.config, s.ab_dtype, s.out_dtype, s.a_major, s.b_major, s.epilogue, s.dual, s.promote)
                assert not promote or all(s.config.promotion_reason(s.promote) is None for s in specs)


def test_fp8_block_quantizes_every_linear_row_wise():
    import fp8
    import models

    block, _ = models.make_block("llama", "small", device="cpu", dtype=torch.float32, scale=8)
    linears = [m for m in block.modules() if isinstance(m, torch.nn.Linear)]
    q = fp8.quantized(block)
    assert not any(isinstance(m, torch.nn.Linear) for m in q.modules())
    layers = [m for m in q.modules() if isinstance(m, fp8.Fp8Linear)]
    assert len(layers) == len(linears)
    for layer, linear in zip(layers, linears):
        n, k = linear.weight.shape
        assert layer.wq.dtype == torch.float8_e4m3fn and layer.wq.shape == (n, k) and layer.w_scale.shape == (1, n)
        dequant = layer.wq.float() * layer.w_scale.t()
        err = (dequant - linear.weight).norm() / linear.weight.norm()
        assert err < 0.05, err  # e4m3: 3 mantissa bits


def test_compile_in_process_records_what_a_late_compile_carries():
    import gc

    import compile_in_process as cip
    import models

    state = cip.process_state()
    assert state["gc_objects"] > 0 and state["rss_mb"] > 0 and state["threads"] >= 1 and state["children"] >= 0
    with models.GcTimer() as timer:
        gc.collect()
    assert timer.passes[2] >= 1 and timer.seconds >= 0
    assert timer not in gc.callbacks


def test_compile_in_process_runs_the_backends_asked_for(tmp_path):
    import compile_in_process as cip

    out = tmp_path / "cip.json"
    result = cip.main(["--smoke", "--backends", "stock", "--before", "", "--json", str(out), "--timeout", "300"])
    assert "ours" not in result and json.loads(out.read_text()) == result
    fresh, late = result["stock"]["fresh"], result["stock"]["late"]
    assert len(fresh) == len(late) == 1 and all(c["seconds"] > 0 for c in fresh + late)
    with pytest.raises(SystemExit):
        cip.main(["--smoke", "--backends", "stock,theirs"])


def test_compile_in_process_samples_each_compile_when_asked(tmp_path):
    import compile_in_process as cip
    import wall_sampler

    sample = tmp_path / "samples.txt"
    result = cip.main(["--smoke", "--backends", "stock", "--before", "a:b:inference", "--timeout", "300",
                       "--sample", str(sample)])  # fmt: skip
    records = result["stock"]["fresh"] + result["stock"]["late"]
    assert len(records) == 3
    for record in records:  # every compile carries which threads compiled what
        assert record["triton_compiles"]["template_compiles_in_main_thread"] == 0
    headers = [h for h, _ in wall_sampler.read_folded(f"{sample}.folded.gz")]
    assert [h.split(":")[0] for h in headers] == ["stock vit", "stock a", "stock vit"]
    assert "(fresh)" in headers[0] and "(late 2 of 2)" in headers[2]
    assert sample.read_text().count("samples every") == 3


def test_precompile_probe_tells_a_compile_from_a_cache_hit(tmp_path, monkeypatch):
    import precompile_probe as probe
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(probe, "EVENTS", [])
    probe.install()

    @triton.jit
    def triton_mm(x, n: tl.constexpr):
        tl.store(x + tl.arange(0, n), tl.arange(0, n))

    src = triton.compiler.ASTSource(fn=triton_mm, signature={"x": "*fp32", "n": "constexpr"}, constexprs={"n": 16})
    try:
        for _ in range(2):  # a miss (every stage runs), then a hit (none)
            triton.compile(src, target=GPUTarget("cuda", 90, 32))
    finally:
        probe.uninstall()
    assert triton.compile.__module__ == "triton.compiler.compiler"
    compiles = [e for e in probe.EVENTS if e["kind"] == "triton.compile"]
    assert [e["stages_run"] > 0 for e in compiles] == [True, False]
    assert compiles[0]["file"] == "test_benchmarks.py" and compiles[0]["thread"] == "MainThread"
    summary = probe.summary(probe.EVENTS)
    assert summary["template_compiles_in_main_thread"] == 1 and summary["misses_by_thread"]["MainThread"]["compiles"] == 1
    assert list(summary["main_thread"]) == ["triton_mm test_benchmarks.py"]


def test_distributed_benchmark_rows_take_each_rounds_slowest_rank():
    import distributed

    args = distributed.parse_args(["--wrap", "fsdp2", "--block", "llama:small", "--rounds", "2"])
    assert (args.wrap, args.family, args.size, args.rounds, args.cold) == (["fsdp2"], "llama", "small", 2, True)
    with pytest.raises(SystemExit):
        distributed.parse_args(["--steps", "0"])
    ranks = [
        {"times": {"stock": [10.0, 12.0], "ours": [9.0, 11.0]}, "losses": {"stock": [1.0, 2.0], "ours": [1.01, 2.0]},
         "built": ["k1", "k2"]},
        {"times": {"stock": [11.0, 10.0], "ours": [8.0, 12.0]}, "losses": {"stock": [1.0, 4.0], "ours": [1.0, 4.2]},
         "built": ["k3"]},
    ]  # fmt: skip
    row = distributed.summarize_wrap("fsdp2", ranks, {"stock": [30.0, 31.0], "ours": [33.0, 32.0]})
    assert row["step_ms"] == {"stock": 11.5, "ours": 10.5} and row["round_ratios"] == [round(11 / 9, 4), 1.0]
    assert row["loss_rel_diff"] == pytest.approx(0.05) and row["kernels_built_twice"] == 0
    assert row["cold_compile_ratio"] == round(33 / 31, 3)
    ranks[1]["built"] = ["k1"]
    assert distributed.summarize_wrap("fsdp2", ranks, None)["kernels_built_twice"] == 1


def test_distributed_benchmark_says_it_needs_a_gpu(capsys):
    import distributed

    if torch.cuda.is_available():
        pytest.skip("has a GPU")
    assert distributed.main(["--wrap", "ddp"]) is None and "needs a CUDA GPU" in capsys.readouterr().out


def test_duty_probe_sizes_copies_and_finds_configs():
    import duty_probe

    assert duty_probe.copy_elements(1.0, 1.0) == 0
    assert duty_probe.copy_elements(0.5, 0.5) == int(0.5e-3 * duty_probe.COPY_BYTES_PER_S / 4)
    assert duty_probe.copy_elements(0.5, 0.25) == 3 * duty_probe.copy_elements(0.5, 0.5)
    for shape in duty_probe.SHAPES:
        picked = duty_probe.configs(*shape, None)
        assert len(picked) == 3 and all(c.invalid_reason() is None for c in picked)
        assert duty_probe.configs(*shape, [picked[1].name()]) == [picked[1]]
    with pytest.raises(SystemExit, match="not in the shortlist"):
        duty_probe.configs(4096, 16384, 3072, ["no_such_config"])
    rows = [{"kernel": "nvjet_gemm", "ms": 1.0}, {"kernel": "copy_kernel", "ms": 0.5}]
    assert duty_probe.gemm_us(rows, {"copy_kernel"}, reps=20) == 50.0


def _gather_rank(rank: int, rendezvous: str, out: str) -> None:
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import distributed

    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2)
    try:
        torch.manual_seed(0)  # the same weights on both ranks
        block = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Linear(5, 3))  # 5 and 3 rows: uneven shards
        fully_shard(block)
        block(torch.randn(4, 6, generator=torch.Generator().manual_seed(rank))).square().sum().backward()
        assert all(hasattr(p.grad, "full_tensor") for p in block.parameters())
        same = []
        for tensors in (list(block.parameters()), [p.grad for p in block.parameters()]):  # grads: DTensors too
            host = distributed.full_tensors(tensors, via_host=True)
            whole = distributed.full_tensors(tensors, via_host=False)
            same += [(h.shape == w.shape and torch.equal(h, w)) for h, w in zip(host, whole)]
        torch.save(same, f"{out}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_distributed_gathers_fsdp2_shards_through_the_host_as_full_tensor_does(tmp_path):
    """The one-GPU gloo fallback gathers FSDP2's shards on the host (gloo's all-gather of
    CUDA DTensors can kill the process); here on CPU, against ``full_tensor``."""
    import torch.multiprocessing as mp

    mp.spawn(_gather_rank, args=(str(tmp_path / "rendezvous"), str(tmp_path)), nprocs=2, join=True)
    for rank in range(2):
        same = torch.load(tmp_path / f"rank{rank}.pt")
        assert len(same) == 8 and all(same), same


def _sampled_wait():
    """A sampler's record of 0.2 s busy, a 0.6 s wait for a timer, 0.1 s busy."""
    import threading
    import time

    import wall_sampler

    took = {}

    def waits_for_a_future():
        done = threading.Event()
        t0 = time.perf_counter()
        threading.Timer(0.6, done.set).start()
        done.wait()
        took["wait"] = time.perf_counter() - t0

    def busy(seconds):
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass

    flag = threading.Event()
    events = {"flag set": flag.is_set, "never": lambda: False}
    start = time.perf_counter()
    with wall_sampler.WallSampler(interval=0.02, events=events) as sampler:
        busy(0.2)
        took["flag"] = time.perf_counter() - start
        flag.set()
        waits_for_a_future()
        busy(0.1)
    sampler.took = took  # what the samples must tell, measured directly (a loaded CI box stretches it)
    return sampler


def test_wall_sampler_finds_where_the_thread_waited_and_for_how_long():
    sampler = _sampled_wait()
    flag_at, wait_s, slack = sampler.took["flag"], sampler.took["wait"], 0.15
    assert flag_at - 0.01 <= sampler.seen["flag set"] <= flag_at + slack and "never" not in sampler.seen
    assert "never: not seen" in sampler.report()
    (longest, *_) = sampler.stretches(min_s=0.3)
    assert any(f.endswith(":waits_for_a_future") for f in longest["stack"]), longest
    assert abs(longest["seconds"] - wait_s) <= slack and abs(longest["start_s"] - flag_at) <= slack, longest
    inclusive = dict(sampler.inclusive())
    assert abs(inclusive["test_benchmarks.py:waits_for_a_future"] - wait_s) <= slack
    assert 0.1 <= inclusive["test_benchmarks.py:busy"]
    assert "waits_for_a_future" in sampler.report()
    folded = dict(line.rsplit(" ", 1) for line in sampler.folded().splitlines())
    assert sum(map(int, folded.values())) == len(sampler.samples)
    assert any("test_benchmarks.py:waits_for_a_future;threading.py:wait" in stack for stack in folded)


def test_folded_samples_read_back_per_compile(tmp_path, capsys):
    """``--sample`` appends a gzip member per compile (header, folded stacks); the
    reader gives each compile's inclusive seconds of named frames."""
    import wall_sampler

    sampler = _sampled_wait()
    path = tmp_path / "samples.txt.folded.gz"
    for spec in ("vit:small:inference:max-autotune:stock", "vit:small:inference:max-autotune:ours"):
        sampler.append_to(str(tmp_path / "samples.txt"), f"{spec}: 1.00 s")
    compiles = wall_sampler.read_folded(str(path))
    assert [head for head, _ in compiles] == ["vit:small:inference:max-autotune:stock: 1.00 s",
                                              "vit:small:inference:max-autotune:ours: 1.00 s"]  # fmt: skip
    frame = "test_benchmarks.py:waits_for_a_future"
    for _, stacks in compiles:
        seconds = wall_sampler.frame_seconds(stacks, [frame, "nowhere.py:f"], interval=sampler.interval)
        assert abs(seconds[frame] - sampler.took["wait"]) <= 0.15 and seconds["nowhere.py:f"] == 0
    wall_sampler.main([str(path), "--frames", frame, "--interval", str(sampler.interval)])
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["stock", "ours"] and out[2].startswith(frame)
