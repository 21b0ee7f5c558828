"""Our candidates' autotuning times, put on the scale of the other choices' (no GPU)."""

from __future__ import annotations

import itertools
import types

import pytest
import torch
from torch._inductor.select_algorithm import AlgorithmSelectorCache, AutotuneArgs

import inductor_cutedsl
from inductor_cutedsl import timing
from inductor_cutedsl.lowering import fair_timing
from inductor_cutedsl.lowering.template import GemmCaller


class Other:
    """A non-CuteDSL choice (ATen or Triton) as the autotuner sees it."""

    def __init__(self, name: str) -> None:
        self.name = name


def ours(name: str, stream_k: bool = False) -> GemmCaller:
    caller = GemmCaller.__new__(GemmCaller)
    caller.name = name
    config = types.SimpleNamespace(stream_k=stream_k, name=lambda: f"{name}_config")
    caller.candidate = types.SimpleNamespace(spec=types.SimpleNamespace(config=config))  # type: ignore[assignment]
    return caller


def steady_runs(steady: dict) -> tuple:
    """(a ``run_fn`` whose runs return each choice's ``steady`` time, the names of the
    choices measured, in order)."""
    measured: list[str] = []

    def run_fn(choice):
        def run():
            measured.append(choice.name)
            return steady[choice]

        return run

    return run_fn, measured


@pytest.fixture(autouse=True)
def no_cuda_graphs(monkeypatch):
    """Each run function here returns its own time; the timer just calls it. Launches
    are timed only by the tests of host-paced ranking (``host_timed``)."""
    from inductor_cutedsl import config

    monkeypatch.setattr(timing, "graph_median", lambda make_run, **measure: make_run())
    monkeypatch.setattr(config, "host_paced", False)


def test_ours_take_the_side_by_side_ratio_to_the_fastest_other():
    aten, triton, mine, mine2, broken = Other("aten"), Other("triton"), ours("a"), ours("b"), ours("c")
    timings = {aten: 1.17, triton: 1.40, mine: 1.49, mine2: 1.60, broken: float("inf")}
    # Side by side, ours runs 1% faster than ATen; drift moves both a little each round.
    drift = itertools.count()
    steady = {aten: 1.37, mine: 1.3563}
    measured = []

    def run_fn(choice):
        def run():
            measured.append(choice)
            return steady[choice] * (1 + 0.001 * next(drift))

        return run

    out = fair_timing.rescale(timings, run_fn)
    # Interleaved, each round starting one contender later.
    assert sorted(map(id, measured)) == sorted(map(id, [aten, mine] * fair_timing.ROUNDS))
    assert measured[:4] == [aten, mine, mine, aten]
    assert out[aten] == 1.17 and out[triton] == 1.40 and out[broken] == float("inf")
    assert out[mine] == pytest.approx(1.17 * 1.3563 / 1.37, rel=2e-3)
    assert out[mine] < out[aten]  # the fair verdict: ours wins
    assert out[mine2] / out[mine] == pytest.approx(1.60 / 1.49)  # our own order kept


def test_close_others_are_settled_side_by_side():
    """Two Triton configs within CLOSE of each other: the one Inductor's pass read
    second is faster side by side, so it takes the fastest time; one far behind is
    neither measured nor changed."""
    t1, t2, far, mine = Other("t1"), Other("t2"), Other("far"), ours("a")
    timings = {t1: 0.0050, t2: 0.0052, far: 0.0090, mine: 0.0056}
    run_fn, measured = steady_runs({t1: 0.0070, t2: 0.0055, mine: 0.0060})
    out = fair_timing.rescale(timings, run_fn)
    assert set(measured) == {"t1", "t2", "a"}
    assert len(measured) == 3 * fair_timing.ROUNDS
    assert out[t2] == pytest.approx(0.0050)  # the fastest side by side reads the anchor
    assert out[t1] == pytest.approx(0.0050 * 0.0070 / 0.0055)
    assert out[mine] == pytest.approx(0.0050 * 0.0060 / 0.0055)
    assert out[far] == 0.0090
    assert min(out, key=out.get) is t2


def aten(name: str):
    """An ATen choice as the autotuner sees it (an extern kernel call)."""
    from torch._inductor.select_algorithm import ExternKernelCaller

    caller = ExternKernelCaller.__new__(ExternKernelCaller)
    caller.name = name
    return caller


