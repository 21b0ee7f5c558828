#!/usr/bin/env bash
# What one call of the GPU machine runs; logs and JSON land in $OUT.
#
#   run(command="bash benchmarks/device_session.sh tests", carry=[".device"], timeout_s=600)
#
# tests:    every GPU test, stream-K's first (about 8 minutes with -n 8)
# model:    the main job (stock vs ours on the default block), then the plain-GEMM benchmark
# epilogue [SHAPES [SECONDS]]: the GEMM + epilogue benchmark with fusion on (selection decisions
#           logged), on some of its shapes (indices, e.g. 0,3)
# final:    the b4 gemm tests, the GEMM benchmark and the main job
# fusion-tests [SECONDS]: the fusion, Inductor and timing GPU tests, within SECONDS (200)
# compile-check [BLOCKS [CALL_SECONDS]]: fusion-tests, then step cold on BLOCKS (four small and
#           prefill ones) with what is left of CALL_SECONDS (570)
# verify:   the fusion and Inductor GPU tests, then the epilogue benchmark on every shape
# fusion:   launch_paths.py, then the epilogue benchmark on every shape, with epilogue fusion on
# job:      the main job with epilogue fusion on
# bias:     bias_probe.py (our kernel plain / row bias / M x N epilogues vs cuBLAS mm and addmm)
# staged [bias|-]: the staged-operand GPU tests (own time limit: a pipeline bug would hang),
#           then bias_probe.py (unless "-")
# energy:   energy_probe.py (sustained speed and energy per GEMM at the power limit)
# gemm:     the plain-GEMM benchmark
# closing:  the main job with epilogue fusion on, then the plain-GEMM benchmark
# probe:    kernel_probe.py (where the kernel loses to cuBLAS), then the GEMM benchmark
# diagnose: probe, then addmm+gelu at 1024 rows with Inductor's fusion log and output code
# graph:    graph_probe.py (our configs and cuBLAS, direct and as CUDA graphs), then the GEMM benchmark
# timing:   timing_probe.py (does a short side-by-side measurement depend on its predecessor?)
# inductor-tests [RESUME_JSON]: PyTorch's Inductor GEMM tests (.device/inductor_tests: move them in for
#           the inductor-* and order-probe steps only, the carry limit is tight), stock and
#           ours at once, going on from RESUME_JSON (default: the committed partial comparison)
# inductor-regress K [RESUME_JSON|-]: the tests matching pytest -k K re-run in both modes (failure
#           messages in $OUT/regress/regress.json) beside the comparison resumed from RESUME_JSON
#           (default: the committed one; "-": none)
# close:    the remote-cache probe of one Inductor test (benchmarks/autotune_cache_probe.py) in both
#           modes beside the fp8 tests named in its comment, then the GPT-2 small row
# order-probe TESTS...: the given test ids of test_max_autotune.py, in that order, in one process
#           per mode, with benchmarks/autotune_cache_probe.py printing every Triton autotune cache
# host-paced [BLOCKS [RUNS]]: the suite's rows of BLOCKS (gpt2:small,llama:small,vit:small) with
#           config.host_paced on (fair timing ranks by GPU or host launch time without CUDA graphs)
# suite-prefill: the model suite's ViT, BERT and GPT-2 prefill inference rows
# gated-train: the gated GPU tests, then the Phi-3 (and LLaMA, if time is left) training rows
# fp8:      torch's scale_result semantics, the fp8 GPU tests, then the plain scaled-GEMM benchmark
# gated-fp8: the gated and fp8 GPU tests side by side, then the Phi-3 training row
# fp8-tests: the fp8 GPU tests
# fp8-bench [SECONDS [ARGS...]]: the plain scaled-GEMM benchmark alone (fp8.py ARGS, e.g.
#           --fast-accum), within SECONDS (300)
# fp8-fused: the fp8 fused patterns (470 s in session 21: stock autotunes 105 Triton choices per
#           fp8 GEMM, about a minute each)
# fp8-block [SECONDS]: the quantized LLaMA prefill block alone, within SECONDS (560)
# compile-in-process [SECONDS [BACKENDS [BEFORE]]]: a block's cold compile fresh and after the
#           BEFORE blocks (three by default), for BACKENDS (stock,ours), within SECONDS (590; each
#           backend took ~285 s in sessions 21-22, ~140 s with GPT-2 small alone before), each
#           compile sampled (cip-samples.txt, .folded.gz; the JSON says who compiled which kernels)
# distributed [K]: the world-size-2 DDP / FSDP2 tests side by side (gloo on one GPU), pytest -k K
#           if given (FSDP2 alone took over 300 s in session 19; a rank dumps its stacks at 480 s)
# distributed-bench [WRAP...]: benchmarks/distributed.py (step time stock vs ours, cold compile per
#           rank; meant for nvidia-h200-x2: on one GPU it runs over gloo, "gpus": 1)
# training [BLOCKS [FIRST]]: the GPU tests of training paths (a backward after a stock compile, the
#           gated forms), then the suite's training rows of BLOCKS (llama:prefill), FIRST (stock)
#           compiled first
# train-check [BLOCKS [FIRST]]: the backward and training-step GPU tests, then the training rows of
#           BLOCKS (gpt2:prefill), FIRST (ours) compiled first
# cold-train COLD_BLOCKS SECONDS TRAIN_BLOCKS SECONDS: step cold, then the training rows of TRAIN_BLOCKS
# train-duty: the GPT-2 training row, then duty_probe.py
# cold BLOCKS [SECONDS]: the model suite's cold compiles (fresh processes, empty caches) of
#           the given blocks (family:size[:run],...), stock then ours, within SECONDS (280)
# cold-profile BLOCKS [SECONDS]: step cold (SECONDS, 200), then the first block's cold compile once
#           more per backend under cProfile ($OUT/profile-BACKEND.txt): where the seconds went
# cold-variants FAMILY:SIZE [ROUNDS [VARIANTS]]: the block's cold compile (inference,
#           max-autotune) for each of VARIANTS (stock,ours; ours-wN: ours with N compile workers;
#           stock-aligned: stock with TRITON_PTXAS_PATH at torch's ptxas from the start),
#           each in a fresh process with empty caches, the compiling thread's stack sampled
#           (cold-variants-samples.txt, .folded.gz), in ROUNDS (2) interleaved rounds (the order
#           reversed every other round)
# precompile-probe [FAMILY:SIZE [VARIANTS]]: precompile_probe.py on the block's cold compile
#           (inference, max-autotune) for each of VARIANTS (ours,stock; e.g. ours,ours,ours to catch
#           the slow mode), each in a fresh process with empty caches: which Triton kernels compiled
#           in which thread, hits and misses
# fuzz [COLD_BLOCKS [CALL_SECONDS]]: the seeded fuzz suite (its specs precompiled at 16 workers
#           first), then, if given, step cold on those blocks with what is left of CALL_SECONDS (570)
# host BLOCKS [MODES [SECONDS]]: host_probe.py on the given blocks (family:size:run,...) in MODES
#           (max-autotune-no-cudagraphs; comma-separated), within SECONDS (400): where a call's host
#           time goes
# duty:     duty_probe.py (ours vs cuBLAS at the Phi-3 training shapes, back to back and between
#           memory-bound copies, GEMM kernel times from the profiler)
# select:   timing, then the fusion/Inductor/timing GPU tests, then the epilogue benchmark
#           at shapes 0 and 3 (8192x4096x4096, 1024x4096x4096)
# Needs .device/ (see ../shared/device/README.md). Each step has its own time limit, so a
# slow step cannot eat the next one's, and a summary is printed for each.
set -u
. .device/dsl-env
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-$$ PYTHONPATH=$PWD:${PYTHONPATH:-}

