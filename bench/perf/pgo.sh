#!/usr/bin/env bash
# bench/perf/pgo.sh: a profile-guided (PGO) Release build of the kvroute
# daemon, for bench/perf/run.sh to compare with the plain Release build.
#
#   bash bench/perf/pgo.sh                        # -> build-pgo/proxy/kvroute
#   TARGETS="nginx kvroute-v2 kvroute-v2-pgo" bash bench/perf/run.sh  # side by side
#
# Three steps in one build directory (GCC finds a profile by the object's
# path, so the instrumented and the optimized build must share it):
#   1. configure with -DKVROUTE_PGO=generate and build kvroute (instrumented);
#   2. train: run.sh's workload against kvroute v2 and round_robin, 2 s per
#      body and concurrency (1k-, 32k- and 128k-token completions, 1- and
#      256-event streams; about 2 minutes); each daemon writes its profile
#      when it exits on SIGTERM;
#   3. reconfigure with -DKVROUTE_PGO=use and rebuild.
# The training workload is the benchmark's own (fixed bodies, one fast
# upstream), so a PGO build's figures in bench/perf say what PGO does for
# this traffic, not for every fleet's.
#
# Environment: PGO_BUILD_DIR [build-pgo], TRAIN_SECONDS [2].
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
PGO_BUILD_DIR="${PGO_BUILD_DIR:-build-pgo}"
case "$PGO_BUILD_DIR" in /*) ;; *) PGO_BUILD_DIR="$repo/$PGO_BUILD_DIR" ;; esac
TRAIN_SECONDS="${TRAIN_SECONDS:-2}"
profile="$PGO_BUILD_DIR/pgo-profile"

configure() {  # configure generate|use
  cmake -S "$repo" -B "$PGO_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DKVROUTE_BUILD_TESTS=OFF -DKVROUTE_BUILD_BENCH=OFF -DKVROUTE_PGO="$1" \
    -DKVROUTE_PGO_DIR="$profile" > "$PGO_BUILD_DIR/pgo-$1.log"
}

mkdir -p "$PGO_BUILD_DIR"
rm -rf "$profile"
echo "pgo.sh: 1/3 instrumented build in $PGO_BUILD_DIR"
configure generate
cmake --build "$PGO_BUILD_DIR" --target kvroute >> "$PGO_BUILD_DIR/pgo-generate.log"

echo "pgo.sh: 2/3 training (bench/perf/run.sh workload, ${TRAIN_SECONDS}s per run)"
KVROUTE="$PGO_BUILD_DIR/proxy/kvroute" TARGETS="kvroute-v2 kvroute-rr" \
  SCENARIOS="small 32k 128k sse1 sse256" DURATION="$TRAIN_SECONDS" WARMUP=1 \
  OUT="$PGO_BUILD_DIR/train" bash "$here/run.sh" > "$PGO_BUILD_DIR/pgo-train.log" 2>&1
n="$(find "$profile" -name '*.gcda' 2>/dev/null | wc -l)"
if [[ "$n" -eq 0 ]]; then
  echo "pgo.sh: the training wrote no profile (see $PGO_BUILD_DIR/pgo-train.log)" >&2
  exit 1
fi

echo "pgo.sh: 3/3 optimized build with the profile ($n files)"
configure use
cmake --build "$PGO_BUILD_DIR" --target kvroute >> "$PGO_BUILD_DIR/pgo-use.log"
echo "pgo.sh: $PGO_BUILD_DIR/proxy/kvroute"
