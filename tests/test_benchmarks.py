"""What the device runs, checked here first (no GPU): every config the benchmarks would
build is valid, the benchmarks' pure parts compute what they say, and the performance
page is what its generator makes of the committed results."""

from __future__ import annotations

import copy
import json
import os
import statistics
import tarfile
import time
import types
from pathlib import Path

import pytest
import torch

from benchmarks import compile as compile_bench
from benchmarks import distributed, fp8, models, wall_sampler, zygote
from benchmarks.gemm import SHAPES, plan_specs

ROOT = Path(__file__).resolve().parents[1]


def test_gemm_benchmark_plans_valid_specs_with_stream_k_candidates():
    plan = plan_specs()
    assert sorted(plan) == sorted(SHAPES)
    for specs in plan.values():
        assert specs and all(s.config.invalid_reason() is None for s in specs)
        assert any(s.config.stream_k for s in specs)


def test_fp8_benchmark_plans_kernels_that_can_be_built():
    pytest.importorskip("cutlass")
    from inductor_cutedsl.kernels.sm90_gemm import Sm90Gemm

    for shape in fp8.SHAPES:
        for mode in fp8.MODES:
            for promote in (False, True):
                specs = fp8.candidate_specs(*shape, mode, promote, limit=6)
                # Promoting: each config in each promotion mode it has the registers
                # for, side by side, the trial configs among them.
                assert specs and len(specs) <= (3 * (6 + len(fp8.TRIAL)) if promote else 6)
                trial = {(c.tile_m, c.tile_n, c.cluster_m, c.cluster_n) for c in fp8.TRIAL}
                planned = {(s.config.tile_m, s.config.tile_n, s.config.cluster_m, s.config.cluster_n) for s in specs}
                assert not promote or trial <= planned
                assert {s.promote for s in specs} == ({1, 2, 3} if promote else {0})
                for s in specs:  # the kernel's own checks, without compiling it
                    Sm90Gemm(s.config, s.ab_dtype, s.out_dtype, s.a_major, s.b_major, s.epilogue, s.dual, s.promote)
                assert not promote or all(s.config.promotion_reason(s.promote) is None for s in specs)


def test_fp8_block_quantizes_every_linear_row_wise():
    block, _ = models.make_block("llama", "small", device="cpu", dtype=torch.float32, scale=8)
    linears = [m for m in block.modules() if isinstance(m, torch.nn.Linear)]
    q = fp8.quantized(block)
    assert not any(isinstance(m, torch.nn.Linear) for m in q.modules())
    layers = [m for m in q.modules() if isinstance(m, fp8.Fp8Linear)]
    assert len(layers) == len(linears)
    for layer, linear in zip(layers, linears, strict=True):
        n, k = linear.weight.shape
        assert layer.wq.dtype == torch.float8_e4m3fn and layer.wq.shape == (n, k) and layer.w_scale.shape == (1, n)
        dequant = layer.wq.float() * layer.w_scale.t()
        err = (dequant - linear.weight).norm() / linear.weight.norm()
        assert err < 0.05, err  # e4m3: 3 mantissa bits


def test_fp8_static_recipe_shares_one_input_scale_per_input_and_saturates():
    """The static recipe: each Linear's input scale is amax / 448 of what it read while
    calibrating, one tensor for the Linears that read one input (a gated MLP's gate and
    up: their input is quantized once, as the fp8 dual kernel needs); weights
    tensor-wise; the quantized block (run on CPU, whose ``_scaled_mm`` takes tensor-wise
    scales) is near the float block, and an input past the calibrated range saturates
    instead of overflowing."""
    block, x = models.make_block("llama", "small", device="cpu", dtype=torch.float32, scale=8)
    block = block.to(torch.bfloat16)
    x = x.to(torch.bfloat16)
    scales = fp8.calibrate(block, x)
    mlp = next(m for m in block.modules() if hasattr(m, "gate_proj") and hasattr(m, "up_proj"))
    names = {id(m): n for n, m in block.named_modules()}
    gate, up, down = (scales[names[id(getattr(mlp, p))]] for p in ("gate_proj", "up_proj", "down_proj"))
    assert gate is up and gate is not down and gate.dim() == 0 and gate.dtype == torch.float32
    ref = block(x).double()
    q = fp8.quantized(copy.deepcopy(block), scales)
    layers = [m for m in q.modules() if isinstance(m, fp8.Fp8Linear)]
    assert layers and all(layer.w_scale.dim() == 0 and layer.input_scale is not None for layer in layers)
    with torch.no_grad():
        err = (q(x).double() - ref).norm() / ref.norm()
        assert err < 0.1, err
        assert torch.isfinite(q(x * 8)).all(), "past the calibrated range: saturated"


def test_fp8_accuracy_row_measures_against_the_dequantized_float64_product():
    """The accuracy rows' arithmetic on CPU: the reference is the float64 product of the
    dequantized operands (row-wise scales), an exact way reads ~0, a way in bf16 reads its
    rounding, one that drops a scale or the last k-block reads far off, and an output
    never written (NaN) reads inf, never a small number."""
    torch.manual_seed(0)
    m, n, k = 48, 40, 512
    a = (torch.randn(m, k) * 4).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k) * 4).to(torch.float8_e4m3fn).t()
    sa, sb = torch.rand(m, 1) + 0.5, torch.rand(1, n) + 0.5
    ref = fp8.dequantized_reference(a, b, sa, sb)
    assert ref.dtype == torch.float64 and ref.shape == (m, n)
    # Scales apply per row of A and per column of B: check one entry by hand.
    by_hand = sum(float(a[3, i]) * float(b[i, 5]) for i in range(k)) * float(sa[3, 0]) * float(sb[0, 5])
    assert abs(float(ref[3, 5]) - by_hand) <= 1e-9 * max(1.0, abs(by_hand))

    def exact(a, b, sa, sb):
        return (a.double() * sa.double()) @ (b.double() * sb.double())

    row = fp8.accuracy_row(
        k,
        a,
        b,
        sa,
        sb,
        {
            "exact": exact,
            "bf16": lambda *args: exact(*args).to(torch.bfloat16),
            "no_row_scale": lambda a, b, sa, sb: exact(a, b, torch.ones_like(sa), sb),
            "short_k": lambda a, b, sa, sb: exact(a[:, : k - 64], b[: k - 64], sa, sb),
            "unwritten": lambda *args: torch.full((m, n), float("nan")),
        },
    )
    assert row["k"] == k
    assert row["exact"] < 1e-12
    assert 1e-4 < row["bf16"] < 4e-3  # bf16 keeps 8 bits of mantissa
    assert row["no_row_scale"] > 0.1 and row["short_k"] > 0.1
    assert row["unwritten"] == float("inf")


@pytest.mark.parametrize("first", ["stock", "ours"])
def test_an_epilogue_case_compiles_the_side_asked_first_and_says_so(monkeypatch, first):
    """Rows whose two sides ran the same kernels read slower for the side compiled second:
    ``--compile-first`` picks that side, and each row records it."""
    from benchmarks import epilogue

    compiled: list[bool] = []

    def compile_and_run(fn, args, ours):
        compiled.append(ours)
        return fn, fn(*args)

    monkeypatch.setattr(epilogue, "_compile_and_run", compile_and_run)
    monkeypatch.setattr(epilogue, "graphed", lambda fn: fn)
    monkeypatch.setattr(epilogue, "side_by_side", lambda fns: {name: 1.0 + i for i, name in enumerate(fns)})
    monkeypatch.setattr(epilogue, "kernel_times", lambda fn, top: [])
    monkeypatch.setattr(epilogue, "ran_cutedsl", lambda kernels: False)
    x = torch.randn(4, 4, dtype=torch.float64)
    row = epilogue.measure_case("add", (4, 4, 4), lambda a: a + 1, (x,), lambda: x, first=first)
    assert compiled == ([True, False] if first == "ours" else [False, True])
    assert row["compiled_first"] == first
    assert row["vs_max_autotune"] == round(2.0 / 3.0, 4)  # stock's time over ours'


def test_fp8_model_rows_summary():
    """The fp8 model rows' summary: geomeans over every block of stock / ours and of
    stock's bf16 / ours, the first block kept under its earlier keys."""
    blocks = [
        {"block": "llama:prefill", "speedup": 1.21, "speedup_vs_bf16": 1.44},
        {"block": "hf-llama:prefill", "speedup": 0.9, "speedup_vs_bf16": 1.0},
    ]
    s = fp8.block_summary(blocks)
    assert s["model_speedup_vs_max_autotune"] == pytest.approx((1.21 * 0.9) ** 0.5, abs=1e-4)
    assert s["model_speedup_vs_bf16"] == pytest.approx(1.2, abs=1e-4)
    assert s["block"] is blocks[0] and s["block_speedup_vs_max_autotune"] == 1.21
    assert s["blocks"] == blocks


def test_distributed_benchmark_rows_take_each_rounds_slowest_rank():
    args = distributed.parse_args(["--wrap", "fsdp2", "--block", "llama:small", "--rounds", "2"])
    assert (args.wrap, args.family, args.size, args.rounds, args.cold) == (["fsdp2"], "llama", "small", 2, True)
    with pytest.raises(SystemExit):
        distributed.parse_args(["--steps", "0"])
    ranks = [
        {
            "times": {"stock": [10.0, 12.0], "ours": [9.0, 11.0]},
            "losses": {"stock": [1.0, 2.0], "ours": [1.01, 2.0]},
            "built": ["k1", "k2"],
        },
        {
            "times": {"stock": [11.0, 10.0], "ours": [8.0, 12.0]},
            "losses": {"stock": [1.0, 4.0], "ours": [1.0, 4.2]},
            "built": ["k3"],
        },
    ]
    row = distributed.summarize_wrap("fsdp2", ranks, {"stock": [30.0, 31.0], "ours": [33.0, 32.0]})
    assert row["step_ms"] == {"stock": 11.5, "ours": 10.5} and row["round_ratios"] == [round(11 / 9, 4), 1.0]
    assert row["loss_rel_diff"] == pytest.approx(0.05) and row["kernels_built_twice"] == 0
    assert row["cold_compile_ratio"] == round(33 / 31, 3)
    ranks[1]["built"] = ["k1"]
    assert distributed.summarize_wrap("fsdp2", ranks, None)["kernels_built_twice"] == 1