smi() {  # smi NAME: sample power, clocks and temperature every second into $OUT/NAME-smi.csv
    command -v nvidia-smi > /dev/null && nvidia-smi --format=csv -lms 1000 \
        --query-gpu=timestamp,power.draw,power.limit,clocks.sm,clocks.max.sm,temperature.gpu,clocks_throttle_reasons.active \
        > "$OUT/$1-smi.csv" 2>&1 &
}

fusion_tests() {  # fusion_tests SECONDS: the fusion, Inductor, timing and suite-measurement GPU tests
    step gpu-fusion "$1" python3 -m pytest tests/test_fusion_gpu.py tests/test_inductor_gpu.py tests/test_timing_gpu.py \
        tests/test_models_suite.py -m gpu -n 8 -q -rfE -p no:cacheprovider -k "not test_second_process and not test_training_step_forward"
    grep -E "passed|failed|^FAILED|^ERROR" "$OUT/gpu-fusion.log" | tail -15
}

fp8_tests() {  # fp8_tests: the fp8 GPU tests (the fast mode's error at large K printed)
    step gpu-fp8 240 python3 -m pytest tests/test_fp8_gpu.py -m gpu -n 6 -q -s -rfE -p no:cacheprovider
    grep -E "passed|failed|^FAILED|^ERROR|^E |fp8 K=" "$OUT/gpu-fp8.log" | tail -20
}

