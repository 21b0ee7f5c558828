"""Second-process compile of the default block (``python -m inductor_cutedsl.job.warm SIZE_JSON``).

Prints one JSON line: compile seconds and how many CuteDSL kernels it compiled.
"""
from __future__ import annotations

import json
import sys

from .. import enable
from ..runtime.launch import default_cache
from .model import BlockSize, make_block
from .run import compile_cold


def main() -> None:
    enable()
    block, x = make_block(BlockSize(**json.loads(sys.argv[1])))
    _, _, seconds, _ = compile_cold(block, x)
    print(json.dumps({"compile_s": seconds, "cutedsl_compiles": default_cache().builds}))


if __name__ == "__main__":
    main()
