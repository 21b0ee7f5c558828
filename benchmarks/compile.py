"""Cold compile time of model-suite blocks, ours against stock, measured so that it
cannot flatter us.

    python -m benchmarks.compile --json benchmarks/results/h200-compile.json
    python -m benchmarks.compile --rows gpt2:small,llama:small:train --pairs 3 --default-stock --warm-kernels

A compile is the first call of a ``benchmarks.models`` block (its compile and one run)
in a fresh process whose Inductor, Triton and kernel caches are new, empty directories:
a user's first compile. Each row (``FAMILY:SIZE[:RUN]``; default: every family's
small inference block) is compiled ``--pairs`` times by each side, the sides in one
order in even pairs and the reverse in odd ones, so that neither always runs after
the other. The sides:

* ``fair_stock``: stock Inductor, started with ``TRITON_PTXAS_PATH`` at torch's own
  ptxas (where torch ships one). A stock process keys Triton's cache on Triton's
  bundled ptxas while its compile workers key on torch's, and so compiles template
  choices twice in some compiles (docs/findings.md). Ours aligns the two as it
  installs; a ratio against stock with that bug would credit ours with fixing
  Inductor's process set-up, not with compiling faster. Likewise fair stock keeps its
  cached coordinate-descent results (``compat.autotune.carry_coordinate_descent``, which
  ours installs): torch 2.11 and 2.14 lose the mark of a winner a compile worker read,
  torch 2.11 tunes again what its artifacts carry, and every release to 2.15 looks for a
  static autotuner's tuning under the cache directory it was compiled in.
* ``ours``: the backend installed.
* ``default_stock`` (``--default-stock``): stock as a user starts it.
* ``ours_warm_kernels`` (``--warm-kernels``): ours with the kernel cache holding what
  ours built for the other rows (a user who compiled other models before), Inductor's
  and Triton's caches empty. Each such compile gets its own copy of that cache: a
  second compile must not find the first one's kernels.

Every child starts from this process's environment as it would be without our install
(``install.launch_environment``), stock ones with ``INDUCTOR_CUTEDSL_ENABLED=0``, ours
with ``=1``. A child reports the first call's seconds, the seconds of each of Dynamo's
and Inductor's timed phases (``compilation_time_metrics``, nested phases overlap), ours'
own counters and the CuteDSL kernels it built; the parent adds the child's whole wall
time (``process_s``: imports and exit included). The children are forked from one
process that has imported torch and transformers (``zygote``, where it can start):
both sides alike, and nothing they differ in is read by those imports. ``compile_ratio`` is ours' median
over fair stock's, per row; the summary holds their geomean and maximum. One pair moves
by tens of percent between runs (compile workers and ptxas subprocesses share the
host's CPUs): read medians of several pairs only.

Results are rewritten after every child; ``--resume`` goes on from an earlier file and
``--budget`` starts no child unlikely to end in time (a call's time limit). The kernel
caches kept for the warm-kernel compiles travel with the result: written beside
``--json`` as ``JSON.kernels.tar.xz`` and read from beside ``--resume``, so that a run
cut into several calls (each on a fresh machine) compiles no row of ours again only to
fill them. ``--redo ours`` drops them with ours' compiles.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import tarfile
import tempfile
import time
from collections.abc import Iterable

from inductor_cutedsl.cli.run import compile_options, print_report_and_exit
from inductor_cutedsl.install import launch_environment

from . import models, zygote
from .harness import geomean_or_none, launch_api_calls, ratio, run_info, torch_ptxas, write_json
from .models import DEFAULT_FAMILIES, FAMILIES, BlockId

FAIR_STOCK, OURS, DEFAULT_STOCK, OURS_WARM = "fair_stock", "ours", "default_stock", "ours_warm_kernels"
SIDES = (FAIR_STOCK, OURS, DEFAULT_STOCK, OURS_WARM)
#: Where Inductor, Triton and our backend keep what they compiled: new and empty per child.
CACHE_DIRS = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "INDUCTOR_CUTEDSL_CACHE_DIR")
KERNEL_CACHE = "INDUCTOR_CUTEDSL_CACHE_DIR"
DEFAULT_ROWS = tuple(BlockId(family, "small", "inference") for family in DEFAULT_FAMILIES)
#: Phases a row's table shows (the longest); the JSON keeps every one.
TABLE_PHASES = 16


def is_ours(side: str) -> bool:
    return side in (OURS, OURS_WARM)


# ---------------------------------------------------------------------------------------
# The children


def child_environment(side: str, dirs: dict[str, str]) -> dict[str, str]:
    """The whole environment of a ``side`` child with cache directories ``dirs``: this
    process's as it would be without our install (a stock child started with what our
    install set would run aligned, which no user's stock does), the backend on for ours
    only, and for fair stock ``TRITON_PTXAS_PATH`` at torch's ptxas (left as the
    environment has it where torch ships none)."""
    env = {**launch_environment(), **dirs, "INDUCTOR_CUTEDSL_ENABLED": "1" if is_ours(side) else "0"}
    ptxas = torch_ptxas() if side == FAIR_STOCK else None
    if ptxas is not None:
        env["TRITON_PTXAS_PATH"] = ptxas
    return env


def phase_seconds() -> dict[str, float]:
    """Seconds this process spent in each of Dynamo's and Inductor's timed phases
    (``dynamo_timed``), summed over its compiles."""
    from torch._dynamo.utils import compilation_time_metrics

    return {name: round(sum(times), 3) for name, times in compilation_time_metrics.items()}


def our_seconds() -> dict[str, float]:
    """Where this process's compile spent seconds in our code (overlapping: a wait for
    builds can hold up a measurement): waiting for kernel builds, timing our candidates
    in Inductor's autotuning, fair timing's re-timings, the fused/unfused selection and
    the dual-GEMM gate."""
    from inductor_cutedsl.lowering import fair_timing, gated, template
    from inductor_cutedsl.runtime import compiler
    from inductor_cutedsl.scheduler import selection

    figures = {
        "build_wait": compiler.stats["wait_s"],
        "autotune_ours": template.stats["benchmark_s"],
        "fair_timing": fair_timing.stats["measure_s"],
        "selection": selection.stats["decide_s"],
        "selection_builds": selection.stats["builds_s"],
        "selection_modules": selection.stats["modules_s"],
        "gated": gated.stats["measure_s"],
    }
    return {name: round(s, 3) for name, s in figures.items()}


def inductor_pool_ready() -> bool:
    """Whether Inductor's compile subprocesses are up: until then Inductor compiles Triton
    kernels in this process (autotuning choices in threads, a benchmark module's kernels
    at its first run)."""
    from torch._inductor.async_compile import AsyncCompile

    ready = AsyncCompile._ready_future
    return ready is not None and ready.done()


def compile_events() -> dict:
    """The conditions whose first time to hold a sampled compile records: Inductor's
    compile subprocesses ready, our compile workers started."""
    from inductor_cutedsl.runtime import workers

    return {"inductor_pool_ready": inductor_pool_ready, "cutedsl_workers_started": workers.started}


def our_measurements() -> int:
    """How many decisions ours measured in this process (epilogue selection, the
    dual-GEMM gate, fair timing): none where a warm cache answered for them."""
    from inductor_cutedsl.lowering import fair_timing, gated
    from inductor_cutedsl.scheduler import selection

    return len(selection.decisions) + len(gated.decisions) + len(fair_timing.decisions)


#: Steps timed after a child's compile, in rounds (``step_ms`` is the median round's mean).
STEP_ROUNDS, STEPS_PER_ROUND = 7, 20


def step_ms(step) -> float:
    """Milliseconds per call of a compiled ``step`` on the device, CUDA events around
    rounds of back-to-back calls (the median round): what the compile chose, timed, so a
    faster compile that picks slower kernels shows in ``runtime_ratio``."""
    from inductor_cutedsl.timing import replay_ms

    for _ in range(3):
        step()
    return round(statistics.median(replay_ms(step, STEPS_PER_ROUND) for _ in range(STEP_ROUNDS)), 4)


#: Seconds a child waits, before timing its steps, for the builds its compile left in
#: flight (ours starts some speculatively): the step time is the chosen kernels', not the
#: host's while it builds.
STEP_QUIET_S = 60
#: Kernels of a step listed in a report (the longest).
STEP_KERNELS = 8


def step_report(step) -> dict:
    """What a compiled step costs and why: ``step_ms`` (the time a caller sees), the
    host's state as it was timed (``step_host``: builds waited for, load), the GPU time
    of its kernels under the profiler (``step_gpu_ms``, with the longest kernels), and
    ``cudagraph_skips``: graphs cudagraph trees refused to record in this process, and
    ``step_launches``: graph replays and kernels launched alone per step. A step time well
    above its kernel time is the host's (or a skipped graph's, or a wrapper run instead of
    a replay), not the selection's."""
    from torch._dynamo.utils import counters

    from inductor_cutedsl.cli.report import kernel_times

    host = models.GpuProbe().quiet(timeout=STEP_QUIET_S)
    out: dict = {"step_ms": step_ms(step), "step_host": host}
    kernels = kernel_times(step, calls=STEPS_PER_ROUND, top=None, name_chars=80)
    out["step_gpu_ms"] = round(sum(k["ms"] for k in kernels), 4)
    out["step_kernels"] = kernels[:STEP_KERNELS]
    out["cudagraph_skips"] = int(counters["inductor"]["cudagraph_skips"])
    out["step_launches"] = launch_api_calls(step, STEPS_PER_ROUND)
    return out