train_rows() {  # train_rows SECONDS BLOCKS JSON [FIRST]: the suite's training rows of BLOCKS within
    # SECONDS, FIRST (stock) compiled first
    TORCH_LOGS=+inductor_cutedsl step suite "$1" python3 benchmarks/models.py --runs train \
        --blocks "$2" --budget "$(( $1 - 20 ))" --json "$OUT/$3" --compile-first "${4:-stock}"
    grep -E "^==|: GPU|FAILED|not started|gated" "$OUT/suite.log" | grep -vE "^(W|I)[0-9]{4}" | tail -12
}

training_tests_and_rows() {  # TEST_SECONDS K ROW_SECONDS BLOCKS FIRST: the training-path GPU tests
    # matching pytest -k K, then the suite's training rows of BLOCKS (FIRST compiled first) and
    # how many GEMMs were offered to ours
    step gpu-training "$1" python3 -m pytest tests/test_inductor_gpu.py tests/test_gated_gpu.py -m gpu -n 6 -q -rfE \
        -p no:cacheprovider -k "$2"
    grep -E "passed|failed|^FAILED|^ERROR|^E " "$OUT/gpu-training.log" | tail -12
    train_rows "$3" "$4" h200-models-train.json "$5"
    grep -c "offering CuteDSL.* for mm" "$OUT/suite.log"
}

duty_probe() {  # duty_probe SECONDS: duty_probe.py
    step duty "$1" python3 benchmarks/duty_probe.py --json "$OUT/h200-duty.json"
    grep -E "^\{|Error" "$OUT/duty.log" | cut -c1-400 | tail -12
}

probe_both() {  # probe_both SECONDS LOG PYTEST_ARGS...: PyTorch's tests in .device/inductor_tests, stock
    # and ours side by side (one process each, to $OUT/LOG-MODE.log), with the autotune-cache probe
    local limit=$1 log=$2 mode
    shift 2
    for mode in stock ours; do
        (cd .device/inductor_tests && INDUCTOR_CUTEDSL_ENABLED=$([ $mode = ours ] && echo 1 || echo 0) \
            PYTHONPATH=$PWD/_deps:$PWD:$OLDPWD:$OLDPWD/benchmarks:$PYTHONPATH TORCHINDUCTOR_CACHE_DIR=/tmp/probe-$mode \
            timeout "$limit" python3 -m pytest -c /dev/null -p no:cacheprovider -s -p autotune_cache_probe \
            $([ $mode = ours ] && echo "-p inductor_tests_plugin") "$@" > "$OUT/$log-$mode.log" 2>&1
         echo "$log $mode rc=$?") &
    done
}

fresh_caches() {  # fresh_caches COMMAND...: COMMAND (a function too) with Inductor's, Triton's and
    # our kernel caches new and empty, as a cold compile needs (models.py --cold sets the same three)
    local caches
    caches=$(mktemp -d)
    TORCHINDUCTOR_CACHE_DIR=$caches/inductor TRITON_CACHE_DIR=$caches/triton INDUCTOR_CUTEDSL_CACHE_DIR=$caches/kernels "$@"
}

step() {  # step NAME SECONDS COMMAND...: run with a limit, log to $OUT/NAME.log
    local name=$1 limit=$2 t0=$SECONDS
    shift 2
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
    echo "== $name: rc=$? in $((SECONDS - t0)) s"
}