def test_distributed_trainer_steps_on_the_model_suites_loss(monkeypatch):
    """A step's loss is the output's projection on ``models.loss_direction`` (one that moves
    every weight), the same for the float64 reference as for the compiled run; the
    gradients it hands back are those of that loss. On CPU, unwrapped and uncompiled."""
    pytest.importorskip("transformers")  # a body ending in its final norm
    real_make_block = models.make_block
    monkeypatch.setattr(
        models, "make_block", lambda f, s, seed=0: real_make_block(f, s, "cpu", torch.float32, scale=16, seed=seed)
    )
    monkeypatch.setattr(distributed, "wrap_model", lambda block, wrap: block)
    monkeypatch.setattr(models, "compile_block", lambda block, mode: block)
    runs = {}
    for reference in (False, True):
        block, sample, step = distributed.trainer("ddp", "hf-llama", "small", lr=0.0, reference=reference)
        grads: list[torch.Tensor] = []
        loss = step(sample, grads)
        out = block(sample.to(next(block.parameters()).dtype)).double()
        direction = models.loss_direction(out.shape, "cpu", torch.float64)
        assert loss.item() == pytest.approx((out * direction).sum().item(), rel=1e-5, abs=1e-7)
        runs[reference] = grads
    (fp32, fp64) = runs[False], runs[True]
    assert len(fp32) == len(fp64) == len(list(block.parameters()))
    # Every gradient is a real quantity (float32 against float64), not rounding noise.
    assert all(
        torch.linalg.norm(a.double() - b) <= 1e-3 * torch.linalg.norm(b) for a, b in zip(fp32, fp64, strict=True)
    )


def test_distributed_benchmark_says_it_needs_a_gpu(capsys):
    if torch.cuda.is_available():
        pytest.skip("has a GPU")
    assert distributed.main(["--wrap", "ddp"]) is None and "needs a CUDA GPU" in capsys.readouterr().out


def _gather_rank(rank: int, rendezvous: str, out: str) -> None:
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

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
            same += [(h.shape == w.shape and torch.equal(h, w)) for h, w in zip(host, whole, strict=True)]
        torch.save(same, f"{out}/rank{rank}.pt")
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_distributed_gathers_fsdp2_shards_through_the_host_as_full_tensor_does(tmp_path):
    """The one-GPU gloo fallback gathers FSDP2's shards on the host (gloo's all-gather of
    CUDA DTensors can kill the process); here on CPU, against ``full_tensor``."""
    import torch.multiprocessing as mp

    # What is checked is each rank's result file, not how the ranks exit: gloo's teardown
    # can abort a rank after its work is done ("terminate called without an active
    # exception": a rank whose peer's pairs close mid-exchange), seen in CI runs even
    # after a barrier.
    ranks = mp.start_processes(
        _gather_rank, args=(str(tmp_path / "rendezvous"), str(tmp_path)), nprocs=2, join=False, start_method="spawn"
    )
    for process in ranks.processes:
        process.join(timeout=120)
        if process.is_alive():
            process.kill()
    exits = [process.exitcode for process in ranks.processes]
    for rank in range(2):
        assert (tmp_path / f"rank{rank}.pt").exists(), f"rank {rank} wrote no result (exit codes {exits})"
        same = torch.load(tmp_path / f"rank{rank}.pt")
        assert len(same) == 8 and all(same), same


def _sampled_wait():
    """A sampler's record of 0.2 s busy, a 0.6 s wait for a timer, 0.1 s busy."""
    import threading

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
    assert inclusive["test_benchmarks.py:busy"] >= 0.1
    assert "waits_for_a_future" in sampler.report()
    folded = dict(line.rsplit(" ", 1) for line in sampler.folded().splitlines())
    assert sum(map(int, folded.values())) == len(sampler.samples)
    assert any("test_benchmarks.py:waits_for_a_future;threading.py:wait" in stack for stack in folded)


def test_folded_samples_read_back_per_compile(tmp_path, capsys):
    """``--sample`` appends a gzip member per compile (header, folded stacks); the
    reader gives each compile's inclusive seconds of named frames."""
    sampler = _sampled_wait()
    path = tmp_path / "samples.txt.folded.gz"
    for spec in ("vit:small:inference:max-autotune:stock", "vit:small:inference:max-autotune:ours"):
        sampler.append_to(str(tmp_path / "samples.txt"), f"{spec}: 1.00 s")
    compiles = wall_sampler.read_folded(str(path))
    assert [head for head, _ in compiles] == [
        "vit:small:inference:max-autotune:stock: 1.00 s",
        "vit:small:inference:max-autotune:ours: 1.00 s",
    ]
    frame = "test_benchmarks.py:waits_for_a_future"
    for _, stacks in compiles:
        seconds = wall_sampler.frame_seconds(stacks, [frame, "nowhere.py:f"], interval=sampler.interval)
        assert abs(seconds[frame] - sampler.took["wait"]) <= 0.15 and seconds["nowhere.py:f"] == 0
    wall_sampler.main([str(path), "--frames", frame, "--interval", str(sampler.interval)])
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["stock", "ours"] and out[2].startswith(frame)


# --- benchmarks/compile.py --------------------------------------------------------------


def test_compile_rows_parse_and_refuse(capsys):
    args = compile_bench.parser().parse_args([])
    assert [b.name for b in args.rows] == [f"{family}:small:inference" for family in models.DEFAULT_FAMILIES]
    assert (args.pairs, args.mode, args.default_stock, args.warm_kernels) == (2, models.CUDAGRAPHS, False, False)
    args = compile_bench.parser().parse_args(
        [
            "--rows",
            "gpt2:small,llama:prefill:train,gpt2:small:inference",
            "--pairs",
            "3",
            "--default-stock",
            "--warm-kernels",
        ]
    )
    assert [b.name for b in args.rows] == ["gpt2:small:inference", "llama:prefill:train"]
    assert (args.pairs, args.default_stock, args.warm_kernels) == (3, True, True)
    for argv, message in (
        (["--rows", "qwen2:small:train"], "trains only"),
        (["--rows", "gpt5:small"], "unknown block"),
        (["--pairs", "0"], "not a positive"),
        (["--rows", ","], "no row"),
    ):
        with pytest.raises(SystemExit):
            compile_bench.parser().parse_args(argv)
        assert message in capsys.readouterr().err


def test_compile_plan_alternates_the_order_and_skips_what_was_measured():
    gpt2, bert = models.BlockId.parse("gpt2:small:inference"), models.BlockId.parse("bert:small:inference")
    sides = ["fair_stock", "ours", "default_stock"]
    plan = compile_bench.cold_plan([gpt2, bert], 2, sides)
    assert [(b.family, side[:4], i) for b, side, i in plan] == [
        ("gpt2", "fair", 0),
        ("gpt2", "ours", 0),
        ("gpt2", "defa", 0),
        ("bert", "fair", 0),
        ("bert", "ours", 0),
        ("bert", "defa", 0),
        ("gpt2", "defa", 1),
        ("gpt2", "ours", 1),
        ("gpt2", "fair", 1),
        ("bert", "defa", 1),
        ("bert", "ours", 1),
        ("bert", "fair", 1),
    ]
    runs = {"gpt2:small:inference": {"fair_stock": [{}, {}], "ours": [{}]}}
    left = compile_bench.pending(plan, runs)
    assert [(b.family, side[:4], i) for b, side, i in left if b.family == "gpt2"] == [
        ("gpt2", "defa", 0),
        ("gpt2", "defa", 1),
        ("gpt2", "ours", 1),
    ]
    assert len(left) == 9
    assert [(b.family, i) for b, _, i in compile_bench.warm_plan([gpt2, bert], 2)] == [
        ("gpt2", 0),
        ("bert", 0),
        ("gpt2", 1),
        ("bert", 1),
    ]
    # With warm-kernel compiles: each pair's after that pair's cold ones, before the next pair.
    full = compile_bench.full_plan([gpt2, bert], 2, sides[:2], warm=True)
    assert [(b.family, side[:4], i) for b, side, i in full] == [
        ("gpt2", "fair", 0),
        ("gpt2", "ours", 0),
        ("bert", "fair", 0),
        ("bert", "ours", 0),
        ("gpt2", "ours", 0),
        ("bert", "ours", 0),
        ("gpt2", "ours", 1),
        ("gpt2", "fair", 1),
        ("bert", "ours", 1),
        ("bert", "fair", 1),
        ("gpt2", "ours", 1),
        ("bert", "ours", 1),
    ]
    assert [side for _, side, _ in full].count("ours_warm_kernels") == 4
    assert compile_bench.full_plan([gpt2, bert], 2, sides[:2], warm=False) == compile_bench.cold_plan(
        [gpt2, bert], 2, sides[:2]
    )


def _fake_children(monkeypatch, process):
    """The benchmarks' children are ``process(args, env, timeout)``, no zygote started."""
    import contextlib

    monkeypatch.setattr(zygote, "process", process)
    monkeypatch.setattr(zygote, "serving", lambda wanted: contextlib.nullcontext())


def _report(seconds, builds=0, **phases):
    return {"compile_s": seconds, "process_s": seconds + 5.0, "cutedsl_builds": builds, "phases": phases}


def test_compile_ratio_is_ours_over_fair_stock_of_the_medians():
    runs = {
        "default_stock": [_report(40.0), _report(41.0), _report(42.0)],
        "ours": [
            _report(30.0, 6, compile_fx_inner=20.0),
            _report(22.0, 6, compile_fx_inner=14.0),
            _report(24.0, 7, compile_fx_inner=15.0),
        ],
        "fair_stock": [
            _report(20.0, compile_fx_inner=12.0),
            _report(16.0, compile_fx_inner=10.0),
            _report(18.0, compile_fx_inner=11.0, GraphLowering_run=4.0),
        ],
        "ours_warm_kernels": [_report(19.0, 1), _report(21.0, 0)],
    }
    runs["ours"][0]["ours_s"] = {"build_wait": 3.0}
    row = compile_bench.row_summary("gpt2:small:inference", runs)
    assert row["median_compile_s"] == {
        "fair_stock": 18.0,
        "ours": 24.0,
        "default_stock": 41.0,
        "ours_warm_kernels": 20.0,
    }
    assert row["compile_ratio"] == round(24.0 / 18.0, 4) and row["compile_ratio_warm_kernels"] == round(20 / 18, 4)
    assert row["compile_ratio_vs_default_stock"] == round(24.0 / 41.0, 4)
    assert row["process_ratio"] == round(29.0 / 23.0, 4) and row["median_cutedsl_builds"]["ours"] == 6
    assert row["compiles"] == {"fair_stock": 3, "ours": 3, "default_stock": 3, "ours_warm_kernels": 2}
    # A phase a compile did not go through counts 0 in its side's median; ours' counters too.
    assert row["phases_median_s"]["fair_stock"] == {"compile_fx_inner": 11.0, "GraphLowering_run": 0.0}
    assert row["phases_median_s"]["ours"] == {"compile_fx_inner": 15.0, "ours.build_wait": 0.0}
    other = compile_bench.row_summary("bert:small:inference", {"fair_stock": [_report(10.0)], "ours": [_report(15.0)]})
    assert other["compile_ratio_warm_kernels"] is None and other["compile_ratio"] == 1.5
    result = compile_bench.summarize([row, other], {"device": "H200"})
    assert result["compile_ratio_geomean"] == round((24 / 18 * 1.5) ** 0.5, 4) and result["compile_ratio_max"] == 1.5
    assert result["compile_ratio_warm_kernels_geomean"] == round(20 / 18, 4) and result["device"] == "H200"
    empty = compile_bench.summarize([], {})
    assert empty["compile_ratio_geomean"] is None and empty["compile_ratio_max"] is None


