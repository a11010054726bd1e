#!/usr/bin/env bash
# The sanitizer, fuzz and release stages of .ci/run, each in its own build directory.
#
#   deploy/ci-stages.sh [asan] [tsan] [fuzz] [release]   (no argument: all four, in that order)
#
#   asan  build-asan: every target but the timing executables (KVROUTE_BUILD_MICRO_BENCH)
#         with -fsanitize=address,undefined (+ libFuzzer coverage instrumentation, so the
#         fuzz stage reuses the build); the whole ctest suite.
#   tsan  build-tsan: -fsanitize=thread; only the tests that run threads against each other
#         (TSAN_TESTS below), built and run by themselves.
#   fuzz  build-asan: the libFuzzer targets of tests/fuzz, each for KVROUTE_FUZZ_SECONDS
#         (default 30) from its checked-in seed corpus; a crash, leak, sanitizer report,
#         timeout or broken invariant fails the stage and leaves the input under
#         build-asan/fuzz/.
#   release  build-pgo: deploy/build-release.sh, the profile-guided daemon operators
#         deploy (and bench/perf measures as kvroute-v2-pgo): the instrumented build, its
#         training through kvroute to kvroute-sim, the optimized build and its check
#         requests; any failed step or request beyond 1% fails the stage.
#
# Sanitizer builds use -O1 -gline-tables-only: fast enough to build and run on two cores,
# with file:line in every report. Every report aborts the process (halt_on_error,
# -fno-sanitize-recover), so ctest sees it as a failed test. Each stage prints its duration.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
JOBS=$(nproc)
FUZZ_SECONDS=${KVROUTE_FUZZ_SECONDS:-30}

# The tests that exercise concurrency: the proxy server (worker threads sharing the router,
# metrics and upstream pools, against fake upstream threads), the end-to-end tests (the
# proxy in front of a simulated fleet on its own threads), the simulator's fleet threads
# (FleetThreadsTest and the wire tests), the router (shared by all proxy workers), and the
# admission, health and hostile-client tests (floods and slow clients against the server),
# the residency wait (the router's listener waking waiters on their executors), the metrics
# (atomic series updated from every worker, remembered per thread), and the KV
# event subscriptions and publishers (their own threads against the router and the sim), and
# the cluster store (its I/O thread and the admission pool against racing callers).
TSAN_TESTS=(proxy_server_test proxy_hostile_test proxy_health_test proxy_metrics_test
            residency_wait_test kvroute_sim_integration_test sim_wire_test router_test
            kvevents_test sim_kv_events_test kvroute_kv_events_sim_test cluster_store_test
            proxy_cluster_sync_test)

CLANG_CONFIG=(
  -G Ninja
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14
  -DCMAKE_BUILD_TYPE=RelWithDebInfo
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only"
  # Warnings are the gcc build's job (deploy/test.sh, -Werror); a clang-only warning must
  # not hide what the sanitizers say.
  -DKVROUTE_WERROR=OFF
)

export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1:detect_stack_use_after_return=1:strict_init_order=1:check_initialization_order=1:suppressions=$ROOT/sanitize/asan.supp"
export LSAN_OPTIONS="suppressions=$ROOT/sanitize/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$ROOT/sanitize/ubsan.supp"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$ROOT/sanitize/tsan.supp"

log() { echo "== ci-stages: $*"; }

# build-asan's configuration, shared by the asan and fuzz stages: the same options, so the
# fuzz stage finds the asan stage's build as it is and rebuilds nothing.
ASAN_CONFIG=("${CLANG_CONFIG[@]}" -DKVROUTE_SANITIZE=address,undefined -DKVROUTE_FUZZ=ON
             -DKVROUTE_BUILD_MICRO_BENCH=OFF)

stage_asan() {
  cmake -S . -B build-asan "${ASAN_CONFIG[@]}"
  cmake --build build-asan -j "$JOBS"
  (cd build-asan && ctest --output-on-failure -j "$JOBS" --timeout 600)
}

stage_tsan() {
  cmake -S . -B build-tsan "${CLANG_CONFIG[@]}" \
    -DKVROUTE_SANITIZE=thread -DKVROUTE_BUILD_BENCH=OFF
  cmake --build build-tsan -j "$JOBS" --target "${TSAN_TESTS[@]}"
  local labels
  labels="^($(IFS='|'; echo "${TSAN_TESTS[*]}"))\$"
  (cd build-tsan && ctest --output-on-failure -j "$JOBS" --timeout 600 -L "$labels")
}

stage_fuzz() {
  cmake -S . -B build-asan "${ASAN_CONFIG[@]}"
  # client_request_fuzz is not run here: Beast 1.81's own chunked-body parser trips a
  # debug assertion (parse_chunk_header: n >= 5) on some fuzzed chunked bodies, whichever
  # parser drives it; ctest replays its seed corpus (client_request_fuzz_seed_corpus).
  local targets=(features_fuzz response_observer_fuzz config_fuzz kv_event_batch_fuzz stream_usage_fuzz)
  cmake --build build-asan -j "$JOBS" --target "${targets[@]}"
  for t in "${targets[@]}"; do
    local seeds=tests/fuzz/corpus/${t%_fuzz}
    local work=build-asan/fuzz/${t}
    mkdir -p "$work/corpus"
    log "fuzz $t for ${FUZZ_SECONDS}s from $seeds"
    # New inputs go to the scratch corpus (first directory); the seeds are only read.
    "build-asan/tests/fuzz/$t" -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 \
      -max_len=65536 -print_final_stats=1 -dict="tests/fuzz/dict/${t%_fuzz}.dict" \
      -artifact_prefix="$work/" "$work/corpus" "$seeds" >"$work/fuzz.log" 2>&1 || {
      tail -n 150 "$work/fuzz.log"
      log "fuzz $t FAILED (log: $work/fuzz.log); reproduce: build-asan/tests/fuzz/$t $work/<crash-file>"
      return 1
    }
    grep -E '^(stat::|Done )' "$work/fuzz.log" || true
  done
}

stage_release() {
  # The training's simulator from the test build (deploy/test.sh), when there is one.
  local sim=build/sim/kvroute-sim
  [ -x "$sim" ] || sim=
  BUILD_DIR=build-pgo SIM_BIN=${sim:+$ROOT/$sim} bash deploy/build-release.sh
}

stages=("$@")
if [ ${#stages[@]} -eq 0 ]; then stages=(asan tsan fuzz release); fi
for s in "${stages[@]}"; do
  case "$s" in
    asan | tsan | fuzz | release) ;;
    *) echo "usage: $0 [asan] [tsan] [fuzz] [release]" >&2; exit 2 ;;
  esac
done
for s in "${stages[@]}"; do
  start=$(date +%s)
  log "stage $s"
  "stage_$s"
  log "stage $s passed in $(($(date +%s) - start))s"
done
