#!/usr/bin/env bash
# deploy/build-release.sh: the kvroute daemon's release build, profile-guided (PGO).
#
#   bash deploy/build-release.sh                  # -> build-pgo/proxy/kvroute
#   BUILD_DIR=/tmp/kv bash deploy/build-release.sh
#   PGO=0 bash deploy/build-release.sh            # a plain Release build, no training
#
# Three steps in one build directory (GCC finds an object's profile by the
# object's path, so the instrumented and the final build must share it):
#   1. configure Release with -DKVROUTE_PGO=generate; build kvroute (instrumented)
#      and kvroute-sim;
#   2. train: kvroute-sim (2 instances, --time-scale 0, ephemeral loopback ports),
#      the instrumented kvroute in front (mode v2, its default 2 threads), and
#      deploy/pgo-train.py's agent-like traffic (completions and chat, streamed
#      and not, sessions whose prompts grow, a few heavy prompts and bad bodies;
#      TRAIN_REQUESTS of them, about a minute). kvroute writes its profile when
#      SIGTERM stops it;
#   3. reconfigure with -DKVROUTE_PGO=use and rebuild kvroute.
# The profile is the code's, not a tuning of the benchmark: the training never
# runs bench/perf's bodies or upstream (README, "Proxy overhead").
#
# PGO lays hot code out together and predicts its branches; on the request
# path, whose time goes as much to fetching instructions (Asio, Beast and
# kvroute's own code) as to running them, that layout is where the build's
# gain comes from (bench/perf/README.md has the measurements).
#
# Needs what deploy/install-deps.sh installs (cmake, ninja, g++, python3).
# Environment: BUILD_DIR [build-pgo], TRAIN_REQUESTS [3000], CHECK_REQUESTS [300]
# (sent through the final build, which must answer them as the instrumented one did), PGO [1],
# SIM_BIN [built here]: a kvroute-sim already built (deploy/ci-stages.sh passes the test
# build's), which only serves the training and need not be built again.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-build-pgo}"
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR="$repo/$BUILD_DIR" ;; esac
TRAIN_REQUESTS="${TRAIN_REQUESTS:-3000}"
CHECK_REQUESTS="${CHECK_REQUESTS:-300}"
PGO="${PGO:-1}"
SIM_BIN="${SIM_BIN:-}"
profile="$BUILD_DIR/pgo-profile"

configure() {  # configure "" | generate | use
  cmake -S "$repo" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DKVROUTE_BUILD_TESTS=OFF -DKVROUTE_BUILD_BENCH=OFF -DKVROUTE_PGO="$1" \
    -DKVROUTE_PGO_DIR="$profile" > "$BUILD_DIR/configure-${1:-plain}.log"
}

mkdir -p "$BUILD_DIR"
if [[ "$PGO" == 0 ]]; then
  configure ""
  cmake --build "$BUILD_DIR" --target kvroute
  echo "build-release: $BUILD_DIR/proxy/kvroute (no PGO)"
  exit 0
fi

rm -rf "$profile"
echo "build-release: 1/3 instrumented build in $BUILD_DIR"
configure generate
if [[ -n "$SIM_BIN" && -x "$SIM_BIN" ]]; then
  cmake --build "$BUILD_DIR" --target kvroute > "$BUILD_DIR/build-generate.log"
else
  cmake --build "$BUILD_DIR" --target kvroute kvroute-sim > "$BUILD_DIR/build-generate.log"
  SIM_BIN="$BUILD_DIR/sim/kvroute-sim"
fi

PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [[ -n "$p" ]] && kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM
# Waits until `file` has `count` lines matching `pattern` (the daemons print
# their ephemeral ports once listening); fails after 30 s.
wait_lines() {  # wait_lines file pattern count
  for _ in $(seq 1 300); do
    [[ "$(grep -c "$2" "$1" 2>/dev/null || true)" -ge "$3" ]] && return 0
    sleep 0.1
  done
  echo "build-release: no '$2' in $1:" >&2
  tail -20 "$1" >&2
  return 1
}

# Starts kvroute-sim (2 instances, --time-scale 0, ephemeral loopback ports)
# and `bin` (mode v2) in front of it, sends `requests` of deploy/pgo-train.py's
# traffic (failing unless 99% succeed), then stops kvroute with SIGTERM and
# the simulator. Logs in `dir`.
exercise() {  # exercise bin requests dir
  local bin="$1" requests="$2" dir="$3" spid kpid port
  rm -rf "$dir"
  mkdir -p "$dir"
  "$SIM_BIN" --instances 2 --base-port 0 --time-scale 0 --log-level warn \
    > "$dir/sim.log" 2>&1 &
  spid=$!
  PIDS+=("$spid")
  wait_lines "$dir/sim.log" "listening on" 2
  {
    echo "listen: 127.0.0.1:0"
    echo "mode: v2"
    echo "log_level: warn"
    echo "backends:"
    sed -n 's/^kvroute-sim: instance \([0-9]*\) listening on \([0-9.]*:[0-9]*\)$/  - {name: gpu\1, url: "http:\/\/\2"}/p' \
      "$dir/sim.log"
  } > "$dir/kvroute.yaml"
  "$bin" --config "$dir/kvroute.yaml" > "$dir/kvroute.log" 2>&1 &
  kpid=$!
  PIDS+=("$kpid")
  wait_lines "$dir/kvroute.log" "kvroute: listening on" 1
  port="$(sed -n 's/^kvroute: listening on [0-9.]*:\([0-9]*\)$/\1/p' "$dir/kvroute.log")"
  python3 "$repo/deploy/pgo-train.py" --url "http://127.0.0.1:$port" --requests "$requests"
  kill -TERM "$kpid" "$spid"
  wait "$kpid" "$spid" || true
}

echo "build-release: 2/3 training ($TRAIN_REQUESTS requests through kvroute to kvroute-sim)"
exercise "$BUILD_DIR/proxy/kvroute" "$TRAIN_REQUESTS" "$BUILD_DIR/pgo-train"
n="$(find "$profile" -path '*proxy*' -name '*.gcda' 2>/dev/null | wc -l)"
if [[ "$n" -eq 0 ]]; then
  echo "build-release: the training wrote no profile for kvroute (see $BUILD_DIR/pgo-train/kvroute.log)" >&2
  exit 1
fi

echo "build-release: 3/3 optimized build with the profile"
configure use
cmake --build "$BUILD_DIR" --target kvroute > "$BUILD_DIR/build-use.log"
echo "build-release: check: $CHECK_REQUESTS requests through the optimized build"
exercise "$BUILD_DIR/proxy/kvroute" "$CHECK_REQUESTS" "$BUILD_DIR/check"
echo "build-release: $BUILD_DIR/proxy/kvroute"