#: What a benchmark module's kernel is named: Inductor generates it (``benchmark_kernel``)
#: with its name placeholder left in (``Placeholder.DESCRIPTIVE_NAME``); a graph's own
#: kernels get their real names. Stock's epilogue benchmarks (``speedup_by_fusion``) run
#: such kernels, which coordinate descent tunes like any other.
BENCHMARK_KERNEL = "DESCRIPTIVE_NAME"


class CoordescLog:
    """Each Triton kernel that coordinate descent tuned in this process (at a graph's
    first call): its name, kind and seconds. Where two sides' tuning time differs, this
    says whether by more kernels or by slower ones. It wraps the tuning itself
    (``_coordinate_descent_tuning``), which Inductor calls only for the kernels it
    tunes (not templates, user-autotuned or fixed kernels). The summary counts apart the
    kernels of benchmark modules (``BENCHMARK_KERNEL``): those tune during the fusion
    decisions, while the workers are busy, and their tuning serves no kernel the graph runs."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, str, float]] = []

    def __enter__(self) -> CoordescLog:
        from torch._inductor.runtime.triton_heuristics import CachingAutotuner

        self._original = CachingAutotuner.__dict__["_coordinate_descent_tuning"]
        original, entries = self._original, self.entries

        def _coordinate_descent_tuning(autotuner, launcher, *args, **kwargs):
            t0 = time.perf_counter()
            try:
                return original(autotuner, launcher, *args, **kwargs)
            finally:
                kind = str(getattr(autotuner, "heuristic_type", "")).rsplit(".", 1)[-1].lower()
                name = str(autotuner.inductor_meta.get("kernel_name", "?"))
                entries.append((name, kind, time.perf_counter() - t0))

        CachingAutotuner._coordinate_descent_tuning = _coordinate_descent_tuning
        return self

    def __exit__(self, *exc) -> None:
        from torch._inductor.runtime.triton_heuristics import CachingAutotuner

        CachingAutotuner._coordinate_descent_tuning = self._original

    def summary(self, top: int = 8) -> dict:
        kinds: dict[str, int] = {}
        for _, kind, _ in self.entries:
            kinds[kind] = kinds.get(kind, 0) + 1
        slowest = sorted(self.entries, key=lambda e: -e[2])[:top]
        benchmarks = [s for name, _, s in self.entries if BENCHMARK_KERNEL in name]
        return {
            "kernels": len(self.entries),
            "seconds": round(sum(e[2] for e in self.entries), 2),
            "kinds": kinds,
            "slowest": [[name, kind, round(s, 2)] for name, kind, s in slowest],
            # Tuned inside the compile, in the fusion decisions, for a comparison alone.
            "benchmark_modules": {"kernels": len(benchmarks), "seconds": round(sum(benchmarks), 2)},
        }


class AutotuneLog:
    """Every choice Inductor's autotuning timed in this process, per autotuned op: the
    choice's kind (``triton``, ``aten``, ``cutedsl``, ...), its name, its time and its
    precompile seconds. What a pruning of candidates would have kept or lost is read
    from it offline (``autotune_summary``)."""

    def __init__(self) -> None:
        self.entries: list[dict] = []

    def __call__(self, timings, name, input_nodes, choices, profiled_time=None, precompile_times=None) -> None:
        def shape(node) -> list:
            try:
                return [int(s) for s in node.get_size()]
            except Exception:  # symbolic sizes: their text
                return [str(s) for s in node.get_size()]

        self.entries.append(
            {
                "op": name,
                "shapes": [shape(n) for n in input_nodes],
                "choices": [
                    {
                        "kind": choice_kind(c),
                        "name": str(getattr(c, "name", type(c).__name__)),
                        "config": our_config(c),
                        "ms": None if t is None or t == float("inf") else round(float(t), 5),
                        "precompile_s": round(float((precompile_times or {}).get(c, 0.0) or 0.0), 3),
                    }
                    for c, t in timings.items()
                ],
            }
        )

    def __enter__(self) -> AutotuneLog:
        from torch._inductor import select_algorithm

        select_algorithm.add_feedback_saver(self)
        return self

    def __exit__(self, *exc) -> None:
        from torch._inductor import select_algorithm

        select_algorithm.clear_feedback_savers()


def our_config(choice) -> str | None:
    """A timed choice's config: our candidate's kernel config name (its place in the
    shortlist is its place among the GEMM's choices), a Triton template's description
    (its block sizes, stages and warps: what a pruning of Triton's choices would key
    on), None for another backend's choice."""
    candidate = getattr(choice, "candidate", None)
    try:
        if candidate is not None:
            return candidate.spec.config.name()
    except AttributeError:
        return None
    description = getattr(choice, "description", None)
    return str(description) if description and choice_kind(choice) == "triton" else None


def choice_kind(choice) -> str:
    """A timed choice's backend, read from its class: ``cutedsl`` (ours), ``aten``,
    ``triton`` or the class name."""
    name = type(choice).__name__.lower()
    for kind in ("cutedsl", "extern", "triton"):
        if kind in name or kind in type(choice).__module__.lower():
            return "aten" if kind == "extern" else kind
    return name


def our_decisions() -> dict[str, list[dict]]:
    """The decisions ours measured in this process, as each module records them (the
    ways' times, and what was known before measuring)."""
    from inductor_cutedsl.lowering import gated
    from inductor_cutedsl.scheduler import selection

    return {"selection": list(selection.decisions), "gated": list(gated.decisions)}


#: The environment variable through which a child learns when its parent started it
#: (``time.time()``), to split its process time (``timeline_s``).
STARTED = "BENCHMARKS_COMPILE_STARTED"


def child(
    spec: str, sample: str | None = None, artifacts_in: str | None = None, artifacts_out: str | None = None
) -> dict:
    """One cold compile in this fresh process (``FAMILY:SIZE:RUN:MODE:SIDE``): its report.
    With ``sample`` (a path), the compiling thread's stack is sampled in wall time
    (``wall_sampler``), the report appended there and the folded stacks to
    ``sample``.folded.gz, headed by the spec and the seconds. ``artifacts_in``: torch's
    portable cache artifacts loaded before the compile (a machine fed by another; the
    load's seconds are counted in ``load_s``, not in the compile); ``artifacts_out``:
    where this compile's artifacts are saved."""
    import torch

    from inductor_cutedsl import is_enabled
    from inductor_cutedsl.runtime.launch import default_cache

    from .wall_sampler import WallSampler

    started = float(os.environ.get(STARTED, time.time()))
    marks = {"start_and_imports": time.time() - started}

    family, size, run, mode, side = spec.split(":")
    bid = BlockId.parse(f"{family}:{size}:{run}")
    if side not in SIDES or mode not in models.MODES:
        raise ValueError(f"bad child {spec!r}: MODE in {list(models.MODES)}, SIDE in {list(SIDES)}")
    if is_enabled() != is_ours(side):
        raise RuntimeError(f"{spec}: the backend is {'on' if is_enabled() else 'off'} (INDUCTOR_CUTEDSL_ENABLED)")
    if side == FAIR_STOCK:
        from inductor_cutedsl.compat.autotune import carry_coordinate_descent

        carry_coordinate_descent()
    load_s = None
    if artifacts_in:
        t0 = time.perf_counter()
        with open(artifacts_in, "rb") as f:
            if torch.compiler.load_cache_artifacts(f.read()) is None:
                raise RuntimeError(f"{spec}: torch loaded no artifacts from {artifacts_in}")
        load_s = round(time.perf_counter() - t0, 2)
    t_block = time.time()
    block, x = models.make_block(bid.family, bid.size)
    if run == "train":
        x.requires_grad_(True)
    marks["model_build"] = time.time() - t_block
    fn = torch.compile(models.target_of(block, run, x), options=compile_options(mode))
    step = models.make_step(fn, x, run, list(block.parameters()), models.uses_cudagraphs(mode))
    sampler = WallSampler(events=compile_events()) if sample else None
    t0 = time.perf_counter()
    with sampler or contextlib.nullcontext(), AutotuneLog() as autotunes, CoordescLog() as coordesc:
        step()
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    report = {"compile_s": round(seconds, 2), "cutedsl_builds": default_cache().builds, "phases": phase_seconds()}
    report["coordesc"] = coordesc.summary()
    t_step = time.time()
    report.update(step_report(step))
    marks["step_timing"] = time.time() - t_step
    t_rest = time.time()
    report["autotunes"] = autotunes.entries
    if is_ours(side):
        report["ours_s"] = our_seconds()
        report["our_measurements"] = our_measurements()
        report["decisions"] = our_decisions()
    if load_s is not None:
        report["load_s"] = load_s
    if artifacts_out:
        saved = torch.compiler.save_cache_artifacts()
        if saved is None:
            raise RuntimeError(f"{spec}: torch recorded no artifacts to save")
        with open(artifacts_out, "wb") as f:
            f.write(saved[0])
        report["artifacts"] = {kind: len(keys) for kind, keys in saved[1].artifacts.items()}
    if sampler is not None:
        sampler.append_to(sample, f"{spec}: {seconds:.2f} s")
        report["events_s"] = sampler.seen
    marks["logs_and_artifacts"] = time.time() - t_rest
    report["timeline_s"] = {name: round(s, 2) for name, s in marks.items()}
    report["timeline_s"]["reported_at"] = round(time.time() - started, 2)
    return report


def run_child(
    bid: BlockId,
    mode: str,
    side: str,
    dirs: dict[str, str],
    timeout: float,
    sample: str | None = None,
    artifacts_in: str | None = None,
    artifacts_out: str | None = None,
) -> dict:
    """``child`` in a new process (``child_environment``); its report with the process's
    whole wall time added (``process_s``). A stock child that built CuteDSL kernels
    voids the comparison: it raises."""
    args = ["-m", "benchmarks.compile", "--child", f"{bid.name}:{mode}:{side}"]
    if sample:
        args += ["--sample", sample]
    if artifacts_in:
        args += ["--artifacts-in", artifacts_in]
    if artifacts_out:
        args += ["--artifacts-out", artifacts_out]
    t0 = time.perf_counter()
    env = {**child_environment(side, dirs), STARTED: repr(time.time())}
    report = zygote.process(args, env, timeout)
    report["process_s"] = round(time.perf_counter() - t0, 2)
    if "timeline_s" in report:  # what the process spent after its report was made
        report["timeline_s"]["exit"] = round(report["process_s"] - report["timeline_s"].pop("reported_at"), 2)
    if not is_ours(side) and report["cutedsl_builds"]:
        raise RuntimeError(f"{bid.name} {side}: a stock compile built {report['cutedsl_builds']} CuteDSL kernels")
    return report


# ---------------------------------------------------------------------------------------
# What runs, in which order (pure)


def cold_plan(rows: list[BlockId], pairs: int, sides: list[str]) -> list[tuple[BlockId, str, int]]:
    """The cold compiles in the order they run, as (row, side, pair): pairs outermost (a
    run cut short has whole pairs of every row), the sides reversed in every other pair."""
    return [(bid, side, i) for i in range(pairs) for bid in rows for side in (sides if i % 2 == 0 else sides[::-1])]


def warm_plan(rows: list[BlockId], pairs: int) -> list[tuple[BlockId, str, int]]:
    """The warm-kernel compiles (each needs the other rows' kernels from a cold compile)."""
    return [(bid, OURS_WARM, i) for i in range(pairs) for bid in rows]


def full_plan(rows: list[BlockId], pairs: int, sides: list[str], warm: bool) -> list[tuple[BlockId, str, int]]:
    """Every compile in the order it runs: each pair's cold compiles, then (``warm``) that
    pair's warm-kernel ones. A run cut short by its budget then has a warm-kernel figure
    for every row before it starts the second pairs (the first pair's cold compiles have
    filled the kernel caches they need)."""
    cold, hot = cold_plan(rows, pairs, sides), warm_plan(rows, pairs) if warm else []
    return [step for i in range(pairs) for step in cold + hot if step[2] == i]


def pending(plan: list[tuple[BlockId, str, int]], runs: dict[str, dict[str, list]]) -> list[tuple[BlockId, str, int]]:
    """``plan`` less what ``runs`` ({row: {side: [report]}}, an earlier run's) holds: the
    i-th compile of a side is done if that side has more than i reports."""
    return [(bid, side, i) for bid, side, i in plan if len(runs.get(bid.name, {}).get(side, [])) <= i]


# ---------------------------------------------------------------------------------------
# Figures (pure: tested on the CPU)


def median_of(reports: list[dict], key: str, digits: int = 2) -> float | None:
    values = [r[key] for r in reports if r.get(key) is not None]
    return round(statistics.median(values), digits) if values else None


#: The timed phase of coordinate descent (at the graph's first call).
COORDESC = "CachingAutotuner.coordinate_descent_tuning"


def median_less_coordesc(reports: list[dict]) -> float | None:
    """The median of the compiles' seconds less their coordinate descent. Both sides tune
    the same Triton kernels, and that tuning's time varies two- to threefold between runs
    (docs/findings.md): a secondary figure, beside the whole one, with the noise out."""
    values = [r["compile_s"] - r.get("phases", {}).get(COORDESC, 0.0) for r in reports if r.get("compile_s")]
    return round(statistics.median(values), 2) if values else None


#: A compile's phases as the costs issue names them: each the sum of some of Dynamo's and
#: Inductor's timed phases less those nested in them (read against torch 2.11's nesting:
#: ``GraphLowering.run`` holds the GEMMs' autotuning, ``GraphLowering.codegen`` the
#: scheduler's fusion, ``PyCodeCache.load_by_key_path`` the wait for kernel compiles, and
#: on a warm start ``AOTAutogradCache.inductor_load`` holds the module's load). A
#: template's precompile runs in Inductor's workers; what the compile waits for of it is
#: inside autotuning. ``other`` is the first call's seconds less these.
NAMED_PHASES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("Dynamo tracing", ("bytecode_tracing",), ()),
    (
        "graph passes",
        ("_recursive_pre_grad_passes", "_recursive_joint_graph_passes", "_recursive_post_grad_passes"),
        (),
    ),
    ("lowering, less autotuning", ("GraphLowering.run",), ("mm_template_autotuning",)),
    ("autotuning (precompile wait, benchmarks)", ("mm_template_autotuning",), ()),
    ("fusion decisions", ("Scheduler.fused_nodes",), ()),
    ("scheduling and code generation", ("GraphLowering.codegen",), ("Scheduler.fused_nodes",)),
    ("kernel compiles and module load", ("PyCodeCache.load_by_key_path",), ()),
    ("cached graph load, less module load", ("AOTAutogradCache.inductor_load",), ("PyCodeCache.load_by_key_path",)),
    ("coordinate descent (first call)", (COORDESC,), ()),
)


