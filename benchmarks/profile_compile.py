"""Where the cold compile of the main job's block goes (one compile per fresh process).

    python benchmarks/profile_compile.py [--stock] [--tokens 8192] [--top 60]

Profiles one cold compile of the block (Inductor's caches off; with inductor_cutedsl
an empty kernel cache, unless ``--stock``) under cProfile and prints the heaviest
functions by cumulative and own time. cProfile sees the main thread, where Inductor
lowers and autotunes. Run it once per backend: a second compile in the same process
with Inductor's caches off recompiles every Triton kernel in-process.
"""
import argparse
import cProfile
import os
import pstats
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--stock", action="store_true", help="profile stock max-autotune instead")
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--top", type=int, default=60)
    args = ap.parse_args()

    import inductor_cutedsl
    from inductor_cutedsl import config
    from inductor_cutedsl.job.model import BlockSize, make_block
    from inductor_cutedsl.job.run import compile_cold

    block, x = make_block(BlockSize(batch=1, seq=args.tokens))
    if args.stock:
        inductor_cutedsl.disable()
    profile = cProfile.Profile()
    with config.patch(cache_dir=tempfile.mkdtemp(prefix="inductor_cutedsl_profile_")):
        profile.enable()
        _, _, seconds, _ = compile_cold(block, x)
        profile.disable()
    print(f"cold compile ({'stock' if args.stock else 'with inductor_cutedsl'}): {seconds:.1f} s")
    stats = pstats.Stats(profile)
    stats.sort_stats("cumulative").print_stats(args.top)
    stats.sort_stats("tottime").print_stats(args.top // 2)


if __name__ == "__main__":
    main()