case "${1:?tests, model, epilogue, fusion, job, final, verify, select, closing, bias, staged, energy, gemm, fusion-tests, compile-check, graph, timing, probe, diagnose, inductor-tests, inductor-regress, close, order-probe, host-paced, suite-prefill, gated-train, gated-fp8, fp8, fp8-tests, fp8-bench, fp8-fused, fp8-block, compile-in-process, distributed, distributed-bench, training, train-check, cold-train, train-duty, cold, cold-profile, cold-variants, precompile-probe, fuzz, host or duty}" in
inductor-tests)
    step inductor-tests 560 python3 benchmarks/inductor_tests.py --tests .device/inductor_tests \
        --files test_max_autotune.py test_select_algorithm_211.py --together -n 7 --budget 520 \
        --resume "${2:-benchmarks/results/h200-inductor-tests.json}" --json "$OUT/inductor-tests.json"
    tail -30 "$OUT/inductor-tests.log" ;;
inductor-regress)
    mkdir -p "$OUT/regress"
    step it-regress 440 python3 benchmarks/inductor_tests.py --tests .device/inductor_tests \
        --files test_max_autotune.py test_select_algorithm_211.py --together -n "$([ "${3:-}" = - ] && echo 6 || echo 2)" \
        --budget 400 -k "${2:?pytest -k expression}" --json "$OUT/regress/regress.json" &
    if [ "${3:-}" != - ]; then
        step inductor-tests 440 python3 benchmarks/inductor_tests.py --tests .device/inductor_tests \
            --files test_max_autotune.py test_select_algorithm_211.py --together -n 6 --budget 400 \
            --resume "${3:-benchmarks/results/h200-inductor-tests.json}" --json "$OUT/inductor-tests.json"
    fi
    wait
    tail -25 "$OUT/it-regress.log"
    [ "${3:-}" = - ] || tail -30 "$OUT/inductor-tests.log" ;;
close)
    probe_both 150 probe test_max_autotune.py -q -k "test_max_autotune_remote_caching_dynamic_False"
    # the fp8 tests: the fast mode's error at large K (printed) and the fp8 output test
    step gpu-fp8 150 python3 -m pytest tests/test_fp8_gpu.py -m gpu -q -s -rfE -p no:cacheprovider \
        -k "fast_accumulation or result_scale"
    wait
    grep -hE "passed|failed|^FAILED|^E |fp8 K=" "$OUT/gpu-fp8.log" | cut -c1-300 | tail -10
    grep -hcE "autotune-cache" "$OUT"/probe-*.log; tail -n 3 "$OUT"/probe-*.log | cut -c1-300
    TORCH_LOGS=+inductor_cutedsl step suite 240 python3 benchmarks/models.py --runs inference \
        --blocks gpt2:small --budget 230 --json "$OUT/h200-models-gpt2-small.json"
    grep -E "^==|: GPU|FAILED|not started" "$OUT/suite.log" | grep -vE "^(W|I)[0-9]{4}" | tail -6 ;;
order-probe)
    shift
    probe_both 400 order -v $(printf 'test_max_autotune.py::%s ' "$@")
    wait
    grep -hE "PASSED|FAILED|AssertionError" "$OUT"/order-*.log | cut -c1-200 | tail -20 ;;
host-paced)
    # Both modes: the CUDA-graph rows must not move (the ranking applies without graphs only).
    INDUCTOR_CUTEDSL_HOST_PACED=1 TORCH_LOGS=+inductor_cutedsl step suite 580 python3 benchmarks/models.py \
        --runs "${3:-inference}" --blocks "${2:-gpt2:small,llama:small,vit:small}" --budget 540 \
        --json "$OUT/h200-models-host-paced.json"
    grep -E "^==|: GPU|FAILED|not started" "$OUT/suite.log" | tail -20 ;;
suite-prefill)
    TORCH_LOGS=+inductor_cutedsl step suite 580 python3 benchmarks/models.py --runs inference \
        --blocks vit:prefill,bert:prefill,gpt2:prefill --budget 540 --json "$OUT/h200-models-prefill.json"
    grep -E "^==|: GPU|FAILED|not started" "$OUT/suite.log" | tail -20 ;;