def test_runtime_ratio_is_stocks_step_time_over_ours_of_the_medians():
    runs = {
        "fair_stock": [{**_report(20.0), "step_ms": ms} for ms in (0.2100, 0.2000, 0.9)],
        "ours": [{**_report(20.0), "step_ms": ms} for ms in (0.2500, 0.1, 0.2400)],
    }
    row = compile_bench.row_summary("gpt2:small:inference", runs)
    # Medians, not means: one slow round of stock (0.9) or one fast one of ours (0.1) moves nothing.
    assert row["median_step_ms"] == {"fair_stock": 0.21, "ours": 0.24}
    assert row["runtime_ratio"] == round(0.21 / 0.24, 4)
    slower = compile_bench.row_summary("bert:small:inference", {"fair_stock": [_report(1.0)], "ours": [_report(1.0)]})
    assert slower["runtime_ratio"] is None  # children that timed no step
    assert compile_bench.summarize([row, slower], {})["runtime_ratio_geomean"] == round(0.21 / 0.24, 4)


def test_runtime_gpu_ratio_is_stocks_step_kernel_time_over_ours():
    """The same ratio over the steps' kernel time alone (``step_gpu_ms``): a step slowed by
    the host reads in ``runtime_ratio`` but not here."""
    runs = {
        "fair_stock": [{**_report(20.0), "step_ms": 0.33, "step_gpu_ms": g} for g in (0.26, 0.27)],
        "ours": [{**_report(20.0), "step_ms": ms, "step_gpu_ms": 0.24} for ms in (0.54, 0.56)],
    }
    row = compile_bench.row_summary("qwen2:small:inference", runs)
    assert row["median_step_gpu_ms"] == {"fair_stock": 0.265, "ours": 0.24}
    assert row["runtime_gpu_ratio"] == round(0.265 / 0.24, 4) and row["runtime_ratio"] == round(0.33 / 0.55, 4)
    old = compile_bench.row_summary("bert:small:inference", {"fair_stock": [_report(1.0)], "ours": [_report(1.0)]})
    assert old["runtime_gpu_ratio"] is None  # reports from before the kernel time was kept
    assert compile_bench.summarize([row, old], {})["runtime_gpu_ratio_geomean"] == round(0.265 / 0.24, 4)


def test_the_autotune_log_keeps_each_choices_kind_time_and_precompile_seconds():
    class TritonTemplateCaller:
        name = "triton_mm_3"

    class ExternKernelCaller:
        name = "extern_mm"

    class CuteDSLTemplateCaller:
        name = "cutedsl_128x128"
        candidate = types.SimpleNamespace(
            spec=types.SimpleNamespace(config=types.SimpleNamespace(name=lambda: "128x128_c2x1"))
        )

    class Node:
        def __init__(self, *size):
            self.size = size

        def get_size(self):
            return self.size

    triton, aten, ours = TritonTemplateCaller(), ExternKernelCaller(), CuteDSLTemplateCaller()
    log = compile_bench.AutotuneLog()
    log(
        {triton: 0.0123456, aten: float("inf"), ours: 0.011},
        "mm",
        [Node(256, 64), Node(64, 32)],
        [],
        None,
        {triton: 1.25},
    )
    (entry,) = log.entries
    assert entry["op"] == "mm" and entry["shapes"] == [[256, 64], [64, 32]]
    assert entry["choices"] == [
        {"kind": "triton", "name": "triton_mm_3", "config": None, "ms": 0.01235, "precompile_s": 1.25},
        {"kind": "aten", "name": "extern_mm", "config": None, "ms": None, "precompile_s": 0.0},  # failed: no time
        {"kind": "cutedsl", "name": "cutedsl_128x128", "config": "128x128_c2x1", "ms": 0.011, "precompile_s": 0.0},
    ]


def test_the_autotune_summary_counts_each_kind_and_prices_dropping_triton():
    def choice(kind, ms, pre=0.0):
        return {"kind": kind, "name": kind, "ms": ms, "precompile_s": pre}

    # A GEMM ours was offered for, Triton winning by 10% over cuBLAS; one ours wins;
    # one without ours (its Triton templates are not in the what-if); one where nothing ran.
    first = [
        {"op": "mm", "choices": [choice("triton", 0.10, 2.0), choice("aten", 0.11), choice("cutedsl", 0.12, 1.0)]},
        {"op": "mm", "choices": [choice("triton", 0.30, 3.0), choice("cutedsl", 0.20, 1.5), choice("aten", None)]},
        {"op": "bmm", "choices": [choice("triton", 0.05, 4.0), choice("aten", 0.06)]},
        {"op": "mm", "choices": [choice("aten", None)]},
    ]
    second = first[:1]
    summary = compile_bench.autotune_summary([{"autotunes": first}, {"autotunes": second}, {"compile_s": 1.0}])
    assert summary["compiles"] == 2 and summary["autotunes_per_compile"] == 2.5
    assert summary["choices_per_compile"] == {"aten": 2.5, "cutedsl": 1.5, "triton": 2.0}
    assert summary["precompile_s_per_compile"] == {"aten": 0.0, "cutedsl": 1.75, "triton": 5.5}
    assert summary["wins"] == {"cutedsl": 1, "triton": 3}
    without = summary["without_triton"]
    assert without["autotunes"] == 3 and without["slowdown_max"] == 1.1
    assert without["slowdown_geomean"] == round((1.1 * 1.0 * 1.1) ** (1 / 3), 4)
    assert without["precompile_s_saved_per_compile"] == round((2.0 + 3.0 + 2.0) / 2, 2)
    assert compile_bench.autotune_summary([{"compile_s": 1.0}]) is None


def test_a_compile_child_starts_from_the_environment_without_our_install(monkeypatch, tmp_path):
    """Fair stock keys on torch's ptxas as its workers do; neither ours nor default stock
    inherits the ptxas this process's install set; the backend is on for ours only."""
    import os

    import inductor_cutedsl
    from inductor_cutedsl.compat import environment

    monkeypatch.delenv("TRITON_PTXAS_PATH", raising=False)
    monkeypatch.setenv("INDUCTOR_CUTEDSL_ENABLED", "0")  # the user's: ours' child must still be ours

    def align():  # as torch's setter does where torch ships a ptxas
        os.environ["TRITON_PTXAS_PATH"] = "/ours/ptxas"
        return environment.EnvChange("TRITON_PTXAS_PATH", "/ours/ptxas")

    monkeypatch.setattr(environment, "align_triton_ptxas", align)
    torch_ptxas = tmp_path / "bin" / "ptxas"
    monkeypatch.setattr(compile_bench, "torch_ptxas", lambda: str(torch_ptxas))
    dirs = {key: str(tmp_path / key) for key in compile_bench.CACHE_DIRS}
    inductor_cutedsl.disable()
    try:
        inductor_cutedsl.enable()  # Inductor is imported: the whole install, the alignment with it
        assert os.environ["TRITON_PTXAS_PATH"] == "/ours/ptxas"
        envs = {side: compile_bench.child_environment(side, dirs) for side in compile_bench.SIDES}
        assert envs["fair_stock"]["TRITON_PTXAS_PATH"] == str(torch_ptxas)
        for side in ("ours", "default_stock", "ours_warm_kernels"):
            assert "TRITON_PTXAS_PATH" not in envs[side], side
        assert {side: env["INDUCTOR_CUTEDSL_ENABLED"] for side, env in envs.items()} == {
            "fair_stock": "0",
            "ours": "1",
            "default_stock": "0",
            "ours_warm_kernels": "1",
        }
        assert all(env[key] == dirs[key] for env in envs.values() for key in dirs)
        monkeypatch.setattr(compile_bench, "torch_ptxas", lambda: None)  # a torch that ships none
        assert "TRITON_PTXAS_PATH" not in compile_bench.child_environment("fair_stock", dirs)
    finally:
        inductor_cutedsl.disable()
        monkeypatch.undo()
        inductor_cutedsl.enable()


def test_stock_in_a_kernel_timing_benchmark_keeps_torchs_ptxas_through_disable(monkeypatch, tmp_path):
    """Benchmarks that time compiled code compile stock in their own process: under
    ``disable()`` it must keep torch's ptxas (fair stock), or it compiles its template
    choices twice; our install must still align itself; a torch that ships no ptxas is
    left as it is."""
    import os

    import inductor_cutedsl
    from benchmarks import harness
    from inductor_cutedsl.compat import environment

    name = "TRITON_PTXAS_PATH"
    monkeypatch.delenv(name, raising=False)
    shipped = str(tmp_path / "bin" / "ptxas")

    def align():  # as our install aligns where torch ships a ptxas: torch's setter keeps a set path
        before = os.environ.get(name)
        os.environ.setdefault(name, shipped)
        return None if before is not None else environment.EnvChange(name, shipped)

    monkeypatch.setattr(environment, "align_triton_ptxas", align)
    monkeypatch.setattr(harness, "torch_ptxas", lambda: shipped)
    inductor_cutedsl.disable()
    try:
        inductor_cutedsl.enable()
        assert os.environ[name] == shipped
        inductor_cutedsl.disable()
        assert name not in os.environ, "as a stock side runs without the fix"
        inductor_cutedsl.enable()
        assert harness.stock_on_torch_ptxas() == shipped
        assert inductor_cutedsl.is_enabled()
        for _ in range(2):
            inductor_cutedsl.disable()
            assert os.environ.get(name) == shipped, "stock compiles on torch's ptxas"
            inductor_cutedsl.enable()
            assert os.environ.get(name) == shipped
        monkeypatch.delenv(name)
        monkeypatch.setattr(harness, "torch_ptxas", lambda: None)  # a torch that ships none
        inductor_cutedsl.disable()
        assert harness.stock_on_torch_ptxas() is None
        assert name not in os.environ and not inductor_cutedsl.is_enabled()
    finally:
        inductor_cutedsl.disable()
        monkeypatch.undo()
        inductor_cutedsl.enable()


