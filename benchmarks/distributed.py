"""Data-parallel (DDP) and sharded (FSDP2 ``fully_shard``) training with the backend on:
training-step time, stock vs ours side by side, and each rank's cold compile (issue 20).

    python -m benchmarks.distributed --wrap ddp fsdp2 --json benchmarks/results/h200-distributed.json

World size 2. With two GPUs each rank has one and they talk over NCCL; with one GPU
both ranks share it over ``gloo`` (``"gpus": 1`` in the JSON: the step times then say
nothing about scaling, only that it runs). Per wrap:

* **cold compile**, per backend: a fresh process group whose ranks start with empty
  Inductor and kernel caches (one of each per host, shared by the ranks, as the README
  says to set them up); each rank's first training step is timed: compile, kernel
  builds and one step.
* **step time**: one process group compiles both backends and then times them in
  interleaved rounds of ``--steps`` training steps each (forward, backward, SGD step),
  the ranks in lockstep; the median ms per step of each and ``speedup`` = stock / ours.
  The losses of the two on the same data are compared (``loss_rel_diff``).

Without a CUDA GPU it says so and exits 0.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable

import torch

from . import models
from .harness import BACKENDS, run_info, write_json

WORLD = 2
WRAPS = ("ddp", "fsdp2")
MODE = "max-autotune-no-cudagraphs"


def wrap_model(block: torch.nn.Module, wrap: str) -> torch.nn.Module:
    if wrap == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(block)
    from torch.distributed.fsdp import fully_shard

    return fully_shard(block)


def trainer(
    wrap: str, family: str, size: str, lr: float = 0.05, reference: bool = False
) -> tuple[torch.nn.Module, torch.Tensor, Callable]:
    """A model-suite block (the same weights on every rank), wrapped and compiled in
    ``MODE`` under the backend now configured: (block, an input like the block's,
    ``step(x, grads=None)`` = one training step returning the loss, appending the whole
    gradients (at least float32, on the host) to ``grads`` when given). ``reference``: the same
    weights and inputs in float64, eager: what both compiled runs are measured against."""
    block, sample = models.make_block(family, size, seed=0)
    if reference:
        block = block.to(torch.float64)
    dtype = next(block.parameters()).dtype
    # The model suite's training loss (``models.ScalarLoss``), one that moves every weight:
    # the output's projection on a fixed direction.
    direction = models.output_direction(block, sample.to(dtype), torch.promote_types(dtype, torch.float32))
    wrapped = wrap_model(block, wrap)
    compiled = wrapped if reference else models.compile_block(wrapped, MODE)
    opt = torch.optim.SGD(block.parameters(), lr=lr)

    def step(x: torch.Tensor, grads: list[torch.Tensor] | None = None) -> torch.Tensor:
        out = compiled(x.to(dtype))
        loss = (widened(out) * direction).sum()
        loss.backward()
        if grads is not None:
            grads.extend(widened(g).cpu() for g in full_tensors([p.grad for p in block.parameters()]))
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    return block, sample, step


def widened(t: torch.Tensor) -> torch.Tensor:
    """``t`` in float32, or float64 when it is (the reference's)."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


def batches(sample: torch.Tensor, rank: int, n: int) -> list[torch.Tensor]:
    """``n`` inputs of this rank (each rank its own data, the same in every run)."""
    gen = torch.Generator(device=sample.device).manual_seed(1000 + rank)
    return [torch.randn(sample.shape, device=sample.device, generator=gen).to(sample.dtype) for _ in range(n)]


def full_tensors(tensors: Iterable[torch.Tensor], via_host: bool | None = None) -> list[torch.Tensor]:
    """Each tensor whole: FSDP2's parameters and their gradients are DTensors sharded on
    dim 0, gathered across the ranks (a collective: every rank calls this in step).
    ``via_host`` (default: over gloo with CUDA shards) gathers the shards as CPU
    tensors: ``full_tensor`` goes through the functional all-gather, which gloo serves
    with its coalesced all-gather, and that one has no CUDA path (it reads device memory
    on the host: SIGSEGV, pytorch/pytorch#132471). FSDP2's own collectives take gloo's
    CUDA paths."""
    import torch.distributed as dist

    out = []
    for t in tensors:
        if not hasattr(t, "full_tensor"):
            out.append(t)
            continue
        group = t.device_mesh.get_group()
        host = via_host if via_host is not None else (t.device.type == "cuda" and dist.get_backend(group) == "gloo")
        out.append(_gather_dim0_on_host(t, group) if host else t.full_tensor())
    return out


def _gather_dim0_on_host(p, group) -> torch.Tensor:
    """A dim-0-sharded DTensor whole, gathered through CPU copies of its shards (each
    padded to the first shard's rows, as ``torch.chunk`` splits)."""
    import torch.distributed as dist
    from torch.distributed.tensor import Shard

    if tuple(p.placements) != (Shard(0),):
        raise ValueError(f"want a parameter sharded on dim 0, not {p.placements}")
    local = p.to_local().detach()
    rows = -(-p.shape[0] // dist.get_world_size(group))
    padded = torch.zeros((rows, *p.shape[1:]), dtype=local.dtype)
    padded[: local.shape[0]] = local.cpu()
    parts = [torch.empty_like(padded) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, padded, group=group)
    return torch.cat(parts)[: p.shape[0]].to(local.device)


def _init(rank: int, backend: str, rendezvous: str) -> None:
    import torch.distributed as dist

    torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group(backend, init_method=f"file://{rendezvous}", rank=rank, world_size=WORLD)


def _cold_rank(rank: int, backend: str, args: argparse.Namespace, which: str, out: str) -> None:
    import torch.distributed as dist

    _init(rank, backend, f"{out}.rendezvous")
    try:
        with models.backend(which):
            _, sample, step = trainer(args.wrap_now, args.family, args.size)
            x = batches(sample, rank, 1)[0]
            dist.barrier()
            t0 = time.perf_counter()
            step(x)
            torch.cuda.synchronize()
            seconds = time.perf_counter() - t0
        torch.save({"seconds": seconds}, f"{out}.rank{rank}")
    finally:
        dist.destroy_process_group()


def _timed_rank(rank: int, backend: str, args: argparse.Namespace, out: str) -> None:
    import torch.distributed as dist

    from inductor_cutedsl.runtime.launch import default_cache

    _init(rank, backend, f"{out}.rendezvous")
    try:
        steps, losses, data = {}, {}, []
        for which in BACKENDS:
            with models.backend(which):
                _, sample, steps[which] = trainer(args.wrap_now, args.family, args.size)
                data = data or batches(sample, rank, args.steps)  # the same inputs for both
                losses[which] = [steps[which](x).item() for x in data]  # compiles at the first
        times: dict = {b: [] for b in BACKENDS}
        for r in range(args.rounds):
            for which in BACKENDS if r % 2 == 0 else BACKENDS[::-1]:
                with models.backend(which):
                    torch.cuda.synchronize()
                    dist.barrier()
                    t0 = time.perf_counter()
                    for x in data:
                        steps[which](x)
                    torch.cuda.synchronize()
                    times[which].append((time.perf_counter() - t0) / len(data) * 1e3)
        torch.save({"times": times, "losses": losses, "built": list(default_cache().built)}, f"{out}.rank{rank}")
    finally:
        dist.destroy_process_group()


def _spawn(fn: Callable, args: tuple, env: dict[str, str]) -> None:
    """``fn`` in WORLD new ranks, whose environment is this process's without what our
    install set in it (``launch_environment``: a stock rank must not start aligned with
    our ptxas) and with ``env``."""
    import torch.multiprocessing as mp

    from inductor_cutedsl.install import launch_environment

    saved = dict(os.environ)
    start = {**launch_environment(), **env}
    os.environ.clear()
    os.environ.update(start)  # inherited by the spawned ranks
    try:
        mp.spawn(fn, args=args, nprocs=WORLD, join=True)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def loss_rel_diff(stock: list[float], ours: list[float]) -> float:
    return max(abs(s - o) / max(abs(s), 1e-12) for s, o in zip(stock, ours, strict=True))


def summarize_wrap(wrap: str, timed: list[dict], cold: dict[str, list[float]] | None) -> dict:
    """One wrap's row from each rank's results: the ranks step in lockstep, so a round's
    time is its slowest rank's."""
    rounds = {b: [max(r["times"][b][i] for r in timed) for i in range(len(timed[0]["times"][b]))] for b in BACKENDS}
    step_ms = {b: round(statistics.median(t), 4) for b, t in rounds.items()}
    built = [key for r in timed for key in r["built"]]
    row = {
        "wrap": wrap,
        "step_ms": step_ms,
        "speedup": round(step_ms["stock"] / step_ms["ours"], 4),
        "round_ratios": [round(s / o, 4) for s, o in zip(rounds["stock"], rounds["ours"], strict=True)],
        "loss_rel_diff": max(loss_rel_diff(r["losses"]["stock"], r["losses"]["ours"]) for r in timed),
        "kernels_built": len(built),
        "kernels_built_twice": len(built) - len(set(built)),
    }
    if cold is not None:
        row["cold_compile_s"] = {b: [round(s, 1) for s in cold[b]] for b in BACKENDS}
        row["cold_compile_ratio"] = round(max(cold["ours"]) / max(cold["stock"]), 3)
    return row


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wrap", nargs="+", choices=WRAPS, default=list(WRAPS), help="how the block is distributed")
    ap.add_argument(
        "--block",
        default="gpt2:prefill",
        metavar="FAMILY:SIZE",
        help="the model-suite block trained (default: %(default)s)",
    )
    ap.add_argument("--steps", type=int, default=10, help="training steps per timed round (default: %(default)s)")
    ap.add_argument("--rounds", type=int, default=6, help="interleaved timed rounds (default: %(default)s)")
    ap.add_argument("--no-cold", dest="cold", action="store_false", help="skip the cold compiles")
    ap.add_argument("--json", default=None, help="result file")
    args = ap.parse_args(argv)
    args.family, args.size = args.block.split(":")
    for name in ("steps", "rounds"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be at least 1")
    return args


def main(argv: list[str] | None = None) -> dict | None:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks.distributed needs a CUDA GPU: nothing measured")
        return None
    gpus = torch.cuda.device_count()
    backend = "nccl" if gpus >= WORLD else "gloo"
    result = {
        **run_info(),
        "world_size": WORLD,
        "gpus": min(gpus, WORLD),
        "backend": backend,
        "block": args.block,
        "mode": MODE,
        "steps_per_round": args.steps,
        "rows": [],
    }
    for wrap in args.wrap:
        args.wrap_now = wrap
        with tempfile.TemporaryDirectory(prefix=f"distributed-{wrap}-") as tmp:
            cold = None
            if args.cold:
                cold = {}
                for which in BACKENDS:
                    out = f"{tmp}/cold-{which}"
                    env = {
                        "TORCHINDUCTOR_CACHE_DIR": f"{tmp}/inductor-cold-{which}",
                        "INDUCTOR_CUTEDSL_CACHE_DIR": f"{tmp}/kernels-cold-{which}",
                    }
                    _spawn(_cold_rank, (backend, args, which, out), env)
                    cold[which] = [torch.load(f"{out}.rank{r}")["seconds"] for r in range(WORLD)]
            out = f"{tmp}/timed"
            env = {"TORCHINDUCTOR_CACHE_DIR": f"{tmp}/inductor", "INDUCTOR_CUTEDSL_CACHE_DIR": f"{tmp}/kernels"}
            _spawn(_timed_rank, (backend, args, out), env)
            timed = [torch.load(f"{out}.rank{r}") for r in range(WORLD)]
        row = summarize_wrap(wrap, timed, cold)
        result["rows"].append(row)
        print(row, flush=True)
        write_json(result, args.json)
    return result


if __name__ == "__main__":
    main()
