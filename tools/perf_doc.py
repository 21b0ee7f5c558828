"""docs/performance.md, made from the results files in benchmarks/results/: one section
per file, its headline figures with the JSON key each comes from, and its rows.

    python -m tools.perf_doc            # rewrite docs/performance.md
    python -m tools.perf_doc --check    # exit 1 where the page is not what the files give

The page is generated so that it cannot disagree with the results (a CPU test checks
it): change a figure by running its benchmark, the page's layout here, never the page.
Why the figures are what they are is docs/findings.md. A results file without a section
here is an error: a new benchmark's file needs one.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "performance.md"
COMMAND = "python -m tools.perf_doc"

Rows = list[list[Any]]


# ---------------------------------------------------------------------------------------
# Formatting


def get(data: Any, key: str) -> Any:
    """``data``'s value at a dotted ``key`` (``fast_accum.rows``), None where absent."""
    for part in key.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


def fmt(value: Any) -> str:
    """A cell: numbers as measured (at most 4 decimals, 3 significant digits below
    0.01), shapes as M×N×K, None as a dash."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return str(value)
        if value and abs(value) < 0.01:
            return f"{value:.3g}"
        return f"{value:.4f}".rstrip("0").rstrip(".")
    if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        return "×".join(map(str, value))
    if isinstance(value, dict):
        return ", ".join(f"{k} {fmt(v)}" for k, v in value.items())
    return str(value).replace("|", "\\|").replace("\n", " ")


def pair(d: dict | None, a: str = "stock", b: str = "ours") -> str:
    """``d[a] / d[b]``, as the tables write two contenders' figures."""
    return f"{fmt(get(d, a))} / {fmt(get(d, b))}" if d else "-"