def test_a_compile_run_gives_every_child_empty_caches_and_warm_ones_the_other_rows_kernels(monkeypatch, tmp_path):
    """The whole run with fake children: each child's caches are new and empty, except a
    warm-kernel child's kernel cache, which holds what ours built for the other rows
    (its own copy); the result is rewritten as it goes and a resumed run adds nothing."""
    seen, returned = [], {}

    def json_process(args, env, timeout):
        spec = args[args.index("--child") + 1]
        row, side = spec.rsplit(":", 2)[0], spec.rsplit(":", 1)[1]
        dirs = [env[key] for key in compile_bench.CACHE_DIRS]
        kernels = Path(env["INDUCTOR_CUTEDSL_CACHE_DIR"])
        seen.append((row, side, dirs, sorted(p.name for p in kernels.iterdir())))
        time.sleep(0.02)  # a process takes time: its whole wall time (process_s) is never 0
        assert all(not any(Path(d).iterdir()) for d in dirs[:2])  # Inductor's and Triton's: empty
        if side.startswith("ours"):
            (kernels / f"{row}.o").write_text("kernel")
        seconds = {"fair_stock": 20.0, "ours": 25.0, "default_stock": 30.0, "ours_warm_kernels": 22.0}[side]
        returned.setdefault((row, side), []).append(seconds + len(seen) % 2)
        return _report(returned[row, side][-1], 3 if side == "ours" else 0)

    _fake_children(monkeypatch, json_process)
    out = tmp_path / "compile.json"
    argv = [
        "--rows",
        "gpt2:small,bert:small,vit:small",
        "--pairs",
        "2",
        "--default-stock",
        "--warm-kernels",
        "--json",
        str(out),
    ]
    result = compile_bench.run(compile_bench.parser().parse_args(argv), {"device": "fake"})
    assert json.loads(out.read_text()) == result and len(seen) == 3 * 2 * 3 + 3 * 2
    every_dir = [d for _, _, dirs, _ in seen for d in dirs]
    assert len(set(every_dir)) == len(every_dir)
    for row, side, _, kernels in seen:
        others = sorted(f"{r}:small:inference.o" for r in ("gpt2", "bert", "vit") if f"{r}:small:inference" != row)
        assert kernels == (others if side == "ours_warm_kernels" else []), (row, side)
    gpt2 = result["rows"][0]
    assert gpt2["compiles"] == {"fair_stock": 2, "ours": 2, "default_stock": 2, "ours_warm_kernels": 2}
    median = {key: statistics.median(values) for key, values in returned.items()}
    gpt2_name = "gpt2:small:inference"
    assert gpt2["compile_ratio"] == round(median[gpt2_name, "ours"] / median[gpt2_name, "fair_stock"], 4)
    assert result["compile_ratio_max"] == max(row["compile_ratio"] for row in result["rows"])
    warm_ratios = [median[r["row"], "ours_warm_kernels"] / median[r["row"], "fair_stock"] for r in result["rows"]]
    assert result["compile_ratio_warm_kernels_geomean"] == round(statistics.geometric_mean(warm_ratios), 4)
    assert result["mode"] == "max-autotune"
    seen.clear()
    again = compile_bench.run(compile_bench.parser().parse_args(argv + ["--resume", str(out)]), {"device": "fake"})
    assert seen == [] and again["rows"] == result["rows"]
    # After a change to ours: ours' compiles again, stock's kept.
    redo = argv + ["--resume", str(out), "--redo", "ours,ours_warm_kernels"]
    redone = compile_bench.run(compile_bench.parser().parse_args(redo), {"device": "fake"})
    assert sorted({side for _, side, _, _ in seen}) == ["ours", "ours_warm_kernels"] and len(seen) == 3 * 2 * 2
    assert redone["rows"][0]["runs"]["fair_stock"] == result["rows"][0]["runs"]["fair_stock"]


def test_a_compile_run_cut_into_calls_carries_ours_kernel_caches_beside_its_result(monkeypatch, tmp_path):
    """A run's kept kernel caches travel beside its result file: a resumed run (another
    call, a fresh machine) fills its warm-kernel compiles from them instead of compiling
    ours again, and ``--redo ours`` drops them with ours' compiles."""
    seen = []

    def json_process(args, env, timeout):
        spec = args[args.index("--child") + 1]
        row, side = spec.rsplit(":", 2)[0], spec.rsplit(":", 1)[1]
        kernels = Path(env["INDUCTOR_CUTEDSL_CACHE_DIR"])
        seen.append((row, side, sorted(p.name for p in kernels.iterdir())))
        if side.startswith("ours"):
            (kernels / f"{row}.o").write_text(f"built by {side}")
        return _report(20.0, 3 if side == "ours" else 0)

    _fake_children(monkeypatch, json_process)
    rows = ["--rows", "gpt2:small,bert:small,vit:small", "--pairs", "1"]
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    compile_bench.run(compile_bench.parser().parse_args(rows + ["--json", str(first)]), {})
    archive = compile_bench.kernels_archive(str(first))
    assert os.path.exists(archive) and not os.path.exists(archive + ".part")
    seen.clear()
    warm = rows + ["--warm-kernels", "--resume", str(first), "--json", str(second)]
    result = compile_bench.run(compile_bench.parser().parse_args(warm), {})
    names = [f"{r}:small:inference" for r in ("gpt2", "bert", "vit")]
    assert [side for _, side, _ in seen] == ["ours_warm_kernels"] * 3, "no cold compile of ours ran again"
    for row, _, kernels in seen:
        assert kernels == sorted(f"{n}.o" for n in names if n != row)
    assert result["rows"][0]["compiles"]["ours_warm_kernels"] == 1
    # The kept caches are those of cold compiles, never a warm child's (which holds others' kernels).
    with tarfile.open(compile_bench.kernels_archive(str(second))) as tar:
        assert sorted(m.name for m in tar.getmembers() if m.isfile()) == sorted(f"{n}/{n}.o" for n in names)
    seen.clear()
    redo = rows + ["--warm-kernels", "--resume", str(first), "--json", str(second), "--redo", "ours"]
    compile_bench.run(compile_bench.parser().parse_args(redo), {})
    assert [side for _, side, _ in seen] == ["ours"] * 3 + ["ours_warm_kernels"] * 3, "ours' old kernels not loaded"


def test_a_compile_run_refuses_a_stock_child_that_built_our_kernels(monkeypatch):
    _fake_children(monkeypatch, lambda args, env, timeout: _report(20.0, 2))
    bid = models.BlockId.parse("gpt2:small:inference")
    assert compile_bench.run_child(bid, models.CUDAGRAPHS, "ours", {}, 60)["cutedsl_builds"] == 2
    with pytest.raises(RuntimeError, match="stock compile built 2 CuteDSL kernels"):
        compile_bench.run_child(bid, models.CUDAGRAPHS, "fair_stock", {}, 60)


def test_a_resumed_compile_run_keeps_the_pairs_the_run_asked(monkeypatch, tmp_path):
    _fake_children(monkeypatch, lambda args, env, timeout: _report(20.0, 3 if "ours" in args[-1] else 0))
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    rows = ["--rows", "gpt2:small", "--budget", "0"]
    compile_bench.run(compile_bench.parser().parse_args(rows + ["--pairs", "2", "--json", str(first)]), {})
    again = ["--pairs", "1", "--resume", str(first), "--json", str(second)]
    assert compile_bench.run(compile_bench.parser().parse_args(rows + again), {})["pairs"] == 2


def test_a_compile_run_within_a_budget_starts_nothing_it_cannot_finish(monkeypatch, capsys):
    _fake_children(monkeypatch, lambda args, env, timeout: pytest.fail("a child started"))
    args = compile_bench.parser().parse_args(["--rows", "gpt2:small", "--budget", "0"])
    assert compile_bench.run(args, {})["rows"] == []
    assert "not started (run again with --resume): gpt2:small:inference fair_stock #1" in capsys.readouterr().out


def test_compile_phase_seconds_sum_each_timed_phase(monkeypatch):
    """Dynamo's timed phases, summed per phase: what a child reports phase by phase."""
    from torch._dynamo import utils

    monkeypatch.setattr(utils, "compilation_time_metrics", {"compile_fx_inner": [1.5, 2.0], "GraphLowering.run": [0.5]})
    assert compile_bench.phase_seconds() == {"compile_fx_inner": 3.5, "GraphLowering.run": 0.5}


def test_a_compile_child_reports_where_our_seconds_went():
    """Every stage of ours that can hold a compile up has its counter."""
    seconds = compile_bench.our_seconds()
    assert set(seconds) == {
        "build_wait",
        "autotune_ours",
        "fair_timing",
        "selection",
        "selection_builds",
        "selection_modules",
        "gated",
    }
    assert all(isinstance(v, float) and v >= 0 for v in seconds.values())


def test_compile_events_say_when_inductors_pool_is_ready_and_our_workers_started(monkeypatch):
    """A sampled child's events read Inductor's pool-readiness future and our worker pool."""
    import concurrent.futures

    from torch._inductor.async_compile import AsyncCompile

    from inductor_cutedsl.runtime import workers

    events = compile_bench.compile_events()
    monkeypatch.setattr(AsyncCompile, "_ready_future", None)
    assert not events["inductor_pool_ready"]()
    pending: concurrent.futures.Future = concurrent.futures.Future()
    monkeypatch.setattr(AsyncCompile, "_ready_future", pending)
    assert not events["inductor_pool_ready"]()
    pending.set_result("ready")
    assert events["inductor_pool_ready"]()
    monkeypatch.setattr(workers, "_pool", None)
    assert not events["cutedsl_workers_started"]()
    monkeypatch.setattr(workers, "_pool", object())
    assert events["cutedsl_workers_started"]()


def test_the_compile_benchmark_says_it_needs_a_gpu(capsys):
    if torch.cuda.is_available():
        pytest.skip("has a GPU")
    assert compile_bench.main(["--rows", "gpt2:small"]) is None and "needs a CUDA GPU" in capsys.readouterr().out


# --- docs/performance.md, generated from the results --------------------------------------


def test_the_performance_page_is_what_the_committed_results_give():
    """Regenerated from benchmarks/results/*.json, the page is the committed one: a new
    result (or an edit of the page by hand) fails here until `python -m tools.perf_doc`
    is run."""
    from tools import perf_doc

    assert perf_doc.render() == (ROOT / "docs" / "performance.md").read_text()


