"""fp8 (e4m3) GEMMs, ours vs ``torch._scaled_mm`` on the same tensors (issue 19).

    python -m benchmarks.fp8 --json benchmarks/results/h200-fp8.json

Plain scaled GEMMs at LLM shapes, tensor-wise and row-wise scales. For each shape and
scale mode our shortlisted configs are built up front (worker processes), checked
against ``torch._scaled_mm``'s result, timed each against an adjacent ``_scaled_mm``
timing (the clock drifts more over a search than configs differ), the leaders re-timed
interleaved, and the winner timed interleaved with ``_scaled_mm``: ``vs_scaled_mm`` is
its time over ours. Accumulation as ``_scaled_mm``'s default (``use_fast_accum=False``:
ours promotes the fp8 partial sums every k-tile) unless ``--fast-accum``.

``--fused`` adds the fused patterns (scaled GEMM + bias + GELU, scaled GEMM + silu *
gate, scaled GEMM + residual, scaled GEMM whose result is cast to fp8 with a static
scale for the next layer, and a gated MLP's two scaled GEMMs of one input and their
product, ours one fp8 dual kernel; ``--cases`` picks some), each eager, with stock
max-autotune and with ours, timed as CUDA graphs side by side with the bound a free
epilogue would reach (``benchmarks.epilogue.measure_case``).
``--accuracy`` adds the error beside the speed: at K from 1024 to 32768 (M = N = 1024,
row-wise scales), the relative norm error against float64 of the dequantized operands,
of ``_scaled_mm`` and of our kernel, promoting and with fast accumulation
(``accuracy_rows``).
``--block`` adds model-suite blocks (LLaMA prefill by default; ``hf-*`` for
``transformers`` classes, comma-separated) with every Linear quantized row-wise
(``Fp8Linear``: weights once, activations per call, their quantization timed), or with
``FAMILY:SIZE:static`` tensor-wise with the activations' scales calibrated ahead (their
quantization a pointwise op, which ours can run in the epilogue writing them), their
GEMMs with fast accumulation as float8 inference recipes run them (``:promote`` after the
recipe: ``_scaled_mm``'s promoting default), compiled with stock max-autotune and with
ours, checked against its eager run and timed side by side as CUDA graphs beside the
bf16 block compiled by stock: ``model_speedup_vs_max_autotune`` and
``model_speedup_vs_bf16`` (geomeans over the blocks).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

import torch
import torch.nn.functional as F
from torch import nn

from inductor_cutedsl.kernels import GemmConfig, shortlist
from inductor_cutedsl.kernels import epilogue as E
from inductor_cutedsl.kernels.config import (
    PROMOTE_ALTERNATE,
    PROMOTE_HALVES,
    PROMOTE_NONE,
    PROMOTE_TILE,
    fitted_swizzle,
)
from inductor_cutedsl.runtime import KernelSpec, get_gemm
from inductor_cutedsl.runtime.compiler import build_many
from inductor_cutedsl.runtime.launch import default_cache
from inductor_cutedsl.timing import bench

from .epilogue import COMPILE_FIRST_HELP, TOLERANCE, measure_case
from .harness import BACKENDS, geomean, graphed, rel_err, run_info, side_by_side, stock_as_fair_stock, write_json

# (M, N, K): LLM Linear layers (LLaMA-3 8B / 70B widths) at prefill token counts.
SHAPES = [
    (1024, 4096, 4096),
    (2048, 14336, 4096),
    (4096, 4096, 14336),
    (8192, 8192, 8192),
    (8192, 14336, 4096),
    (8192, 4096, 14336),
]
MODES = ("tensor", "row")
FINALISTS = 3
FP8 = "float8_e4m3fn"
#: Promoting configs timed beside the shortlist, on trial before the lowering offers
#: them: the promoting leaders (128x128 and 128x192) in a 2x2 cluster, A and B both
#: multicast, half the L2 reads of the pair that leads (an unclustered, unswizzled
#: promoting tile ran 20% slower than the swizzled pair at the 8192-row shapes).
TRIAL = (GemmConfig(128, 128, 2, 2), GemmConfig(128, 192, 2, 2))


def scaled_specs(cfg: GemmConfig, mode: str, promote_modes) -> list[KernelSpec]:
    """``cfg`` as scaled fp8 kernels (``mode`` scales on both operands, a bf16 output), one
    per promotion mode of ``promote_modes`` the config has the registers for (fast
    accumulation, ``PROMOTE_NONE``, always)."""
    epi = E.scaled(mode, mode)
    return [
        KernelSpec(cfg, FP8, "bfloat16", "k", "k", epi, promote=p)
        for p in promote_modes
        if not p or cfg.promotion_reason(p) is None
    ]


def candidate_specs(m: int, n: int, k: int, mode: str, promote: bool, limit: int) -> list[KernelSpec]:
    """Our shortlist for the shape as scaled fp8 kernels (configs without registers for
    a second accumulator dropped when promoting), promoting in each mode the config
    has the registers for (``PROMOTE_TILE``, ``PROMOTE_HALVES``, ``PROMOTE_ALTERNATE``,
    timed side by side) when asked to."""
    modes = (PROMOTE_TILE, PROMOTE_HALVES, PROMOTE_ALTERNATE) if promote else (PROMOTE_NONE,)
    configs = shortlist(m, n, k, limit=limit, promote=promote)
    if promote:  # rastered and swizzled as the shortlist's own
        for c in TRIAL:
            c = dataclasses.replace(c, raster_along_m=m >= n, swizzle=8)
            configs.append(dataclasses.replace(c, swizzle=fitted_swizzle(c, m, n)))
    return [spec for c in configs for spec in scaled_specs(c, mode, modes)]


def operands(m: int, n: int, k: int, mode: str):
    a = (torch.randn(m, k, device="cuda") * 4).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, device="cuda") * 4).to(torch.float8_e4m3fn).t()
    if mode == "tensor":
        sa, sb = torch.rand((), device="cuda") + 0.5, torch.rand((), device="cuda") + 0.5
    else:
        sa, sb = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
    return a, b, sa, sb


def measure(m: int, n: int, k: int, mode: str, specs: list[KernelSpec], fast: bool) -> dict:
    a, b, sa, sb = operands(m, n, k, mode)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)

    def theirs():
        return torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast)

    ref = theirs()
    bench(theirs, rep=1000)  # bring the GPU to its steady clock
    ranked, tried = [], []
    for spec in specs:
        kern = get_gemm(spec)
        out.fill_(float("nan"))
        kern(a, b, out, sa, sb)
        torch.cuda.synchronize()
        err = rel_err(out, ref.double())
        if not err < 1e-2:
            print(f"  {spec.config.name()} promote {spec.promote}: WRONG (rel err {err:.3e} vs _scaled_mm)", flush=True)
            continue
        ms = bench(lambda kern=kern: kern(a, b, out, sa, sb))
        ratio = bench(theirs) / ms
        tried.append(
            {"config": spec.config.name(), "promote": spec.promote, "ms": round(ms, 4), "vs_scaled_mm": round(ratio, 4)}
        )
        ranked.append((ratio, spec))
    if not ranked:
        return {"shape": [m, n, k], "mode": mode, "error": "no candidate computed the right result"}
    leaders = [spec for _, spec in sorted(ranked, key=lambda r: -r[0])[:FINALISTS]]
    runs = side_by_side(
        {s: (lambda kern=get_gemm(s): kern(a, b, out, sa, sb)) for s in leaders} | {"theirs": theirs}, rounds=3
    )
    spec = min(leaders, key=runs.get)
    kern = get_gemm(spec)
    final = side_by_side({"ours": lambda: kern(a, b, out, sa, sb), "theirs": theirs})
    flops = 2 * m * n * k
    return {
        "shape": [m, n, k],
        "mode": mode,
        "config": spec.config.name(),
        "promote": spec.promote,
        "ours_ms": round(final["ours"], 4),
        "scaled_mm_ms": round(final["theirs"], 4),
        "vs_scaled_mm": round(final["theirs"] / final["ours"], 4),
        "tflops": round(flops / final["ours"] / 1e9, 1),
        "scaled_mm_tflops": round(flops / final["theirs"] / 1e9, 1),
        "candidates": sorted(tried, key=lambda t: -t["vs_scaled_mm"]),
    }


#: K of the accuracy rows (``--accuracy``): fp8 partial sums lose more the longer K runs.
ACCURACY_KS = (1024, 4096, 16384, 32768)
ACCURACY_MN = 1024


def dequantized_reference(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor) -> torch.Tensor:
    """``(a * sa) @ (b * sb)`` in float64: what a scaled fp8 GEMM approximates, its operands
    taken as the fp8 values they hold (the quantization is the recipe's, not the GEMM's)."""
    return (a.double() * sa.double()) @ (b.double() * sb.double())


def accuracy_row(k: int, a, b, sa, sb, ways: dict) -> dict:
    """One K's relative norm errors against ``dequantized_reference``: ``ways`` maps a name
    to a callable of (a, b, sa, sb) returning the GEMM's output. An output left with NaN
    (never written) reads as an error of inf (``rel_err``)."""
    ref = dequantized_reference(a, b, sa, sb)
    row: dict = {"k": k}
    for name, way in ways.items():
        out = way(a, b, sa, sb)
        row[name] = float(f"{rel_err(out, ref):.3e}")
    return row


def accuracy_rows(ks=ACCURACY_KS, mn: int = ACCURACY_MN) -> list[dict]:
    """``accuracy_row`` for each K: ``_scaled_mm`` promoting and with fast accumulation, and
    our first shortlisted config each way (row-wise scales, bf16 output, fresh operands)."""
    rows = []
    for k in ks:
        a, b, sa, sb = operands(mn, mn, k, "row")
        ways = {
            "scaled_mm": lambda a, b, sa, sb: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16),
            "scaled_mm_fast": lambda a, b, sa, sb: torch._scaled_mm(
                a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True
            ),
        }
        for name, promote in (("ours", True), ("ours_fast", False)):
            kern = get_gemm(candidate_specs(mn, mn, k, "row", promote, limit=1)[0])

            def ours(a, b, sa, sb, kern=kern):
                out = torch.full((mn, mn), float("nan"), device=a.device, dtype=torch.bfloat16)
                kern(a, b, out, sa, sb)
                return out

            ways[name] = ours
        rows.append(accuracy_row(k, a, b, sa, sb, ways))
        print(f"accuracy K={k}: {rows[-1]}", flush=True)
    return rows


def _silu_gate(a, b, sa, sb, g):
    return F.silu(torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)) * g


def _bias_gelu(a, b, sa, sb, c):
    return F.gelu(torch._scaled_mm(a, b, sa, sb, bias=c, out_dtype=torch.bfloat16), approximate="tanh")


def _residual(a, b, sa, sb, r):
    """A projection whose output joins the residual stream (attention's output, the MLP's down
    projection): the add read in the epilogue instead of a kernel of its own."""
    return torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16) + r


def _fp8_for_next_layer(a, b, sa, sb, inv_scale):
    y = torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
    return (y * inv_scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)


def _gated_dual(a, b, sa, sb, up):
    """An fp8 gated MLP's product: two GEMMs of one input (ours: one fp8 dual kernel)."""
    b_up, sb_up = up
    gate = torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
    return F.silu(gate) * torch._scaled_mm(a, b_up, sa, sb_up, out_dtype=torch.bfloat16)