def test_aten_is_re_timed_even_well_behind_in_inductors_pass():
    """Inductor's pass read cuBLAS 1.6x slower than it runs (its host launch path is
    inside the timed window); side by side it is the fastest, so it wins."""
    cublas, triton, far, mine = aten("mm"), Other("triton"), Other("far"), ours("a")
    timings = {cublas: 0.0448, triton: 0.0373, far: 0.0450, mine: 0.0369}
    run_fn, measured = steady_runs({cublas: 0.0279, triton: 0.0392, mine: 0.0387})
    out = fair_timing.rescale(timings, run_fn)
    assert sorted(set(measured)) == ["a", "mm", "triton"]  # "far" is not within CLOSE
    assert min(out, key=out.get) is cublas
    assert out[cublas] == pytest.approx(0.0373)  # the fastest side by side reads the anchor
    assert out[mine] == pytest.approx(0.0373 * 0.0387 / 0.0279)
    assert out[far] == 0.0450
    record = fair_timing.decisions[-1]
    assert record["ours"] == "a" and record["side_ms"] == {"triton": 0.0392, "mm": 0.0279, "a": 0.0387}
    assert record["inductor_ms"]["mm"] == 0.0448
    # ATen read more than ATEN_FAR behind is left as read.
    slow = {cublas: 0.0373 * fair_timing.ATEN_FAR * 1.01, triton: 0.0373, mine: 0.0369}
    measured.clear()
    assert fair_timing.rescale(slow, run_fn)[cublas] == slow[cublas] and "mm" not in measured


def template(name: str):
    """A Triton template choice as the autotuner sees it."""
    from torch._inductor.select_algorithm import TritonTemplateCaller

    caller = TritonTemplateCaller.__new__(TritonTemplateCaller)
    caller.name = name
    return caller


def test_a_triton_template_anchors_the_scale_inductors_fusion_benchmark_reads():
    """A 256x8960x1536 autotuning of a Qwen2-class training step: Inductor's pass read the
    templates 1.4x and cuBLAS 2.9x above their replays. The fastest template side by side
    keeps its own figure and cuBLAS reads its side-by-side ratio to it, so the unfused way
    Inductor's epilogue benchmark weighs (the fastest choice's figure plus the epilogue's)
    is on the scale of the fused template it times. Anchored at cuBLAS instead, cuBLAS read
    0.0386 ms, the template's figure."""
    t1, t2, cublas, mine = template("t1"), template("t2"), aten("mm"), ours("a")
    timings = {t1: 0.0386, t2: 0.0437, cublas: 0.0511, mine: 0.0298}
    run_fn, measured = steady_runs({t1: 0.0276, t2: 0.0318, cublas: 0.0176, mine: 0.0232})
    out = fair_timing.rescale(timings, run_fn)
    assert set(measured) == {"t1", "t2", "mm", "a"}
    assert out[t1] == pytest.approx(0.0386)
    assert out[t2] == pytest.approx(0.0386 * 0.0318 / 0.0276)
    assert out[cublas] == pytest.approx(0.0386 * 0.0176 / 0.0276)
    assert out[mine] == pytest.approx(0.0386 * 0.0232 / 0.0276)
    assert min(out, key=out.get) is cublas
    # The template that anchors is the fastest side by side, not the fastest in the pass.
    timings = {t1: 0.0386, t2: 0.0400, cublas: 0.0511, mine: 0.0298}
    run_fn, _ = steady_runs({t1: 0.0300, t2: 0.0280, cublas: 0.0176, mine: 0.0232})
    out = fair_timing.rescale(timings, run_fn)
    assert out[t2] == pytest.approx(0.0400)
    assert out[t1] == pytest.approx(0.0400 * 0.0300 / 0.0280)
    assert out[cublas] == pytest.approx(0.0400 * 0.0176 / 0.0280)