def test_the_performance_page_shows_each_files_figures_and_refuses_a_file_it_has_no_section_for(tmp_path):
    import shutil

    from tools import perf_doc

    results = tmp_path / "results"
    shutil.copytree(ROOT / "benchmarks" / "results", results)
    gemm = json.loads((results / "h200-gemm.json").read_text())
    gemm["geomean_vs_cublas"], gemm["rows"][0]["config"] = 1.2345, "a_config_of_its_own"
    gemm["source"] = "two runs merged by hand"
    (results / "h200-gemm.json").write_text(json.dumps(gemm))
    (results / "h200-compile.json").unlink(missing_ok=True)
    page = perf_doc.render(results)
    assert "| cuBLAS / ours, geomean | 1.2345 | `geomean_vs_cublas` |" in page and "`a_config_of_its_own`" in page
    assert "How this file was made (`source`): two runs merged by hand." in page
    assert "## Cold compile time (`h200-compile.json`)\n\nNot measured yet: `python -m benchmarks.compile" in page
    (results / "h200-probe.json").write_text("{}")
    with pytest.raises(SystemExit, match="without a section in tools/perf_doc.py: h200-probe.json"):
        perf_doc.render(results)


def test_stock_keeps_its_tuned_configs_in_a_benchmarks_process():
    """The coordinate-descent carry fair stock runs with stays in under ``disable()``, so
    that the stock side of a one-process benchmark keeps its Triton kernels' tuned configs
    as ours does (and the side compiled second runs the first's); it goes in once, and
    what it returns takes it out."""
    pytest.importorskip("triton")
    from torch._inductor.runtime import triton_heuristics as th

    import inductor_cutedsl
    from benchmarks import harness
    from inductor_cutedsl import install
    from inductor_cutedsl.compat import autotune

    inductor_cutedsl.disable()
    stock = th.CachingAutotuner.restore_after_unpickle
    assert not getattr(stock, "carries_coordesc", False)
    inductor_cutedsl.enable()
    saved = harness.stock_keeps_tuned_configs()
    try:
        assert inductor_cutedsl.is_enabled() and saved
        install._install_rest()
        for _ in range(2):
            inductor_cutedsl.disable()
            assert getattr(th.CachingAutotuner.restore_after_unpickle, "carries_coordesc", False)
            inductor_cutedsl.enable()
            install._install_rest()
        assert harness.stock_keeps_tuned_configs() is None, "in once"
    finally:
        inductor_cutedsl.disable()
        autotune.restore_coordinate_descent(saved)
        assert th.CachingAutotuner.restore_after_unpickle is stock
        inductor_cutedsl.enable()


def test_the_performance_page_reads_host_ratios_of_both_result_shapes():
    """Rows that timed the host in every mode carry ``host_ratio``; older files hold
    one flat ``host_us`` (without CUDA graphs), whose ratio the page works out."""
    from tools import perf_doc

    both = {"host_ratio": {"max-autotune": 0.97, "max-autotune-no-cudagraphs": 1.02}, "host_us": {"x": {}}}
    assert perf_doc.host_ratios(both) == both["host_ratio"]
    flat = {"host_us": {"stock": 200.0, "ours": 250.0, "calls": {}, "gpu_busy": True}}
    assert perf_doc.host_ratios(flat) == {"max-autotune-no-cudagraphs": 1.25}
    assert perf_doc.host_ratios({}) == {} and perf_doc.host_ratios({"host_us": {"stock": 0.0, "ours": 1.0}}) == {}
    # With the interval of its rounds' median beside it, where the row kept its rounds.
    both["host_ratio_interval"] = {"max-autotune": [0.91, 1.04]}
    assert perf_doc.host_cell(both, "max-autotune") == "0.97 (0.91-1.04)"
    assert perf_doc.host_cell(both, "max-autotune-no-cudagraphs") == 1.02
    # A wall speed-up the same way, from its own interval, not the host's.
    both["wall_speedup_interval"] = {"max-autotune-no-cudagraphs": [0.88, 0.95]}
    assert perf_doc.round_cell(both, "wall_speedup", "max-autotune-no-cudagraphs", 0.91) == "0.91 (0.88-0.95)"
    assert perf_doc.round_cell(both, "wall_speedup", "max-autotune", 1.05) == 1.05


# --- benchmarks/warm_start.py -----------------------------------------------------------


def test_a_warm_start_loads_what_the_cold_compile_of_its_side_saved(monkeypatch, tmp_path):
    """Fake children: each cold compile saves artifacts, the warm one after it loads
    exactly that file, both in new and empty caches; figures are medians per row; a
    resumed run compiles nothing again."""
    from benchmarks import warm_start

    seen = []

    def json_process(args, env, timeout):
        spec = args[args.index("--child") + 1]
        side = spec.rsplit(":", 1)[1]
        dirs = [env[key] for key in compile_bench.CACHE_DIRS]
        assert all(not any(Path(d).iterdir()) for d in dirs)
        if "--artifacts-out" in args:
            out = args[args.index("--artifacts-out") + 1]
            Path(out).write_text(f"{spec} {len(seen)}")
            seen.append((spec, "cold", out, dirs))
            return {**_report(30.0 if side == "ours" else 20.0, 4 if side == "ours" else 0), "step_ms": 0.5}
        blob = args[args.index("--artifacts-in") + 1]
        assert seen[-1][1] == "cold" and seen[-1][0] == spec and seen[-1][2] == blob
        assert Path(blob).read_text() == f"{spec} {len(seen) - 1}"  # the one its cold compile saved
        seen.append((spec, "warm", blob, dirs))
        report = _report(6.0 if side == "ours" else 5.0, 1 if side == "ours" else 0)
        step = {"step_ms": 0.4 if side == "ours" else 0.5}
        return {**report, **step, "load_s": 0.5, **({"our_measurements": 2} if side == "ours" else {})}

    _fake_children(monkeypatch, json_process)
    out = tmp_path / "warm.json"
    argv = ["--rows", "gpt2:small,bert:small", "--pairs", "2", "--json", str(out)]
    result = warm_start.run(warm_start.parser().parse_args(argv), {"device": "fake"})
    assert json.loads(out.read_text()) == result and len(seen) == 2 * 2 * 2 * 2
    dirs = [d for *_, ds in seen for d in ds]
    assert len(set(dirs)) == len(dirs)
    # The sides alternate: pair 1 stock first, pair 2 ours first.
    assert [s.rsplit(":", 1)[1] for s, kind, *_ in seen if kind == "cold"][:4] == [
        "fair_stock",
        "ours",
        "fair_stock",
        "ours",
    ]
    assert [s.rsplit(":", 1)[1] for s, kind, *_ in seen if kind == "cold"][4:6] == ["ours", "fair_stock"]
    row = result["rows"][0]
    assert row["warm_start_ratio_vs_stock"] == round(6 / 5, 4) and row["warm_start_ratio_vs_cold"] == round(6 / 30, 4)
    assert row["warm_cutedsl_builds"] == 2 and row["median_load_s"] == {"fair_stock": 0.5, "ours": 0.5}
    assert result["warm_start_cutedsl_builds"] == 4 and result["warm_start_our_measurements"] == 8
    assert result["warm_start_ratio_vs_cold_geomean"] == round(6 / 30, 4)
    # Step times: the medians of each side's cold and warm processes (0.5 twice and 0.4
    # twice for ours: 0.45), stock's over ours'.
    assert row["median_step_ms"] == {"fair_stock": 0.5, "ours": 0.45}
    assert row["step_speedup_vs_stock"] == round(0.5 / 0.45, 4) == result["step_speedup_vs_stock_geomean"]
    seen.clear()
    again = warm_start.run(warm_start.parser().parse_args(argv + ["--resume", str(out)]), {"device": "fake"})
    assert seen == [] and again["rows"] == result["rows"]


def test_each_cold_compile_feeds_the_warm_repeats_and_a_row_takes_their_median(monkeypatch, tmp_path):
    """--warm-repeats 3: each cold compile's artifacts feed three warm starts, each in new
    and empty caches; the row's warm figure is their median; a resumed run with the same
    pairs runs nothing, one with more pairs only the new pair's cold and warm starts."""
    from benchmarks import warm_start

    calls: list[tuple[str, str, str, tuple]] = []
    warm_s = {"fair_stock": iter([5.0, 9.0, 4.0, 5.5, 5.5, 5.5]), "ours": iter([3.0, 8.0, 4.0, 3.5, 3.5, 3.5])}

    def json_process(args, env, timeout):
        spec = args[args.index("--child") + 1]
        side = spec.rsplit(":", 1)[1]
        dirs = tuple(env[key] for key in compile_bench.CACHE_DIRS)
        assert all(not any(Path(d).iterdir()) for d in dirs)
        if "--artifacts-out" in args:
            out = args[args.index("--artifacts-out") + 1]
            Path(out).write_text(f"{spec} {len(calls)}")
            calls.append((side, "cold", Path(out).read_text(), dirs))
            return _report(30.0 if side == "ours" else 20.0, 4 if side == "ours" else 0)
        blob = args[args.index("--artifacts-in") + 1]
        calls.append((side, "warm", Path(blob).read_text(), dirs))
        return {**_report(next(warm_s[side]), 0), "load_s": 0.2}

    _fake_children(monkeypatch, json_process)
    out = tmp_path / "warm.json"
    argv = ["--rows", "gpt2:small", "--warm-repeats", "3", "--json", str(out)]
    result = warm_start.run(warm_start.parser().parse_args([*argv, "--pairs", "1"]), {"device": "fake"})
    assert [(side, kind) for side, kind, *_ in calls] == [("fair_stock", "cold")] + [("fair_stock", "warm")] * 3 + [
        ("ours", "cold")
    ] + [("ours", "warm")] * 3
    cold_blobs = {side: text for side, kind, text, _ in calls if kind == "cold"}
    assert all(text == cold_blobs[side] for side, kind, text, _ in calls if kind == "warm")
    every_dir = [d for *_, dirs in calls for d in dirs]
    assert len(set(every_dir)) == len(every_dir)
    row = result["rows"][0]
    assert row["median_compile_s"]["fair_stock"]["warm"] == 5.0 and row["median_compile_s"]["ours"]["warm"] == 4.0
    assert row["warm_start_ratio_vs_stock"] == round(4.0 / 5.0, 4)
    assert [len(row["runs"][side][kind]) for side in ("fair_stock", "ours") for kind in ("cold", "warm")] == [1, 3] * 2
    calls.clear()
    warm_start.run(warm_start.parser().parse_args([*argv, "--pairs", "1", "--resume", str(out)]), {"device": "fake"})
    assert calls == []
    warm_start.run(warm_start.parser().parse_args([*argv, "--pairs", "2", "--resume", str(out)]), {"device": "fake"})
    assert [(side, kind) for side, kind, *_ in calls] == [("ours", "cold")] + [("ours", "warm")] * 3 + [
        ("fair_stock", "cold")
    ] + [("fair_stock", "warm")] * 3


