"""GEMM + epilogue benchmark, eager vs stock max-autotune vs ours: see inductor_cutedsl/bench/epilogue.py.

    python benchmarks/epilogue.py --json benchmarks/results/h200-epilogue.json
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from inductor_cutedsl.bench.epilogue import main  # noqa: E402

if __name__ == "__main__":
    main()
