"""Benchmarks the command line runs, and what every benchmark reports with.

Not part of what a compile uses. ``report`` (results: side-by-side medians, accuracy,
result files) sits below the main job (``job/``), which reports with it; ``gemm`` (ours
vs cuBLAS, ``--gemm-bench``) and ``epilogue`` (GEMM + epilogue patterns, stock vs ours)
sit above it. The scripts in ``benchmarks/`` and the probes import from here.
"""
