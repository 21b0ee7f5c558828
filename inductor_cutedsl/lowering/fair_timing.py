"""Autotuning times for our candidates that compare fairly with the others'.

Inductor times a GEMM's choices one after another: ATen first, then Triton, ours
last, keeping each choice's fastest repetition after an L2 flush. A GPU under a dense
GEMM heats and lowers its clock within that sequence, so a choice timed early reads
fast; and on a GEMM of a few microseconds the fastest repetition of one choice against
another's is a coin toss between configs that differ by a few percent
(docs/findings.md holds the measurements).

So after Inductor's pass the close calls are timed again, side by side: our fastest
candidate, the fastest other choices (those within ``CLOSE`` and ``SLACK_MS`` of the
fastest other, at most ``OTHERS``) and the fastest ATen choice even well behind
(within ``ATEN_FAR``), in interleaved rounds. ATen so: Inductor's pass times its host
launch path too (see below), which on a GEMM of a few tens of microseconds can read
cuBLAS far slower than it runs (docs/findings.md), and a choice never re-timed
cannot win. The re-timed choices then take the side-by-side ratios to one of them, the
anchor, which keeps Inductor's figure: the fastest Triton template side by side where
one was re-timed, else the fastest choice side by side, which reads the fastest other's
figure; that is also as slow as the fastest re-timed choice may read (``_scale``). A
Triton template, because Inductor's epilogue-fusion benchmark times a fused
template as its pass timed the unfused ones and compares it with the fastest choice's
figure plus the epilogue kernel's; anchored at the fastest choice, a cuBLAS GEMM that
ran in two thirds of the fastest template's time took that template's figure, the
unfused way read slow, and a fused template twice as slow as cuBLAS and the epilogue
kernel together won (docs/findings.md, Fused epilogues). Our other candidates keep
their order among themselves (one factor for all of ours), but for a stream-K one under
CUDA graphs, re-timed too (``_replayed_lighter``); others not re-timed keep Inductor's
times.

Side by side, each runs as a CUDA graph replay of its benchmark run function, timed
by do_bench's median. Inductor's benchmarker would time the host too: it records its
start event and then calls the run function, and its L2 flush is short, so a launch
path slower than the flush shows up as kernel time.

A compile without CUDA graphs launches each kernel from the host on every call. Where
the step's launches take longer on the host than its kernels on the GPU (a few hundred
tokens), each launch's host time is what the step pays, and the GPU time is hidden;
where the GPU sets the pace, the other way round. A GEMM's autotuning cannot tell which
holds for its step, so with ``config.host_paced`` (``host_paced()``) such a compile also
times each re-timed choice's launch path (``timing.enqueue_each_ms``) and ranks them by the
sum of their host and GPU times, which is what Inductor's own pass roughly charges: a
cuBLASLt ``addmm`` costs several times the host time of a Triton or CuteDSL launch
(docs/findings.md), and ranked by GPU time alone it won GEMMs that host-bound steps
then paid for. A choice whose host time could not be taken leaves every contender at
its GPU time: charging only the others would favour it. Only short GEMMs are charged
(``charges_launches``): a kernel longer than any launch path keeps the GPU busy while
the host enqueues the next, so its step is paced by the GPU, and timing launches there
would cost compile time for nothing.

The timings land in Inductor's autotune cache keyed by each choice's ``hash_key``, and
one process may compile a graph with CUDA graphs and again without: ours' key carries
the regime (``regime()``), so that neither compile reuses the other's ranking.
"""

from __future__ import annotations

import contextlib
import logging
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from .. import config
from ..compat import autotune, ir_access, settings
from ..errors import fallback
from ..timing import enqueue_each_ms, measure_ms, rotations, side_by_side
from .template import GemmCaller

log = logging.getLogger("inductor_cutedsl.lowering")

#: Interleaved rounds: compile time added per distinct GEMM shape (about ROUNDS *
#: contenders * 2 * ``measure_ms``: replays and as long a warm-up), so kept small.
ROUNDS = 3
#: Other choices within this factor of the fastest other, plus ``SLACK_MS``, are
#: re-timed with ours. The slack: on a GEMM of a few microseconds Inductor's figures are
#: mostly its own overhead (an L2 flush and events around a host launch), several times
#: the kernel, and their order among close configs is noise.
CLOSE = 1.10
SLACK_MS = 0.003
#: At most this many other choices are re-timed (the fastest ones), besides ATen's.
OTHERS = 4
#: ATen's choice is re-timed if Inductor's pass read it within this factor of the
#: fastest other (it reads a short cuBLAS call up to ~1.8x slow).
ATEN_FAR = 2.0
#: Milliseconds of replays per measurement, at most (``timing.measure_ms`` sets it
#: below that for shorter GEMMs): a stable median needs a few dozen replays of the
#: slowest GEMMs re-timed here.
REP_MS = 20

