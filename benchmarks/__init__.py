"""Benchmarks of inductor_cutedsl against stock Inductor on an H200, run from the
repository root as ``python -m benchmarks.NAME`` (``--help`` says what each measures).
Each writes a JSON file to ``benchmarks/results/``; ``python -m tools.perf_doc`` makes
docs/performance.md from those files. ``harness`` holds what the benchmarks share."""
