"""Eight processes sharing one kernel cache, as the ranks of a job on one host do, each
running the whole compile path of a real graph (Inductor's CUDA lowering on a faked
H200, our candidates and their builds): every kernel is built once across all of them,
and every one of them finds all the kernels its code calls (issue 20, without GPUs); the
log of their cache events shows that they raced."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

RANKS = 8
_start = None  # each rank's barrier: all compile at once, once all have imported
_log = None  # the job's RaceLog


def _join(barrier, log: str) -> None:
    global _start, _log
    _start, _log = barrier, log


def _rank(_: int) -> tuple[list[str], list[str]]:
    """One rank: compile a Linear + GELU + residual graph; (keys built here, keys its
    generated code launches)."""
    import torch.nn.functional as F
    from fake_hopper import generated_code, launched
    from helpers import RaceLog

    from inductor_cutedsl.runtime import compiler
    from inductor_cutedsl.runtime.launch import default_cache

    def block(x, w, b, r):
        return F.gelu(F.linear(x, w, b), approximate="tanh") + r

    # The job's first build holds until the seven other ranks wait for its key's lock.
    RaceLog(_log).install(hold=RANKS - 1)
    _start.wait(timeout=600)
    code = generated_code(block, (1000, 1024), (2048, 1024), (2048,), (1000, 2048), backends="CUTEDSL,ATEN")
    compiler.wait_idle()  # speculative builds too: they are in the cache's counts
    launches = code.count("_launch = launcher(")
    needed = [launched(code, i)["spec"].key() for i in range(launches)]
    return list(default_cache().built), needed


def test_eight_ranks_compiling_one_graph_build_each_kernel_once(tmp_path, monkeypatch):
    from helpers import RaceLog

    from inductor_cutedsl.runtime import KernelCache

    # Inherited by the spawned ranks: one shared kernel cache, builds in each rank's own
    # process (as a rank with one compile worker), Inductor's caches apart per rank.
    monkeypatch.setenv("INDUCTOR_CUTEDSL_CACHE_DIR", str(tmp_path / "kernels"))
    monkeypatch.setenv("INDUCTOR_CUTEDSL_COMPILE_WORKERS", "1")
    monkeypatch.setenv("INDUCTOR_CUTEDSL_MAX_CONFIGS", "2")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    ctx = multiprocessing.get_context("spawn")
    log = RaceLog(tmp_path / "events")
    with ctx.Pool(RANKS, initializer=_join, initargs=(ctx.Barrier(RANKS), log.path)) as pool:
        results = pool.map(_rank, range(RANKS), chunksize=1)
    # The ranks raced: while one built the first kernel, the seven others waited on it.
    first = next(key for _, event, key in log.events() if event == "build")
    builder, waited = log.raced(first)
    assert len(waited) == RANKS - 1 and builder not in waited, log.events()
    built = [key for keys, _ in results for key in keys]
    needed = {key for _, keys in results for key in keys}
    assert needed, "the graph ran no CuteDSL kernel"
    assert len(built) == len(set(built)), f"a kernel was built more than once: {sorted(built)}"
    assert needed <= set(built), "a kernel the code launches was never built"
    cache = KernelCache(tmp_path / "kernels")
    assert all(cache.lookup(key) is not None for key in needed)
    assert all(keys == results[0][1] for _, keys in results), "the ranks generated different kernels"
