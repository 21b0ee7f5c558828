"""LLM decode: one token per step against a static KV cache, under CUDA graphs.

    python -m benchmarks.decode --json benchmarks/results/h200-decode.json
    python -m benchmarks.decode --models llama --batches 1,16 --layers 4

The step that dominates serving: ``transformers``' causal-LM classes (Llama 3.2 1B and
Qwen2 1.5B dimensions, ``--layers`` decoder layers, their LM head, random weights) with
a ``StaticCache``, one new token per sequence per step at a fixed context length, the
step compiled with max-autotune (CUDA graphs) as ``generate`` with a static cache
compiles it. Per model and batch, stock and ours are compiled in one process, each with
its own cache filled by the same prompt, and timed interleaved:

* ``token_ms``: per-step latency (``GpuProbe.wall_ms``: medians over interleaved rounds,
  host included), and ``decode_speedup`` = stock / ours;
* the GEMMs' bandwidth: the bytes the step's Linear layers must move at least (weights,
  inputs and outputs once each) over the time of the step's GEMM kernels under the
  profiler, as a fraction of the device's measured copy bandwidth
  (``gemm_bandwidth_fraction``); with the kernels themselves (``gemm_kernels``). At
  M = batch rows, a GEMM's cost is reading its weight: this is the bound that counts.
  At batch 1 there is no fraction: max-autotune's coordinate-descent tuning makes
  Inductor decompose a one-row mm into a reduction, on both sides;
* ``other_kernels``: per side, the step's ``OTHER_KERNELS`` costliest kernels that are
  not GEMMs (attention, norms, the cache update), the part of the step no GEMM changes;
* ``decode_speedup_bound``: the most any GEMM can give the step, stock's GPU time over
  what it would be with its GEMM kernels at the copy bandwidth and every other kernel as
  it was (``speedup_bound``). Attention over the cache, norms and the cache update are
  not GEMMs: where they hold most of the step, no GEMM reaches a large speed-up;
* ``cudagraph_skips``: graphs that cudagraph trees refused to record, per side (0 for a
  step timed as served);
* ``gemm_decisions``: per side of ours, each GEMM autotuning our candidates were re-timed
  in side by side (``fair_timing.decisions``: our candidates' configs, Inductor's and
  the side-by-side times), which says whether a stream-K tile was timed as replayed;
* with ``--sites``, every GEMM's bandwidth (``gemm_sites``): each Linear shape of the
  model alone, stock against ours (``measure_site``), at the row's batch. The step's
  own figure above is the GEMMs' total; this one says which of them leaves the
  bandwidth unused;
* ``copy_floor_us`` and ``copy_floor_fraction``: the step's Linear layers' bytes moved
  by device copies of each layer's own size (``copy_floor``), their µs and the bandwidth
  fraction they reach: the bound on ``gemm_bandwidth_fraction``, which counts against a
  1 GB copy (a kernel moving a few MB spends much of its time starting and draining);
  ``decode_speedup_copy_floor_bound``: stock's step with its GEMMs that fast;
* with ``--programmatic``, a third side timed with the two: ours compiled with
  ``config.programmatic_launch`` (each GEMM starts as the kernel before it ends and
  prefetches its weight meanwhile), and ``programmatic_speedup`` = ours / that side.
  Its GEMM kernels' profiled time includes their wait for the kernel before them, so
  its bandwidth fraction understates it: its token time is the figure.

Summary: ``decode_speedup_geomean``, ``decode_speedup_min``, ``decode_speedup_bound_geomean``
``gemm_bandwidth_fraction_geomean`` (ours), ``copy_floor_fraction_geomean`` (its
bound) and ``decode_speedup_copy_floor_bound_geomean``; with ``--sites``,
``site_bandwidth_fraction_geomean`` per side; with ``--programmatic``,
``programmatic_speedup_geomean`` and ``programmatic_decode_speedup_geomean`` (stock over
the third side). Rows are written as they finish; ``--resume``
goes on from an earlier file (its failed rows are measured again) and ``--budget`` starts
no row unlikely to end in time.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import os
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from .harness import (
    geomean_or_none,
    plain,
    ratio,
    rel_err,
    run_info,
    stamped,
    stock_as_fair_stock,
    suite_device,
    write_json,
)
from .models import BACKENDS, CUDAGRAPHS, GpuProbe, backend, comma_choices, compile_block, gemm_kernels, release


@dataclasses.dataclass(frozen=True)
class DecodeModel:
    causal_lm: str  # the transformers class
    config: str
    settings: tuple[tuple[str, Any], ...]


MODELS: dict[str, DecodeModel] = {
    # Llama 3.2 1B
    "llama": DecodeModel(
        "LlamaForCausalLM",
        "LlamaConfig",
        (
            ("hidden_size", 2048),
            ("intermediate_size", 8192),
            ("num_attention_heads", 32),
            ("num_key_value_heads", 8),
            ("vocab_size", 128256),
            ("tie_word_embeddings", True),
        ),
    ),
    # Qwen2 1.5B
    "qwen2": DecodeModel(
        "Qwen2ForCausalLM",
        "Qwen2Config",
        (
            ("hidden_size", 1536),
            ("intermediate_size", 8960),
            ("num_attention_heads", 12),
            ("num_key_value_heads", 2),
            ("vocab_size", 151936),
            ("tie_word_embeddings", True),
        ),
    ),
}
BATCHES = (1, 4, 16, 64)
CONTEXT = 1024  # tokens already in the cache at every timed step
#: Kernels of a step besides its GEMMs that a row lists per side (``other_kernels``).
OTHER_KERNELS = 8
#: The third side of ``--programmatic``: ours with ``config.programmatic_launch`` on.
PROGRAMMATIC = "ours_programmatic"
TOLERANCE = 2e-2  # logits of one step, ours against stock (bf16 rounding of two GEMM orders)


def build(
    name: str,
    layers: int,
    device: str = "cuda",
    dtype: torch.dtype = torch.bfloat16,
    context: int = CONTEXT,
    overrides: dict | None = None,
) -> nn.Module:
    """The causal LM with its class's initialisation, seeded; ``overrides`` replace
    config arguments (the CPU tests' tiny models)."""
    import transformers

    m = MODELS[name]
    settings = {**dict(m.settings), **(overrides or {})}
    config = getattr(transformers, m.config)(**settings, num_hidden_layers=layers, max_position_embeddings=4 * context)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device(device):
        model = getattr(transformers, m.causal_lm)(config)
    return model.to(dtype).eval()


@dataclasses.dataclass(frozen=True)
class Site:
    """The model's Linear layers of one shape: (``n``, ``k``) weights, a bias or not."""

    n: int
    k: int
    bias: bool
    modules: tuple[str, ...]

    def gemm_bytes(self, rows: int, dtype_bytes: int = 2) -> int:
        """The least bytes one of them moves at ``rows`` rows: its weight (and bias) read
        once, its input read once, its output written once."""
        return (self.n * self.k + rows * (self.n + self.k) + (self.n if self.bias else 0)) * dtype_bytes


#: Bytes a site's step reads before its GEMM (more than four times the H200's 50 MB
#: L2), so that the GEMM reads its weight from HBM, as in a decode step, which streams
#: the whole model's weights.
FLUSH_BYTES = 256 * 2**20


def linear_sites(model: nn.Module) -> list[Site]:
    """The model's Linear layers grouped by shape, in the order first met."""
    groups: dict[tuple[int, int, bool], list[str]] = {}
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear):
            n, k = m.weight.shape
            groups.setdefault((n, k, m.bias is not None), []).append(name)
    return [Site(n, k, bias, tuple(names)) for (n, k, bias), names in groups.items()]