gated-train)
    step gpu-gated 200 python3 -m pytest tests/test_gated_gpu.py -m gpu -n 6 -q -rfE -p no:cacheprovider
    grep -E "passed|failed|^FAILED|^ERROR|^E " "$OUT/gpu-gated.log" | tail -15
    train_rows 400 phi3:prefill,llama:prefill h200-models-train.json ;;
gated-fp8)
    step gpu-gated 240 python3 -m pytest tests/test_gated_gpu.py -m gpu -n 5 -q -rfE -p no:cacheprovider &
    step gpu-fp8 240 python3 -m pytest tests/test_fp8_gpu.py -m gpu -n 6 -q -s -rfE -p no:cacheprovider
    wait
    grep -hE "passed|failed|^FAILED|^ERROR|^E |fp8 K=" "$OUT/gpu-gated.log" "$OUT/gpu-fp8.log" | cut -c1-300 | tail -40
    train_rows 310 phi3:prefill h200-models-train.json ;;
fp8)
    step scale-result 60 python3 benchmarks/scale_result_probe.py
    cat "$OUT/scale-result.log" | tail -8
    fp8_tests
    step fp8 300 python3 benchmarks/fp8.py --workers 16 --json "$OUT/h200-fp8-plain.json"
    tail -16 "$OUT/fp8.log" ;;
fp8-tests)
    fp8_tests ;;
fp8-bench)
    # Named by the extra arguments: two runs in one call must not overwrite each other.
    tag=$(echo "${*:3}" | tr -c 'a-z0-9\n' - | tr -d '\n' | sed 's/^-*//')
    step "fp8${tag:+-$tag}" "${2:-300}" python3 benchmarks/fp8.py --workers 16 \
        --json "$OUT/h200-fp8-plain${tag:+-$tag}.json" "${@:3}"
    tail -16 "$OUT/fp8${tag:+-$tag}.log" ;;
fp8-block)
    TORCH_LOGS=+inductor_cutedsl step fp8-block "${2:-560}" python3 benchmarks/fp8.py --block-only --workers 16 \
        --json "$OUT/h200-fp8-block.json"
    grep -E "fp8 llama|Error" "$OUT/fp8-block.log" | tail -6 ;;
fp8-fused)
    TORCH_LOGS=+inductor_cutedsl step fp8-fused 560 python3 benchmarks/fp8.py --fused-only --workers 16 \
        --json "$OUT/h200-fp8-fused.json"
    grep -E "x: eager|fp8 llama|fused_geomean|Error" "$OUT/fp8-fused.log" | tail -16 ;;
compile-in-process)
    step compile "${2:-590}" python3 benchmarks/compile_in_process.py --backends "${3:-stock,ours}" \
        ${4:+--before "$4"} --sample "$OUT/cip-samples.txt" --json "$OUT/h200-compile-in-process.json"
    grep -E "^(stock|ours):|Error" "$OUT/compile.log" | tail -6 ;;
distributed)
    # -rA: a passing test's printed figures (ours' and stock's distance from the reference).
    step gpu-distributed 580 python3 -m pytest tests/test_distributed_gpu.py -m gpu -n 2 -q -rA -p no:cacheprovider \
        ${2:+-k "$2"}
    grep -E "passed|failed|^FAILED|^ERROR|^E |rank [0-9]: ours" "$OUT/gpu-distributed.log" | cut -c1-400 | tail -20 ;;
distributed-bench)
    shift
    step distributed-bench 580 python3 benchmarks/distributed.py ${1:+--wrap "$@"} --json "$OUT/h200x2-distributed.json"
    grep -E "^\{|Error" "$OUT/distributed-bench.log" | cut -c1-600 | tail -6 ;;
training)
    # The backward tests compile a training step stock and ours each: 150 s was too short.
    training_tests_and_rows 280 "backward or training or gated" 290 "${2:-llama:prefill}" "${3:-stock}" ;;
train-check)
    training_tests_and_rows 240 "backward or training" 330 "${2:-gpt2:prefill}" "${3:-ours}" ;;
cold-train)
    bash "$0" cold "${2:?cold blocks}" "${3:?cold seconds}"
    train_rows "${5:?train seconds}" "${4:?train blocks}" h200-models-train.json ;;