def test_the_fastest_re_timed_choice_reads_at_most_the_fastest_others_figure():
    """The template fastest side by side was read slower in Inductor's pass than another:
    kept at its own figure it would read above every choice left out of the re-timing
    that Inductor read faster, which could then win unmeasured. It reads the fastest
    other's figure instead, and the rest their ratios to it."""
    t_read_fast, t_runs_fast, mine = template("t0"), template("t1"), ours("a")
    timings = {t_read_fast: 0.0400, t_runs_fast: 0.0430, mine: 0.0500}
    run_fn, _ = steady_runs({t_read_fast: 0.0300, t_runs_fast: 0.0250, mine: 0.0280})
    out = fair_timing.rescale(timings, run_fn)
    assert out[t_runs_fast] == pytest.approx(0.0400)
    assert out[t_read_fast] == pytest.approx(0.0400 * 0.0300 / 0.0250)
    assert out[mine] == pytest.approx(0.0400 * 0.0280 / 0.0250)


def test_short_gemms_get_short_measurements_and_a_wider_net():
    """A GEMM of a few microseconds: Inductor's figures are mostly overhead, so choices
    within a few microseconds of the fastest are re-timed, each measured briefly."""

    def measure_ms(best):
        return timing.measure_ms(best, fair_timing.REP_MS)

    assert measure_ms(0.0174) < measure_ms(0.3) == fair_timing.REP_MS
    assert measure_ms(0.001) == timing.MIN_REP_MS
    best, near, mine = Other("best"), Other("near"), ours("a")
    timings = {best: 0.0174, near: 0.0200, mine: 0.0285}  # near: 15% behind, 2.6 us
    run_fn, measured = steady_runs({best: 0.0060, near: 0.0052, mine: 0.0070})
    out = fair_timing.rescale(timings, run_fn)
    assert set(measured) == {"best", "near", "a"}
    assert min(out, key=out.get) is near


def test_at_most_OTHERS_others_are_re_timed():
    others = [Other(f"t{i}") for i in range(6)]
    mine = ours("a")
    timings = {**{o: 1.0 + 0.001 * i for i, o in enumerate(others)}, mine: 1.2}
    run_fn, measured = steady_runs(timings)
    fair_timing.rescale(timings, run_fn)
    assert set(measured) == {"t0", "t1", "t2", "t3", "a"}


def test_nothing_is_measured_without_both_sides():
    def run_fn(choice):
        raise AssertionError("measured")

    only_ours = {ours("a"): 1.0, ours("b"): 2.0}
    assert fair_timing.rescale(only_ours, run_fn) == only_ours
    aten = Other("aten")
    no_ours = {aten: 1.0, ours("a"): float("inf")}
    assert fair_timing.rescale(no_ours, run_fn) == no_ours


def test_a_failed_second_timing_keeps_the_first(caplog):
    aten, mine = Other("aten"), ours("a")
    timings = {aten: 1.0, mine: 1.2}

    def run_fn(choice):
        raise RuntimeError("capture failed")

    assert fair_timing.rescale(timings, run_fn) == timings
    assert "side-by-side timing" in caplog.text


def test_inductors_benchmark_pass_goes_through_the_rescale():
    """The installed hook gets Inductor's timings and makes run functions from each
    choice's benchmark request, on Inductor's autotuning inputs (ours on its own
    inputs); disable() removes it."""
    assert inductor_cutedsl.is_enabled()
    a, out = torch.randn(4, 4), torch.empty(4, 4)
    args = AutotuneArgs.from_choice_args([a], [a], out, out, None)
    aten, mine = Other("aten"), ours("a")
    seen, made = [], []
    aten.benchmark = lambda *x, out: (seen.append("aten"), 1.0)[1]
    mine.benchmark = lambda *x, out: (seen.append("ours"), 2.0)[1]
    mine.benchmark_inputs = lambda: ("own",)

    def request(name, ms):
        def make_run_fn(*inputs, out):
            made.append((name, inputs[0] is a or inputs[0]))
            return lambda: ms

        return types.SimpleNamespace(make_run_fn=make_run_fn)

    aten.bmreq, mine.bmreq = request("aten", 1.0), request("ours", 2.0)
    timings = AlgorithmSelectorCache.benchmark_choices([aten, mine], args)
    assert seen == ["aten", "ours"]
    assert made == [("aten", True), ("ours", "own")]
    assert timings == {aten: 1.0, mine: 2.0}  # a constant ratio changes nothing
    inductor_cutedsl.disable()
    try:
        seen.clear()
        AlgorithmSelectorCache.benchmark_choices([aten, mine], args)
        assert seen == ["aten", "ours"]
    finally:
        inductor_cutedsl.enable()


