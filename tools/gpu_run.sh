#!/usr/bin/env bash
# Runs the GPU tests or one benchmark on the GPU machine, from the repository root, with
# the CuTe DSL bundle of .device/ (set up as ../shared/device/README.md says). Logs and
# result files go to $OUT, the folder that comes back.
#
#   bash tools/gpu_run.sh tests [PYTEST ARGS]     the GPU tests (-m gpu -n 12 -v), log $OUT/gpu-tests.log, failures last,
#                                                 the kernels they built in $OUT/test-kernels.tar.xz (carry it back
#                                                 in .device/ and the next call loads them instead of building) and
#                                                 their specs in $OUT/test-specs.jsonl (carry it too: after a kernel
#                                                 change, python -m tools.rebuild_kernels builds them again on CPU);
#                                                 TESTS="tests/test_a.py ..." runs those files only;
#                                                 SHARD=I/N runs the I-th of N shares of the test files
#                                                 (round robin in name order): with no kernels carried
#                                                 the suite takes 340-580 s, SHARD=1/2 and 2/2 two calls;
#                                                 with them carried, one call (CONTRIBUTING.md)
#   bash tools/gpu_run.sh bench NAME [ARGS]       python -m benchmarks.NAME ARGS --json $OUT/h200-NAME.json,
#                                                 log $OUT/NAME.log; a benchmark that times kernels, not
#                                                 compiles (KERNEL_BENCHES), loads the kernels of
#                                                 .device/bench-kernels.tar.xz and returns its own
#                                                 in $OUT/bench-kernels.tar.xz (carry it back)
#   bash tools/gpu_run.sh job [ARGS]              the main job (python -m inductor_cutedsl), JSON and PNG in $OUT
#   bash tools/gpu_run.sh inductor-tests [ARGS]   python -m tools.inductor_tests ARGS --json $OUT/inductor-tests.json
#
# From the device tool, e.g.:
#   run(command="bash tools/gpu_run.sh bench gemm", carry=[".device"], timeout_s=600)
#   run(command="bash tools/gpu_run.sh tests -k fp8 && bash tools/gpu_run.sh bench fp8 --fused", ...)
#
# Each step stops after LIMIT seconds (default 570: a command may run 600), so that what
# it wrote comes back; give chained steps their share (LIMIT=250 bash tools/gpu_run.sh ...).
# Benchmarks that run in pieces (models, compile) take --budget and --resume: copy the
# previous $OUT file into .device/ and pass it as --resume in the next call.
set -u
: "${OUT:?OUT must name the folder whose files come back}"
. .device/dsl-env || exit 1
# The machine runs Python with PYTHONDONTWRITEBYTECODE=1 and the bundle carries no
# bytecode: without this, every process would compile the DSL's and our sources again
# (1.4 s for the DSL alone), and ours' compile times would carry it (CONTRIBUTING.md).
if [ ! -e /tmp/dsl/.bytecode ]; then
    python3 -m compileall -q -j 0 /tmp/dsl >/dev/null 2>&1 && touch /tmp/dsl/.bytecode
fi
python3 -m compileall -q -j 0 inductor_cutedsl benchmarks tools >/dev/null 2>&1
# After the bundle's own PYTHONPATH: a bare PYTHONPATH=$PWD would drop the DSL (every GPU
# test would skip).
export PYTHONPATH=$PWD:$PYTHONPATH
export PYTHONUNBUFFERED=1
# Inductor's cache of this call only: a warm machine keeps /tmp from an earlier call,
# whose compiled graphs would make this call's compiles warm.
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-$$
LIMIT=${LIMIT:-570}

logged() {  # logged NAME COMMAND...: run within LIMIT, output to the screen and $OUT/NAME.log
    local name=$1 t0=$SECONDS
    shift
    # SIGINT first: pytest (and a benchmark's KeyboardInterrupt) still report what they
    # have; whatever ignores it is killed 30 s later.
    timeout -s INT -k 30 "$LIMIT" "$@" 2>&1 | tee "$OUT/$name.log"
    local rc=${PIPESTATUS[0]}
    echo "== $name: rc=$rc in $((SECONDS - t0)) s (log: \$OUT/$name.log)"
    return "$rc"
}

#: The test kernel cache that travels between calls (tests step), and its cap in bytes.
TEST_KERNELS=test-kernels.tar.xz
TEST_KERNELS_CAP=$((10 * 1024 * 1024))
#: Seconds of LIMIT the tests step keeps for stopping pytest and packing what it built.
PACK_S=45
#: The benchmarks' kernel cache that travels between calls (bench step), and the
#: benchmarks that use it: those that time kernels. A compile benchmark's cold compiles
#: need empty caches (benchmarks/compile.py and warm_start.py keep their own).
BENCH_KERNELS=bench-kernels.tar.xz
KERNEL_BENCHES=" models decode fp8 epilogue gemm launch fuzz "
#: Seconds of LIMIT the bench step keeps for packing (one process: nothing to stop).
BENCH_PACK_S=15