train-duty)
    train_rows 280 gpt2:prefill h200-models-gpt2-train.json
    duty_probe 280 ;;
cold)
    step cold "${3:-280}" python3 benchmarks/models.py --cold-only --runs inference --blocks "${2:?blocks}" \
        --budget "$(( ${3:-280} - 20 ))" --json "$OUT/h200-models-cold.json"
    grep -E "^==|cold|Error|not started" "$OUT/cold.log" | grep -vE "^(W|I)[0-9]{4}" | tail -12 ;;
cold-profile)
    bash "$0" cold "${2:?blocks}" "${3:-200}"
    for b in stock ours; do
        fresh_caches step profile-$b 150 python3 benchmarks/models.py \
            --compile-once "${2%%,*}:inference:max-autotune:$b" --profile "$OUT/profile-$b.txt"
        grep "^{" "$OUT/profile-$b.log" | cut -c1-900
    done ;;
cold-variants)
    IFS=, read -r -a variants <<< "${4:-stock,ours}"
    for r in $(seq "${3:-2}"); do
        order=("${variants[@]}")
        [ $((r % 2)) = 0 ] && for i in "${!variants[@]}"; do order[i]=${variants[-i-1]}; done
        for v in "${order[@]}"; do
            log=$(mktemp)
            (
                # stock-aligned: stock with Triton on torch's ptxas from the start, as ours
                # aligns it (_compat.align_triton_ptxas): what stock would compile in without
                # the memoized-ptxas recompiles.
                if [ "$v" = stock-aligned ]; then  # (an import of torch: only where needed)
                    ptxas=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "bin", "ptxas"))')
                    [ -x "$ptxas" ] && export TRITON_PTXAS_PATH=$ptxas
                fi
                INDUCTOR_CUTEDSL_COMPILE_WORKERS=$([[ "$v" == ours-w* ]] && echo "${v#ours-w}" || echo 8) \
                    fresh_caches timeout 150 python3 benchmarks/models.py --compile-once \
                    "$2:inference:max-autotune:${v%%-*}" --sample "$OUT/cold-variants-samples.txt" > "$log" 2>&1
            )
            # Few files come back from a call: one line per compile, a failed one's log tail.
            line=$(grep "^{\"compile_s\"" "$log")  # not the autotune stats lines
            [ -n "$line" ] || { echo "== $v round $r"; tail -30 "$log"; } >> "$OUT/cold-variants-failed.log"
            echo "{\"variant\": \"$v\", \"round\": $r, \"report\": ${line:-null}}" >> "$OUT/cold-variants.jsonl"
            echo "$v round $r: $(echo "$line" | cut -c1-330)"
        done
    done
    # Where each compiling thread's seconds went (inclusive; frames as the samples name them).
    python3 benchmarks/wall_sampler.py "$OUT/cold-variants-samples.txt.folded.gz" --frames \
        graph.py:run,scheduler.py:fuse_nodes,selection.py:start_fused_build,selection.py:decide,compiler.py:wait,select_algorithm.py:autotune,triton_heuristics.py:precompile ;;
precompile-probe)
    IFS=, read -r -a variants <<< "${3:-ours,stock}"
    for i in "${!variants[@]}"; do
        v=${variants[i]}
        fresh_caches step "probe-$i-$v" 150 python3 benchmarks/precompile_probe.py \
            "${2:-vit:small}:inference:max-autotune:$v" --json "$OUT/precompile-probe-$i-$v.json"
        grep -E "^\{\"(compile_s|spec)|Error" "$OUT/probe-$i-$v.log" | cut -c1-600
        rm "$OUT/probe-$i-$v.log"  # few files come back from a call: the JSON has it all
    done ;;
fuzz)
    t0=$SECONDS
    step fuzz-precompile 60 python3 tests/test_fuzz_gpu.py --precompile --workers 16
    tail -2 "$OUT/fuzz-precompile.log"
    step gpu-fuzz 260 python3 -m pytest tests/test_fuzz_gpu.py -m gpu -n 8 -q -rfEP -p no:cacheprovider
    grep -E " checked, | refused$|passed|failed|^FAILED|^ERROR|^E " "$OUT/gpu-fuzz.log" | awk '
        / checked, / { c += $2; r += $4; next } { print } END { print "fuzz cases: " c " checked, " r " refused" }' | tail -12
    left=$(( ${3:-570} - (SECONDS - t0) ))
    [ -z "${2:-}" ] || [ "$left" -lt 100 ] || bash "$0" cold "$2" "$left" ;;