def named_phases(report: dict) -> dict[str, float]:
    """One compile's seconds per ``NAMED_PHASES`` entry, and ``other``."""
    phases = report.get("phases", {})
    out = {}
    for label, plus, minus in NAMED_PHASES:
        out[label] = round(max(0.0, sum(phases.get(p, 0.0) for p in plus) - sum(phases.get(p, 0.0) for p in minus)), 2)
    if report.get("compile_s") is not None:
        out["other"] = round(max(0.0, report["compile_s"] - sum(out.values())), 2)
    return out


def named_phase_medians(reports: list[dict]) -> dict[str, float]:
    named = [named_phases(r) for r in reports]
    labels = dict.fromkeys(label for n in named for label in n)
    return {label: round(statistics.median(n.get(label, 0.0) for n in named), 2) for label in labels}


def phase_medians(reports: list[dict]) -> dict[str, float]:
    """Each phase's median over ``reports`` (a report without the phase counts 0),
    ours' counters as ``ours.NAME``; longest first."""
    flat = [{**r.get("phases", {}), **{f"ours.{k}": v for k, v in r.get("ours_s", {}).items()}} for r in reports]
    names = dict.fromkeys(name for f in flat for name in f)
    medians = {name: round(statistics.median(f.get(name, 0.0) for f in flat), 3) for name in names}
    return dict(sorted(medians.items(), key=lambda kv: -kv[1]))