def _up_weight(m: int, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A second e4m3 (K, N) weight, K-major, and its row-wise scale."""
    _, b, _, sb = operands(m, n, k, "row")
    return b, sb


#: name -> (function of (a, b, scale_a, scale_b, extra), extra made from (m, n, k)); row-wise scales.
FUSED = {
    "scaled_bias_gelu": (_bias_gelu, lambda m, n, k: torch.randn(n, device="cuda").to(torch.bfloat16)),
    "scaled_silu_gate": (_silu_gate, lambda m, n, k: torch.randn(m, n, device="cuda").to(torch.bfloat16)),
    "scaled_residual": (_residual, lambda m, n, k: torch.randn(m, n, device="cuda").to(torch.bfloat16)),
    "scaled_fp8_out": (_fp8_for_next_layer, lambda m, n, k: 1 / 64),
    "scaled_gated_dual": (_gated_dual, _up_weight),
}
#: Patterns of two GEMMs: their free-epilogue bound is against both by cuBLASLt.
TWO_GEMMS = {"scaled_gated_dual"}
FUSED_SHAPES = [(4096, 4096, 4096), (8192, 14336, 4096), (8192, 4096, 14336)]
# An fp8 result differs from eager's by one e4m3 step (6-12%) where the fp32 sums round
# differently: the check allows a few of them.
FUSED_TOLERANCE = {"scaled_fp8_out": 5e-2}


def fused_rows(shapes, first: str = "stock", cases=tuple(FUSED)) -> list[dict]:
    from inductor_cutedsl import config

    rows = []
    for name in cases:
        fn, extra = FUSED[name]
        for m, n, k in shapes:
            a, b, sa, sb = operands(m, n, k, "row")
            args = (a, b, sa, sb, extra(m, n, k))
            out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)

            def gemm_alone(a=a, b=b, sa=sa, sb=sb, out=out, twice=name in TWO_GEMMS):
                for _ in range(2 if twice else 1):
                    torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, out=out)
                return out

            # The fp8 dual kernel is measured here whether or not it is on by default.
            with config.patch(fp8_dual=True):
                tolerance = FUSED_TOLERANCE.get(name, TOLERANCE)
                row = measure_case(name, (m, n, k), fn, args, gemm_alone, tolerance, first=first)
            rows.append(row)
            print(
                f"{name:>18} {m}x{n}x{k}: eager {row['eager_ms']:.4f} stock {row['stock_ms']:.4f} "
                f"ours {row['ours_ms']:.4f} -> {row['vs_max_autotune']:.3f}x (free-epilogue bound "
                f"{row['free_epilogue_bound']:.3f}x)",
                flush=True,
            )
    return rows


E4M3_MAX = 448.0


class Fp8Linear(nn.Module):
    """``linear`` with its weight quantized to e4m3 once and its input on every call,
    multiplied by ``torch._scaled_mm`` into the input's dtype, bias included.

    Without ``input_scale`` (the usual dynamic recipe) both are quantized row-wise, the
    input by amax / 448 of each row at each call. With ``input_scale`` (a static recipe:
    an fp32 scale calibrated ahead, ``calibrate``) the input is divided by it and
    saturated, and the weight is quantized tensor-wise (``_scaled_mm`` takes both
    scales in one mode): the quantization is then a pointwise op that can run in the
    epilogue of the kernel writing the input. ``use_fast_accum``: as float8 inference
    recipes set it (torchao's dynamic-activation config defaults it to True), or
    ``_scaled_mm``'s own default (False: the fp8 partial sums promoted)."""

    def __init__(self, linear: nn.Linear, input_scale: torch.Tensor | None = None, use_fast_accum: bool = True) -> None:
        super().__init__()
        self.use_fast_accum = use_fast_accum
        w = linear.weight.detach().float()
        if input_scale is None:
            scale = w.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / E4M3_MAX
        else:
            scale = w.abs().amax().clamp_min(1e-12) / E4M3_MAX
        self.register_buffer("wq", (w / scale).to(torch.float8_e4m3fn))  # (N, K)
        self.register_buffer("w_scale", scale.t().contiguous() if input_scale is None else scale)  # (1, N) or ()
        # Linears reading one input share their scale (one tensor): ``calibrate``.
        self.input_scale = input_scale
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1])
        if self.input_scale is None:
            x_scale = x2.abs().amax(dim=1, keepdim=True).float().clamp_min(1e-12) / E4M3_MAX
            xq = (x2.float() / x_scale).to(torch.float8_e4m3fn)
        else:
            x_scale = self.input_scale
            xq = (x2.float() / x_scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
        w, w_scale, fast = self.wq.t(), self.w_scale, self.use_fast_accum
        y = torch._scaled_mm(xq, w, x_scale, w_scale, bias=self.bias, out_dtype=x.dtype, use_fast_accum=fast)
        return y.reshape(*x.shape[:-1], y.shape[-1])


def calibrate(module: nn.Module, *inputs: torch.Tensor) -> dict[str, torch.Tensor]:
    """Static input scales for ``module``'s Linears, by module name: amax / 448 of what
    each read in one call on ``inputs``. Linears that read the same tensor (a gated
    MLP's gate and up projections) get the same scale tensor, so that their input is
    quantized once."""
    seen: dict[str, torch.Tensor] = {}
    by_input: dict[int, torch.Tensor] = {}
    hooks = []

    def hook(name):
        def record(mod, args, out):
            x = args[0]
            key = x.data_ptr()
            if key not in by_input:
                by_input[key] = (x.detach().abs().amax().float().clamp_min(1e-12) / E4M3_MAX).reshape(())
            seen[name] = by_input[key]

        return record

    for name, child in module.named_modules():
        if isinstance(child, nn.Linear):
            hooks.append(child.register_forward_hook(hook(name)))
    try:
        with torch.no_grad():
            module(*inputs)
    finally:
        for h in hooks:
            h.remove()
    return seen


def quantized(
    module: nn.Module, scales: dict[str, torch.Tensor] | None = None, prefix: str = "", use_fast_accum: bool = True
) -> nn.Module:
    """``module`` with every nn.Linear replaced by an ``Fp8Linear`` (in place): dynamic,
    or static with the input ``scales`` by module name (``calibrate``)."""
    for name, child in module.named_children():
        path = f"{prefix}{name}"
        if isinstance(child, nn.Linear):
            setattr(module, name, Fp8Linear(child, None if scales is None else scales[path], use_fast_accum))
        else:
            quantized(child, scales, f"{path}.", use_fast_accum)
    return module


#: fp8 recipes of the model rows: ``dynamic`` (row-wise, the input's scale from each
#: call) and ``static`` (tensor-wise, the input's scale calibrated ahead).
RECIPES = ("dynamic", "static")
#: Accumulations of the model rows' GEMMs: ``fast`` (``use_fast_accum=True``, the
#: default of float8 inference recipes) and ``promote`` (``_scaled_mm``'s own default).
ACCUMULATIONS = ("fast", "promote")


def block_name(family: str, size: str, recipe: str = "dynamic", accumulation: str = "fast") -> str:
    """FAMILY:SIZE[:RECIPE[:ACCUMULATION]], the defaults left off from the right, as
    ``--block`` takes it."""
    parts = [family, size]
    if (recipe, accumulation) != ("dynamic", "fast"):
        parts.append(recipe)
    if accumulation != "fast":
        parts.append(accumulation)
    return ":".join(parts)


def block_row(family: str, size: str, recipe: str = "dynamic", accumulation: str = "fast") -> dict:
    """An fp8 model-suite block (a ``transformers`` class for ``hf-*``) quantized by
    ``recipe`` (``RECIPES``): stock max-autotune vs ours on the same quantized block,
    side by side as CUDA graphs, with the unquantized bf16 block compiled by stock
    max-autotune beside them (``bf16_ms``): what the recipe buys over the model it
    replaces (``speedup_vs_bf16``, ours fp8 against it). ``accumulation``
    (``ACCUMULATIONS``): the GEMMs' ``use_fast_accum``, the same on both sides."""
    if recipe not in RECIPES or accumulation not in ACCUMULATIONS:
        raise ValueError(f"fp8 recipe {recipe!r} or accumulation {accumulation!r} not in {RECIPES}, {ACCUMULATIONS}")
    import copy

    from inductor_cutedsl import disable
    from inductor_cutedsl.cli.report import kernel_times
    from inductor_cutedsl.cli.run import compile_options
    from inductor_cutedsl.install import reenabled

    from . import models

    bf16, x = models.make_block(family, size)
    bf16 = bf16.eval()
    scales = calibrate(bf16, x) if recipe == "static" else None
    block = quantized(copy.deepcopy(bf16), scales, use_fast_accum=accumulation == "fast").eval()
    torch.compiler.reset()
    with torch.no_grad():
        ref = block(x)
        compiled, errs = {}, {}
        for label, module in (("stock", block), ("ours", block), ("bf16", bf16)):
            # Ours with the fp8 dual kernel for the gated MLP, on by default or not.
            with reenabled(epilogue_fusion=True, fp8_dual=True):
                if label != "ours":
                    disable()
                compiled[label] = torch.compile(module, options=compile_options())
                if label != "bf16":
                    errs[label] = rel_err(compiled[label](x), ref.double())
        # At each quantization e4m3's coarse step turns last-bit differences of the fp32
        # values into whole-step differences, so any compiled block is a few percent from
        # eager: ours must be as close to it as stock, and neither further than e4m3's
        # own step allows.
        if not (errs["ours"] <= 1.1 * errs["stock"] + 1e-3 and max(errs.values()) < 6e-2):
            raise AssertionError(f"fp8 {family} {size}: rel err vs eager {errs}")
        times = side_by_side({label: graphed(lambda fn=fn: fn(x)) for label, fn in compiled.items()})
        kernels = {label: kernel_times(lambda fn=fn: fn(x), top=8) for label, fn in compiled.items()}
    return {
        "block": block_name(family, size, recipe, accumulation),
        "recipe": recipe,
        "accumulation": accumulation,
        "tokens": x.shape[0] * x.shape[1],
        "rel_err_vs_eager": errs,
        "stock_ms": round(times["stock"], 4),
        "ours_ms": round(times["ours"], 4),
        "bf16_ms": round(times["bf16"], 4),
        "speedup": round(times["stock"] / times["ours"], 4),
        "speedup_vs_bf16": round(times["bf16"] / times["ours"], 4),
        "kernels": kernels,
    }


def block_summary(blocks: list[dict]) -> dict:
    """The fp8 model rows' summary: ``model_speedup_vs_max_autotune`` (stock / ours, the
    geomean over the blocks), ``model_speedup_vs_bf16`` (stock's bf16 model / ours fp8),
    the first block alone under its earlier keys (``block``), and every block."""
    return {
        "model_speedup_vs_max_autotune": round(geomean(b["speedup"] for b in blocks), 4),
        "model_speedup_vs_bf16": round(geomean(b["speedup_vs_bf16"] for b in blocks), 4),
        "block_speedup_vs_max_autotune": blocks[0]["speedup"],
        "block": blocks[0],
        "blocks": blocks,
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", metavar="PATH", default=None, help="where the results are written (default: nowhere)")
    ap.add_argument("--fast-accum", action="store_true", help="use_fast_accum=True on both sides (ours: no promotion)")
    ap.add_argument("--configs", type=int, default=6, help="our configs tried per shape (default: %(default)s)")
    ap.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="processes compiling the candidates (default: the CPU count, %(default)s)",
    )
    ap.add_argument("--shapes", default=None, help="MxNxK,... instead of the default LLM shapes")
    ap.add_argument("--fused", action="store_true", help="also the fused patterns (compiled three ways)")
    ap.add_argument("--fused-only", action="store_true", help="only the fused patterns (and --block)")
    ap.add_argument(
        "--cases",
        default=",".join(FUSED),
        metavar="NAME[,...]",
        help="the fused patterns measured (default: all of them, %(default)s)",
    )
    ap.add_argument("--compile-first", choices=BACKENDS, default="stock", help=COMPILE_FIRST_HELP)
    ap.add_argument(
        "--accuracy",
        action="store_true",
        help=f"also the error against float64 at K in {ACCURACY_KS}, promoting and fast, both sides",
    )
    ap.add_argument("--accuracy-only", action="store_true", help="only the accuracy rows")
    ap.add_argument(
        "--block-only",
        action="store_true",
        help="only the block (--block's, default llama:prefill): stock's fp8 autotuning of 105 Triton "
        "choices per GEMM takes about a minute each",
    )
    ap.add_argument(
        "--block",
        nargs="?",
        const="llama:prefill",
        default=None,
        metavar="FAMILY:SIZE[:RECIPE[:ACCUMULATION]][,...]",
        help=f"also fp8 model-suite blocks, hf-* for transformers classes, RECIPE one of {RECIPES}, ACCUMULATION "
        f"one of {ACCUMULATIONS} (the firsts by default; default when given alone: %(const)s)",
    )
    args = ap.parse_args(argv)
    if args.configs < 1 or args.workers < 1:
        ap.error("--configs and --workers must be at least 1")
    cases = tuple(args.cases.split(","))
    if unknown := sorted(set(cases) - set(FUSED)):
        ap.error(f"--cases: unknown patterns {unknown}, not in {list(FUSED)}")
    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to measure")
        return {}
    stock_as_fair_stock()
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")] if args.shapes else SHAPES
    promote = not args.fast_accum
    if args.block_only:
        args.block = args.block or "llama:prefill"
    args.accuracy |= args.accuracy_only
    torch.manual_seed(0)
    plan = (
        {}
        if args.fused_only or args.block_only or args.accuracy_only
        else {(shape, mode): candidate_specs(*shape, mode, promote, args.configs) for shape in shapes for mode in MODES}
    )
    t0 = time.perf_counter()
    build_many((s for specs in plan.values() for s in specs), default_cache(), args.workers)
    print(f"built {sum(map(len, plan.values()))} specs in {time.perf_counter() - t0:.1f}s", flush=True)
    rows = []
    for ((m, n, k), mode), specs in plan.items():
        row = measure(m, n, k, mode, specs, args.fast_accum)
        rows.append(row)
        if "error" in row:
            print(f"{m}x{n}x{k} {mode}: {row['error']}", flush=True)
            continue
        print(
            f"{m}x{n}x{k} {mode:6s}: ours {row['ours_ms']:.4f} ms ({row['tflops']} TFLOP/s, {row['config']} "
            f"promote {row['promote']}) "
            f"_scaled_mm {row['scaled_mm_ms']:.4f} ms ({row['scaled_mm_tflops']}) -> {row['vs_scaled_mm']:.3f}x",
            flush=True,
        )
    ratios = [r["vs_scaled_mm"] for r in rows if "error" not in r]
    result = {
        **run_info(),
        "use_fast_accum": args.fast_accum,
        "geomean_vs_scaled_mm": round(geomean(ratios), 4) if ratios else None,
        "min_vs_scaled_mm": min(ratios) if ratios else None,
        "rows": rows,
    }
    if (args.fused or args.fused_only) and not (args.block_only or args.accuracy_only):
        fused = fused_rows(FUSED_SHAPES, args.compile_first, cases)
        result.update(
            {
                "fused_geomean_vs_max_autotune": round(geomean(r["vs_max_autotune"] for r in fused), 4),
                "fused_min_vs_max_autotune": min(r["vs_max_autotune"] for r in fused),
                "fused_geomean_free_epilogue_bound": round(geomean(r["free_epilogue_bound"] for r in fused), 4),
                "fused_rows": fused,
            }
        )
        print({k: v for k, v in result.items() if k.startswith("fused_") and k != "fused_rows"}, flush=True)
        write_json(result, args.json)  # now: the block's compiles can run into a call's time limit
    if args.accuracy:
        acc = accuracy_rows()
        result["accuracy_rows"] = acc
        for name in ("scaled_mm", "scaled_mm_fast", "ours", "ours_fast"):
            result[f"accuracy_max_rel_err_{name}"] = max(r[name] for r in acc)
        write_json(result, args.json)
    if args.block:
        blocks = []
        for name in args.block.split(","):
            row = block_row(*name.split(":"))
            blocks.append(row)
            print(
                f"fp8 {row['block']}: stock {row['stock_ms']:.4f} ms, ours {row['ours_ms']:.4f} ms "
                f"-> {row['speedup']:.3f}x; bf16 (stock) {row['bf16_ms']:.4f} ms -> {row['speedup_vs_bf16']:.3f}x",
                flush=True,
            )
            result.update(block_summary(blocks))
            write_json(result, args.json)
    print({k: v for k, v in result.items() if k != "rows"})
    write_json(result, args.json)
    return result


if __name__ == "__main__":
    main()