host)
    step host "${4:-400}" python3 benchmarks/host_probe.py --blocks "${2:?blocks}" --calls 100 --out "$OUT/host" \
        --modes "${3:-max-autotune-no-cudagraphs}"
    grep -E "^\{|^(stock|ours) |Error" "$OUT/host.log" | cut -c1-1500 | tail -12 ;;
duty)
    duty_probe 300 ;;
tests)
    # Stream-K first, on its own limit: a kernel that waits on a flag forever would
    # otherwise take the whole suite's time with it.
    step gpu-stream-k 140 python3 -m pytest tests -m gpu -n 8 -q -rfE -p no:cacheprovider -k "stream_k or _sk"
    grep -E "passed|failed|^FAILED|^ERROR" "$OUT/gpu-stream-k.log" | tail -15
    step gpu-tests 440 python3 -m pytest tests -m gpu -n 8 -q -rfE -p no:cacheprovider --durations=15 \
        -k "not stream_k and not _sk"
    grep -E "passed|failed|^FAILED|^ERROR" "$OUT/gpu-tests.log" | tail -25 ;;
model)
    step job 300 python3 -m inductor_cutedsl --json "$OUT/h200-model.json" --png "$OUT/h200-model.png"
    tail -30 "$OUT/job.log" | cut -c1-200
    step gemm 200 python3 benchmarks/gemm.py --json "$OUT/h200-gemm.json"
    tail -9 "$OUT/gemm.log" ;;
epilogue)
    INDUCTOR_CUTEDSL_EPILOGUE_FUSION=1 TORCH_LOGS=inductor_cutedsl \
        step epilogue "${3:-540}" python3 benchmarks/epilogue.py --json "$OUT/h200-epilogue.json" ${2:+--shapes $2}
    grep -E " -> |geomean|takes it|unfused +|left to|not measured|Error" "$OUT/epilogue.log" | cut -c1-260 | tail -40 ;;
final)
    step gpu-gemm-b4 150 python3 -m pytest tests/test_gemm_gpu.py -m gpu -k b4 -n 8 -q -rfE -p no:cacheprovider
    grep -E "passed|failed|^FAILED|^ERROR" "$OUT/gpu-gemm-b4.log" | tail -10
    step gemm 160 python3 benchmarks/gemm.py --json "$OUT/h200-gemm.json"
    tail -9 "$OUT/gemm.log"
    step job 270 python3 -m inductor_cutedsl --json "$OUT/h200-model.json" --png "$OUT/h200-model.png"
    grep -E "^ +(mm|addmm|bmm)|block time|cold compile|CuteDSL|wrote" "$OUT/job.log" | tail -30 | cut -c1-200 ;;
fusion-tests)
    fusion_tests "${2:-200}" ;;
compile-check)
    t0=$SECONDS
    fusion_tests 220
    bash "$0" cold "${2:-bert:small,gpt2:prefill,vit:small,gpt2:small}" $(( ${3:-570} - (SECONDS - t0) )) ;;
verify)
    fusion_tests 170
    smi epilogue
    INDUCTOR_CUTEDSL_EPILOGUE_FUSION=1 TORCH_LOGS=inductor_cutedsl \
        step epilogue 420 python3 benchmarks/epilogue.py --json "$OUT/h200-epilogue.json"
    kill %1 2> /dev/null
    grep -E " -> |geomean|not measured|Error" "$OUT/epilogue.log" | cut -c1-400 | tail -24 ;;
fusion)
    export INDUCTOR_CUTEDSL_EPILOGUE_FUSION=1
    step launch 40 python3 benchmarks/launch_paths.py --json "$OUT/h200-launch.json"
    grep "^{" "$OUT/launch.log"
    TORCH_LOGS=inductor_cutedsl step epilogue 530 python3 benchmarks/epilogue.py --json "$OUT/h200-epilogue.json"
    grep -E " -> |geomean|takes it|unfused +|left to|not measured|Error" "$OUT/epilogue.log" | cut -c1-260 | tail -40 ;;
