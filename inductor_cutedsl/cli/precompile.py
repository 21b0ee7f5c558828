"""Kernel builds with a line per kernel as it finishes, and the main job without a GPU:
the default block's CuteDSL kernels compiled ahead of time into the kernel cache."""

from __future__ import annotations

import concurrent.futures
import functools
import sys
import time
from collections.abc import Callable, Iterable

from ..kernels import IDENTITY
from ..runtime import KernelCache, KernelSpec, compiler
from ..runtime.launch import default_cache
from .block import BlockSize


def build_with_progress(
    specs: Iterable[KernelSpec], cache: KernelCache, workers: int, out: Callable[[str], None] = print
) -> dict[KernelSpec, compiler.Built]:
    """``compiler.build_many`` that reports each kernel compiled now (or failed) as it
    finishes, with how many of the whole have finished; cache hits are counted, not named.

    One printer, in the calling thread, in finishing order (builds finish in worker
    threads; their lines never interleave): a progress bar where ``out`` is ``print`` to
    a terminal and tqdm is installed, else a line per kernel."""
    specs = list(dict.fromkeys(specs))
    futures = [compiler.build_async(spec, cache, workers) for spec in specs]
    bar = _progress_bar(len(specs)) if out is print and sys.stdout.isatty() else None
    report = bar.write if bar is not None else out
    pending, finished = set(range(len(specs))), 0
    while pending:
        done, _ = concurrent.futures.wait([futures[i] for i in pending], return_when=concurrent.futures.FIRST_COMPLETED)
        for i in sorted(i for i in pending if futures[i] in done):
            pending.discard(i)
            finished += 1
            error = futures[i].exception()
            if error is not None:
                report(f"  [{finished}/{len(specs)}] {specs[i].describe()}: failed ({type(error).__name__})")
            elif futures[i].result()[1]:
                report(f"  [{finished}/{len(specs)}] {specs[i].describe()}: compiled in {futures[i].result()[2]:.1f}s")
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    return dict(zip(specs, compiler.wait(futures)))


def _progress_bar(total: int):
    """A tqdm bar of ``total`` kernels, or None where tqdm is not installed."""
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit="kernel", desc="CuteDSL kernels")


def block_specs(size: BlockSize) -> list[KernelSpec]:
    """The CuteDSL candidates autotuning offers for the block's GEMMs."""
    from ..lowering.gemm_choices import candidate_specs  # loads Inductor

    return list(
        dict.fromkeys(
            spec
            for _, m, n, k in size.gemms()
            for spec in candidate_specs((m, n, k, 1), "bfloat16", "bfloat16", "k", "k", IDENTITY)
        )
    )


def precompile_block(size: BlockSize, workers: int) -> None:
    """Build the CuteDSL candidates of the block's GEMMs into the kernel cache."""
    specs = block_specs(size)
    cache = default_cache()
    missing = [spec for spec in specs if cache.lookup(spec.key()) is None]
    if not missing:  # a read-only warm cache serves every kernel: nothing to write
        print(f"kernel cache {cache.dir}: all {len(specs)} kernels for the block's GEMMs are cached")
        return
    if not cache.persistent:
        raise SystemExit(
            f"the kernel cache directory {cache.dir} cannot take new kernels ({cache.why_not_persistent()}): "
            f"{len(missing)} of the block's {len(specs)} kernels are missing, and kernels compiled now would "
            "not be kept. Set INDUCTOR_CUTEDSL_CACHE_DIR to a directory of your own that you can write."
        )
    print(
        f"kernel cache {cache.root}: {len(specs)} kernels for the block's GEMMs ({len(missing)} to build), "
        f"{workers} worker{'s' if workers != 1 else ''}",
        flush=True,
    )
    t0 = time.perf_counter()
    built = build_with_progress(specs, cache, workers, out=functools.partial(print, flush=True))
    fresh = sum(now for _, now, _ in built.values())
    print(
        f"kernel cache {cache.root}: {fresh} compiled now, {len(specs) - fresh} already cached, "
        f"{time.perf_counter() - t0:.1f}s"
    )