def host_timed(monkeypatch, host: dict, cudagraphs: bool, impure_rounds=()) -> list:
    """The rounds of launch timing, each the names in the order timed, as a list that
    fills as they run: ``enqueue_each_ms`` reads ``host[name]`` (plus a round's own
    microsecond of noise), and the GPU catches up with the rounds ``impure_rounds``."""
    from inductor_cutedsl import config
    from inductor_cutedsl.compat import settings

    monkeypatch.setattr(config, "host_paced", config.SETTINGS["host_paced"].default)
    rounds: list[list[str]] = []

    def fake_enqueue_each(fns, calls=10):
        rounds.append([run.choice for run in fns.values()])
        if len(rounds) - 1 in impure_rounds:
            return None
        return {key: host[run.choice] + 0.001 * (len(rounds) % 2) for key, run in fns.items()}

    monkeypatch.setattr(fair_timing, "enqueue_each_ms", fake_enqueue_each)
    monkeypatch.setattr(settings, "compile_uses_cudagraphs", lambda: cudagraphs)
    return rounds


def named(run_fn):
    def named_run_fn(choice):
        run = run_fn(choice)
        run.choice = choice.name
        return run

    return named_run_fn


@pytest.mark.parametrize("cudagraphs", [False, True])
def test_host_paced_ranking_without_cuda_graphs(monkeypatch, cudagraphs):
    """A compile without CUDA graphs ranks the re-timed choices by GPU plus host launch
    time (the setting's default): cuBLASLt's addmm, 3% faster on the GPU but with a launch path
    four times ours, loses to our launch, and a Triton template 12% slower on the GPU
    than ATen but with a short launch beats ATen too; under CUDA graphs (launch paths
    replayed away) the GPU ranking stands and no launch is timed."""
    aten, triton, mine = Other("addmm"), Other("triton"), ours("a")
    timings = {aten: 0.063, triton: 0.064, mine: 0.050}
    run_fn, _ = steady_runs({aten: 0.0422, triton: 0.0473, mine: 0.0434})
    rounds = host_timed(monkeypatch, {"addmm": 0.060, "triton": 0.012, "a": 0.015}, cudagraphs)
    out = fair_timing.rescale(timings, named(run_fn))
    if cudagraphs:
        assert out[mine] > out[aten] and out[triton] > out[aten] and rounds == []
        assert "host_ms" not in fair_timing.decisions[-1]
    else:
        assert out[mine] < out[triton] < out[aten]
        # Every round times every contender, in interleaved orders.
        assert len(rounds) == fair_timing.ROUNDS and all(sorted(r) == ["a", "addmm", "triton"] for r in rounds)
        assert len({tuple(r) for r in rounds}) > 1
        # The median round: rounds 1 and 3 read a microsecond more.
        assert fair_timing.decisions[-1]["host_ms"] == {"addmm": 0.061, "triton": 0.013, "a": 0.016}
        # Anchored at the fastest other's Inductor figure, as that other paces: the triton
        # template at 0.0473 + 0.013.
        paced = {aten: 0.1032, triton: 0.0603, mine: 0.0594}
        for c in (aten, triton, mine):
            assert out[c] == pytest.approx(0.063 * paced[c] / 0.0603, rel=1e-6)


def test_a_long_gemm_is_ranked_by_gpu_time_alone(monkeypatch):
    """Past ``HOST_BOUND_MS`` the kernel outlasts any launch path: no launch is timed."""
    aten, mine = Other("addmm"), ours("a")
    run_fn, _ = steady_runs({aten: 0.422, mine: 0.434})
    rounds = host_timed(monkeypatch, {"addmm": 0.060, "a": 0.015}, cudagraphs=False)
    out = fair_timing.rescale({aten: 0.63, mine: 0.50}, named(run_fn))
    assert rounds == [] and out[mine] > out[aten] and "host_ms" not in fair_timing.decisions[-1]
    assert fair_timing.HOST_BOUND_MS < 0.422