def table(headers: list[str], rows: Rows) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(c if isinstance(c, str) else fmt(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def headline(data: dict, figures: list[tuple[str, str]]) -> str:
    """The headline figures: (what, JSON key) each, with the value the file holds."""
    return table(["figure", "value", "JSON key"], [[what, fmt(get(data, key)), f"`{key}`"] for what, key in figures])


# ---------------------------------------------------------------------------------------
# One section per results file


@dataclasses.dataclass
class Section:
    file: str
    title: str
    command: str
    about: str
    figures: list[tuple[str, str]]
    tables: Callable[[dict], list[str]]
    assets: tuple[str, ...] = ()


def host_ratios(row: dict) -> dict:
    """A row's host time, ours / stock, per mode; a file that timed the host only without
    CUDA graphs holds one flat ``host_us``."""
    if "host_ratio" in row:
        return row["host_ratio"]
    host = row.get("host_us") or {}
    if "stock" in host and host.get("stock"):
        return {"max-autotune-no-cudagraphs": round(host["ours"] / host["stock"], 4)}
    return {}


def round_cell(row: dict, figure: str, mode: str, value: object) -> object:
    """A row's ratio ``value`` of ``figure`` in ``mode``, with the 95% interval of its
    rounds' median where the row kept its rounds (``FIGURE_interval``)."""
    interval = row.get(f"{figure}_interval", {}).get(mode)
    return f"{fmt(value)} ({fmt(interval[0])}-{fmt(interval[1])})" if interval and value is not None else value


def host_cell(row: dict, mode: str) -> object:
    """A row's host ratio in ``mode``, with its interval (``round_cell``)."""
    return round_cell(row, "host_ratio", mode, host_ratios(row).get(mode))


def _models(d: dict) -> list[str]:
    rows = []
    for r in d["rows"]:
        if "error" in r:
            rows.append([r["block"], r.get("tokens"), f"FAILED: {fmt(r['error'][:120])}"] + [""] * 8)
            continue
        ours = get(r, "gemm_kernels.ours") or []
        wall = r.get("wall_speedup", {})
        rows.append(
            [
                r["block"],
                r.get("tokens"),
                pair(r.get("gpu_us")),
                r.get("gpu_speedup"),
                r.get("bound"),
                round_cell(r, "wall_speedup", "max-autotune", wall.get("max-autotune")),
                round_cell(r, "wall_speedup", "max-autotune-no-cudagraphs", wall.get("max-autotune-no-cudagraphs")),
                host_cell(r, "max-autotune"),
                host_cell(r, "max-autotune-no-cudagraphs"),
                f"{fmt(sum(k['launches'] for k in ours if k['ours']))} / {fmt(sum(k['launches'] for k in ours))}",
                len(r.get("fused", [])),
            ]
        )
    return [
        table(
            [
                "block (`block`)",
                "tokens",
                "GPU µs stock / ours (`gpu_us`)",
                "GPU × (`gpu_speedup`)",
                "bound (`bound`)",
                "wall × CUDA graphs (`wall_speedup`, 95% interval)",
                "wall × no graphs",
                "host ours / stock, CUDA graphs (`host_ratio`, 95% interval)",
                "host ours / stock, no graphs",
                "our GEMM launches / all (`gemm_kernels.ours`)",
                "epilogues fused (`fused`)",
            ],
            rows,
        )
    ]


def _decode(d: dict) -> list[str]:
    rows = []
    for r in d["rows"]:
        if "error" in r:
            rows.append([r["row"], f"FAILED: {fmt(r['error'][:120])}"] + [""] * 6)
            continue
        rows.append(
            [
                r["row"],
                pair(r.get("token_ms")),
                r.get("decode_speedup"),
                r.get("decode_speedup_bound"),
                pair(r.get("gemm_us")),
                pair(r.get("gemm_bandwidth_fraction")),
                r.get("copy_floor_fraction"),
                r.get("gemm_bytes"),
            ]
        )
    return [
        table(
            [
                "model:batch",
                "ms per token stock / ours (`token_ms`)",
                "stock / ours (`decode_speedup`)",
                "bound: stock with GEMMs at copy bandwidth (`decode_speedup_bound`)",
                "GEMM µs per step stock / ours",
                "GEMM bandwidth / copy bandwidth, stock / ours",
                "its bound: copies of each Linear's size (`copy_floor_fraction`)",
                "GEMM bytes per step",
            ],
            rows,
        ),
        *_decode_sites(d),
    ]


def _decode_sites(d: dict) -> list[str]:
    """Each Linear shape alone (``benchmarks.decode --sites``), where a row has them."""
    rows = [
        [
            r["row"],
            f"{s['n']}x{s['k']}" + (" + bias" if s["bias"] else ""),
            ", ".join(s["modules"][:3]) + (", ..." if len(s["modules"]) > 3 else ""),
            pair(s.get("us")),
            pair(s.get("bandwidth_fraction")),
            ", ".join(s["kernels"]["ours"])[:80],
        ]
        for r in d["rows"]
        for s in r.get("gemm_sites", ())
    ]
    if not rows:
        return []
    return [
        "",
        "Each Linear shape alone (`gemm_sites`): the GEMM after an L2 flush, its µs without the flush's.",
        "",
        table(
            [
                "model:batch",
                "weight N x K",
                "modules",
                "µs stock / ours (`us`)",
                "bandwidth / copy bandwidth, stock / ours",
                "ours' kernels",
            ],
            rows,
        ),
    ]


def _warm_start(d: dict) -> list[str]:
    rows = [
        [
            r["row"],
            get(r, "median_compile_s.fair_stock.cold"),
            get(r, "median_compile_s.fair_stock.warm"),
            get(r, "median_compile_s.ours.cold"),
            get(r, "median_compile_s.ours.warm"),
            r.get("cold_ratio_vs_stock"),
            r.get("cold_ratio_less_coordesc"),
            r["warm_start_ratio_vs_stock"],
            r["warm_start_ratio_vs_cold"],
            r["warm_cutedsl_builds"],
            r["warm_our_measurements"],
        ]
        for r in d["rows"]
    ]
    return [
        table(
            [
                "row",
                "fair stock cold s",
                "fair stock warm s",
                "ours cold s",
                "ours warm s",
                "ours cold / stock cold (`cold_ratio_vs_stock`)",
                "the same, less coordinate descent (`cold_ratio_less_coordesc`)",
                "ours warm / stock warm (`warm_start_ratio_vs_stock`)",
                "ours warm / cold (`warm_start_ratio_vs_cold`)",
                "kernels built warm",
                "our measurements warm",
            ],
            rows,
        )
    ] + [_named_phases(r) for r in d["rows"] if r.get("named_phases_median_s")]


def _named_phases(r: dict) -> str:
    """Where a warm-start row's seconds go, per named phase (``benchmarks.compile.NAMED_PHASES``)."""
    named = r["named_phases_median_s"]
    columns = [(side, start) for start in ("cold", "warm") for side in ("fair_stock", "ours")]
    labels = list(dict.fromkeys(label for side, start in columns for label in named.get(side, {}).get(start, {})))
    rows = [[label] + [named.get(side, {}).get(start, {}).get(label) for side, start in columns] for label in labels]
    return f"{r['row']}, median seconds per phase:\n\n" + table(
        ["phase"] + [f"{side.replace('_', ' ')} {start}" for side, start in columns], rows
    )


def _compile(d: dict) -> list[str]:
    rows = [
        [
            r["row"],
            fmt(r["compiles"]),
            r["median_compile_s"].get("fair_stock"),
            r["median_compile_s"].get("ours"),
            r["compile_ratio"],
            r["median_compile_s"].get("ours_warm_kernels"),
            r["compile_ratio_warm_kernels"],
            r["median_compile_s"].get("default_stock"),
            r["median_cutedsl_builds"].get("ours"),
            r["process_ratio"],
            r.get("runtime_ratio"),
            r.get("runtime_gpu_ratio"),
        ]
        for r in d["rows"]
    ]
    return [
        table(
            [
                "row",
                "compiles (`compiles`)",
                "fair stock s",
                "ours s",
                "ours / fair stock (`compile_ratio`)",
                "ours, warm kernels s",
                "warm / fair stock (`compile_ratio_warm_kernels`)",
                "default stock s",
                "kernels ours built",
                "process ratio (`process_ratio`)",
                "step time stock / ours (`runtime_ratio`)",
                "step kernel time stock / ours (`runtime_gpu_ratio`)",
            ],
            rows,
        )
    ]


def _gemm(d: dict) -> list[str]:
    rows = [
        [r["shape"], f"`{r['config']}`", r["ours_ms"], r["cublas_ms"], r["vs_cublas"], r["tflops"], r["cublas_tflops"]]
        for r in d["rows"]
    ]
    return [
        table(
            [
                "M×N×K",
                "config",
                "ours ms",
                "cuBLAS ms",
                "cuBLAS / ours (`vs_cublas`)",
                "TFLOP/s ours",
                "TFLOP/s cuBLAS",
            ],
            rows,
        )
    ]


def _epilogue(d: dict) -> list[str]:
    rows = [
        [
            r["pattern"],
            r["shape"],
            r["eager_ms"],
            r["cublas_gemm_ms"],
            r["stock_ms"],
            r["ours_ms"],
            r["vs_max_autotune"],
            r["free_epilogue_bound"],
            len(r["fused_into_cutedsl"]),
            ", ".join(s["way"] for s in r.get("selection", [])) or "-",
        ]
        for r in d["rows"]
    ]
    return [
        table(
            [
                "pattern",
                "M×N×K",
                "eager ms",
                "cuBLAS GEMM alone ms",
                "stock ms",
                "ours ms",
                "stock / ours (`vs_max_autotune`)",
                "bound (`free_epilogue_bound`)",
                "fused into ours",
                "selection's way",
            ],
            rows,
        )
    ]


def _fp8_rows(rows: list[dict]) -> str:
    out = [
        [
            r["shape"],
            r["mode"],
            f"`{r.get('config', '-')}`",
            r.get("promote"),
            r.get("ours_ms"),
            r.get("scaled_mm_ms"),
            r.get("vs_scaled_mm"),
            r.get("tflops"),
            r.get("scaled_mm_tflops"),
        ]
        for r in rows
    ]
    return table(
        [
            "M×N×K",
            "scales",
            "config",
            "promotion",
            "ours ms",
            "`_scaled_mm` ms",
            "`_scaled_mm` / ours (`vs_scaled_mm`)",
            "TFLOP/s ours",
            "TFLOP/s `_scaled_mm`",
        ],
        out,
    )


def _fp8(d: dict) -> list[str]:
    out = ["Promoting the fp32 partial sums (`rows`):", _fp8_rows(d["rows"])]
    if get(d, "fast_accum.rows"):
        out += ["Fast accumulation on both sides (`fast_accum.rows`):", _fp8_rows(d["fast_accum"]["rows"])]
    if d.get("fused_rows"):
        rows = [
            [
                r.get("case") or r.get("pattern"),
                r["shape"],
                r["eager_ms"],
                r["stock_ms"],
                r["ours_ms"],
                r["vs_max_autotune"],
                r["free_epilogue_bound"],
            ]
            for r in d["fused_rows"]
        ]
        out += [
            "Fused patterns, row-wise scales, CUDA graphs (`fused_rows`):",
            table(["pattern", "M×N×K", "eager ms", "stock ms", "ours ms", "stock / ours", "bound"], rows),
        ]
    if d.get("accuracy_rows"):
        ways = ("scaled_mm", "ours", "scaled_mm_fast", "ours_fast")
        out += [
            "Relative error against float64 of the dequantized operands, M = N = 1024, row-wise "
            "scales, bf16 output (`accuracy_rows`):",
            table(
                ["K", "`_scaled_mm`", "ours", "`_scaled_mm`, fast accumulation", "ours, fast accumulation"],
                [[r["k"], *(r[w] for w in ways)] for r in d["accuracy_rows"]],
            ),
        ]
    blocks = d.get("blocks") or ([d["block"]] if d.get("block") else [])
    if blocks:
        out += [
            "Model-suite blocks with every Linear quantized (`blocks`; recipe `dynamic`: row-wise, `static`: "
            "tensor-wise, the input's scale calibrated ahead), and the bf16 block compiled by stock max-autotune:",
            table(
                [
                    "block",
                    "GEMMs' accumulation",
                    "tokens",
                    "stock ms",
                    "ours ms",
                    "stock / ours (`speedup`)",
                    "bf16 stock ms",
                    "bf16 / ours fp8 (`speedup_vs_bf16`)",
                    "rel. error vs eager, stock / ours",
                ],
                [
                    [
                        b["block"],
                        b.get("accumulation", "promote"),
                        b["tokens"],
                        b["stock_ms"],
                        b["ours_ms"],
                        b["speedup"],
                        b.get("bf16_ms"),
                        b.get("speedup_vs_bf16"),
                        pair(b["rel_err_vs_eager"]),
                    ]
                    for b in blocks
                ],
            ),
        ]
    prof = d.get("profile")
    if prof:
        m, n, k = prof["shape"]
        out += [
            f"One launch of each way under Nsight Compute at {m}×{n}×{k}, {prof['mode']}-wise scales, on an "
            f"{prof['device']} (`profile`; its clocks locked, caches flushed: times are not the rows' above). "
            "Busiest pipeline: Nsight Compute's, with its share of the elapsed cycles (the shared pipe is "
            "dominated by the tensor pipe). DRAM and L2: the share of their peak throughput the launch used; "
            "IPC: instructions issued per active cycle. Promotion per k-tile: the way's time over its own "
            "tile's fast kernel, per k-tile one SM runs, beside that fast kernel's time per k-tile:",
            table(
                [
                    "way",
                    "kernel",
                    "µs",
                    "busiest pipeline",
                    "busy %",
                    "DRAM %",
                    "L2 %",
                    "IPC",
                    "promotion ns per k-tile",
                    "fast ns per k-tile",
                ],
                [
                    [
                        f"`{r['way']}`",
                        f"`{r['kernel'][:48]}`",
                        r.get("us"),
                        r.get("pipe"),
                        r.get("pipe_pct"),
                        r.get("dram_pct"),
                        r.get("l2_pct"),
                        r.get("ipc"),
                        r.get("k_tile_ns"),
                        r.get("k_tile_mma_ns"),
                    ]
                    for r in prof["rows"]
                ],
            ),
        ]
    return out


def _launch(d: dict) -> list[str]:
    rows = [
        [
            r["shape"],
            f"{r['m']}×{r['n']}×{r['k']} {r['op']}",
            r["host_us_ours"],
            r["host_us_triton"],
            r["host_us_aten"],
            r["launch_ratio_vs_triton"],
            r["launch_ratio_vs_aten"],
            pair(r.get("breakdown_ours"), "host_us_launcher", "host_us_c_entry"),
            get(r, "breakdown_ours.host_us_torch_mm"),
        ]
        for r in d["rows"]
    ]
    return [
        table(
            [
                "shape",
                "M×N×K",
                "host µs ours",
                "Triton",
                "ATen",
                "ours / Triton (`launch_ratio_vs_triton`)",
                "ours / ATen",
                "our launcher / its C entry alone, µs",
                "eager torch.mm µs",
            ],
            rows,
        )
    ]


def _distributed(d: dict) -> list[str]:
    rows = [
        [
            r["wrap"],
            pair(r["step_ms"]),
            r["speedup"],
            r["loss_rel_diff"],
            r["kernels_built"],
            r["kernels_built_twice"],
            r.get("cold_compile_ratio"),
        ]
        for r in d["rows"]
    ]
    return [
        table(
            [
                "wrap",
                "step ms stock / ours (`step_ms`)",
                "stock / ours (`speedup`)",
                "loss rel. diff",
                "kernels built",
                "built twice",
                "cold compile ours / stock",
            ],
            rows,
        )
    ]


def _main_job(d: dict) -> list[str]:
    rows = [
        [
            g["op"],
            g["shape"],
            fmt(g["candidates"]),
            fmt(g["best_ms"]),
            g["winner"],
            g["winner_ms"],
            g["stock_winner"],
            g["stock_ms"],
        ]
        for g in d["gemms"]
    ]
    return [
        f"Block: {fmt(d['model'])} (`model`).",
        table(
            ["op", "M×N×K", "candidates", "fastest per backend, ms", "winner", "ms", "stock's winner", "stock ms"], rows
        ),
        "![stock and ours per GEMM and per block](../benchmarks/results/h200-model.png)",
    ]


def _fuzz(d: dict) -> list[str]:
    cats = [
        [name, c["items"], c["cases"], c["checked"], c["wrong"], c["crashes"], c["unexplained"], c["seconds"]]
        for name, c in d["categories"].items()
    ]
    failures = [[f["kind"], f["what"]] for f in d["failures"]]
    return [
        table(
            ["kind (`categories`)", "items", "cases", "checked", "wrong", "crashes", "unexplained", "job seconds"], cats
        ),
        "Refusals by the rule they name (`refused_by_rule`): " + fmt(d["refused_by_rule"]) + ".",
        "Failures (`failures`, the first 40; each item's detail is in the file):",
        table(["kind", "item"], failures),
    ]


def _inductor_tests(d: dict) -> list[str]:
    modes = [[mode, fmt(m["counts"]), m["complete"], m["seconds"]] for mode, m in d["modes"].items()]
    why = [[f"`{e['test']}`", e["why"]] for e in d["comparison"]["expected_differences"]]
    return [
        table(["mode", "outcomes (`modes.MODE.counts`)", "complete", "seconds"], modes),
        "Tests that fail with ours by design (`comparison.expected_differences`):",
        table(["test", "why"], why),
    ]


SECTIONS = [
    Section(
        "h200-models.json",
        "Model suite",
        "python -m benchmarks.models --json benchmarks/results/h200-models.json",
        "Transformer blocks of seven `transformers` model classes (small: at most 256 tokens; prefill: about "
        "4096), inference and training steps, compiled with stock max-autotune and with ours in one process and "
        "timed interleaved on the same tensors. GPU = the sum of kernel times under the profiler, in the mode "
        "`profiled_mode` names (`max-autotune`, with CUDA graphs); bound = stock's GPU time over stock's less the "
        "pointwise kernels that read a GEMM's output (what fused epilogues could gain at most). Speed ratios are "
        "stock / ours: above 1, ours is faster. Host = the host's time per call or step, enqueued behind a busy "
        "GPU, as ours / stock: above 1, ours costs the host more. Wall and host figures are the medians of their "
        "interleaved rounds' ratios, each beside the 95% interval of that median. Compile time is the next "
        "section's.",
        [
            ("GPU time, geomean", "gpu_speedup_geomean"),
            ("GPU time, lowest", "gpu_speedup_min"),
            ("fusion bound, geomean", "gpu_bound_geomean"),
            ("wall time with CUDA graphs, geomean", "wall_speedup_geomean_cudagraphs"),
            ("wall time with CUDA graphs, lowest", "wall_speedup_min_cudagraphs"),
            ("wall time without CUDA graphs, geomean", "wall_speedup_geomean_no_cudagraphs"),
            ("wall time without CUDA graphs, lowest", "wall_speedup_min_no_cudagraphs"),
            (
                "wall time with CUDA graphs, lowest high end of a 95% interval",
                "wall_speedup_interval_high_min_cudagraphs",
            ),
            (
                "wall time without CUDA graphs, lowest high end of a 95% interval",
                "wall_speedup_interval_high_min_no_cudagraphs",
            ),
            ("host time ours / stock, highest", "host_ratio_max"),
            ("host time ours / stock, geomean", "host_ratio_geomean"),
            ("host time ours / stock, highest low end of a 95% interval", "host_ratio_interval_low_max"),
        ],
        _models,
    ),
    Section(
        "h200-compile.json",
        "Cold compile time",
        "python -m benchmarks.compile --default-stock --warm-kernels --json benchmarks/results/h200-compile.json",
        "Each compile in a fresh process with empty Inductor, Triton and kernel caches, sides alternating; "
        "fair stock is stock with Triton's ptxas aligned to its compile workers' (as ours runs). Ratios are "
        "ours / fair stock of per-row medians: above 1, ours compiles slower.",
        [
            ("ours / fair stock, geomean", "compile_ratio_geomean"),
            ("ours / fair stock, highest", "compile_ratio_max"),
            ("ours with warm kernels / fair stock, geomean", "compile_ratio_warm_kernels_geomean"),
            ("ours / default stock, geomean", "compile_ratio_vs_default_stock_geomean"),
            ("whole processes, geomean", "process_ratio_geomean"),
            ("compiled step time, fair stock / ours, geomean", "runtime_ratio_geomean"),
            ("compiled step's kernel time, fair stock / ours, geomean", "runtime_gpu_ratio_geomean"),
            ("compiles per side and row", "pairs"),
            ("mode", "mode"),
        ],
        _compile,
    ),
    Section(
        "h200-decode.json",
        "LLM decode",
        "python -m benchmarks.decode --json benchmarks/results/h200-decode.json",
        "transformers causal LMs (Llama 3.2 1B and Qwen2 1.5B dimensions, a few layers and the LM head) "
        "decoding one token per sequence against a static KV cache at a fixed context, compiled with "
        "max-autotune (CUDA graphs), stock and ours in one process, interleaved. The bound: the step's "
        "Linear layers' least bytes over its GEMM kernels' time, against the measured copy bandwidth.",
        [
            ("stock / ours per token, geomean", "decode_speedup_geomean"),
            ("stock / ours per token, lowest", "decode_speedup_min"),
            ("bound: stock's step with its GEMMs at copy bandwidth, geomean", "decode_speedup_bound_geomean"),
            ("our GEMMs' bandwidth / copy bandwidth, geomean", "gemm_bandwidth_fraction_geomean"),
            ("stock GEMMs' bandwidth / copy bandwidth, geomean", "stock_gemm_bandwidth_fraction_geomean"),
            ("bound: copies of each Linear's size / copy bandwidth, geomean", "copy_floor_fraction_geomean"),
            (
                "bound: stock's step with its GEMMs as fast as those copies, geomean",
                "decode_speedup_copy_floor_bound_geomean",
            ),
            (
                "each Linear shape alone, ours: bandwidth / copy bandwidth, geomean",
                "site_bandwidth_fraction_geomean.ours",
            ),
            (
                "each Linear shape alone, stock: bandwidth / copy bandwidth, geomean",
                "site_bandwidth_fraction_geomean.stock",
            ),
            ("copy bandwidth, GB/s", "copy_bandwidth_gbps"),
        ],
        _decode,
    ),
    Section(
        "h200-warm-start.json",
        "Warm starts from cache artifacts",
        "python -m benchmarks.warm_start --json benchmarks/results/h200-warm-start.json",
        "A machine fed by another: each compile in a fresh process with empty caches, the warm one after "
        "loading the artifacts its side's cold compile saved (`torch.compiler.save_cache_artifacts()`). "
        "Ratios of per-row medians: above 1, ours is slower.",
        [
            ("CuteDSL kernels built in warm starts", "warm_start_cutedsl_builds"),
            ("our measurements in warm starts", "warm_start_our_measurements"),
            ("ours cold / fair stock cold, geomean", "cold_ratio_vs_stock_geomean"),
            ("ours cold / fair stock cold, worst", "cold_ratio_vs_stock_max"),
            ("ours warm / stock warm, geomean", "warm_start_ratio_vs_stock_geomean"),
            ("ours warm / ours cold, geomean", "warm_start_ratio_vs_cold_geomean"),
            ("stock warm / stock cold, geomean", "stock_warm_ratio_vs_cold_geomean"),
        ],
        _warm_start,
    ),
    Section(
        "h200-gemm.json",
        "Plain GEMM against cuBLAS",
        "python -m benchmarks.gemm --json benchmarks/results/h200-gemm.json",
        "bf16 C = A·Wᵀ (the nn.Linear layout): the best config of a small per-shape search, then ours and "
        "cuBLAS in interleaved rounds (medians of `triton.testing.do_bench`).",
        [
            ("cuBLAS / ours, geomean", "geomean_vs_cublas"),
            ("cuBLAS / ours, lowest", "min_vs_cublas"),
            ("µs per tiny launch, back to back", "launch_overhead_us"),
            ("µs of host time per tiny launch", "enqueue_us"),
            ("seconds compiling every candidate", "compile_wall_s"),
        ],
        _gemm,
    ),
    Section(
        "h200-epilogue.json",
        "GEMM + epilogue",
        "python -m benchmarks.epilogue --json benchmarks/results/h200-epilogue.json",
        "Eager, stock max-autotune and ours with epilogue fusion, each checked against eager and timed as "
        "CUDA graph replays side by side; bound = stock / cuBLAS's GEMM alone (an epilogue costing nothing "
        "on a GEMM as fast as cuBLAS).",
        [
            ("stock / ours, geomean", "geomean_vs_max_autotune"),
            ("stock / ours, lowest", "min_vs_max_autotune"),
            ("bound, geomean", "geomean_free_epilogue_bound"),
        ],
        _epilogue,
    ),
    Section(
        "h200-fp8.json",
        "fp8 GEMMs against `torch._scaled_mm`",
        "python -m benchmarks.fp8 --fused --block llama:prefill,hf-llama:prefill --accuracy "
        "--json benchmarks/results/h200-fp8.json",
        "e4m3 A and B, bf16 output, tensor-wise and row-wise scales; ours' shortlisted configs in every "
        "promotion mode they have registers for, the winner timed interleaved with `_scaled_mm` (cuBLASLt).",
        [
            ("`_scaled_mm` / ours, geomean", "geomean_vs_scaled_mm"),
            ("`_scaled_mm` / ours, lowest", "min_vs_scaled_mm"),
            ("fast accumulation, geomean", "fast_geomean_vs_scaled_mm"),
            ("fast accumulation, lowest", "fast_min_vs_scaled_mm"),
            ("fused patterns, geomean", "fused_geomean_vs_max_autotune"),
            ("fused patterns, lowest", "fused_min_vs_max_autotune"),
            ("fused patterns' bound, geomean", "fused_geomean_free_epilogue_bound"),
            ("quantized block, stock / ours", "block_speedup_vs_max_autotune"),
            ("quantized models, stock / ours, geomean", "model_speedup_vs_max_autotune"),
            ("quantized models, stock's bf16 / ours fp8, geomean", "model_speedup_vs_bf16"),
            ("relative error, ours promoting, highest", "accuracy_max_rel_err_ours"),
            ("relative error, `_scaled_mm` promoting, highest", "accuracy_max_rel_err_scaled_mm"),
        ],
        _fp8,
    ),
    Section(
        "h200-launch.json",
        "Host time per launch",
        "python -m benchmarks.launch --json benchmarks/results/h200-launch.json",
        "One GEMM compiled three ways (`max-autotune-no-cudagraphs`, backends forced to ours, Triton, ATen); "
        "host µs per call while the GPU is kept busy, the three alternating over rounds (medians).",
        [
            ("ours / Triton, highest", "launch_ratio_vs_triton_max"),
            ("ours / Triton, geomean", "launch_ratio_vs_triton_geomean"),
            ("ours / ATen, highest", "launch_ratio_vs_aten_max"),
            ("every compile ran the kernel it was forced to", "all_ran_expected"),
            ("the GPU stayed busy", "gpu_stayed_busy"),
            ("calls per round", "calls"),
            ("rounds", "rounds"),
        ],
        _launch,
    ),
    Section(
        "h200-distributed.json",
        "Data-parallel and sharded training",
        "python -m benchmarks.distributed --json benchmarks/results/h200-distributed.json",
        "DDP and FSDP2 (`fully_shard`) training steps of a model-suite block at world size 2, stock and ours "
        "side by side, and each rank's cold compile.",
        [("ranks", "world_size"), ("GPUs", "gpus"), ("process group backend", "backend"), ("block", "block")],
        _distributed,
    ),
    Section(
        "h200-model.json",
        "The main job",
        "python -m inductor_cutedsl --json benchmarks/results/h200-model.json --png benchmarks/results/h200-model.png",
        "A LLaMA-style block compiled with stock max-autotune and with ours, checked against eager; per GEMM "
        "each backend's fastest candidate after our side-by-side re-timing.",
        [
            ("block, stock / ours", "model_speedup_vs_max_autotune"),
            ("block ms", "model_ms"),
            ("cold compile, ours / stock", "compile_ratio_vs_max_autotune"),
            ("compile seconds", "compile_s"),
            ("CuteDSL kernels built in the cold compile", "cold_cutedsl_compiles"),
            ("CuteDSL kernels built with a warm kernel cache", "warm_cutedsl_compiles"),
            ("epilogue fusion", "epilogue_fusion"),
        ],
        _main_job,
        assets=("h200-model.png",),
    ),
    Section(
        "h200-fuzz.json",
        "Fuzz",
        "python -m benchmarks.fuzz --json benchmarks/results/h200-fuzz.json",
        "Seeded fuzzing against float64 with NaN-poisoned outputs, strict: runtime cases over the kernel specs "
        "the shortlists offer and the corners, random Inductor programs and model-shaped programs (backward, "
        "dynamic token counts, CUDA graphs); every refusal classified by the rule it names.",
        [
            ("runtime cases", "runtime_cases"),
            ("runtime cases checked (the rest refused, each by its rule)", "runtime_checked"),
            ("compiled programs", "compiled_programs"),
            ("model programs", "model_programs"),
            ("wrong results", "wrong"),
            ("crashes", "crashes"),
            ("unexplained refusals", "unexplained"),
            ("failures stock Inductor shows too", "stock_failures"),
        ],
        _fuzz,
    ),
    Section(
        "h200-inductor-tests.json",
        "PyTorch's Inductor GEMM tests",
        "python -m tools.inductor_tests --json benchmarks/results/h200-inductor-tests.json",
        "PyTorch's own `test_max_autotune.py` and `test_select_algorithm.py`, stock and with ours, compared "
        "test by test; only tests with an outcome in both modes are compared.",
        [
            ("tests compared", "comparison.compared"),
            ("pass stock, fail ours, unexplained", "comparison.regressions"),
            ("fail ours by design", "comparison.expected_differences"),
            ("failed ours once, passed another run", "comparison.flaky_ours"),
            ("pass ours, fail stock", "comparison.passes_ours_fails_stock"),
            ("fail both", "comparison.failing_both"),
        ],
        _inductor_tests,
    ),
]


def _counted(data: dict, section: Section) -> dict:
    """``data`` with each list-valued headline figure (a list of tests, say) replaced by
    its length."""
    out = copy.deepcopy(data)
    for _, key in section.figures:
        if isinstance(get(out, key), list):
            *path, last = key.split(".")
            parent = get(out, ".".join(path)) if path else out
            parent[last] = len(parent[last])
    return out


def render(results: Path = RESULTS) -> str:
    known = {s.file for s in SECTIONS} | {a for s in SECTIONS for a in s.assets}
    unknown = sorted(p.name for p in results.iterdir() if p.name not in known)
    if unknown:
        raise SystemExit(f"results without a section in tools/perf_doc.py: {', '.join(unknown)}")
    parts = [
        "# Performance",
        f"Generated by `{COMMAND}` from the results files in `benchmarks/results/`: a figure changes by running "
        "its benchmark, never by editing this page (a CPU test fails where the two disagree). What the figures "
        "mean, and why each method is as it is, is in [findings.md](findings.md).",
    ]
    for s in SECTIONS:
        parts.append(f"## {s.title} (`{s.file}`)")
        path = results / s.file
        if not path.exists():
            parts.append(f"Not measured yet: `{s.command}`.")
            continue
        data = json.loads(path.read_text())
        where = f" Measured on an {data['device']} with torch {data['torch']}." if data.get("device") else ""
        parts.append(f"{s.about}{where}\n\n`{s.command}`")
        if data.get("source"):  # a result put together by hand says how
            parts.append(f"How this file was made (`source`): {data['source']}.")
        parts.append(headline(_counted(data, s), s.figures))
        parts += s.tables(data)
    return "\n\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if the page is not up to date")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        if PAGE.read_text() != text:
            print(f"{PAGE.relative_to(ROOT)} is not what the results give: run {COMMAND}")
            return 1
        return 0
    PAGE.write_text(text)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