def autotune_summary(reports: list[dict]) -> dict | None:
    """What one side's autotuning timed, over its compiles' ``autotunes`` logs: the
    choices and precompile seconds per kind, each kind's wins, and the cost of dropping
    Triton's templates from every autotune where ours was offered (``without_triton``:
    per such autotune, the best time left over the best time, as geomean and worst; and
    the Triton precompile seconds that would be saved). None without logs."""
    logs = [r["autotunes"] for r in reports if r.get("autotunes")]
    if not logs:
        return None
    choices: dict[str, int] = {}
    precompile: dict[str, float] = {}
    wins: dict[str, int] = {}
    losses: list[float] = []
    saved = 0.0
    for log in logs:
        for entry in log:
            timed = [c for c in entry["choices"] if c["ms"] is not None]
            for c in entry["choices"]:
                choices[c["kind"]] = choices.get(c["kind"], 0) + 1
                precompile[c["kind"]] = precompile.get(c["kind"], 0.0) + c["precompile_s"]
            if not timed:
                continue
            best = min(timed, key=lambda c: c["ms"])
            wins[best["kind"]] = wins.get(best["kind"], 0) + 1
            kept = [c["ms"] for c in timed if c["kind"] != "triton"]
            if any(c["kind"] == "cutedsl" for c in timed) and kept:
                losses.append(min(kept) / best["ms"] if best["ms"] > 0 else 1.0)
                saved += sum(c["precompile_s"] for c in entry["choices"] if c["kind"] == "triton")
    per = len(logs)
    return {
        "compiles": per,
        "autotunes_per_compile": round(sum(len(log) for log in logs) / per, 1),
        "choices_per_compile": {k: round(v / per, 1) for k, v in sorted(choices.items())},
        "precompile_s_per_compile": {k: round(v / per, 2) for k, v in sorted(precompile.items())},
        "wins": dict(sorted(wins.items())),
        "without_triton": {
            "autotunes": len(losses),
            "slowdown_geomean": geomean_or_none(losses),
            "slowdown_max": round(max(losses), 4) if losses else None,
            "precompile_s_saved_per_compile": round(saved / per, 2),
        },
    }


