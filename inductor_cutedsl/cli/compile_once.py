"""One cold compile of the block in a fresh process:
``python -m inductor_cutedsl.cli.compile_once '{"size": {...}, "backend": "stock"|"ours"}'``.

A fresh process per measurement, as a user's first run is: compiling stock and ours
one after the other in one process with Inductor's caches off would charge the
second one for Triton recompiles (each compile gets a new cache directory while
Inductor's compile workers keep the old one). Prints one JSON line.
"""

from __future__ import annotations

import json
import sys

from .. import disable
from ..lowering import template
from ..runtime import compiler
from ..runtime.launch import default_cache
from .block import BlockSize, make_block
from .run import compile_cold, print_report_and_exit


def main() -> None:
    job = json.loads(sys.argv[1])
    if job["backend"] == "stock":
        disable()  # also before any compile starts our workers: none run beside stock
    block, x = make_block(BlockSize(**job["size"]))
    _, _, seconds, _ = compile_cold(block, x)
    print_report_and_exit(
        {
            "compile_s": seconds,
            "cutedsl_compiles": default_cache().builds,
            "cutedsl_built": default_cache().built,
            "waiting_for_builds_s": compiler.stats["wait_s"],
            "benchmarking_cutedsl_s": template.stats["benchmark_s"],
        }
    )


if __name__ == "__main__":
    main()