def test_kept_cold_compiles_feed_later_warm_starts_only_from_the_same_code(monkeypatch, tmp_path):
    """With --artifacts-dir, a first run keeps each cold compile's artifacts and report;
    a second run with more pairs runs only the new pairs' cold compiles, feeds every warm
    start from the artifacts of its own side and pair (kept or new), and marks the kept
    reports; once our sources' digest changes, nothing kept is used."""
    from benchmarks import warm_start

    calls: list[tuple[str, str, str]] = []

    def json_process(args, env, timeout):
        spec = args[args.index("--child") + 1]
        side = spec.rsplit(":", 1)[1]
        if "--artifacts-out" in args:
            out = args[args.index("--artifacts-out") + 1]
            Path(out).write_text(f"{spec} cold {len(calls)}")
            calls.append((spec, "cold", out))
            return _report(30.0 if side == "ours" else 20.0, 4 if side == "ours" else 0)
        blob = args[args.index("--artifacts-in") + 1]
        calls.append((spec, "warm", Path(blob).read_text()))
        return {**_report(6.0 if side == "ours" else 5.0, 0), "load_s": 0.5}

    _fake_children(monkeypatch, json_process)
    stamp = {"ours": "digest-1", "torch": "t"}
    monkeypatch.setattr(warm_start, "code_stamp", lambda: stamp)
    store, out = tmp_path / "kept", tmp_path / "warm.json"
    argv = ["--rows", "gpt2:small", "--json", str(out), "--artifacts-dir", str(store)]
    warm_start.run(warm_start.parser().parse_args([*argv, "--pairs", "1"]), {"device": "fake"})
    first = list(calls)
    assert [kind for _, kind, _ in first] == ["cold", "warm"] * 2
    made = {spec: text for spec, kind, text in [(s, k, Path(b).read_text()) for s, k, b in first if k == "cold"]}
    calls.clear()
    result = warm_start.run(
        warm_start.parser().parse_args([*argv, "--pairs", "2", "--resume", str(out)]), {"device": "fake"}
    )
    # Pair 2 only: its cold compiles run (ours first in the second pair); its warm starts
    # load what those just saved, not pair 1's kept artifacts.
    assert [(s.rsplit(":", 1)[1], k) for s, k, _ in calls] == [
        ("ours", "cold"),
        ("ours", "warm"),
        ("fair_stock", "cold"),
        ("fair_stock", "warm"),
    ]
    assert all(text.split()[0] == spec and " cold " in text for spec, k, text in calls if k == "warm")
    assert all(text not in made.values() for _, k, text in calls if k == "warm")
    runs = result["rows"][0]["runs"]
    assert all(len(runs[side]["warm"]) == 2 for side in ("ours", "fair_stock"))
    # A third run over a fresh result: pair 1's cold compiles come from the store.
    calls.clear()
    again = warm_start.run(
        warm_start.parser().parse_args([*argv, "--pairs", "1", "--json", str(tmp_path / "w2.json")]),
        {"device": "fake"},
    )
    assert [k for _, k, _ in calls] == ["warm", "warm"]
    assert sorted(text for _, _, text in calls) == sorted(made.values())
    assert all(r.get("reused") for side in ("ours", "fair_stock") for r in again["rows"][0]["runs"][side]["cold"])
    assert again["rows"][0]["median_compile_s"]["ours"]["cold"] == 30.0
    # Other code: the kept compiles are not used.
    stamp = {"ours": "digest-2", "torch": "t"}
    calls.clear()
    warm_start.run(
        warm_start.parser().parse_args([*argv, "--pairs", "1", "--json", str(tmp_path / "w3.json")]),
        {"device": "fake"},
    )
    assert [k for _, k, _ in calls] == ["cold", "warm"] * 2


def test_a_sampled_warm_start_samples_the_warm_children_only(monkeypatch, tmp_path):
    from benchmarks import warm_start

    sampled = []

    def json_process(args, env, timeout):
        warm = "--artifacts-in" in args
        if not warm:
            Path(args[args.index("--artifacts-out") + 1]).write_text("blob")
        sampled.append((warm, args[args.index("--sample") + 1] if "--sample" in args else None))
        return {**_report(5.0, 0), **({"load_s": 0.1} if warm else {})}

    _fake_children(monkeypatch, json_process)
    path = str(tmp_path / "samples.txt")
    warm_start.run(warm_start.parser().parse_args(["--rows", "gpt2:small", "--sample", path]), {"device": "fake"})
    assert sampled == [(False, None), (True, path)] * 2


# --- benchmarks/decode.py ---------------------------------------------------------------


def test_decode_bytes_are_each_linear_layers_least_traffic():
    from benchmarks import decode

    model = torch.nn.Sequential(torch.nn.Linear(64, 32, bias=True), torch.nn.Linear(32, 16, bias=False))
    rows = 4
    want = (32 * 64 + rows * (32 + 64) + 32) * 2 + (16 * 32 + rows * (16 + 32)) * 2
    assert decode.gemm_bytes(model, rows) == want
    kernels = [{"kernel": "a", "launches": 2.0, "us": 3.0}, {"kernel": "b", "launches": 1.0, "us": 1.0}]
    fraction, us = decode.bandwidth_fraction(4_000_000, kernels, 2e12)
    assert us == 4.0 and fraction == round(4e6 / 4e-6 / 2e12, 4)
    assert decode.bandwidth_fraction(1, [], 1.0) == (None, 0.0)


class _DecodeProbe:
    def quiet(self, timeout=600):
        return {"builds_waited": 0}

    def wall_ms(self, steps):
        for step in steps.values():
            step()
        return {"stock": 1.2, "ours": 1.0, "round_ratios": [1.2]}

    def profile(self, steps):
        if all(name.startswith("copy ") for name in steps):  # ``copy_floor``: after the flush
            for step in steps.values():
                step()
            # A copy moving N bytes in N / 2000 µs (2 GB/s), behind the flush's kernel.
            flush = {"kernel": "triton_poi_0", "launches": 1.0, "us": 60.0}
            return {
                name: {"us": 0.0, "kernels": [flush, {"kernel": "Memcpy DtoD", "us": int(name.split()[1]) / 2e3}]}
                for name in steps
            }
        others = [{"kernel": f"triton_poi_{i}", "launches": 1.0, "us": 0.1 * i} for i in range(10)]
        return {
            side: {"us": 10.0, "kernels": [{"kernel": name, "launches": 3.0, "us": us}, *others]}
            for side, name, us in (("stock", "nvjet_tst_gemm", 8.0), ("ours", "kernel_inductor_cutedsl_x", 6.0))
        }


def test_a_decode_row_runs_both_sides_against_a_filled_static_cache():
    """The row's steps on the CPU, uncompiled, with a tiny model: each side decodes one
    token at the context length against its own cache filled by the same prompt, and
    agrees with an eager decode; the figures come from the probe's."""
    pytest.importorskip("transformers")
    from benchmarks import decode
    from inductor_cutedsl.lowering import fair_timing

    tiny = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "vocab_size": 256}
    compiles = iter(range(100))

    def compile_fn(fn, mode):  # each side's compile re-times one GEMM (a decision)
        fair_timing.decisions.append({"ours": f"compile {next(compiles)}"})
        return fn

    def row_at(batch):
        return decode.measure(
            "llama",
            batch,
            2,
            _DecodeProbe(),
            1e9,
            device="cpu",
            context=16,
            compile_fn=compile_fn,
            overrides={**tiny, "num_key_value_heads": 2},
        )

    row = row_at(2)
    # Ours' own re-timings only: stock's compile (the first) makes none with ours off.
    assert row["gemm_decisions"] == {"ours": [{"ours": "compile 1"}]}
    assert row["rel_err"]["ours_vs_stock"] == 0.0 and row["rel_err"]["ours"] == 0.0
    assert row["cudagraph_skips"] == {"stock": 0, "ours": 0}
    assert row["decode_speedup"] == 1.2 and row["gemm_us"] == {"stock": 8.0, "ours": 6.0}
    # The costliest kernels that are not GEMMs, costliest first.
    assert [k["kernel"] for k in row["other_kernels"]["ours"]] == [f"triton_poi_{i}" for i in range(9, 1, -1)]
    assert row["gemm_bandwidth_fraction"]["ours"] == round(row["gemm_bytes"] / 6e-6 / 1e9, 4)
    assert row["decode_speedup_bound"] == decode.speedup_bound(row, 1e9)
    # Each Linear's bytes as a copy of its own size, the flush's kernel left out: at 2 GB/s
    # against a copy bandwidth of 1 GB/s, the floor's fraction is 2.
    assert row["copy_floor_us"] == round(row["gemm_bytes"] / 2e3, 2) and row["copy_floor_fraction"] == 2.0
    # Stock's 10 µs step with its 8 µs of GEMMs as fast as those copies.
    floor_us = row["gemm_bytes"] / 2e3
    assert row["decode_speedup_copy_floor_bound"] == round(10.0 / (10.0 - 8.0 + min(8.0, floor_us)), 4)
    # Stock's 10 µs step with its 8 µs of GEMMs moving 4 MB at 2 TB/s (2 µs) instead; GEMMs
    # already at the copy bandwidth leave nothing to gain.
    step = {"batch": 16, "gpu_us": {"stock": 10.0}, "gemm_us": {"stock": 8.0}, "gemm_bytes": 4_000_000}
    assert decode.speedup_bound(step, 2e12) == 2.5 and decode.speedup_bound(step, 1e11) == 1.0
    one = row_at(1)
    assert one["gemm_bandwidth_fraction"] == {"stock": None, "ours": None} and "decompose" in one["gemm_bandwidth_note"]
    result = decode.summarize([row, one, {"row": "qwen2:b1", "error": "x"}], {"device": "cpu"})
    assert result["decode_speedup_geomean"] == 1.2 and result["decode_speedup_min"] == 1.2
    assert one["decode_speedup_bound"] is None and result["decode_speedup_bound_geomean"] == row["decode_speedup_bound"]
    assert result["gemm_bandwidth_fraction_geomean"] == row["gemm_bandwidth_fraction"]["ours"]
    assert "copy_floor_fraction" not in one and result["copy_floor_fraction_geomean"] == 2.0
    assert result["decode_speedup_copy_floor_bound_geomean"] == row["decode_speedup_copy_floor_bound"]


