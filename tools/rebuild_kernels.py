"""Build the GPU suite's kernels from its recorded specs, on any machine, into the archive
``tools/gpu_run.sh`` carries to the GPU.

    python -m tools.rebuild_kernels .device/test-specs.jsonl --archive .device/test-kernels.tar.xz

A kernel's cache key holds the digest of our kernel sources, so a change to a kernel makes
every carried kernel miss, and the next GPU suite would build them all on the device's
time. The suite records the spec of every kernel it keys (``tests/helpers.py``,
``record_specs``; ``tools/gpu_run.sh tests`` writes them to ``$OUT/test-specs.jsonl``);
this builds each again from the current sources (CuTe DSL compiles for sm_90a without a
GPU) and packs the objects and their records as the GPU run packs its own. Specs that no
longer build (a rule has changed) are listed and left out.
"""

from __future__ import annotations

import argparse
import os
import sys
import tarfile
import tempfile
import time
from pathlib import Path


def read_specs(paths: list[str]) -> list:
    """The distinct specs of these JSON-lines files, in the order first met."""
    from inductor_cutedsl.runtime.spec import KernelSpec

    lines: dict[str, None] = {}
    for path in paths:
        for line in Path(path).read_text().splitlines():
            if line.strip():
                lines[line.strip()] = None
    return [KernelSpec.from_json(line) for line in lines]


def rebuild(specs: list, archive: Path, workers: int) -> tuple[int, list[str]]:
    """Build ``specs`` into a fresh cache and pack it into ``archive``; returns (kernels
    packed, descriptions of the specs that failed)."""
    from inductor_cutedsl.runtime import KernelCache
    from inductor_cutedsl.runtime.compiler import build_async, wait

    failed = []
    with tempfile.TemporaryDirectory() as root:
        os.chmod(root, 0o700)  # a kernel cache loads code only from a directory no one else can write
        cache = KernelCache(root)
        futures = [(spec, build_async(spec, cache, workers)) for spec in specs]
        for spec, future in futures:
            try:
                wait([future])
            except Exception as exc:
                failed.append(f"{spec.describe()}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
        files = sorted(p for p in Path(root).iterdir() if p.suffix in (".o", ".json"))
        archive.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive, "w:xz") as tar:
            for p in files:
                tar.add(p, arcname=f"./{p.name}")
    return sum(p.suffix == ".o" for p in files), failed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("specs", nargs="+", help="JSON-lines files of kernel specs (test-specs.jsonl)")
    ap.add_argument("--archive", required=True, help="the archive to write (.tar.xz)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="build processes (default: all cores)")
    args = ap.parse_args(argv)
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
    specs = read_specs(args.specs)
    t0 = time.perf_counter()
    packed, failed = rebuild(specs, Path(args.archive), args.workers)
    for line in failed:
        print(f"not built: {line}")
    print(f"{packed} kernels of {len(specs)} specs in {args.archive} ({time.perf_counter() - t0:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