#: One record per side-by-side re-timing in this process: {"inductor_ms": {choice:
#: ms}, "side_ms": {choice: ms}, "ours": our candidate's name} (for reports).
decisions: list[dict] = []
#: Wall seconds of this process's re-timings (compile time).
stats = {"measure_s": 0.0}


def rescale(timings: dict[Any, float], run_fn: Callable[[Any], Callable[[], Any]]) -> dict[Any, float]:
    """``timings`` with our candidates and the close other choices put on one scale,
    by timing them side by side (``run_fn(choice)`` runs a choice once); Inductor's own
    timings where that fails (``errors.fallback``)."""
    try:
        return _rescale(timings, run_fn)
    except Exception as exc:
        fallback("candidates", "fair timing", exc, log)
        return timings


def _rescale(timings: dict[Any, float], run_fn: Callable[[Any], Callable[[], Any]]) -> dict[Any, float]:
    finite = {c: t for c, t in timings.items() if math.isfinite(t)}
    ours = {c: t for c, t in finite.items() if isinstance(c, GemmCaller)}
    others = {c: t for c, t in finite.items() if c not in ours}
    if not ours or not others:
        return timings
    mine = min(ours, key=ours.__getitem__)
    replayed = _replayed_lighter(ours, mine)
    ranked = sorted(others, key=others.__getitem__)
    best = others[ranked[0]]
    close = [c for c in ranked[:OTHERS] if others[c] <= best * CLOSE + SLACK_MS]
    aten = next((c for c in ranked if autotune.is_extern_caller(c)), None)
    if aten is not None and aten not in close and others[aten] <= best * ATEN_FAR:
        close.append(aten)
    contenders = [*close, mine, *replayed]
    t0 = time.perf_counter()
    try:
        # Inductor's figure for the fastest other overestimates its kernel: a bound.
        ms = measure_ms(best, REP_MS)
        makers = {i: (lambda c=c: run_fn(c)) for i, c in enumerate(contenders)}
        side = side_by_side(makers, ROUNDS, rep=ms, warmup=ms)
        failed = [contenders[i].name for i, t in side.items() if not math.isfinite(t)]
        if failed:
            raise RuntimeError(f"{', '.join(failed)} did not run")
    except Exception as exc:  # the first pass timed them all: keep its figures
        log.warning("side-by-side timing of %s against %s failed: %s", mine.name, ranked[0].name, exc)
        return timings
    finally:
        stats["measure_s"] += time.perf_counter() - t0
    host = launch_charges(makers, side)
    paced = {i: side[i] + host.get(i, 0.0) for i in side}
    factor = _scale(close, paced, others, best)
    retimed = {c: factor * paced[i] for i, c in enumerate(contenders)}
    scale = retimed[mine] / ours[mine]
    decisions.append(
        {
            "ours": mine.name,
            "ours_configs": {c.name: c.gemm_config.name() for c in (mine, *replayed)},
            "inductor_ms": {c.name: round(finite[c], 4) for c in contenders},
            "side_ms": {c.name: round(side[i], 4) for i, c in enumerate(contenders)},
            **({"host_ms": {c.name: round(host[i], 4) for i, c in enumerate(contenders) if i in host}} if host else {}),
        }
    )
    log.info(
        "%s timed %.4f ms after %s; side by side (ms) %s, so %.4f ms",
        mine.name,
        ours[mine],
        ", ".join(f"{c.name} {others[c]:.4f}" for c in close),
        ", ".join(f"{c.name} {side[i]:.4f}" for i, c in enumerate(contenders)),
        retimed[mine],
    )
    out = {c: t * scale if c in ours else t for c, t in timings.items()}
    out.update({c: retimed[c] for c in (*close, *replayed)})
    return out