class _ProgrammaticProbe(_DecodeProbe):
    def wall_ms(self, steps):
        for step in steps.values():
            step()
        return {"stock": 1.2, "ours": 1.0, "ours_programmatic": 0.8}

    def profile(self, steps):
        return {side: {"us": 10.0, "kernels": [{"kernel": "kernel_inductor_cutedsl_x", "us": 6.0}]} for side in steps}


def test_a_decode_row_with_programmatic_launches_times_a_third_side_compiled_with_them():
    """``--programmatic``: the third side's step compiles with
    ``config.programmatic_launch`` on (and only it: the setting is off again after),
    agrees with stock, and is timed beside the two; the row and the summary give
    ours over it and stock over it."""
    pytest.importorskip("transformers")
    from benchmarks import decode
    from inductor_cutedsl import config

    compiled_with = []

    def compile_fn(fn, mode):
        compiled_with.append(config.programmatic_launch)
        return fn

    tiny = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "vocab_size": 256}
    row = decode.measure(
        "llama",
        2,
        2,
        _ProgrammaticProbe(),
        1e9,
        device="cpu",
        context=16,
        compile_fn=compile_fn,
        overrides={**tiny, "num_key_value_heads": 2},
        programmatic=True,
    )
    assert compiled_with == [False, False, True] and config.programmatic_launch is False
    assert row["rel_err"]["ours_programmatic_vs_stock"] == 0.0
    assert row["programmatic_speedup"] == 1.25 and row["programmatic_decode_speedup"] == 1.5
    assert set(row["gemm_us"]) == {"stock", "ours", "ours_programmatic"}
    result = decode.summarize([row], {"device": "cpu"})
    assert result["programmatic_speedup_geomean"] == 1.25 and result["programmatic_decode_speedup_geomean"] == 1.5
    assert "programmatic_speedup_geomean" not in decode.summarize([{**row, "programmatic_speedup": None}], {})


def test_a_decode_run_resumed_on_another_card_keeps_each_rows_card_and_copy_bandwidth(monkeypatch, tmp_path):
    """A decode run resumed in a call lent another card: the earlier rows keep the card
    and copy bandwidth their fractions were measured against (a file from before rows
    named them lends its own), the new rows name the card they ran on, and the summary
    names both cards."""
    from benchmarks import decode

    earlier = {"device": "H200", "copy_bandwidth_gbps": 4194.0, "rows": [{"row": "llama:b4", "decode_speedup": 1.06}]}
    path = tmp_path / "earlier.json"
    path.write_text(json.dumps(earlier))
    monkeypatch.setattr(decode.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(decode, "stock_as_fair_stock", lambda: None)
    monkeypatch.setattr(decode, "run_info", lambda: {"device": "H100", "torch": "2.11"})
    monkeypatch.setattr(decode, "copy_bandwidth", lambda: 3.0e12)
    monkeypatch.setattr(decode, "GpuProbe", lambda: None)
    monkeypatch.setattr(decode, "release", lambda: None)
    measured = []

    def measure(name, batch, layers, probe, bandwidth, **kw):
        measured.append((name, batch, bandwidth))
        return {"row": f"{name}:b{batch}", "decode_speedup": 1.02}

    monkeypatch.setattr(decode, "measure", measure)
    out = tmp_path / "next.json"
    result = decode.main(["--models", "llama", "--batches", "4,16", "--resume", str(path), "--json", str(out)])
    assert measured == [("llama", 16, 3.0e12)]  # the earlier row is not measured again
    assert [(r["row"], r["device"], r["copy_bandwidth_gbps"]) for r in result["rows"]] == [
        ("llama:b4", "H200", 4194.0),
        ("llama:b16", "H100", 3000.0),
    ]
    assert result["device"] == "H100 (1 row) and H200 (1 row)"
    assert json.loads(out.read_text())["device"] == result["device"]


def test_decode_sites_group_the_linear_layers_by_shape_and_stream_their_weights():
    from benchmarks import decode

    model = torch.nn.ModuleDict(
        {
            "q": torch.nn.Linear(64, 64, bias=False),
            "k": torch.nn.Linear(64, 16, bias=False),
            "v": torch.nn.Linear(64, 16, bias=False),
            "o": torch.nn.Linear(64, 64, bias=True),
            "o2": torch.nn.Linear(64, 64, bias=False),
        }
    )
    sites = decode.linear_sites(model)
    assert [(s.n, s.k, s.bias, s.modules) for s in sites] == [
        (64, 64, False, ("q", "o2")),
        (16, 64, False, ("k", "v")),
        (64, 64, True, ("o",)),
    ]
    assert decode.gemm_bytes(model, 3) == sum(
        (m.weight.numel() + 3 * sum(m.weight.shape) + (0 if m.bias is None else m.bias.numel())) * 2
        for m in model.values()
    )


def test_a_decode_site_times_its_gemm_alone_after_a_flush_of_l2(monkeypatch):
    """A site's step on the CPU: the L2 flush, then the GEMM, checked against float64;
    the GEMM's µs are every kernel of the step but the flush's (a decomposed mm's
    reduction and its pointwise kernel both count); a wrong side fails."""
    from benchmarks import decode

    monkeypatch.setattr(decode, "FLUSH_BYTES", 4096)
    # Each site starts from a reset dynamo: every site compiles the same function,
    # and past dynamo's recompile limit the later ones would run eagerly.
    released = []
    monkeypatch.setattr(decode, "release", lambda: released.append(len(compiled)))

    site = decode.Site(96, 64, True, ("up",))
    compiled = []

    def compile_fn(fn, mode):
        compiled.append(mode)
        return fn

    class Probe:
        def __init__(self):
            self.calls = 0

        def profile(self, steps):
            self.calls += 1
            flush = {"kernel": "reduce_kernel_sum", "us": 60.0}
            if self.calls == 1:  # the flush alone: its kernels
                assert steps["stock"]().item() == decode.FLUSH_BYTES // 4
                return {side: {"us": 60.0, "kernels": [flush]} for side in decode.BACKENDS}
            assert steps["ours"]().shape == (4, 96)
            gemm = {
                "stock": [{"kernel": "nvjet", "us": 2.0}],
                "ours": [{"kernel": "cutedsl", "us": 1.5}, {"kernel": "pointwise", "us": 0.5}],
            }
            return {side: {"us": 0.0, "kernels": [flush, *gemm[side]]} for side in decode.BACKENDS}

    probe = Probe()
    flush = decode.l2_flush(probe, "cpu")  # its kernels learnt once, for every site
    row = decode.measure_site(site, 4, probe, 1e9, flush, device="cpu", dtype=torch.float32, compile_fn=compile_fn)
    assert compiled == [decode.CUDAGRAPHS] * 2 and released == [0], "released before its compiles"
    assert row["us"] == {"stock": 2.0, "ours": 2.0} and row["kernels"]["ours"] == ["cutedsl", "pointwise"]
    nbytes = (96 * 64 + 4 * (96 + 64) + 96) * 4
    assert row["gemm_bytes"] == nbytes
    assert row["bandwidth_fraction"]["ours"] == round(nbytes / 2e-6 / 1e9, 4)
    assert max(row["rel_err"].values()) < 1e-6
    summary = decode.summarize([{"row": "x", "decode_speedup": 1.0, "gemm_sites": [row]}], {})
    assert summary["site_bandwidth_fraction_geomean"] == row["bandwidth_fraction"]
    from tools import perf_doc

    page = "\n".join(perf_doc._decode(summary))
    assert "| x | 96x64 + bias | up | 2 / 2 |" in page and "cutedsl, pointwise" in page

    sides = iter(decode.BACKENDS)

    def wrong(fn, mode):  # ours' GEMM comes out wrong: the site stops
        if next(sides) == "stock":
            return fn
        return lambda x, w: fn(x, w) + 1

    with pytest.raises(AssertionError, match="ours against float64"):
        decode.measure_site(site, 4, probe, 1e9, flush, device="cpu", dtype=torch.float32, compile_fn=wrong)
    assert probe.calls == 2, "the flush and the first site, profiled once each"


def test_a_rewound_static_cache_decodes_the_same_step_again():
    """Without the rewind, each call writes the next slot and attends to one more token."""
    pytest.importorskip("transformers")
    from transformers import StaticCache

    from benchmarks import decode

    tiny = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2}
    model = decode.build("llama", 2, "cpu", context=16, overrides={**tiny, "vocab_size": 256})
    cache = StaticCache(config=model.config, max_cache_len=32)
    prompt, token, position = torch.randint(0, 256, (2, 16)), torch.randint(0, 256, (2, 1)), torch.tensor([16])
    with torch.no_grad():
        model(input_ids=prompt, past_key_values=cache, cache_position=torch.arange(16))
        outs = []
        for _ in range(3):
            decode.rewind(cache, 16)
            outs.append(model(input_ids=token, past_key_values=cache, cache_position=position).logits)
        assert all(torch.equal(o, outs[0]) for o in outs) and cache.get_seq_length() == 17
        drifted = model(input_ids=token, past_key_values=cache, cache_position=position).logits
    assert not torch.equal(drifted, outs[0])


def test_the_host_profile_ranks_own_time_per_step_and_what_grew_in_ours(capsys):
    import cProfile

    from tools import host_profile

    def busy():
        return sum(i * i for i in range(2000))

    profile = cProfile.Profile()
    profile.enable()
    for _ in range(4):
        busy()
    profile.disable()
    times = host_profile.function_times(profile, steps=4)
    (genexpr,) = [name for name in times if "genexpr" in name]
    assert times[genexpr] > 0 and host_profile.top(times, 1)[0][1] == max(times.values())
    grown = host_profile.growth({"a": 1.0, "b": 5.0}, {"a": 4.0, "b": 5.5, "c": 2.0}, 2)
    assert grown == [("a", 1.0, 4.0), ("c", 0.0, 2.0)]  # largest increase first; new functions count from 0
    if not torch.cuda.is_available():
        assert host_profile.main([]) is None and "needs a CUDA GPU" in capsys.readouterr().out


def test_the_host_profile_counts_built_in_calls_per_step_and_keeps_only_generated_wrappers(tmp_path, monkeypatch):
    import cProfile

    from tools import host_profile

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    generated = tmp_path / "cache" / "ab" / "wrapper.py"
    generated.parent.mkdir(parents=True)
    generated.write_text("def call(args):\n    return len(args)\n")
    elsewhere = tmp_path / "other.py"
    elsewhere.write_text("def call(args):\n    return len(args)\n")
    namespaces: list[dict] = [{}, {}]
    for path, ns in zip((generated, elsewhere), namespaces):
        exec(compile(path.read_text(), str(path), "exec"), ns)
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(4):
        namespaces[0]["call"]([1, 2])
        namespaces[1]["call"]([1])
    profile.disable()
    counts = host_profile.calls_per_step(profile, steps=2)
    assert counts["<built-in method builtins.len>"] == 4.0  # 8 calls over 2 steps
    assert host_profile.wrappers(profile) == {str(generated): generated.read_text()}