def row_summary(name: str, runs: dict[str, list[dict]]) -> dict:
    """One row of the result: every report, each side's medians, and the ratios."""
    runs = {side: runs[side] for side in SIDES if runs.get(side)}
    compile_s = {side: median_of(reports, "compile_s") for side, reports in runs.items()}
    return {
        "row": name,
        "compile_ratio": ratio(compile_s.get(OURS), compile_s.get(FAIR_STOCK)),
        "compile_ratio_less_coordesc": ratio(
            median_less_coordesc(runs.get(OURS, [])), median_less_coordesc(runs.get(FAIR_STOCK, []))
        ),
        "compile_ratio_warm_kernels": ratio(compile_s.get(OURS_WARM), compile_s.get(FAIR_STOCK)),
        "compile_ratio_vs_default_stock": ratio(compile_s.get(OURS), compile_s.get(DEFAULT_STOCK)),
        "process_ratio": ratio(*(median_of(runs.get(s, []), "process_s") for s in (OURS, FAIR_STOCK))),
        # Stock's step time over ours': below 1, ours' compile chose slower kernels.
        "runtime_ratio": ratio(*(median_of(runs.get(s, []), "step_ms", 4) for s in (FAIR_STOCK, OURS))),
        "median_step_ms": {side: median_of(reports, "step_ms", 4) for side, reports in runs.items()},
        # The same over the steps' kernel time alone: what the selection chose, without the host.
        "runtime_gpu_ratio": ratio(*(median_of(runs.get(s, []), "step_gpu_ms", 4) for s in (FAIR_STOCK, OURS))),
        "median_step_gpu_ms": {side: median_of(reports, "step_gpu_ms", 4) for side, reports in runs.items()},
        "compiles": {side: len(reports) for side, reports in runs.items()},
        "median_compile_s": compile_s,
        "median_process_s": {side: median_of(reports, "process_s") for side, reports in runs.items()},
        "median_cutedsl_builds": {side: median_of(reports, "cutedsl_builds") for side, reports in runs.items()},
        "phases_median_s": {side: phase_medians(reports) for side, reports in runs.items()},
        "named_phases_median_s": {side: named_phase_medians(reports) for side, reports in runs.items()},
        "autotune": {side: autotune_summary(reports) for side, reports in runs.items()},
        "runs": runs,
    }