def test_rounds_the_gpu_caught_up_with_are_dropped(monkeypatch):
    aten, mine = Other("addmm"), ours("a")
    run_fn, _ = steady_runs({aten: 0.0422, mine: 0.0434})
    host_timed(monkeypatch, {"addmm": 0.060, "a": 0.015}, cudagraphs=False, impure_rounds=(0, 2))
    out = fair_timing.rescale({aten: 0.063, mine: 0.050}, named(run_fn))
    assert fair_timing.decisions[-1]["host_ms"] == {"addmm": 0.06, "a": 0.015}  # round 2 of 3 alone
    assert out[mine] < out[aten]


def test_no_pure_round_leaves_every_choice_at_its_gpu_time(monkeypatch):
    """The GPU caught up with every round: charging only some choices their launches
    would favour the others, so none is charged."""
    aten, mine = Other("addmm"), ours("a")
    run_fn, _ = steady_runs({aten: 0.0422, mine: 0.0434})
    host_timed(monkeypatch, {"addmm": 0.060, "a": 0.015}, cudagraphs=False, impure_rounds=range(9))
    out = fair_timing.rescale({aten: 0.063, mine: 0.050}, named(run_fn))
    assert out[aten] == pytest.approx(0.063) and out[mine] == pytest.approx(0.063 * 0.0434 / 0.0422, rel=1e-6)
    assert "host_ms" not in fair_timing.decisions[-1]


def test_host_paced_ranking_can_be_turned_off(monkeypatch):
    from inductor_cutedsl import config
    from inductor_cutedsl.compat import settings

    monkeypatch.setattr(fair_timing, "enqueue_each_ms", lambda fns, calls=10: pytest.fail("timed a launch"))
    monkeypatch.setattr(settings, "compile_uses_cudagraphs", lambda: False)
    aten, mine = Other("addmm"), ours("a")
    run_fn, _ = steady_runs({aten: 0.0422, mine: 0.0434})
    assert config.SETTINGS["host_paced"].default is True
    with config.patch(host_paced=False):
        out = fair_timing.rescale({aten: 0.063, mine: 0.050}, run_fn)
    assert out[mine] > out[aten]


@pytest.mark.parametrize("mode,expected", [("max-autotune", True), ("max-autotune-no-cudagraphs", False)])
def test_compile_mode_tells_cuda_graphs(mode, expected):
    from torch._inductor import config as inductor_config

    from inductor_cutedsl.compat import settings

    with inductor_config.patch(torch._inductor.list_mode_options(mode)):
        assert settings.compile_uses_cudagraphs() is expected


@pytest.mark.parametrize("cudagraphs", [False, True])
def test_a_stream_k_candidate_is_re_timed_as_replayed_under_cuda_graphs(monkeypatch, cudagraphs):
    """Inductor's pass reads a stream-K launch's host work (scratch, a token) as kernel
    time: 30 µs against our plain tile's 10.5. Under CUDA graphs, where a replay skips
    that work, it is re-timed side by side too, and wins where its replay is the
    fastest; without them its launch is paid on every call, and it keeps the pass's
    figure (scaled as ours are), unmeasured."""
    from inductor_cutedsl.compat import settings

    aten, plain, streamed, slower_streamed = Other("mm"), ours("a"), ours("sk", True), ours("sk2", True)
    timings = {aten: 0.0110, plain: 0.0105, streamed: 0.0300, slower_streamed: 0.0400}
    run_fn, measured = steady_runs({aten: 0.0100, plain: 0.0104, streamed: 0.0090, slower_streamed: 0.0080})
    monkeypatch.setattr(settings, "compile_uses_cudagraphs", lambda: cudagraphs)
    out = fair_timing.rescale(timings, run_fn)
    scale = out[plain] / timings[plain]
    assert out[slower_streamed] == pytest.approx(timings[slower_streamed] * scale), "only our fastest stream-K one"
    assert fair_timing.decisions[-1]["ours_configs"] == {"a": "a_config"} | ({"sk": "sk_config"} if cudagraphs else {})
    if cudagraphs:
        assert sorted(set(measured)) == ["a", "mm", "sk"]
        assert out[streamed] == pytest.approx(0.0110 * 0.0090 / 0.0100)
        assert min(out, key=out.__getitem__) is streamed
    else:
        assert sorted(set(measured)) == ["a", "mm"]
        assert out[streamed] == pytest.approx(timings[streamed] * scale)
        assert min(out, key=out.__getitem__) is aten
