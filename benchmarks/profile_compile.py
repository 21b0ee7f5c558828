"""Where the cold compile of the main job's block goes, with and without our backend.

    python benchmarks/profile_compile.py [--tokens 8192] [--top 60]

Compiles the block once with stock max-autotune (as the job does, so process-level
warm-up is shared), then profiles the cold compile with inductor_cutedsl (empty
kernel cache) under cProfile and prints the heaviest functions by cumulative and
own time. cProfile sees the main thread, where Inductor lowers and autotunes.
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
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--top", type=int, default=60)
    args = ap.parse_args()

    import inductor_cutedsl
    from inductor_cutedsl import config
    from inductor_cutedsl.job.model import BlockSize, make_block
    from inductor_cutedsl.job.run import compile_cold

    block, x = make_block(BlockSize(batch=1, seq=args.tokens))
    inductor_cutedsl.disable()
    try:
        _, _, stock_s, _ = compile_cold(block, x)
    finally:
        inductor_cutedsl.enable()
    profile = cProfile.Profile()
    with config.patch(cache_dir=tempfile.mkdtemp(prefix="inductor_cutedsl_profile_")):
        profile.enable()
        _, _, ours_s, _ = compile_cold(block, x)
        profile.disable()
    print(f"cold compile: stock {stock_s:.1f} s, with inductor_cutedsl {ours_s:.1f} s")
    stats = pstats.Stats(profile)
    stats.sort_stats("cumulative").print_stats(args.top)
    stats.sort_stats("tottime").print_stats(args.top // 2)


if __name__ == "__main__":
    main()