def test_decisions_since_a_mark_are_each_logs_new_records_only():
    """A row (or the host profile) reports the decisions of its own compiles: each of the
    three logs sliced at its own mark, as plain JSON (a sympy size written as text)."""
    import sympy

    from benchmarks import models
    from inductor_cutedsl.lowering import fair_timing, gated
    from inductor_cutedsl.scheduler import selection

    logs = (selection.decisions, gated.decisions, fair_timing.decisions)
    saved = [list(log) for log in logs]
    try:
        selection.decisions.append({"old": 1})
        marks = models.decision_marks()
        selection.decisions.append({"size": sympy.Integer(256)})
        gated.decisions.extend([{"way": "dual"}, {"way": "alternative"}])
        fair_timing.decisions.append({"ours": "cutedsl_gemm_3"})
        got = models.decisions_since(marks)
        assert got == {
            "epilogue": [{"size": "256"}],
            "gated": [{"way": "dual"}, {"way": "alternative"}],
            "gemm": [{"ours": "cutedsl_gemm_3"}],
        }
        json.dumps(got)
    finally:
        for log, old in zip(logs, saved, strict=True):
            log[:] = old


def test_coordesc_log_records_the_kernels_tuned_and_skips_templates(monkeypatch):
    """Inductor's own entry decides which kernels it tunes (a template returns at once);
    the log wraps the tuning that follows, which here sleeps each kernel's seconds."""
    pytest.importorskip("triton")
    from torch._inductor.runtime.hints import HeuristicType
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    def tune(autotuner, launcher, *args, **kwargs):
        time.sleep(autotuner.seconds)
        return launcher

    monkeypatch.setattr(CachingAutotuner, "_coordinate_descent_tuning", tune)

    class Autotuner:
        """What Inductor's entry reads; its tuning is the class's, as a real one's is."""

        deterministic_mode = False
        compile_id = None
        is_backward = False

        def __init__(self, kind, name, seconds):
            self.heuristic_type, self.seconds = kind, seconds
            self.inductor_meta = {"kernel_name": name}
            self._should_coordesc_tune = kind != HeuristicType.TEMPLATE  # what torch 2.14 on asks first

        def _coordinate_descent_tuning(self, launcher, *args, **kwargs):
            return CachingAutotuner._coordinate_descent_tuning(self, launcher, *args, **kwargs)

    with compile_bench.CoordescLog() as log:
        for kind, name, s in (
            (HeuristicType.POINTWISE, "triton_poi_0", 0.05),
            (HeuristicType.TEMPLATE, "triton_tem_1", 0.0),
            (HeuristicType.PERSISTENT_REDUCTION, "triton_per_2", 0.01),
            (HeuristicType.POINTWISE, "Placeholder.DESCRIPTIVE_NAME", 0.02),
        ):
            assert CachingAutotuner.coordinate_descent_tuning(Autotuner(kind, name, s), "L") == "L"
    assert CachingAutotuner.__dict__["_coordinate_descent_tuning"] is tune
    summary = log.summary()
    assert summary["kernels"] == 3 and summary["kinds"] == {"pointwise": 2, "persistent_reduction": 1}
    assert summary["slowest"][0][:2] == ["triton_poi_0", "pointwise"] and summary["slowest"][0][2] >= 0.05
    assert 0.08 <= summary["seconds"] < 1.0
    assert summary["benchmark_modules"]["kernels"] == 1 and 0.02 <= summary["benchmark_modules"]["seconds"] < 0.05


def test_named_phases_take_nested_phases_out_and_leave_the_rest_as_other():
    report = {
        "compile_s": 40.0,
        "phases": {
            "bytecode_tracing": 1.0,
            "GraphLowering.run": 7.0,
            "mm_template_autotuning": 2.5,
            "GraphLowering.codegen": 5.0,
            "Scheduler.__init__": 4.5,
            "Scheduler.fused_nodes": 2.0,
            "PyCodeCache.load_by_key_path": 4.0,
            "CachingAutotuner.coordinate_descent_tuning": 19.0,
        },
    }
    named = compile_bench.named_phases(report)
    assert named["lowering, less autotuning"] == 4.5
    assert named["autotuning (precompile wait, benchmarks)"] == 2.5
    assert named["fusion decisions"] == 2.0 and named["scheduling and code generation"] == 3.0
    assert named["cached graph load, less module load"] == 0.0  # a cold compile loads no cached graph
    assert named["other"] == 40.0 - (1.0 + 4.5 + 2.5 + 2.0 + 3.0 + 4.0 + 19.0)
    warm = {"compile_s": 12.0, "phases": {"AOTAutogradCache.inductor_load": 2.0, "PyCodeCache.load_by_key_path": 1.5}}
    named = compile_bench.named_phases(warm)
    assert named["cached graph load, less module load"] == 0.5 and named["kernel compiles and module load"] == 1.5
    medians = compile_bench.named_phase_medians([report, report, warm])
    assert medians["coordinate descent (first call)"] == 19.0


def test_a_child_reports_its_timeline_and_the_parent_adds_its_exit(monkeypatch):
    seen = {}

    def fake_process(args, env, timeout):
        seen["started"] = float(env[compile_bench.STARTED])
        time.sleep(0.2)
        return {"compile_s": 0.05, "cutedsl_builds": 0, "timeline_s": {"start_and_imports": 0.01, "reported_at": 0.05}}

    _fake_children(monkeypatch, fake_process)
    bid = models.BlockId.parse("gpt2:small:inference")
    report = compile_bench.run_child(bid, models.CUDAGRAPHS, compile_bench.FAIR_STOCK, {}, 60)
    assert abs(seen["started"] - time.time()) < 5
    assert "reported_at" not in report["timeline_s"]
    assert report["timeline_s"]["exit"] >= 0.1  # the 0.2 s after the report was made
    assert report["process_s"] >= 0.2


def test_the_ratio_less_coordinate_descent_takes_each_compiles_tuning_out():
    def report(compile_s, coordesc):
        return {"compile_s": compile_s, "phases": {compile_bench.COORDESC: coordesc}}

    stock = [report(40.0, 18.0), report(50.0, 30.0)]  # 22 and 20 s less tuning
    ours = [report(45.0, 20.0), report(60.0, 36.0)]  # 25 and 24 s
    assert compile_bench.median_less_coordesc(stock) == 21.0
    assert compile_bench.median_less_coordesc(ours) == 24.5
    row = compile_bench.row_summary("gpt2:small:inference", {compile_bench.FAIR_STOCK: stock, compile_bench.OURS: ours})
    assert row["compile_ratio_less_coordesc"] == round(24.5 / 21.0, 4)
    assert compile_bench.median_less_coordesc([]) is None


def test_the_autotune_log_names_each_choices_config():
    """Ours by config name, a Triton template by its description (block sizes, stages,
    warps: what a pruning of Triton's choices keys on), an ATen choice by none."""
    from inductor_cutedsl.kernels import GemmConfig

    class TritonTemplateCaller:
        description = "BLOCK_M=128, BLOCK_N=64, BLOCK_K=64, num_stages=4, num_warps=4"

    class ExternKernelCaller:
        description = "mm"

    class CuteDSLGemmCaller:
        candidate = types.SimpleNamespace(spec=types.SimpleNamespace(config=GemmConfig(128, 64, 1, 1)))

    assert compile_bench.our_config(TritonTemplateCaller()) == TritonTemplateCaller.description
    assert compile_bench.our_config(ExternKernelCaller()) is None
    assert compile_bench.our_config(CuteDSLGemmCaller()) == GemmConfig(128, 64, 1, 1).name()
    assert [compile_bench.choice_kind(c()) for c in (TritonTemplateCaller, ExternKernelCaller)] == ["triton", "aten"]


def test_fp8_fused_residual_pattern_is_the_projection_plus_the_residual():
    """The residual pattern adds the residual stream to the scaled product (a planted
    sign or a dropped scale reads far off the float64 reference), and ``--cases`` refuses
    a pattern it does not know before it looks for a GPU."""
    torch.manual_seed(0)
    a = (torch.randn(32, 64) * 4).to(torch.float8_e4m3fn)
    b = (torch.randn(48, 64) * 4).to(torch.float8_e4m3fn).t()
    # tensor-wise: torch 2.11's CPU _scaled_mm takes no other scales
    sa, sb = torch.rand(()) + 0.5, torch.rand(()) + 0.5
    r = (torch.randn(32, 48) * 100).to(torch.bfloat16)  # as large as the product
    ref = fp8.dequantized_reference(a, b, sa, sb) + r.double()
    out = fp8.FUSED["scaled_residual"][0](a, b, sa, sb, r)
    assert (out.double() - ref).norm() / ref.norm() < 1e-2
    with pytest.raises(SystemExit):
        fp8.main(["--fused-only", "--cases", "scaled_residual,scaled_nope"])


def test_fp8_block_names_and_accumulation_reach_every_linear(monkeypatch):
    """A block's name leaves the default recipe and accumulation off from the right, as
    ``--block`` takes it back; the accumulation asked for is every Linear's GEMM's, fast
    by default (float8 inference recipes' default)."""
    assert fp8.block_name("llama", "prefill") == "llama:prefill"
    assert fp8.block_name("llama", "prefill", "static") == "llama:prefill:static"
    assert fp8.block_name("llama", "prefill", "dynamic", "promote") == "llama:prefill:dynamic:promote"
    assert fp8.block_name("llama", "prefill", "static", "promote") == "llama:prefill:static:promote"
    block, _ = models.make_block("llama", "small", device="cpu", dtype=torch.float32, scale=8)
    for fast in (True, False):
        q = fp8.quantized(copy.deepcopy(block), use_fast_accum=fast)
        layers = [m for m in q.modules() if isinstance(m, fp8.Fp8Linear)]
        assert layers
        seen: list = []

        def spy(a, b, *args, use_fast_accum=False, out_dtype=None, seen=seen, **kwargs):
            # (torch 2.11's CPU _scaled_mm takes tensor-wise scales only: the product itself is not needed)
            seen.append(use_fast_accum)
            return torch.zeros(a.shape[0], b.shape[1], dtype=out_dtype)

        monkeypatch.setattr(torch, "_scaled_mm", spy)
        for layer in layers:
            layer(torch.randn(2, 3, layer.wq.shape[1]))
        monkeypatch.undo()
        assert seen == [fast] * len(layers)
    with pytest.raises(ValueError):
        fp8.block_row("llama", "prefill", "dynamic", "fastest")