job)
    INDUCTOR_CUTEDSL_EPILOGUE_FUSION=1 \
        step job 300 python3 -m inductor_cutedsl --json "$OUT/h200-model.json" --png "$OUT/h200-model.png"
    grep -vE "^(W|I|E)[0-9]{4}" "$OUT/job.log" | tail -30 | cut -c1-220 ;;
select)
    step timing 120 python3 benchmarks/timing_probe.py --json "$OUT/h200-timing.json"
    grep "^{" "$OUT/timing.log" | cut -c1-200
    fusion_tests 200
    INDUCTOR_CUTEDSL_EPILOGUE_FUSION=1 TORCH_LOGS=inductor_cutedsl \
        step epilogue 230 python3 benchmarks/epilogue.py --json "$OUT/h200-epilogue.json" --shapes 0,3
    grep -E " -> |geomean|takes it|unfused +|left to|not measured|Error" "$OUT/epilogue.log" | cut -c1-400 | tail -30 ;;
closing)
    INDUCTOR_CUTEDSL_EPILOGUE_FUSION=1 \
        step job 300 python3 -m inductor_cutedsl --json "$OUT/h200-model.json" --png "$OUT/h200-model.png"
    grep -vE "^(W|I|E)[0-9]{4}" "$OUT/job.log" | tail -30 | cut -c1-220
    step gemm 200 python3 benchmarks/gemm.py --json "$OUT/h200-gemm.json"
    tail -9 "$OUT/gemm.log" ;;
staged)
    step gpu-staged 150 python3 -m pytest tests/test_gemm_gpu.py -m gpu -n 8 -q -rfE -p no:cacheprovider -k staged
    grep -E "passed|failed|^FAILED|^ERROR" "$OUT/gpu-staged.log" | tail -15
    if [ "${2:-bias}" = bias ]; then
        step bias 100 python3 benchmarks/bias_probe.py --json "$OUT/h200-bias.json"
        grep "^{" "$OUT/bias.log" | cut -c1-700
    fi ;;
energy)
    smi energy
    step energy 200 python3 benchmarks/energy_probe.py --json "$OUT/h200-energy.json"
    kill %1 2> /dev/null
    grep -E "^\{|^active|Error" "$OUT/energy.log" | cut -c1-1500 ;;
gemm)
    smi gemm
    step gemm 240 python3 benchmarks/gemm.py --json "$OUT/h200-gemm.json"
    kill %1 2> /dev/null
    tail -9 "$OUT/gemm.log" ;;
graph)
    step graph 150 python3 benchmarks/graph_probe.py --json "$OUT/h200-graph.json"
    grep "^{" "$OUT/graph.log" | cut -c1-900
    step gemm 200 python3 benchmarks/gemm.py --json "$OUT/h200-gemm.json"
    tail -9 "$OUT/gemm.log" ;;
bias)
    step bias 150 python3 benchmarks/bias_probe.py --json "$OUT/h200-bias.json"
    grep "^{" "$OUT/bias.log" | cut -c1-600 ;;
timing)
    step timing 120 python3 benchmarks/timing_probe.py --json "$OUT/h200-timing.json"
    grep "^{" "$OUT/timing.log" | cut -c1-200 ;;
probe|diagnose)
    step probe 300 python3 benchmarks/kernel_probe.py --json "$OUT/h200-probe.json"
    grep -vE "^(W|I)[0-9]{4}" "$OUT/probe.log" | tail -40 | cut -c1-200
    step gemm 200 python3 benchmarks/gemm.py --json "$OUT/h200-gemm.json"
    tail -9 "$OUT/gemm.log"
    if [ "$1" = diagnose ]; then
        INDUCTOR_CUTEDSL_EPILOGUE_FUSION=1 TORCH_LOGS=inductor_cutedsl,fusion,output_code \
            step gelu-1024 120 python3 benchmarks/epilogue.py --patterns addmm_gelu_tanh --shapes 3
        grep -E " -> |takes it|unfused +|left to|not measured|Error" "$OUT/gelu-1024.log" | cut -c1-260 | tail -10
    fi ;;
esac