def summarize(rows: list[dict], info: dict) -> dict:
    """The result file: the summary ratios over the rows that have them, then the rows."""

    def of(key: str) -> list[float]:
        return [r[key] for r in rows if r.get(key) is not None]

    cold = of("compile_ratio")
    return {
        **info,
        "compile_ratio_geomean": geomean_or_none(cold),
        "compile_ratio_max": max(cold) if cold else None,
        "compile_ratio_less_coordesc_geomean": geomean_or_none(of("compile_ratio_less_coordesc")),
        "compile_ratio_warm_kernels_geomean": geomean_or_none(of("compile_ratio_warm_kernels")),
        "compile_ratio_vs_default_stock_geomean": geomean_or_none(of("compile_ratio_vs_default_stock")),
        "process_ratio_geomean": geomean_or_none(of("process_ratio")),
        "runtime_ratio_geomean": geomean_or_none(of("runtime_ratio")),
        "runtime_gpu_ratio_geomean": geomean_or_none(of("runtime_gpu_ratio")),
        "rows": rows,
    }


def runs_of(result: dict | None) -> dict[str, dict[str, list]]:
    """An earlier result's reports: {row: {side: [report]}}."""
    rows = (result or {}).get("rows", [])
    return {r["row"]: {side: list(reports) for side, reports in r["runs"].items()} for r in rows}


def print_row(row: dict) -> None:
    """A row's per-phase table, medians of its compiles, one column per side."""
    sides = list(row["runs"])
    print(
        f"\n{row['row']}: compile ratio {row['compile_ratio']} (ours / fair stock), "
        f"warm kernels {row['compile_ratio_warm_kernels']}, compiles {row['compiles']}"
    )
    print(f"{'median seconds':<48}" + "".join(f"{side:>18}" for side in sides))
    lines = [
        ("first call (compile_s)", row["median_compile_s"]),
        ("process (process_s)", row["median_process_s"]),
        ("CuteDSL kernels built", row["median_cutedsl_builds"]),
    ]
    named = row.get("named_phases_median_s", {})
    lines += [(label, {s: named.get(s, {}).get(label) for s in sides}) for label in named.get(sides[0], {})]
    phases = row["phases_median_s"]
    names = {p for side in sides for p in phases[side]}
    longest = sorted(names, key=lambda p: -max(phases[s].get(p, 0) for s in sides))
    lines += [(p, {s: phases[s].get(p, 0.0) for s in sides}) for p in longest[:TABLE_PHASES]]
    for label, values in lines:
        cells = "".join(f"{'-' if values.get(s) is None else values[s]:>18}" for s in sides)
        print(f"{label[:47]:<48}{cells}")
    for side, summary in row.get("autotune", {}).items():
        if summary:
            print(
                f"  {side} autotuning per compile: choices {summary['choices_per_compile']}, precompile s "
                f"{summary['precompile_s_per_compile']}, wins {summary['wins']}; without Triton beside ours "
                f"{summary['without_triton']}"
            )