def gemm_bytes(model: nn.Module, rows: int, dtype_bytes: int = 2) -> int:
    """The least bytes the Linear layers of one step move, at ``rows`` rows."""
    return sum(s.gemm_bytes(rows, dtype_bytes) * len(s.modules) for s in linear_sites(model))


@dataclasses.dataclass(frozen=True)
class L2Flush:
    """A read of ``FLUSH_BYTES`` (``run``), and the kernels it runs, which a site's
    figure leaves out (``kernels``: learnt once under the profiler, for every site)."""

    run: Callable[[], object]
    kernels: frozenset[str]


def l2_flush(probe: GpuProbe, device: str = "cuda") -> L2Flush:
    buffer = torch.ones(FLUSH_BYTES // 4, device=device)

    def run() -> torch.Tensor:
        return buffer.sum()

    prof = probe.profile(dict.fromkeys(BACKENDS, run))
    return L2Flush(run, frozenset(k["kernel"] for side in BACKENDS for k in prof[side]["kernels"]))


def copy_floor(model: nn.Module, rows: int, probe: GpuProbe, flush: L2Flush, device: str = "cuda") -> dict[int, float]:
    """Per distinct least-bytes figure of the model's Linear layers at ``rows`` rows
    (``Site.gemm_bytes``), the µs of one device copy moving as many bytes (read and
    write counted, as ``copy_bandwidth`` counts them), each after the L2 flush, as a
    decode step finds its weights: what a kernel of that size takes to stream its bytes,
    its start and drain included. A GEMM moving a few MB cannot reach the bandwidth of a
    1 GB copy; this is the fraction one of its own size reaches (``copy_floor_fraction``)."""
    sizes = sorted({s.gemm_bytes(rows) for s in linear_sites(model)})
    steps = {}
    for nbytes in sizes:
        src = torch.empty(nbytes // 2, dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)

        def step(src=src, dst=dst) -> torch.Tensor:
            flush.run()
            return dst.copy_(src)

        steps[f"copy {nbytes}"] = step
    prof = probe.profile(steps)
    return {
        nbytes: sum(k["us"] for k in prof[f"copy {nbytes}"]["kernels"] if k["kernel"] not in flush.kernels)
        for nbytes in sizes
    }


def measure_site(
    site: Site,
    rows: int,
    probe: GpuProbe,
    copy_bps: float,
    flush: L2Flush,
    *,
    device: str = "cuda",
    dtype: torch.dtype = torch.bfloat16,
    compile_fn=compile_block,
) -> dict:
    """One Linear shape alone at ``rows`` rows, stock against ours: the GEMM compiled
    with max-autotune (CUDA graphs), each step running ``flush`` first so that the GEMM
    finds its weight in HBM, profiled interleaved. Per side: GPU µs of every kernel of
    the step but the flush's (at one row Inductor decomposes the mm into a reduction)
    and the bandwidth fraction of ``site.gemm_bytes``.

    Dynamo is reset first (``release``, which installs our backend again after the
    reset): every site compiles the same function, and past its recompile limit
    dynamo would run later sites' GEMMs eagerly. The row's own step has been measured
    by then."""
    release()
    torch.manual_seed(0)
    x = torch.randn(rows, site.k, device=device, dtype=dtype)
    weight = torch.randn(site.n, site.k, device=device, dtype=dtype) / site.k**0.5
    bias = torch.randn(site.n, device=device, dtype=dtype) if site.bias else None
    # Static, as a model's parameters are: cudagraph trees would otherwise copy the
    # inputs into the graph's own buffers at each replay, and time the copies too.
    for t in (x, weight, *([] if bias is None else [bias])):
        torch._dynamo.mark_static_address(t)

    def gemm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x, weight, bias)

    want = torch.nn.functional.linear(x.double(), weight.double(), None if bias is None else bias.double())
    steps, out = {}, {"n": site.n, "k": site.k, "bias": site.bias, "modules": list(site.modules), "rel_err": {}}
    for side in BACKENDS:
        with backend(side):
            fn = compile_fn(gemm, CUDAGRAPHS)

            def step(fn=fn) -> torch.Tensor:
                flush.run()
                if device == "cuda":
                    torch.compiler.cudagraph_mark_step_begin()
                return fn(x, weight)

            out["rel_err"][side] = rel_err(step(), want)  # compiles
        steps[side] = step
        if not out["rel_err"][side] < TOLERANCE:
            raise AssertionError(f"{site.n}x{site.k} at {rows} rows: {side} against float64 {out['rel_err'][side]:.3e}")
    prof = probe.profile(steps)
    nbytes = site.gemm_bytes(rows, dtype.itemsize)
    out["gemm_bytes"] = nbytes
    kernels = {side: [k for k in prof[side]["kernels"] if k["kernel"] not in flush.kernels] for side in BACKENDS}
    out["us"] = {side: round(sum(k["us"] for k in kernels[side]), 2) for side in BACKENDS}
    out["bandwidth_fraction"] = {
        side: round(nbytes / (us / 1e6) / copy_bps, 4) if us else None for side, us in out["us"].items()
    }
    out["kernels"] = {side: [k["kernel"] for k in kernels[side]] for side in BACKENDS}
    return out


def copy_bandwidth(device: str = "cuda", nbytes: int = 2**30, rounds: int = 20) -> float:
    """The device's copy bandwidth, bytes per second (read and write counted): the
    median of ``rounds`` device-to-device copies of ``nbytes``."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    times = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return 2 * nbytes / statistics.median(times)


def bandwidth_fraction(nbytes: int, kernels: list[dict], copy_bps: float) -> tuple[float | None, float]:
    """(the step's GEMM bytes over its GEMM kernels' time as a fraction of ``copy_bps``,
    those kernels' µs)."""
    us = sum(k["us"] for k in kernels)  # each kernel's µs per step, all its launches
    if not us:
        return None, 0.0
    return round(nbytes / (us / 1e6) / copy_bps, 4), round(us, 2)


#: Seconds a row waits for our speculative builds to end before timing (``GpuProbe.quiet``).
QUIET_S = 60


def speedup_bound(row: dict, copy_bps: float) -> float | None:
    """Stock's step GPU time over the same with its GEMM kernels at ``copy_bps`` (the
    Linear layers' least bytes, ``gemm_bytes``, at the copy bandwidth) and every other
    kernel as it was: the step speed-up of GEMMs that could not be faster. None at one
    row, where Inductor decomposes the mm and the GEMM kernels cover part of the bytes."""
    gpu, gemm = row["gpu_us"]["stock"], row["gemm_us"]["stock"]
    if row["batch"] == 1 or not gemm:
        return None
    floor = min(gemm, row["gemm_bytes"] / copy_bps * 1e6)
    return round(gpu / (gpu - gemm + floor), 4)


def cudagraph_skips() -> int:
    """Inductor's count of graphs that cudagraph trees did not record, this process."""
    from torch._dynamo.utils import counters

    return int(counters["inductor"]["cudagraph_skips"])


def rewind(cache, length: int) -> None:
    """Make the cache's next write land at ``length`` again: every timed step decodes the
    same token at the same context length. (transformers 5's static layers count the
    tokens written, in place, and write at that count, not at ``cache_position``.)"""
    for layer in cache.layers:
        if hasattr(layer, "cumulative_length"):
            layer.cumulative_length.fill_(length)


def decode_step(fn, tokens: torch.Tensor, position: torch.Tensor, cudagraphs: bool):
    def step() -> list[torch.Tensor]:
        if cudagraphs:
            torch.compiler.cudagraph_mark_step_begin()
        with torch.no_grad():
            return [fn(tokens, position)]

    return step


@contextlib.contextmanager
def side_backend(side: str) -> Iterator[None]:
    """``backend(side)``; for ``PROGRAMMATIC`` ours, with ``config.programmatic_launch``
    on while the step compiles (its generated code then launches programmatically)."""
    if side != PROGRAMMATIC:
        with backend(side):
            yield
        return
    from inductor_cutedsl import config

    with backend("ours"), config.patch(programmatic_launch=True):
        yield


def measure(
    name: str,
    batch: int,
    layers: int,
    probe: GpuProbe,
    copy_bps: float,
    *,
    device: str = "cuda",
    context: int = CONTEXT,
    compile_fn=compile_block,
    overrides: dict | None = None,
    sites: bool = False,
    programmatic: bool = False,
) -> dict:
    """One row: stock and ours compiled for this model and batch, each with its own
    static cache filled by the same prompt, then timed and profiled interleaved; with
    ``sites``, each of the model's Linear shapes alone too (``measure_site``); with
    ``programmatic``, a third side (``PROGRAMMATIC``) beside the two."""
    from transformers import StaticCache

    from inductor_cutedsl.lowering import fair_timing

    model = build(name, layers, device, context=context, overrides=overrides)
    config = model.config
    row: dict = {"row": f"{name}:b{batch}", "model": name, "batch": batch, "layers": layers, "context": context}
    prompt = torch.randint(0, config.vocab_size, (batch, context), device=device)
    tokens = torch.randint(0, config.vocab_size, (batch, 1), device=device)
    position = torch.tensor([context], device=device)

    def filled_cache():
        cache = StaticCache(config=config, max_cache_len=2 * context)
        with torch.no_grad():
            model(
                input_ids=prompt,
                past_key_values=cache,
                cache_position=torch.arange(context, device=device),
                logits_to_keep=1,  # the prompt's logits (vocab x tokens x batch) are not wanted
            )
        return cache

    steps, logits = {}, {}
    cudagraphs = device == "cuda"
    sides = (*BACKENDS, PROGRAMMATIC) if programmatic else BACKENDS
    for side in sides:
        cache = filled_cache()

        def forward(tok, pos, cache=cache):
            rewind(cache, context)
            return model(input_ids=tok, past_key_values=cache, cache_position=pos, use_cache=True).logits

        skips = cudagraph_skips()
        retimed = len(fair_timing.decisions)
        with side_backend(side):
            step = decode_step(compile_fn(forward, CUDAGRAPHS), tokens, position, cudagraphs)
            step()  # compiles
            logits[side] = step()[0].float().clone()
        if side != "stock":  # our GEMM candidates re-timed side by side, with their configs
            row.setdefault("gemm_decisions", {})[side] = plain(fair_timing.decisions[retimed:])
        steps[side] = step
        # A step that cudagraph trees refused to record runs without graphs: its figures
        # would not be decode's as served.
        row.setdefault("cudagraph_skips", {})[side] = cudagraph_skips() - skips
    with torch.no_grad():
        cache = filled_cache()
        rewind(cache, context)
        eager = model(input_ids=tokens, past_key_values=cache, cache_position=position).logits.float()
    row["rel_err"] = {side: rel_err(logits[side], eager) for side in sides}
    for side in sides[1:]:
        row["rel_err"][f"{side}_vs_stock"] = rel_err(logits[side], logits["stock"])
        if not row["rel_err"][f"{side}_vs_stock"] < TOLERANCE:
            raise AssertionError(f"{row['row']}: {side} against stock {row['rel_err'][f'{side}_vs_stock']:.3e}")
    row["host_state"] = probe.quiet(timeout=QUIET_S)
    wall = probe.wall_ms(steps)
    row["token_ms"] = wall
    row["decode_speedup"] = ratio(wall["stock"], wall["ours"])
    if programmatic:
        row["programmatic_speedup"] = ratio(wall["ours"], wall[PROGRAMMATIC])
        row["programmatic_decode_speedup"] = ratio(wall["stock"], wall[PROGRAMMATIC])
    prof = probe.profile(steps)
    nbytes = gemm_bytes(model, batch)
    row["gemm_bytes"] = nbytes
    row["gemm_kernels"], row["gemm_us"], row["gemm_bandwidth_fraction"] = {}, {}, {}
    row["other_kernels"] = {}
    for side in sides:
        kernels = gemm_kernels(prof[side]["kernels"])
        row["gemm_kernels"][side] = kernels
        gemms = {k["kernel"] for k in kernels}
        others = [k for k in prof[side]["kernels"] if k["kernel"] not in gemms]
        row["other_kernels"][side] = sorted(others, key=lambda k: -k["us"])[:OTHER_KERNELS]
        row["gemm_bandwidth_fraction"][side], row["gemm_us"][side] = bandwidth_fraction(nbytes, kernels, copy_bps)
    if batch == 1:
        # With coordinate-descent tuning (max-autotune), Inductor decomposes a one-row mm
        # into a multiply and a sum (its decomposition of mm): those Linears run as
        # reductions, not GEMM kernels, and the GEMM kernels left cover part of the bytes.
        row["gemm_bandwidth_fraction"] = dict.fromkeys(sides)
        row["gemm_bandwidth_note"] = "one row: Inductor decomposes mm into a reduction, no GEMM kernels to time"
    row["gpu_us"] = {side: prof[side]["us"] for side in sides}
    row["decode_speedup_bound"] = speedup_bound(row, copy_bps)
    # Built once, where a copy floor or the sites need it (not at one row without sites).
    flush = functools.cache(lambda: l2_flush(probe, device))
    if batch > 1:  # (at one row the GEMM kernels cover part of the bytes: no fraction)
        floor = copy_floor(model, batch, probe, flush(), device)
        floor_us = sum(floor[s.gemm_bytes(batch)] * len(s.modules) for s in linear_sites(model))
        row["copy_floor_us"] = round(floor_us, 2)
        row["copy_floor_fraction"] = round(nbytes / (floor_us / 1e6) / copy_bps, 4) if floor_us else None
        # The step speed-up if stock's GEMMs took no longer than those copies.
        gpu, gemm = row["gpu_us"]["stock"], row["gemm_us"]["stock"]
        if floor_us and gemm:
            row["decode_speedup_copy_floor_bound"] = round(gpu / (gpu - gemm + min(gemm, floor_us)), 4)
    if sites:
        row["gemm_sites"] = [
            measure_site(s, batch, probe, copy_bps, flush(), device=device, compile_fn=compile_fn)
            for s in linear_sites(model)
        ]
    return row


#: What a row's figures rest on that differs between cards: each row names its own
#: (``harness.stamped``), as a run resumed in another call may be lent another card.
ROW_RUN_KEYS = ("device", "copy_bandwidth_gbps")


def summarize(rows: list[dict], info: dict) -> dict:
    ok = [r for r in rows if "error" not in r]

    def measured(key: str) -> list:
        """The rows' ``key``, where a row has it."""
        return [r[key] for r in ok if r.get(key) is not None]

    speed, bound = measured("decode_speedup"), measured("decode_speedup_bound")
    fraction = [r["gemm_bandwidth_fraction"]["ours"] for r in ok if r.get("gemm_bandwidth_fraction", {}).get("ours")]
    stock_fraction = [
        r["gemm_bandwidth_fraction"]["stock"] for r in ok if r.get("gemm_bandwidth_fraction", {}).get("stock")
    ]
    site_fractions = [s["bandwidth_fraction"] for r in ok for s in r.get("gemm_sites", ())]
    floor = measured("copy_floor_fraction")
    programmatic = {key: measured(key) for key in ("programmatic_speedup", "programmatic_decode_speedup")}
    return {
        **info,
        "device": suite_device(rows, info),
        "decode_speedup_geomean": geomean_or_none(speed),
        "decode_speedup_min": min(speed) if speed else None,
        "decode_speedup_bound_geomean": geomean_or_none(bound),
        "gemm_bandwidth_fraction_geomean": geomean_or_none(fraction),
        "stock_gemm_bandwidth_fraction_geomean": geomean_or_none(stock_fraction),
        # The fraction copies of each Linear's own size reach: what any kernel streaming
        # those bytes can reach, the bound beside the GEMMs' fraction.
        "copy_floor_fraction_geomean": geomean_or_none(floor),
        "decode_speedup_copy_floor_bound_geomean": geomean_or_none(measured("decode_speedup_copy_floor_bound")),
        **(
            {
                "site_bandwidth_fraction_geomean": {
                    side: geomean_or_none(f[side] for f in site_fractions if f[side]) for side in BACKENDS
                }
            }
            if site_fractions
            else {}
        ),
        **{f"{key}_geomean": geomean_or_none(values) for key, values in programmatic.items() if values},
        "rows": rows,
    }


def _batches(text: str) -> list[int]:
    """``--batches``: comma-separated positive whole numbers."""
    try:
        values = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated positive whole numbers")
    return list(dict.fromkeys(values))


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=comma_choices(MODELS, "model"), default=list(MODELS), help="default: llama,qwen2")
    ap.add_argument("--batches", type=_batches, default=list(BATCHES), help="default: 1,4,16,64")
    ap.add_argument("--layers", type=int, default=4, help="decoder layers (default: %(default)s)")
    ap.add_argument(
        "--sites",
        action="store_true",
        help="also time each Linear shape alone, stock against ours, for every GEMM's bandwidth fraction "
        "(two more max-autotune compiles of one GEMM per shape: 5 shapes per model)",
    )
    ap.add_argument(
        "--programmatic",
        action="store_true",
        help="also time ours compiled with programmatic launches (INDUCTOR_CUTEDSL_PROGRAMMATIC_LAUNCH), "
        "a third side of every row (one more max-autotune compile per row)",
    )
    ap.add_argument("--json", metavar="PATH", help="result file, rewritten after every row")
    ap.add_argument("--resume", metavar="PATH", help="an earlier result file: its rows are not measured again")
    ap.add_argument(
        "--budget",
        type=float,
        metavar="SECONDS",
        help="start no row likely to end later than SECONDS from the start (expected: the longest row so far, "
        "else FIRST_ROW_S); the rows left are listed for a --resume run",
    )
    return ap


#: The seconds a first row is expected to take, before one has been timed (two max-autotune
#: compiles of a decode step, the eager check, timing and profiling): the H200's Llama-class
#: rows at batch 16 and 64 took 104 and 112 s.
FIRST_ROW_S = 130.0


def main(argv: list[str] | None = None) -> dict | None:
    args = parser().parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks.decode needs a CUDA GPU: nothing measured")
        return None
    torch._dynamo.config.automatic_dynamic_shapes = False
    stock_as_fair_stock()
    rows: list[dict] = []
    if args.resume and os.path.exists(args.resume):
        with open(args.resume) as f:
            rows = [r for r in stamped(json.load(f), ROW_RUN_KEYS) if "error" not in r]
    done = {r["row"] for r in rows}
    info = {**run_info(), "copy_bandwidth_gbps": round(copy_bandwidth() / 1e9, 1)}
    probe = GpuProbe()
    start, row_seconds, left = time.perf_counter(), [], []
    for name in args.models:
        for batch in args.batches:
            if f"{name}:b{batch}" in done:
                continue
            expected = max(row_seconds, default=FIRST_ROW_S)
            if args.budget is not None and time.perf_counter() - start + expected > args.budget:
                left.append(f"{name}:b{batch}")
                continue
            print(f"== {name} batch {batch}", flush=True)
            t0 = time.perf_counter()
            try:
                row = measure(
                    name,
                    batch,
                    args.layers,
                    probe,
                    info["copy_bandwidth_gbps"] * 1e9,
                    sites=args.sites,
                    programmatic=args.programmatic,
                )
            except Exception as exc:
                row = {"row": f"{name}:b{batch}", "error": f"{type(exc).__name__}: {exc}"[:2000]}
            finally:
                release()
            row = {**{key: info.get(key) for key in ROW_RUN_KEYS}, **row, "row_s": round(time.perf_counter() - t0, 1)}
            row_seconds.append(row["row_s"])
            rows.append(row)
            print(json.dumps({k: row.get(k) for k in ("row", "decode_speedup", "gemm_bandwidth_fraction", "error")}))
            write_json(summarize(rows, info), args.json)
    result = summarize(rows, info)
    if left:
        result["left"] = left
        print(f"left for a --resume run: {', '.join(left)}")
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}))
    write_json(result, args.json)
    return result


if __name__ == "__main__":
    main()