def _scale(close: list, paced: dict[int, float], others: dict[Any, float], best: float) -> float:
    """Milliseconds of Inductor's pass per millisecond side by side (``paced``, by index in
    ``close``): the fastest Triton template side by side keeps its own figure (module
    doc), but the fastest of ``close`` side by side reads no more than ``best``, the
    fastest other's figure, which it does where no template was re-timed. So no choice
    left out of the re-timing (each read at or above that figure) can win unmeasured."""
    fastest = min(paced[i] for i in range(len(close)))
    factor = best / fastest
    templates = [i for i, c in enumerate(close) if ir_access.is_triton_template_caller(c)]
    if templates:
        i = min(templates, key=paced.__getitem__)
        factor = min(factor, others[close[i]] / paced[i])
    return factor


def host_paced() -> bool:
    """Whether this compile ranks re-timed choices by host and GPU time (module doc)."""
    return config.host_paced and not settings.compile_uses_cudagraphs()


#: A GEMM whose fastest way runs longer than this on the GPU is not charged its launches:
#: the longest launch path measured (cuBLASLt's ``addmm``, docs/findings.md, Host time)
#: ends well before such a kernel does, so the GPU, not the host, paces its step.
HOST_BOUND_MS = 0.1


def charges_launches(fastest_gpu_ms: float) -> bool:
    """Whether a decision whose fastest contender runs ``fastest_gpu_ms`` on the GPU adds
    each contender's launch host time (``host_ms``) to its GPU time."""
    return host_paced() and fastest_gpu_ms < HOST_BOUND_MS


def launch_charges(
    makers: dict[Any, Callable[..., Callable[[], Any]]], gpu_ms: dict[Any, float], device: Any = None
) -> dict[Any, float]:
    """What host pacing adds to each run's GPU time ``gpu_ms[key]``: the host time of its
    launch (``host_ms``, on ``device`` where given), for each run that ran; empty where
    launches are not charged (``charges_launches``: none without host pacing, none for
    a decision whose fastest run is long)."""
    ran = {key: make for key, make in makers.items() if math.isfinite(gpu_ms.get(key, math.inf))}
    if not ran or not charges_launches(min(gpu_ms[key] for key in ran)):
        return {}
    with torch.cuda.device(device) if device is not None else contextlib.nullcontext():
        return host_ms(ran)


def regime() -> str:
    """How this compile's autotunings time choices: a part of ours' cache keys."""
    if settings.compile_uses_cudagraphs():
        return "replayed"
    return "host-paced" if config.host_paced else "launched"


def _replayed_lighter(ours: dict[Any, float], mine: Any) -> list:
    """Under CUDA graphs, our fastest stream-K candidate besides ``mine``, to be re-timed
    too. Inductor's pass times a launch's host path as kernel time (above), and a
    stream-K launch allocates its scratch and draws a token, host work a graph's replay
    skips: in the decode GEMMs' autotunings it read 20-30 µs slower than our other
    tiles, so ranked by that pass it never reached the side-by-side timing, where each
    choice runs as a replay."""
    if not settings.compile_uses_cudagraphs():
        return []
    streamed = [c for c in ours if c is not mine and c.gemm_config.stream_k]
    return [min(streamed, key=ours.__getitem__)] if streamed else []


def host_ms(makers: dict[Any, Callable[..., Callable[[], Any]]]) -> dict[Any, float]:
    """Host milliseconds per launch of each run (``makers[key]()`` makes one), the median
    of ``ROUNDS`` interleaved rounds, all runs of a round behind one GPU sleep
    (``timing.enqueue_each_ms``), by key. A round the GPU caught up with is dropped; empty
    if every round was, or a run fails: charging only some runs their launches would
    favour the others."""
    t0 = time.perf_counter()
    try:
        runs = {key: make() for key, make in makers.items()}
        figures: dict[Any, list[float]] = {key: [] for key in runs}
        for order in rotations(list(runs), ROUNDS):
            got = enqueue_each_ms({key: runs[key] for key in order})
            for key, ms in (got or {}).items():
                figures[key].append(ms)
        if not all(figures.values()):
            log.info("no pure host time for %s: ranking by GPU time", ", ".join(map(str, runs)))
            return {}
        return {key: statistics.median_high(ms) for key, ms in figures.items()}
    except Exception as exc:  # the GPU times stand alone
        log.warning("host launch timing failed: %s", exc)
        return {}
    finally:
        stats["measure_s"] += time.perf_counter() - t0
