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
cannot win. The re-timed choices then take the side-by-side ratios, anchored at the
fastest other's time: the fastest of them side by side reads that time. Our other
candidates keep their order among themselves (one factor for all of ours), but for a
stream-K one under CUDA graphs, re-timed too (``_replayed_lighter``); others not
re-timed keep Inductor's times, which are slower than the anchor.

Side by side, each runs as a CUDA graph replay of its benchmark run function, timed
by do_bench's median. Inductor's benchmarker would time the host too: it records its
start event and then calls the run function, and its L2 flush is short, so a launch
path slower than the flush shows up as kernel time.

A compile without CUDA graphs launches each kernel from the host on every call, and a
step of short GEMMs is then paced by the host: a choice costs the step the larger of
its kernel's time and its launch's host time. With ``config.host_paced`` such a
compile also times each re-timed choice's launch path (``timing.enqueue_ms``) and
ranks them by that larger figure: a cuBLASLt ``addmm`` costs several times the host time
of a Triton or CuteDSL launch (docs/findings.md).
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

from .. import config
from ..compat import autotune, settings
from ..errors import fallback
from ..timing import enqueue_ms, measure_ms, side_by_side
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
    host = _host_ms(contenders, run_fn) if config.host_paced and not settings.compile_uses_cudagraphs() else {}
    paced = {i: max(side[i], host.get(i, 0.0)) for i in side}
    anchor = min(paced[i] for i in range(len(close)))
    retimed = {c: best * paced[i] / anchor for i, c in enumerate(contenders)}
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


def _host_ms(contenders: list, run_fn: Callable[[Any], Callable[[], Any]]) -> dict[int, float]:
    """Each contender's host milliseconds per launch (median of ``ROUNDS``), by index;
    none for one whose figure is not pure (the GPU caught up) or that fails."""
    out: dict[int, float] = {}
    t0 = time.perf_counter()
    try:
        for i, c in enumerate(contenders):
            run = run_fn(c)
            figures = [enqueue_ms(run) for _ in range(ROUNDS)]
            pure = [ms for ms, ok in figures if ok]
            if pure:
                out[i] = statistics.median_high(pure)
    except Exception as exc:  # the GPU times stand alone
        log.warning("host launch timing failed: %s", exc)
        return {}
    finally:
        stats["measure_s"] += time.perf_counter() - t0
    return out