# ---------------------------------------------------------------------------------------
# The run


class Caches:
    """The children's cache directories under one work directory: fresh ones per child,
    and for each row the kernel cache of one cold compile of ours (the warm-kernel
    compiles' source)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.kernels: dict[str, str] = {}

    def fresh(self) -> dict[str, str]:
        return {key: tempfile.mkdtemp(prefix=key.lower() + "-", dir=self.root) for key in CACHE_DIRS}

    def done(self, bid: BlockId, side: str, dirs: dict[str, str]) -> bool:
        """Remove a finished child's directories, keeping a first cold kernel cache of ours;
        whether it kept one."""
        kept = False
        for key, path in dirs.items():
            if key == KERNEL_CACHE and side == OURS and bid.name not in self.kernels:
                self.kernels[bid.name] = path
                kept = True
            else:
                shutil.rmtree(path, ignore_errors=True)
        return kept

    def load(self, archive: str) -> list[str]:
        """The kept kernel caches of an earlier run's ``archive`` (one folder per row);
        the rows loaded."""
        if not os.path.exists(archive):
            return []
        kept = tempfile.mkdtemp(prefix="kept-", dir=self.root)
        with tarfile.open(archive) as tar:
            # The data filter (Python 3.12, backported to 3.10.12) refuses links and paths
            # out of ``kept``; an interpreter without it extracts as before.
            tar.extractall(kept, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        for name in sorted(os.listdir(kept)):
            self.kernels.setdefault(name, os.path.join(kept, name))
        return sorted(self.kernels)

    def save(self, archive: str) -> None:
        """Every kept kernel cache into ``archive``, packed under another name and moved, so
        that a run killed while packing leaves the last whole archive."""
        with tarfile.open(archive + ".part", "w:xz") as tar:
            for name, path in sorted(self.kernels.items()):
                tar.add(path, arcname=name)
        os.replace(archive + ".part", archive)

    def warm(self, others: Iterable[str]) -> dict[str, str]:
        """Fresh directories, the kernel cache holding the kernels ours built for ``others``."""
        dirs = self.fresh()
        for name in others:
            shutil.copytree(self.kernels[name], dirs[KERNEL_CACHE], dirs_exist_ok=True)
        return dirs


def kernels_archive(result_path: str) -> str:
    """Where the kernel caches kept for warm-kernel compiles travel beside a result file."""
    return result_path + ".kernels.tar.xz"


def run(args: argparse.Namespace, info: dict) -> dict:
    """Every compile asked for that ``args.resume``'s file lacks, the result rewritten
    after each."""
    prior = None
    if args.resume and os.path.exists(args.resume):
        with open(args.resume) as f:
            prior = json.load(f)
    runs = runs_of(prior)
    for reports in runs.values():
        for side in args.redo:
            reports.pop(side, None)
    sides = [FAIR_STOCK, OURS] + [DEFAULT_STOCK] * args.default_stock
    warm = args.warm_kernels and len(args.rows) > 1
    plan = pending(full_plan(args.rows, args.pairs, sides, warm), runs)
    if args.warm_kernels and len(args.rows) < 2:
        print("--warm-kernels needs two rows or more (the other rows fill the kernel cache): skipped")
    names = [bid.name for bid in args.rows]
    order = names + [name for name in runs if name not in names]

    def result() -> dict:
        rows = [row_summary(name, runs[name]) for name in order if name in runs]
        # The pairs asked of the whole run: a call resumed with fewer (to reach the warm-kernel
        # compiles first) does not lower them.
        pairs = max(args.pairs, (prior or {}).get("pairs", 0))
        return summarize(rows, {**info, "mode": args.mode, "pairs": pairs})

    start, longest, left = time.perf_counter(), 0.0, []
    with (
        tempfile.TemporaryDirectory(prefix="compile-bench-", ignore_cleanup_errors=True) as root,
        zygote.serving(args.zygote),
    ):
        caches = Caches(root)
        if args.resume and OURS not in args.redo:
            loaded = caches.load(kernels_archive(args.resume))
            if loaded:
                print(f"== kept kernel caches of ours loaded: {', '.join(loaded)}", flush=True)
                source, target = kernels_archive(args.resume), args.json and kernels_archive(args.json)
                if target and os.path.abspath(target) != os.path.abspath(source):
                    shutil.copyfile(source, target)  # the next call resumes from this run's file

        def finished(bid: BlockId, side: str, dirs: dict[str, str]) -> None:
            if caches.done(bid, side, dirs) and args.json:
                caches.save(kernels_archive(args.json))

        for bid, side, i in plan:
            if args.budget is not None and time.perf_counter() - start + longest > args.budget:
                left.append(f"{bid.name} {side} #{i + 1}")
                continue
            t0 = time.perf_counter()
            if side == OURS_WARM:
                others = [o for o in args.rows if o != bid]
                for other in others:  # a row whose cold compile of ours ran in an earlier call
                    if other.name not in caches.kernels:
                        dirs = caches.fresh()
                        print(f"== filling the kernel cache: {other.name} ours", flush=True)
                        run_child(other, args.mode, OURS, dirs, args.timeout)
                        finished(other, OURS, dirs)
                dirs = caches.warm(o.name for o in others)
            else:
                dirs = caches.fresh()
            print(f"== {bid.name} {side} #{i + 1}", flush=True)
            report = run_child(bid, args.mode, side, dirs, args.timeout, args.sample)
            finished(bid, side, dirs)
            longest = max(longest, time.perf_counter() - t0)
            runs.setdefault(bid.name, {}).setdefault(side, []).append(report)
            print(
                f"   first call {report['compile_s']} s, process {report['process_s']} s, "
                f"{report['cutedsl_builds']} CuteDSL kernels built",
                flush=True,
            )
            if side == OURS and not report["cutedsl_builds"]:
                print("   ours built no CuteDSL kernel: this compile measured nothing of ours", flush=True)
            write_json(result(), args.json)
    final = result()
    for row in final["rows"]:
        print_row(row)
    return finish(final, left, args.json)


# ---------------------------------------------------------------------------------------
# Command line


def parse_rows(text: str) -> list[BlockId]:
    """``--rows``: comma-separated FAMILY:SIZE (inference) or FAMILY:SIZE:RUN."""
    rows = []
    for token in filter(None, (t.strip() for t in text.split(","))):
        parts = token.split(":")
        try:
            bid = BlockId.parse(":".join(parts + ["inference"] if len(parts) == 2 else parts))
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        if bid.run == "train" and not FAMILIES[bid.family].train:
            trained = ", ".join(f for f in FAMILIES if FAMILIES[f].train)
            raise argparse.ArgumentTypeError(f"{token}: the suite trains only {trained}")
        rows.append(bid)
    if not rows:
        raise argparse.ArgumentTypeError("no row named")
    return list(dict.fromkeys(rows))


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive whole number")
    return value


def add_run_options(ap: argparse.ArgumentParser, pairs: int, pairs_help: str) -> None:
    """The options of a run of fresh-process compiles (this benchmark's and ``warm_start``'s):
    which rows, how many of each, in which mode, where the result goes, and the limits."""
    ap.add_argument(
        "--rows",
        type=parse_rows,
        default=list(DEFAULT_ROWS),
        help="comma-separated FAMILY:SIZE (inference) or FAMILY:SIZE:RUN (default: "
        f"{','.join(b.name for b in DEFAULT_ROWS)})",
    )
    ap.add_argument("--pairs", type=positive_int, default=pairs, help=f"{pairs_help} (default: %(default)s)")
    ap.add_argument(
        "--mode", choices=models.MODES, default=models.CUDAGRAPHS, help="torch.compile mode (default: %(default)s)"
    )
    ap.add_argument("--json", metavar="PATH", default=None, help="result file, rewritten after every compile")
    ap.add_argument(
        "--resume",
        metavar="PATH",
        help="an earlier result file (if it exists): its compiles are kept and not run again",
    )
    ap.add_argument(
        "--budget",
        type=float,
        metavar="SECONDS",
        help="start no compile that would likely end later than SECONDS from the start (expected: "
        "the longest child so far); the ones left are listed for a --resume run",
    )
    ap.add_argument("--timeout", type=float, default=900, help="seconds per child process (default: %(default)s)")
    ap.add_argument(
        "--no-zygote",
        dest="zygote",
        action="store_false",
        help="start every child as a new process, not forked from one that has imported torch and transformers",
    )


def finish(final: dict, left: list[str], path: str | None) -> dict:
    """A run's end: its summary printed, what it did not start listed, the result written."""
    print(json.dumps({k: v for k, v in final.items() if k != "rows"}))
    if left:
        print(f"not started (run again with --resume): {', '.join(left)}")
    write_json(final, path)
    return final


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_options(ap, 2, "compiles of each side per row")
    ap.add_argument(
        "--default-stock",
        action="store_true",
        help="also stock as a user starts it (Triton's bundled ptxas in the compiling process)",
    )
    ap.add_argument(
        "--warm-kernels",
        action="store_true",
        help="also ours with the kernel cache holding the other rows' kernels, Inductor's and Triton's caches empty",
    )
    ap.add_argument(
        "--sample",
        metavar="PATH",
        help="sample each child's compiling thread (wall_sampler): reports appended to PATH, folded "
        "stacks to PATH.folded.gz",
    )
    ap.add_argument(
        "--redo",
        type=models.comma_choices(SIDES, "side"),
        default=[],
        metavar="SIDES",
        help="with --resume: compile these sides again (after a change to ours: ours,ours_warm_kernels)",
    )
    ap.add_argument("--child", metavar="FAMILY:SIZE:RUN:MODE:SIDE", help=argparse.SUPPRESS)
    ap.add_argument("--artifacts-in", metavar="PATH", help=argparse.SUPPRESS)
    ap.add_argument("--artifacts-out", metavar="PATH", help=argparse.SUPPRESS)
    return ap


def main(argv: list[str] | None = None) -> dict | None:
    args = parser().parse_args(argv)
    if args.child:
        print_report_and_exit(child(args.child, args.sample, args.artifacts_in, args.artifacts_out))
    import torch

    if not torch.cuda.is_available():
        print("benchmarks.compile needs a CUDA GPU: nothing measured")
        return None
    return run(args, run_info())


if __name__ == "__main__":
    main()
