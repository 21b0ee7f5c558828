"""Plain GEMM benchmark, ours vs cuBLAS: see inductor_cutedsl/bench/gemm.py.

    python benchmarks/gemm.py --json benchmarks/results/h200-gemm.json
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from inductor_cutedsl.bench.gemm import main  # noqa: E402

if __name__ == "__main__":
    main()