pack_kernels() {  # pack_kernels CACHE_DIR ARCHIVE: the cache's kernels, within the cap
    local dir=$1 archive=$2
    # Packed under another name and moved: a call's time limit that kills the packing
    # leaves no truncated archive to be carried into the next call. xz on every core.
    pack() {  # pack [FIND TESTS]: the kernels (objects and their records) that pass them
        (cd "$dir" && find . -maxdepth 1 \( -name '*.o' -o -name '*.json' \) "$@" -print0 |
            XZ_OPT=-T0 tar cJf "$archive.part" --null -T -) && mv "$archive.part" "$archive"
    }
    pack || return 0
    if [ "$(stat -c %s "$archive")" -gt "$TEST_KERNELS_CAP" ]; then
        pack -newer .started || return 0
    fi
    echo "== kernels packed: $(tar tJf "$archive" | grep -c '\.o$') in $(stat -c %s "$archive") bytes (\$OUT/$(basename "$archive"))"
}

carry_kernels() {  # carry_kernels CACHE_DIR ARCHIVE: the cache our kernels go to, with the archive's
    local dir=$1 carried=$2
    export INDUCTOR_CUTEDSL_CACHE_DIR=$dir
    mkdir -p "$dir" && chmod 700 "$dir"
    if [ -f "$carried" ] && tar xJf "$carried" -C "$dir"; then
        echo "== kernels carried in: $(find "$dir" -name '*.o' | wc -l) ($carried)"
    fi
    touch "$dir/.started"
}

step=${1:?"a step: tests, bench NAME, job or inductor-tests"}
shift
case "$step" in
tests)
    # The kernel cache the suite shares (tests/conftest.py keeps one it is given). An
    # earlier call's, carried in .device/: its kernels load instead of building. Safe
    # across calls and machines: a kernel's key holds our kernel sources' digest, the DSL
    # version and the architecture, so a kernel built from other code is never found.
    # Tests of building itself use caches of their own.
    cache=/tmp/inductor_cutedsl_test_cache_$(id -u)
    carry_kernels "$cache" ".device/$TEST_KERNELS"
    if [ -n "${SHARD:-}" ] && [ -z "${TESTS:-}" ]; then
        TESTS=$(find tests -maxdepth 1 -name 'test_*.py' | sort | awk -v i="${SHARD%/*}" -v n="${SHARD#*/}" '(NR - 1) % n == i - 1')
        echo "== shard $SHARD: $(echo "$TESTS" | wc -w) test files"
    fi
    # Every kernel spec the suite keys (tests/helpers.py, record_specs): with them,
    # tools/rebuild_kernels.py builds the carried kernels again after a kernel change.
    specs=$(mktemp -d)
    export INDUCTOR_CUTEDSL_TEST_SPECS=$specs
    # -v: each test's outcome is logged as it ends, so a run cut short by LIMIT still names
    # its failures; they are listed again at the end.
    # shellcheck disable=SC2086  # TESTS is a list of paths
    # The suite stops PACK_S seconds before LIMIT: stopping 12 workers and packing their
    # kernels took more than 30 s, and a call's limit then killed the packing.
    # --durations: the slowest tests, where the suite's share of a session's device time goes.
    # --maxschedchunk=1: each worker's first tests are a long one and a short one
    # (tests/conftest.py orders them so), then one at a time as it finishes them.
    LIMIT=$((LIMIT - PACK_S)) logged gpu-tests python3 -m pytest ${TESTS:-tests} -m gpu -n 12 --maxschedchunk=1 -v -rfE -p no:cacheprovider --durations=30 "$@"
    rc=$?
    echo "== failed or errored:"
    grep -E "^\[gw[0-9]+\].* (FAILED|ERROR) " "$OUT/gpu-tests.log" | sed 's/.* \(FAILED\|ERROR\) /\1 /'
    cat .device/test-specs.jsonl "$specs"/*.jsonl 2>/dev/null | sort -u >"$OUT/test-specs.jsonl"
    echo "== test kernel specs: $(wc -l <"$OUT/test-specs.jsonl") (\$OUT/test-specs.jsonl: carry it in .device/ too)"
    # Back for the next call (copy it into .device/). Past its cap, only this run's builds
    # go back: kernels of code since changed are never loaded again.
    pack_kernels "$cache" "$OUT/$TEST_KERNELS"
    exit "$rc" ;;
bench)
    name=${1:?"bench NAME: one of benchmarks/*.py"}
    shift
    case "$KERNEL_BENCHES" in
    *" $name "*)
        # Safe across calls as the tests' cache is (above); the kernels keep a row's
        # compile from waiting for builds an earlier call made.
        cache=/tmp/inductor_cutedsl_bench_cache_$(id -u)
        carry_kernels "$cache" ".device/$BENCH_KERNELS"
        LIMIT=$((LIMIT - BENCH_PACK_S)) logged "$name" python3 -m "benchmarks.$name" "$@" --json "$OUT/h200-$name.json"
        rc=$?
        pack_kernels "$cache" "$OUT/$BENCH_KERNELS"
        exit "$rc" ;;
    esac
    logged "$name" python3 -m "benchmarks.$name" "$@" --json "$OUT/h200-$name.json" ;;
job)
    logged job python3 -m inductor_cutedsl --json "$OUT/h200-model.json" --png "$OUT/h200-model.png" "$@" ;;
inductor-tests)
    logged inductor-tests python3 -m tools.inductor_tests "$@" --json "$OUT/inductor-tests.json" ;;
*)
    echo "unknown step $step: tests, bench NAME, job or inductor-tests" >&2
    exit 2 ;;
esac
